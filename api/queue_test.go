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

// Path hands out the tree's own slices, worked out when it is built: every
// queue's is the walk up its parents, and two callers appending to the
// same path each get a copy (no spare capacity shared between them).
func TestTreePathsAreWorkedOutOnceAndShareNothingOnAppend(t *testing.T) {
	tr := mustTree(t, []QueueSpec{q("top", ""), q("mid", "top"), q("leaf", "mid"), q("other", "top")})
	a := append(mustPath(t, tr, "mid"), "a")
	b := append(mustPath(t, tr, "mid"), "b")
	if a[len(a)-1] != "a" || b[len(b)-1] != "b" {
		t.Errorf("appends to Path(mid) share storage: %v and %v", a, b)
	}
	for _, n := range tr.Names() {
		want := []string{n}
		for cur := n; cur != RootQueue; {
			spec, _ := tr.Get(cur)
			cur = spec.Parent
			want = append(want, cur)
		}
		if got := mustPath(t, tr, n); !reflect.DeepEqual(got, want) {
			t.Errorf("Path(%q) = %v, want %v", n, got, want)
		}
	}
	if _, err := tr.Path("nowhere"); err == nil {
		t.Error("Path of an unknown queue: no error")
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

// mustKept asserts that exactly the named queues (plus root and default)
// are in the tree.
func mustKept(t *testing.T, tr *Tree, names ...string) {
	t.Helper()
	want := map[string]bool{RootQueue: true, DefaultQueue: true}
	for _, n := range names {
		want[n] = true
	}
	got := tr.Names()
	if len(got) != len(want) {
		t.Fatalf("tree holds %v, want %v", got, names)
	}
	for _, n := range got {
		if !want[n] {
			t.Fatalf("tree holds %v, want %v", got, names)
		}
	}
}

// mustLeftOut asserts that name is left out with an error wrapping want and
// naming every word of words.
func mustLeftOut(t *testing.T, left map[string]error, name string, want error, words ...string) {
	t.Helper()
	err, ok := left[name]
	if !ok {
		t.Fatalf("queue %q not reported as left out (reported: %v)", name, left)
	}
	if !errors.Is(err, want) {
		t.Errorf("queue %q: error %v does not wrap %v", name, err, want)
	}
	for _, w := range append([]string{name}, words...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("queue %q: error %q does not name %q", name, err, w)
		}
	}
}

// One bad queue of each kind, each with a child, among valid queues: every
// valid queue is kept, every bad one and its subtree left out and reported.
func TestBuildTreePartialKeepsValidQueues(t *testing.T) {
	specs := []QueueSpec{
		qcap(t, "org", "", map[string]int64{CPU: 4000}),
		q("team", "org"),
		q("cyc-a", "cyc-b"), q("cyc-b", "cyc-a"), q("cyc-kid", "cyc-a"),
		q("orphan", "ghost"), q("orphan-kid", "orphan"),
		qcap(t, "greedy", "org", map[string]int64{CPU: 8000}), q("greedy-kid", "greedy"), q("greedy-grandkid", "greedy-kid"),
		q("twin", ""), q("twin", "org"), q("twin-kid", "twin"),
		{Name: "neg", Deserved: Resource{MilliCPU: -1}}, q("neg-kid", "neg"),
		{Name: "odd", DequeueStrategy: "lifo"},
		{Name: "trav", Parent: "org", DequeueStrategy: DequeueTraverse},
		{Name: "", Parent: "org"},
		q("later", ""),
	}
	tr, left := BuildTreePartial(specs)
	mustKept(t, tr, "org", "team", "trav", "later")
	mustLeftOut(t, left, "cyc-a", ErrQueueCycle, "cyc-a -> cyc-b -> cyc-a")
	mustLeftOut(t, left, "cyc-b", ErrQueueCycle, "cyc-b -> cyc-a -> cyc-b")
	mustLeftOut(t, left, "cyc-kid", ErrAncestorLeftOut, "cyc-a", "cycle")
	mustLeftOut(t, left, "orphan", ErrUnknownParent, "ghost")
	mustLeftOut(t, left, "orphan-kid", ErrAncestorLeftOut, "orphan", "ghost")
	mustLeftOut(t, left, "greedy", ErrCapability, "org", "cpu=8", "cpu=4")
	mustLeftOut(t, left, "greedy-kid", ErrAncestorLeftOut, "greedy")
	mustLeftOut(t, left, "greedy-grandkid", ErrAncestorLeftOut, "greedy", "org")
	mustLeftOut(t, left, "twin", ErrDuplicateQueue, "2 times")
	mustLeftOut(t, left, "twin-kid", ErrAncestorLeftOut, "twin")
	mustLeftOut(t, left, "neg", ErrNegative, "deserved")
	mustLeftOut(t, left, "neg-kid", ErrAncestorLeftOut, "neg")
	mustLeftOut(t, left, "odd", ErrQueueSpec, "lifo")
	mustLeftOut(t, left, "", ErrQueueSpec, "empty name", "org")
	if len(left) != 14 {
		t.Errorf("%d queues reported, want 14: %v", len(left), left)
	}
	if s, _ := tr.Get("trav"); s.DequeueStrategy != DequeueTraverse {
		t.Errorf("trav strategy %q", s.DequeueStrategy)
	}
	if s, _ := tr.Get("team"); s.DequeueStrategy != DequeueFIFO || s.Weight != 1 {
		t.Errorf("team defaults: %+v", s)
	}
	// A left-out queue is unknown to jobs, and the refusal says why.
	_, err := tr.JobPath("greedy-kid")
	if !errors.Is(err, ErrUnknownQueue) || !strings.Contains(err.Error(), "greedy") || !strings.Contains(err.Error(), "left out") {
		t.Errorf("JobPath(greedy-kid) error = %v, want ErrUnknownQueue saying greedy is left out", err)
	}
	// The strict builder refuses the same specs, naming a queue with a
	// problem of its own (not one left out through an ancestor).
	if _, err := BuildTree(specs); err == nil || errors.Is(err, ErrAncestorLeftOut) {
		t.Errorf("BuildTree error = %v, want a root-cause error", err)
	}
	// What was kept is a valid tree by itself, and the same one.
	again, err := BuildTree(tr.Specs())
	if err != nil || !again.Equal(tr) {
		t.Fatalf("BuildTree(kept specs) = %v, %v; want the same tree", again, err)
	}
}

// A lowered parent capability leaves out the child whose capability is now
// above it, not the parent: the parent's new bound applies to everything
// kept below it.
func TestBuildTreePartialLoweredParentCapability(t *testing.T) {
	tr, left := BuildTreePartial([]QueueSpec{
		qcap(t, "parent", "", map[string]int64{CPU: 2000}),
		qcap(t, "big", "parent", map[string]int64{CPU: 3000}),
		qcap(t, "small", "parent", map[string]int64{CPU: 1000}),
		q("free", "parent"),
	})
	mustKept(t, tr, "parent", "small", "free")
	mustLeftOut(t, left, "big", ErrCapability, "parent", "cpu=3", "cpu=2")
	if p, _ := tr.Get("parent"); p.Capability.String() != "cpu=2" {
		t.Errorf("parent capability %s, want cpu=2", p.Capability)
	}
}

// Root and default declared invalid are replaced by the implicit queues;
// the declared default's children are left out with it.
func TestBuildTreePartialInvalidRootAndDefault(t *testing.T) {
	tr, left := BuildTreePartial([]QueueSpec{
		q(RootQueue, "team"), q("team", ""),
		{Name: DefaultQueue, Parent: "ghost"}, q("def-kid", DefaultQueue),
	})
	mustKept(t, tr, "team")
	mustLeftOut(t, left, RootQueue, ErrQueueCycle, "team", "implicit root")
	mustLeftOut(t, left, DefaultQueue, ErrUnknownParent, "ghost", "implicit default")
	mustLeftOut(t, left, "def-kid", ErrAncestorLeftOut, DefaultQueue)
	if !tr.IsLeaf(DefaultQueue) {
		t.Errorf("implicit default has children %v", tr.Children(DefaultQueue))
	}
	if p, err := tr.JobPath(DefaultQueue); err != nil || len(p) != 2 {
		t.Errorf("JobPath(default) = %v, %v", p, err)
	}
}

func TestBuildTreePartialValidHasNoErrors(t *testing.T) {
	tr, left := BuildTreePartial([]QueueSpec{q("a", ""), q("b", "a")})
	if len(left) != 0 || len(tr.LeftOut()) != 0 {
		t.Fatalf("valid specs reported %v", left)
	}
	mustKept(t, tr, "a", "b")
}

func TestEqualSpecs(t *testing.T) {
	base := []QueueSpec{qcap(t, "a", "", map[string]int64{CPU: 1000}), q("b", "a")}
	same := []QueueSpec{q("b", "a"), qcap(t, "a", "", map[string]int64{CPU: 1000})}
	if !EqualSpecs(base, same) {
		t.Error("reordered specs not equal")
	}
	for name, other := range map[string][]QueueSpec{
		"capability": {qcap(t, "a", "", map[string]int64{CPU: 2000}), q("b", "a")},
		"unset dim":  {q("a", ""), q("b", "a")},
		"parent":     {qcap(t, "a", "", map[string]int64{CPU: 1000}), q("b", "")},
		"weight":     {qcap(t, "a", "", map[string]int64{CPU: 1000}), {Name: "b", Parent: "a", Weight: 2}},
		"strategy":   {qcap(t, "a", "", map[string]int64{CPU: 1000}), {Name: "b", Parent: "a", DequeueStrategy: DequeueTraverse}},
		"deserved":   {qcap(t, "a", "", map[string]int64{CPU: 1000}), {Name: "b", Parent: "a", Deserved: res(1, 0)}},
		"guarantee":  {qcap(t, "a", "", map[string]int64{CPU: 1000}), {Name: "b", Parent: "a", Guarantee: res(0, 1)}},
		"missing":    {qcap(t, "a", "", map[string]int64{CPU: 1000})},
	} {
		if EqualSpecs(base, other) {
			t.Errorf("%s: specs differ but compare equal", name)
		}
	}
	t1, t2 := mustTree(t, base), mustTree(t, same)
	if !t1.Equal(t2) || t1.Equal(mustTree(t, base[:1])) || t1.Equal(nil) || !(*Tree)(nil).Equal(nil) {
		t.Error("Tree.Equal disagrees with the specs")
	}
	// Normalized and raw spellings of the same queue build equal trees.
	if !mustTree(t, []QueueSpec{{Name: "x", Parent: RootQueue, Weight: 1, DequeueStrategy: DequeueFIFO}}).Equal(mustTree(t, []QueueSpec{q("x", "")})) {
		t.Error("defaults not normalized")
	}
}

// Queues known to be invalid before building (a failed conversion) are left
// out with their own error, and their children name them.
func TestBuildTreeExcluding(t *testing.T) {
	conv := errors.New(`queue "bad" capability: negative resource quantity: cpu is -1`)
	tr, left := BuildTreeExcluding([]QueueSpec{q("bad", ""), q("kid", "bad"), q("fine", "")}, map[string]error{"bad": conv, DefaultQueue: conv})
	mustKept(t, tr, "fine")
	if left["bad"] != conv {
		t.Errorf("bad: %v, want the conversion error as is", left["bad"])
	}
	mustLeftOut(t, left, "kid", ErrAncestorLeftOut, "bad", "cpu is -1")
	if err := left[DefaultQueue]; err == nil || !strings.Contains(err.Error(), "implicit default") {
		t.Errorf("default: %v, want the conversion error and the implicit default used", err)
	}
}
