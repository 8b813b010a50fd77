package scheduler

import (
	"time"

	"github.com/shardsched/shardsched/api"
)

// jobRec is everything this shard remembers of one job between cycles, by
// the job's UID: one record instead of a map per fact, so that what is
// known of a job is read and dropped together. Records live in
// Scheduler.jobs, guarded by Scheduler.mu; a record is dropped as soon as
// nothing in it is set (tidy), so their number is O(jobs in flight here).
// Per-task state (binds in flight, bind backoffs, event times) stays keyed
// by task.
type jobRec struct {
	// admission is set while this shard, as the owner of the job's queue,
	// holds its reservation (it admitted the job, or adopted a reservation
	// that existed).
	admission *admission
	// confirmed: the reservation was confirmed (the gang is bound).
	confirmed bool
	// cover is the reservation's amount as the coordinator last answered
	// this shard, while this shard places the job: no task is bound beyond
	// it (the quota rule, quota.go). nil: not known here.
	cover *api.Resource
	// settled is what the job's tasks looked like when its cover was last
	// found right for them (every pending task covered), and settledUse
	// what its bound tasks asked then (an in-place resize changes it
	// without changing any count); while they look the same, wantResize has
	// nothing to decide. Cleared with every change of cover.
	settled    settleKey
	settledUse api.Resource
	// boundAsked is the bound use the last resize carried (resizeReq.bound):
	// a raise is sent past a refused grow's backoff once per figure.
	boundAsked api.Resource
	// admitWait and resizeWait are the backoffs after a refused
	// reservation and a refused grow.
	admitWait, resizeWait quotaBackoff
	// lateUntil: the job gave its reservation back because its pods did
	// not come (InqueueTimeout); it is not admitted again before this, and
	// it holds up nobody behind it meanwhile.
	lateUntil time.Time
	// binding counts the job's binds queued or in flight.
	binding int
	// statusSent: a PodGroup status was handed to Status (so prune makes
	// Status forget it once the job is gone).
	statusSent bool
	// phaseSent is the phase and counts last handed to Status: by
	// syncPhase, or by recordReserve's Inqueue for a job admitted again.
	phaseSent phaseKey
	// nominatedAt: when the coordinator first answered with a nominated
	// reservation (quota taken back for it); cleared once its gang is
	// bound.
	nominatedAt time.Time
	// steady is releaseGone's note that the job needed nothing of it in
	// a cycle: not state of the job's, only leave to skip it (not part of
	// empty).
	steady steadyMark
}

// steadyMark is what releaseGone saw of a job it found needing nothing
// (no release, and no answer of podsLate that the clock alone can change)
// in cycle, with the job's counts (jobCounts). The next cycle skips the
// job while the mark holds and the snapshot says its tasks did not change
// between the two refreshes: the job's pointer is the snapshot's (a changed
// PodGroup is a new one), and what this shard holds of it (admission,
// confirmation, the phase last sent) is as it was, so the counts and the
// answers are what they were. The counts are those at this cycle's
// refresh: a task event after it, which a full look would have read from
// the cache at once, is seen one cycle later (the next refresh marks the
// job changed). A cycle that skips it carries the mark on; one that does
// not look at it lets it lapse. A kept mark holds on to the job and
// admission it describes until the next.
type steadyMark struct {
	cycle                int64
	job                  *api.Job
	admission            *admission
	confirmed            bool
	phaseSent            phaseKey
	pending, bound, done int
	// use is what the bound tasks ask (the summary's Allocated).
	use api.Resource
}

// holds reports whether the mark, left by the cycle before this one, still
// describes job j and its record r. Called with s.mu held.
func (m steadyMark) holds(cycle int64, j *api.Job, r *jobRec) bool {
	return m.cycle == cycle-1 && m.describes(j, r)
}

// describes reports whether the mark is of j as r holds it now: the same
// PodGroup, admission, confirmation and phase last sent. Called with s.mu
// held.
func (m steadyMark) describes(j *api.Job, r *jobRec) bool {
	return m.job == j && m.admission != nil && m.admission == r.admission && m.confirmed == r.confirmed && m.phaseSent == r.phaseSent
}

