// Quota taken back (reclaim and preemption): the preemptor's side asks the
// coordinator with its terms and waits, nominated, for its victims; the
// victims' queue owners evict their pods and give the quota back.

package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
	"github.com/shardsched/shardsched/wire"
)

// Evictor evicts the pods of jobs that must give quota back, and records
// why. Optional (Deps.Evictor): without it this shard neither asks for
// quota to be taken back nor evicts.
type Evictor interface {
	// Evict evicts one pod (UID precondition: a pod of the same name
	// that is another object is left alone) and records an event on it
	// naming why. A pod already gone is not an error. Called concurrently;
	// blocks for one API call.
	Evict(ctx context.Context, t *api.Task, reason, message string) error
	// Note records a normal event on a job's PodGroup. Called
	// concurrently; must not block.
	Note(j *api.Job, reason, message string)
}

const (
	// evictionsEvery is how often the marked reservations are read from
	// the coordinator.
	evictionsEvery = 500 * time.Millisecond
	// evictAgainAfter is how long an evicted pod that is still bound waits
	// before it is evicted again (a refusal by a disruption budget, a lost
	// call).
	evictAgainAfter = 15 * time.Second
	// nominatedRetry is how often a job whose reservation is nominated
	// asks again (it is promoted at the first ask after its victims went).
	nominatedRetry = 250 * time.Millisecond
	// quietFor is how long the owner sees a victim's placement quiet (no
	// claim record, no bind of its own in flight) before it takes its
	// reservation down: the last binds of a claimer that gave the job back
	// reach this shard's informer after its claim record's deletion
	// reached it through etcd.
	quietFor = time.Second
)

// terms are what job j brings to its reservation (loop only): its
// priority, whether it or a pod of it is protected, its age, and whether
// it may take quota back (only where this shard can evict).
func (s *Scheduler) terms(j *api.Job) *wire.Terms {
	t := &wire.Terms{Priority: s.priority(j), Protected: j.Protected, Reclaim: s.deps.Evictor != nil}
	if !j.Created.IsZero() {
		t.Created = j.Created.UnixNano()
	}
	if !t.Protected {
		// The cycle's snapshot has the tasks of every job with pending
		// ones (every job admission asks for), without a cache lock.
		t.Protected = s.snap.AnyProtected(j.Namespace, j.Name)
	}
	return t
}

// shortLately reports whether a job of queue q was refused for quota in
// the last 2 s.
func (s *Scheduler) shortLately(q string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.queueShort[q]
	if ok && now.Sub(at) >= 2*time.Second {
		delete(s.queueShort, q)
		return false
	}
	return ok
}

// couldRun reports whether j's gang (its first minMember − bound pending
// tasks) would fit this shard's nodes were they empty: the placement
// simulated before quota is taken back for it, with every filter
// (selectors, taints, sizes). A job with no pending task yet (admitted by
// its minResources, pods to come) and a shard with no node while others
// exist are given the benefit of the doubt (its pods may go to another
// shard's nodes). Loop only.
func (s *Scheduler) couldRun(j *api.Job, pending []*api.Task, bound int) bool {
	need := max(int(j.MinMember)-bound, 1)
	if len(pending) == 0 {
		return true
	}
	// Once per job and shape of its pending tasks: the answer is about
	// node sizes and filters, which change rarely.
	key := runnableKey{pending: len(pending), bound: bound, version: j.ResourceVersion}
	if m, ok := s.runnable[j.UID]; ok && m.key == key {
		return m.ok
	}
	ok := s.couldRunNow(pending, need)
	s.runnable[j.UID] = runnableMemo{key: key, ok: ok}
	return ok
}

// runnableKey is what couldRun's answer for a job depends on.
type runnableKey struct {
	pending, bound int
	version        string
}

type runnableMemo struct {
	key runnableKey
	ok  bool
}

// couldRunNow is couldRun without the memo: the first need of pending on
// this shard's nodes, emptied, with the node sample placement uses.
func (s *Scheduler) couldRunNow(pending []*api.Task, need int) bool {
	nodes := s.snap.Nodes()
	var empty []*api.NodeBooks
	for _, b := range nodes {
		if !b.OutOfSync && !b.Node.Unschedulable {
			empty = append(empty, &api.NodeBooks{Node: b.Node, Generation: b.Generation})
		}
	}
	if len(empty) == 0 || len(pending) < need {
		return s.deps.Peers != nil && len(s.deps.Peers.Members()) > 1
	}
	pc := s.place
	pc.Sample = nodeSample(len(empty))
	if placement.PlaceGang(pc, pending[:need], empty, need, s.rng).OK {
		return true
	}
	return s.deps.Peers != nil && len(s.deps.Peers.Members()) > 1
}

