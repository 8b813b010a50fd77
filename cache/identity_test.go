package cache

import (
	"sort"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Job identity (issue case 8): a PodGroup deleted and re-created under the
// same name must not count its predecessor's dying or finished pods.

var t0 = time.Unix(1_700_000_000, 0)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func mkJob(ns, name, uid string, minMember int32, created time.Time) api.Job {
	return api.Job{Namespace: ns, Name: name, UID: uid, Queue: "q", MinMember: minMember, Phase: api.JobPending, Created: created}
}

func created(t api.Task, when time.Time) api.Task {
	t.Created = when
	return t
}

func namesOf(ts []*api.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}

func wantSummary(t *testing.T, c *Cache, job string, pending, bound, done, pred int, allocMilli int64) {
	t.Helper()
	s := c.JobSummary("ns", job)
	if s.Pending != pending || s.Bound != bound || s.Done != done || s.Predecessors != pred || s.Allocated.MilliCPU != allocMilli {
		t.Fatalf("summary of %s: %+v, want pending %d bound %d done %d predecessors %d allocated %dm",
			job, s, pending, bound, done, pred, allocMilli)
	}
}

// The old gang's pods are releasing when the new PodGroup appears: the new
// job's task list and summary leave them out, the node's books keep them.
func TestRecreatedJobExcludesPredecessorReleasingTasks(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-old", 3, at(0)))
	var old []api.Task
	for _, n := range []string{"old-0", "old-1", "old-2"} {
		tk := created(on(mkTask("ns", n, "pg", 1000, 1), "n1", api.TaskRunning), at(1))
		c.AddOrUpdateTask(tk)
		old = append(old, tk)
	}
	wantSummary(t, c, "pg", 0, 3, 0, 0, 3000)

	// Deleted with a grace period: the pods turn releasing, the PodGroup
	// goes, and a new one takes its name with two of its three pods.
	for _, tk := range old {
		c.AddOrUpdateTask(on(tk, "n1", api.TaskReleasing))
	}
	c.DeleteJob("pg-old")
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-new", 3, at(10)))
	for _, n := range []string{"new-0", "new-1"} {
		c.AddOrUpdateTask(created(mkTask("ns", n, "pg", 1000, 1), at(11)))
	}

	var s Snapshot
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "pg")); len(got) != 2 || got[0] != "new-0" || got[1] != "new-1" {
		t.Fatalf("tasks of the new pg: %v, want only new-0 and new-1", got)
	}
	if p := namesOf(s.PendingTasks()); len(p) != 2 {
		t.Fatalf("pending %v", p)
	}
	// Bound 0: the gang of 3 still needs all three; the old pods neither
	// satisfy minMember nor size the reservation (Allocated 0).
	wantSummary(t, c, "pg", 2, 0, 0, 3, 0)
	// The old pods still hold their resources on the node.
	b := booksOf(t, c, "n1")
	if !b.Used.Equal(req(3000, 3, 3)) || !b.Releasing.Equal(req(3000, 3, 3)) || b.Tasks != 3 {
		t.Fatalf("books of n1: used %v releasing %v tasks %d, want the 3 releasing pods", b.Used, b.Releasing, b.Tasks)
	}

	// A delayed delete of the old PodGroup changes nothing (F4).
	c.DeleteJob("pg-old")
	wantSummary(t, c, "pg", 2, 0, 0, 3, 0)

	// Binding a new pod counts it; the old ones stay out.
	if err := c.Assume("ns/new-0-uid", "n1"); err != nil {
		t.Fatal(err)
	}
	wantSummary(t, c, "pg", 1, 1, 0, 3, 1000)
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "pg")); len(got) != 2 {
		t.Fatalf("tasks of the new pg after assume: %v", got)
	}

	// The old pods finish deleting: gone from the books, nothing else moves.
	for _, tk := range old {
		c.DeleteTask(tk.UID)
	}
	wantSummary(t, c, "pg", 1, 1, 0, 0, 1000)
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	mustVerify(t, c)
}

// A predecessor's pods still running when the new PodGroup appears are
// members (they cannot be told from pods the new group adopts) until their
// deletion starts; then they leave, and an incrementally refreshed snapshot
// sees it.
func TestPredecessorTasksLeaveWhenTheyStartReleasing(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-old", 2, at(0)))
	a := created(on(mkTask("ns", "old-0", "pg", 1000, 1), "n1", api.TaskRunning), at(1))
	b := created(on(mkTask("ns", "old-1", "pg", 1000, 1), "n1", api.TaskRunning), at(1))
	c.AddOrUpdateTask(a)
	c.AddOrUpdateTask(b)
	c.DeleteJob("pg-old")
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-new", 2, at(10)))
	c.AddOrUpdateTask(created(mkTask("ns", "new-0", "pg", 1000, 1), at(11)))

	var s Snapshot
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "pg")); len(got) != 3 {
		t.Fatalf("running predecessors should still be members: %v", got)
	}
	wantSummary(t, c, "pg", 1, 2, 0, 0, 2000)

	c.AddOrUpdateTask(on(a, "n1", api.TaskReleasing))
	c.AddOrUpdateTask(on(b, "n1", api.TaskFailed))
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "pg")); len(got) != 1 || got[0] != "new-0" {
		t.Fatalf("tasks after the predecessors started going: %v", got)
	}
	wantSummary(t, c, "pg", 1, 0, 0, 2, 0)
	var fresh Snapshot
	c.UpdateSnapshot(&fresh)
	if d := snapshotDiff(&s, &fresh); d != "" {
		t.Fatalf("incremental snapshot differs from a fresh one:\n%s", d)
	}
	wantUsed(t, c, "n1", req(1000, 1, 1), 1) // the releasing one; the failed one uses nothing
	mustVerify(t, c)
}

