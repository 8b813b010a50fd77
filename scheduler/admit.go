// Admission: the queue owner asks the coordinator for the reservations of
// its queues' jobs, in fair-share order, and says on each job why it waits.

package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/wire"
)

// admit asks the coordinator for every job of an owned queue that has no
// reservation yet. Queues go in fair-share order, jobs by priority then age;
// a queue's jobs are reserved in order (so priority holds within the
// queue: in one round trip through ReserveInOrder when the Quota has it,
// else one after another) while up to AdmitParallelism queues are in
// flight at once (the coordinator client batches their calls).
func (s *Scheduler) admit(ctx context.Context, byQueue map[string][]*api.Job) {
	tree := s.Tree() // once per cycle: every queue's facts come from it
	names := make([]string, 0, len(byQueue))
	for q := range byQueue {
		names = append(names, q)
	}
	sort.Strings(names)
	now := s.cfg.Now()
	// Only the jobs still to admit are ordered and gone through: in a busy
	// queue most are admitted and running, and would be skipped below
	// anyway (noteBehind skips them too). Only the queues that have such
	// jobs are ordered: most cycles have none or one, and a queue's share
	// sums every job it has.
	type todo struct {
		q           string
		js, unsized []*api.Job
		path        []string
		traverse    bool
	}
	var todos []todo
	for _, q := range names {
		path, traverse := queuePath(tree, q)
		if closed := closedLevel(tree, path); closed != "" {
			s.refuseClosed(byQueue[q], closed)
			continue
		}
		js, unsized := s.toAdmit(byQueue[q], now)
		if len(js) > 0 {
			todos = append(todos, todo{q: q, js: js, unsized: unsized, path: path, traverse: traverse})
		}
	}
	if len(todos) > 1 {
		with := make(map[string][]*api.Job, len(todos))
		for _, t := range todos {
			with[t.q] = byQueue[t.q]
		}
		shares := s.queueShares(with)
		sort.SliceStable(todos, func(a, b int) bool { return shares[todos[a].q] < shares[todos[b].q] })
	}
	// Work out, on the loop goroutine, what each job would reserve.
	var work [][]admitReq
	for _, t := range todos {
		q, js, unsized, path, traverse := t.q, t.js, t.unsized, t.path, t.traverse
		var reqs []admitReq
		for i, j := range js {
			s.mu.Lock()
			rec := s.peek(j.UID)
			s.mu.Unlock()
			wait := rec.admitWait
			waiting := wait != (quotaBackoff{})
			pending, bound, _ := s.jobTasks(j)
			if j.Phase == api.JobCompleted && len(pending) == 0 {
				continue // a Completed group with new pending pods is scheduled again
			}
			pending, short := gangOrder(j, pending, s.boundBySpec(j))
			amount, ok := admitAmount(j, pending, s.summary(j))
			if !ok || (short != "" && !j.SizedByMinResources()) {
				continue // not all gang members exist yet
			}
			if s.refuseNeverFits(j, tree, path, amount) {
				continue // can never fit: skipped, so it blocks nobody
			}
			if waiting && now.Before(wait.until) {
				if traverse {
					continue // dequeueStrategy traverse: later jobs may pass it
				}
				if !rec.nominatedAt.IsZero() {
					continue // its quota is held while its victims go: it holds up nobody
				}
				// Refused a moment ago: the jobs behind it in this queue
				// (same or lower priority, younger) wait too, so a big
				// gang is not starved by smaller ones taking the quota
				// it waits for (strict FIFO within a queue).
				if s.shortLately(q, now) {
					s.noteBehind(q, j, append(slices.Clip(js[i+1:]), s.after(j, unsized)...))
				}
				break
			}
			terms := s.terms(j)
			// Quota is taken back only for a job of a queue found short
			// lately, or refused itself (most jobs fit and pay nothing
			// for the check below), whose gang could run: nothing is
			// evicted for one that could not.
			terms.Reclaim = terms.Reclaim && (waiting || s.shortLately(q, now)) && s.couldRun(j, pending, bound)
			reqs = append(reqs, admitReq{job: j, amount: amount, bound: bound, traverse: traverse, terms: terms})
		}
		if len(reqs) > 0 {
			work = append(work, reqs)
		}
	}
	// Queues go in parallel (the client batches their calls), so within one
	// cycle the fair-share order between queues is approximate; it holds
	// across cycles. A queue stops at its first job that is not admitted.
	oq, ordered := s.deps.Quota.(orderedQuota)
	parallel(work, s.cfg.AdmitParallelism, func(reqs []admitReq) {
		if ordered && len(reqs) > 1 {
			s.reserveInOrder(ctx, oq, reqs)
			return
		}
		for i, r := range reqs {
			if !s.reserve(ctx, r) && !r.traverse {
				s.heldBehind(reqs, i)
				return
			}
		}
	})
}

