package placement

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// subset keeps about three nodes in four, in order.
func subset(r *rand.Rand, nodes []*api.NodeBooks) []*api.NodeBooks {
	out := make([]*api.NodeBooks, 0, len(nodes))
	for _, n := range nodes {
		if r.IntN(4) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// pooledGang is a gang of 1 to 6 copies of tasks from pool, mostly alike.
func pooledGang(r *rand.Rand, pool []*api.Task) []*api.Task {
	n := 1 + r.IntN(6)
	tmpl := pool[r.IntN(len(pool))]
	out := make([]*api.Task, n)
	for i := range out {
		if r.IntN(5) == 0 {
			tmpl = pool[r.IntN(len(pool))]
		}
		tk := copyTask(tmpl)
		tk.UID = fmt.Sprintf("u%d", i)
		out[i] = tk
	}
	return out
}

// A Planner used outside a round, after a round on other node slices with
// another config (as the scheduler's takeOffers would after placeAdmitted),
// plans exactly as a fresh PlaceGang: the same Result from the same rng.
func TestPlannerAfterRoundMatchesPlaceGang(t *testing.T) {
	for seed := uint64(0); seed < 1000; seed++ {
		var pl Planner
		r := rand.New(rand.NewPCG(seed, 3))
		nodes := randomCluster(r)
		base := mustConfig(t, []string{StrategyBinPack, StrategySpread}[r.IntN(2)])
		pc := base
		pc.Sample = 1 + r.IntN(4)
		rng := rngFor(seed)
		pool := randomGang(r)
		gen := func() []*api.Task {
			if r.IntN(2) == 0 {
				return pooledGang(r, pool)
			}
			return randomGang(r)
		}
		if r.IntN(3) == 0 {
			base.Sample = 1 + r.IntN(3)
		}
		for cycle := range 3 {
			pl.BeginRound()
			for call := range 1 + r.IntN(6) {
				cand := nodes
				if r.IntN(2) == 0 {
					cand = subset(r, nodes)
				}
				tasks := gen()
				for _, tk := range tasks {
					tk.UID = fmt.Sprintf("p%d-%d-%s", cycle, call, tk.UID)
				}
				res := pl.PlaceGang(pc, tasks, cand, r.IntN(len(tasks)+1), rng)
				if !res.OK || r.IntN(4) == 0 {
					continue
				}
				for _, tk := range tasks {
					if name, ok := res.Assignments[tk.UID]; ok {
						for _, b := range nodes {
							if b.Node.Name == name {
								b.Used, _ = b.Used.Add(tk.Request)
								b.Tasks++
							}
						}
					}
				}
			}
			pl.EndRound()
			// next cycle: some books replaced by copies
			for i := range nodes {
				if cycle%2 == 1 {
					break
				}
				if r.IntN(2) == 0 {
					nodes[i] = copyBooks(nodes[i])
				}
			}
			for off := range 1 + r.IntN(4) {
				offer := nodes
				if r.IntN(2) == 0 {
					offer = subset(r, nodes)
				}
				if len(offer) == 0 {
					continue
				}
				tasks := gen()
				m := r.IntN(len(tasks) + 1)
				s2 := seed*100 + uint64(cycle*10+off)
				want := PlaceGang(base, tasks, offer, m, rngFor(s2))
				got := pl.PlaceGang(base, tasks, offer, m, rngFor(s2))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d cycle %d offer %d: planner %+v, PlaceGang %+v", seed, cycle, off, got, want)
				}
			}
		}
	}
}

// The same with rounds and single calls interleaved over several configs,
// node subsets with repeated and nil books, and tasks with repeated UIDs;
// both leave the rng in the same state.
func TestPlannerInterleavedMatchesPlaceGang(t *testing.T) {
	for seed := uint64(0); seed < 1000; seed++ {
		var pl Planner
		r := rand.New(rand.NewPCG(seed, 5))
		nodes := randomCluster(r)
		if r.IntN(4) == 0 {
			nodes = append(nodes, nodes[r.IntN(len(nodes))], nil)
		}
		var cfgs []Config
		for range 4 {
			c := mustConfig(t, []string{StrategyBinPack, StrategySpread}[r.IntN(2)])
			switch r.IntN(6) {
			case 0:
				c = opaqueConfig(c)
			case 1:
				c.Filters = c.Filters[r.IntN(3):]
			case 2:
				c.Filters = []Filter{Resources{}, NodeSelector{}, Taints{}}
			case 3:
				c.Filters = nil
			}
			if r.IntN(2) == 0 {
				c.Sample = 1 + r.IntN(3)
			}
			cfgs = append(cfgs, c)
		}
		pool := randomGang(r)
		gen := func() []*api.Task {
			if r.IntN(2) == 0 {
				return pooledGang(r, pool)
			}
			return randomGang(r)
		}
		rng := rngFor(seed)
		for call := range 30 {
			cfg := cfgs[r.IntN(len(cfgs))]
			cand := nodes
			if r.IntN(2) == 0 {
				cand = subset(r, nodes)
			}
			tasks := gen()
			if r.IntN(5) == 0 {
				tasks = append(tasks, nil, tasks[0])
			}
			m := r.IntN(len(tasks) + 1)
			switch r.IntN(5) {
			case 0:
				pl.BeginRound()
			case 1:
				pl.EndRound()
			}
			if !pl.p.round {
				s2 := seed*1000 + uint64(call)
				ra, rb := rngFor(s2), rngFor(s2)
				want := PlaceGang(cfg, tasks, cand, m, ra)
				got := pl.PlaceGang(cfg, tasks, cand, m, rb)
				if ra.Uint64() != rb.Uint64() {
					t.Fatalf("seed %d call %d: rng consumption differs", seed, call)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d call %d: planner %+v, PlaceGang %+v", seed, call, got, want)
				}
				if r.IntN(3) == 0 {
					for i := range nodes {
						if nodes[i] != nil && r.IntN(3) == 0 {
							nodes[i] = copyBooks(nodes[i])
						}
					}
				}
				continue
			}
			res := pl.PlaceGang(cfg, tasks, cand, m, rng)
			if !res.OK || r.IntN(4) == 0 {
				continue
			}
			for _, tk := range tasks {
				if tk == nil {
					continue
				}
				if name, ok := res.Assignments[tk.UID]; ok {
					for _, b := range nodes {
						if b != nil && b.Node.Name == name {
							b.Used, _ = b.Used.Add(tk.Request)
							b.Tasks++
						}
					}
				}
			}
		}
	}
}
