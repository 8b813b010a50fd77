package cache

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// A snapshot's books count on their own (a snapshot's Book changes them in
// place) and share the node object with the cache, which never changes it:
// a node's labels and allocatable are kept once, however many snapshots.
func TestSnapshotSharesNodeObjects(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateTask(on(mkTask("ns", "run", "j", 1000, 1), "n1", api.TaskRunning))
	var s1, s2 Snapshot
	c.UpdateSnapshot(&s1)
	c.UpdateSnapshot(&s2)
	a, _ := s1.Node("n1")
	b, _ := s2.Node("n1")
	if a == nil || b == nil {
		t.Fatal("node n1 not in the snapshots")
	}
	if reflect.ValueOf(a.Node.Labels).UnsafePointer() != reflect.ValueOf(b.Node.Labels).UnsafePointer() ||
		mapID(a.Node.Allocatable.Scalars) != mapID(b.Node.Allocatable.Scalars) {
		t.Error("two snapshots keep a copy each of one node's labels or allocatable")
	}
	if mapID(a.Used.Scalars) == mapID(b.Used.Scalars) {
		t.Error("two snapshots share one node's counts")
	}
	mustVerify(t, c)
}

// A snapshot already taken never changes when the cache does, and nothing
// the cache hands out or takes in is shared with it.
func TestSnapshotIsolation(t *testing.T) {
	c := New(Options{})
	n1 := mkNode("n1", 8, 32, 110)
	n1.Taints = []api.Taint{{Key: "k", Value: "v", Effect: api.TaintNoSchedule}}
	c.AddOrUpdateNode(n1)
	run := on(mkTask("ns", "run", "j", 1000, 1), "n1", api.TaskRunning)
	c.AddOrUpdateTask(run)
	p := mkTask("ns", "p", "j", 1000, 1)
	p.NodeSelector = map[string]string{"zone": "a"}
	p.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{{Key: "zone", Operator: api.SelectorIn, Values: []string{"a"}}}}}
	c.AddOrUpdateTask(p)
	minRes := req(2000, 2, 2)
	c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "j", UID: "j-uid", MinMember: 2, MinResources: &minRes})

	var s Snapshot
	c.UpdateSnapshot(&s)
	b, _ := s.Node("n1")
	saved := *cloneBooks(b)
	saved.Node = cloneNode(b.Node) // a deep copy to compare with (snapshots share the node)
	savedPending := cloneTask(*s.PendingTasks()[0])
	savedJob := cloneJob(*s.Jobs()[0])
	gen := s.Generation()

	// Mutate what was passed in: the cache took copies.
	n1.Labels["kubernetes.io/hostname"] = "changed"
	n1.Taints[0].Key = "changed"
	p.NodeSelector["zone"] = "changed"
	p.Affinity[0].MatchExpressions[0].Values[0] = "changed"
	minRes.Scalars[api.Pods] = 99
	// Mutate what was handed out: copies too.
	got, _ := c.Task(p.UID)
	got.NodeSelector["zone"] = "changed"
	got.Request.Scalars[api.Pods] = 99
	j, _ := c.Job("j-uid")
	j.MinResources.MilliCPU = 1

	// Mutate the cache every way.
	n1b := mkNode("n1", 4, 16, 110)
	n1b.Labels["zone"] = "b"
	c.AddOrUpdateNode(n1b)
	c.AddOrUpdateTask(on(run, "n1", api.TaskReleasing))
	c.AddOrUpdateTask(on(mkTask("ns", "more", "j", 2000, 1), "n1", api.TaskRunning))
	if err := c.Assume(p.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "j", UID: "j-uid", MinMember: 5})
	c.DeleteNode("n1", n1b.UID)

	if !reflect.DeepEqual(*b, saved) {
		t.Fatalf("snapshot books changed:\n%+v\n%+v", *b, saved)
	}
	if s.Generation() != gen || s.NumNodes() != 1 {
		t.Fatal("snapshot changed")
	}
	if !reflect.DeepEqual(*s.PendingTasks()[0], savedPending) || !reflect.DeepEqual(*s.Jobs()[0], savedJob) {
		t.Fatal("snapshot task or job changed")
	}
	if savedPending.NodeSelector["zone"] != "a" || savedPending.Affinity[0].MatchExpressions[0].Values[0] != "a" ||
		saved.Node.Taints[0].Key != "k" || saved.Node.Labels["kubernetes.io/hostname"] != "n1" || savedJob.MinResources.Get(api.Pods) != 2 {
		t.Fatal("the cache kept a caller's map")
	}
	if got, _ := c.Task(p.UID); got.NodeSelector["zone"] != "a" || got.Request.Get(api.Pods) != 1 {
		t.Fatal("a copy handed out was shared")
	}

	// The cycle owns its snapshot: reordering what it got does not matter.
	c.AddOrUpdateNode(mkNode("n0", 1, 1, 1))
	c.AddOrUpdateNode(mkNode("n2", 1, 1, 1))
	c.UpdateSnapshot(&s)
	nodes := s.Nodes()
	nodes[0], nodes[1] = nodes[1], nodes[0]
	c.AddOrUpdateNode(mkNode("n2", 2, 1, 1))
	c.UpdateSnapshot(&s)
	var fresh Snapshot
	c.UpdateSnapshot(&fresh)
	if d := snapshotDiff(&s, &fresh); d != "" {
		t.Fatal(d)
	}
}

