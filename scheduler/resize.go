package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/wire"
)

// Reconciliation: a queue's owner compares the coordinator's reservations
// of its queues with the jobs that exist, when it takes a queue and every
// ReconcileEvery after, and releases the orphans: reservations whose job is
// gone (matched by UID) or has no pending and no bound task while nobody
// here admitted it (it ended while its queue changed owner). A reservation
// is released only when found orphaned by two passes OrphanGrace apart, so
// a job the informer has not shown yet is not mistaken for a gone one.
const (
	reconcileEvery = 10 * time.Second
	orphanGrace    = 5 * time.Second
)

// reconcile runs one pass when due (loop only). byQueue holds the jobs of
// the queues this shard owns.
func (s *Scheduler) reconcile(ctx context.Context, byQueue map[string][]*api.Job) {
	tree := s.Tree()
	now := s.cfg.Now()
	if tree == nil || now.Sub(s.lastOwnedCheck) < time.Second {
		return // a queue taken is noticed within a second
	}
	s.lastOwnedCheck = now
	owned := map[string]bool{}
	taken := false
	for _, q := range tree.Names() {
		if s.deps.Ownership.Holds(wire.QueueKey(q)) {
			owned[q] = true
			taken = taken || !s.reconQueues[q]
		}
	}
	s.reconQueues = owned
	every := reconcileEvery
	if len(s.orphans) > 0 {
		every = orphanGrace // confirm the suspects sooner
	}
	if len(owned) == 0 || (!taken && now.Sub(s.lastRecon) < every) {
		return
	}
	s.lastRecon = now
	jobs := map[string]*api.Job{}
	for _, js := range byQueue {
		for _, j := range js {
			jobs[j.UID] = j
		}
	}
	// The jobs admitted here, taken before the list: each was answered, so
	// its reservation is in the list unless it is gone. The list asks only
	// for the queues held here and those the admitted jobs' reservations
	// were made in (a PodGroup moved to a queue held here keeps its
	// reservation where it was until it fits in the new one): a cluster's
	// reservations are many more, and every shard reconciles.
	ask := maps.Clone(owned)
	admitted := s.admittedAmong(jobs, ask)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	list, err := s.deps.Quota.List(cctx, slices.Sorted(maps.Keys(ask))...)
	cancel()
	if err != nil {
		s.log.Warn("reconciliation: reservations not listed", "err", err)
		return
	}
	s.forgetLost(admitted, list.Reservations, jobs)
	seen := map[string]bool{}
	var release []string
	for _, r := range list.Reservations {
		uid := r.Job.UID
		if !owned[r.Queue] || (r.State == wire.Nominated && s.live(uid)) || !s.orphaned(uid, jobs) ||
			(!s.live(uid) && s.podsStillBound(r.Job.Namespace, r.Job.Name)) {
			continue
		}
		seen[uid] = true
		first, ok := s.orphans[uid]
		switch {
		case !ok:
			s.orphans[uid] = now
		case now.Sub(first) >= orphanGrace:
			release = append(release, uid)
		}
	}
	for uid := range s.orphans {
		if !seen[uid] {
			delete(s.orphans, uid)
		}
	}
	parallel(release, s.cfg.AdmitParallelism, func(uid string) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, err := s.deps.Quota.Release(cctx, uid)
		cancel()
		if err != nil {
			s.log.Warn("reconciliation: orphan not released", "job uid", uid, "err", err)
			return
		}
		s.log.Info("reconciliation: released a reservation with no job to cover", "job uid", uid)
		s.stats.orphans.Add(1)
	})
	for _, uid := range release {
		delete(s.orphans, uid)
	}
}

// admittedAmong returns the UIDs of jobs (of the queues this shard owns)
// that this shard holds a reservation for, and adds to queues the queue
// each reservation was made in (not the job's queue when its PodGroup
// moved since).
func (s *Scheduler) admittedAmong(jobs map[string]*api.Job, queues map[string]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var uids []string
	for uid := range jobs {
		if a := s.peek(uid).admission; a != nil {
			uids = append(uids, uid)
			queues[a.queue] = true
		}
	}
	return uids
}

