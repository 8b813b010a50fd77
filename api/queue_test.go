package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func q(name, parent string) QueueSpec { return QueueSpec{Name: name, Parent: parent} }

func qcap(t testing.TB, name, parent string, capability map[string]int64) QueueSpec {
	return QueueSpec{Name: name, Parent: parent, Capability: mustLimit(t, capability)}
}

func mustTree(t testing.TB, specs []QueueSpec) *Tree {
	t.Helper()
	tr, err := BuildTree(specs)
	if err != nil {
		t.Fatalf("BuildTree: %v", err)
	}
	return tr
}

func TestBuildTreeRootAndDefaultAlwaysPresent(t *testing.T) {
	for _, specs := range [][]QueueSpec{nil, {}, {q("a", "")}, {q("a", RootQueue), q("b", "a")}} {
		tr := mustTree(t, specs)
		root, ok := tr.Get(RootQueue)
		if !ok || root.Parent != "" {
			t.Errorf("specs %v: root = %+v, %v; want present with no parent", specs, root, ok)
		}
		def, ok := tr.Get(DefaultQueue)
		if !ok || def.Parent != RootQueue {
			t.Errorf("specs %v: default = %+v, %v; want present under root", specs, def, ok)
		}
		if !tr.IsLeaf(DefaultQueue) {
			t.Errorf("specs %v: default is not a leaf", specs)
		}
		if got, err := tr.JobPath(DefaultQueue); err != nil || !reflect.DeepEqual(got, []string{DefaultQueue, RootQueue}) {
			t.Errorf("specs %v: JobPath(default) = %v, %v", specs, got, err)
		}
		if root.Weight != 1 || def.Weight != 1 {
			t.Errorf("implicit queues have weights %d, %d; want 1", root.Weight, def.Weight)
		}
	}
	tr := mustTree(t, nil)
	if got, want := tr.Names(), []string{DefaultQueue, RootQueue}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got, want := tr.Children(RootQueue), []string{DefaultQueue}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children(root) = %v, want %v", got, want)
	}
}

func TestBuildTreeKeepsDeclaredRootAndDefault(t *testing.T) {
	rootCap := map[string]int64{CPU: 8000}
	specs := []QueueSpec{
		{Name: RootQueue, Capability: mustLimit(t, rootCap), Weight: 3},
		{Name: DefaultQueue, Weight: 5, Deserved: res(1000, 0)},
	}
	tr := mustTree(t, specs)
	root, _ := tr.Get(RootQueue)
	if v, ok := root.Capability.Get(CPU); !ok || v != 8000 || root.Weight != 3 {
		t.Errorf("declared root replaced: %+v", root)
	}
	def, _ := tr.Get(DefaultQueue)
	if def.Weight != 5 || def.Parent != RootQueue || !def.Deserved.Equal(res(1000, 0)) {
		t.Errorf("declared default replaced: %+v", def)
	}
	if got := tr.Names(); len(got) != 2 {
		t.Errorf("Names() = %v, want just root and default", got)
	}
}

func TestBuildTreeEmptyParentMeansRoot(t *testing.T) {
	tr := mustTree(t, []QueueSpec{q("team", ""), q("batch", "team")})
	team, ok := tr.Get("team")
	if !ok || team.Parent != RootQueue {
		t.Fatalf("team = %+v, %v; want parent root", team, ok)
	}
	if got, want := tr.Children(RootQueue), []string{DefaultQueue, "team"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children(root) = %v, want %v", got, want)
	}
	if got, want := tr.Children("team"), []string{"batch"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children(team) = %v, want %v", got, want)
	}
	if w := team.Weight; w != 1 {
		t.Errorf("zero weight defaulted to %d, want 1", w)
	}
}

func TestBuildTreeOrderIndependent(t *testing.T) {
	specs := []QueueSpec{q("leaf", "mid"), q("mid", "top"), q("top", "")}
	tr := mustTree(t, specs)
	if got, want := mustPath(t, tr, "leaf"), []string{"leaf", "mid", "top", RootQueue}; !reflect.DeepEqual(got, want) {
		t.Errorf("Path(leaf) = %v, want %v", got, want)
	}
}

func mustPath(t *testing.T, tr *Tree, name string) []string {
	t.Helper()
	p, err := tr.Path(name)
	if err != nil {
		t.Fatalf("Path(%q): %v", name, err)
	}
	return p
}

