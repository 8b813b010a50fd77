// Node-level room: a job admitted within its quota that cannot be placed
// because pods of lower priority fill the nodes evicts on the fewest nodes
// that make its gang fit, and holds them for itself while they drain.

package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
)

// nodePreemptAgain is how long a job that evicted for room waits before it
// evicts again (its victims are leaving; its hold keeps the room);
// nodePreemptRetry how long one that found nothing to evict waits before it
// looks again (the search reads every job).
const (
	nodePreemptAgain = 15 * time.Second
	nodePreemptRetry = 2 * time.Second
)

// roomTry is a job's last search for room (loop only).
type roomTry struct {
	at      time.Time
	evicted bool
}

// nodeVictim is one bound task that may be evicted for room.
type nodeVictim struct {
	t   api.Task
	job *api.Job
	// prio is its job's priority.
	prio int32
}

// preemptForRoom is called for j, admitted and placed by this shard as its
// queue's owner, whose gang (the first need of gang) does not fit on nodes
// and was offered to no other shard. It simulates the gang's placement on
// copies of the nodes with the bound tasks of lower-priority, unprotected
// jobs taken off, the nodes that free the most first, one more node at a
// time: on the fewest nodes where the gang fits, it evicts (per node, the
// lowest priority and youngest first, only until the tasks planned there
// fit; a victim job that would fall below its minMember loses every pod)
// and holds those nodes for j. Nothing is evicted when the gang would not
// fit even then. It reports whether it evicted. Loop only.
func (s *Scheduler) preemptForRoom(ctx context.Context, j *api.Job, gang []*api.Task, need int, nodes []*api.NodeBooks) bool {
	now := s.cfg.Now()
	if s.deps.Evictor == nil || len(gang) < need {
		return false
	}
	if last, ok := s.roomTried[j.UID]; ok && (last.evicted && now.Sub(last.at) < nodePreemptAgain || now.Sub(last.at) < nodePreemptRetry) {
		return false
	}
	s.roomTried[j.UID] = roomTry{at: now}
	prio := s.priority(j)
	mine := make(map[string]*api.NodeBooks, len(nodes))
	for _, b := range nodes {
		if !b.OutOfSync && !b.Node.Unschedulable {
			mine[b.Node.Name] = b
		}
	}
	// Victims on these nodes: bound tasks of running jobs of lower
	// priority, not leaving. A job is not a victim when it or any of its
	// pods not yet finished is protected: a victim left below its gang
	// loses every pod (below), so one protected pod protects its job, as
	// in reclaim (terms, which also counts finished pods).
	byNode := map[string][]nodeVictim{}
	for _, v := range s.snap.Jobs() {
		if v.UID == j.UID || v.Protected {
			continue
		}
		vp := s.priority(v)
		if vp >= prio {
			continue
		}
		tasks := s.deps.Cache.JobTasks(v.Namespace, v.Name)
		if slices.ContainsFunc(tasks, func(t api.Task) bool { return t.Protected && !t.Phase.Terminal() }) {
			continue
		}
		for _, t := range tasks {
			if t.NodeName == "" || t.Phase.Terminal() || t.Phase == api.TaskReleasing || mine[t.NodeName] == nil {
				continue
			}
			byNode[t.NodeName] = append(byNode[t.NodeName], nodeVictim{t: t, job: v, prio: vp})
		}
	}
	if len(byNode) == 0 {
		return false
	}
	type cand struct {
		name string
		free int64 // milli-CPU its victims free
	}
	var cands []cand
	for n, vs := range byNode {
		var f int64
		for _, v := range vs {
			f += v.t.Request.Get(api.CPU)
		}
		cands = append(cands, cand{n, f})
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.name, b.name)) })
	pc := s.place
	pc.Sample = 0
	tasks := gang[:need]
	emptied := map[string]bool{}
	var plan placement.Result
	for _, c := range cands {
		emptied[c.name] = true
		view := make([]*api.NodeBooks, 0, len(nodes))
		for _, b := range nodes {
			if !emptied[b.Node.Name] {
				view = append(view, b)
				continue
			}
			cp := *b
			for _, v := range byNode[b.Node.Name] {
				cp.Used, _ = cp.Used.Sub(v.t.Request)
			}
			view = append(view, &cp)
		}
		plan = placement.PlaceGang(pc, tasks, view, need, nil)
		if plan.OK {
			break
		}
	}
	if !plan.OK {
		return false // it would not fit even with every lower-priority pod gone
	}
	// Per node the plan uses, the victims to evict: lowest priority, then
	// youngest, until what is planned there fits.
	planned := map[string]api.Resource{}
	for _, t := range tasks {
		if node, ok := plan.Assignments[t.UID]; ok {
			planned[node], _ = planned[node].Add(t.Request)
		}
	}
	evict := map[string]nodeVictim{}
	held := map[string]bool{}
	for node, want := range planned {
		b := mine[node]
		if b == nil {
			continue
		}
		held[node] = true
		free := b.Idle()
		vs := slices.Clone(byNode[node])
		slices.SortFunc(vs, func(a, b nodeVictim) int {
			return cmp.Or(cmp.Compare(a.prio, b.prio), b.t.Created.Compare(a.t.Created), cmp.Compare(a.t.UID, b.t.UID))
		})
		for _, v := range vs {
			if want.With(api.Pods, 0).LessEqual(free.With(api.Pods, 0)) {
				break
			}
			evict[v.t.UID] = v
			free, _ = free.Add(v.t.Request)
		}
	}
	// Gangs stay whole: a victim job left below its minMember loses all.
	perJob := map[string]int{}
	for _, v := range evict {
		perJob[v.job.UID]++
	}
	for _, vs := range byNode {
		for _, v := range vs {
			if n := perJob[v.job.UID]; n > 0 && s.summary(v.job).Bound-n < int(max(v.job.MinMember, 1)) {
				for _, t := range s.deps.Cache.JobTasks(v.job.Namespace, v.job.Name) {
					if t.NodeName != "" && !t.Phase.Terminal() && t.Phase != api.TaskReleasing {
						evict[t.UID] = nodeVictim{t: t, job: v.job, prio: v.prio}
					}
				}
			}
		}
	}
	if len(evict) == 0 {
		return false
	}
	s.roomTried[j.UID] = roomTry{at: now, evicted: true}
	if s.held.byJob[j.UID] == nil {
		s.heldBefore[j.UID] = now
		s.stats.holds.Add(1)
	}
	s.held.set(j.UID, held, now)
	msg := fmt.Sprintf("preempted by job %s/%s of queue %q (priority %d): it is admitted within its quota and needs this node's room", j.Namespace, j.Name, j.Queue, prio)
	list := make([]nodeVictim, 0, len(evict))
	for _, v := range evict {
		list = append(list, v)
	}
	s.log.Info("evicting for room", "job", j.Key(), "pods", len(list), "nodes", len(held))
	parallel(list, s.cfg.AdmitParallelism, func(v nodeVictim) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Evictor.Evict(cctx, &v.t, "Preempted", msg)
		cancel()
		if err != nil {
			s.log.Warn("eviction for room failed", "pod", v.t.Key(), "err", err)
			return
		}
		s.obs.Evicted("node")
	})
	s.deps.Evictor.Note(j, "Preempting", fmt.Sprintf("%d pod(s) of lower priority evicted on %d node(s) held for it; it is placed once they are gone", len(list), len(held)))
	return true
}
