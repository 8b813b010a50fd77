package shard

import "github.com/shardsched/shardsched/wire"

// Claim records and gossip metadata are defined in package wire (which the
// scheduling core imports without linking etcd or memberlist); these names
// are theirs, kept so that the shard package's API reads whole.
type (
	ClaimState = wire.ClaimState
	Claim      = wire.Claim
	Meta       = wire.Meta
	Capacity   = wire.Capacity
)

// Claim record states (see package wire).
const (
	Offered = wire.Offered
	Claimed = wire.Claimed
)

// Errors of the claim store (see package wire).
var (
	ErrClaimExists   = wire.ErrClaimExists
	ErrNotQueueOwner = wire.ErrNotQueueOwner
	ErrClaimChanged  = wire.ErrClaimChanged
	ErrNotAddressed  = wire.ErrNotAddressed
	ErrClaimInUse    = wire.ErrClaimInUse
)
