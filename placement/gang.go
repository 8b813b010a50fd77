package placement

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/shardsched/shardsched/api"
)

// Result is a gang plan.
type Result struct {
	// Assignments maps task UID → node name. It holds every task that fit
	// when OK, and nothing otherwise: a partial gang is never returned.
	Assignments map[string]string
	// Placed is how many tasks fit in the plan; when !OK it is how far the
	// plan got before it was dropped (always < minMember).
	Placed int
	// OK reports that at least minMember tasks fit.
	OK bool
	// Reasons counts, for the first task that fit nowhere, the nodes
	// rejected per reason ("Insufficient cpu" → 5), for a FailedScheduling
	// message (see Summarize). Empty when every task tried fit.
	Reasons map[string]int
	// Unplaced lists, in input order, the UIDs of the tasks that fit
	// nowhere or were not tried because the gang could no longer reach
	// minMember. Placed + len(Unplaced) is the number of distinct tasks.
	Unplaced []string
}

// PlaceGang plans where the tasks of one gang go on nodes, all or nothing.
//
// Tasks are placed in the order given (callers sort them: priority, then
// creation). Each task goes to the feasible node with the highest weighted
// score; the resources of every task placed are taken off that node's Free
// for the tasks after it, without touching the NodeBooks. Node order is
// shuffled once per call with rng, and ties go to the earlier node in that
// order, so shards planning at the same time rarely pick the same node; a
// nil rng keeps the input order (deterministic, for tests).
//
// The plan is OK when at least minMember tasks fit (minMember ≤ 0: always);
// then every task that fit is assigned, including those beyond minMember.
// Otherwise Assignments is empty. PlaceGang stops trying as soon as the
// tasks left cannot reach minMember.
//
// Nil tasks, nil nodes and repeated task UIDs (after the first) are
// ignored. Out-of-sync nodes are skipped whatever cfg says (F2). PlaceGang
// never mutates its arguments and never panics on them; it is safe to call
// from many goroutines at once with the same cfg and nodes, each with its
// own rng.
func PlaceGang(cfg Config, tasks []*api.Task, nodes []*api.NodeBooks, minMember int, rng *rand.Rand) Result {
	var p planner
	p.reset(cfg, nodes, rng)
	return p.placeGang(tasks, minMember)
}

// Planner is PlaceGang for a caller that places many gangs in a row (a
// scheduling cycle): it keeps one call's per-node buffers for the next
// instead of allocating them for every gang, which at 1,000 nodes was
// about 140 KB a gang and most of the garbage a cycle made. It also keeps
// what it derived from each node's allocatable (its pods, whether it has
// devices) while the same books come back at the same index, as they do
// gang after gang within a cycle; so books given to a Planner must never
// have their allocatable changed in place (the cache's snapshots never
// do: a changed node is new books). The zero value is ready. Not safe for
// concurrent use; results are PlaceGang's.
type Planner struct{ p planner }

// PlaceGang is the package's PlaceGang, reusing pl's buffers. Within a
// round (BeginRound) its plans may differ from PlaceGang's: see there.
func (pl *Planner) PlaceGang(cfg Config, tasks []*api.Task, nodes []*api.NodeBooks, minMember int, rng *rand.Rand) Result {
	p := &pl.p
	p.keep = true
	p.reset(cfg, nodes, rng)
	res := p.placeGang(tasks, minMember)
	p.keepWindow(nodes)
	// Keep no task and no books alive between calls (the next call sets
	// up only the slots it reads), but the window a round carries.
	clear(p.slots[:p.prepared])
	p.nodes, p.rng = nil, nil
	p.facts = taskFacts{}
	p.winReq = api.Resource{}
	p.prevFilters = append(p.prevFilters[:0], p.filters...)
	return res
}

