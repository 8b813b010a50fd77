package placement

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardsched/shardsched/api"
)

func nodesOf(n int, cores, memGi, pods int64, opts ...nodeOpt) []*api.NodeBooks {
	out := make([]*api.NodeBooks, n)
	for i := range out {
		out[i] = mkNode(fmt.Sprintf("node-%02d", i), cores, memGi, pods, opts...)
	}
	return out
}

func TestGangAllOrNothing(t *testing.T) {
	cases := []struct {
		name      string
		nodes     []*api.NodeBooks
		tasks     []*api.Task
		minMember int
		ok        bool
		placed    int
		distinct  int // nodes used when ok
		reasons   map[string]int
	}{
		{"8 tasks, room for 7: none placed", nodesOf(7, 4, 16, 110), gang("g", 8, 4000, 1), 8, false, 7, 0,
			map[string]int{"Insufficient cpu": 7}},
		{"8 tasks, 8 free nodes: one each", nodesOf(8, 4, 16, 110), gang("g", 8, 4000, 1), 8, true, 8, 8, map[string]int{}},
		{"8 tasks share 2 big nodes", nodesOf(2, 16, 64, 110), gang("g", 8, 4000, 1), 8, true, 8, 2, map[string]int{}},
		{"room for 7 in 2 nodes", nodesOf(2, 14, 64, 110), gang("g", 8, 4000, 1), 8, false, 6, 0,
			map[string]int{"Insufficient cpu": 2}},
		{"pods limit makes the gang fail", nodesOf(2, 64, 64, 3), gang("g", 8, 100, 1), 8, false, 6, 0,
			map[string]int{ReasonTooManyPods: 2}},
		{"minMember below gang size: extras that fit are kept", nodesOf(7, 4, 16, 110), gang("g", 8, 4000, 1), 6, true, 7, 7,
			map[string]int{"Insufficient cpu": 7}},
		{"minMember 0 accepts nothing placed", nodesOf(1, 1, 1, 110), gang("g", 2, 4000, 1), 0, true, 0, 0,
			map[string]int{"Insufficient cpu": 1}},
		{"minMember above gang size never fits", nodesOf(8, 4, 16, 110), gang("g", 2, 1000, 1), 3, false, 0, 0, map[string]int{}},
	}
	for _, tc := range cases {
		for _, strategy := range []string{StrategyBinPack, StrategySpread} {
			t.Run(tc.name+"/"+strategy, func(t *testing.T) {
				res := PlaceGang(mustConfig(t, strategy), tc.tasks, tc.nodes, tc.minMember, rngFor(1))
				if res.OK != tc.ok || res.Placed != tc.placed {
					t.Fatalf("OK=%v Placed=%d, want OK=%v Placed=%d (%+v)", res.OK, res.Placed, tc.ok, tc.placed, res)
				}
				if !tc.ok && len(res.Assignments) != 0 {
					t.Fatalf("failed gang returned a partial plan: %v", res.Assignments)
				}
				if tc.ok && len(res.Assignments) != tc.placed {
					t.Fatalf("%d assignments, want %d", len(res.Assignments), tc.placed)
				}
				if tc.ok && distinctNodes(res.Assignments) != tc.distinct {
					t.Fatalf("used %d nodes, want %d: %v", distinctNodes(res.Assignments), tc.distinct, res.Assignments)
				}
				if !reflect.DeepEqual(res.Reasons, tc.reasons) {
					t.Fatalf("Reasons = %v, want %v", res.Reasons, tc.reasons)
				}
				if got := res.Placed + len(res.Unplaced); got != len(tc.tasks) {
					t.Fatalf("Placed %d + Unplaced %d != %d tasks", res.Placed, len(res.Unplaced), len(tc.tasks))
				}
				for _, uid := range res.Unplaced {
					if _, ok := res.Assignments[uid]; ok {
						t.Fatalf("%s is both assigned and unplaced", uid)
					}
				}
			})
		}
	}
}

