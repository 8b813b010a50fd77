package coordinator

import (
	"cmp"
	"fmt"
	"math"
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

// sat is a + b, saturating at the int64 bounds.
func sat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

// pick is one victim of a plan and what it gives.
type pick struct {
	r      *Reservation
	give   map[string]int64 // by dimension, the amount it frees
	whole  bool
	lca    int // index in the preemptor's path of the lowest common ancestor
	below  int // how many levels of r's path are below that ancestor
	reason string
	// order keys
	share float64
	qprio int32
}

// planning is one plan being made: what each level of the preemptor's path
// was short of, and the picks so far (what is still short is derived from
// them, so a pick can be replaced or dropped exactly).
type planning struct {
	l *Ledger
	// future is each level's usage once the victims already marked for
	// other nominees are gone (their quota is promised; a new plan must
	// not count it twice).
	future func(q, d string) int64
	path   []string
	base   []map[string]int64 // per level of path: dimension → short by, before any pick
	picks  map[string]*pick   // by victim UID
	order  []string           // victim UIDs in the order picked
}

// need is what level i is still short of in d.
func (p *planning) need(i int, d string) int64 {
	v := p.base[i][d]
	for _, k := range p.picks {
		if k.lca <= i {
			v -= k.give[d]
		}
	}
	return v
}

// maxNeed is the most any level at or above i is still short of in d.
func (p *planning) maxNeed(i int, d string) int64 {
	var m int64
	for ; i < len(p.path); i++ {
		if _, short := p.base[i][d]; short {
			m = max(m, p.need(i, d))
		}
	}
	return m
}

func (p *planning) met() bool {
	for i, m := range p.base {
		for d := range m {
			if p.need(i, d) > 0 {
				return false
			}
		}
	}
	return true
}

// headroom is what c's queues below the common ancestor can give in d and
// stay at or above their deserved share and guarantee, leaving out what c
// itself gives already (unbounded for a preemption).
func (p *planning) headroom(c *pick, d string) int64 {
	if c.reason == ReasonPreempt {
		return math.MaxInt64
	}
	h := int64(math.MaxInt64)
	for _, q := range c.r.Path[:c.below] {
		spec, _ := p.l.tree.Get(q)
		floor := max(spec.Deserved.Get(d), spec.Guarantee.Get(d))
		left := p.future(q, d) - floor
		for uid, k := range p.picks {
			if uid != c.r.Job.UID && slices.Contains(k.r.Path[:k.below], q) {
				left -= k.give[d]
			}
		}
		h = min(h, left)
	}
	return h
}

func (p *planning) add(k *pick) {
	if _, ok := p.picks[k.r.Job.UID]; !ok {
		p.order = append(p.order, k.r.Job.UID)
	}
	p.picks[k.r.Job.UID] = k
}

// plan chooses the victims that make req fit on path, or reports that none
// do. It changes nothing.
func (l *Ledger) plan(req ReserveRequest, path []string) ([]*pick, bool) {
	terms := req.Terms
	if terms == nil || !terms.Reclaim {
		return nil, false
	}
	// What each level is short of, in every dimension its capability sets.
	going := l.going()
	future := func(q, d string) int64 { return l.usage[q].Get(d) - going[q][d] }
	p := &planning{l: l, future: future, path: path, base: make([]map[string]int64, len(path)), picks: map[string]*pick{}}
	contended := map[string]bool{}
	lowestShort := -1
	for i, q := range path {
		spec, _ := l.tree.Get(q)
		held := l.held(path, i)
		for _, d := range spec.Capability.Dims() {
			capv, _ := spec.Capability.Get(d)
			if v := sat(sat(future(q, d), req.Amount.Get(d)), held.Get(d)) - capv; v > 0 {
				if p.base[i] == nil {
					p.base[i] = map[string]int64{}
				}
				p.base[i][d], contended[d] = v, true
				if lowestShort < 0 {
					lowestShort = i
				}
			}
		}
	}
	if lowestShort < 0 {
		// Nothing is short once the victims already marked are gone: a
		// victim that went whole frees more than its nominee needs. The
		// job waits for that quota, nominated with no victim of its own,
		// if it could take quota back from the level over capability at
		// all (its levels below it stay within their deserved share);
		// else it is refused, so a borrower never takes what is going.
		qe := l.overAt(path, req.Amount)
		if qe == nil {
			return nil, false
		}
		over := slices.Index(path, qe.Queue)
		for i := range over {
			if !l.withinDeserved(path[i], req.Amount, future) {
				return nil, false
			}
		}
		return nil, true
	}
	dims := slices.Sorted(func(yield func(string) bool) {
		for d := range contended {
			if !yield(d) {
				return
			}
		}
	})
	// How many levels from the leaf stay within their deserved share with
	// the job: a victim whose common ancestor is above them is not
	// reclaimable by this job.
	within := 0
	for within < len(path) && l.withinDeserved(path[within], req.Amount, future) {
		within++
	}
	onPath := make(map[string]int, len(path))
	for i, q := range path {
		onPath[q] = i
	}
	var cands []*pick
	for _, r := range l.candidates(path, within) {
		if r.Job.UID == req.Job.UID || r.State != Confirmed || r.Evict != nil || r.Protected {
			continue
		}
		lca, below := -1, 0
		for k, q := range r.Path {
			if i, ok := onPath[q]; ok {
				lca, below = i, k
				break
			}
		}
		if lca < 0 {
			continue
		}
		c := &pick{r: r, lca: lca, below: below}
		if lca == 0 {
			if r.Priority >= terms.Priority {
				continue
			}
			c.reason = ReasonPreempt
		} else {
			if lca > within || !l.reclaimable(r.Path[:below]) {
				continue
			}
			c.reason = ReasonReclaim
			c.share = l.dominantShare(r.Path[below-1], future)
			spec, _ := l.tree.Get(r.Queue)
			c.qprio = spec.Priority
		}
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b *pick) int {
		return cmp.Or(cmp.Compare(a.lca, b.lca), cmp.Compare(b.share, a.share), cmp.Compare(a.qprio, b.qprio),
			cmp.Compare(a.r.Priority, b.r.Priority), cmp.Compare(b.r.Created, a.r.Created), cmp.Compare(a.r.Job.UID, b.r.Job.UID))
	})
	// Pass 1: what jobs hold beyond their gang; pass 2: whole jobs.
	for _, c := range cands {
		if p.met() {
			break
		}
		give := map[string]int64{}
		for _, d := range dims {
			surplus := c.r.Amount.Get(d) - c.r.Floor.Get(d)
			if g := min(surplus, p.maxNeed(c.lca, d), p.headroom(c, d)); g > 0 {
				give[d] = g
			}
		}
		if len(give) > 0 {
			p.add(&pick{r: c.r, give: give, lca: c.lca, below: c.below, reason: c.reason})
		}
	}
	for _, c := range cands {
		if p.met() {
			break
		}
		prev := p.picks[c.r.Job.UID]
		useful, fits := false, true
		for _, d := range dims {
			more := c.r.Amount.Get(d)
			if prev != nil {
				more -= prev.give[d]
			}
			if more > 0 && p.maxNeed(c.lca, d) > 0 {
				useful = true
			}
			if c.r.Amount.Get(d) > p.headroom(c, d) {
				fits = false
			}
		}
		if !useful || !fits {
			continue
		}
		give := map[string]int64{}
		for _, d := range c.r.Amount.Dims() {
			give[d] = c.r.Amount.Get(d)
		}
		p.add(&pick{r: c.r, give: give, whole: true, lca: c.lca, below: c.below, reason: c.reason})
	}
	if !p.met() {
		return nil, false
	}
	// Never more than needed: drop, last first, every pick the others
	// make unnecessary.
	for i := len(p.order) - 1; i >= 0; i-- {
		uid := p.order[i]
		k := p.picks[uid]
		delete(p.picks, uid)
		if !p.met() {
			p.picks[uid] = k
		}
	}
	var out []*pick
	for _, uid := range p.order {
		if k, ok := p.picks[uid]; ok {
			out = append(out, k)
		}
	}
	return out, true
}