// toAdmit returns the jobs of js that admission still has to go through,
// in priority order (byPriority): not those admitted here in their current
// queue (a job admitted in another queue was moved here, and its
// reservation must move before more of it is placed), nor those whose pods
// did not come in time (lateUntil): they hold up nobody. Gangs that cannot
// be sized yet (fewer than minMember pods exist, no minResources: what
// admitAmount refuses) are returned apart, unsorted: admission would skip
// them, and while a stream of jobs is being created they are most of a
// queue; only noteBehind reads them.
func (s *Scheduler) toAdmit(js []*api.Job, now time.Time) (ready, unsized []*api.Job) {
	ready = make([]*api.Job, 0, len(js))
	s.mu.Lock()
	for _, j := range js {
		r := s.jobs[j.UID]
		if r != nil && ((r.admission != nil && r.admission.queue == j.Queue) || now.Before(r.lateUntil)) {
			continue
		}
		ready = append(ready, j)
	}
	s.mu.Unlock()
	sized := ready[:0]
	for _, j := range ready {
		if s.cannotSize(j) {
			unsized = append(unsized, j)
		} else {
			sized = append(sized, j)
		}
	}
	s.byPriority(sized)
	return sized, unsized
}

// cannotSize reports whether admitAmount would refuse j for now
// (api.Sizable), counting its tasks without sorting the pending ones. A
// job found so in the cycle before is not counted again while the snapshot
// says its tasks did not change (Scheduler.unsized): groups waiting for
// their pods are asked about every cycle. Loop only.
func (s *Scheduler) cannotSize(j *api.Job) bool {
	if j.SizedByMinResources() {
		return false // its tasks need not be counted
	}
	cycle := s.stats.cycles.Load()
	if c, ok := s.unsized[j]; ok && (c == cycle || c == cycle-1 && !s.snap.TasksChanged(j)) {
		s.unsized[j] = cycle
		return true
	}
	pending, bound, _ := s.jobCounts(j)
	if api.Sizable(j, pending, bound) {
		delete(s.unsized, j)
		return false
	}
	s.unsized[j] = cycle
	return true
}

// after returns the jobs of js that byPriority would order after j, given
// that js and j come in the snapshot's order (cache.JobOrder breaks ties).
func (s *Scheduler) after(j *api.Job, js []*api.Job) []*api.Job {
	var out []*api.Job
	pj := s.priority(j)
	for _, b := range js {
		if c := cmp.Or(cmp.Compare(pj, s.priority(b)), b.Created.Compare(j.Created), cache.JobOrder(b, j)); c > 0 {
			out = append(out, b)
		}
	}
	return out
}

// orderedQuota is a Quota that can ask for a queue's jobs in one round trip
// (*coordinator.Client): admission then costs one round trip per queue and
// cycle instead of one per job, with the same outcome.
type orderedQuota interface {
	ReserveInOrder(ctx context.Context, reqs []wire.InOrder, stop bool) []wire.Answer
}

// chainLen bounds the reserves of one ReserveInOrder call.
const chainLen = 256

