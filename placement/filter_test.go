package placement

import (
	"testing"

	"github.com/shardsched/shardsched/api"
)

type filterCase struct {
	name   string
	task   *api.Task
	node   *NodeView
	code   Code
	reason string
}

func runFilterCases(t *testing.T, f Filter, cases []filterCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := f.Filter(tc.task, tc.node)
			if st.Code != tc.code || st.Reason != tc.reason {
				t.Fatalf("%s.Filter = {%v %q}, want {%v %q}", f.Name(), st.Code, st.Reason, tc.code, tc.reason)
			}
			if st.IsSuccess() != (tc.code == Success) {
				t.Fatalf("IsSuccess = %v for %v", st.IsSuccess(), st.Code)
			}
		})
	}
}

func taskWith(req api.Resource) *api.Task { return &api.Task{UID: "x", Request: req} }

func TestResources(t *testing.T) {
	free := func(milliCPU, mem int64, scalars map[string]int64) *NodeView {
		return &NodeView{Books: mkNode("n", 1, 1, 1), Free: api.NewResource(milliCPU, mem, scalars)}
	}
	pods := func(n int64) map[string]int64 { return map[string]int64{api.Pods: n} }
	runFilterCases(t, Resources{}, []filterCase{
		{"exact fit", taskWith(api.NewResource(4000, 8, pods(1))), free(4000, 8, pods(1)), Success, ""},
		{"cpu short by 1m", taskWith(api.NewResource(4001, 8, pods(1))), free(4000, 8, pods(5)), Unschedulable, "Insufficient cpu"},
		{"memory short", taskWith(api.NewResource(1000, 9, pods(1))), free(4000, 8, pods(5)), Unschedulable, "Insufficient memory"},
		{"cpu reported before memory", taskWith(api.NewResource(5000, 9, pods(1))), free(4000, 8, pods(5)), Unschedulable, "Insufficient cpu"},
		{"pods limit reached", taskWith(api.NewResource(1, 1, pods(1))), free(4000, 8, pods(0)), Unschedulable, ReasonTooManyPods},
		{"pods reported first", taskWith(api.NewResource(9000, 9, pods(1))), free(4000, 8, nil), Unschedulable, ReasonTooManyPods},
		{"gpu fits", taskWith(api.NewResource(1000, 1, map[string]int64{api.Pods: 1, gpu: 2})),
			free(4000, 8, map[string]int64{api.Pods: 3, gpu: 2}), Success, ""},
		{"gpu short", taskWith(api.NewResource(1000, 1, map[string]int64{api.Pods: 1, gpu: 3})),
			free(4000, 8, map[string]int64{api.Pods: 3, gpu: 2}), Unschedulable, "Insufficient nvidia.com/gpu"},
		{"gpu asked, node has none", taskWith(api.NewResource(1000, 1, map[string]int64{api.Pods: 1, gpu: 1})),
			free(4000, 8, pods(3)), Unschedulable, "Insufficient nvidia.com/gpu"},
		{"gpu on node, not asked", taskWith(api.NewResource(1000, 1, pods(1))),
			free(4000, 8, map[string]int64{api.Pods: 3, gpu: 8}), Success, ""},
		{"two scalars short: smallest name", taskWith(api.NewResource(0, 0, map[string]int64{"z.io/b": 1, "a.io/a": 1, gpu: 1})),
			free(0, 0, map[string]int64{gpu: 1}), Unschedulable, "Insufficient a.io/a"},
		{"zero request on empty node", taskWith(api.Resource{}), free(0, 0, nil), Success, ""},
		{"negative request fits anything", taskWith(api.Resource{MilliCPU: -5, Memory: -1, Scalars: map[string]int64{gpu: -1, api.Pods: -1}}),
			free(0, 0, nil), Success, ""},
		{"zero scalar kept in request map", taskWith(api.Resource{Scalars: map[string]int64{gpu: 0}}), free(0, 0, nil), Success, ""},
		{"nil task", nil, free(1, 1, nil), Success, ""},
		{"nil node", taskWith(api.Resource{}), nil, UnschedulableAndUnresolvable, ReasonNoNode},
	})
}