// candidates are the reservations a plan on path may take from: those of
// the leaf itself (preemption), and, when the first within levels of path
// stay within their deserved share, those of every queue below
// path[within-1]'s parent (reclaim from siblings, then cousins). Only
// those queues' reservations are read, not every reservation; those of a
// queue that left the tree are never taken.
func (l *Ledger) candidates(path []string, within int) []*Reservation {
	var out []*Reservation
	add := func(q string) {
		for _, r := range l.byQueue[q] {
			out = append(out, r)
		}
	}
	if within == 0 {
		add(path[0])
		return out
	}
	top := path[min(within, len(path)-1)]
	stack := []string{top}
	for len(stack) > 0 {
		q := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		add(q)
		stack = append(stack, l.tree.Children(q)...)
	}
	return out
}

// withinDeserved reports whether queue q's usage plus amount stays within
// its deserved share in every dimension amount asks for that the share
// sets (a queue that deserves cpu only is not held to a memory share); a
// queue that sets no deserved share deserves nothing.
func (l *Ledger) withinDeserved(q string, amount api.Resource, use func(q, d string) int64) bool {
	spec, _ := l.tree.Get(q)
	if spec.Deserved.IsZero() {
		return false
	}
	for _, d := range amount.Dims() {
		des := spec.Deserved.Get(d)
		if d == api.Pods || des == 0 {
			continue
		}
		if sat(use(q, d), amount.Get(d)) > des {
			return false
		}
	}
	return true
}

