package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// benchCluster is a shard's worth of nodes: 64 cores, 256Gi, 110 pods each,
// about half used; one in eight has 8 tainted GPUs; three zones.
func benchCluster(n int) []*api.NodeBooks {
	r := rand.New(rand.NewPCG(1, 2))
	nodes := make([]*api.NodeBooks, n)
	for i := range nodes {
		b := mkNode(fmt.Sprintf("node-%05d", i), 64, 256, 110,
			withLabels("zone", fmt.Sprintf("z%d", i%3), "gen", fmt.Sprint(3+i%4)),
			withUsed(r.Int64N(48000), r.Int64N(192), r.Int64N(60)))
		if i%8 == 0 {
			withGPU(8)(b)
			withTaint("nvidia.com/gpu", "present", api.TaintNoSchedule)(b)
		}
		nodes[i] = b
	}
	return nodes
}

// BenchmarkPlaceGang plans one gang of 4-core, 16Gi tasks over 1,600 nodes:
// "plain" tasks have no constraints (every node reaches the Resources
// filter); "constrained" tasks have a zone selector and a Gt affinity that
// about a quarter of the nodes pass. It reports time and allocations per
// plan; compare sizes as ratios within one run, never as absolute times.
func BenchmarkPlaceGang(b *testing.B) {
	nodes := benchCluster(1600)
	for _, strategy := range []string{StrategyBinPack, StrategySpread} {
		cfg, err := DefaultConfig(strategy)
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"plain", "constrained"} {
			for _, size := range []int{1, 8, 128} {
				tasks := gang("g", size, 4000, 16)
				if kind == "constrained" {
					for _, t := range tasks {
						t.NodeSelector = map[string]string{"zone": "z1"}
						t.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{req("gen", api.SelectorGt, "3")}}}
					}
				}
				b.Run(fmt.Sprintf("%s/%s/nodes=1600/gang=%d", strategy, kind, size), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(7, 7))
					b.ReportAllocs()
					for b.Loop() {
						if res := PlaceGang(cfg, tasks, nodes, size, rng); !res.OK {
							b.Fatalf("gang of %d did not fit: %s", size, Summarize(res.Reasons, len(nodes)))
						}
					}
				})
			}
		}
	}
}

// BenchmarkPlannerReuse is BenchmarkPlaceGang's single-task plain gang
// (binpack, 1,600 nodes) placed fresh and with one Planner reused, as a
// scheduling cycle places one job after another.
func BenchmarkPlannerReuse(b *testing.B) {
	nodes := benchCluster(1600)
	cfg, err := DefaultConfig(StrategyBinPack)
	if err != nil {
		b.Fatal(err)
	}
	tasks := gang("g", 1, 4000, 16)
	var pl Planner
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reused=%v", reuse), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 7))
			b.ReportAllocs()
			for b.Loop() {
				var res Result
				if reuse {
					res = pl.PlaceGang(cfg, tasks, nodes, 1, rng)
				} else {
					res = PlaceGang(cfg, tasks, nodes, 1, rng)
				}
				if !res.OK {
					b.Fatal("the task did not fit")
				}
			}
		})
	}
}

// BenchmarkPlannerSampled is what a scheduling cycle does at 100k cores
// with one shard: one Planner reused for gang after gang (8 tasks of 4
// cores) over 1,600 nodes, every tenth with 8 GPUs and no taint (the
// simulator's cluster), each task scoring a sample of 608 feasible nodes
// as the scheduler's nodeSample sizes it. Compare as ratios in one run.
func BenchmarkPlannerSampled(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	nodes := make([]*api.NodeBooks, 1600)
	for i := range nodes {
		nodes[i] = mkNode(fmt.Sprintf("node-%05d", i), 64, 256, 110,
			withUsed(r.Int64N(32000), r.Int64N(128), r.Int64N(40)))
		if i%10 == 0 {
			withGPU(8)(nodes[i])
		}
	}
	cfg, err := DefaultConfig(StrategyBinPack)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Sample = 608
	tasks := gang("g", 8, 4000, 16)
	var pl Planner
	rng := rand.New(rand.NewPCG(7, 7))
	b.ReportAllocs()
	for b.Loop() {
		if res := pl.PlaceGang(cfg, tasks, nodes, len(tasks), rng); !res.OK {
			b.Fatal("the gang did not fit")
		}
	}
}

// BenchmarkPlannerOneTask is what a scheduling cycle does for the common
// job in a stream of pods: one Planner reused to place a single 4-core task
// over 1,000 and 5,000 nodes, each scan sampling the feasible nodes the
// scheduler's nodeSample gives for that size (420 and 500). Compare sizes
// and builds as ratios in one run.
func BenchmarkPlannerOneTask(b *testing.B) {
	for _, size := range []struct{ nodes, sample int }{{1000, 420}, {5000, 500}} {
		nodes := benchCluster(size.nodes)
		cfg, err := DefaultConfig(StrategyBinPack)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Sample = size.sample
		tasks := gang("g", 1, 4000, 16)
		b.Run(fmt.Sprintf("nodes=%d/sample=%d", size.nodes, size.sample), func(b *testing.B) {
			var pl Planner
			rng := rand.New(rand.NewPCG(7, 7))
			b.ReportAllocs()
			for b.Loop() {
				if res := pl.PlaceGang(cfg, tasks, nodes, 1, rng); !res.OK {
					b.Fatal("the task did not fit")
				}
			}
		})
	}
}