// Tasks already in the plan consume the node's free resources: two 3-CPU
// tasks never share a 4-CPU node, even under binpack, which would love to.
func TestGangRespectsAssumedResources(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		one := PlaceGang(mustConfig(t, StrategyBinPack), gang("g", 2, 3000, 1), nodesOf(1, 4, 16, 110), 2, rngFor(seed))
		if one.OK || len(one.Assignments) != 0 || one.Placed != 1 || one.Reasons["Insufficient cpu"] != 1 {
			t.Fatalf("seed %d: one 4-CPU node took two 3-CPU tasks: %+v", seed, one)
		}
		two := PlaceGang(mustConfig(t, StrategyBinPack), gang("g", 2, 3000, 1), nodesOf(2, 4, 16, 110), 2, rngFor(seed))
		if !two.OK || distinctNodes(two.Assignments) != 2 {
			t.Fatalf("seed %d: want one task per node: %+v", seed, two)
		}
	}
	// GPUs are consumed too: 3 tasks of 2 GPUs on 2 nodes of 4 GPUs (and
	// plenty of CPU) leave no node with room for a fourth.
	nodes := nodesOf(2, 64, 256, 110, withGPU(4))
	tasks := gang("g", 5, 1000, 1)
	for _, task := range tasks {
		task.Request = task.Request.With(gpu, 2)
	}
	res := PlaceGang(mustConfig(t, StrategySpread), tasks, nodes, 4, rngFor(3))
	if !res.OK || res.Placed != 4 || !slices.Equal(res.Unplaced, []string{"g-4"}) || res.Reasons["Insufficient nvidia.com/gpu"] != 2 {
		t.Fatalf("gpu gang: %+v", res)
	}
	if distinctNodes(res.Assignments) != 2 {
		t.Fatalf("want both nodes used: %v", res.Assignments)
	}
}

// A node already partly used by bound tasks offers only its idle resources.
func TestGangUsesIdleNotAllocatable(t *testing.T) {
	nodes := []*api.NodeBooks{mkNode("a", 8, 32, 110, withUsed(6000, 0, 3))}
	res := PlaceGang(mustConfig(t, StrategyBinPack), gang("g", 2, 1000, 1), nodes, 2, rngFor(1))
	if !res.OK {
		t.Fatalf("2 × 1 CPU should fit into 2 idle CPUs: %+v", res)
	}
	res = PlaceGang(mustConfig(t, StrategyBinPack), gang("g", 3, 1000, 1), nodes, 3, rngFor(1))
	if res.OK || res.Placed != 2 {
		t.Fatalf("3 × 1 CPU must not fit into 2 idle CPUs: %+v", res)
	}
}

// A sampled scan shuffles and sets up only the nodes it reads: a task with
// a sample of 2 over 1,000 equal nodes sets up 2 slots, not 1,000; and the
// order it draws as it goes still spreads ties over every node.
func TestSampledScanSetsUpOnlyWhatItReads(t *testing.T) {
	cfg := mustConfig(t, StrategyBinPack)
	cfg.Sample = 2
	var pl Planner
	big := nodesOf(1000, 8, 32, 110)
	task := []*api.Task{mkTask("a", 1000, 1)}
	if res := pl.PlaceGang(cfg, task, big, 1, rngFor(1)); !res.OK {
		t.Fatalf("the task did not fit: %+v", res)
	}
	if pl.p.prepared != 2 {
		t.Fatalf("a scan sampling 2 of 1000 feasible nodes set up %d slots", pl.p.prepared)
	}
	nodes := nodesOf(20, 8, 32, 110)
	counts := map[string]int{}
	for seed := uint64(0); seed < 400; seed++ {
		counts[pl.PlaceGang(cfg, task, nodes, 1, rngFor(seed)).Assignments["a"]]++
	}
	if len(counts) != len(nodes) {
		t.Fatalf("400 seeds chose only %d of %d equal nodes: %v", len(counts), len(nodes), counts)
	}
	for n, c := range counts {
		if c < 5 { // expectation 20 per node
			t.Fatalf("node %s chosen %d times in 400: the drawn order is not uniform: %v", n, c, counts)
		}
	}
}