// nominated records, for a job whose reservation is nominated, that it
// waits for its victims: its condition says whom, and when it first waited
// (for the time to running of reclaimed quota). Called concurrently by
// admit's workers.
func (s *Scheduler) nominated(j *api.Job, res wire.Result) {
	s.mu.Lock()
	rec := s.rec(j.UID)
	first := rec.nominatedAt.IsZero()
	if first {
		rec.nominatedAt = s.cfg.Now()
	}
	s.mu.Unlock()
	reason, why := "Reclaiming", "reclaim"
	var names []string
	for _, v := range res.Victims {
		if v.Evict != nil && v.Evict.Reason == wire.ReasonPreempt {
			reason, why = "Preempting", "preempt"
		}
		what := v.Job.Namespace + "/" + v.Job.Name + " in queue " + v.Queue
		if v.Evict != nil && !v.Evict.Whole {
			what += " (its pods beyond its gang)"
		}
		names = append(names, what)
	}
	if first {
		s.obs.Victims(len(res.Victims))
	}
	msg := fmt.Sprintf("quota held for it in queue %q; waiting for %d victim(s) to go (%s): %s", j.Queue, len(names), why, strings.Join(names, ", "))
	if len(names) == 0 {
		msg = fmt.Sprintf("quota held for it in queue %q; admitted at its next ask once what victims give back is free", j.Queue)
	}
	s.waiting(j, reason, msg)
}

// takeBack carries out the evictions marked on the reservations of jobs in
// queues this shard owns (loop only): a job to go whole loses every pod and
// then its reservation; a job to come down loses its pods beyond its gang,
// the lowest priority and youngest first, until what it has bound fits the
// target, then its reservation is resized to it. Jobs marked anywhere are
// not placed further (marked).
func (s *Scheduler) takeBack(ctx context.Context) {
	if s.deps.Evictor == nil {
		return
	}
	now := s.cfg.Now()
	if now.Sub(s.lastEvictPoll) >= evictionsEvery {
		s.lastEvictPoll = now
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		res, err := s.deps.Quota.Evictions(cctx)
		cancel()
		if err != nil {
			s.log.Warn("evictions not read", "err", err)
		} else {
			prev := s.marked
			s.marked = make(map[string]wire.Reservation, len(res.Reservations))
			for _, r := range res.Reservations {
				if r.Evict != nil {
					s.marked[r.Job.UID] = r
				}
			}
			// A job no longer marked gave its quota back (its queue's
			// owner released or shrank its reservation, maybe not this
			// shard): what this shard knew of its reservation is stale,
			// and is learnt again before anything more of it is placed.
			s.mu.Lock()
			for uid := range prev {
				if _, still := s.marked[uid]; !still {
					if rec := s.jobs[uid]; rec != nil && rec.cover != nil {
						rec.setCover(nil)
						s.tidy(uid)
					}
				}
			}
			s.mu.Unlock()
		}
	}
	if len(s.marked) == 0 {
		clear(s.quietSince)
		return
	}
	// A shard placing a marked job under a claim gives the claim back: no
	// bind starts under it any more, and the record goes once the binds in
	// flight end, which tells the queue's owner that nobody else places
	// the job (below).
	if s.handoffOn() {
		for uid := range s.marked {
			if !s.deps.Claims.Holds(uid) {
				continue
			}
			if c, ok := s.deps.Claims.Lookup(uid); ok && !c.Unknown && c.State == wire.Claimed {
				s.dropClaim(ctx, c, "it gives quota back")
			}
		}
	}
	for uid := range s.quietSince {
		if _, ok := s.marked[uid]; !ok {
			delete(s.quietSince, uid)
		}
	}
	byUID := make(map[string]*api.Job, len(s.marked))
	for uid := range s.marked {
		if j, ok := s.snap.JobByUID(uid); ok {
			byUID[uid] = j
		}
	}
	type evictReq struct {
		t   *api.Task
		j   *api.Job
		msg string
		why string
	}
	var evicts []evictReq
	var releases, shrinks []wire.Reservation
	for uid, r := range s.marked {
		if !s.deps.Ownership.Holds(wire.QueueKey(r.Queue)) {
			continue
		}
		j := byUID[uid]
		if j == nil {
			continue // the job is gone: releaseGone and reconciliation give its quota back
		}
		ev := r.Evict
		sum := s.summary(j)
		msg := fmt.Sprintf("%s by job %s/%s of queue %q", reasonWord(ev.Reason), ev.By.Namespace, ev.By.Name, ev.ByQueue)
		if ev.Reason == wire.ReasonReclaim {
			msg += fmt.Sprintf(": queue %q is above its deserved share and %q takes back what it lent", r.Queue, ev.ByQueue)
		} else {
			msg += ": a job of higher priority in the same queue"
		}
		// The reservation comes down only once nothing more of the job
		// can be bound: this shard does not place a marked job, so what
		// it waits for is any other placer and its own binds in flight.
		quiet := s.placementQuiet(j, now)
		var out []*api.Task
		if ev.Whole {
			if sum.Bound == 0 {
				if quiet {
					releases = append(releases, r)
				}
				continue
			}
			out = s.boundTasks(j)
		} else {
			use := jobUse(sum)
			if use.LessEqual(ev.To) {
				if quiet {
					shrinks = append(shrinks, r)
				}
				continue
			}
			out = s.beyond(j, use, ev.To)
		}
		for _, t := range out {
			if last, ok := s.evicted[t.UID]; ok && now.Sub(last) < evictAgainAfter {
				continue
			}
			s.evicted[t.UID] = now
			evicts = append(evicts, evictReq{t: t, j: j, msg: msg, why: ev.Reason})
		}
	}
	parallel(evicts, s.cfg.AdmitParallelism, func(e evictReq) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Evictor.Evict(cctx, e.t, "Preempted", e.msg)
		cancel()
		if err != nil {
			s.log.Warn("eviction failed", "pod", e.t.Key(), "err", err)
			return
		}
		s.obs.Evicted(e.why)
		s.log.Info("evicted", "pod", e.t.Key(), "job", e.j.Key(), "reason", e.why)
	})
	parallel(releases, s.cfg.AdmitParallelism, func(r wire.Reservation) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, err := s.deps.Quota.Release(cctx, r.Job.UID)
		cancel()
		if err != nil {
			s.log.Warn("victim's reservation not released", "job uid", r.Job.UID, "err", err)
			return
		}
		s.dropReservation(r.Job.UID)
		if j := byUID[r.Job.UID]; j != nil {
			s.deps.Evictor.Note(j, "Preempted", fmt.Sprintf("its pods are gone and its quota given to job %s/%s of queue %q (%s); its new pods wait for quota again",
				r.Evict.By.Namespace, r.Evict.By.Name, r.Evict.ByQueue, r.Evict.Reason))
		}
	})
	parallel(shrinks, s.cfg.AdmitParallelism, func(r wire.Reservation) {
		// The reservation may have shrunk in some dimension since the
		// plan (a task finished): never ask to raise one.
		to := api.Resource{}
		for _, d := range r.Evict.To.Dims() {
			to = to.With(d, min(r.Evict.To.Get(d), r.Amount.Get(d)))
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		res, err := s.deps.Quota.Resize(cctx, r.Job.UID, nil, []api.Resource{to})
		cancel()
		if err != nil || res.Granted == 0 {
			s.log.Warn("victim's reservation not shrunk", "job uid", r.Job.UID, "err", err)
			return
		}
		s.mu.Lock()
		if rec := s.jobs[r.Job.UID]; rec != nil && rec.cover != nil {
			amount := res.Reservation.Amount
			rec.setCover(&amount)
		}
		s.mu.Unlock()
		if j := byUID[r.Job.UID]; j != nil {
			s.deps.Evictor.Note(j, "Preempted", fmt.Sprintf("its pods beyond its gang were evicted and their quota given to job %s/%s of queue %q (%s)",
				r.Evict.By.Namespace, r.Evict.By.Name, r.Evict.ByQueue, r.Evict.Reason))
		}
	})
	for _, r := range slices.Concat(releases, shrinks) {
		delete(s.marked, r.Job.UID) // done; the next read confirms it
	}
	for uid, at := range s.evicted {
		if now.Sub(at) > 4*evictAgainAfter {
			delete(s.evicted, uid)
		}
	}
}

