package wire

import (
	"errors"
	"fmt"

	"github.com/shardsched/shardsched/api"
)

// State is the state of a reservation.
type State string

// Reservation states.
const (
	// Tentative reservations are bound to the asking shard's etcd session
	// lease and vanish with it.
	Tentative State = "Tentative"
	// Confirmed reservations survive the shard; only Release removes them.
	Confirmed State = "Confirmed"
	// Nominated reservations are held for a job that takes quota back
	// (coordinator/reclaim.go): booked at every level while its victims go, bound to
	// the asking shard's lease like a tentative one, and usable for
	// nothing until promoted to Tentative by the job's next Reserve once
	// no victim is left.
	Nominated State = "Nominated"
)

// Errors returned for bad requests. QuotaError (not wrapped here) reports a
// reservation that does not fit.
var (
	ErrInvalid  = errors.New("invalid request")
	ErrNotFound = errors.New("reservation not found")
	// ErrBehind answers a reserve of an ordered chain that was not tried
	// because a job ahead of it in the chain was not admitted (see
	// InOrder).
	ErrBehind = errors.New("not tried: a job ahead of it in its queue was not admitted")
)

// InOrder is one reserve of a chain asked for in one round trip, in
// order: a queue's jobs by priority and age. In a chain that stops at a
// refusal, a reserve is tried only if the one before it was admitted,
// nominated or can never fit (it asks more than a level's capability);
// otherwise it is answered ErrBehind, so no job passes one that waits for
// quota, exactly as if they had been asked for one after another.
type InOrder struct {
	Job    JobRef
	Queue  string
	Amount api.Resource
	Terms  *Terms
}

// HoldsUpQueue reports whether a reserve answered err holds up the jobs
// behind it in a fifo queue: it was not admitted (nor nominated, which
// answers no error), unless it can never fit (it asks more than a level's
// capability, so waiting behind it would be waiting forever). The
// coordinator's chains (InOrder) and the scheduler's admission both go on
// by this rule.
func HoldsUpQueue(err error) bool {
	if err == nil {
		return false // before qe, which errors.As moves to the heap
	}
	var qe *QuotaError
	return !(errors.As(err, &qe) && qe.NeverFits())
}

// NeverFits reports whether the refused amount is above the capability of
// the level that refused it: the job cannot fit there even when the queue
// is empty.
func (e *QuotaError) NeverFits() bool { return e.Asked > e.Capability }

// Answer is the outcome of one reserve of a chain.
type Answer struct {
	Result Result
	Err    error
}

// JobRef names a job. Jobs are identified by UID alone: the same namespace
// and name with another UID is another job.
type JobRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// String names the job and its UID.
func (j JobRef) String() string { return j.Namespace + "/" + j.Name + " (uid " + j.UID + ")" }

// Reservation is quota held by one job on its leaf queue and every ancestor.
type Reservation struct {
	Job    JobRef       `json:"job"`
	Queue  string       `json:"queue"`
	Path   []string     `json:"path"` // the leaf first, the root last
	Amount api.Resource `json:"amount"`
	State  State        `json:"state"`
	// Lease is the etcd lease of the shard session a tentative reservation
	// is bound to (0 once confirmed).
	Lease int64  `json:"lease,omitempty"`
	Shard string `json:"shard,omitempty"`
	// Floor is what the job asked for when admitted (its gang: minMember
	// tasks or minResources); what Amount holds above it is given back
	// first when quota is taken back.
	Floor api.Resource `json:"floor"`
	// The job's terms (Terms): priority, protection, creation time.
	Priority  int32 `json:"priority,omitempty"`
	Protected bool  `json:"protected,omitempty"`
	Created   int64 `json:"created,omitempty"`
	// Evict is set while the job must give quota back to another.
	Evict *Eviction `json:"evict,omitempty"`
}

// Clone returns a deep copy of r.
func (r Reservation) Clone() Reservation {
	r.Path = append([]string(nil), r.Path...)
	r.Amount = r.Amount.Clone()
	r.Floor = r.Floor.Clone()
	r.Evict = r.Evict.Clone()
	return r
}

