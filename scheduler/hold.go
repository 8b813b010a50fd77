package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
)

// Starvation guard. Small jobs fill the holes that finishing pods leave, so
// on a busy shard a large gang may never find minMember tasks' worth of
// room at once. When the oldest gang that does not fit has waited longer
// than StarveAfter, the shard holds a set of nodes for it: no other job is
// placed there, so their pods drain as they finish, until the gang fits (on
// them or anywhere). One hold per shard at a time; it ends when the gang is
// placed, gone or no longer this shard's, or after MaxHold (then the same
// gang is not held again for MaxHold, so another may take a turn).

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
		*cache = s.unheld(nodes)
	}
	return *cache
}

// unheld returns nodes without those held for a starving gang.
func (s *Scheduler) unheld(nodes []*api.NodeBooks) []*api.NodeBooks {
	if s.held == nil {
		return nodes
	}
	out := make([]*api.NodeBooks, 0, len(nodes))
	for _, n := range nodes {
		if !s.held.nodes[n.Node.Name] {
			out = append(out, n)
		}
	}
	return out
}

// maybeHold starts a hold for j, a gang of need tasks (the first need of
// gang) that did not fit, if no hold exists, j has waited longer than
// StarveAfter and was not held lately, and the gang would fit this shard's
// nodes were they empty. The nodes held are those the gang's plan uses on
// emptied copies of the nodes, the ones with the most free CPU now first
// (they drain soonest), so every filter (selectors, taints, GPUs) counts.
func (s *Scheduler) maybeHold(j *api.Job, gang []*api.Task, need int, nodes []*api.NodeBooks) {
	now := s.cfg.Now()
	if s.held != nil || need < 2 || j.Created.IsZero() || now.Sub(j.Created) < s.cfg.StarveAfter {
		return
	}
	if at, ok := s.heldBefore[j.UID]; ok && now.Sub(at) < s.cfg.MaxHold {
		return // its last hold ran out: give other gangs a turn
	}
	type cand struct {
		b    *api.NodeBooks
		free int64
	}
	var cands []cand
	for _, b := range nodes {
		if !b.OutOfSync && !b.Node.Unschedulable {
			cands = append(cands, cand{b: b, free: b.Node.Allocatable.MilliCPU - b.Used.MilliCPU})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.b.Node.Name, b.b.Node.Name))
	})
	empty := make([]*api.NodeBooks, len(cands))
	for i, c := range cands {
		empty[i] = &api.NodeBooks{Node: c.b.Node, Generation: c.b.Generation}
	}
	pc := s.place
	pc.Sample = 0
	plan := placement.PlaceGang(pc, gang[:min(need, len(gang))], empty, need, nil)
	if !plan.OK {
		return // the gang would not fit this shard even on empty nodes
	}
	h := &hold{job: j.UID, nodes: map[string]bool{}, since: now}
	for _, node := range plan.Assignments {
		h.nodes[node] = true
	}
	s.held = h
	s.heldBefore[j.UID] = now
	s.stats.holds.Add(1)
	s.log.Info("holding nodes for a starving gang", "job", j.Key(), "gang", need, "nodes", len(h.nodes), "waited", now.Sub(j.Created).Round(time.Millisecond))
}

// endHold ends the hold when its gang was placed, is gone, is no longer
// this shard's to place (offered and claimed elsewhere, or its queue moved),
// or has held the nodes for MaxHold. mine are the jobs this shard placed or
// tried to place in the cycle.
func (s *Scheduler) endHold(placed, mine, live map[string]bool) {
	for uid, at := range s.heldBefore {
		if !live[uid] || s.cfg.Now().Sub(at) >= 2*s.cfg.MaxHold {
			delete(s.heldBefore, uid)
		}
	}
	for uid := range s.runnable {
		if !live[uid] {
			delete(s.runnable, uid)
		}
	}
	for uid, r := range s.roomTried {
		if !live[uid] || s.cfg.Now().Sub(r.at) >= nodePreemptAgain {
			delete(s.roomTried, uid)
		}
	}
	if s.held == nil {
		return
	}
	if placed[s.held.job] || !mine[s.held.job] || s.cfg.Now().Sub(s.held.since) >= s.cfg.MaxHold {
		s.log.Debug("hold ended", "job uid", s.held.job, "placed", placed[s.held.job], "held for", s.cfg.Now().Sub(s.held.since))
		s.held = nil
	}
}
