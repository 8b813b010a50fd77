package scheduler

import "time"

// Observer receives the scheduler's measurements, for whatever exports
// them (the daemon's Prometheus registry; nothing in tests and the
// simulator). Called concurrently by the loop and the bind workers; must
// not block. A nil Deps.Observer drops them.
type Observer interface {
	// SubmitToBind: a pod's creation to its successful bind.
	SubmitToBind(time.Duration)
	// AdmissionWait: a PodGroup's creation to its admission.
	AdmissionWait(time.Duration)
	// Reserve: one reservation call to the coordinator.
	Reserve(time.Duration)
	// Resize: one call to the coordinator resizing a job's reservation to
	// what its tasks ask (a job of minMember below its size grows as its
	// pods arrive: each waits for one before it is placed).
	Resize(time.Duration)
	// Place: one gang's placement (filter and score) in one cycle.
	Place(time.Duration)
	// BindWait: a placed pod's wait for a bind worker (its placement to
	// the start of its bind call).
	BindWait(time.Duration)
	// BindCall: one bind call, answered either way.
	BindCall(time.Duration)
	// Evicted: one pod evicted; reason is "reclaim", "preempt" or "node".
	Evicted(reason string)
	// Victims: how many jobs give quota back to one job that took it.
	Victims(n int)
	// ReclaimToRunning: a job's nomination to its gang bound.
	ReclaimToRunning(time.Duration)
}

// noObserver drops every measurement.
type noObserver struct{}

func (noObserver) SubmitToBind(time.Duration)     {}
func (noObserver) AdmissionWait(time.Duration)    {}
func (noObserver) Reserve(time.Duration)          {}
func (noObserver) Resize(time.Duration)           {}
func (noObserver) Place(time.Duration)            {}
func (noObserver) BindWait(time.Duration)         {}
func (noObserver) BindCall(time.Duration)         {}
func (noObserver) Evicted(string)                 {}
func (noObserver) Victims(int)                    {}
func (noObserver) ReclaimToRunning(time.Duration) {}