// UpdateSnapshot copies only the nodes whose books changed.
func TestSnapshotIncremental(t *testing.T) {
	c := New(Options{})
	for i := range 100 {
		c.AddOrUpdateNode(mkNode(fmt.Sprintf("n%03d", i), 8, 32, 110))
	}
	var s Snapshot
	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 100 || s.NumNodes() != 100 {
		t.Fatalf("first refresh copied %d", s.NodesCopied())
	}
	before := s.Nodes()
	g0 := s.Generation()

	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 0 || s.Generation() != g0 {
		t.Fatalf("refresh without changes copied %d", s.NodesCopied())
	}
	c.AddOrUpdateNode(mkNode("n010", 8, 32, 110)) // an informer resync: identical
	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 0 {
		t.Fatalf("an identical resync copied %d", s.NodesCopied())
	}

	relabeled := mkNode("n020", 8, 32, 110)
	relabeled.Labels["zone"] = "b"
	c.AddOrUpdateNode(relabeled)
	c.AddOrUpdateNode(withAlloc(mkNode("n030", 8, 32, 110), 4000))
	c.AddOrUpdateTask(on(mkTask("ns", "a", "j", 1000, 1), "n040", api.TaskRunning))
	c.AddOrUpdateTask(mkTask("ns", "pending", "j", 1000, 1)) // no node's books change
	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 3 {
		t.Fatalf("copied %d nodes, want 3", s.NodesCopied())
	}
	after := s.Nodes()
	for i := range after {
		changed := map[string]bool{"n020": true, "n030": true, "n040": true}[after[i].Node.Name]
		if (after[i] != before[i]) != changed {
			t.Fatalf("%s: re-copied %v, changed %v", after[i].Node.Name, after[i] != before[i], changed)
		}
	}
	if b, _ := s.Node("n020"); b.Node.Labels["zone"] != "b" {
		t.Fatal("label change not seen")
	}
	if b, _ := s.Node("n040"); b.Tasks != 1 {
		t.Fatal("task not seen")
	}
	if len(s.PendingTasks()) != 1 {
		t.Fatal("pending task not seen")
	}

	// Deletions are removed; the list stays sorted.
	c.DeleteNode("n050", "n050-uid")
	c.DeleteNode("n099", "n099-uid")
	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 0 || s.NumNodes() != 98 {
		t.Fatalf("after deletes: copied %d, %d nodes", s.NodesCopied(), s.NumNodes())
	}
	// Delete and re-create between two refreshes.
	c.DeleteNode("n060", "n060-uid")
	n60 := mkNode("n060", 16, 32, 110)
	n60.UID = "n060-uid-2"
	c.AddOrUpdateNode(n60)
	c.DeleteNode("n061", "n061-uid")
	c.AddOrUpdateNode(mkNode("n100", 8, 32, 110))
	c.UpdateSnapshot(&s)
	if s.NodesCopied() != 2 {
		t.Fatalf("copied %d, want 2", s.NodesCopied())
	}
	var fresh Snapshot
	c.UpdateSnapshot(&fresh)
	if d := snapshotDiff(&s, &fresh); d != "" {
		t.Fatal(d)
	}
	nodes := s.Nodes()
	for i := 1; i < len(nodes); i++ {
		if nodes[i-1].Node.Name >= nodes[i].Node.Name {
			t.Fatal("not sorted")
		}
	}
	// EachNode goes over the same books, index for index, and stops when
	// told to.
	seen := 0
	for i, b := range s.EachNode {
		if i != seen || b != nodes[i] {
			t.Fatalf("EachNode gave %s at %d, Nodes has %s at %d", b.Node.Name, i, nodes[seen].Node.Name, seen)
		}
		if seen++; seen == 10 {
			break
		}
	}
	if seen != 10 {
		t.Fatalf("EachNode gave %d nodes before the break, want 10", seen)
	}

	// A snapshot refreshed from another cache starts over.
	other := New(Options{})
	other.AddOrUpdateNode(mkNode("x", 1, 1, 1))
	other.UpdateSnapshot(&s)
	if s.NumNodes() != 1 || s.NodesCopied() != 1 {
		t.Fatalf("switching caches: %d nodes", s.NumNodes())
	}
}

