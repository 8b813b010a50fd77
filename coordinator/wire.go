package coordinator

import "github.com/shardsched/shardsched/wire"

// The values of the coordinator's API are defined in package wire (which
// the scheduling core imports without linking etcd); these names are
// theirs, kept so that the coordinator's API reads whole.
type (
	State       = wire.State
	JobRef      = wire.JobRef
	Reservation = wire.Reservation
	Terms       = wire.Terms
	Eviction    = wire.Eviction
	QuotaError  = wire.QuotaError
	Result      = wire.Result
	Seq         = wire.Seq
	InOrder     = wire.InOrder
	Answer      = wire.Answer
)

// Reservation states and reasons for taking quota back (see package wire).
const (
	Tentative     = wire.Tentative
	Confirmed     = wire.Confirmed
	Nominated     = wire.Nominated
	ReasonReclaim = wire.ReasonReclaim
	ReasonPreempt = wire.ReasonPreempt
)

// Errors returned for bad requests (see package wire).
var (
	ErrInvalid  = wire.ErrInvalid
	ErrNotFound = wire.ErrNotFound
	ErrBehind   = wire.ErrBehind
)