// Among equal-score nodes the randomized order decides: different seeds
// pick different nodes; the same seed picks the same node.
func TestRandomOrderSpreadsTies(t *testing.T) {
	nodes := nodesOf(10, 8, 32, 110)
	task := []*api.Task{mkTask("a", 1000, 1)}
	for _, strategy := range []string{StrategyBinPack, StrategySpread} {
		counts := map[string]int{}
		for seed := uint64(0); seed < 300; seed++ {
			res := PlaceGang(mustConfig(t, strategy), task, nodes, 1, rngFor(seed))
			counts[res.Assignments["a"]]++
			again := PlaceGang(mustConfig(t, strategy), task, nodes, 1, rngFor(seed))
			if again.Assignments["a"] != res.Assignments["a"] {
				t.Fatalf("%s seed %d: not deterministic: %q then %q", strategy, seed, res.Assignments["a"], again.Assignments["a"])
			}
		}
		if len(counts) != len(nodes) {
			t.Fatalf("%s: 300 seeds chose only %d of %d equal nodes: %v", strategy, len(counts), len(nodes), counts)
		}
		for n, c := range counts {
			if c < 10 { // expectation 30 per node
				t.Errorf("%s: node %s chosen %d/300 times, want a roughly even spread: %v", strategy, n, c, counts)
			}
		}
	}
	// With no rng the input order breaks ties: the first node wins.
	if got := PlaceGang(mustConfig(t, StrategySpread), task, nodes, 1, nil).Assignments["a"]; got != "node-00" {
		t.Fatalf("nil rng chose %q, want node-00", got)
	}
}

func TestReasonsAndSummarize(t *testing.T) {
	nodes := append(nodesOf(5, 2, 16, 110), // too small
		mkNode("x0", 16, 64, 110, withLabels("pool", "cpu")),
		mkNode("x1", 16, 64, 110, withLabels("pool", "cpu")),
		mkNode("x2", 16, 64, 110))
	task := mkTask("a", 4000, 1)
	task.NodeSelector = map[string]string{"pool": "gpu"}
	for i := range nodes[:5] {
		nodes[i].Node.Labels = map[string]string{"pool": "gpu"}
	}
	res := PlaceGang(mustConfig(t, StrategyBinPack), []*api.Task{task}, nodes, 1, rngFor(9))
	want := map[string]int{"Insufficient cpu": 5, ReasonNodeSelector: 3}
	if res.OK || !reflect.DeepEqual(res.Reasons, want) {
		t.Fatalf("OK=%v Reasons=%v, want %v", res.OK, res.Reasons, want)
	}
	msg := Summarize(res.Reasons, len(nodes))
	if wantMsg := "0/8 nodes are available: 5 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector."; msg != wantMsg {
		t.Fatalf("Summarize = %q\nwant        %q", msg, wantMsg)
	}

	// Every rejection reason, one node each, plus out-of-sync nodes that
	// the Config does not even mention.
	cordon := mkNode("c", 16, 64, 110, cordoned)
	tainted := mkNode("t", 16, 64, 110, withTaint("dedicated", "infra", api.TaintNoSchedule))
	stale := mkNode("s", 16, 64, 110, outOfSync)
	stale2 := mkNode("s2", 16, 64, 110, outOfSync)
	full := mkNode("f", 16, 64, 1, withUsed(0, 0, 1))
	cfg := Config{Filters: []Filter{NodeUnschedulable{}, Taints{}, Resources{}}, Scorers: []Scorer{BinPack{}}}
	res = PlaceGang(cfg, []*api.Task{mkTask("b", 1000, 1)}, []*api.NodeBooks{cordon, tainted, stale, full, stale2}, 1, rngFor(2))
	want = map[string]int{ReasonNodeUnschedulable: 1, "node(s) had untolerated taint {dedicated: infra}": 1,
		ReasonOutOfSync: 2, ReasonTooManyPods: 1}
	if !reflect.DeepEqual(res.Reasons, want) {
		t.Fatalf("Reasons = %v, want %v", res.Reasons, want)
	}
	msg = Summarize(res.Reasons, 5)
	if wantMsg := "0/5 nodes are available: 2 node out of sync, 1 Too many pods, 1 node(s) had untolerated taint {dedicated: infra}, 1 node(s) were unschedulable."; msg != wantMsg {
		t.Fatalf("Summarize = %q\nwant        %q", msg, wantMsg)
	}

	for _, tc := range []struct {
		reasons map[string]int
		total   int
		want    string
	}{
		{nil, 0, "0/0 nodes are available."},
		{map[string]int{}, 3, "0/3 nodes are available."},
		{map[string]int{"b": 2, "a": 2, "skip": 0, "neg": -1}, -4, "0/0 nodes are available: 2 a, 2 b."},
	} {
		if got := Summarize(tc.reasons, tc.total); got != tc.want {
			t.Errorf("Summarize(%v, %d) = %q, want %q", tc.reasons, tc.total, got, tc.want)
		}
	}
}

