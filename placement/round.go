package placement

import (
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Rounds: a Planner's calls within a scheduling cycle, each starting from
// the window the last one left (see BeginRound).

// BeginRound starts a round of calls, such as a scheduling cycle's, in
// which the caller promises that the books it gives change in place only
// on the nodes this Planner's plans assigned tasks to (the caller assumes
// a plan it keeps there, and may drop any plan), and that a slice of
// nodes given again holds the same books. Within a round, a call whose
// built-in steps, nodes and task's request and constraints are the last
// call's starts from the window of the last call's scan (see place)
// instead of shuffling and scanning the nodes again: the nodes it found
// feasible keep their scores, and those the last call assigned tasks to
// are evaluated again. So a stream of one-pod jobs asking the same packs
// as one gang does, each pod no longer paying for a scan of the sample.
// Nodes outside the window are still reached in the round's shuffled
// order once no node of the window can take a task.
func (pl *Planner) BeginRound() {
	pl.p.round = true
	pl.p.carry.clear()
}

// EndRound ends the round: the next call plans as PlaceGang does, and
// nothing of the round is kept alive.
func (pl *Planner) EndRound() {
	pl.p.round = false
	pl.p.carry.clear()
}

// carriedWindow is a window kept from one call of a round to the next:
// its nodes by index in the call's nodes, which are recognized by their
// first element's address and their length (the caller keeps a slice it
// gives again unchanged), the epoch and request it was scanned for, and
// the steps that scored it.
type carriedWindow struct {
	ok      bool
	first   **api.NodeBooks
	n       int
	win     []winNode // slot holds the node's index in nodes
	touched []bool    // by position in win: a task was assumed onto it
	epoch   uint64
	req     api.Resource
	scorers []Scorer
	weights []int64
	sample  int
}

func (c *carriedWindow) clear() {
	c.ok, c.first, c.req = false, nil, api.Resource{}
	c.win, c.touched = c.win[:0], c.touched[:0]
	clear(c.scorers)
	c.scorers, c.weights = c.scorers[:0], c.weights[:0]
}

// refresh evaluates again, for t, the carried nodes of the window whose
// books changed since they were scored, and drops those that can no
// longer take it.
func (p *planner) refresh(t *api.Task) {
	if len(p.stale) == 0 {
		return
	}
	for k := len(p.stale) - 1; k >= 0; k-- {
		i := p.stale[k]
		w := &p.win[i]
		s := p.slot(w.slot)
		if _, ok := p.feasible(t, s); ok {
			w.score = p.score(t, &s.view)
		} else {
			p.win = slices.Delete(p.win, i, i+1)
		}
	}
	p.stale = p.stale[:0]
	p.winPos = -1
}

// carries reports whether this call of a round may start from the window
// the last call left: the same built-in scorers, weights and sample, and
// the same nodes. The epoch (reset has settled it, moving it on when the
// filters differ) names the same filters and constraints; place checks
// the request.
func (p *planner) carries(nodes []*api.NodeBooks) bool {
	c := &p.carry
	if !p.round || !c.ok || !p.lazy || len(nodes) == 0 || c.n != len(nodes) || c.first != &nodes[0] ||
		c.epoch != p.epoch || c.sample != p.sample {
		return false
	}
	return slices.Equal(c.scorers, p.scorers) && slices.Equal(c.weights, p.weights)
}

// takeWindow puts the carried window's nodes first in the order (not
// shuffled), the other nodes after them, and makes the carried window
// this call's: the nodes the last call assigned tasks to are stale, and
// a scan starts after the window.
func (p *planner) takeWindow(nodes []*api.NodeBooks) {
	c := &p.carry
	p.win = p.win[:0]
	for k, w := range c.win {
		p.order = append(p.order, w.slot)
		if c.touched[k] {
			p.stale = append(p.stale, len(p.win))
		}
		p.win = append(p.win, winNode{slot: k, score: w.score})
	}
	p.fixed = len(p.order)
	p.mark = slices.Grow(p.mark[:0], len(nodes))[:len(nodes)]
	clear(p.mark)
	for _, i := range p.order {
		p.mark[i] = true
	}
	for i, b := range nodes {
		if b != nil && !p.mark[i] {
			p.order = append(p.order, i)
		}
	}
	p.winEpoch, p.winReq = c.epoch, c.req
	if n := len(p.order); n > 0 {
		p.start = p.fixed % n
	}
}

// keepWindow keeps, in a round, this call's window for the next call, by
// node index, marking the nodes tasks were assumed onto.
func (p *planner) keepWindow(nodes []*api.NodeBooks) {
	c := &p.carry
	c.clear()
	if !p.round || !p.lazy || len(p.win) == 0 || len(nodes) == 0 || p.winEpoch != p.epoch {
		return
	}
	p.mark = slices.Grow(p.mark[:0], len(p.order))[:len(p.order)]
	clear(p.mark)
	for _, i := range p.placed {
		p.mark[i] = true
	}
	for _, w := range p.win {
		c.win = append(c.win, winNode{slot: p.order[w.slot], score: w.score})
		c.touched = append(c.touched, p.mark[w.slot])
		p.mark[w.slot] = false
	}
	// A node the call placed on may have left the window as full with the
	// call's own tasks, which the caller may not keep: it comes back, to
	// be evaluated again.
	for _, i := range p.placed {
		if p.mark[i] {
			p.mark[i] = false
			c.win = append(c.win, winNode{slot: p.order[i]})
			c.touched = append(c.touched, true)
		}
	}
	for _, k := range p.stale {
		c.touched[k] = true // still to be evaluated again
	}
	c.ok, c.first, c.n = true, &nodes[0], len(nodes)
	c.epoch, c.req, c.sample = p.winEpoch, p.winReq, p.sample
	c.scorers = append(c.scorers, p.scorers...)
	c.weights = append(c.weights, p.weights...)
}