// TestSnapshotTaskGroups: tasks of jobs with pending work, reused when
// unchanged.
func TestSnapshotTaskGroups(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateTask(on(mkTask("ns", "a-0", "a", 100, 1), "n1", api.TaskRunning))
	c.AddOrUpdateTask(mkTask("ns", "a-1", "a", 100, 1))
	c.AddOrUpdateTask(mkTask("ns", "a-2", "a", 100, 1))
	c.AddOrUpdateTask(on(mkTask("ns", "b-0", "b", 100, 1), "n1", api.TaskRunning))
	c.AddOrUpdateTask(mkTask("other", "c-0", "c", 100, 1))

	var s Snapshot
	c.UpdateSnapshot(&s)
	if tj := s.TasksOfJob("ns", "a"); len(tj) != 3 || tj[0].Name != "a-0" || tj[0].NodeName != "n1" {
		t.Fatalf("tasks of a: %v", tj)
	}
	if tj := s.TasksOfJob("ns", "b"); tj != nil {
		t.Fatal("a job with nothing pending is in the snapshot")
	}
	if p := s.PendingTasks(); len(p) != 3 || p[0].Name != "a-1" || p[2].Namespace != "other" {
		t.Fatalf("pending %v", p)
	}
	c0 := s.TasksOfJob("other", "c")[0]
	a0 := s.TasksOfJob("ns", "a")[0]

	if err := c.Assume("ns/a-1-uid", "n1"); err != nil {
		t.Fatal(err)
	}
	c.UpdateSnapshot(&s)
	tj := s.TasksOfJob("ns", "a")
	if tj[1].NodeName != "n1" || tj[1].Phase != api.TaskBound || len(s.PendingTasks()) != 2 {
		t.Fatal("assumed task not shown bound")
	}
	// A pending task is shared as it was; a bound one (kept slim) is put
	// together again, equal.
	if s.TasksOfJob("other", "c")[0] != c0 {
		t.Fatal("unchanged tasks were copied again")
	}
	if !reflect.DeepEqual(tj[0], a0) {
		t.Fatalf("bound task changed: %+v, was %+v", tj[0], a0)
	}
	c.DeleteTask("other/c-0-uid")
	c.UpdateSnapshot(&s)
	if s.TasksOfJob("other", "c") != nil || len(s.PendingTasks()) != 1 {
		t.Fatal("deleted group kept")
	}
}

// model is a naive reference: it keeps the latest object of everything and
// recomputes the books from scratch.
type model struct {
	owns    func(string) bool
	nodes   map[string]api.Node
	tasks   map[string]api.Task // by UID
	assumed map[string]string
	jobs    map[string]api.Job
}

func (m *model) view(uid string) api.Task {
	t := m.tasks[uid]
	if n, ok := m.assumed[uid]; ok {
		t.NodeName, t.Phase = n, api.TaskBound
	}
	return t
}

func (m *model) books(node string) (used, rel api.Resource, n int) {
	for uid := range m.tasks {
		t := m.view(uid)
		if t.NodeName != node || t.Phase.Terminal() {
			continue
		}
		n++
		r := sanitize(t.Request)
		used, _ = used.Add(r)
		if t.Phase == api.TaskReleasing {
			rel, _ = rel.Add(r)
		}
	}
	return
}

func (m *model) owned(node string) bool {
	_, known := m.nodes[node]
	return known && (m.owns == nil || m.owns(node))
}

func (m *model) setTask(t api.Task) {
	for uid, o := range m.tasks {
		if uid != t.UID && o.Namespace == t.Namespace && o.Name == t.Name {
			delete(m.tasks, uid)
			delete(m.assumed, uid)
		}
	}
	if _, ok := m.assumed[t.UID]; ok && (t.NodeName != "" || t.Phase.Terminal()) {
		delete(m.assumed, t.UID)
	}
	m.tasks[t.UID] = t
}

