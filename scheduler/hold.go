package scheduler

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
)

// Starvation guard. Small jobs fill the holes that finishing pods leave, so
// on a busy shard a large gang may never find minMember tasks' worth of
// room at once. When a gang that does not fit has waited longer than
// StarveAfter, the shard holds a set of nodes for it: no other job is
// placed there, so their pods drain as they finish, until the gang fits (on
// them or anywhere). Several gangs may hold nodes at once, oldest first,
// while the nodes held stay within HoldShare of the shard's nodes (the
// first hold is always allowed, so a small shard still serves its oldest
// gang); a node is held for one gang at a time. Holds made by node
// preemption (nodepreempt.go) are outside the budget: their nodes were
// emptied for a gang of higher priority, which takes them at once. A hold ends when its gang
// is placed, gone or no longer this shard's, or after MaxHold (then the
// same gang is not held again for MaxHold, so another may take a turn).
// A gang its queue owner's nodes could not hold even empty is offered to a
// shard whose nodes could (offerToHold), which holds for it as a claimer.
//
// Why several: a hold takes a pod lifetime to drain its nodes, and on a
// large shard gangs of 128 arrive about every second. Measured on the
// simulated 100k-core churn (30 minutes, seed 1) it made no difference
// there (p99 35 s against 31 s with one hold at a time): since GPU nodes
// are spared for GPU pods (placement.SpareDevices), the gangs that wait
// longest there wait for quota, not room, and 45 % of the free CPU sits on
// empty nodes.

// hold is the nodes set aside for one starving gang (loop only), kept in
// holds.byJob under the gang's UID.
type hold struct {
	nodes map[string]bool
	since time.Time
}

// holds are the holds in force (loop only): by job UID, and the job each
// held node is held for. full: in this cycle an older gang found the
// budget spent, so no younger one may take what is left (set by
// maybeHold, cleared at the start of each placement pass).
type holds struct {
	byJob  map[string]*hold
	byNode map[string]string
	full   bool
}

func newHolds() holds { return holds{byJob: map[string]*hold{}, byNode: map[string]string{}} }

// set holds nodes for job (adding to its hold if it has one) from since.
func (h *holds) set(job string, nodes map[string]bool, since time.Time) {
	cur := h.byJob[job]
	if cur == nil {
		cur = &hold{nodes: map[string]bool{}, since: since}
		h.byJob[job] = cur
	}
	for n := range nodes {
		if other, ok := h.byNode[n]; ok && other != job {
			if o := h.byJob[other]; o != nil {
				delete(o.nodes, n)
			}
		}
		cur.nodes[n] = true
		h.byNode[n] = job
	}
}

// end ends job's hold.
func (h *holds) end(job string) {
	if cur := h.byJob[job]; cur != nil {
		for n := range cur.nodes {
			if h.byNode[n] == job {
				delete(h.byNode, n)
			}
		}
		delete(h.byJob, job)
	}
}

// holdFilter returns the nodes j may use: those not held for another gang.
// The list for jobs without a hold is computed once per cycle (cache).
func (s *Scheduler) holdFilter(j *api.Job, nodes []*api.NodeBooks, cache *[]*api.NodeBooks) []*api.NodeBooks {
	if len(s.held.byNode) == 0 {
		return nodes
	}
	if s.held.byJob[j.UID] != nil {
		return s.usable(nodes, j.UID)
	}
	if *cache == nil {
		*cache = s.unheld(nodes)
	}
	return *cache
}

// unheld returns nodes without those held for a starving gang.
func (s *Scheduler) unheld(nodes []*api.NodeBooks) []*api.NodeBooks {
	if len(s.held.byNode) == 0 {
		return nodes
	}
	return s.usable(nodes, "")
}

// usable returns the nodes not held, or held for job.
func (s *Scheduler) usable(nodes []*api.NodeBooks, job string) []*api.NodeBooks {
	out := make([]*api.NodeBooks, 0, len(nodes))
	for _, n := range nodes {
		if by, ok := s.held.byNode[n.Node.Name]; !ok || by == job {
			out = append(out, n)
		}
	}
	return out
}

