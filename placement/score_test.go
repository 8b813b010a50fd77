package placement

import (
	"math"
	"testing"

	"github.com/shardsched/shardsched/api"
)

func TestScores(t *testing.T) {
	cases := []struct {
		name    string
		task    *api.Task
		node    *NodeView
		binpack int64
	}{
		{"empty node, quarter of cpu", mkTask("a", 4000, 0), view(mkNode("n", 16, 64, 110)), 25},
		{"memory dominates", mkTask("a", 1000, 32), view(mkNode("n", 16, 64, 110)), 50},
		{"used counts", mkTask("a", 4000, 0), view(mkNode("n", 16, 64, 110, withUsed(8000, 0, 2))), 75},
		{"fills the node", mkTask("a", 16000, 0), view(mkNode("n", 16, 64, 110)), 100},
		{"pods dimension can dominate", mkTask("a", 0, 0), view(mkNode("n", 16, 64, 2, withUsed(0, 0, 1))), 100},
		{"gpu dominates when asked", &api.Task{Request: api.NewResource(1000, 0, map[string]int64{gpu: 4})},
			view(mkNode("n", 16, 64, 110, withGPU(8))), 50},
		{"gpu ignored when not asked", mkTask("a", 1600, 0), view(mkNode("n", 16, 64, 110, withGPU(8))), 10},
		{"request larger than free clamps", mkTask("a", 99000, 0), view(mkNode("n", 16, 64, 110)), 100},
		{"node with no allocatable", mkTask("a", 1000, 1), &NodeView{Books: &api.NodeBooks{}}, 0},
		{"huge numbers do not overflow", &api.Task{Request: api.NewResource(math.MaxInt64/2+1, 0, nil)},
			&NodeView{Books: &api.NodeBooks{Node: api.Node{Allocatable: api.NewResource(math.MaxInt64, 0, nil)}},
				Free: api.NewResource(math.MaxInt64, 0, nil)}, 50},
		{"negative free and request", &api.Task{Request: api.Resource{MilliCPU: -1}},
			&NodeView{Books: mkNode("n", 4, 4, 4), Free: api.Resource{MilliCPU: -7}}, 100},
		{"nil task", nil, view(mkNode("n", 16, 64, 110, withUsed(4000, 0, 1))), 25},
		{"nil node", mkTask("a", 1, 1), nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := (BinPack{}).Score(tc.task, tc.node); got != tc.binpack {
				t.Errorf("BinPack = %d, want %d", got, tc.binpack)
			}
			if got := (Spread{}).Score(tc.task, tc.node); got != MaxScore-tc.binpack {
				t.Errorf("Spread = %d, want %d", got, MaxScore-tc.binpack)
			}
		})
	}
}

