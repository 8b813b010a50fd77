// After admission: confirming a reservation once its gang is bound, the
// phase a job shows, releasing what a gone or finished job held, and
// forgetting what this shard remembered of it.

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// releaseGone releases reservations of jobs that no longer exist (matched
// by UID) or whose tasks have all finished.
//
// A job found steady by the cycle before (nothing to release, nothing that
// waits on the clock) is not looked at again while neither it, its tasks
// nor what this shard holds of it changed (jobRec.steady), and placement
// passes it by as well while it has nothing to place (quiet): with
// thousands of running jobs admitted here, counting each one's tasks every
// cycle in both was half of a cycle's time (BenchmarkCycleManyJobs).
func (s *Scheduler) releaseGone(ctx context.Context) {
	cycle := s.stats.cycles.Load()
	s.mu.Lock()
	var gone []string
	var names []admission
	var admitted []*api.Job // the live jobs admitted here, but the steady ones
	for uid, r := range s.jobs {
		if r.admission == nil {
			continue
		}
		// A job marked in the cycle before is still the snapshot's when
		// no job of its UID changed since: no lookup (at thousands of
		// jobs, each a cache miss).
		j := r.steady.job
		if r.steady.cycle != cycle-1 || j == nil || !s.snap.JobUnchanged(uid) {
			var ok bool
			if j, ok = s.snap.JobByUID(uid); !ok {
				gone = append(gone, uid)
				names = append(names, *r.admission)
				continue
			}
		}
		if r.steady.holds(cycle, j, r) && !s.snap.TasksChanged(j) {
			r.steady.cycle = cycle
			continue
		}
		admitted = append(admitted, j)
	}
	s.mu.Unlock()
	admitted = s.snap.InOrder(admitted)
	// A deleted job's pods may still be terminating, holding their nodes:
	// its reservation covers them until they are gone.
	kept := gone[:0]
	for i, uid := range gone {
		if !s.podsStillBound(names[i].job.Namespace, names[i].job.Name) {
			kept = append(kept, uid)
		}
	}
	gone = kept
	for _, j := range admitted {
		s.mu.Lock()
		var a *admission
		confirmed := false
		if r := s.jobs[j.UID]; r != nil {
			a, confirmed = r.admission, r.confirmed
		}
		s.mu.Unlock()
		if a == nil {
			continue
		}
		pending, bound, done := s.jobCounts(j)
		use := s.summary(j).Allocated
		if pending == 0 && bound == 0 && done >= int(max(j.MinMember, 1)) {
			gone = append(gone, j.UID)
			s.syncPhase(j, api.JobCompleted, 0)
			continue
		}
		mark := steadyMark{cycle: cycle, job: j, admission: a, confirmed: confirmed, pending: pending, bound: bound, done: done, use: use}
		if a.queue != j.Queue {
			// Moved to another queue: its owner writes its phase; this
			// shard only releases what it holds once the job is done.
			s.markSteady(mark)
			continue
		}
		if confirmed {
			// Running while minMember are bound; Unknown when a running
			// gang lost members, as Volcano computes it.
			phase := api.JobRunning
			if bound < int(max(j.MinMember, 1)) {
				phase = api.JobUnknown
			}
			s.syncPhase(j, phase, bound)
			if bound == 0 && pending == 0 {
				// Its gang ran and every pod is gone without finishing
				// (deleted, evicted, scaled to zero) while the PodGroup
				// stays: nothing is bound for the reservation to cover,
				// so the quota goes back now; pods that come later are
				// admitted again like a new gang.
				gone = append(gone, j.UID)
				continue
			}
		}
		if !shortOfPods(j, pending, bound, done) {
			// Not waiting on the clock for its pods: steady.
			s.markSteady(mark)
			continue
		}
		if s.podsLate(j, pending, bound, done) {
			gone = append(gone, j.UID)
			msg := fmt.Sprintf("admitted %s ago but only %d of its minMember %d pods exist: its quota is given back until they come",
				s.cfg.InqueueTimeout, pending+bound+done, max(j.MinMember, 1))
			s.waiting(j, "PodsNotCreated", msg)
			s.mu.Lock()
			s.rec(j.UID).lateUntil = s.cfg.Now().Add(s.cfg.InqueueTimeout / 4)
			s.mu.Unlock()
		}
	}
	parallel(gone, s.cfg.AdmitParallelism, func(uid string) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, err := s.deps.Quota.Release(cctx, uid)
		cancel()
		if err != nil {
			s.log.Warn("release failed", "job uid", uid, "err", err)
			return
		}
		s.dropReservation(uid)
	})
	s.forgetReleased(ctx, gone)
}

// markSteady records m, what releaseGone found of a job that needed
// nothing this cycle and nothing on the clock's account (jobRec.steady),
// with the phase last sent. Nothing is recorded if the job's admission or
// confirmation changed since releaseGone read them.
func (s *Scheduler) markSteady(m steadyMark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.jobs[m.job.UID]; r != nil && r.admission == m.admission && r.confirmed == m.confirmed {
		m.phaseSent = r.phaseSent
		r.steady = m
	}
}