// quiet reports whether placement has nothing to do for j, whose role here
// is asOwner, in this cycle: releaseGone found it steady in this cycle (its
// mark carried or made now), with no pending task, its reservation
// confirmed, and its cover settled for the same counts and PodGroup
// version (wantResize would have nothing to decide), and it is not giving
// its quota back. What placement would do for it then is only to keep its
// cover and count it as this shard's. Its counts are the mark's, as of
// this cycle's refresh (steadyMark): a cover that a task finishing after
// the refresh lets shrink shrinks one cycle later. Loop only.
func (s *Scheduler) quiet(j *api.Job, cycle int64) bool {
	if s.isMarked(j.UID) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[j.UID]
	if r == nil {
		return false
	}
	m := r.steady
	return m.cycle == cycle && m.describes(j, r) && m.confirmed && m.pending == 0 &&
		r.settledFor(settleKey{pending: 0, bound: m.bound, done: m.done, version: j.ResourceVersion}, m.use)
}

// phaseKey is a PodGroup phase with its counts.
type phaseKey struct {
	phase                      api.JobPhase
	running, succeeded, failed int32
}

// settleKey is what decides a job's resize: its task counts and its
// PodGroup's version (minMember, minResources).
type settleKey struct {
	pending, bound, done int
	version              string
}

// settledFor reports whether r's cover is known and was found right for
// tasks that looked as key says, whose bound ones asked use.
func (r *jobRec) settledFor(key settleKey, use api.Resource) bool {
	return r.cover != nil && r.settled == key && r.settledUse.Equal(use)
}

// setCover records the reservation's amount as last answered (nil: not
// known), which unsettles the job.
func (r *jobRec) setCover(amount *api.Resource) {
	r.cover, r.settled, r.settledUse = amount, settleKey{}, api.Resource{}
}

func (r *jobRec) empty() bool {
	return r.admission == nil && !r.confirmed && r.cover == nil && r.admitWait == (quotaBackoff{}) &&
		r.resizeWait == (quotaBackoff{}) && r.binding == 0 && !r.statusSent && r.lateUntil.IsZero() && r.phaseSent == (phaseKey{}) &&
		r.nominatedAt.IsZero()
}

// rec returns uid's record, creating it. Called with s.mu held.
func (s *Scheduler) rec(uid string) *jobRec {
	r := s.jobs[uid]
	if r == nil {
		r = &jobRec{}
		s.jobs[uid] = r
	}
	return r
}

// peek returns a copy of uid's record (zero if none). Called with s.mu held.
func (s *Scheduler) peek(uid string) jobRec {
	if r := s.jobs[uid]; r != nil {
		return *r
	}
	return jobRec{}
}

// tidy drops uid's record once nothing in it is set. Called with s.mu held.
func (s *Scheduler) tidy(uid string) {
	if r := s.jobs[uid]; r != nil && r.empty() {
		delete(s.jobs, uid)
	}
}

// isAdmitted reports whether this shard holds uid's reservation as its
// queue's owner.
func (s *Scheduler) isAdmitted(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(uid).admission != nil
}

// admittedIn reports whether this shard holds uid's reservation as the
// owner of queue: false while a job whose PodGroup moved to queue has not
// had its reservation moved there (admit asks the coordinator to move it;
// until then nothing more of the job is placed).
func (s *Scheduler) admittedIn(uid, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.peek(uid).admission
	return a != nil && a.queue == queue
}

// admittedQueue is the queue this shard admitted uid in, or "".
func (s *Scheduler) admittedQueue(uid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.peek(uid).admission; a != nil {
		return a.queue
	}
	return ""
}

// dropReservation forgets that this shard holds uid's reservation (released,
// or found gone), with what came with it.
func (s *Scheduler) dropReservation(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.jobs[uid]; r != nil {
		r.admission, r.confirmed, r.resizeWait = nil, false, quotaBackoff{}
		r.setCover(nil)
		s.tidy(uid)
	}
}