// A filter that rejects without a reason is still counted, by its name.
type silentFilter struct{}

func (silentFilter) Name() string                       { return "Silent" }
func (silentFilter) Filter(*api.Task, *NodeView) Status { return Status{Code: Code(42)} }

func TestFilterWithoutReason(t *testing.T) {
	res := PlaceGang(Config{Filters: []Filter{silentFilter{}}}, gang("g", 1, 1, 0), nodesOf(3, 1, 1, 1), 1, rngFor(1))
	if res.OK || res.Reasons["node(s) rejected by Silent"] != 3 {
		t.Fatalf("%+v", res)
	}
}

// Within a window, the node the last task took is scored again; when its
// score falls to another node's that comes earlier in the scan, the
// earlier node wins the tie, as a fresh scan would have it.
func TestWindowTieGoesToTheEarlierNode(t *testing.T) {
	cfg := mustConfig(t, StrategySpread)
	// Spread scores 100 − the dominant share after placing: a (1 % used)
	// 98 and b (empty) 99 for the first task; then b 98, a tie.
	nodes := []*api.NodeBooks{mkNode("a", 100, 1024, 110, withUsed(1000, 0, 0)), mkNode("b", 100, 1024, 110)}
	res := PlaceGang(cfg, gang("g", 2, 1000, 0), nodes, 2, nil)
	want := map[string]string{"g-0": "b", "g-1": "a"}
	if !res.OK || !maps.Equal(res.Assignments, want) {
		t.Fatalf("got %v, want %v", res.Assignments, want)
	}
}

