package scheduler

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/wire"
)

// fullQuota refuses every reservation for lack of quota while full is set.
type fullQuota struct {
	fakeQuota
	mu       sync.Mutex
	full     bool
	reserves int
}

func (f *fullQuota) ReserveWith(ctx context.Context, job wire.JobRef, q string, a api.Resource, terms *wire.Terms) (wire.Result, error) {
	f.mu.Lock()
	f.reserves++
	full := f.full
	f.mu.Unlock()
	if full {
		return wire.Result{}, &wire.QuotaError{Queue: "root", Resource: api.CPU, Capability: 1000, Asked: 2000, Short: 1000}
	}
	return f.fakeQuota.ReserveWith(ctx, job, q, a, terms)
}

func (f *fullQuota) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reserves
}

// A job refused for quota is asked for again with a backoff (50 ms doubling
// to 2 s), not on every 20 ms cycle; once quota frees up it is admitted
// within the longest backoff.
func TestQuotaRefusalBacksOff(t *testing.T) {
	r := newRig(t, "shard-o")
	q := &fullQuota{full: true}
	r.s.deps.Quota = q
	r.node("n1", 32)
	r.gang("job", 2, 2)
	// 10 s of 20 ms cycles: 500 cycles. Backoffs 50, 100, 200, ..., 2000
	// ms: about 10 asks, never one per cycle.
	for i := 0; i < 500; i++ {
		r.s.Cycle(context.Background())
		r.advance(20 * time.Millisecond)
	}
	if n := q.count(); n < 5 || n > 15 {
		t.Fatalf("%d reservations asked in 500 cycles of a refused job, want about 10", n)
	}
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("bound %v without quota", b)
	}
	q.mu.Lock()
	q.full = false
	q.mu.Unlock()
	r.cycles(t, 25) // 2.5 s: past the longest backoff
	if b := r.binder.Binds(); len(b) != 2 {
		t.Fatalf("quota free again: %d of 2 tasks bound", len(b))
	}
}

// Jobs placed in the same cycle see each other: with room for one 3-CPU
// task per 4-CPU node, two jobs in one cycle go to two nodes (bin-packing
// without the cycle's own placements would send both to the same node and
// the cache would refuse the second).
func TestOneCyclePlacesJobsOnDistinctNodes(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("n1", 4)
	r.node("n2", 4)
	r.gang("a", 1, 3)
	r.gang("b", 1, 3)
	r.cycles(t, 1) // admission
	r.cycles(t, 1) // placement of both
	b := r.binder.Binds()
	if len(b) != 2 || b["a-0"] == b["b-0"] {
		t.Fatalf("binds after the placing cycle: %v, want a-0 and b-0 on different nodes", b)
	}
	if n := r.s.Stats().AssumeRefused; n != 0 {
		t.Fatalf("%d plans refused by the cache", n)
	}
}

