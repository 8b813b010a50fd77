package cache

import (
	"errors"
	"math"
	"testing"

	"github.com/shardsched/shardsched/api"
)

func TestBooksAddUpdateMoveDelete(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	c.AddOrUpdateNode(mkNode("n2", 8, 32, 110))
	t1 := on(mkTask("ns", "a", "j", 1000, 1), "n1", api.TaskRunning)
	c.AddOrUpdateTask(t1)
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)

	// An update with a bigger request (same node) replaces, never adds.
	t1.Request = req(2500, 2, 1)
	c.AddOrUpdateTask(t1)
	c.AddOrUpdateTask(t1)
	wantUsed(t, c, "n1", req(2500, 2, 1), 1)

	// A second task on the same node adds up.
	c.AddOrUpdateTask(on(mkTask("ns", "b", "j", 500, 1), "n1", api.TaskBound))
	wantUsed(t, c, "n1", req(3000, 3, 2), 2)

	// Changing NodeName moves the request between books.
	c.AddOrUpdateTask(on(t1, "n2", api.TaskRunning))
	wantUsed(t, c, "n1", req(500, 1, 1), 1)
	wantUsed(t, c, "n2", req(2500, 2, 1), 1)

	c.DeleteTask(t1.UID)
	c.DeleteTask("no-such-uid")
	wantUsed(t, c, "n2", api.Resource{}, 0)
	wantUsed(t, c, "n1", req(500, 1, 1), 1)
	if _, ok := c.Task(t1.UID); ok {
		t.Fatal("deleted task still known")
	}
	if b := booksOf(t, c, "n1"); !b.Idle().Equal(req(7500, 31, 109)) {
		t.Fatalf("idle %v", b.Idle())
	}
	mustVerify(t, c)
}

// A relist's deletes: every task not kept is forgotten, its books and
// its name freed; the kept ones are untouched.
func TestDeleteTasksExcept(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	a := on(mkTask("ns", "a", "j", 1000, 1), "n1", api.TaskRunning)
	b := on(mkTask("ns", "b", "j", 500, 1), "n1", api.TaskRunning)
	p := mkTask("ns", "p", "j", 500, 1)
	for _, task := range []api.Task{a, b, p} {
		c.AddOrUpdateTask(task)
	}
	var asked []string
	c.DeleteTasksExcept(func(uid string) bool {
		asked = append(asked, uid)
		return uid == b.UID
	})
	if len(asked) != 3 {
		t.Fatalf("keep asked of %v, want the 3 tasks", asked)
	}
	for _, gone := range []api.Task{a, p} {
		if _, ok := c.Task(gone.UID); ok {
			t.Errorf("%s still known after a relist without it", gone.Name)
		}
	}
	if _, ok := c.Task(b.UID); !ok {
		t.Error("b, kept, was forgotten")
	}
	wantUsed(t, c, "n1", req(500, 1, 1), 1)
	// a's name is free for a pod re-created under it.
	a2 := a
	a2.UID = "a-again"
	c.AddOrUpdateTask(a2)
	wantUsed(t, c, "n1", req(1500, 2, 2), 2)
	mustVerify(t, c)
}

func TestTerminalAndReleasingTasks(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 8, 32, 110))
	run := on(mkTask("ns", "a", "j", 2000, 4), "n1", api.TaskRunning)
	c.AddOrUpdateTask(run)
	wantUsed(t, c, "n1", req(2000, 4, 1), 1)

	// Releasing: still used, and also counted in Releasing.
	c.AddOrUpdateTask(on(run, "n1", api.TaskReleasing))
	b := booksOf(t, c, "n1")
	if !b.Used.Equal(req(2000, 4, 1)) || !b.Releasing.Equal(req(2000, 4, 1)) || b.Tasks != 1 {
		t.Fatalf("releasing: used %v releasing %v tasks %d", b.Used, b.Releasing, b.Tasks)
	}
	// Back to running (the delete was cancelled): releasing drops.
	c.AddOrUpdateTask(on(run, "n1", api.TaskRunning))
	if b := booksOf(t, c, "n1"); !b.Releasing.IsZero() || !b.Used.Equal(req(2000, 4, 1)) {
		t.Fatalf("un-releasing: used %v releasing %v", b.Used, b.Releasing)
	}

	for _, phase := range []api.TaskPhase{api.TaskSucceeded, api.TaskFailed} {
		c.AddOrUpdateTask(on(run, "n1", api.TaskRunning))
		c.AddOrUpdateTask(on(run, "n1", phase))
		b := booksOf(t, c, "n1")
		if !b.Used.IsZero() || !b.Releasing.IsZero() || b.Tasks != 0 {
			t.Fatalf("%s task still booked: %+v", phase, b)
		}
		if _, ok := c.Task(run.UID); !ok {
			t.Fatalf("%s task forgotten: terminal tasks stay known until deleted", phase)
		}
	}

	// A pending task is not booked anywhere and is listed as pending.
	p := mkTask("ns", "p", "j", 1000, 1)
	c.AddOrUpdateTask(p)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if pt := s.PendingTasks(); len(pt) != 1 || pt[0].UID != p.UID {
		t.Fatalf("pending %v", pt)
	}
	if tj := s.TasksOfJob("ns", "j"); len(tj) != 2 {
		t.Fatalf("tasks of job: %d, want 2 (the pending one and the terminal one)", len(tj))
	}
	if b, _ := s.Node("n1"); b.Tasks != 0 {
		t.Fatalf("pending task booked")
	}
	mustVerify(t, c)
}