// uids returns the model's task UIDs sorted, so that a seed replays exactly.
func (m *model) uids() []string {
	out := make([]string, 0, len(m.tasks))
	for u := range m.tasks {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

func (m *model) pending(uid string) bool {
	t := m.view(uid)
	return t.NodeName == "" && (t.Phase == api.TaskPending || t.Phase == "")
}

// TestAgainstModel drives the cache with random events and compares it,
// and an incrementally refreshed snapshot, with the naive model.
func TestAgainstModel(t *testing.T) {
	for seed := range int64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := newRand(seed)
			c := New(Options{})
			m := &model{nodes: map[string]api.Node{}, tasks: map[string]api.Task{}, assumed: map[string]string{}, jobs: map[string]api.Job{}}
			nodeNames := []string{"n0", "n1", "n2", "n3", "n4"}
			phases := []api.TaskPhase{api.TaskPending, api.TaskBound, api.TaskRunning, api.TaskReleasing, api.TaskSucceeded, api.TaskFailed}
			var s Snapshot
			assumes := 0
			for step := range 1500 {
				switch op := r.intn(12); op {
				case 0, 1: // node add/update
					name := nodeNames[r.intn(len(nodeNames))]
					n := mkNode(name, int64(1+r.intn(4)), 8, int64(1+r.intn(4)))
					n.UID = fmt.Sprintf("%s-uid-%d", name, r.intn(2))
					n.Labels["rev"] = fmt.Sprint(r.intn(3))
					n.Unschedulable = r.intn(4) == 0
					c.AddOrUpdateNode(n)
					m.nodes[name] = n
				case 2: // node delete, maybe stale
					name := nodeNames[r.intn(len(nodeNames))]
					uid := fmt.Sprintf("%s-uid-%d", name, r.intn(2))
					c.DeleteNode(name, uid)
					if n, ok := m.nodes[name]; ok && n.UID == uid {
						delete(m.nodes, name)
					}
				case 3, 4, 5, 6: // task add/update
					name := fmt.Sprintf("t%d", r.intn(12))
					tk := mkTask("ns", name, fmt.Sprint("j", r.intn(3)), int64(100*(1+r.intn(15))), 1)
					tk.UID = fmt.Sprintf("%s-uid-%d", name, r.intn(2))
					tk.Created = randTime(r)
					tk.Phase = phases[r.intn(len(phases))]
					tk.Priority = int32(r.intn(4) - 1)
					if r.intn(4) == 0 {
						tk.Request.Scalars["nvidia.com/gpu"] = int64(1 + r.intn(2))
					}
					if tk.Phase != api.TaskPending || r.intn(4) == 0 {
						tk.NodeName = nodeNames[r.intn(len(nodeNames))]
					}
					if tk.Phase == api.TaskPending && r.intn(2) == 0 {
						tk.NodeName = ""
					}
					c.AddOrUpdateTask(tk)
					m.setTask(tk)
				case 7: // task delete, maybe stale
					uid := fmt.Sprintf("t%d-uid-%d", r.intn(12), r.intn(2))
					c.DeleteTask(uid)
					delete(m.tasks, uid)
					delete(m.assumed, uid)
				case 8: // assume, mostly a pending task
					uid := fmt.Sprintf("t%d-uid-%d", r.intn(12), r.intn(2))
					var pend []string
					for _, u := range m.uids() {
						if m.pending(u) {
							pend = append(pend, u)
						}
					}
					if len(pend) > 0 && r.intn(4) != 0 {
						uid = pend[r.intn(len(pend))]
					}
					node := nodeNames[r.intn(len(nodeNames))]
					err := c.Assume(uid, node)
					_, known := m.tasks[uid]
					wantOK := known && m.pending(uid) && m.owned(node)
					if wantOK {
						used, _, n := m.books(node)
						used, _ = used.Add(sanitize(m.tasks[uid].Request))
						cur, _, _ := m.books(node)
						wantOK = overflowReason(used, m.nodes[node].Allocatable, n+1) == "" &&
							overflowReason(cur, m.nodes[node].Allocatable, n) == ""
					}
					if (err == nil) != wantOK {
						t.Fatalf("step %d: Assume(%s, %s) = %v, model says ok=%v", step, uid, node, err, wantOK)
					}
					if err == nil {
						m.assumed[uid] = node
						assumes++
					}
				case 9: // forget
					uid := fmt.Sprintf("t%d-uid-%d", r.intn(12), r.intn(2))
					c.Forget(uid)
					delete(m.assumed, uid)
				case 10: // jobs
					name := fmt.Sprint("j", r.intn(3))
					uid := fmt.Sprintf("%s-uid-%d", name, r.intn(2))
					if r.intn(3) == 0 {
						c.DeleteJob(uid)
						delete(m.jobs, uid)
						continue
					}
					j := api.Job{Namespace: "ns", Name: name, UID: uid, MinMember: int32(r.intn(4)),
						Created: randTime(r), Implicit: r.intn(4) == 0}
					c.AddOrUpdateJob(j)
					for u, o := range m.jobs {
						if o.Name == name && u != uid {
							delete(m.jobs, u)
						}
					}
					m.jobs[uid] = j
				case 11: // ownership or rebuild
					if r.intn(2) == 0 {
						k := r.intn(3)
						owns := func(n string) bool { return k == 0 || int(n[1]-'0')%k == 0 }
						c.SetKeepsBooks(owns)
						m.owns = owns
						continue
					}
					name := nodeNames[r.intn(len(nodeNames))]
					n, ok := m.nodes[name]
					if !ok {
						continue
					}
					var listed []api.Task
					for _, uid := range m.uids() {
						tk := m.tasks[uid]
						if tk.NodeName == name && r.intn(4) != 0 {
							listed = append(listed, tk)
						} else if _, a := m.assumed[uid]; !a && m.view(uid).NodeName == name && !m.view(uid).Phase.Terminal() {
							delete(m.tasks, uid)
						}
					}
					c.Rebuild(n, listed)
				}
				if step%7 == 0 || step > 1450 {
					c.UpdateSnapshot(&s)
					compareModel(t, step, c, &s, m)
				} else {
					for _, name := range []string{"j0", "j1", "j2"} {
						compareSummary(t, step, c, m, name)
					}
				}
			}
			mustVerify(t, c)
			if assumes == 0 || c.OutOfSyncTotal() == 0 {
				t.Fatalf("the random walk did not exercise Assume (%d) or out of sync (%d)", assumes, c.OutOfSyncTotal())
			}
			t.Logf("%d successful assumes, %d out-of-sync transitions, stats %+v", assumes, c.OutOfSyncTotal(), c.Stats())
		})
	}
}