// forgetLost forgets the admissions among admitted whose reservation is
// not in list, so that admit, later in the cycle, asks again (Reserve is
// idempotent by UID: a reservation that does exist is only returned).
//
// A tentative reservation lives on the lease of the session it was asked
// under, and this shard's session can be replaced while the job's pods are
// still to be placed (the process paused, or cut off from etcd, past its
// TTL). The owner otherwise learns of the loss only at Confirm, which needs
// the gang bound; a job placed by another shard (a claim) is never bound
// then, because its claimer binds only what a resize of the reservation
// covers, and the resize finds nothing: the job would wait for ever (found
// by the fault runs: bench/realbench -modes faults, sigstop on the
// coordinator's leader).
func (s *Scheduler) forgetLost(admitted []string, list []wire.Reservation, jobs map[string]*api.Job) {
	if len(admitted) == 0 {
		return
	}
	held := make(map[string]bool, len(list))
	for i := range list {
		held[list[i].Job.UID] = true
	}
	for _, uid := range admitted {
		if held[uid] {
			continue
		}
		s.stats.lostReservations.Add(1)
		s.log.Warn("reservation lost (its session's lease expired); admitting again", "job", jobs[uid].Key())
		s.dropReservation(uid)
	}
}

// orphaned reports whether a reservation of uid, in a queue this shard
// owns, covers nothing: its job is gone, or exists with no pending and no
// bound member and is not admitted here.
func (s *Scheduler) orphaned(uid string, jobs map[string]*api.Job) bool {
	if !s.live(uid) {
		return true
	}
	j, ok := jobs[uid]
	if !ok {
		return false
	}
	if s.isAdmitted(uid) {
		return false
	}
	sum := s.summary(j)
	return sum.Pending == 0 && sum.Bound == 0
}

// resizeReq is one reservation to bring to what its job's tasks ask.
// bound is what the job's bound tasks ask now, which the reservation is
// raised to first, capability or not (coordinator.ResizeRequest.Bound):
// an in-place resize of a running pod grows it without asking anyone.
// before is the cover it had when asked (nil: not known here).
type resizeReq struct {
	job     *api.Job
	targets []api.Resource
	bound   api.Resource
	before  *api.Resource
}

// wantResize decides whether the reservation of j, a job this shard
// places, should change: it should cover exactly the job's bound tasks and
// its pending ones (resizeTargets), and this shard does not know its amount
// yet or knows a different one. A refused grow is not asked for again
// before its backoff ends. Loop only.
//
// room is what is free on this shard's nodes and not yet promised to an
// earlier job's grow this cycle: the reservation grows only for the tasks
// that fit in it (resizeTargets), and room shrinks by that growth.
func (s *Scheduler) wantResize(j *api.Job, pending []*api.Task, now time.Time, room *lazyRoom) (resizeReq, bool) {
	sum := s.summary(j)
	key := settleKey{pending: len(pending), bound: sum.Bound, done: sum.Done, version: j.ResourceVersion}
	s.mu.Lock()
	rec := s.peek(j.UID)
	s.mu.Unlock()
	if rec.settledFor(key, sum.Allocated) {
		return resizeReq{}, false // nothing changed since its cover was right
	}
	// Room matters only for tasks beyond the gang's floor.
	grows := len(pending) > max(int(j.MinMember)-sum.Bound, 0)
	free := api.Resource{}
	if grows {
		free = *room.get()
	}
	targets := resizeTargets(j, pending, sum, free)
	if targets[0].IsZero() {
		return resizeReq{}, false // no task: nothing to hold
	}
	use := jobUse(sum)
	var cur api.Resource
	known := rec.cover != nil
	if known {
		cur = *rec.cover
	}
	w, waiting := rec.resizeWait, rec.resizeWait != (quotaBackoff{})
	base := use
	if known {
		base = cur
	}
	if grows {
		room.take(lessClamped(targets[len(targets)-1], base).With(api.Pods, 0))
	}
	if known && cur.Equal(targets[len(targets)-1]) {
		if covered(cur, use, pending) == len(pending) {
			s.mu.Lock()
			if r := s.jobs[j.UID]; r != nil && r.cover != nil && r.cover.Equal(cur) {
				r.settled, r.settledUse = key, sum.Allocated.Clone()
			}
			s.mu.Unlock()
		}
		return resizeReq{}, false
	}
	if known && waiting && now.Before(w.until) {
		// Refused a moment ago. A shrink (tasks finished) still goes at
		// once: it only gives quota back; and so does the raise to what
		// bound pods grown in place ask, which is not asked of anyone.
		// Once per figure: a raise that failed (an error, or a leader
		// that predates Bound) waits out the backoff like a grow.
		grewInPlace := !use.LessEqual(cur) && !use.Equal(rec.boundAsked)
		if !grewInPlace && (!targets[0].LessEqual(cur) || targets[0].Equal(cur)) {
			return resizeReq{}, false
		}
		targets = targets[:1]
	}
	req := resizeReq{job: j, targets: targets, bound: use}
	if known {
		req.before = &cur
	}
	return req, true
}

