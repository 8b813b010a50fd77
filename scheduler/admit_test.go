package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
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
	if r.s.Stats().Holds != 1 || r.s.held == nil || r.s.held.job != "gang" || len(r.s.held.nodes) != 2 {
		t.Fatalf("no hold of two nodes for the starving gang: %+v", r.s.held)
	}
	held := r.s.held.nodes
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
	if r.s.held != nil {
		t.Fatalf("hold still on after the gang was placed: %+v", r.s.held)
	}
}