func compareModel(t *testing.T, step int, c *Cache, s *Snapshot, m *model) {
	t.Helper()
	var fresh Snapshot
	c.UpdateSnapshot(&fresh)
	if d := snapshotDiff(s, &fresh); d != "" {
		t.Fatalf("step %d: incremental snapshot differs from a fresh one:\n%s", step, d)
	}
	owned := 0
	for name, n := range m.nodes {
		if !m.owned(name) {
			continue
		}
		owned++
		b, ok := s.Node(name)
		if !ok {
			t.Fatalf("step %d: node %s missing", step, name)
		}
		used, rel, cnt := m.books(name)
		bad := overflowReason(used, n.Allocatable, cnt) != ""
		if !reflect.DeepEqual(b.Node, n) || !b.Used.Equal(used) || !b.Releasing.Equal(rel) || b.Tasks != cnt || b.OutOfSync != bad {
			t.Fatalf("step %d: node %s: got %+v\nmodel used %v rel %v tasks %d oos %v", step, name, *b, used, rel, cnt, bad)
		}
	}
	if s.NumNodes() != owned {
		t.Fatalf("step %d: %d nodes, model %d", step, s.NumNodes(), owned)
	}
	// The allocatable sum the snapshot keeps across refreshes, against
	// the model's owned nodes summed now.
	wantAlloc := api.Resource{}
	for name, n := range m.nodes {
		if m.owned(name) {
			wantAlloc, _ = wantAlloc.Add(n.Allocatable)
		}
	}
	if got, ok := s.Allocatable(); !ok || !got.Equal(wantAlloc) {
		t.Fatalf("step %d: allocatable %v (ok %v), model %v", step, got, ok, wantAlloc)
	}
	// The free room the snapshot keeps node by node, against the model's
	// schedulable, in-sync owned nodes recounted now.
	if got, want := s.Free(), modelFree(m); !got.Equal(want) {
		t.Fatalf("step %d: free %v, model %v", step, got, want)
	}
	pending := 0
	for uid := range m.tasks {
		if m.pending(uid) {
			pending++
		}
		got, ok := c.Task(uid)
		if !ok || !reflect.DeepEqual(got, m.view(uid)) {
			t.Fatalf("step %d: task %s: %+v, model %+v", step, uid, got, m.view(uid))
		}
	}
	if len(s.PendingTasks()) != pending || c.Stats().Tasks != len(m.tasks) {
		t.Fatalf("step %d: %d pending, model %d", step, len(s.PendingTasks()), pending)
	}
	if len(s.Jobs()) != len(m.jobs) {
		t.Fatalf("step %d: %d jobs, model %d", step, len(s.Jobs()), len(m.jobs))
	}
	for _, j := range s.Jobs() {
		if !reflect.DeepEqual(*j, m.jobs[j.UID]) {
			t.Fatalf("step %d: job %s", step, j.UID)
		}
	}
	for _, name := range []string{"j0", "j1", "j2"} {
		compareMembers(t, step, c, s, m, name)
	}
	if err := verify(c); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
}

// modelFree is what the model's owned nodes that are schedulable and in
// sync have free, each at least 0, without the pod count.
func modelFree(m *model) api.Resource {
	sum := map[string]int64{}
	for name, n := range m.nodes {
		used, _, cnt := m.books(name)
		if !m.owned(name) || n.Unschedulable || overflowReason(used, n.Allocatable, cnt) != "" {
			continue
		}
		sum[api.CPU] += max(n.Allocatable.MilliCPU-used.MilliCPU, 0)
		sum[api.Memory] += max(n.Allocatable.Memory-used.Memory, 0)
		for k, v := range n.Allocatable.Scalars {
			if k != api.Pods {
				sum[k] += max(v-used.Get(k), 0)
			}
		}
	}
	cpu, mem := sum[api.CPU], sum[api.Memory]
	delete(sum, api.CPU)
	delete(sum, api.Memory)
	return api.NewResource(cpu, mem, sum)
}

// randTime is one of a few creation times a second apart, or unknown.
func randTime(r *rnd) time.Time {
	if r.intn(5) == 0 {
		return time.Time{}
	}
	return time.Unix(1_700_000_000+int64(r.intn(4)), 0)
}

// modelMembers applies the membership rule naively to the model: the
// summary of ns/name, its members ("name/uid"), and whether any task that
// names it is pending.
func modelMembers(m *model, name string) (want JobSummary, members []string, anyPending bool) {
	var job *api.Job
	for _, j := range m.jobs {
		if j.Name == name {
			job = &j
		}
	}
	for _, uid := range m.uids() {
		tk := m.view(uid)
		if tk.Job != name {
			continue
		}
		anyPending = anyPending || m.pending(uid)
		gone := tk.Phase == api.TaskReleasing || tk.Phase.Terminal()
		if job != nil && !job.Implicit && gone && !job.Created.IsZero() && !tk.Created.IsZero() && tk.Created.Before(job.Created) {
			want.Predecessors++
			continue
		}
		members = append(members, tk.Name+"/"+uid)
		switch {
		case tk.Phase.Terminal():
			want.Done++
			if tk.Phase == api.TaskFailed {
				want.Failed++
			}
			continue
		case tk.NodeName != "":
			want.Bound++
			want.Allocated, _ = want.Allocated.Add(tk.Request.With(api.Pods, 0))
		default:
			want.Pending++
		}
		if want.Pending+want.Bound == 1 || tk.Priority > want.Priority {
			want.Priority = tk.Priority
		}
	}
	return want, members, anyPending
}

// compareSummary checks JobSummary of ns/name against the model.
func compareSummary(t *testing.T, step int, c *Cache, m *model, name string) {
	t.Helper()
	want, _, _ := modelMembers(m, name)
	got := c.JobSummary("ns", name)
	if got.Pending != want.Pending || got.Bound != want.Bound || got.Done != want.Done || got.Failed != want.Failed ||
		got.Predecessors != want.Predecessors || got.Priority != want.Priority || !got.Allocated.Equal(want.Allocated) {
		t.Fatalf("step %d: summary of %s: %+v, model %+v", step, name, got, want)
	}
}