func TestNodeSelector(t *testing.T) {
	sel := func(kv ...string) *api.Task {
		task := &api.Task{UID: "x", NodeSelector: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			task.NodeSelector[kv[i]] = kv[i+1]
		}
		return task
	}
	labelled := view(mkNode("n", 1, 1, 1, withLabels("zone", "a", "pool", "gpu")))
	runFilterCases(t, NodeSelector{}, []filterCase{
		{"no selector", &api.Task{UID: "x"}, labelled, Success, ""},
		{"all match", sel("zone", "a", "pool", "gpu"), labelled, Success, ""},
		{"one value differs", sel("zone", "a", "pool", "cpu"), labelled, UnschedulableAndUnresolvable, ReasonNodeSelector},
		{"label missing", sel("rack", "1"), labelled, UnschedulableAndUnresolvable, ReasonNodeSelector},
		{"empty value needs empty label", sel("zone", ""), labelled, UnschedulableAndUnresolvable, ReasonNodeSelector},
		{"node without labels", sel("zone", "a"), view(mkNode("n", 1, 1, 1)), UnschedulableAndUnresolvable, ReasonNodeSelector},
		{"nil task", nil, labelled, Success, ""},
		{"nil node", sel("zone", "a"), nil, UnschedulableAndUnresolvable, ReasonNoNode},
		{"nil books", sel("zone", "a"), &NodeView{}, UnschedulableAndUnresolvable, ReasonNoNode},
	})
}