// Sampling: each scan considers at most Sample feasible nodes and starts
// where the last one stopped; tasks that ask the same as the scanned one
// stay within its window while it has room.
func TestSample(t *testing.T) {
	cfg := mustConfig(t, StrategyBinPack)
	cfg.Sample = 1
	res := PlaceGang(cfg, gang("g", 4, 1000, 1), nodesOf(4, 8, 32, 110), 4, nil)
	if !res.OK || distinctNodes(res.Assignments) != 1 {
		t.Fatalf("Sample=1: a gang that fits on its window's node should stay there: %+v", res)
	}
	// Two tasks fill a node: the window empties and the scan moves on.
	res = PlaceGang(cfg, gang("g", 4, 4000, 1), nodesOf(4, 8, 32, 110), 4, nil)
	want := map[string]string{"g-0": "node-00", "g-1": "node-00", "g-2": "node-01", "g-3": "node-01"}
	if !res.OK || !maps.Equal(res.Assignments, want) {
		t.Fatalf("Sample=1, two tasks a node: got %v, want %v", res.Assignments, want)
	}
	// When the window is full the scan goes on from where it stopped, not
	// from the first node: a asks 1 CPU (window {n0}), b and c ask 2 (b's
	// scan from n1: window {n1}, full after b); c goes to n2, though n0
	// still has room.
	abc := gang("g", 3, 2000, 1)
	abc[0].Request.MilliCPU = 1000
	three := []*api.NodeBooks{mkNode("n0", 4, 32, 110), mkNode("n1", 2, 32, 110), mkNode("n2", 2, 32, 110)}
	res = PlaceGang(cfg, abc, three, 3, nil)
	want = map[string]string{"g-0": "n0", "g-1": "n1", "g-2": "n2"}
	if !res.OK || !maps.Equal(res.Assignments, want) {
		t.Fatalf("Sample=1, scan on from where it stopped: got %v, want %v", res.Assignments, want)
	}
	// Steps from other packages may read any field of a task: there every
	// task scans on, as before windows.
	res = PlaceGang(opaqueConfig(cfg), gang("g", 4, 1000, 1), nodesOf(4, 8, 32, 110), 4, nil)
	if !res.OK || distinctNodes(res.Assignments) != 4 {
		t.Fatalf("Sample=1, opaque steps: %+v, want one node a task", res)
	}
	// A task asking something else scans on from where the last scan
	// stopped, even though the window's node still has room.
	mixed := gang("g", 2, 1000, 1)
	mixed[1].Request.MilliCPU = 2000
	res = PlaceGang(cfg, mixed, nodesOf(4, 8, 32, 110), 2, nil)
	if !res.OK || res.Assignments["g-0"] != "node-00" || res.Assignments["g-1"] != "node-01" {
		t.Fatalf("Sample=1, two requests: %v", res.Assignments)
	}
	// Sampling never hides a feasible node from a task that would fail:
	// the only node with room is last in the order.
	nodes := append(nodesOf(5, 1, 32, 110), mkNode("big", 8, 32, 110))
	cfg.Sample = 2
	res = PlaceGang(cfg, gang("g", 3, 2000, 1), nodes, 3, nil)
	if !res.OK || distinctNodes(res.Assignments) != 1 || res.Assignments["g-0"] != "big" {
		t.Fatalf("%+v", res)
	}
	// A negative Sample means all nodes.
	cfg.Sample = -3
	if res = PlaceGang(cfg, gang("g", 3, 2000, 1), nodes, 3, nil); !res.OK {
		t.Fatalf("%+v", res)
	}
}

// The gang gives up as soon as minMember is out of reach: later tasks are
// not tried, and are reported unplaced.
func TestGiveUpEarly(t *testing.T) {
	counting := &countingFilter{}
	cfg := Config{Filters: []Filter{Resources{}, counting}, Scorers: []Scorer{BinPack{}}}
	res := PlaceGang(cfg, gang("g", 10, 4000, 1), nodesOf(2, 4, 16, 110), 10, nil)
	if res.OK || res.Placed != 2 || len(res.Unplaced) != 8 || res.Unplaced[0] != "g-2" || res.Unplaced[7] != "g-9" {
		t.Fatalf("%+v", res)
	}
	// Three scans (tasks 0, 1 and the failing 2) reach counting only on
	// nodes with room: 2 + 1 + 0.
	if counting.calls != 3 {
		t.Fatalf("filters ran %d times past Resources, want 3", counting.calls)
	}
}

// countingFilter counts calls; tests use it from one goroutine only.
type countingFilter struct{ calls int }

func (c *countingFilter) Name() string { return "Counting" }
func (c *countingFilter) Filter(*api.Task, *NodeView) Status {
	c.calls++
	return Status{}
}

func TestDuplicateAndNilTasksIgnored(t *testing.T) {
	a := mkTask("a", 1000, 1)
	tasks := []*api.Task{nil, a, mkTask("a", 1000, 1), nil, mkTask("b", 1000, 1)}
	res := PlaceGang(mustConfig(t, StrategyBinPack), tasks, nodesOf(1, 4, 16, 110), 2, rngFor(1))
	if !res.OK || res.Placed != 2 || len(res.Assignments) != 2 || len(res.Unplaced) != 0 {
		t.Fatalf("%+v", res)
	}
	// Only one of the two "a" consumed resources: a third 1-CPU task and a
	// fourth still fit into 4 CPUs.
	tasks = append(tasks, mkTask("c", 1000, 1), mkTask("d", 1000, 1))
	if res = PlaceGang(mustConfig(t, StrategyBinPack), tasks, nodesOf(1, 4, 16, 110), 4, rngFor(1)); !res.OK {
		t.Fatalf("%+v", res)
	}
}