// SetTerms records a job's terms on r (nil: none).
func (r *Reservation) SetTerms(t *Terms) {
	if t != nil {
		r.Priority, r.Protected, r.Created = t.Priority, t.Protected, t.Created
	}
}

// QuotaError says that a reservation does not fit: at Queue (the first level
// short, walking from the leaf to the root), Resource is short by Short.
type QuotaError struct {
	Queue      string `json:"queue"`
	Resource   string `json:"resource"`
	Reserved   int64  `json:"reserved"`
	Asked      int64  `json:"asked"`
	Capability int64  `json:"capability"`
	Short      int64  `json:"short"`
	// Held is what the queue's other children keep for their guarantee
	// and do not use (admissions elsewhere cannot eat into it).
	Held int64 `json:"held,omitempty"`
}

// Error says which level is short of what, by how much.
func (e *QuotaError) Error() string {
	f := func(v int64) string { return api.FormatQuantity(e.Resource, v) }
	if e.Held > 0 {
		return fmt.Sprintf("queue %q is short of %s by %s: reserved %s + asked %s + %s held for other queues' guarantee > capability %s",
			e.Queue, e.Resource, f(e.Short), f(e.Reserved), f(e.Asked), f(e.Held), f(e.Capability))
	}
	return fmt.Sprintf("queue %q is short of %s by %s: reserved %s + asked %s > capability %s",
		e.Queue, e.Resource, f(e.Short), f(e.Reserved), f(e.Asked), f(e.Capability))
}

// Terms are what a job brings to its reservation beyond the amount: what
// is weighed when quota is taken back.
type Terms struct {
	// Priority is the job's priority (its PriorityClass, else its pods').
	Priority int32 `json:"priority,omitempty"`
	// Protected: volcano.sh/preemptable "false" on the PodGroup or a pod.
	Protected bool `json:"protected,omitempty"`
	// Created is the job's creation time, unix nanoseconds.
	Created int64 `json:"created,omitempty"`
	// Reclaim asks for a plan (victims and a nominated reservation) when
	// the job does not fit; without it a job that does not fit is refused.
	Reclaim bool `json:"reclaim,omitempty"`
}

// Why a reservation is taken back.
const (
	ReasonReclaim = "reclaim" // by a queue below its deserved share, from one above
	ReasonPreempt = "preempt" // by a job of higher priority in the same queue
)

// Eviction marks a reservation whose job must give quota back to By.
type Eviction struct {
	By      JobRef `json:"by"`
	ByQueue string `json:"byQueue"`
	Reason  string `json:"reason"`
	// Whole: the job goes entirely (its reservation is released once its
	// pods are gone). Otherwise it comes down to To: its pods beyond its
	// gang are evicted until what is bound fits in To, then its
	// reservation is resized to To.
	Whole bool         `json:"whole,omitempty"`
	To    api.Resource `json:"to"`
}

// Clone returns a deep copy of e (nil for nil).
func (e *Eviction) Clone() *Eviction {
	if e == nil {
		return nil
	}
	c := *e
	c.To = e.To.Clone()
	return &c
}

// Result is the answer to a request.
type Result struct {
	Reservation Reservation
	Existed     bool // Reserve: the UID already held this reservation
	Found       bool // Release: the UID held a reservation
	// Granted is how many of a Resize's targets were applied; Refused, why
	// the next one was not (nil when all were).
	Granted      int
	Refused      *QuotaError
	Reservations []Reservation
	Specs        []api.QueueSpec
	// Victims: for a Reserve answered with a nominated reservation, the
	// reservations that must give quota back first.
	Victims []Reservation
	Seq     Seq
}

// Seq orders the operations a leader applied: by term (the revision of the
// leader's election key, increasing across leaders), then group, then
// position in the group. Tests replay answers in Seq order against a model.
type Seq struct {
	Term  int64 `json:"term"`
	Group int64 `json:"group"`
	Index int   `json:"index"`
}

// Less orders sequence numbers.
func (s Seq) Less(o Seq) bool {
	if s.Term != o.Term {
		return s.Term < o.Term
	}
	if s.Group != o.Group {
		return s.Group < o.Group
	}
	return s.Index < o.Index
}