func (p *planner) placeGang(tasks []*api.Task, minMember int) Result {
	res := Result{Assignments: make(map[string]string, min(len(tasks), 1024)), Reasons: map[string]int{}}

	gang := distinct(tasks)
	explained := false
	for k, t := range gang {
		// Give up once the tasks left cannot make up minMember.
		if res.Placed+(len(gang)-k) < minMember {
			res.Unplaced = append(res.Unplaced, t.UID)
			continue
		}
		if i := p.place(t); i >= 0 {
			res.Assignments[t.UID] = p.slot(i).view.Books.Node.Name
			res.Placed++
			continue
		}
		res.Unplaced = append(res.Unplaced, t.UID)
		if !explained {
			p.explain(t, res.Reasons)
			explained = true
		}
	}

	res.OK = res.Placed >= minMember
	if !res.OK {
		clear(res.Assignments)
	}
	return res
}

// distinct returns tasks without nil entries and without repeated UIDs
// (the first task with a UID wins), in order. It does not copy when there
// is nothing to drop.
func distinct(tasks []*api.Task) []*api.Task {
	if len(tasks) == 1 && tasks[0] != nil {
		return tasks
	}
	seen := make(map[string]struct{}, len(tasks))
	out := make([]*api.Task, 0, len(tasks))
	for _, t := range tasks {
		if t == nil {
			continue
		}
		if _, dup := seen[t.UID]; dup {
			continue
		}
		seen[t.UID] = struct{}{}
		out = append(out, t)
	}
	return out
}

// slot is one node in the plan.
type slot struct {
	view NodeView
	// tally is what is free on the node when the planner is lazy.
	tally tally
	// ready: view.Free (or tally) is computed. It is computed the first time a filter
	// that reads it, or a scorer, is about to see the node.
	ready bool
	// own holds the node's facts in a planner that keeps none from one
	// call to the next (PlaceGang's).
	own nodeFacts
}

// planner holds one PlaceGang call's state. It is never shared.
type planner struct {
	filters []Filter
	// static filters depend only on the books and the task's constraints
	// (see staticFilter); nStatic is the length of the chain's leading run
	// of them, whose verdicts nodeFacts cache per epoch.
	static  []bool
	nStatic int
	scorers []Scorer
	weights []int64
	sample  int
	// slots are the nodes in the shuffled order; only the first prepared
	// are set up (slot): a sampled scan stops after its sample's feasible
	// nodes, so a task placed at 5,000 nodes used to pay for shuffling
	// and setting up 4,500 slots it never looked at.
	slots    []slot
	prepared int
	order    []int // the node indices, shuffled up to prepared (reset's buffer)
	nodes    []*api.NodeBooks
	rng      *rand.Rand
	start    int // where the next scan starts when sampling
	// epoch names the current task's constraints (selector, affinity,
	// tolerations) under the current filters; it moves on when a task's
	// constraints differ from the previous task's, which invalidates every
	// node's cached verdict. The tasks of one gang usually share a pod
	// template, so one static scan serves the whole gang; a Planner keeps
	// the epoch from one call to the next when the filters are the same
	// built-in ones, so gangs of the same constraints in a cycle share it
	// too.
	epoch uint64
	// cons are the constraints of the last task placed (only those fields
	// are set: the task itself is not kept), consSet whether there is one
	// under the current filters; prevFilters the last call's filters,
	// which decide whether the next call keeps the epoch and cons.
	cons        api.Task
	consSet     bool
	prevFilters []Filter
	// facts are the current task's (begin); every slot's view points here.
	facts taskFacts
	// known holds, by index in the nodes of the last call, the facts kept
	// of each node's allocatable (reset keeps an entry while the same
	// books come at the same index).
	known []nodeFacts
	// keep: the planner is a Planner's, whose known outlive a call;
	// PlaceGang's keeps each node's facts in its slot instead.
	keep bool
	// lazy: every step is built in, so Free is never materialized (see
	// builtin); slots keep a tally instead.
	lazy bool
	// win is the window of the last scan: the nodes it found feasible, in
	// scan order, with their scores. A task that asks what the scanned
	// task asked (the same request, under the same constraint epoch) is
	// placed among them while one can take it (see fromWindow). winEpoch
	// and winReq are what the scan was for (winReq shares the task's
	// Scalars map, read only, and is dropped with the call); winPos is the
	// position in win of the node the last task was assumed onto, whose
	// verdict and score are stale (-1: none).
	win      []winNode
	winEpoch uint64
	winReq   api.Resource
	winPos   int
	// stale are the positions in win, in increasing order, of carried
	// nodes whose books changed since they were scored (the last call
	// assigned tasks to them): evaluated again before the window serves.
	stale []int
	// fixed is how many leading positions of order the carried window
	// took (not shuffled).
	fixed int
	// round: the Planner is in a round (BeginRound), and carry is the
	// window its last call left, by node index.
	round bool
	carry carriedWindow
	// placed are the slots tasks were assumed onto in this call; mark is
	// a buffer of flags by node or slot index.
	placed []int
	mark   []bool
}

