package coordinator

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Victim choice: the plan that makes a job fit by taking quota back (the
// rules are in reclaim.go's overview), made in one pass over the
// candidates' surplus, then one over whole jobs, then pruned of every
// victim the others make unnecessary. A plan changes nothing; applyPlan
// books it.

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
// do; qe is why req does not fit as things stand (overAt's answer, never
// nil). It changes nothing.
func (l *Ledger) plan(req ReserveRequest, path []string, qe *QuotaError) ([]*pick, bool) {
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