// compareMembers checks TasksOfJob and JobSummary of ns/name against the
// membership rule applied naively to the model.
func compareMembers(t *testing.T, step int, c *Cache, s *Snapshot, m *model, name string) {
	t.Helper()
	compareSummary(t, step, c, m, name)
	_, members, anyPending := modelMembers(m, name)
	if !anyPending {
		members = nil
	}
	sort.Strings(members)
	var have []string
	for _, tk := range s.TasksOfJob("ns", name) {
		have = append(have, tk.Name+"/"+tk.UID)
	}
	sort.Strings(have)
	if !reflect.DeepEqual(have, members) {
		t.Fatalf("step %d: tasks of %s: %v, model %v", step, name, have, members)
	}
}

// rnd is a tiny deterministic generator (no package-level state).
type rnd struct{ x uint64 }

func newRand(seed int64) *rnd { return &rnd{x: uint64(seed)*0x9E3779B97F4A7C15 + 1} }

func (r *rnd) intn(n int) int {
	r.x ^= r.x << 13
	r.x ^= r.x >> 7
	r.x ^= r.x << 17
	return int(r.x % uint64(n))
}

// Book adds an assumed task to the snapshot's copy of its node only; the
// next refresh brings the cache's books (which hold the assumption).
func TestSnapshotBook(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(api.Node{Name: "n1", UID: "n1", Allocatable: api.NewResource(8000, 8<<30, map[string]int64{api.Pods: 10})})
	c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "t", UID: "t", Job: "j", Phase: api.TaskPending,
		Request: api.NewResource(3000, 1<<30, map[string]int64{api.Pods: 1})})
	var s Snapshot
	c.UpdateSnapshot(&s)
	if got, want := s.Free(), api.NewResource(8000, 8<<30, nil); !got.Equal(want) {
		t.Fatalf("free room before Book: %v, want %v", got, want)
	}
	if err := c.Assume("t", "n1"); err != nil {
		t.Fatal(err)
	}
	s.Book("n1", api.NewResource(3000, 1<<30, map[string]int64{api.Pods: 1}))
	s.Book("nowhere", api.NewResource(1000, 0, nil)) // ignored
	b, _ := s.Node("n1")
	if b.Used.MilliCPU != 3000 || b.Tasks != 1 || b.Used.Get(api.Pods) != 1 {
		t.Fatalf("snapshot books after Book: %+v", b)
	}
	if !s.Booked(b) {
		t.Fatal("the books Book changed in place are not said to be booked")
	}
	if got, want := s.Free(), api.NewResource(5000, 7<<30, nil); !got.Equal(want) {
		t.Fatalf("free room after Book: %v, want %v", got, want)
	}
	booked := b
	c.UpdateSnapshot(&s)
	b, _ = s.Node("n1")
	if b.Used.MilliCPU != 3000 || b.Tasks != 1 {
		t.Fatalf("refreshed books %+v, want the cache's (3 CPU, 1 task)", b)
	}
	if b == booked || s.Booked(b) || s.Booked(booked) {
		t.Fatal("after a refresh the booked node is not a new copy, or still said to be booked")
	}
	c.Forget("t")
	c.UpdateSnapshot(&s)
	if b, _ = s.Node("n1"); b.Used.MilliCPU != 0 || b.Tasks != 0 {
		t.Fatalf("after Forget: %+v, want empty books", b)
	}
	if got, want := s.Free(), api.NewResource(8000, 8<<30, nil); !got.Equal(want) {
		t.Fatalf("free room after Forget: %v, want %v", got, want)
	}
}

