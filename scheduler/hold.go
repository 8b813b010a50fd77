package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Starvation guard. Small jobs fill the holes that finishing pods leave, so
// on a busy shard a large gang may never find minMember tasks' worth of
// room at once. When the oldest gang that does not fit has waited longer
// than StarveAfter, the shard holds a set of nodes for it: no other job is
// placed there, so their pods drain as they finish, until the gang fits (on
// them or anywhere). One hold per shard at a time; it ends when the gang is
// placed or gone, or after MaxHold (then another gang may take a turn).

// hold is the nodes set aside for one starving gang (loop only).
type hold struct {
	job   string
	nodes map[string]bool
	since time.Time
}

// holdFilter returns nodes without the held ones, unless j is the job they
// are held for. The result is computed once per cycle.
func (s *Scheduler) holdFilter(j *api.Job, nodes []*api.NodeBooks, cache *[]*api.NodeBooks) []*api.NodeBooks {
	if s.held == nil || s.held.job == j.UID {
		return nodes
	}
	if *cache == nil {
		out := make([]*api.NodeBooks, 0, len(nodes))
		for _, n := range nodes {
			if !s.held.nodes[n.Node.Name] {
				out = append(out, n)
			}
		}
		*cache = out
	}
	return *cache
}

// maybeHold starts a hold for j, a gang of need tasks like gang[0..need)
// that did not fit, if no hold exists, j has waited longer than StarveAfter,
// and the shard's nodes could hold the gang were they empty. The nodes
// chosen are those with the most free CPU now, so they drain soonest.
func (s *Scheduler) maybeHold(j *api.Job, gang []*api.Task, need int, nodes []*api.NodeBooks) {
	now := s.cfg.Now()
	if s.held != nil || need < 2 || j.Created.IsZero() || now.Sub(j.Created) < s.cfg.StarveAfter {
		return
	}
	var task api.Resource // the largest request of the gang, per dimension
	for _, t := range gang[:min(need, len(gang))] {
		task = task.Max(t.Request)
	}
	type cand struct {
		b    *api.NodeBooks
		free int64
		fits int
	}
	var cands []cand
	for _, b := range nodes {
		if b.OutOfSync || b.Node.Unschedulable {
			continue
		}
		if n := tasksThatFit(b.Node.Allocatable, task); n > 0 {
			cands = append(cands, cand{b: b, free: b.Node.Allocatable.MilliCPU - b.Used.MilliCPU, fits: n})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.b.Node.Name, b.b.Node.Name))
	})
	h := &hold{job: j.UID, nodes: map[string]bool{}, since: now}
	room := 0
	for _, c := range cands {
		if room >= need {
			break
		}
		h.nodes[c.b.Node.Name] = true
		room += c.fits
	}
	if room < need {
		return // the gang would not fit this shard even on empty nodes
	}
	s.held = h
	s.stats.holds.Add(1)
	s.log.Info("holding nodes for a starving gang", "job", j.Key(), "gang", need, "nodes", len(h.nodes), "waited", now.Sub(j.Created).Round(time.Millisecond))
}

// tasksThatFit is how many tasks of request r fit an empty node of
// allocatable a (0 if one does not).
func tasksThatFit(a, r api.Resource) int {
	n := int64(-1)
	for _, d := range r.Dims() {
		need := r.Get(d)
		if need <= 0 {
			continue
		}
		k := a.Get(d) / need
		if n < 0 || k < n {
			n = k
		}
	}
	if n < 0 {
		return 0
	}
	return int(min(n, 1<<20))
}

// endHold ends the hold when its gang was placed, is gone, or has held the
// nodes for MaxHold.
func (s *Scheduler) endHold(placed map[string]bool, live map[string]bool) {
	if s.held == nil {
		return
	}
	if placed[s.held.job] || !live[s.held.job] || s.cfg.Now().Sub(s.held.since) >= s.cfg.MaxHold {
		s.log.Debug("hold ended", "job uid", s.held.job, "placed", placed[s.held.job], "held for", s.cfg.Now().Sub(s.held.since))
		s.held = nil
	}
}
