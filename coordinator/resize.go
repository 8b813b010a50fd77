package coordinator

import (
	"fmt"

	"github.com/shardsched/shardsched/api"
)

// ResizeRequest changes the amount of an existing reservation, so that it
// keeps covering what its job has bound (the quota rule: a task beyond the
// gang grows the reservation before it is bound; finished tasks shrink it).
//
// Targets are absolute amounts, tried in order: each one that fits becomes
// the reservation's amount, and the first that does not fit ends the
// request (the later ones are larger steps of the same job). Because they
// are absolute, a retried request has the same effect as the first.
//
// Bound, when set, is what the job's bound pods already ask (their
// requests as they run, an in-place resize included). The reservation is
// first raised to at least it in every dimension, capability or not: those
// pods run whatever the ledger says, and a ledger that counted less would
// let other jobs of the queue in on top of them. Only then are the targets
// tried. A leader that predates the field ignores it (targets alone).
type ResizeRequest struct {
	UID     string         `json:"uid"`
	Targets []api.Resource `json:"targets"`
	Bound   *api.Resource  `json:"bound,omitempty"`
}

// maxResizeTargets bounds the targets of one request.
const maxResizeTargets = 4096

// Resize applies req to the reservation of req.UID. A target fits when,
// for the reservation's queue and every ancestor, each dimension it raises
// above the current amount stays within capability (usage − current +
// target); lowering a dimension always fits, even under a capability that
// was lowered below usage. It returns the reservation as it now is, how
// many targets were applied, and, when one was refused, the *QuotaError
// naming the first level short for it (the reservation keeps the last
// target that fitted). A UID with no reservation is ErrNotFound; an empty,
// negative or zero target is ErrInvalid and changes nothing.
func (l *Ledger) Resize(req ResizeRequest) (res Reservation, granted int, refused *QuotaError, err error) {
	r, ok := l.res[req.UID]
	if !ok {
		return Reservation{}, 0, nil, fmt.Errorf("%w: uid %q", ErrNotFound, req.UID)
	}
	if len(req.Targets) == 0 || len(req.Targets) > maxResizeTargets {
		return Reservation{}, 0, nil, fmt.Errorf("%w: resize of %s: %d targets (1..%d)", ErrInvalid, r.Job, len(req.Targets), maxResizeTargets)
	}
	for i, t := range req.Targets {
		if err := t.Validate(); err != nil {
			return Reservation{}, 0, nil, fmt.Errorf("%w: resize of %s, target %d: %v", ErrInvalid, r.Job, i, err)
		}
		if t.IsZero() {
			return Reservation{}, 0, nil, fmt.Errorf("%w: resize of %s, target %d is empty (release the reservation instead)", ErrInvalid, r.Job, i)
		}
	}
	if req.Bound != nil {
		if err := req.Bound.Validate(); err != nil {
			return Reservation{}, 0, nil, fmt.Errorf("%w: resize of %s, bound: %v", ErrInvalid, r.Job, err)
		}
		if !req.Bound.LessEqual(r.Amount) { // most resizes: already covered
			// Raised whatever the capability and not frozen for a victim
			// or a nominee: its pods ask it whatever the plan says, and the
			// plan's figures are checked against the ledger as it then is.
			floor := r.Amount.Max(*req.Bound)
			next, err := l.usageWith(r, floor)
			if err != nil {
				return r.Clone(), 0, nil, err
			}
			l.setAmount(r, floor, next)
		}
	}
	for _, t := range req.Targets {
		if qe := l.frozen(r, t); qe != nil {
			return r.Clone(), granted, qe, nil
		}
		next, qe, err := l.resized(r, t)
		if err != nil {
			return r.Clone(), granted, nil, err
		}
		if qe != nil {
			return r.Clone(), granted, qe, nil
		}
		l.setAmount(r, t, next)
		granted++
		if e := r.Evict; e != nil && !e.Whole && r.Amount.LessEqual(e.To) {
			l.unmark(r) // it gave back what it was asked for
		}
	}
	return r.Clone(), granted, nil, nil
}

// usageWith is the usage of every level of r's path were its amount
// target, or an error if the books are broken or a sum overflows.
func (l *Ledger) usageWith(r *Reservation, target api.Resource) ([]api.Resource, error) {
	next := make([]api.Resource, len(r.Path))
	for i, q := range r.Path {
		u := l.usage[q]
		base, err := u.Sub(r.Amount)
		if err != nil {
			// Usage below one of its own reservations: the books are
			// broken; refuse rather than make them worse.
			return nil, fmt.Errorf("books broken: queue %q usage %s below reservation of %s (%s)", q, u, r.Job, r.Amount)
		}
		if next[i], err = base.Add(target); err != nil {
			return nil, fmt.Errorf("%w: queue %q: %v", ErrInvalid, q, err)
		}
	}
	return next, nil
}

// setAmount makes target r's amount and next (usageWith's) its path's
// usage.
func (l *Ledger) setAmount(r *Reservation, target api.Resource, next []api.Resource) {
	for i, q := range r.Path {
		if next[i].IsZero() {
			delete(l.usage, q)
		} else {
			l.usage[q] = next[i]
		}
	}
	r.Amount = target.Clone()
}

// frozen refuses a target that raises a dimension of a reservation that
// must not grow: a victim giving quota back, or a nominee not yet promoted.
func (l *Ledger) frozen(r *Reservation, target api.Resource) *QuotaError {
	if r.Evict == nil && r.State != Nominated {
		return nil
	}
	for _, d := range target.Dims() {
		if cur := r.Amount.Get(d); target.Get(d) > cur {
			u := l.usage[r.Queue].Get(d)
			return &QuotaError{Queue: r.Queue, Resource: d, Reserved: u, Asked: target.Get(d) - cur, Capability: u, Short: target.Get(d) - cur}
		}
	}
	return nil
}

// resized computes the usage of every level of r's path were its amount
// target, or the QuotaError of the first level (leaf first) where a raised
// dimension would exceed capability.
func (l *Ledger) resized(r *Reservation, target api.Resource) ([]api.Resource, *QuotaError, error) {
	next, err := l.usageWith(r, target)
	if err != nil {
		return nil, nil, err
	}
	for i, q := range r.Path {
		u, n := l.usage[q], next[i]
		spec, _ := l.tree.Get(q)
		var held api.Resource
		if !spec.Capability.IsUnlimited() {
			held = l.held(r.Path, i)
		}
		for _, d := range target.Dims() {
			if target.Get(d) <= r.Amount.Get(d) {
				continue
			}
			capv, set := spec.Capability.Get(d)
			if v := sat(n.Get(d), held.Get(d)); set && v > capv {
				return nil, &QuotaError{Queue: q, Resource: d, Reserved: u.Get(d), Asked: target.Get(d) - r.Amount.Get(d),
					Capability: capv, Held: held.Get(d), Short: v - capv}, nil
			}
		}
	}
	return next, nil, nil
}