// TestSnapshotJobsFollowTheLog refreshes one snapshot after random runs of
// job changes (updates, deletes, names re-used by new UIDs, stale deletes),
// short and long, so that it takes the cache's log of changed jobs and,
// after the log was trimmed or named too many jobs, the full comparison; and
// checks it against a snapshot built from scratch each time; a job it says
// unchanged (JobUnchanged) must be the very job the refresh before had.
func TestSnapshotJobsFollowTheLog(t *testing.T) {
	for seed := range int64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := newRand(seed)
			c := New(Options{})
			var s Snapshot
			prev := map[string]*api.Job{}
			kept := 0
			for round := range 300 {
				n := 1 + r.intn(8)
				if r.intn(10) == 0 {
					n = 300 + r.intn(1500) // past the log's reach, or too many to take one by one
				}
				for range n {
					name := fmt.Sprint("j", r.intn(120))
					uid := fmt.Sprintf("%s-uid-%d", name, r.intn(3))
					if r.intn(4) == 0 {
						c.DeleteJob(uid)
						continue
					}
					c.AddOrUpdateJob(api.Job{Namespace: fmt.Sprint("ns", r.intn(3)), Name: name, UID: uid,
						MinMember: int32(r.intn(5)), Queue: fmt.Sprint("q", r.intn(4))})
				}
				c.UpdateSnapshot(&s)
				for uid, j := range prev {
					if !s.JobUnchanged(uid) {
						continue
					}
					kept++
					if now, ok := s.JobByUID(uid); !ok || now != j {
						t.Fatalf("round %d: %s said unchanged, but the snapshot's job is now %v (present %v), not the one before", round, uid, now, ok)
					}
				}
				clear(prev)
				for _, j := range s.Jobs() {
					prev[j.UID] = j
				}
				var fresh Snapshot
				c.UpdateSnapshot(&fresh)
				for _, j := range fresh.Jobs() {
					if fresh.JobUnchanged(j.UID) {
						t.Fatalf("round %d: a new snapshot says %s is unchanged", round, j.UID)
					}
				}
				got, want := s.Jobs(), fresh.Jobs()
				if len(got) != len(want) {
					t.Fatalf("round %d: %d jobs, a fresh snapshot has %d", round, len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("round %d: job %d is %s/%s %s, a fresh snapshot has %s/%s %s", round, i,
							got[i].Namespace, got[i].Name, got[i].UID, want[i].Namespace, want[i].Name, want[i].UID)
					}
					if j, ok := s.JobByUID(want[i].UID); !ok || j != want[i] {
						t.Fatalf("round %d: JobByUID(%s) = %v, %v", round, want[i].UID, j, ok)
					}
					if j, ok := s.JobByName(want[i].Namespace, want[i].Name); !ok || j != want[i] {
						t.Fatalf("round %d: JobByName(%s/%s) = %v, %v", round, want[i].Namespace, want[i].Name, j, ok)
					}
				}
				if len(s.jobs) != len(want) || len(s.jobNames) != len(want) {
					t.Fatalf("round %d: %d jobs by UID and %d by name, want %d", round, len(s.jobs), len(s.jobNames), len(want))
				}
				wantByQueue := map[string][]*api.Job{}
				for _, j := range want {
					wantByQueue[j.Queue] = append(wantByQueue[j.Queue], j)
				}
				gotByQueue := map[string][]*api.Job{}
				for q, js := range s.Queues {
					gotByQueue[q] = js
				}
				if !maps.EqualFunc(gotByQueue, wantByQueue, slices.Equal) {
					t.Fatalf("round %d: jobs by queue %v, want %v (from Jobs)", round, queueSizes(gotByQueue), queueSizes(wantByQueue))
				}
			}
			if kept == 0 {
				t.Fatal("no job was ever said unchanged")
			}
		})
	}
}

// queueSizes is how many jobs each queue has, for a failure's message.
func queueSizes(m map[string][]*api.Job) map[string]int {
	out := map[string]int{}
	for q, js := range m {
		out[q] = len(js)
	}
	return out
}

// InOrder gives any subset of a snapshot's jobs, in any order, in the
// snapshot's order (JobOrder), whether it sorts (a few jobs) or walks the
// snapshot's list (many): names and UIDs repeat across namespaces, and
// two jobs share a name with different UIDs.
func TestSnapshotInOrder(t *testing.T) {
	c := New(Options{})
	for i := range 400 {
		name := fmt.Sprint("j", i%150)
		c.AddOrUpdateJob(api.Job{Namespace: fmt.Sprint("ns", i%3), Name: name, UID: fmt.Sprintf("%s-%d", name, i%7)})
	}
	var s Snapshot
	c.UpdateSnapshot(&s)
	all := s.Jobs()
	if !slices.IsSortedFunc(all, JobOrder) {
		t.Fatal("the snapshot's jobs are not in JobOrder")
	}
	r := newRand(7)
	for _, keep := range []int{0, 1, 5, 20, 30, 100, 399, len(all)} { // the walk takes over at len(all)/16
		var want, in []*api.Job
		for _, j := range all {
			if keep == len(all) || r.intn(len(all)) < keep {
				want = append(want, j)
				in = append(in, j)
			}
		}
		for i := len(in) - 1; i > 0; i-- {
			k := r.intn(i + 1)
			in[i], in[k] = in[k], in[i]
		}
		got := s.InOrder(in)
		if !slices.Equal(got, want) {
			t.Fatalf("%d of %d jobs: InOrder gave %d jobs out of the snapshot's order", len(want), len(all), len(got))
		}
	}
}

// TestSnapshotJobsAfterTheLogIsTrimmed: a snapshot taken while the cluster
// had many jobs, refreshed after most of them went and the cache trimmed
// its log past that snapshot, lists the jobs that are left and no other.
func TestSnapshotJobsAfterTheLogIsTrimmed(t *testing.T) {
	c := New(Options{})
	for i := range 8000 {
		c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: fmt.Sprint("bulk-", i), UID: fmt.Sprint("bulk-uid-", i)})
	}
	var s Snapshot
	c.UpdateSnapshot(&s)
	for i := range 8000 {
		c.DeleteJob(fmt.Sprint("bulk-uid-", i))
	}
	c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: "left", UID: "left-uid"})
	c.UpdateSnapshot(&s)
	if got := s.Jobs(); len(got) != 1 || got[0].UID != "left-uid" {
		t.Fatalf("after 8,000 jobs went and one came, the snapshot lists %d jobs (first %v), want only left-uid", len(got), got[:min(len(got), 1)])
	}
}