// The predecessor's finished pods are not the new job's Done: a new gang
// with no task of its own finished is not complete.
func TestPredecessorTerminalTasksAreNotDone(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateTask(created(on(mkTask("ns", "old-0", "pg", 1000, 1), "n1", api.TaskSucceeded), at(1)))
	c.AddOrUpdateTask(created(on(mkTask("ns", "old-1", "pg", 1000, 1), "n1", api.TaskFailed), at(2)))
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-new", 2, at(10)))
	c.AddOrUpdateTask(created(mkTask("ns", "new-0", "pg", 1000, 1), at(11)))
	c.AddOrUpdateTask(created(on(mkTask("ns", "new-1", "pg", 1000, 1), "n1", api.TaskSucceeded), at(12)))
	wantSummary(t, c, "pg", 1, 0, 1, 2, 0)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "pg")); len(got) != 2 || got[0] != "new-0" || got[1] != "new-1" {
		t.Fatalf("tasks of the new pg: %v", got)
	}
	// Creation times have one-second resolution: a task created in the
	// same second as the job is taken as the job's own.
	c.AddOrUpdateTask(created(on(mkTask("ns", "tie", "pg", 1000, 1), "n1", api.TaskSucceeded), at(10)))
	wantSummary(t, c, "pg", 1, 0, 2, 2, 0)

	// With no PodGroup under the name, no task is anyone's predecessor.
	c.DeleteJob("pg-new")
	wantSummary(t, c, "pg", 1, 0, 4, 0, 0)
	c.UpdateSnapshot(&s)
	if got := s.TasksOfJob("ns", "pg"); len(got) != 5 {
		t.Fatalf("tasks with no job: %v", namesOf(got))
	}
	mustVerify(t, c)
}

// An implicit PodGroup is created after its workload's pods: they all stay
// members, live or not. An explicit one created after live pods keeps them
// too (a manifest applied in any order, a PodGroup re-created while its
// pods live on).
func TestTasksCreatedBeforeTheirGroupStayMembers(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	for _, tk := range []api.Task{
		created(mkTask("ns", "web-0", "shardsched-replicaset-web", 1000, 1), at(1)),
		created(on(mkTask("ns", "web-1", "shardsched-replicaset-web", 1000, 1), "n1", api.TaskRunning), at(1)),
		created(on(mkTask("ns", "web-2", "shardsched-replicaset-web", 1000, 1), "n1", api.TaskReleasing), at(1)),
		created(on(mkTask("ns", "web-3", "shardsched-replicaset-web", 1000, 1), "n1", api.TaskSucceeded), at(1)),
		created(mkTask("ns", "x-0", "x", 1000, 1), at(1)),
		created(on(mkTask("ns", "x-1", "x", 1000, 1), "n1", api.TaskBound), at(1)),
	} {
		tk.Implicit = tk.Job != "x"
		c.AddOrUpdateTask(tk)
	}
	implicit := mkJob("ns", "shardsched-replicaset-web", "web-pg", 1, at(5))
	implicit.Implicit = true
	c.AddOrUpdateJob(implicit)
	c.AddOrUpdateJob(mkJob("ns", "x", "x-pg", 2, at(5)))

	wantSummary(t, c, "shardsched-replicaset-web", 1, 2, 1, 0, 2000)
	wantSummary(t, c, "x", 1, 1, 0, 0, 1000)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if got := namesOf(s.TasksOfJob("ns", "shardsched-replicaset-web")); len(got) != 4 {
		t.Fatalf("tasks of the implicit group: %v", got)
	}
	if got := namesOf(s.TasksOfJob("ns", "x")); len(got) != 2 {
		t.Fatalf("tasks of x: %v", got)
	}
	mustVerify(t, c)
}

// A status update of the same PodGroup does not move the cutoff, so it
// costs the group nothing: no new generation, no copy in the next snapshot.
func TestJobStatusUpdateDoesNotTouchItsGroup(t *testing.T) {
	c := New(Options{})
	j := mkJob("ns", "pg", "pg-1", 2, at(0))
	c.AddOrUpdateJob(j)
	c.AddOrUpdateTask(created(mkTask("ns", "a", "pg", 1000, 1), at(1)))
	var s Snapshot
	c.UpdateSnapshot(&s)
	before := s.TasksOfJob("ns", "pg")[0]
	gen := c.groups[objKey{"ns", "pg"}].gen

	j.Phase, j.ResourceVersion = api.JobInqueue, "2"
	c.AddOrUpdateJob(j)
	if g := c.groups[objKey{"ns", "pg"}].gen; g != gen {
		t.Fatalf("a status update touched the group (gen %d -> %d)", gen, g)
	}
	c.UpdateSnapshot(&s)
	if s.TasksOfJob("ns", "pg")[0] != before {
		t.Fatal("the group was copied again")
	}
	// A new UID under the name does move it.
	c.AddOrUpdateJob(mkJob("ns", "pg", "pg-2", 2, at(5)))
	if g := c.groups[objKey{"ns", "pg"}].gen; g == gen {
		t.Fatal("a re-created PodGroup did not touch its group")
	}
	mustVerify(t, c)
}