func TestTasksBeforeTheirNode(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateTask(on(mkTask("ns", "a", "j", 1000, 1), "late", api.TaskRunning))
	c.AddOrUpdateTask(on(mkTask("ns", "b", "j", 1000, 1), "late", api.TaskReleasing))
	c.AddOrUpdateTask(on(mkTask("ns", "c", "j", 1000, 1), "late", api.TaskSucceeded))
	if st := c.Stats(); st.Tasks != 3 || st.Nodes != 0 || st.BookedNodes != 0 {
		t.Fatalf("stats %+v", st)
	}
	mustVerify(t, c)

	n := mkNode("late", 8, 32, 110)
	c.AddOrUpdateNode(n)
	b := booksOf(t, c, "late")
	if !b.Used.Equal(req(2000, 2, 2)) || !b.Releasing.Equal(req(1000, 1, 1)) || b.Tasks != 2 {
		t.Fatalf("books when the node arrives: %+v", b)
	}

	// The node goes away: its tasks stay known, and are booked again when
	// it comes back.
	c.DeleteNode("late", n.UID)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if _, ok := s.Node("late"); ok || c.Stats().Tasks != 3 {
		t.Fatalf("after delete: books present %v, stats %+v", ok, c.Stats())
	}
	n.UID = "late-uid-2"
	c.AddOrUpdateNode(n)
	wantUsed(t, c, "late", req(2000, 2, 2), 2)
	mustVerify(t, c)
}

