package scheduler

import (
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
)

// statusEvery is how often (on the scheduler's clock) queue status is
// recomputed; the status batcher coalesces what it gets anyway.
const statusEvery = 200 * time.Millisecond

// SetTree gives the scheduler the queue hierarchy, for fair share against
// deserved resources and weights and for the status of parent queues. Safe
// for concurrent use.
func (s *Scheduler) SetTree(t *api.Tree) {
	s.mu.Lock()
	s.tree = t
	s.mu.Unlock()
}

// Tree returns the queue hierarchy last given to SetTree (nil if none).
func (s *Scheduler) Tree() *api.Tree {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree
}

// QueueStatuses returns the last status computed for each queue this shard
// owns (leaf and parent queues), for metrics.
func (s *Scheduler) QueueStatuses() map[string]api.QueueStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]api.QueueStatus, len(s.queueStat))
	for q, st := range s.queueStat {
		st.Allocated = st.Allocated.Clone()
		out[q] = st
	}
	return out
}

// queueShares is each owned queue's weighted dominant share: for every
// resource, what its bound tasks use over what it deserves (or, when
// deserved is unset, over the cluster's allocatable), the largest of these,
// divided by the queue's weight. Lower goes first.
func (s *Scheduler) queueShares(byQueue map[string][]*api.Job) map[string]float64 {
	total, _ := s.snap.Allocatable() // on overflow no share falls back on it
	tree := s.Tree()
	out := map[string]float64{}
	for q, js := range byQueue {
		used := api.Resource{}
		for _, j := range js {
			used, _ = used.Add(s.summary(j).Allocated)
		}
		var spec api.QueueSpec
		if tree != nil {
			spec, _ = tree.Get(q)
		}
		share := 0.0
		for _, d := range used.Dims() {
			if d == api.Pods {
				continue
			}
			denom := spec.Deserved.Get(d)
			if denom <= 0 {
				denom = total.Get(d)
			}
			if denom > 0 {
				share = max(share, float64(used.Get(d))/float64(denom))
			}
		}
		if spec.Weight > 1 {
			share /= float64(spec.Weight)
		}
		out[q] = share
	}
	return out
}

// writeStatus hands the status of every queue this shard owns to the
// batcher: a leaf counts its own jobs, a parent queue the jobs of all its
// descendants (the owner of a parent reads them from its cache, which sees
// every job, so no shard writes another's queue).
func (s *Scheduler) writeStatus(jobs []*api.Job) {
	now := s.cfg.Now()
	if now.Sub(s.lastStatus) < statusEvery {
		return
	}
	s.lastStatus = now
	tree := s.Tree()
	pathOf := func(q string) []string {
		if tree != nil {
			if p, err := tree.Path(q); err == nil {
				return p
			}
		}
		return []string{q}
	}
	// Only the jobs under a queue this shard holds count here: a leaf
	// held by no one of its path is another shard's to count.
	counts := map[string]bool{} // leaf → some queue of its path is held here
	leaf := map[string]*api.QueueStatus{}
	for _, j := range jobs {
		c, ok := counts[j.Queue]
		if !ok {
			c = slices.ContainsFunc(pathOf(j.Queue), s.holdsQueue)
			counts[j.Queue] = c
		}
		if !c {
			continue
		}
		st := leaf[j.Queue]
		if st == nil {
			st = &api.QueueStatus{}
			leaf[j.Queue] = st
		}
		sum := s.summary(j)
		st.Allocated, _ = st.Allocated.Add(sum.Allocated)
		adm := s.isAdmitted(j.UID)
		switch {
		case sum.Bound >= int(max(j.MinMember, 1)):
			st.Running++
		case adm || j.Phase == api.JobInqueue: // admitted here, or by the owner of a child queue
			st.Inqueue++
		case sum.Pending > 0 || j.Phase == api.JobPending:
			st.Pending++
		}
	}
	// Roll leaf figures up to every ancestor.
	all := map[string]api.QueueStatus{}
	for q, st := range leaf {
		for _, a := range pathOf(q) {
			agg := all[a]
			agg.Allocated, _ = agg.Allocated.Add(st.Allocated)
			agg.Pending += st.Pending
			agg.Running += st.Running
			agg.Inqueue += st.Inqueue
			all[a] = agg
		}
	}
	owned := map[string]api.QueueStatus{}
	var names []string
	if tree != nil {
		names = tree.Names()
	} else {
		for q := range all {
			names = append(names, q)
		}
	}
	for _, q := range names {
		if !s.holdsQueue(q) {
			continue
		}
		st := all[q]
		owned[q] = st
		s.deps.Status.SetQueue(q, st)
	}
	s.mu.Lock()
	s.queueStat = owned
	s.mu.Unlock()
}
