package cache

import (
	"testing"

	"github.com/shardsched/shardsched/api"
)

// F4: a Deployment scaled 1→0→1; the delayed delete of the old PodGroup
// must not remove the new one created under the same name.
func TestStaleJobDeleteKeepsRecreatedJob(t *testing.T) {
	for _, tc := range []struct {
		name          string
		deleteOldSeen bool // the old object's delete event arrived before the new add
	}{
		{"delete seen, then re-created, then delayed delete", true},
		{"re-created without a delete event, then delayed delete", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Options{})
			old := api.Job{Namespace: "ns", Name: "podgroup-web", UID: "uid-old", Queue: "q", MinMember: 1}
			c.AddOrUpdateJob(old)
			if tc.deleteOldSeen {
				c.DeleteJob(old.UID)
			}
			recreated := old
			recreated.UID = "uid-new"
			c.AddOrUpdateJob(recreated)

			c.DeleteJob(old.UID) // the delayed retry of the old delete

			j, ok := c.JobByName("ns", "podgroup-web")
			if !ok || j.UID != "uid-new" {
				t.Fatalf("JobByName after a stale delete: %+v %v, want the new job", j, ok)
			}
			if _, ok := c.Job("uid-new"); !ok {
				t.Fatal("new job lost")
			}
			if _, ok := c.Job("uid-old"); ok {
				t.Fatal("old job still known")
			}
			var s Snapshot
			c.UpdateSnapshot(&s)
			if jobs := s.Jobs(); len(jobs) != 1 || jobs[0].UID != "uid-new" {
				t.Fatalf("snapshot jobs %v", jobs)
			}
			if sj, ok := s.JobByName("ns", "podgroup-web"); !ok || sj.UID != "uid-new" {
				t.Fatal("snapshot JobByName")
			}
			if c.Stats().Jobs != 1 {
				t.Fatalf("stats %+v", c.Stats())
			}
			mustVerify(t, c)

			// The delete that carries the right UID does remove it.
			c.DeleteJob("uid-new")
			if _, ok := c.JobByName("ns", "podgroup-web"); ok {
				t.Fatal("delete by the current UID ignored")
			}
		})
	}
}

func TestStaleNodeDeleteKeepsRecreatedNode(t *testing.T) {
	c := New(Options{})
	old := mkNode("n1", 8, 32, 110)
	c.AddOrUpdateNode(old)
	c.AddOrUpdateTask(on(mkTask("ns", "a", "j", 1000, 1), "n1", api.TaskRunning))

	recreated := old
	recreated.UID = "n1-uid-2"
	c.DeleteNode("n1", old.UID)
	c.AddOrUpdateNode(recreated)
	c.DeleteNode("n1", old.UID) // delayed
	c.DeleteNode("n1", "")      // no UID: never by name alone
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)

	c.DeleteNode("n1", recreated.UID)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if _, ok := s.Node("n1"); ok {
		t.Fatal("delete with the current UID ignored")
	}
	mustVerify(t, c)
}

func TestStaleTaskDeleteKeepsRecreatedTask(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	old := on(mkTask("ns", "web-0", "web", 2000, 1), "n1", api.TaskRunning)
	c.AddOrUpdateTask(old)

	// The StatefulSet re-creates web-0 with a new UID; the informer may have
	// missed the old pod's delete.
	recreated := mkTask("ns", "web-0", "web", 1000, 1)
	recreated.UID = "web-0-uid-2"
	c.AddOrUpdateTask(recreated)
	wantUsed(t, c, "n1", api.Resource{}, 0) // the old pod is gone
	c.DeleteTask(old.UID)                   // delayed delete of the old pod

	got, ok := c.Task("web-0-uid-2")
	if !ok || got.Phase != api.TaskPending {
		t.Fatalf("re-created task after a stale delete: %+v %v", got, ok)
	}
	var s Snapshot
	c.UpdateSnapshot(&s)
	if p := s.PendingTasks(); len(p) != 1 || p[0].UID != "web-0-uid-2" {
		t.Fatalf("pending %v", p)
	}
	mustVerify(t, c)
}