// TestSnapshotTasksChangedHoldsItsWord refreshes one snapshot after random
// runs of task and job changes (pods created, bound, assumed and
// forgotten, finished, deleted, moved to another job; PodGroups created,
// replaced and deleted, names re-used by new UIDs), short and long (past
// the cache's log), and checks TasksChanged's promise: for every job it
// says did not change, the cache's JobSummary and the snapshot's pending
// tasks are what they were just after the refresh before. It also checks
// that a refresh with nothing done in between says no job changed, and
// that a new snapshot says every job may have.
func TestSnapshotTasksChangedHoldsItsWord(t *testing.T) {
	type seen struct {
		sum     JobSummary
		pending []*api.Task
	}
	for seed := range int64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := newRand(seed)
			c := New(Options{})
			for i := range 6 {
				c.AddOrUpdateNode(api.Node{Name: fmt.Sprint("n", i), UID: fmt.Sprint("n", i),
					Allocatable: api.NewResource(64000, 256<<30, map[string]int64{api.Pods: 110})})
			}
			job := func(i int) (ns, name string) { return fmt.Sprint("ns", i%2), fmt.Sprint("j", i) }
			var s Snapshot
			c.UpdateSnapshot(&s)
			before := map[*api.Job]seen{}
			look := func() {
				clear(before)
				for _, j := range s.Jobs() {
					before[j] = seen{sum: c.JobSummary(j.Namespace, j.Name), pending: s.PendingOfJob(j.Namespace, j.Name)}
				}
			}
			look()
			unchanged, changed := 0, 0
			for round := range 400 {
				n := r.intn(6)
				long := r.intn(15) == 0
				if long {
					n++
				}
				for range n {
					ji := r.intn(40)
					ns, name := job(ji)
					uid := fmt.Sprintf("%s-%s-t%d", ns, name, r.intn(6))
					switch k := r.intn(10); {
					case k < 3:
						c.AddOrUpdateTask(api.Task{Namespace: ns, Name: uid, UID: uid, Job: name, Phase: api.TaskPending,
							Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
					case k < 4:
						phase := []api.TaskPhase{api.TaskRunning, api.TaskSucceeded, api.TaskFailed}[r.intn(3)]
						c.AddOrUpdateTask(api.Task{Namespace: ns, Name: uid, UID: uid, Job: name, Phase: phase, NodeName: fmt.Sprint("n", r.intn(6)),
							Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
					case k < 5:
						_ = c.Assume(uid, fmt.Sprint("n", r.intn(6)))
					case k < 6:
						c.Forget(uid)
					case k < 7:
						c.DeleteTask(uid)
					case k < 8:
						// The same pod now names another job.
						_, other := job(r.intn(40))
						c.AddOrUpdateTask(api.Task{Namespace: ns, Name: uid, UID: uid, Job: other, Phase: api.TaskPending,
							Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
					case k < 9:
						c.AddOrUpdateJob(api.Job{Namespace: ns, Name: name, UID: fmt.Sprintf("%s-%s-u%d", ns, name, r.intn(2)),
							MinMember: int32(r.intn(4)), Queue: "q", Created: time.Unix(int64(r.intn(3)), 0)})
					default:
						c.DeleteJob(fmt.Sprintf("%s-%s-u%d", ns, name, r.intn(2)))
					}
				}
				if long {
					// Past the log's reach: after those changes, one other
					// pod's many.
					for i := range 1500 + r.intn(1500) {
						phase, node := api.TaskPending, ""
						if i%2 == 0 {
							phase, node = api.TaskRunning, "n0"
						}
						c.AddOrUpdateTask(api.Task{Namespace: "ns0", Name: "hot", UID: "hot", Job: "hot", Phase: phase, NodeName: node,
							Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
					}
				}
				c.UpdateSnapshot(&s)
				for _, j := range s.Jobs() {
					if s.TasksChanged(j) {
						changed++
						continue
					}
					b, ok := before[j]
					if !ok {
						continue // a new pointer: the caller sees the job changed
					}
					unchanged++
					sum := c.JobSummary(j.Namespace, j.Name)
					if !reflect.DeepEqual(sum, b.sum) {
						t.Fatalf("round %d (%d changes): %s/%s said unchanged, but its summary went from %+v to %+v", round, n, j.Namespace, j.Name, b.sum, sum)
					}
					if p := s.PendingOfJob(j.Namespace, j.Name); !slices.Equal(p, b.pending) {
						t.Fatalf("round %d (%d changes): %s/%s said unchanged, but its pending tasks went from %d to %d", round, n, j.Namespace, j.Name, len(b.pending), len(p))
					}
				}
				if n == 0 {
					for _, j := range s.Jobs() {
						if s.TasksChanged(j) {
							t.Fatalf("round %d: nothing changed since the refresh before, but %s/%s is said to have", round, j.Namespace, j.Name)
						}
					}
				}
				look()
			}
			if unchanged == 0 || changed == 0 {
				t.Fatalf("the rounds said %d jobs unchanged and %d changed: both cases should occur", unchanged, changed)
			}
			var fresh Snapshot
			c.UpdateSnapshot(&fresh)
			for _, j := range fresh.Jobs() {
				if !fresh.TasksChanged(j) {
					t.Fatalf("a new snapshot says %s/%s did not change", j.Namespace, j.Name)
				}
			}
		})
	}
}