// A gang that does not fit for longer than StarveAfter gets nodes held for
// it: younger jobs stop landing there even where bin-packing would put
// them; once the gang is placed the hold ends.
func TestStarvingGangGetsNodesHeld(t *testing.T) {
	r := newRig(t, "shard-o")
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		r.node(n, 8)
	}
	// Each node runs a 5-CPU pod: 3 CPU free on each, 12 in all.
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("old-%d", i), UID: fmt.Sprintf("old-%d", i), Job: "old",
			NodeName: n, Phase: api.TaskRunning, Request: api.NewResource(5000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
	}
	job := func(uid string, n int, cpu int64) {
		r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: int32(n), Phase: api.JobPending, Created: r.clock()})
		for i := 0; i < n; i++ {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, i), UID: fmt.Sprintf("%s-%d", uid, i), Job: uid,
				Request: api.NewResource(cpu*1000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano", Created: r.clock()})
		}
	}
	job("gang", 2, 6) // two 6-CPU tasks: needs two nodes with 6 free
	r.cycles(t, 5)
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("gang bound with no room: %v", b)
	}
	r.advance(11 * time.Second) // past StarveAfter
	r.cycles(t, 1)
	h := r.s.held.byJob["gang"]
	if r.s.Stats().Holds != 1 || len(r.s.held.byJob) != 1 || h == nil || len(h.nodes) != 2 {
		t.Fatalf("no hold of two nodes for the starving gang: %+v", r.s.held)
	}
	held := h.nodes
	// The pods on the other nodes shrink to 3 CPU (5 free: not enough for a
	// gang task): bin-packing alone would now put a younger 2-CPU job on a
	// held node (the fullest); the hold must not let it.
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		if !held[n] {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("old-%d", i), UID: fmt.Sprintf("old-%d", i), Job: "old",
				NodeName: n, Phase: api.TaskRunning, Request: api.NewResource(3000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
		}
	}
	job("small", 1, 2)
	r.cycles(t, 2)
	b := r.binder.Binds()
	if node, ok := b["small-0"]; !ok || held[node] {
		t.Fatalf("younger job bound to %q (held %v)", node, held)
	}
	// The pods on the held nodes finish: the gang binds there, the hold ends.
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		if held[n] {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("old-%d", i), UID: fmt.Sprintf("old-%d", i), Job: "old",
				NodeName: n, Phase: api.TaskSucceeded, Request: api.NewResource(5000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
		}
	}
	r.cycles(t, 2)
	b = r.binder.Binds()
	if !held[b["gang-0"]] || !held[b["gang-1"]] || b["gang-0"] == b["gang-1"] {
		t.Fatalf("gang binds %v, want both on the two held nodes %v", b, held)
	}
	if len(r.s.held.byJob) != 0 || len(r.s.held.byNode) != 0 {
		t.Fatalf("hold still on after the gang was placed: %+v", r.s.held)
	}
}

// Several gangs starve at once: each gets nodes of its own while the nodes
// held stay within HoldShare of the shard's; past it, a younger gang waits
// for a hold to end. The first hold is allowed whatever its size.
func TestHoldsWithinBudget(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  int // gangs holding nodes
	}{{0.1, 1}, {0.4, 2}, {0.6, 3}} {
		r := newRig(t, "shard-o")
		r.s.cfg.HoldShare = tc.share
		for i := 0; i < 10; i++ {
			n := fmt.Sprintf("n%d", i)
			r.node(n, 8)
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "old-" + n, UID: "old-" + n, Job: "old",
				NodeName: n, Phase: api.TaskRunning, Request: api.NewResource(5000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
		}
		for g := 0; g < 3; g++ {
			uid := fmt.Sprintf("gang%d", g)
			r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: 2, Phase: api.JobPending, Created: r.clock().Add(time.Duration(g) * time.Millisecond)})
			for i := 0; i < 2; i++ {
				r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, i), UID: fmt.Sprintf("%s-%d", uid, i), Job: uid,
					Request: api.NewResource(6000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano", Created: r.clock()})
			}
		}
		r.cycles(t, 2)
		r.advance(11 * time.Second)
		r.cycles(t, 2)
		if got := len(r.s.held.byJob); got != tc.want {
			t.Fatalf("share %v: %d gangs hold nodes, want %d (%+v)", tc.share, got, tc.want, r.s.held.byJob)
		}
		if _, ok := r.s.held.byJob["gang0"]; !ok {
			t.Errorf("share %v: the oldest gang holds nothing", tc.share)
		}
		seen := map[string]string{}
		for uid, h := range r.s.held.byJob {
			if len(h.nodes) != 2 {
				t.Errorf("share %v: %s holds %d nodes, want 2", tc.share, uid, len(h.nodes))
			}
			for n := range h.nodes {
				if other, dup := seen[n]; dup {
					t.Errorf("share %v: node %s held for %s and %s", tc.share, n, other, uid)
				}
				seen[n] = uid
				if r.s.held.byNode[n] != uid {
					t.Errorf("share %v: node %s held for %q by node, %s by job", tc.share, n, r.s.held.byNode[n], uid)
				}
			}
		}
		if len(r.s.held.byNode) != 2*tc.want {
			t.Errorf("share %v: %d nodes held, want %d", tc.share, len(r.s.held.byNode), 2*tc.want)
		}
		if b := r.binder.Binds(); len(b) != 0 {
			t.Errorf("share %v: bound %v with no room", tc.share, b)
		}
	}
}