// reserveInOrder asks for one queue's jobs (reqs, in order) in chains of
// chainLen, each in one round trip, and records the answers in order as
// reserve would: in a fifo queue the coordinator tries no job behind one
// that is not admitted (wire.ErrBehind), so nothing passes a job that
// waits for quota. Called concurrently by admit's workers, one per queue.
func (s *Scheduler) reserveInOrder(ctx context.Context, oq orderedQuota, reqs []admitReq) {
	stop := !reqs[0].traverse
	for start := 0; start < len(reqs); start += chainLen {
		part := reqs[start:min(start+chainLen, len(reqs))]
		answers, took := s.askInOrder(ctx, oq, part, stop)
		for i, a := range answers[:min(len(answers), len(part))] {
			if errors.Is(a.Err, wire.ErrBehind) {
				// Not tried: the job before it was not admitted (and was
				// recorded so, below); it is asked for again next cycle.
				s.heldBehind(reqs, start+i-1)
				return
			}
			s.obs.Reserve(took)
			if !s.recordReserve(part[i], a.Result, a.Err) && !part[i].traverse {
				s.heldBehind(reqs, start+i)
				return
			}
		}
	}
}

// askInOrder makes one ReserveInOrder call for part, within CallTimeout,
// and returns its answers and how long it took.
func (s *Scheduler) askInOrder(ctx context.Context, oq orderedQuota, part []admitReq, stop bool) ([]wire.Answer, time.Duration) {
	ins := make([]wire.InOrder, len(part))
	for i, r := range part {
		ins[i] = wire.InOrder{Job: wire.JobRef{Namespace: r.job.Namespace, Name: r.job.Name, UID: r.job.UID}, Queue: r.job.Queue, Amount: r.amount, Terms: r.terms}
	}
	ctx, span := s.tracer.Start(ctx, "scheduler.admit", trace.WithAttributes(
		attribute.String("queue", part[0].job.Queue), attribute.Int("jobs", len(part))))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	t0 := time.Now()
	answers := oq.ReserveInOrder(ctx, ins, stop)
	return answers, time.Since(t0)
}

// heldBehind says on the jobs after reqs[i] that they wait behind it, when
// its queue was found short of quota lately.
func (s *Scheduler) heldBehind(reqs []admitReq, i int) {
	if i < 0 || i >= len(reqs) {
		return
	}
	r := reqs[i]
	if !s.shortLately(r.job.Queue, s.cfg.Now()) {
		return
	}
	behind := make([]*api.Job, 0, len(reqs)-i-1)
	for _, b := range reqs[i+1:] {
		behind = append(behind, b.job)
	}
	s.noteBehind(r.job.Queue, r.job, behind)
}

type admitReq struct {
	job    *api.Job
	amount api.Resource
	bound  int
	// traverse: the queue's dequeueStrategy lets later jobs pass this one
	// when it is refused.
	traverse bool
	terms    *wire.Terms
}

// reserve asks the coordinator for one job's reservation and records the
// answer; it reports whether the jobs behind it in its queue may be asked
// for now (it was admitted, or it can never fit). Called concurrently by
// admit's workers.
func (s *Scheduler) reserve(ctx context.Context, r admitReq) bool {
	j := r.job
	actx, span := s.tracer.Start(ctx, "scheduler.admit", trace.WithAttributes(
		attribute.String("job", j.Key()), attribute.String("queue", j.Queue)))
	cctx, cancel := context.WithTimeout(actx, s.cfg.CallTimeout)
	t0 := time.Now()
	res, err := s.deps.Quota.ReserveWith(cctx, wire.JobRef{Namespace: j.Namespace, Name: j.Name, UID: j.UID}, j.Queue, r.amount, r.terms)
	s.obs.Reserve(time.Since(t0))
	cancel()
	span.SetAttributes(attribute.Bool("admitted", err == nil))
	span.End()
	return s.recordReserve(r, res, err)
}