// winNode is one node of the window: its slot and its score for the
// window's request.
type winNode struct {
	slot  int
	score int64
}

// maxWeight bounds a scorer's weight so that weighted sums cannot overflow.
const maxWeight int64 = 1 << 32

// reset prepares p for one PlaceGang call over nodes, reusing the
// buffers of its previous call.
func (p *planner) reset(cfg Config, nodes []*api.NodeBooks, rng *rand.Rand) {
	*p = planner{sample: max(cfg.Sample, 0), lazy: true,
		filters: p.filters[:0], static: p.static[:0], scorers: p.scorers[:0], weights: p.weights[:0],
		slots: p.slots, order: p.order[:0], nodes: nodes, rng: rng, known: p.known, keep: p.keep, win: p.win[:0], winPos: -1,
		epoch: p.epoch, cons: p.cons, consSet: p.consSet, prevFilters: p.prevFilters,
		stale: p.stale[:0], round: p.round, carry: p.carry, placed: p.placed[:0], mark: p.mark}
	prefix := true
	for _, f := range cfg.Filters {
		if f == nil {
			continue
		}
		if _, ok := f.(builtin); !ok {
			p.lazy = false
		}
		_, static := f.(staticFilter)
		p.filters = append(p.filters, f)
		p.static = append(p.static, static)
		if prefix = prefix && static; prefix {
			p.nStatic++
		}
	}
	for i, s := range cfg.Scorers {
		if s == nil {
			continue
		}
		if _, ok := s.(builtin); !ok {
			p.lazy = false
		}
		w := int64(1)
		if i < len(cfg.Weights) {
			w = min(max(cfg.Weights[i], 0), maxWeight)
		}
		p.scorers = append(p.scorers, s)
		p.weights = append(p.weights, w)
	}
	// The static verdicts kept in known stay valid only under the same
	// filters; comparing is safe for the built-in ones (comparable
	// values), which a lazy planner has only.
	if !p.lazy || !slices.Equal(p.filters, p.prevFilters) {
		p.epoch++
		p.cons, p.consSet = api.Task{}, false
	}
	if cap(p.order) < len(nodes) {
		p.order = make([]int, 0, len(nodes))
	}
	if p.carries(nodes) {
		p.takeWindow(nodes)
	} else {
		for i, b := range nodes {
			if b != nil {
				p.order = append(p.order, i)
			}
		}
	}
	p.carry.ok = false
	if cap(p.slots) < len(p.order) {
		p.slots = make([]slot, len(p.order))
	} else {
		p.slots = p.slots[:len(p.order)]
	}
	w := len(p.order)
	if p.sample > 0 {
		w = min(w, p.sample)
	}
	if cap(p.win) < w {
		p.win = append(make([]winNode, 0, max(w, len(p.win))), p.win...)
	}
	if p.keep && len(p.known) != len(nodes) {
		p.known = slices.Grow(p.known[:0], len(nodes))[:len(nodes)]
		clear(p.known)
	}
}

// slot returns the i-th node of the shuffled order, setting up the slots
// before it that are not yet. The order is shuffled as far as it is read
// (the forward Fisher–Yates: position k takes a node drawn uniformly from
// those not yet placed), which gives every prefix the distribution a whole
// shuffle would; indices are swapped, not slots, which is much cheaper
// than swapping structs that hold pointers.
func (p *planner) slot(i int) *slot {
	for ; p.prepared <= i; p.prepared++ {
		k := p.prepared
		if p.rng != nil && k >= p.fixed {
			j := k + p.rng.IntN(len(p.order)-k)
			p.order[k], p.order[j] = p.order[j], p.order[k]
		}
		n := p.order[k]
		s := &p.slots[k]
		*s = slot{}
		s.view.Books = p.nodes[n]
		s.view.facts = &p.facts
		if !p.keep {
			s.own.books = p.nodes[n]
			s.view.node = &s.own
		} else {
			if f := &p.known[n]; f.books != p.nodes[n] {
				*f = nodeFacts{books: p.nodes[n]}
			}
			s.view.node = &p.known[n]
		}
		if p.lazy {
			s.view.tally = &s.tally
		}
	}
	return &p.slots[i]
}