func TestBuildTreeErrors(t *testing.T) {
	tests := []struct {
		name     string
		specs    func(t testing.TB) []QueueSpec
		wantErr  error // nil: only require some error
		contains []string
	}{
		{
			name:     "two-queue cycle",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("alpha", "beta"), q("beta", "alpha")} },
			wantErr:  ErrQueueCycle,
			contains: []string{"alpha", "beta"},
		},
		{
			name: "three-queue cycle hanging below a valid queue",
			specs: func(testing.TB) []QueueSpec {
				return []QueueSpec{q("ok", ""), q("xa", "xc"), q("xb", "xa"), q("xc", "xb"), q("tail", "xa")}
			},
			wantErr:  ErrQueueCycle,
			contains: []string{"xa", "xb", "xc"},
		},
		{
			name:     "own parent",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("selfish", "selfish")} },
			wantErr:  ErrQueueCycle,
			contains: []string{"selfish"},
		},
		{
			name:     "root with a parent",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("team", ""), q(RootQueue, "team")} },
			wantErr:  ErrQueueCycle,
			contains: []string{RootQueue, "team"},
		},
		{
			name:     "default made part of a cycle",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q(DefaultQueue, "loop"), q("loop", DefaultQueue)} },
			wantErr:  ErrQueueCycle,
			contains: []string{DefaultQueue, "loop"},
		},
		{
			name:     "unknown parent",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("orphan", "ghost")} },
			wantErr:  ErrUnknownParent,
			contains: []string{"orphan", "ghost"},
		},
		{
			name:     "duplicate",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("twin", ""), q("other", ""), q("twin", "other")} },
			wantErr:  ErrDuplicateQueue,
			contains: []string{"twin"},
		},
		{
			name:     "duplicate root",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q(RootQueue, ""), q(RootQueue, "")} },
			wantErr:  ErrDuplicateQueue,
			contains: []string{RootQueue},
		},
		{
			name: "capability above parent's",
			specs: func(t testing.TB) []QueueSpec {
				return []QueueSpec{
					qcap(t, "parentq", "", map[string]int64{CPU: 4000}),
					qcap(t, "childq", "parentq", map[string]int64{CPU: 8000}),
				}
			},
			wantErr:  ErrCapability,
			contains: []string{"childq", "parentq", "cpu"},
		},
		{
			name: "capability above declared root's",
			specs: func(t testing.TB) []QueueSpec {
				return []QueueSpec{
					qcap(t, RootQueue, "", map[string]int64{Memory: 1 << 30}),
					qcap(t, "bigq", "", map[string]int64{Memory: 2 << 30}),
				}
			},
			wantErr:  ErrCapability,
			contains: []string{"bigq", RootQueue, "memory"},
		},
		{
			name: "capability above grandparent's when parent leaves the dimension unset",
			specs: func(t testing.TB) []QueueSpec {
				return []QueueSpec{
					qcap(t, "grandq", "", map[string]int64{gpu: 2}),
					qcap(t, "parentq", "grandq", map[string]int64{CPU: 1000}),
					qcap(t, "childq", "parentq", map[string]int64{CPU: 1000, gpu: 4}),
				}
			},
			wantErr:  ErrCapability,
			contains: []string{"childq", "grandq", gpu},
		},
		{
			name: "nearest ancestor wins over a looser grandparent",
			specs: func(t testing.TB) []QueueSpec {
				return []QueueSpec{
					qcap(t, "grandq", "", map[string]int64{CPU: 8000}),
					qcap(t, "parentq", "grandq", map[string]int64{CPU: 2000}),
					qcap(t, "childq", "parentq", map[string]int64{CPU: 3000}),
				}
			},
			wantErr:  ErrCapability,
			contains: []string{"childq", "parentq", "cpu"},
		},
		{
			name: "zero bound in parent",
			specs: func(t testing.TB) []QueueSpec {
				return []QueueSpec{
					qcap(t, "nogpu", "", map[string]int64{gpu: 0}),
					qcap(t, "wantsgpu", "nogpu", map[string]int64{gpu: 1}),
				}
			},
			wantErr:  ErrCapability,
			contains: []string{"wantsgpu", "nogpu", gpu},
		},
		{
			name: "negative deserved",
			specs: func(testing.TB) []QueueSpec {
				return []QueueSpec{{Name: "greedy", Deserved: Resource{MilliCPU: -1000}}}
			},
			wantErr:  ErrNegative,
			contains: []string{"greedy", "cpu"},
		},
		{
			name: "negative deserved scalar",
			specs: func(testing.TB) []QueueSpec {
				return []QueueSpec{{Name: "greedy", Deserved: Resource{Scalars: map[string]int64{gpu: -1}}}}
			},
			wantErr:  ErrNegative,
			contains: []string{"greedy", gpu},
		},
		{
			name: "negative guarantee",
			specs: func(testing.TB) []QueueSpec {
				return []QueueSpec{{Name: "greedy", Guarantee: Resource{Memory: -1}}}
			},
			wantErr:  ErrNegative,
			contains: []string{"greedy", "memory"},
		},
		{
			name:     "negative weight",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{{Name: "heavy", Weight: -1}} },
			contains: []string{"heavy"},
		},
		{
			name:     "empty name",
			specs:    func(testing.TB) []QueueSpec { return []QueueSpec{q("", "")} },
			contains: []string{"empty"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := BuildTree(tc.specs(t))
			if err == nil {
				t.Fatalf("BuildTree succeeded with queues %v, want error", tr.Names())
			}
			if tr != nil {
				t.Errorf("BuildTree returned a tree along with error %v", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error = %v, want one wrapping %v", err, tc.wantErr)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestBuildTreeCycleMessage(t *testing.T) {
	_, err := BuildTree([]QueueSpec{q("a", "b"), q("b", "a")})
	if !errors.Is(err, ErrQueueCycle) {
		t.Fatalf("error = %v, want ErrQueueCycle", err)
	}
	if !strings.Contains(err.Error(), "a -> b -> a") {
		t.Errorf("cycle error %q does not spell the cycle a -> b -> a", err)
	}
}

func TestBuildTreeCapabilityAccepted(t *testing.T) {
	tests := []struct {
		name  string
		specs func(t testing.TB) []QueueSpec
	}{
		{"equal to parent", func(t testing.TB) []QueueSpec {
			return []QueueSpec{
				qcap(t, "p", "", map[string]int64{CPU: 4000, gpu: 2}),
				qcap(t, "c", "p", map[string]int64{CPU: 4000, gpu: 2}),
			}
		}},
		{"dimension no ancestor sets", func(t testing.TB) []QueueSpec {
			return []QueueSpec{
				qcap(t, "p", "", map[string]int64{CPU: 4000}),
				qcap(t, "c", "p", map[string]int64{Memory: 1 << 50, gpu: 1000}),
			}
		}},
		{"below grandparent through an unset parent", func(t testing.TB) []QueueSpec {
			return []QueueSpec{
				qcap(t, "g", "", map[string]int64{gpu: 4}),
				q("p", "g"),
				qcap(t, "c", "p", map[string]int64{gpu: 4}),
			}
		}},
		{"child unlimited under limited parent", func(t testing.TB) []QueueSpec {
			return []QueueSpec{qcap(t, "p", "", map[string]int64{CPU: 1}), q("c", "p")}
		}},
		{"sibling bounds are independent", func(t testing.TB) []QueueSpec {
			return []QueueSpec{
				qcap(t, "p", "", map[string]int64{CPU: 4000}),
				qcap(t, "c1", "p", map[string]int64{CPU: 4000}),
				qcap(t, "c2", "p", map[string]int64{CPU: 4000}),
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustTree(t, tc.specs(t))
		})
	}
}

func TestTreeJobPath(t *testing.T) {
	tr := mustTree(t, []QueueSpec{q("org", ""), q("team", "org"), q("batch", "team"), q("infer", "team"), q("solo", "")})
	tests := []struct {
		queue   string
		want    []string
		wantErr error
	}{
		{queue: "batch", want: []string{"batch", "team", "org", RootQueue}},
		{queue: "infer", want: []string{"infer", "team", "org", RootQueue}},
		{queue: "solo", want: []string{"solo", RootQueue}},
		{queue: DefaultQueue, want: []string{DefaultQueue, RootQueue}},
		{queue: "team", wantErr: ErrNotLeaf},
		{queue: "org", wantErr: ErrNotLeaf},
		{queue: RootQueue, wantErr: ErrNotLeaf},
		{queue: "nope", wantErr: ErrUnknownQueue},
		{queue: "", wantErr: ErrUnknownQueue},
	}
	for _, tc := range tests {
		t.Run(tc.queue, func(t *testing.T) {
			got, err := tr.JobPath(tc.queue)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("JobPath(%q) = %v, %v; want error wrapping %v", tc.queue, got, err, tc.wantErr)
				}
				if tc.queue != "" && !strings.Contains(err.Error(), tc.queue) {
					t.Errorf("error %q does not name queue %q", err, tc.queue)
				}
				return
			}
			if err != nil {
				t.Fatalf("JobPath(%q): %v", tc.queue, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("JobPath(%q) = %v, want %v", tc.queue, got, tc.want)
			}
		})
	}
	if _, err := tr.Path("nope"); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("Path(unknown) error = %v, want ErrUnknownQueue", err)
	}
	if got, want := mustPath(t, tr, "team"), []string{"team", "org", RootQueue}; !reflect.DeepEqual(got, want) {
		t.Errorf("Path(team) = %v, want %v", got, want)
	}
	if got, want := tr.Children("team"), []string{"batch", "infer"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children(team) = %v, want %v", got, want)
	}
	if tr.IsLeaf("nope") {
		t.Error("IsLeaf(unknown) = true")
	}
}

// TestTreeChildrenIsACopy checks that callers cannot edit the tree through
// the slice Children returns.
func TestTreeChildrenIsACopy(t *testing.T) {
	tr := mustTree(t, []QueueSpec{q("p", ""), q("c1", "p"), q("c2", "p")})
	c := tr.Children("p")
	c[0] = "mutated"
	if got := tr.Children("p"); !reflect.DeepEqual(got, []string{"c1", "c2"}) {
		t.Errorf("Children(p) after editing a returned slice = %v", got)
	}
}