// recordReserve records the coordinator's answer to one job's reserve and
// reports whether the jobs behind it in its queue may be asked for now (it
// was admitted or nominated, or it can never fit). Called concurrently by
// admit's workers.
func (s *Scheduler) recordReserve(r admitReq, res wire.Result, err error) bool {
	j := r.job
	var qe *wire.QuotaError
	switch {
	case err == nil && res.Reservation.State == wire.Nominated:
		// Quota is being taken back for it: held, not yet its own. It
		// asks again every nominatedRetry until its victims are gone.
		s.mu.Lock()
		rec := s.rec(j.UID)
		rec.admitWait = quotaBackoff{until: s.cfg.Now().Add(nominatedRetry), delay: nominatedRetry}
		s.mu.Unlock()
		s.nominated(j, res)
		return true // what it waits for is held for it: the jobs behind it may ask
	case err == nil:
		s.stats.admitted.Add(1)
		if !j.Created.IsZero() {
			s.obs.AdmissionWait(s.since(j.Created))
		}
		s.log.Debug("admitted", "job", j.Key(), "queue", j.Queue, "amount", r.amount.String())
		s.mu.Lock()
		rec := s.rec(j.UID)
		if rec.admission != nil {
			// Moved here from another queue: what it waited for is over,
			// so its phase is written again (the waiting reason replaced).
			rec.phaseSent = phaseKey{}
		}
		rec.admission = &admission{job: *j, queue: j.Queue, at: s.cfg.Now()}
		// The reservation may predate this ask (a queue that changed
		// owner, a retry): what it holds is what the answer says.
		amount := res.Reservation.Amount
		rec.setCover(&amount)
		rec.admitWait = quotaBackoff{}
		// A batch Job's next wave may be admitted on a snapshot that has
		// not seen the Completed this shard wrote for the wave before:
		// what it sent counts as much as what it sees.
		completed := rec.phaseSent.phase == api.JobCompleted
		inqueue := (j.Phase == api.JobPending || j.Phase == api.JobCompleted || j.Phase == "" || completed) && r.bound < int(max(j.MinMember, 1))
		if inqueue {
			rec.phaseSent = phaseKey{phase: api.JobInqueue, running: int32(r.bound)}
		}
		s.mu.Unlock()
		if inqueue {
			s.setPodGroup(j.Namespace, j.Name, j.UID, api.JobStatus{Phase: api.JobInqueue, Running: int32(r.bound)})
		}
	case errors.As(err, &qe) && qe.NeverFits():
		// Larger than a level's capability: it can never fit there, so
		// it must not hold up the jobs behind it.
		s.backOffAdmission(j.UID)
		s.neverFitsStatus(j, qe.Queue, qe.Resource, qe.Asked, qe.Capability)
		return true
	case errors.As(err, &qe):
		s.stats.quotaWaits.Add(1)
		s.mu.Lock()
		s.queueShort[j.Queue] = s.cfg.Now()
		s.mu.Unlock()
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("waiting for quota: %v", qe)
		if from := s.admittedQueue(j.UID); from != "" && from != j.Queue {
			msg = fmt.Sprintf("moving from queue %q: its reservation moves when it fits; until then what runs keeps running and nothing more is placed; %v", from, qe)
		}
		s.waiting(j, "QueueQuotaExceeded", msg)
	case errors.Is(err, wire.ErrInvalid):
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("cannot be admitted: %v", err)
		s.waiting(j, "InvalidQueue", msg)
	default:
		// The coordinator is unreachable or failing over: the rest of
		// the queue would wait CallTimeout each for the same answer.
		s.backOffAdmission(j.UID)
		s.log.Warn("reserve failed", "job", j.Key(), "err", err)
	}
	return err == nil
}

// closedLevel is the first level of path (leaf first) that is Closed or
// Closing, or "".
func closedLevel(tree *api.Tree, path []string) string {
	if tree == nil {
		return ""
	}
	for _, q := range path {
		if spec, ok := tree.Get(q); ok && spec.Closed {
			return q
		}
	}
	return ""
}

// refuseClosed says on each job of js not admitted yet that its queue (or
// the ancestor closed) admits nothing new; what was admitted goes on.
func (s *Scheduler) refuseClosed(js []*api.Job, closed string) {
	now := s.cfg.Now()
	for _, j := range js {
		s.mu.Lock()
		rec := s.peek(j.UID)
		s.mu.Unlock()
		moving := rec.admission != nil && rec.admission.queue != j.Queue
		if (rec.admission != nil && !moving) || now.Before(rec.admitWait.until) {
			continue
		}
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("queue %q is closed (or closing): it admits no new job; jobs already admitted keep running", closed)
		if moving {
			msg = fmt.Sprintf("moving from queue %q: %s", rec.admission.queue, msg)
		}
		s.waiting(j, "QueueClosed", msg)
	}
}