func TestAssumeForgetConfirm(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(mkNode("n1", 4, 16, 110))
	c.AddOrUpdateNode(mkNode("n2", 4, 16, 110))
	t1 := mkTask("ns", "t1", "j", 1000, 1)
	c.AddOrUpdateTask(t1)

	if err := c.Assume(t1.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	var s Snapshot
	c.UpdateSnapshot(&s)
	if len(s.PendingTasks()) != 0 {
		t.Fatal("an assumed task is still pending")
	}
	if got, _ := c.Task(t1.UID); got.NodeName != "n1" || got.Phase != api.TaskBound {
		t.Fatalf("assumed task seen as %s on %q", got.Phase, got.NodeName)
	}
	if n, ok := c.Assumed(t1.UID); !ok || n != "n1" {
		t.Fatal("Assumed")
	}
	if err := c.Assume(t1.UID, "n2"); !errors.Is(err, ErrNotPending) {
		t.Fatalf("assume twice: %v", err)
	}
	// A late informer update that still shows it unbound keeps the assumption.
	c.AddOrUpdateTask(t1)
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)

	// Forget after a failed bind: pending again, nothing booked.
	c.Forget(t1.UID)
	wantUsed(t, c, "n1", api.Resource{}, 0)
	c.UpdateSnapshot(&s)
	if len(s.PendingTasks()) != 1 {
		t.Fatal("a forgotten task is not pending")
	}

	// Assume, then the informer shows it bound on the same node: confirmed,
	// counted once; a late Forget changes nothing.
	if err := c.Assume(t1.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	c.AddOrUpdateTask(on(t1, "n1", api.TaskBound))
	c.AddOrUpdateTask(on(t1, "n1", api.TaskRunning))
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	if _, ok := c.Assumed(t1.UID); ok {
		t.Fatal("still assumed after confirmation")
	}
	c.Forget(t1.UID)
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)

	// Assumed on n1, but the informer shows it bound on n2: it moves.
	t2 := mkTask("ns", "t2", "j", 2000, 1)
	c.AddOrUpdateTask(t2)
	if err := c.Assume(t2.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, c, "n1", req(3000, 2, 2), 2)
	c.AddOrUpdateTask(on(t2, "n2", api.TaskRunning))
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	wantUsed(t, c, "n2", req(2000, 1, 1), 1)

	// An assumed task that is deleted leaves nothing behind.
	t3 := mkTask("ns", "t3", "j", 1000, 1)
	c.AddOrUpdateTask(t3)
	if err := c.Assume(t3.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	c.DeleteTask(t3.UID)
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	mustVerify(t, c)
}

func TestAssumeRefusalsChangeNothing(t *testing.T) {
	c := New(Options{KeepsBooks: func(n string) bool { return n != "theirs" }})
	c.AddOrUpdateNode(mkNode("small", 2, 4, 2))
	c.AddOrUpdateNode(mkNode("theirs", 64, 256, 110))
	c.AddOrUpdateTask(on(mkTask("ns", "running", "j", 500, 1), "small", api.TaskRunning))
	big := mkTask("ns", "big", "j", 4000, 1)
	c.AddOrUpdateTask(big)
	done := on(mkTask("ns", "done", "j", 100, 1), "", api.TaskSucceeded)
	c.AddOrUpdateTask(done)
	noPods := mkTask("ns", "nopods", "j", 100, 1)
	noPods.Request = api.NewResource(100, gi, nil) // no "pods" in the request
	c.AddOrUpdateTask(noPods)
	gpu := mkTask("ns", "gpu", "j", 100, 1)
	gpu.Request = gpu.Request.With("nvidia.com/gpu", 1)
	c.AddOrUpdateTask(gpu)

	var before Snapshot
	c.UpdateSnapshot(&before)
	for _, tc := range []struct {
		uid, node string
		want      error
	}{
		{"nope", "small", ErrUnknownTask},
		{big.UID, "nowhere", ErrUnknownNode},
		{big.UID, "theirs", ErrNotOwned},
		{big.UID, "small", ErrDoesNotFit},
		{gpu.UID, "small", ErrDoesNotFit}, // a scalar the node does not have
		{done.UID, "small", ErrNotPending},
		{"ns/running-uid", "small", ErrNotPending},
	} {
		if err := c.Assume(tc.uid, tc.node); !errors.Is(err, tc.want) {
			t.Errorf("Assume(%s, %s) = %v, want %v", tc.uid, tc.node, err, tc.want)
		}
	}
	// The pod count: one slot left; a task without "pods" still takes it.
	if err := c.Assume(noPods.UID, "small"); err != nil {
		t.Fatal(err)
	}
	small := mkTask("ns", "small", "j", 100, 1)
	c.AddOrUpdateTask(small)
	if err := c.Assume(small.UID, "small"); !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("third pod on a 2-pod node: %v", err)
	}
	c.Forget(noPods.UID)
	c.DeleteTask(small.UID)

	var after Snapshot
	c.UpdateSnapshot(&after)
	b0, _ := before.Node("small")
	b1, _ := after.Node("small")
	if !b0.Used.Equal(b1.Used) || b0.Tasks != b1.Tasks || len(after.PendingTasks()) != len(before.PendingTasks()) {
		t.Fatalf("refused assumptions changed the books: %+v -> %+v", b0, b1)
	}
	mustVerify(t, c)
}