// A node moved to another gang's hold leaves the first; ending a hold
// frees only the nodes still held for it.
func TestHoldsSetAndEnd(t *testing.T) {
	h := newHolds()
	now := time.Unix(0, 0)
	h.set("a", map[string]bool{"n1": true, "n2": true}, now)
	h.set("b", map[string]bool{"n2": true, "n3": true}, now)
	if h.byNode["n2"] != "b" || h.byJob["a"].nodes["n2"] || len(h.byJob["a"].nodes) != 1 {
		t.Fatalf("n2 not moved to b: %+v %+v", h.byNode, h.byJob["a"].nodes)
	}
	h.set("a", map[string]bool{"n4": true}, now.Add(time.Second))
	if len(h.byJob["a"].nodes) != 2 || !h.byJob["a"].since.Equal(now) {
		t.Fatalf("adding to a's hold: %+v", h.byJob["a"])
	}
	h.end("a")
	if _, ok := h.byJob["a"]; ok || h.byNode["n1"] != "" || h.byNode["n4"] != "" || h.byNode["n2"] != "b" || h.byNode["n3"] != "b" {
		t.Fatalf("after ending a: %+v", h.byNode)
	}
	h.end("missing")
	h.end("b")
	if len(h.byNode) != 0 || len(h.byJob) != 0 {
		t.Fatalf("not empty: %+v", h)
	}
}

func TestHoldShareValidated(t *testing.T) {
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		cfg := DefaultConfig()
		cfg.HoldShare = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "hold share") {
			t.Errorf("HoldShare %v: %v", bad, err)
		}
	}
}

// Only the jobs behind that wait for no reason of their own are told they
// wait behind the head: not one refused or backing off itself, nor one
// nominated (its quota is being freed for it), nor one already running.
func TestNoteBehindLeavesOwnReasons(t *testing.T) {
	r := newRig(t, "shard-o")
	st := &recStatus{groups: map[string]api.JobStatus{}}
	s := r.newScheduler(t, 1, st)
	job := func(uid string, phase api.JobPhase) *api.Job {
		return &api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: 1, Phase: phase}
	}
	head, plain, refused, nominated, running, fresh := job("head", api.JobPending), job("plain", api.JobPending),
		job("refused", api.JobPending), job("nominated", api.JobPending), job("running", api.JobRunning), job("fresh", "")
	s.mu.Lock()
	s.rec("refused").admitWait = quotaBackoff{until: r.clock().Add(time.Second), delay: time.Second}
	s.rec("nominated").nominatedAt = r.clock()
	s.mu.Unlock()
	s.noteBehind("q", head, []*api.Job{plain, refused, nominated, running, fresh})
	for uid, want := range map[string]string{"plain": "Pending/WaitingInQueue", "fresh": "Pending/WaitingInQueue",
		"refused": "-", "nominated": "-", "running": "-", "head": "-"} {
		if got := st.phase(uid); got != want {
			t.Errorf("%s: %s, want %s", uid, got, want)
		}
	}
	if c := st.groups["plain"].Conditions; len(c) != 1 || !strings.Contains(c[0].Message, "behind job ns/head") || !strings.Contains(c[0].Message, `queue "q"`) {
		t.Errorf("condition %+v does not name the job ahead and the queue", c)
	}
}