// begin prepares the planner for task t.
func (p *planner) begin(t *api.Task) {
	if !p.consSet || !sameConstraints(&p.cons, t) {
		p.epoch++
		p.cons, p.consSet = api.Task{NodeSelector: t.NodeSelector, Tolerations: t.Tolerations, Affinity: t.Affinity}, true
	}
	p.facts.set(t)
}

// place picks the best feasible node for t, assumes t onto it and returns
// its slot index, or -1 when no node is feasible.
//
// When every step is built in, a task that asks what the previous scan's
// task asked (the same request and constraints) is placed within that
// scan's window first (fromWindow); otherwise, or when no node of the
// window can take it any more, the nodes are scanned from where the last
// scan stopped, and the feasible ones found become the window. Steps from
// other packages may read any field of a task, so with them every task
// scans.
func (p *planner) place(t *api.Task) int {
	p.begin(t)
	best, pos := -1, -1
	if p.lazy && len(p.win) > 0 && p.winEpoch == p.epoch && p.winReq.Equal(t.Request) {
		p.refresh(t)
		best, pos = p.fromWindow(t)
	}
	if best < 0 {
		best, pos = p.scan(t)
	}
	p.winPos = pos
	if best >= 0 {
		if p.round {
			p.placed = append(p.placed, best)
		}
		s := p.slot(best)
		if !s.ready { // a carried node placed on by its kept score
			s.materialize()
		}
		if p.lazy {
			s.tally.take(&t.Request)
		} else {
			takeFree(&s.view.Free, &t.Request)
		}
	}
	return best
}

// scan looks at the nodes from p.start on, up to p.sample feasible ones
// (all with no sample), and returns the best one's slot and its position
// in the window it records, or -1, -1 when none is feasible. Ties go to
// the earlier node in scan order.
func (p *planner) scan(t *api.Task) (best, pos int) {
	n := len(p.slots)
	p.win, p.stale = p.win[:0], p.stale[:0]
	p.winEpoch, p.winReq = p.epoch, t.Request
	best, pos = -1, -1
	var bestScore int64
	k := 0
	for k = 0; k < n; k++ {
		i := p.start + k
		if i >= n {
			i -= n
		}
		s := p.slot(i)
		if _, ok := p.feasible(t, s); !ok {
			continue
		}
		score := p.score(t, &s.view)
		if best < 0 || score > bestScore {
			best, bestScore, pos = i, score, len(p.win)
		}
		p.win = append(p.win, winNode{slot: i, score: score})
		if p.sample > 0 && len(p.win) >= p.sample {
			k++
			break
		}
	}
	if p.sample > 0 && n > 0 {
		p.start = (p.start + k) % n
	}
	return best, pos
}

// fromWindow picks the best node of the window for t, which asks what the
// window's task asked under built-in steps only, and returns its slot and
// position, or -1, -1 when no node of the window can take t. A node that
// can no longer take it leaves the window.
//
// A built-in step reads of a task only its request and constraints, which
// are the window's, and of a node its books and what the plan took off
// it; frees only shrink within a plan. So a node the scan found infeasible
// stays so, the window holds every node of the scanned range that can
// take t, and only the node the last task went to needs evaluating again.
func (p *planner) fromWindow(t *api.Task) (best, pos int) {
	if k := p.winPos; k >= 0 && k < len(p.win) {
		w := &p.win[k]
		s := p.slot(w.slot)
		if _, ok := p.feasible(t, s); ok {
			old := w.score
			w.score = p.score(t, &s.view)
			// It was the first node with the best score and no other
			// changed: with a score as high, it still is (bin-packing
			// makes this the common case).
			if w.score >= old {
				return w.slot, k
			}
		} else {
			p.win = slices.Delete(p.win, k, k+1)
		}
	}
	best, pos = -1, -1
	var bestScore int64
	for k, w := range p.win {
		if best < 0 || w.score > bestScore {
			best, bestScore, pos = w.slot, w.score, k
		}
	}
	return best, pos
}