func req(key, op string, values ...string) api.SelectorRequirement {
	return api.SelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestMatchRequirement(t *testing.T) {
	labels := map[string]string{"zone": "a", "cores": "64", "neg": "-3", "bad": "12x", "empty": ""}
	cases := []struct {
		name string
		r    api.SelectorRequirement
		want bool
	}{
		{"In match", req("zone", api.SelectorIn, "b", "a"), true},
		{"In no match", req("zone", api.SelectorIn, "b", "c"), false},
		{"In absent label", req("rack", api.SelectorIn, "a"), false},
		{"In no values", req("zone", api.SelectorIn), false},
		{"In empty value", req("empty", api.SelectorIn, ""), true},
		{"NotIn match", req("zone", api.SelectorNotIn, "b"), true},
		{"NotIn excluded", req("zone", api.SelectorNotIn, "a"), false},
		{"NotIn absent label matches", req("rack", api.SelectorNotIn, "a"), true},
		{"Exists", req("zone", api.SelectorExists), true},
		{"Exists empty value", req("empty", api.SelectorExists), true},
		{"Exists absent", req("rack", api.SelectorExists), false},
		{"DoesNotExist absent", req("rack", api.SelectorDoesNotExist), true},
		{"DoesNotExist present", req("zone", api.SelectorDoesNotExist), false},
		{"Gt true", req("cores", api.SelectorGt, "32"), true},
		{"Gt equal is false", req("cores", api.SelectorGt, "64"), false},
		{"Gt false", req("cores", api.SelectorGt, "128"), false},
		{"Lt true", req("cores", api.SelectorLt, "65"), true},
		{"Lt equal is false", req("cores", api.SelectorLt, "64"), false},
		{"Gt negative numbers", req("neg", api.SelectorGt, "-4"), true},
		{"Lt negative numbers", req("neg", api.SelectorLt, "-3"), false},
		{"Gt absent label", req("rack", api.SelectorGt, "1"), false},
		{"Gt malformed label value", req("bad", api.SelectorGt, "1"), false},
		{"Lt malformed label value", req("bad", api.SelectorLt, "100"), false},
		{"Gt non-numeric label", req("zone", api.SelectorGt, "0"), false},
		{"Gt empty label", req("empty", api.SelectorGt, "-1"), false},
		{"Gt malformed bound", req("cores", api.SelectorGt, "abc"), false},
		{"Lt fractional bound", req("cores", api.SelectorLt, "100.5"), false},
		{"Gt bound overflows int64", req("cores", api.SelectorGt, "99999999999999999999"), false},
		{"Lt bound overflows int64", req("cores", api.SelectorLt, "99999999999999999999"), false},
		{"Gt empty bound", req("cores", api.SelectorGt, ""), false},
		{"Gt no values", req("cores", api.SelectorGt), false},
		{"Gt two values", req("cores", api.SelectorGt, "1", "2"), false},
		{"Lt hex bound", req("cores", api.SelectorLt, "0x100"), false},
		{"unknown operator", req("zone", "Like", "a"), false},
		{"empty operator", req("zone", "", "a"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MatchRequirement(&tc.r, labels); got != tc.want {
				t.Fatalf("MatchRequirement(%+v) = %v, want %v", tc.r, got, tc.want)
			}
		})
	}
	if MatchRequirement(nil, labels) {
		t.Fatal("nil requirement matched")
	}
	if !MatchRequirement(&api.SelectorRequirement{Key: "k", Operator: api.SelectorNotIn}, nil) {
		t.Fatal("NotIn on nil labels should match")
	}
}

func TestRequiredAffinity(t *testing.T) {
	node := view(mkNode("n", 1, 1, 1, withLabels("zone", "a", "gen", "5")))
	aff := func(terms ...api.SelectorTerm) *api.Task { return &api.Task{UID: "x", Affinity: terms} }
	term := func(rs ...api.SelectorRequirement) api.SelectorTerm { return api.SelectorTerm{MatchExpressions: rs} }
	miss := func(name string, task *api.Task) filterCase {
		return filterCase{name, task, node, UnschedulableAndUnresolvable, ReasonNodeSelector}
	}
	runFilterCases(t, RequiredAffinity{}, []filterCase{
		{"no terms", aff(), node, Success, ""},
		{"one term, all requirements hold", aff(term(req("zone", api.SelectorIn, "a"), req("gen", api.SelectorGt, "4"))), node, Success, ""},
		miss("one term, one requirement fails (AND)", aff(term(req("zone", api.SelectorIn, "a"), req("gen", api.SelectorGt, "5")))),
		{"second term holds (OR)", aff(term(req("zone", api.SelectorIn, "b")), term(req("gen", api.SelectorLt, "6"))), node, Success, ""},
		miss("no term holds", aff(term(req("zone", api.SelectorIn, "b")), term(req("gen", api.SelectorLt, "5")))),
		miss("empty term matches nothing", aff(term())),
		{"empty term ORed with a match", aff(term(), term(req("zone", api.SelectorExists))), node, Success, ""},
		miss("malformed Gt never matches", aff(term(req("gen", api.SelectorGt, "four")))),
		miss("malformed Lt label never matches", aff(term(req("zone", api.SelectorLt, "10")))),
		{"nil task", nil, node, Success, ""},
		{"nil node", aff(term(req("zone", api.SelectorExists))), nil, UnschedulableAndUnresolvable, ReasonNoNode},
	})
}

func TestTaints(t *testing.T) {
	tol := func(ts ...api.Toleration) *api.Task { return &api.Task{UID: "x", Tolerations: ts} }
	tainted := func(key, value, effect string) *NodeView {
		return view(mkNode("n", 1, 1, 1, withTaint(key, value, effect)))
	}
	gpuNoSched := tainted("gpu", "true", api.TaintNoSchedule)
	untol := func(k, v string) string { return "node(s) had untolerated taint {" + k + ": " + v + "}" }
	runFilterCases(t, Taints{}, []filterCase{
		{"no taints", tol(), view(mkNode("n", 1, 1, 1)), Success, ""},
		{"NoSchedule untolerated", tol(), gpuNoSched, UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"NoExecute untolerated", tol(), tainted("dedicated", "infra", api.TaintNoExecute), UnschedulableAndUnresolvable, untol("dedicated", "infra")},
		{"PreferNoSchedule ignored", tol(), tainted("spot", "", api.TaintPreferNoSchedule), Success, ""},
		{"unknown effect ignored", tol(), tainted("x", "", "SomethingNew"), Success, ""},
		{"Equal with matching value", tol(api.Toleration{Key: "gpu", Operator: api.TolerationEqual, Value: "true", Effect: api.TaintNoSchedule}), gpuNoSched, Success, ""},
		{"Equal with other value", tol(api.Toleration{Key: "gpu", Operator: api.TolerationEqual, Value: "false", Effect: api.TaintNoSchedule}), gpuNoSched, UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"empty operator means Equal", tol(api.Toleration{Key: "gpu", Value: "true"}), gpuNoSched, Success, ""},
		{"empty operator, other value", tol(api.Toleration{Key: "gpu", Value: "yes"}), gpuNoSched, UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"Exists ignores value", tol(api.Toleration{Key: "gpu", Operator: api.TolerationExists}), gpuNoSched, Success, ""},
		{"Exists with empty key tolerates all", tol(api.Toleration{Operator: api.TolerationExists}),
			view(mkNode("n", 1, 1, 1, withTaint("a", "1", api.TaintNoSchedule), withTaint("b", "", api.TaintNoExecute))), Success, ""},
		{"Exists empty key but effect limits it", tol(api.Toleration{Operator: api.TolerationExists, Effect: api.TaintNoSchedule}),
			view(mkNode("n", 1, 1, 1, withTaint("a", "1", api.TaintNoSchedule), withTaint("b", "", api.TaintNoExecute))),
			UnschedulableAndUnresolvable, untol("b", "")},
		{"empty effect matches NoExecute", tol(api.Toleration{Key: "dedicated", Operator: api.TolerationExists}),
			tainted("dedicated", "infra", api.TaintNoExecute), Success, ""},
		{"effect mismatch", tol(api.Toleration{Key: "gpu", Operator: api.TolerationExists, Effect: api.TaintNoExecute}), gpuNoSched,
			UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"key mismatch", tol(api.Toleration{Key: "tpu", Operator: api.TolerationExists}), gpuNoSched, UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"unknown operator tolerates nothing", tol(api.Toleration{Key: "gpu", Operator: "Like", Value: "true"}), gpuNoSched,
			UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"one of two taints untolerated", tol(api.Toleration{Key: "a", Operator: api.TolerationExists}),
			view(mkNode("n", 1, 1, 1, withTaint("a", "", api.TaintNoSchedule), withTaint("b", "2", api.TaintNoSchedule))),
			UnschedulableAndUnresolvable, untol("b", "2")},
		{"nil task on tainted node", nil, gpuNoSched, UnschedulableAndUnresolvable, untol("gpu", "true")},
		{"nil node", tol(), nil, UnschedulableAndUnresolvable, ReasonNoNode},
	})
	if Tolerates(nil, &api.Taint{}) || Tolerates(&api.Toleration{Operator: api.TolerationExists}, nil) {
		t.Fatal("Tolerates with nil must be false")
	}
}

func TestNodeUnschedulable(t *testing.T) {
	cordon := view(mkNode("n", 1, 1, 1, cordoned))
	runFilterCases(t, NodeUnschedulable{}, []filterCase{
		{"schedulable", &api.Task{}, view(mkNode("n", 1, 1, 1)), Success, ""},
		{"cordoned", &api.Task{}, cordon, UnschedulableAndUnresolvable, ReasonNodeUnschedulable},
		{"tolerates the unschedulable taint", &api.Task{Tolerations: []api.Toleration{
			{Key: UnschedulableTaintKey, Operator: api.TolerationExists, Effect: api.TaintNoSchedule}}}, cordon, Success, ""},
		{"tolerates everything", &api.Task{Tolerations: []api.Toleration{{Operator: api.TolerationExists}}}, cordon, Success, ""},
		{"tolerates only NoExecute", &api.Task{Tolerations: []api.Toleration{
			{Key: UnschedulableTaintKey, Operator: api.TolerationExists, Effect: api.TaintNoExecute}}}, cordon,
			UnschedulableAndUnresolvable, ReasonNodeUnschedulable},
		{"nil task", nil, cordon, UnschedulableAndUnresolvable, ReasonNodeUnschedulable},
		{"nil node", &api.Task{}, nil, UnschedulableAndUnresolvable, ReasonNoNode},
	})
}

func TestOutOfSyncFilter(t *testing.T) {
	runFilterCases(t, OutOfSync{}, []filterCase{
		{"in sync", &api.Task{}, view(mkNode("n", 1, 1, 1)), Success, ""},
		{"out of sync", &api.Task{}, view(mkNode("n", 1, 1, 1, outOfSync)), Unschedulable, ReasonOutOfSync},
		{"nil task", nil, view(mkNode("n", 1, 1, 1, outOfSync)), Unschedulable, ReasonOutOfSync},
		{"nil node", &api.Task{}, nil, UnschedulableAndUnresolvable, ReasonNoNode},
	})
}

func TestCodeString(t *testing.T) {
	for c, want := range map[Code]string{Success: "Success", Unschedulable: "Unschedulable",
		UnschedulableAndUnresolvable: "UnschedulableAndUnresolvable", Code(9): "Code(9)"} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", int(c), got, want)
		}
	}
}