// reclaimable reports whether every queue of levels lets what it borrowed
// be taken back.
func (l *Ledger) reclaimable(levels []string) bool {
	for _, q := range levels {
		if spec, _ := l.tree.Get(q); !spec.Reclaimable() {
			return false
		}
	}
	return true
}

// dominantShare is q's usage over its deserved share in the dimension where
// that is largest (the pod count and dimensions its share does not set
// aside); a queue that deserves nothing and uses something is infinitely
// over.
func (l *Ledger) dominantShare(q string, use func(q, d string) int64) float64 {
	spec, _ := l.tree.Get(q)
	share := 0.0
	for _, d := range l.usage[q].Dims() {
		u := use(q, d)
		if d == api.Pods || u <= 0 {
			continue
		}
		if spec.Deserved.IsZero() {
			return math.Inf(1)
		}
		des := spec.Deserved.Get(d)
		if des <= 0 {
			continue
		}
		share = max(share, float64(u)/float64(des))
	}
	return share
}

// applyPlan marks the victims and books the nominee.
func (l *Ledger) applyPlan(req ReserveRequest, path []string, picks []*pick) Reservation {
	r := &Reservation{
		Job: req.Job, Queue: req.Queue, Path: path, Amount: req.Amount.Clone(), Floor: req.Amount.Clone(),
		State: Nominated, Lease: req.Lease, Shard: req.Shard,
	}
	r.SetTerms(req.Terms)
	l.insert(r)
	l.nominees[req.Job.UID] = true
	l.book(r)
	for _, p := range picks {
		ev := Eviction{By: req.Job, ByQueue: req.Queue, Reason: p.reason, Whole: p.whole}
		if !p.whole {
			to := p.r.Amount.Clone()
			for d, v := range p.give {
				to = to.With(d, to.Get(d)-v)
			}
			ev.To = to
		}
		l.mark(p.r, ev)
	}
	return r.Clone()
}

// describePlan is a one-line account of a plan, for logs.
func describePlan(victims []Reservation) string {
	s := ""
	for i, v := range victims {
		if i > 0 {
			s += ", "
		}
		what := "whole"
		if v.Evict != nil && !v.Evict.Whole {
			what = "down to " + v.Evict.To.String()
		}
		s += fmt.Sprintf("%s/%s in %s (%s, %s)", v.Job.Namespace, v.Job.Name, v.Queue, v.Evict.Reason, what)
	}
	return s
}