// queuePath is q and its ancestors, leaf first (nil without a tree), and
// whether q's dequeueStrategy is traverse (a job waiting for quota lets
// later ones pass; fifo is the default).
func queuePath(tree *api.Tree, q string) (path []string, traverse bool) {
	if tree == nil {
		return nil, false
	}
	path, _ = tree.Path(q)
	spec, _ := tree.Get(q)
	return path, spec.DequeueStrategy == api.DequeueTraverse
}

// refuseNeverFits reports whether amount is above the capability of a level
// of path (so the job can never be admitted) and, if so, says so on the
// PodGroup and backs it off.
func (s *Scheduler) refuseNeverFits(j *api.Job, tree *api.Tree, path []string, amount api.Resource) bool {
	q, dim, asked, capv, never := neverFits(tree, path, amount)
	if !never {
		return false
	}
	s.backOffAdmission(j.UID)
	s.neverFitsStatus(j, q, dim, asked, capv)
	return true
}

// neverFitsStatus marks a job that asks more than a queue level's
// capability as Unschedulable, with an event (rate-limited).
func (s *Scheduler) neverFitsStatus(j *api.Job, queue, dim string, asked, capv int64) {
	msg := fmt.Sprintf("can never be admitted: it asks for %s of %s, above the capability %s of queue %q; jobs behind it are not held up",
		api.FormatQuantity(dim, asked), dim, api.FormatQuantity(dim, capv), queue)
	s.waiting(j, "QueueCapabilityTooSmall", msg)
}

// noteBehind says on the jobs behind head in queue q, pending, not yet
// admitted and without a reason of their own, that they wait for it: head
// waits for quota and the queue admits its jobs in order. Its callers ask
// only while q was found short of quota in the last 2 s (shortLately), so
// a head refused for another reason (a bad queue, the coordinator away)
// rarely gets it said of it. At most once
// every 5 s per job, as every job event; the status batcher drops a
// condition that did not change. Called from the loop and from admit's
// workers (state under s.mu; Status and Recorder are safe for concurrent
// use).
func (s *Scheduler) noteBehind(q string, head *api.Job, behind []*api.Job) {
	var msg string
	now := s.cfg.Now()
	for _, b := range behind {
		if b.Phase != "" && b.Phase != api.JobPending {
			continue // admitted, running or completed: not held up
		}
		s.mu.Lock()
		rec := s.peek(b.UID)
		s.mu.Unlock()
		if rec.admission != nil || now.Before(rec.lateUntil) || rec.admitWait != (quotaBackoff{}) || !rec.nominatedAt.IsZero() {
			continue // admitted, or with a reason of its own (refused, never fits, nominated)
		}
		if !s.rateLimited(b.UID) {
			continue
		}
		if msg == "" {
			msg = fmt.Sprintf("waiting in queue %q behind job %s, which waits for quota: the queue admits its jobs in order (dequeueStrategy fifo)", q, head.Key())
		}
		s.pendingStatus(b, "WaitingInQueue", msg)
		s.deps.Recorder.Unschedulable(b, msg)
	}
}

// pendingStatus writes phase Pending with an Unschedulable condition of
// reason and msg on j's PodGroup.
func (s *Scheduler) pendingStatus(j *api.Job, reason, msg string) {
	s.setPodGroup(j.Namespace, j.Name, j.UID, api.JobStatus{Phase: api.JobPending, Conditions: []api.JobCondition{{
		Type: "Unschedulable", Status: "True", Reason: reason, Message: msg}}})
}

// backOffAdmission makes a job that was not admitted (no quota, a bad
// queue, the coordinator unreachable) wait before it is asked
// for again, 50 ms doubling to 2 s, not on every cycle (50 times a second).
func (s *Scheduler) backOffAdmission(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec(uid).admitWait.next(s.cfg.Now())
}

// waiting says on a job's PodGroup why it is not admitted: phase Pending,
// an Unschedulable condition with reason and msg, and an event (at most
// one every 5 s per job).
func (s *Scheduler) waiting(j *api.Job, reason, msg string) {
	s.pendingStatus(j, reason, msg)
	if s.rateLimited(j.UID) {
		s.deps.Recorder.Unschedulable(j, msg)
	}
}