func TestOutOfSyncAlwaysSkipped(t *testing.T) {
	nodes := []*api.NodeBooks{mkNode("stale", 64, 256, 110, outOfSync), mkNode("ok", 4, 16, 110)}
	cfg := Config{Scorers: []Scorer{Spread{}}} // no filters at all
	for seed := uint64(0); seed < 20; seed++ {
		res := PlaceGang(cfg, gang("g", 1, 1000, 1), nodes, 1, rngFor(seed))
		if res.Assignments["g-0"] != "ok" {
			t.Fatalf("seed %d: placed on %q", seed, res.Assignments["g-0"])
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	for _, s := range []string{StrategyBinPack, StrategySpread} {
		cfg, err := DefaultConfig(s)
		if err != nil || cfg.Validate() != nil || len(cfg.Filters) != 6 || len(cfg.Scorers) != 2 || cfg.Sample != 0 {
			t.Fatalf("%s: %+v %v %v", s, cfg, err, cfg.Validate())
		}
		if got := cfg.Filters[len(cfg.Filters)-1].Name(); got != "Resources" {
			t.Errorf("%s: last filter %s, want Resources", s, got)
		}
	}
	if got := mustConfig(t, StrategyBinPack).Scorers[0].Name(); got != "BinPack" {
		t.Errorf("binpack scorer %s", got)
	}
	if got := mustConfig(t, StrategySpread).Scorers[0].Name(); got != "Spread" {
		t.Errorf("spread scorer %s", got)
	}
	for _, s := range []string{StrategyBinPack, StrategySpread} {
		if got := mustConfig(t, s).Scorers[1].Name(); got != "SpareDevices" {
			t.Errorf("%s: second scorer %s, want SpareDevices", s, got)
		}
	}
	for _, bad := range []string{"", "BinPack", "most-allocated"} {
		_, err := DefaultConfig(bad)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("DefaultConfig(%q) error = %v, want one naming it", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"zero config", Config{}, nil},
		{"nil filter", Config{Filters: []Filter{nil}}, []string{"Filters[0] is nil"}},
		{"nil scorer", Config{Scorers: []Scorer{BinPack{}, nil}}, []string{"Scorers[1] is nil"}},
		{"weights mismatch", Config{Scorers: []Scorer{BinPack{}}, Weights: []int64{1, 2}}, []string{"2 weights for 1 scorers"}},
		{"negative weight", Config{Scorers: []Scorer{BinPack{}}, Weights: []int64{-1}}, []string{"Weights[0] is negative"}},
		{"negative sample", Config{Sample: -1}, []string{"Sample is negative"}},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		if (err == nil) != (len(tc.want) == 0) {
			t.Fatalf("%s: Validate() = %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not mention %q", tc.name, err, w)
			}
		}
	}
}

// PlaceGang must not change its arguments.
func TestNoMutation(t *testing.T) {
	nodes := []*api.NodeBooks{
		mkNode("a", 8, 32, 110, withUsed(2000, 4, 2), withGPU(4), withLabels("zone", "a")),
		mkNode("b", 8, 32, 110, withTaint("gpu", "", api.TaintNoSchedule), withGPU(8)),
		mkNode("c", 4, 16, 110, outOfSync),
		mkNode("d", 2, 8, 110, cordoned),
		nil,
		{Node: api.Node{Name: "weird", Allocatable: api.Resource{MilliCPU: -1, Scalars: map[string]int64{api.Pods: 0, gpu: -2}}},
			Used: api.Resource{Memory: -5, Scalars: map[string]int64{"x": 3}}},
	}
	tasks := gang("g", 7, 2000, 2)
	for _, task := range tasks {
		task.Request = task.Request.With(gpu, 2)
		task.Tolerations = []api.Toleration{{Key: "gpu", Operator: api.TolerationExists}}
		task.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{req("zone", api.SelectorNotIn, "z")}}}
		task.NodeSelector = map[string]string{}
	}
	tasks = append(tasks, nil)
	beforeNodes := make([]*api.NodeBooks, len(nodes))
	for i, n := range nodes {
		beforeNodes[i] = copyBooks(n)
	}
	beforeTasks := make([]*api.Task, len(tasks))
	for i, task := range tasks {
		beforeTasks[i] = copyTask(task)
	}
	cfg := mustConfig(t, StrategyBinPack)
	beforeCfg := fmt.Sprintf("%#v", cfg)
	for _, minMember := range []int{1, 4, 7} { // partial, exact, failing
		for seed := uint64(0); seed < 10; seed++ {
			res := PlaceGang(cfg, tasks, nodes, minMember, rngFor(seed))
			if minMember == 7 && res.OK {
				t.Fatalf("room for 6 tasks only (a: 2 by GPUs, b: 4 by CPU): %+v", res)
			}
		}
	}
	if !reflect.DeepEqual(nodes, beforeNodes) {
		t.Fatal("PlaceGang mutated the node books")
	}
	if !reflect.DeepEqual(tasks, beforeTasks) {
		t.Fatal("PlaceGang mutated the tasks")
	}
	if fmt.Sprintf("%#v", cfg) != beforeCfg {
		t.Fatal("PlaceGang mutated the config")
	}
}

