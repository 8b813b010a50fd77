// Implicit PodGroups: the one group of a plain workload's pods (pods that
// name none), created and deleted by the owner of the queue they ask for.

package scheduler

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// implicitGroups creates the implicit PodGroup of pending pods that name
// none (one per workload, in the queue the pod asks for, by that queue's
// owner) and deletes implicit PodGroups with no pod left, with UID and
// resourceVersion preconditions (F4).
// byQueue holds the jobs of the queues this shard holds.
func (s *Scheduler) implicitGroups(ctx context.Context, byQueue map[string][]*api.Job) {
	if s.deps.Groups == nil {
		return
	}
	now := s.cfg.Now()
	for k, t := range s.groupOps {
		if now.Sub(t) > 2*time.Second {
			delete(s.groupOps, k)
		}
	}
	created := map[jobKey]bool{}
	for _, t := range s.snap.PendingTasks() {
		if !t.Implicit || t.SchedulerName != s.cfg.SchedulerName || t.NodeName != "" {
			continue
		}
		jk := jobKey{t.Namespace, t.Job}
		if _, have := s.snap.JobByName(t.Namespace, t.Job); have || created[jk] {
			continue
		}
		key := t.Namespace + "/" + t.Job
		if _, recent := s.groupOps[key]; recent {
			continue // created a moment ago; the informer has not shown it yet
		}
		q := t.Queue
		if q == "" {
			q = api.DefaultQueue
		}
		if !s.deps.Ownership.Holds(wire.QueueKey(q)) {
			continue
		}
		created[jk] = true
		s.groupOps[key] = now
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Groups.CreatePodGroup(cctx, t.Namespace, t.Job, q, 1)
		cancel()
		if err != nil {
			s.log.Warn("create implicit podgroup", "podgroup", key, "err", err)
		}
	}
	for _, q := range slices.Sorted(maps.Keys(byQueue)) {
		for _, j := range byQueue[q] {
			s.dropImplicit(ctx, j, now)
		}
	}
}

// dropImplicit deletes j, a job of a queue this shard holds, if it is an
// implicit PodGroup with no pod left.
func (s *Scheduler) dropImplicit(ctx context.Context, j *api.Job, now time.Time) {
	if !j.Implicit {
		return
	}
	if sum := s.summary(j); sum.Pending+sum.Bound+sum.Done > 0 {
		return
	}
	if s.since(j.Created) < 2*time.Second {
		return // give a new group's first pod time to show up
	}
	if _, recent := s.groupOps[j.UID]; recent {
		return
	}
	s.groupOps[j.UID] = now
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	err := s.deps.Groups.DeletePodGroup(cctx, j.Namespace, j.Name, j.UID, j.ResourceVersion)
	cancel()
	if err != nil {
		s.log.Warn("delete implicit podgroup", "podgroup", j.Key(), "err", err)
	}
}