// lazyRoom is what this shard's nodes have free (the snapshot's Free),
// read the first time a cycle needs it (most cycles have no job to grow),
// less what earlier grows of the cycle took. Loop only.
type lazyRoom struct {
	snap *cache.Snapshot
	done bool
	free api.Resource
}

func (r *lazyRoom) get() *api.Resource {
	if !r.done {
		r.free, r.done = r.snap.Free(), true
	}
	return &r.free
}

func (r *lazyRoom) take(x api.Resource) {
	r.free = lessClamped(*r.get(), x)
}

// resize asks the coordinator for one resize and records the amount it
// answers. Called concurrently for different jobs.
func (s *Scheduler) resize(ctx context.Context, r resizeReq) {
	j := r.job
	s.mu.Lock()
	s.rec(j.UID).boundAsked = r.bound
	s.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	t0 := time.Now()
	res, err := s.deps.Quota.Resize(cctx, j.UID, &r.bound, r.targets)
	s.obs.Resize(time.Since(t0))
	cancel()
	switch {
	case errors.Is(err, wire.ErrNotFound):
		// No reservation (released, or gone with an expired lease): the
		// owner admits the job again; nothing more is bound meanwhile.
		s.dropReservation(j.UID)
		return
	case err != nil:
		s.log.Warn("resize failed", "job", j.Key(), "err", err)
		s.backOffResize(j.UID)
		return
	}
	s.mu.Lock()
	rec := s.rec(j.UID)
	amount := res.Reservation.Amount
	rec.setCover(&amount)
	if res.Refused == nil {
		rec.resizeWait = quotaBackoff{}
	}
	s.mu.Unlock()
	var msgs []string // one event for both, within the job's rate limit
	if r.before != nil && !r.bound.LessEqual(*r.before) && r.bound.LessEqual(amount) {
		// Its bound pods ask more than this shard knew the reservation
		// to hold: resized in place (or grown by another shard since).
		// The reservation counts them now, beyond the queue's capability
		// if need be; that is what the PodGroup's event says.
		s.log.Info("bound pods ask more than the reservation last known", "job", j.Key(), "bound", r.bound.String(), "known", r.before.String(), "reservation", amount.String())
		if res.Refused != nil {
			msgs = append(msgs, fmt.Sprintf("its bound pods ask %s, more than the %s its reservation held (resized in place): the reservation counts them, beyond what its queue allows", r.bound, *r.before))
		}
	}
	if res.Refused != nil {
		s.backOffResize(j.UID)
		s.stats.quotaWaits.Add(1)
		waiting := len(r.targets) - max(res.Granted, 1)
		msgs = append(msgs, fmt.Sprintf("%d more task(s) wait for quota: %v", waiting, res.Refused))
	}
	if len(msgs) > 0 && s.rateLimited(j.UID) {
		s.deps.Recorder.Unschedulable(j, strings.Join(msgs, "; "))
	}
}

// backOffResize makes a job whose grow was refused wait before asking
// again: 50 ms doubling to 2 s.
func (s *Scheduler) backOffResize(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec(uid).resizeWait.next(s.cfg.Now())
}

// forgetCover drops what this shard knew of the reservations of jobs
// outside keep (those it places this cycle, and those it owns that nobody
// else places: coverStillOurs): another shard may resize them meanwhile, so
// their amount is learnt again (by a resize) before this shard places them
// again.
func (s *Scheduler) forgetCover(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, r := range s.jobs {
		if r.cover != nil && !keep[uid] {
			r.setCover(nil)
			s.tidy(uid)
		}
	}
}

// coverStillOurs reports whether the owner of j's queue, not placing j in
// this cycle, may keep what it knows of j's reservation: it still holds the
// queue and no claim record for j is visible, so no other shard places j
// and none can be resizing its reservation (only a claimer would; the owner
// may just be waiting for its view of the records to catch up, as at
// start-up, when dropping the cover cost one re-learning call per job).
func (s *Scheduler) coverStillOurs(j *api.Job) bool {
	if !s.handoffOn() || !s.deps.Ownership.Holds(wire.QueueKey(j.Queue)) {
		return false
	}
	_, claimed := s.deps.Claims.Lookup(j.UID)
	return !claimed
}

// coveredTasks is how many of ready (in order) j's reservation covers on
// top of its bound tasks.
func (s *Scheduler) coveredTasks(j *api.Job, ready []*api.Task) int {
	s.mu.Lock()
	amount := s.peek(j.UID).cover
	s.mu.Unlock()
	if amount == nil {
		return 0
	}
	return covered(*amount, jobUse(s.summary(j)), ready)
}