func TestOwnershipChange(t *testing.T) {
	c := New(Options{KeepsBooks: func(n string) bool { return n == "n1" }})
	for _, n := range []string{"n1", "n2", "n3"} {
		c.AddOrUpdateNode(mkNode(n, 8, 32, 110))
		c.AddOrUpdateTask(on(mkTask("ns", "on-"+n, "j", 1000, 1), n, api.TaskRunning))
	}
	p := mkTask("ns", "p", "j", 1000, 1)
	c.AddOrUpdateTask(p)

	names := func() []string {
		var s Snapshot
		c.UpdateSnapshot(&s)
		var out []string
		for _, b := range s.Nodes() {
			out = append(out, b.Node.Name)
		}
		return out
	}
	if got := names(); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("owned %v", got)
	}
	if err := c.Assume(p.UID, "n2"); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("assume on a node of another shard: %v", err)
	}

	var s Snapshot
	c.UpdateSnapshot(&s)
	c.SetKeepsBooks(func(n string) bool { return n != "n1" })
	if got := names(); len(got) != 2 || got[0] != "n2" || got[1] != "n3" {
		t.Fatalf("owned after SetKeepsBooks %v", got)
	}
	wantUsed(t, c, "n2", req(1000, 1, 1), 1)
	// The incremental snapshot drops n1 and adds n2, n3.
	c.UpdateSnapshot(&s)
	if _, ok := s.Node("n1"); ok || s.NumNodes() != 2 {
		t.Fatalf("incremental snapshot after SetKeepsBooks: %d nodes", s.NumNodes())
	}
	if _, ok := c.Task("ns/on-n1-uid"); !ok {
		t.Fatal("a task on a node no longer owned is forgotten")
	}
	if st := c.Stats(); st.Nodes != 3 || st.BookedNodes != 2 || st.Tasks != 4 || st.Pending != 1 {
		t.Fatalf("stats %+v", st)
	}
	mustVerify(t, c)

	c.SetKeepsBooks(nil)
	if got := names(); len(got) != 3 {
		t.Fatalf("owned with nil KeepsBooks: %v", got)
	}
	wantUsed(t, c, "n1", req(1000, 1, 1), 1)
	mustVerify(t, c)
}

// TestNoPanicOnBadInput feeds malformed objects: nothing panics and the
// books stay consistent with a recomputation.
func TestNoPanicOnBadInput(t *testing.T) {
	var zero Cache // the zero value works too
	zero.UpdateSnapshot(nil)
	var s Snapshot
	zero.UpdateSnapshot(&s)
	zero.AddOrUpdateNode(mkNode("z", 1, 1, 1))
	zero.DeleteTask("x")
	_ = zero.Assume("x", "z")
	zero.Forget("x")
	zero.UpdateSnapshot(&s)
	var nilSnap *Snapshot
	_, _ = nilSnap.Node("x")
	_ = nilSnap.Nodes()
	_ = nilSnap.PendingTasks()
	_ = nilSnap.TasksOfJob("a", "b")
	_ = nilSnap.Jobs()

	c := New(Options{})
	c.AddOrUpdateNode(api.Node{})                               // no name
	c.AddOrUpdateTask(api.Task{Name: "no-uid", NodeName: "n1"}) // no UID
	c.AddOrUpdateJob(api.Job{Name: "no-uid"})
	neg := mkNode("neg", 1, 1, 1)
	neg.Allocatable = api.Resource{MilliCPU: -5, Scalars: map[string]int64{"x": -1}}
	c.AddOrUpdateNode(neg)
	c.AddOrUpdateNode(mkNode("huge", 1, 1, 1))
	badReq := on(mkTask("ns", "neg", "j", 0, 0), "huge", api.TaskRunning)
	badReq.Request = api.Resource{MilliCPU: -1000, Memory: -1, Scalars: map[string]int64{"gpu": -3, api.Pods: 1}}
	c.AddOrUpdateTask(badReq)
	for i, name := range []string{"max1", "max2", "max3"} {
		m := on(mkTask("ns", name, "j", 0, 0), "huge", api.TaskRunning)
		m.Request = api.Resource{MilliCPU: 1<<63 - 1, Memory: 1<<63 - 1 - int64(i), Scalars: map[string]int64{"gpu": 1<<63 - 1}}
		c.AddOrUpdateTask(m)
	}
	mustVerify(t, c)
	if b := booksOf(t, c, "huge"); !b.OutOfSync || b.Idle().Validate() != nil {
		t.Fatalf("saturated books: %+v idle %v", b, b.Idle())
	}
	c.DeleteTask("ns/max1-uid")
	c.DeleteTask("ns/max2-uid")
	c.DeleteTask("ns/max3-uid")
	if b := booksOf(t, c, "huge"); b.OutOfSync || !b.Used.Equal(api.NewResource(0, 0, map[string]int64{api.Pods: 1})) {
		t.Fatalf("after removing the saturating tasks: %+v", b)
	}
	c.Rebuild(api.Node{}, nil)
	c.Rebuild(mkNode("huge", 1, 1, 1), []api.Task{{}, {UID: "other", NodeName: "elsewhere"}})
	c.DeleteNode("", "")
	c.DeleteJob("")
	_ = c.Assume("", "")
	c.SetKeepsBooks(func(string) bool { return false })
	c.SetKeepsBooks(nil)
	mustVerify(t, c)
}