// placementQuiet reports whether nobody but this shard may place j (no
// claim record) and no bind of it is in flight here, and has been so for
// quietFor. Loop only.
func (s *Scheduler) placementQuiet(j *api.Job, now time.Time) bool {
	quiet := s.jobBinds(j.UID) == 0 && (!s.handoffOn() || s.deps.Claims.OwnerMayPlace(j.UID, j.Queue))
	if !quiet {
		delete(s.quietSince, j.UID)
		return false
	}
	since, ok := s.quietSince[j.UID]
	if !ok {
		s.quietSince[j.UID] = now
		return false
	}
	return now.Sub(since) >= quietFor
}

func reasonWord(reason string) string {
	if reason == wire.ReasonPreempt {
		return "preempted"
	}
	return "reclaimed"
}

// isMarked reports whether j must give quota back: nothing more of it is
// placed, and its reservation does not grow (loop only).
func (s *Scheduler) isMarked(uid string) bool {
	_, ok := s.marked[uid]
	return ok
}

// boundTasks are j's bound tasks that are not already leaving.
func (s *Scheduler) boundTasks(j *api.Job) []*api.Task {
	var out []*api.Task
	for _, t := range s.deps.Cache.JobTasks(j.Namespace, j.Name) {
		if t.NodeName != "" && !t.Phase.Terminal() && t.Phase != api.TaskReleasing {
			out = append(out, &t)
		}
	}
	return out
}

// beyond picks the bound tasks of j to evict so that what stays bound fits
// in to: the lowest priority first, then the youngest. Tasks already
// leaving count as gone.
func (s *Scheduler) beyond(j *api.Job, use, to api.Resource) []*api.Task {
	left := use
	for _, t := range s.deps.Cache.JobTasks(j.Namespace, j.Name) {
		if t.NodeName != "" && t.Phase == api.TaskReleasing {
			left, _ = left.Sub(taskQuota(&t))
		}
	}
	cands := s.boundTasks(j)
	slices.SortFunc(cands, func(a, b *api.Task) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), b.Created.Compare(a.Created), cmp.Compare(a.UID, b.UID))
	})
	var out []*api.Task
	for _, t := range cands {
		if left.LessEqual(to) {
			break
		}
		out = append(out, t)
		left, _ = left.Sub(taskQuota(t))
	}
	return out
}