// holdBudget is how many of nodes may be held at once.
func (s *Scheduler) holdBudget(nodes []*api.NodeBooks) int {
	return int(math.Round(s.cfg.HoldShare * float64(len(nodes))))
}

// maybeHold starts a hold for j, a gang of need tasks (the first need of
// gang) that did not fit, if j holds nothing, has waited longer than
// StarveAfter and was not held lately, and the gang would fit this shard's
// nodes not held for others were they empty, within the budget. The nodes
// held are those the gang's plan uses on emptied copies of the nodes, the
// ones with the most free CPU now first (they drain soonest), so every
// filter (selectors, taints, GPUs) counts. It reports whether it held.
// Gangs come oldest first (placeAdmitted's order): once one finds the
// budget spent, the younger ones of the cycle get no hold either.
// neverFits reports that the gang is starving and would not fit this
// shard's nodes not held for others even were they empty: no hold here
// can help it (offerToHold hands it to a shard where one can).
func (s *Scheduler) maybeHold(j *api.Job, gang []*api.Task, need int, nodes []*api.NodeBooks) (held, neverFits bool) {
	now := s.cfg.Now()
	if s.held.byJob[j.UID] != nil || !s.starving(j, need) {
		return false, false
	}
	if at, ok := s.heldBefore[j.UID]; ok && now.Sub(at) < s.cfg.MaxHold {
		return false, false // its last hold ran out: give other gangs a turn
	}
	if s.held.full {
		return false, false // an older gang waits for the budget: it goes first
	}
	budget := s.holdBudget(nodes)
	if len(s.held.byJob) > 0 && len(s.held.byNode) >= budget {
		s.held.full = true
		return false, false
	}
	type cand struct {
		b    *api.NodeBooks
		free int64
	}
	var cands []cand
	for _, b := range s.usable(nodes, "") {
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
		return false, true // the gang would not fit this shard even on empty nodes
	}
	picked := map[string]bool{}
	for _, node := range plan.Assignments {
		picked[node] = true
	}
	if len(s.held.byJob) > 0 && len(s.held.byNode)+len(picked) > budget {
		s.held.full = true // it waits for a hold to end; younger gangs wait behind it
		return false, false
	}
	s.held.set(j.UID, picked, now)
	s.heldBefore[j.UID] = now
	s.stats.holds.Add(1)
	s.log.Info("holding nodes for a starving gang", "job", j.Key(), "gang", need, "nodes", len(picked),
		"holds", len(s.held.byJob), "nodes held", len(s.held.byNode), "waited", now.Sub(j.Created).Round(time.Millisecond))
	return true, false
}

// starving reports whether j, a gang of need tasks that did not fit, has
// waited long enough for nodes to be held for it.
func (s *Scheduler) starving(j *api.Job, need int) bool {
	return need >= 2 && !j.Created.IsZero() && s.cfg.Now().Sub(j.Created) >= s.cfg.StarveAfter
}

// endHold ends each hold whose gang was placed, is gone, is no longer this
// shard's to place (offered and claimed elsewhere, or its queue moved), or
// has held its nodes for MaxHold. mine are the jobs this shard placed or
// tried to place in the cycle.
func (s *Scheduler) endHold(placed, mine map[string]bool) {
	for uid, at := range s.heldBefore {
		if !s.live(uid) || s.cfg.Now().Sub(at) >= 2*s.cfg.MaxHold {
			delete(s.heldBefore, uid)
		}
	}
	for uid := range s.runnable {
		if !s.live(uid) {
			delete(s.runnable, uid)
		}
	}
	for uid, r := range s.roomTried {
		if !s.live(uid) || s.cfg.Now().Sub(r.at) >= nodePreemptAgain {
			delete(s.roomTried, uid)
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(s.held.byJob)) {
		h := s.held.byJob[uid]
		if placed[uid] || !mine[uid] || s.cfg.Now().Sub(h.since) >= s.cfg.MaxHold {
			s.log.Debug("hold ended", "job uid", uid, "placed", placed[uid], "held for", s.cfg.Now().Sub(h.since))
			s.held.end(uid)
		}
	}
}
