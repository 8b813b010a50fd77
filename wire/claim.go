package wire

import (
	"errors"
	"time"
)

// ClaimState is the state of a claim record.
type ClaimState string

// Claim record states.
const (
	// Offered: the queue owner (From) offers the job to To; nobody places
	// it until To claims it or the offer is deleted.
	Offered ClaimState = "offered"
	// Claimed: To places the job (and only To).
	Claimed ClaimState = "claimed"
)

// Claim is the value of a claim record <prefix>/claims/<job UID>, and what
// the store knows about it.
type Claim struct {
	Job   string     `json:"job"` // the job's UID
	Queue string     `json:"queue"`
	From  string     `json:"from"` // the queue owner that offered it
	To    string     `json:"to"`   // the shard it is offered to / claimed by
	State ClaimState `json:"state"`
	At    time.Time  `json:"at"` // when the record was last written (writer's clock)

	// Rev is the record's ModRevision and Lease the lease it is attached
	// to; they come from etcd and are not part of the stored value.
	Rev   int64 `json:"-"`
	Lease int64 `json:"-"`
	// Unknown is set while the outcome of a write of this shard to the
	// record is not known: the record must be taken as present, and as held
	// by nobody.
	Unknown bool `json:"-"`
}

// Errors of the claim store; test them with errors.Is.
var (
	// ErrClaimExists: the job already has a claim record (offered or claimed).
	ErrClaimExists = errors.New("the job already has a claim record")
	// ErrNotQueueOwner: this shard does not hold the ownership record of
	// the job's queue under its current lease.
	ErrNotQueueOwner = errors.New("this shard does not hold the queue's ownership record")
	// ErrClaimChanged: the record is not the revision the caller saw (or is gone).
	ErrClaimChanged = errors.New("the claim record changed")
	// ErrNotAddressed: the record does not offer the job to this shard.
	ErrNotAddressed = errors.New("the claim record is not addressed to this shard")
	// ErrClaimInUse: binds under the claim are in flight; no new one starts
	// and the drop can be retried once they end.
	ErrClaimInUse = errors.New("binds under the claim are in flight")
)