// Holds go oldest first: a gang too large for what is left of the budget
// is not passed by a younger, smaller one that would fit in it.
func TestHoldsOldestFirst(t *testing.T) {
	r := newRig(t, "shard-o")
	r.s.cfg.HoldShare = 0.4 // 4 of 10 nodes
	for i := 0; i < 10; i++ {
		n := fmt.Sprintf("n%d", i)
		r.node(n, 8)
		r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "old-" + n, UID: "old-" + n, Job: "old",
			NodeName: n, Phase: api.TaskRunning, Request: api.NewResource(5000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
	}
	for g, size := range []int{2, 3, 2} { // gang0 holds 2 nodes; gang1 needs 3 more (5 > 4); gang2 would fit
		uid := fmt.Sprintf("gang%d", g)
		r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: int32(size), Phase: api.JobPending, Created: r.clock().Add(time.Duration(g) * time.Millisecond)})
		for i := 0; i < size; i++ {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, i), UID: fmt.Sprintf("%s-%d", uid, i), Job: uid,
				Request: api.NewResource(6000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano", Created: r.clock()})
		}
	}
	r.cycles(t, 2)
	r.advance(11 * time.Second)
	r.cycles(t, 3)
	if _, ok := r.s.held.byJob["gang0"]; !ok || len(r.s.held.byJob) != 1 {
		t.Fatalf("holds %v, want gang0's only: gang2 must not pass gang1", slices.Sorted(maps.Keys(r.s.held.byJob)))
	}
}

// after picks, from jobs in the snapshot's order, exactly those that
// byPriority puts after the given job: lower priority, or equal and
// younger, or equal in both and later in the snapshot's order. Admission
// leaves unsized gangs out of its sort and asks after for them only when
// it tells the jobs behind a waiting head that they wait too.
func TestAfterMatchesByPriority(t *testing.T) {
	r := newRig(t, "shard-o")
	rnd := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		var all []*api.Job
		for i := range 2 + rnd.IntN(12) {
			uid := fmt.Sprintf("j%02d", i)
			all = append(all, &api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", PriorityClass: "pc",
				Priority: int32(rnd.IntN(3)), Created: time.Unix(int64(rnd.IntN(3)), 0)})
		}
		slices.SortFunc(all, cache.JobOrder)
		sorted := slices.Clone(all)
		r.s.byPriority(sorted)
		head := all[rnd.IntN(len(all))]
		at := slices.Index(sorted, head)
		want := map[*api.Job]bool{}
		for _, b := range sorted[at+1:] {
			want[b] = true
		}
		got := r.s.after(head, all)
		if len(got) != len(want) {
			t.Fatalf("round %d: after(%s) gave %d jobs, byPriority puts %d after it", round, head.UID, len(got), len(want))
		}
		for _, b := range got {
			if !want[b] {
				t.Fatalf("round %d: after(%s) gave %s, which byPriority puts before it", round, head.UID, b.UID)
			}
		}
	}
}

// Queues with jobs to admit ask in fair-share order, the least used
// first, whatever their names: with one call in flight the order is the
// coordinator's too. A queue with nothing to admit is not in the way.
func TestAdmitAsksTheLeastUsedQueueFirst(t *testing.T) {
	r := newRig(t, "shard-o")
	r.s.cfg.AdmitParallelism = 1
	r.node("n0", 64)
	r.node("n1", 64)
	job := func(uid, queue string, phase api.JobPhase) {
		r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: queue, MinMember: 1, Phase: phase})
	}
	job("busy", "a-heavy", api.JobRunning)
	r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "busy-0", UID: "busy-0", Job: "busy", NodeName: "n0", Phase: api.TaskRunning,
		Request: api.NewResource(32000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
	job("idle-done", "c-idle", api.JobRunning)
	for _, q := range []string{"a-heavy", "b-light"} {
		uid := "new-" + q
		job(uid, q, api.JobPending)
		r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: uid + "-0", UID: uid + "-0", Job: uid, Phase: api.TaskPending,
			Request: api.NewResource(1000, gi, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
	}
	r.s.Cycle(context.Background())
	r.quota.mu.Lock()
	var reserves []string
	for _, c := range r.quota.calls {
		if strings.HasPrefix(c, "reserve new-") { // the running job is reserved for too, in its queue's turn
			reserves = append(reserves, strings.TrimPrefix(c, "reserve "))
		}
	}
	r.quota.mu.Unlock()
	if want := []string{"new-b-light", "new-a-heavy"}; !slices.Equal(reserves, want) {
		t.Errorf("reservations asked in the order %v, want %v (the queue using 32 cores last)", reserves, want)
	}
}