// explain runs the filters over every node again for a task that fit
// nowhere and counts the nodes per reason. Filters are pure, so this
// reproduces the failed scan; it keeps map work off the placement path.
func (p *planner) explain(t *api.Task, reasons map[string]int) {
	p.begin(t)
	for i := range p.slots {
		if st, ok := p.feasible(t, p.slot(i)); !ok {
			reasons[st.Reason]++
		}
	}
}

// feasible runs the built-in out-of-sync check and the filter chain: the
// static prefix once per node and epoch, the rest every time.
func (p *planner) feasible(t *api.Task, s *slot) (Status, bool) {
	if s.view.Books.OutOfSync {
		return reject(ReasonOutOfSync), false
	}
	nf := s.view.node
	if nf.epoch != p.epoch {
		nf.static, nf.epoch = Status{}, p.epoch
		for i := range p.nStatic {
			if st := p.run(i, t, s); st.Code != Success {
				nf.static = st
				break
			}
		}
	}
	if nf.static.Code != Success {
		return nf.static, false
	}
	for i := p.nStatic; i < len(p.filters); i++ {
		if st := p.run(i, t, s); st.Code != Success {
			return st, false
		}
	}
	if !s.ready { // scorers and assume need Free
		s.materialize()
	}
	return Status{}, true
}

// run runs filter i on one node, computing the node's Free first if the
// filter may read it.
func (p *planner) run(i int, t *api.Task, s *slot) Status {
	if !s.ready && !p.static[i] {
		s.materialize()
	}
	f := p.filters[i]
	st := f.Filter(t, &s.view)
	if st.Code != Success && st.Reason == "" { // still counted, by name
		st.Reason = "node(s) rejected by " + f.Name()
	}
	return st
}

// materialize computes the slot's Free, or its tally when the planner is
// lazy, from its books.
func (s *slot) materialize() {
	if s.view.tally != nil {
		s.tally.init(s.view.Books, s.view.node)
	} else {
		s.view.Free = idle(s.view.Books)
	}
	s.ready = true
}

// sameConstraints reports whether a and b have the same node selector,
// required affinity and tolerations: the only task fields static filters
// read.
func sameConstraints(a, b *api.Task) bool {
	return a == b || (maps.Equal(a.NodeSelector, b.NodeSelector) &&
		slices.Equal(a.Tolerations, b.Tolerations) &&
		slices.EqualFunc(a.Affinity, b.Affinity, func(x, y api.SelectorTerm) bool {
			return slices.EqualFunc(x.MatchExpressions, y.MatchExpressions, func(r, q api.SelectorRequirement) bool {
				return r.Key == q.Key && r.Operator == q.Operator && slices.Equal(r.Values, q.Values)
			})
		}))
}

func (p *planner) score(t *api.Task, v *NodeView) int64 {
	var total int64
	for i, s := range p.scorers {
		total += p.weights[i] * min(max(s.Score(t, v), 0), MaxScore)
	}
	return total
}

// Summarize renders reasons as kube-scheduler's FailedScheduling message:
//
//	0/8 nodes are available: 5 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector.
//
// Reasons are listed by count, highest first, then by name; counts ≤ 0 are
// left out. total is the number of nodes considered.
func Summarize(reasons map[string]int, total int) string {
	type entry struct {
		reason string
		count  int
	}
	entries := make([]entry, 0, len(reasons))
	for r, c := range reasons {
		if c > 0 {
			entries = append(entries, entry{r, c})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return strings.Compare(a.reason, b.reason)
	})
	var sb strings.Builder
	sb.WriteString("0/")
	sb.WriteString(strconv.Itoa(max(total, 0)))
	sb.WriteString(" nodes are available")
	for i, e := range entries {
		if i == 0 {
			sb.WriteString(": ")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(e.count))
		sb.WriteByte(' ')
		sb.WriteString(e.reason)
	}
	sb.WriteByte('.')
	return sb.String()
}
