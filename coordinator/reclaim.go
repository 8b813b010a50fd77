package coordinator

import (
	"cmp"
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Taking quota back: reclaim (between queues) and preemption (within a
// queue), decided here because the ledger is the one place that sees every
// queue's reservations at once and applies requests one after another.
//
// A job that does not fit and asks with Terms.Reclaim gets a plan instead of
// a refusal when one exists: victim reservations are marked (Eviction, in
// the same commit) and the job gets a Nominated reservation. The nominated
// amount is booked at once, so the quota the victims give back is held for
// it and no third job can take it; the levels may show more booked than
// their capability meanwhile, which blocks every other admission there. No
// pod of the nominee is bound until the reservation is promoted: on the
// nominee's next Reserve once no victim of it is left (each victim's queue
// owner evicts its pods and releases, or shrinks, its reservation) and only
// if it then fits (else it is dropped and planned again). A nominee that
// goes (released, or its shard's lease expired) unmarks its victims: a
// half-done plan is undone, never repeated; one the leader change
// interrupted is carried on by the next leader from etcd, as stored.
//
// Who may be a victim, for a preemptor P asking for amount A in leaf queue Q:
//   - only confirmed reservations (running gangs), not protected
//     (volcano.sh/preemptable "false"), not already marked, never a
//     nominee;
//   - in Q itself (preempt): a job of lower priority;
//   - in another leaf V (reclaim), with L the lowest common ancestor of Q
//     and V: every level of Q's path below L stays within its deserved
//     share with A (the preemptor ends at or below its own: so a reclaim
//     cannot be reclaimed back; only the dimensions a share sets are
//     weighed, and a queue with no deserved share deserves nothing),
//     every level of V's path below L is
//     reclaimable and keeps, after the victims go, at least its deserved
//     share and its guarantee in every resource being freed (victims come
//     only from queues above their share);
//   - the victim must free a level that is short.
//
// Order: same queue first, then the closest relatives (siblings, then up
// the tree, as Volcano walks it), then the most over-deserved queue
// (dominant share), then lower queue priority, lower job priority, the
// youngest job, the UID. A job first gives what it holds beyond its gang
// (Reservation.Floor: its pods beyond minMember), every candidate's surplus
// before any whole job; a job that must go below its gang goes whole. The
// victims chosen are then pruned, last first, of any the preemptor does not
// need: never more is taken than it needs.

// Victims returns the reservations marked for the nominee uid, sorted by UID.
func (l *Ledger) Victims(uid string) []Reservation {
	out := make([]Reservation, 0, len(l.victims[uid]))
	for v := range l.victims[uid] {
		if r, ok := l.res[v]; ok {
			out = append(out, r.Clone())
		}
	}
	slices.SortFunc(out, func(a, b Reservation) int { return cmp.Compare(a.Job.UID, b.Job.UID) })
	return out
}

// Evicting returns every reservation marked for eviction, sorted by UID:
// what the victims' queue owners must act on.
func (l *Ledger) Evicting() []Reservation {
	var out []Reservation
	for _, set := range l.victims {
		for v := range set {
			if r, ok := l.res[v]; ok {
				out = append(out, r.Clone())
			}
		}
	}
	slices.SortFunc(out, func(a, b Reservation) int { return cmp.Compare(a.Job.UID, b.Job.UID) })
	return out
}

// mark makes r a victim of ev.By.
func (l *Ledger) mark(r *Reservation, ev Eviction) {
	r.Evict = &ev
	set := l.victims[ev.By.UID]
	if set == nil {
		set = map[string]bool{}
		l.victims[ev.By.UID] = set
	}
	set[r.Job.UID] = true
	l.dirty[r.Job.UID] = true
}

// unmark clears r's eviction mark.
func (l *Ledger) unmark(r *Reservation) {
	if r.Evict == nil {
		return
	}
	by := r.Evict.By.UID
	if set := l.victims[by]; set != nil {
		delete(set, r.Job.UID)
		if len(set) == 0 {
			delete(l.victims, by)
		}
	}
	r.Evict = nil
	l.dirty[r.Job.UID] = true
}

// unmarkVictimsOf clears the marks of every victim of the nominee uid (its
// plan is undone).
func (l *Ledger) unmarkVictimsOf(uid string) {
	for v := range l.victims[uid] {
		if r, ok := l.res[v]; ok {
			r.Evict = nil
			l.dirty[v] = true
		}
	}
	delete(l.victims, uid)
}

// settle drops marks whose nominee is gone or no longer nominated (after a
// reload from etcd, where a nominee may have expired while no leader ran).
func (l *Ledger) settle() {
	for uid, r := range l.res {
		if r.State == Nominated {
			l.nominees[uid] = true
		}
	}
	for nominee := range l.victims {
		if n, ok := l.res[nominee]; !ok || n.State != Nominated {
			l.unmarkVictimsOf(nominee)
		}
	}
}

// takeDirty returns, sorted, the UIDs of reservations changed as a side
// effect of the operations applied since the last call (victims marked or
// unmarked): the caller writes them (or deletes the gone ones).
func (l *Ledger) takeDirty() []string {
	if len(l.dirty) == 0 {
		return nil
	}
	out := make([]string, 0, len(l.dirty))
	for uid := range l.dirty {
		out = append(out, uid)
	}
	clear(l.dirty)
	slices.Sort(out)
	return out
}

// promote makes a nominated reservation with no victim left the job's own
// (tentative under the asker's lease, or confirmed without one) if it fits
// at every level, counting itself; otherwise it is dropped and the caller
// plans again. It reports whether it was promoted.
func (l *Ledger) promote(r *Reservation, lease int64, shard string) bool {
	// Other nominees hold quota but cover no bound pod: what the promoted
	// reservation may cover must fit beside what can be bound, not beside
	// their holds (which are checked when each of them is promoted).
	holds := l.sumOver(func(n *Reservation) (api.Resource, bool) {
		return n.Amount, n.State == Nominated && n.Job.UID != r.Job.UID
	})
	if qe := l.overWith(r.Path, api.Resource{}, func(q, d string) int64 { return l.usage[q].Get(d) - holds[q][d] }); qe != nil {
		l.Release(r.Job.UID)
		return false
	}
	delete(l.nominees, r.Job.UID)
	if lease != 0 {
		r.Lease, r.Shard = lease, shard
	}
	r.State = Tentative
	if r.Lease == 0 {
		r.State = Confirmed
	}
	return true
}

// held is what the queues beside level i of path hold for their guarantee
// and do not use: the children of path[i] other than path[i-1] (none for
// the leaf), max(0, guarantee − usage) each, summed.
func (l *Ledger) held(path []string, i int) api.Resource {
	if i == 0 {
		return api.Resource{}
	}
	out := api.Resource{}
	for _, c := range l.guaranteed()[path[i]] {
		if c == path[i-1] {
			continue
		}
		spec, _ := l.tree.Get(c)
		for _, d := range spec.Guarantee.Dims() {
			if free := spec.Guarantee.Get(d) - l.usage[c].Get(d); free > 0 {
				out = out.With(d, out.Get(d)+free)
			}
		}
	}
	return out
}

// guaranteed maps each parent to its children that set a guarantee (built
// once per tree).
func (l *Ledger) guaranteed() map[string][]string {
	if l.guarTree == l.tree {
		return l.guar
	}
	l.guar = map[string][]string{}
	for _, n := range l.tree.Names() {
		spec, _ := l.tree.Get(n)
		if n != api.RootQueue && !spec.Guarantee.IsZero() {
			l.guar[spec.Parent] = append(l.guar[spec.Parent], n)
		}
	}
	l.guarTree = l.tree
	return l.guar
}

// overAt is the QuotaError of the first level of path (leaf first) where
// usage + extra + what siblings hold for their guarantee exceeds the
// capability, or nil.
func (l *Ledger) overAt(path []string, extra api.Resource) *QuotaError {
	return l.overWith(path, extra, func(q, d string) int64 { return l.usage[q].Get(d) })
}

// overWith is overAt with the usage of each level and dimension given by use.
func (l *Ledger) overWith(path []string, extra api.Resource, use func(q, d string) int64) *QuotaError {
	for i, q := range path {
		spec, _ := l.tree.Get(q)
		if spec.Capability.IsUnlimited() {
			continue
		}
		held := l.held(path, i)
		for _, d := range spec.Capability.Dims() {
			capv, _ := spec.Capability.Get(d)
			u := use(q, d)
			if v := sat(sat(u, extra.Get(d)), held.Get(d)); v > capv {
				return &QuotaError{Queue: q, Resource: d, Reserved: u, Asked: extra.Get(d), Capability: capv,
					Held: held.Get(d), Short: v - capv}
			}
		}
	}
	return nil
}

// sumOver sums, per queue of their paths and dimension, the amounts f
// returns for the reservations it selects (nominees and victims only: the
// loop is over those).
func (l *Ledger) sumOver(f func(*Reservation) (api.Resource, bool)) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	add := func(r *Reservation) {
		a, ok := f(r)
		if !ok {
			return
		}
		for _, q := range r.Path {
			m := out[q]
			if m == nil {
				m = map[string]int64{}
				out[q] = m
			}
			for _, d := range a.Dims() {
				m[d] = sat(m[d], a.Get(d))
			}
		}
	}
	for n := range l.nominees {
		if r, ok := l.res[n]; ok {
			add(r)
		}
		for v := range l.victims[n] {
			if r, ok := l.res[v]; ok {
				add(r)
			}
		}
	}
	return out
}

// going is, per queue and dimension, what the marked victims will give
// back: the part of each level's usage already promised to a nominee.
func (l *Ledger) going() map[string]map[string]int64 {
	return l.sumOver(func(r *Reservation) (api.Resource, bool) {
		if r.Evict == nil {
			return api.Resource{}, false
		}
		if r.Evict.Whole {
			return r.Amount, true
		}
		give := api.Resource{}
		for _, d := range r.Amount.Dims() {
			if v := r.Amount.Get(d) - r.Evict.To.Get(d); v > 0 {
				give = give.With(d, v)
			}
		}
		return give, true
	})
}