func TestSpareDevicesScore(t *testing.T) {
	gpuTask := &api.Task{Request: api.NewResource(1000, 0, map[string]int64{gpu: 1, api.Pods: 1})}
	cases := []struct {
		name string
		task *api.Task
		node *NodeView
		want int64
	}{
		{"cpu task, cpu node", mkTask("a", 1000, 1), view(mkNode("n", 16, 64, 110)), MaxScore},
		{"cpu task, gpu node", mkTask("a", 1000, 1), view(mkNode("n", 16, 64, 110, withGPU(8))), 0},
		{"gpu task, gpu node", gpuTask, view(mkNode("n", 16, 64, 110, withGPU(8))), MaxScore},
		{"cpu task, node with zero gpus", mkTask("a", 1000, 1), view(mkNode("n", 16, 64, 110, withGPU(0))), MaxScore},
		{"nil task, gpu node", nil, view(mkNode("n", 16, 64, 110, withGPU(8))), 0},
		{"cpu task, node with ephemeral-storage and hugepages", mkTask("a", 1000, 1),
			view(mkNode("n", 16, 64, 110, withScalar("ephemeral-storage", 100*gi), withScalar("hugepages-2Mi", 2*gi))), MaxScore},
		{"cpu task, node with a vendor device", mkTask("a", 1000, 1), view(mkNode("n", 16, 64, 110, withScalar("example.com/fpga", 2))), 0},
		{"cpu task, node with a kubernetes.io resource", mkTask("a", 1000, 1), view(mkNode("n", 16, 64, 110, withScalar("kubernetes.io/batch-cpu", 2))), MaxScore},
		{"nil node", mkTask("a", 1, 1), nil, MaxScore},
	}
	for _, tc := range cases {
		if got := (SpareDevices{}).Score(tc.task, tc.node); got != tc.want {
			t.Errorf("%s: SpareDevices = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// With the default pipeline a task that asks for no GPU goes to a GPU node
// only when no other node fits it, however packed the GPU node is; a GPU
// task still goes where the GPUs are.
func TestDefaultConfigSparesGPUNodes(t *testing.T) {
	for _, strategy := range []string{StrategyBinPack, StrategySpread} {
		cfg := mustConfig(t, strategy)
		// Every node has ephemeral-storage, as real ones do: not a device.
		eph := withScalar("ephemeral-storage", 100*gi)
		nodes := []*api.NodeBooks{
			mkNode("gpu-busy", 32, 128, 110, withGPU(8), withUsed(28000, 16, 10), eph),
			mkNode("cpu-empty", 32, 128, 110, eph),
			mkNode("cpu-full", 32, 128, 110, withUsed(32000, 128, 30), eph),
		}
		for seed := uint64(0); seed < 20; seed++ {
			if got := PlaceGang(cfg, []*api.Task{mkTask("a", 2000, 2)}, nodes, 1, rngFor(seed)).Assignments["a"]; got != "cpu-empty" {
				t.Fatalf("%s seed %d: cpu task placed on %q, want cpu-empty", strategy, seed, got)
			}
		}
		gt := mkTask("g", 1000, 1)
		gt.Request = gt.Request.With(gpu, 1)
		if got := PlaceGang(cfg, []*api.Task{gt}, nodes, 1, rngFor(1)).Assignments["g"]; got != "gpu-busy" {
			t.Errorf("%s: gpu task placed on %q", strategy, got)
		}
		// A GPU node the task would fill (bin-pack score 100) against a
		// huge empty CPU node (score 0): the CPU node still wins.
		tie := []*api.NodeBooks{
			mkNode("gpu-tight", 32, 128, 110, withGPU(8), withUsed(30000, 16, 10)),
			mkNode("cpu-huge", 4096, 16384, 110),
		}
		for seed := uint64(0); seed < 20; seed++ {
			if got := PlaceGang(cfg, []*api.Task{mkTask("c", 2000, 2)}, tie, 1, rngFor(seed)).Assignments["c"]; got != "cpu-huge" {
				t.Fatalf("%s seed %d: cpu task placed on %q, want cpu-huge", strategy, seed, got)
			}
		}
		// The CPU nodes full: the GPU node takes the CPU task after all.
		full := []*api.NodeBooks{nodes[0], nodes[2]}
		if got := PlaceGang(cfg, []*api.Task{mkTask("b", 2000, 2)}, full, 1, rngFor(1)).Assignments["b"]; got != "gpu-busy" {
			t.Errorf("%s: with the cpu nodes full the task went to %q, want gpu-busy", strategy, got)
		}
	}
}

// BinPack and Spread choose different nodes from the same cluster, whatever
// the seed.
func TestBinPackVersusSpread(t *testing.T) {
	nodes := []*api.NodeBooks{
		mkNode("busy", 32, 128, 110, withUsed(24000, 96, 20)),
		mkNode("half", 32, 128, 110, withUsed(16000, 64, 10)),
		mkNode("empty", 32, 128, 110),
	}
	task := []*api.Task{mkTask("a", 4000, 8)}
	for seed := uint64(0); seed < 50; seed++ {
		bp := PlaceGang(mustConfig(t, StrategyBinPack), task, nodes, 1, rngFor(seed))
		sp := PlaceGang(mustConfig(t, StrategySpread), task, nodes, 1, rngFor(seed))
		if bp.Assignments["a"] != "busy" || sp.Assignments["a"] != "empty" {
			t.Fatalf("seed %d: binpack chose %q (want busy), spread chose %q (want empty)",
				seed, bp.Assignments["a"], sp.Assignments["a"])
		}
	}

	// A gang of 4 one-core tasks on 4 empty 4-core nodes: binpack fills one
	// node, spread uses all four.
	empty := []*api.NodeBooks{mkNode("a", 4, 16, 110), mkNode("b", 4, 16, 110), mkNode("c", 4, 16, 110), mkNode("d", 4, 16, 110)}
	for seed := uint64(0); seed < 20; seed++ {
		bp := PlaceGang(mustConfig(t, StrategyBinPack), gang("g", 4, 1000, 1), empty, 4, rngFor(seed))
		sp := PlaceGang(mustConfig(t, StrategySpread), gang("g", 4, 1000, 1), empty, 4, rngFor(seed))
		if !bp.OK || !sp.OK {
			t.Fatalf("seed %d: binpack %+v spread %+v", seed, bp, sp)
		}
		if d := distinctNodes(bp.Assignments); d != 1 {
			t.Errorf("seed %d: binpack used %d nodes, want 1: %v", seed, d, bp.Assignments)
		}
		if d := distinctNodes(sp.Assignments); d != 4 {
			t.Errorf("seed %d: spread used %d nodes, want 4: %v", seed, d, sp.Assignments)
		}
	}
}

// Weights combine scorers; out-of-range scores are clamped.
type constScorer int64

func (c constScorer) Name() string                     { return "const" }
func (c constScorer) Score(*api.Task, *NodeView) int64 { return int64(c) }

type byNameScorer map[string]int64

func (m byNameScorer) Name() string                         { return "byName" }
func (m byNameScorer) Score(_ *api.Task, n *NodeView) int64 { return m[n.Books.Node.Name] }

func TestWeightsAndClamping(t *testing.T) {
	nodes := []*api.NodeBooks{mkNode("a", 4, 4, 10), mkNode("b", 4, 4, 10)}
	task := []*api.Task{mkTask("x", 1000, 1)}
	// byName favours b by 1000 (clamped to 100); BinPack is equal on both.
	// With weight 0 on byName, and a tie elsewhere, b must not always win.
	cfg := Config{Filters: []Filter{Resources{}}, Scorers: []Scorer{byNameScorer{"b": 1000}, BinPack{}}, Weights: []int64{1, 1}}
	for seed := uint64(0); seed < 20; seed++ {
		if got := PlaceGang(cfg, task, nodes, 1, rngFor(seed)).Assignments["x"]; got != "b" {
			t.Fatalf("seed %d: chose %q, want b", seed, got)
		}
	}
	// A negative score is clamped to 0, not a penalty beyond the range: a
	// then ties with b, so both are chosen over the seeds.
	cfg = Config{Filters: []Filter{Resources{}}, Scorers: []Scorer{byNameScorer{"a": -1000}}, Weights: []int64{5}}
	seen := map[string]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		seen[PlaceGang(cfg, task, nodes, 1, rngFor(seed)).Assignments["x"]] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("clamped scores should tie; chosen: %v", seen)
	}
	// Weight 0 removes a scorer's influence.
	cfg = Config{Filters: []Filter{Resources{}}, Scorers: []Scorer{byNameScorer{"b": 100}, constScorer(7)}, Weights: []int64{0, 1}}
	seen = map[string]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		seen[PlaceGang(cfg, task, nodes, 1, rngFor(seed)).Assignments["x"]] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("weight 0 should tie; chosen: %v", seen)
	}
}