// The filters run once per node per task: on the Success path they must not
// allocate.
func TestFiltersDoNotAllocateOnSuccess(t *testing.T) {
	task := mkTask("a", 1000, 1)
	task.NodeSelector = map[string]string{"zone": "a"}
	task.Affinity = []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{
		req("gen", api.SelectorGt, "3"), req("zone", api.SelectorIn, "a", "b")}}}
	task.Tolerations = []api.Toleration{{Key: "gpu", Operator: api.TolerationExists}}
	task.Request = task.Request.With(gpu, 1)
	n := view(mkNode("n", 8, 8, 10, withGPU(2), withLabels("zone", "a", "gen", "5"), withTaint("gpu", "", api.TaintNoSchedule)))
	cfg := mustConfig(t, StrategyBinPack)
	for _, f := range cfg.Filters {
		if st := f.Filter(task, n); !st.IsSuccess() {
			t.Fatalf("%s: %+v", f.Name(), st)
		}
		if a := testing.AllocsPerRun(100, func() { f.Filter(task, n) }); a != 0 {
			t.Errorf("%s allocates %.1f times per call on success", f.Name(), a)
		}
	}
	for _, s := range []Scorer{BinPack{}, Spread{}} {
		if a := testing.AllocsPerRun(100, func() { s.Score(task, n) }); a != 0 {
			t.Errorf("%s allocates %.1f times per call", s.Name(), a)
		}
	}
}
