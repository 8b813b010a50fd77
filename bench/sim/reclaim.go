package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
)

// The reclaim scenario: in every parent queue, half the leaves (the
// borrowers) submit everything while the other half (the lenders) are
// idle, so the borrowers fill their parents' capabilities, far above their
// deserved shares; at workload.ReclaimPhase.At of the run the borrowers
// stop and the lenders submit (workload.Workload.ReclaimSides splits the
// leaves). Jobs live long (the workload's lifetime), so a lender gets its
// deserved share in time only if quota is taken back. Measured: for
// each lender, the time from the switch until it holds its deserved share
// (or all it asks, when less); the CPU evicted against the least that had
// to be (what the lenders got beyond what their parents had free at the
// switch); evictions from a queue not above its deserved share, recounted
// from the pods (a reclaim reclaimed back: a loop);
// and, as in every run, quota overruns from the pods.

// Evictor evicts pods of the simulated cluster (scheduler.Evictor): the
// pod is gone at once and its job re-creates it, pending, as a controller
// would.
type Evictor struct{ c *Cluster }

// Evict evicts one pod; one already gone is not an error.
func (e *Evictor) Evict(_ context.Context, t *api.Task, _, _ string) error {
	e.c.EvictPod(t.UID)
	return nil
}

// Note counts an event.
func (e *Evictor) Note(*api.Job, string, string) {
	e.c.mu.Lock()
	e.c.stats.Events++
	e.c.mu.Unlock()
}

// EvictPod removes a bound pod and has its job re-create it, pending
// (counted in Stats.ReclaimEvicted and ReclaimEvictedCPU, in
// BelowShareEvictions when its queue's bound pods asked for no more CPU than
// its deserved share, and in LenderEvictions when it is a lender's).
func (c *Cluster) EvictPod(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	if !ok || p.t.NodeName == "" || p.t.Phase.Terminal() {
		return
	}
	q := p.job.spec.Queue
	if d, ok := c.deserved[q]; ok && c.used[q].Get(api.CPU) <= d {
		c.stats.BelowShareEvictions++
	}
	c.unbookLocked(p)
	delete(c.pods, uid)
	delete(p.job.pods, uid)
	if n := c.nodes[p.t.NodeName]; n != nil {
		delete(n.pods, uid)
	}
	for _, ca := range c.caches {
		ca.DeleteTask(uid)
	}
	c.stats.Events++
	c.stats.ReclaimEvicted++
	c.stats.ReclaimEvictedCPU += p.t.Request.Get(api.CPU)
	if c.lenders[q] {
		c.stats.LenderEvictions++
	}
	c.newPodLocked(p.job, p.t.Name+"-r", p.t.SchedulerName, c.Now())
}

// setLenders names the lending leaves (for LenderEvictions).
func (c *Cluster) setLenders(ls []workload.LeafQueue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lenders = map[string]bool{}
	for _, l := range ls {
		c.lenders[l.Name] = true
	}
}

// reclaimWatch follows the lenders from the switch on.
type reclaimWatch struct {
	mu       sync.Mutex
	at       time.Duration
	started  bool
	lenders  []workload.LeafQueue
	deserved map[string]int64
	caps     map[string]int64 // parent → capability (milli-CPU)
	free     map[string]int64 // parent → free at the switch
	reached  map[string]time.Duration
	asked    map[string]bool // lenders that asked for anything
	lastUsed map[string]int64
}

func newReclaimWatch(w *workload.Workload, tree *api.Tree, end time.Duration) *reclaimWatch {
	_, lenders := w.ReclaimSides()
	r := &reclaimWatch{at: time.Duration(w.Reclaim.At * float64(end)), lenders: lenders, deserved: map[string]int64{},
		caps: map[string]int64{}, free: map[string]int64{}, reached: map[string]time.Duration{}, asked: map[string]bool{}, lastUsed: map[string]int64{}}
	for _, l := range lenders {
		spec, _ := tree.Get(l.Name)
		r.deserved[l.Name] = spec.Deserved.Get(api.CPU)
		if ps, ok := tree.Get(l.Parent); ok {
			if c, set := ps.Capability.Get(api.CPU); set {
				r.caps[l.Parent] = c
			}
		}
	}
	return r
}

// observe takes one sample at virtual time vt.
func (r *reclaimWatch) observe(vt time.Duration, sm sample, leaves []workload.LeafQueue) {
	if vt < r.at {
		return
	}
	if !r.started {
		r.started = true
		used := map[string]int64{}
		for _, l := range leaves {
			used[l.Parent] += sm.leafUsed[l.Name]
		}
		for p, c := range r.caps {
			r.free[p] = max(0, c-used[p])
		}
	}
	for _, l := range r.lenders {
		used, pend := sm.leafUsed[l.Name], sm.leafPending[l.Name]
		r.lastUsed[l.Name] = used
		if used+pend > 0 {
			r.asked[l.Name] = true
		}
		if _, done := r.reached[l.Name]; done || !r.asked[l.Name] {
			continue
		}
		target := min(r.deserved[l.Name], used+pend)
		// Within what one pod is off (8 CPU at most here): jobs are whole.
		if target > 0 && used >= target-8000 {
			r.reached[l.Name] = vt - r.at
		}
	}
}

// figures fills the run's reclaim figures.
func (r *reclaimWatch) figures(st Stats, end time.Duration) *report.Reclaim {
	out := &report.Reclaim{At: r.at.Seconds(), Lenders: len(r.lenders)}
	var times []float64
	for _, l := range r.lenders {
		if !r.asked[l.Name] {
			continue
		}
		out.Asking++
		if d, ok := r.reached[l.Name]; ok {
			times = append(times, d.Seconds())
		} else {
			out.NeverReached++
			times = append(times, (end - r.at).Seconds())
		}
	}
	sort.Float64s(times)
	if len(times) > 0 {
		out.ReachP50 = quantile(times, 0.5)
		out.ReachP99 = quantile(times, 0.99)
	}
	// The least that had to be taken back: per parent, what its lenders
	// hold at the end (up to their deserved shares) beyond what the
	// parent had free at the switch.
	got := map[string]int64{}
	for _, l := range r.lenders {
		got[l.Parent] += min(r.lastUsed[l.Name], r.deserved[l.Name])
	}
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range got {
			if !yield(p) {
				return
			}
		}
	}) {
		out.NeededCPU += float64(max(0, got[p]-r.free[p])) / 1000
	}
	out.EvictedPods = st.ReclaimEvicted
	out.EvictedCPU = float64(st.ReclaimEvictedCPU) / 1000
	if out.NeededCPU > 0 {
		out.EvictedPerNeeded = out.EvictedCPU / out.NeededCPU
	}
	out.Loops, out.LenderEvictions = st.BelowShareEvictions, st.LenderEvictions
	return out
}

func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *reclaimWatch) String() string {
	return fmt.Sprintf("reclaim watch from %s: %d lenders", r.at, len(r.lenders))
}