func TestNoPanicOnEmptyOrNil(t *testing.T) {
	cfg := mustConfig(t, StrategySpread)
	weird := Config{Filters: []Filter{nil, Resources{}, nil}, Scorers: []Scorer{nil, BinPack{}}, Weights: []int64{1 << 62, 1 << 62, 3}, Sample: -1}
	cases := []struct {
		name      string
		cfg       Config
		tasks     []*api.Task
		nodes     []*api.NodeBooks
		minMember int
		ok        bool
	}{
		{"all empty", Config{}, nil, nil, 0, true},
		{"no nodes", cfg, gang("g", 2, 1, 0), nil, 2, false},
		{"no tasks, minMember 1", cfg, nil, nodesOf(2, 1, 1, 1), 1, false},
		{"nil entries", cfg, []*api.Task{nil, nil}, []*api.NodeBooks{nil}, 0, true},
		{"zero-value task and node", cfg, []*api.Task{{}}, []*api.NodeBooks{{}}, 1, true},
		{"task needing pods on node without pods", cfg, gang("g", 1, 0, 0), []*api.NodeBooks{{Node: api.Node{Name: "n"}}}, 1, false},
		{"nil steps, huge weights, negative sample", weird, gang("g", 3, 1000, 1), nodesOf(3, 1, 4, 4), 3, true},
		{"negative minMember", cfg, gang("g", 1, 1<<40, 0), nodesOf(1, 1, 1, 1), -5, true},
		{"zero config places anywhere", Config{}, gang("g", 2, 1<<40, 0), nodesOf(1, 1, 1, 1), 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, rng := range []bool{false, true} {
				r := rngFor(1)
				if !rng {
					r = nil
				}
				res := PlaceGang(tc.cfg, tc.tasks, tc.nodes, tc.minMember, r)
				if res.OK != tc.ok || res.Assignments == nil || res.Reasons == nil {
					t.Fatalf("rng=%v: %+v, want OK=%v and non-nil maps", rng, res, tc.ok)
				}
				_ = Summarize(res.Reasons, len(tc.nodes))
			}
		})
	}
}