// shortOfPods reports whether j, with these counts, has fewer than
// minMember pods and none bound: what podsLate waits on the clock for.
func shortOfPods(j *api.Job, pending, bound, done int) bool {
	return bound == 0 && pending+done < int(max(j.MinMember, 1))
}

// podsLate reports whether j, admitted here, has waited InqueueTimeout for
// the pods of its gang: fewer than minMember exist and none is bound.
func (s *Scheduler) podsLate(j *api.Job, pending, bound, done int) bool {
	if !shortOfPods(j, pending, bound, done) {
		return false
	}
	s.mu.Lock()
	a := s.peek(j.UID).admission
	s.mu.Unlock()
	return a != nil && !a.at.IsZero() && s.since(a.at) >= s.cfg.InqueueTimeout
}

// podsStillBound reports whether pods of a PodGroup that no longer exists
// (namespace/name, no successor under that name) are still bound and
// unfinished: being deleted, they hold their nodes through their grace
// period, and the quota rule counts them until they are gone.
func (s *Scheduler) podsStillBound(namespace, name string) bool {
	if _, exists := s.deps.Cache.JobByName(namespace, name); exists {
		return false // a successor's members are its own; its predecessor's pods are not told apart
	}
	return s.deps.Cache.JobSummary(namespace, name).Bound > 0
}

// needsConfirm reports whether a job's gang is bound and its reservation
// not yet confirmed.
func (s *Scheduler) needsConfirm(j *api.Job, bound int) bool {
	if bound < int(max(j.MinMember, 1)) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.peek(j.UID).confirmed
}

type confirmReq struct {
	job   *api.Job
	bound int
}

// confirm confirms a job's reservation once its gang is bound. Called
// concurrently for different jobs.
func (s *Scheduler) confirm(ctx context.Context, j *api.Job, bound int) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	_, err := s.deps.Quota.Confirm(cctx, j.UID)
	cancel()
	if errors.Is(err, wire.ErrNotFound) {
		// The tentative reservation went with an expired shard session:
		// forget it, so the next cycle reserves again (bound tasks included).
		s.log.Warn("reservation lost before confirm; admitting again", "job", j.Key())
		s.dropReservation(j.UID)
		return
	}
	if err != nil {
		s.log.Warn("confirm failed", "job", j.Key(), "err", err)
		return
	}
	s.mu.Lock()
	rec := s.rec(j.UID)
	rec.confirmed = true
	nominated := rec.nominatedAt
	rec.nominatedAt = time.Time{}
	s.mu.Unlock()
	if !nominated.IsZero() {
		s.obs.ReclaimToRunning(s.since(nominated))
	}
	s.syncPhase(j, api.JobRunning, bound)
}

// syncPhase writes a job's phase with its counts (running = bound tasks,
// succeeded and failed from the cache) when they differ from what this
// shard last wrote for it.
func (s *Scheduler) syncPhase(j *api.Job, phase api.JobPhase, bound int) {
	sum := s.summary(j)
	st := api.JobStatus{Phase: phase, Running: int32(bound), Succeeded: int32(sum.Done - sum.Failed), Failed: int32(sum.Failed)}
	key := phaseKey{phase: st.Phase, running: st.Running, succeeded: st.Succeeded, failed: st.Failed}
	s.mu.Lock()
	r := s.rec(j.UID)
	same := r.phaseSent == key
	r.phaseSent = key
	s.mu.Unlock()
	if !same {
		s.setPodGroup(j.Namespace, j.Name, j.UID, st)
	}
}

// prune forgets backoff and event times of tasks that are no longer pending
// and of jobs that are gone, so this state stays O(pending), not O(tasks
// ever seen).
func (s *Scheduler) prune() {
	cycle := s.stats.cycles.Load()
	for j, c := range s.unsized {
		if c < cycle-1 {
			delete(s.unsized, j)
		}
	}
	pending := map[string]bool{}
	for _, t := range s.snap.PendingTasks() {
		pending[t.UID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.backoff {
		if !pending[uid] {
			delete(s.backoff, uid)
		}
	}
	for uid := range s.lastEvent {
		if !pending[uid] && !s.live(uid) {
			delete(s.lastEvent, uid)
		}
	}
	// The batcher remembers the last status written per PodGroup; a gone
	// PodGroup's entry would stay forever.
	for uid, r := range s.jobs {
		if s.live(uid) {
			continue
		}
		r.admitWait, r.resizeWait, r.lateUntil, r.phaseSent, r.nominatedAt = quotaBackoff{}, quotaBackoff{}, time.Time{}, phaseKey{}, time.Time{}
		if r.admission == nil {
			r.confirmed = false // nothing to release: releaseGone keeps admitted ones
			r.setCover(nil)
		}
		if r.statusSent {
			r.statusSent = false
			s.deps.Status.ForgetPodGroup(uid)
		}
		s.tidy(uid)
	}
}