func TestJobSummaryCountsEveryJob(t *testing.T) {
	c := New(Options{})
	c.AddOrUpdateNode(api.Node{Name: "n1", UID: "n1", Allocatable: api.NewResource(8000, 8<<30, map[string]int64{api.Pods: 10})})
	mk := func(uid string, node string, phase api.TaskPhase) api.Task {
		return api.Task{Namespace: "ns", Name: uid, UID: uid, Job: "j", NodeName: node, Phase: phase,
			Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1})}
	}
	c.AddOrUpdateTask(mk("a", "n1", api.TaskRunning))
	c.AddOrUpdateTask(mk("b", "n1", api.TaskBound))
	c.AddOrUpdateTask(mk("c", "", api.TaskPending))
	c.AddOrUpdateTask(mk("d", "n1", api.TaskSucceeded))
	s := c.JobSummary("ns", "j")
	if s.Pending != 1 || s.Bound != 2 || s.Done != 1 || s.Allocated.MilliCPU != 2000 || s.Allocated.Get(api.Pods) != 0 {
		t.Fatalf("summary %+v", s)
	}
	if err := c.Assume("c", "n1"); err != nil {
		t.Fatal(err)
	}
	if s := c.JobSummary("ns", "j"); s.Pending != 0 || s.Bound != 3 {
		t.Fatalf("after assume: %+v", s)
	}
	if s := c.JobSummary("ns", "nope"); s.Pending+s.Bound+s.Done != 0 {
		t.Fatalf("unknown job: %+v", s)
	}
	// The summary is memoized per generation of the job's tasks: every
	// change shows at once.
	c.Forget("c")
	if s := c.JobSummary("ns", "j"); s.Pending != 1 || s.Bound != 2 {
		t.Fatalf("after forget: %+v", s)
	}
	c.AddOrUpdateTask(mk("a", "n1", api.TaskSucceeded))
	if s := c.JobSummary("ns", "j"); s.Bound != 1 || s.Done != 2 || s.Allocated.MilliCPU != 1000 {
		t.Fatalf("after a task succeeded: %+v", s)
	}
	gpu := mk("g", "n1", api.TaskRunning)
	gpu.Request = api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1, "nvidia.com/gpu": 1})
	c.AddOrUpdateTask(gpu)
	s1 := c.JobSummary("ns", "j")
	s1.Allocated.Scalars["nvidia.com/gpu"] = 99 // a caller scribbling on its copy
	if s2 := c.JobSummary("ns", "j"); s2.Allocated.Get("nvidia.com/gpu") != 1 {
		t.Fatalf("a caller's copy changed the memo: %+v", s2)
	}
}

// A job whose requests do not add up exactly (a sum that saturates, a
// negative value that reached the cache) is counted from its tasks when
// asked, so that taking a task out never subtracts from a clamped sum.
// Negative values count as zero.
func TestJobSummaryInexactSums(t *testing.T) {
	c := New(Options{})
	big := int64(math.MaxInt64/2 + 1)
	mk := func(uid string, milli, mem int64) api.Task {
		return api.Task{Namespace: "ns", Name: uid, UID: uid, Job: "j", NodeName: "n1", Phase: api.TaskRunning,
			Request: api.NewResource(milli, mem, map[string]int64{api.Pods: 1})}
	}
	c.AddOrUpdateTask(mk("a", big, gi))
	c.AddOrUpdateTask(mk("b", big, gi))
	if s := c.JobSummary("ns", "j"); s.Bound != 2 || s.Allocated.MilliCPU != math.MaxInt64 || s.Allocated.Memory != 2*gi {
		t.Fatalf("saturated: %+v", s)
	}
	c.DeleteTask("b")
	if s := c.JobSummary("ns", "j"); s.Bound != 1 || s.Allocated.MilliCPU != big || s.Allocated.Memory != gi {
		t.Fatalf("after the second task left: %+v", s)
	}
	// A negative value is left out, as the books leave it.
	c.AddOrUpdateTask(mk("neg", 1000, -gi))
	if s := c.JobSummary("ns", "j"); s.Bound != 2 || s.Allocated.MilliCPU != big+1000 || s.Allocated.Memory != gi {
		t.Fatalf("with a negative request: %+v", s)
	}
	c.DeleteTask("neg")
	c.DeleteTask("a")
	// An emptied group is forgotten; a new one counts task by task again.
	c.AddOrUpdateTask(mk("c", 1000, gi))
	if s := c.JobSummary("ns", "j"); s.Bound != 1 || s.Allocated.MilliCPU != 1000 || s.Allocated.Memory != gi {
		t.Fatalf("a new group: %+v", s)
	}
}