// Tasks of one gang with different constraints each get their own verdicts
// (the planner caches static verdicts only across tasks whose selector,
// affinity and tolerations are equal).
func TestMixedConstraintsInOneGang(t *testing.T) {
	nodes := []*api.NodeBooks{
		mkNode("a", 8, 32, 110, withLabels("zone", "a")),
		mkNode("b", 8, 32, 110, withLabels("zone", "b")),
		mkNode("gpu", 8, 32, 110, withLabels("zone", "b"), withTaint("gpu", "", api.TaintNoSchedule)),
	}
	inZone := func(uid, zone string) *api.Task {
		task := mkTask(uid, 1000, 1)
		task.NodeSelector = map[string]string{"zone": zone}
		return task
	}
	tolerant := inZone("t3", "b")
	tolerant.Tolerations = []api.Toleration{{Key: "gpu", Operator: api.TolerationExists}}
	tolerant.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{req("zone", api.SelectorIn, "b")}}}
	tasks := []*api.Task{inZone("t0", "a"), inZone("t1", "a"), inZone("t2", "b"), tolerant, inZone("t4", "a"), inZone("t5", "c")}
	for seed := uint64(0); seed < 30; seed++ {
		res := PlaceGang(mustConfig(t, StrategySpread), tasks, nodes, 5, rngFor(seed))
		if !res.OK || res.Placed != 5 || !slices.Equal(res.Unplaced, []string{"t5"}) {
			t.Fatalf("seed %d: %+v", seed, res)
		}
		for _, uid := range []string{"t0", "t1", "t4"} {
			if res.Assignments[uid] != "a" {
				t.Fatalf("seed %d: %s on %q, want a", seed, uid, res.Assignments[uid])
			}
		}
		if res.Assignments["t2"] != "b" {
			t.Fatalf("seed %d: t2 on %q, want b (gpu is tainted)", seed, res.Assignments["t2"])
		}
		// Spread sends the tolerant task to the empty gpu node rather than b.
		if res.Assignments["t3"] != "gpu" {
			t.Fatalf("seed %d: t3 on %q, want gpu", seed, res.Assignments["t3"])
		}
		if want := map[string]int{ReasonNodeSelector: 3}; !reflect.DeepEqual(res.Reasons, want) {
			t.Fatalf("seed %d: reasons %v, want %v", seed, res.Reasons, want)
		}
	}
}

// A plan over many nodes allocates a constant amount, not one object per
// node: Free is never materialized for this package's own steps.
func TestPlaceGangAllocationsDoNotGrowWithNodes(t *testing.T) {
	cfg := mustConfig(t, StrategyBinPack)
	task := []*api.Task{mkTask("a", 1000, 1)}
	task[0].NodeSelector = map[string]string{"zone": "a"}
	allocs := func(n int) float64 {
		nodes := nodesOf(n, 8, 32, 110, withUsed(2000, 4, 3), withLabels("zone", "a"))
		rng := rngFor(1)
		return testing.AllocsPerRun(20, func() { PlaceGang(cfg, task, nodes, 1, rng) })
	}
	small, large := allocs(16), allocs(1600)
	if large != small {
		t.Fatalf("allocations grow with nodes: %.0f for 16 nodes, %.0f for 1600", small, large)
	}
	if large > 16 {
		t.Fatalf("%.0f allocations per plan, want a handful", large)
	}
}

// One Config and one set of books serve many goroutines at once (each with
// its own rng); run under -race.
func TestConcurrentPlacements(t *testing.T) {
	cfg := mustConfig(t, StrategyBinPack)
	nodes := nodesOf(64, 16, 64, 110, withUsed(4000, 8, 5), withLabels("zone", "a"))
	done := make(chan Result)
	for g := range 8 {
		go func() {
			var last Result
			for i := range 20 {
				last = PlaceGang(cfg, gang(fmt.Sprintf("g%d-%d", g, i), 16, 2000, 4), nodes, 16, rngFor(uint64(g*100+i)))
			}
			done <- last
		}()
	}
	for range 8 {
		if res := <-done; !res.OK || res.Placed != 16 {
			t.Errorf("%+v", res)
		}
	}
}

// A reused Planner allocates less than a fresh plan: its per-node slots
// are kept from one call to the next.
func TestPlannerReusesItsBuffers(t *testing.T) {
	cfg := mustConfig(t, StrategyBinPack)
	task := []*api.Task{mkTask("a", 1000, 1)}
	nodes := nodesOf(1600, 8, 32, 110, withUsed(2000, 4, 3))
	rng := rngFor(1)
	var pl Planner
	fresh := testing.AllocsPerRun(20, func() { PlaceGang(cfg, task, nodes, 1, rng) })
	reused := testing.AllocsPerRun(20, func() { pl.PlaceGang(cfg, task, nodes, 1, rng) })
	if reused >= fresh {
		t.Fatalf("a reused planner allocates %.0f times a plan, a fresh one %.0f", reused, fresh)
	}
}
