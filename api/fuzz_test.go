package api

import (
	"errors"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
)

// fuzzNames is the small alphabet queue names and parents are drawn from, so
// that duplicates, cycles, self-parents and unknown parents come up often.
var fuzzNames = []string{"", RootQueue, DefaultQueue, "a", "b", "c", "d", "ghost"}

var fuzzDims = []string{CPU, Memory, gpu}

// fuzzStrategies holds the valid dequeue strategies and an invalid one.
var fuzzStrategies = []string{"", DequeueFIFO, DequeueTraverse, "lifo"}

// byteReader hands out fuzz bytes, then zeros once they run out.
type byteReader struct{ b []byte }

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// amount decodes a small signed amount: mostly small non-negative values so
// that capability comparisons are interesting, sometimes negative.
func (r *byteReader) amount() int64 { return int64(int8(r.next())) }

// decodeSpecs turns fuzz bytes into at most 6 queue specs. ok is false when a
// capability could not be built (NewLimit rejected it).
func decodeSpecs(data []byte) (specs []QueueSpec, ok bool) {
	r := &byteReader{b: data}
	n := int(r.next() % 7)
	for i := 0; i < n; i++ {
		s := QueueSpec{
			Name:   fuzzNames[int(r.next())%len(fuzzNames)],
			Parent: fuzzNames[int(r.next())%len(fuzzNames)],
		}
		if s.Name == "" && r.next()%4 != 0 {
			s.Name = "e" // keep empty names present but not dominant
		}
		mask := r.next()
		capDims := map[string]int64{}
		for j, d := range fuzzDims {
			if mask&(1<<j) != 0 {
				capDims[d] = r.amount()
			}
		}
		if mask&(1<<3) != 0 {
			s.Deserved = Resource{MilliCPU: r.amount()}
		}
		if mask&(1<<4) != 0 {
			s.Guarantee = NewResource(0, 0, map[string]int64{gpu: r.amount()})
		}
		if mask&(1<<5) != 0 {
			s.Weight = int32(r.amount())
		}
		if mask&(1<<6) != 0 {
			s.DequeueStrategy = fuzzStrategies[int(r.next())%len(fuzzStrategies)]
		}
		l, err := NewLimit(capDims)
		if err != nil {
			return nil, false
		}
		s.Capability = l
		specs = append(specs, s)
	}
	return specs, true
}

// validStrategy restates which dequeue strategies are accepted.
func validStrategy(s string) bool { return s == "" || s == DequeueFIFO || s == DequeueTraverse }

// validSpecs is an independent statement of BuildTree's rules: it reports
// whether specs describe a valid tree.
func validSpecs(specs []QueueSpec) bool {
	parent := map[string]string{}
	capOf := map[string]Limit{}
	for _, s := range specs {
		if s.Name == "" || s.Weight < 0 || s.Deserved.Validate() != nil || s.Guarantee.Validate() != nil || !validStrategy(s.DequeueStrategy) {
			return false
		}
		if _, dup := parent[s.Name]; dup {
			return false
		}
		p := s.Parent
		if s.Name == RootQueue && p != "" {
			return false
		}
		if s.Name != RootQueue && p == "" {
			p = RootQueue
		}
		parent[s.Name] = p
		capOf[s.Name] = s.Capability
	}
	if _, ok := parent[RootQueue]; !ok {
		parent[RootQueue] = ""
	}
	if _, ok := parent[DefaultQueue]; !ok {
		parent[DefaultQueue] = RootQueue
	}
	for n, p := range parent {
		if n == RootQueue {
			continue
		}
		if _, ok := parent[p]; !ok {
			return false
		}
	}
	// Every queue must reach the root within len(parent) steps.
	for n := range parent {
		cur, steps := n, 0
		for cur != RootQueue {
			if steps > len(parent) {
				return false
			}
			cur = parent[cur]
			steps++
		}
	}
	for n, l := range capOf {
		if n == RootQueue {
			continue
		}
		for _, d := range l.Dims() {
			v, _ := l.Get(d)
			for anc := parent[n]; anc != ""; anc = parent[anc] {
				if pv, ok := capOf[anc].Get(d); ok {
					if v > pv {
						return false
					}
					break
				}
			}
		}
	}
	return true
}

func FuzzBuildTree(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 3, 0, 0})                                     // a under root
	f.Add([]byte{2, 3, 4, 0, 4, 3, 0})                            // a->b->a cycle
	f.Add([]byte{2, 3, 0, 0, 3, 0, 0})                            // duplicate a
	f.Add([]byte{1, 3, 7, 0})                                     // unknown parent
	f.Add([]byte{1, 3, 3, 0})                                     // own parent
	f.Add([]byte{2, 3, 0, 1, 4, 4, 3, 1, 8})                      // child cpu above parent
	f.Add([]byte{3, 3, 0, 4, 2, 4, 3, 1, 9, 5, 4, 4, 5})          // grandparent gpu through unset parent
	f.Add([]byte{2, 1, 0, 1, 10, 4, 0, 1, 5})                     // root with capability
	f.Add([]byte{1, 3, 0, 8, 0xff})                               // negative deserved
	f.Add([]byte{1, 3, 0, 1, 0xff})                               // negative capability (skipped)
	f.Add([]byte{5, 3, 0, 0, 4, 3, 0, 5, 4, 0, 6, 5, 0, 2, 6, 0}) // deeper tree, default moved under d
	f.Add([]byte{1, 3, 0, 32, 0xfe})                              // negative weight
	f.Add([]byte{1, 0, 0, 0, 0})                                  // empty name
	f.Add([]byte{2, 3, 0, 64, 3, 4, 3, 64, 2})                    // lifo strategy above a traverse child
	f.Add([]byte{4, 3, 0, 1, 4, 4, 3, 1, 8, 5, 4, 0, 6, 3, 0})    // over-cap child with a grandchild, valid sibling
	f.Add([]byte{4, 3, 4, 0, 4, 3, 0, 5, 3, 0, 6, 0, 0})          // cycle with a hanging child and a valid queue
	f.Add([]byte("A110"))                                         // root its own parent, beside an empty name
	f.Add([]byte{1, 7, 2, 0})                                     // child of the implicit default
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, ok := decodeSpecs(data)
		if !ok {
			t.Skip("capability rejected by NewLimit")
		}
		checkPartial(t, specs)
		tr, err := BuildTree(specs)
		if want := validSpecs(specs); want != (err == nil) {
			t.Fatalf("BuildTree(%+v) error = %v; independent check says valid = %v", specs, err, want)
		}
		if err != nil {
			if tr != nil {
				t.Fatalf("BuildTree returned a tree with error %v", err)
			}
			return
		}
		names := tr.Names()
		for _, s := range specs {
			if _, ok := tr.Get(s.Name); !ok {
				t.Fatalf("declared queue %q missing from tree %v", s.Name, names)
			}
		}
		for _, must := range []string{RootQueue, DefaultQueue} {
			if _, ok := tr.Get(must); !ok {
				t.Fatalf("queue %q missing from tree %v", must, names)
			}
		}
		childCount := 0
		for _, n := range names {
			path, err := tr.Path(n)
			if err != nil {
				t.Fatalf("Path(%q): %v", n, err)
			}
			if len(path) == 0 || path[0] != n || path[len(path)-1] != RootQueue {
				t.Fatalf("Path(%q) = %v, want it to start at the queue and end at root", n, path)
			}
			if len(path) > len(names) {
				t.Fatalf("Path(%q) = %v is longer than the %d queues", n, path, len(names))
			}
			seen := map[string]bool{}
			for _, p := range path {
				if seen[p] {
					t.Fatalf("Path(%q) = %v repeats %q", n, path, p)
				}
				seen[p] = true
			}
			spec, _ := tr.Get(n)
			if spec.Weight < 1 {
				t.Fatalf("queue %q has weight %d", n, spec.Weight)
			}
			for _, c := range tr.Children(n) {
				childCount++
				if cs, _ := tr.Get(c); cs.Parent != n {
					t.Fatalf("Children(%q) lists %q whose parent is %q", n, c, cs.Parent)
				}
			}
			if n != RootQueue && !slices.Contains(tr.Children(spec.Parent), n) {
				t.Fatalf("queue %q missing from Children(%q)", n, spec.Parent)
			}
			// Capability: each set dimension is within the nearest ancestor setting it.
			for _, d := range spec.Capability.Dims() {
				v, _ := spec.Capability.Get(d)
				for _, anc := range path[1:] {
					as, _ := tr.Get(anc)
					if pv, ok := as.Capability.Get(d); ok {
						if v > pv {
							t.Fatalf("queue %q %s=%d above ancestor %q's %d", n, d, v, anc, pv)
						}
						break
					}
				}
			}
			jp, err := tr.JobPath(n)
			if tr.IsLeaf(n) {
				if err != nil || !slices.Equal(jp, path) {
					t.Fatalf("JobPath(leaf %q) = %v, %v; want %v", n, jp, err, path)
				}
			} else if !errors.Is(err, ErrNotLeaf) {
				t.Fatalf("JobPath(non-leaf %q) error = %v, want ErrNotLeaf", n, err)
			}
		}
		if childCount != len(names)-1 {
			t.Fatalf("%d parent-child edges for %d queues", childCount, len(names))
		}
	})
}

// partialModel is an independent statement of BuildTreePartial's rules, as
// a fixed point rather than a walk: starting from the root, a queue whose
// declaration is valid by itself joins the tree once its parent is in and
// its capability fits under the nearest ancestor in the tree setting each
// dimension. It returns the names kept and the names that must be reported.
func partialModel(specs []QueueSpec) (kept, reported map[string]bool) {
	count := map[string]int{}
	for _, s := range specs {
		count[s.Name]++
	}
	decl := map[string]QueueSpec{}
	reported = map[string]bool{}
	for _, s := range specs {
		reported[s.Name] = true // until kept
		neg := false
		for _, d := range s.Capability.Dims() {
			if v, _ := s.Capability.Get(d); v < 0 {
				neg = true
			}
		}
		ok := s.Name != "" && count[s.Name] == 1 && !neg && s.Weight >= 0 && validStrategy(s.DequeueStrategy) &&
			s.Deserved.Validate() == nil && s.Guarantee.Validate() == nil && s.Parent != s.Name &&
			(s.Name != RootQueue || s.Parent == "")
		if !ok {
			continue
		}
		if s.Name != RootQueue && s.Parent == "" {
			s.Parent = RootQueue
		}
		decl[s.Name] = s
	}
	_, rootDeclared := decl[RootQueue]
	if !rootDeclared {
		decl[RootQueue] = QueueSpec{Name: RootQueue}
	}
	if count[DefaultQueue] == 0 {
		decl[DefaultQueue] = QueueSpec{Name: DefaultQueue, Parent: RootQueue}
	}
	kept = map[string]bool{RootQueue: true}
	fits := func(s QueueSpec) bool {
		for _, d := range s.Capability.Dims() {
			v, _ := s.Capability.Get(d)
			for anc := s.Parent; ; anc = decl[anc].Parent {
				if pv, ok := decl[anc].Capability.Get(d); ok {
					if v > pv {
						return false
					}
					break
				}
				if anc == RootQueue {
					break
				}
			}
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for n, s := range decl {
			if !kept[n] && kept[s.Parent] && fits(s) {
				kept[n], changed = true, true
			}
		}
	}
	for n := range kept {
		if n != RootQueue || rootDeclared {
			delete(reported, n)
		}
	}
	kept[DefaultQueue] = true
	return kept, reported
}

// checkPartial holds BuildTreePartial to the model and to the tree
// invariants: every queue kept reaches the root and satisfies the capability
// rule, every declared queue left out has an error, and the kept specs are
// a valid tree by themselves.
func checkPartial(t *testing.T, specs []QueueSpec) {
	tr, left := BuildTreePartial(specs)
	kept, reported := partialModel(specs)
	names := tr.Names()
	if len(names) != len(kept) {
		t.Fatalf("BuildTreePartial(%+v) kept %v; model keeps %v", specs, names, kept)
	}
	for _, n := range names {
		if !kept[n] {
			t.Fatalf("BuildTreePartial(%+v) kept %v; model keeps %v", specs, names, kept)
		}
	}
	for n := range reported {
		if left[n] == nil {
			t.Fatalf("BuildTreePartial(%+v): %q left out without an error (errors %v)", specs, n, left)
		}
	}
	for n, err := range left {
		if !reported[n] {
			t.Fatalf("BuildTreePartial(%+v): %q reported (%v) but the model keeps it", specs, n, err)
		}
		if n != "" && !strings.Contains(err.Error(), n) {
			t.Fatalf("error for %q does not name it: %v", n, err)
		}
		known := false
		for _, s := range []error{ErrAncestorLeftOut, ErrQueueCycle, ErrUnknownParent, ErrDuplicateQueue, ErrCapability, ErrNegative, ErrQueueSpec} {
			known = known || errors.Is(err, s)
		}
		if !known {
			t.Fatalf("error for %q wraps no sentinel: %v", n, err)
		}
		if _, in := tr.Get(n); in && n != RootQueue && n != DefaultQueue {
			t.Fatalf("%q both kept and reported: %v", n, err)
		}
	}
	for _, n := range names {
		path, err := tr.Path(n)
		if err != nil || path[0] != n || path[len(path)-1] != RootQueue || len(path) > len(names) {
			t.Fatalf("Path(%q) = %v, %v", n, path, err)
		}
		s, _ := tr.Get(n)
		for _, d := range s.Capability.Dims() {
			v, _ := s.Capability.Get(d)
			for _, anc := range path[1:] {
				as, _ := tr.Get(anc)
				if pv, ok := as.Capability.Get(d); ok {
					if v > pv {
						t.Fatalf("kept queue %q %s=%d above ancestor %q's %d", n, d, v, anc, pv)
					}
					break
				}
			}
		}
	}
	strict, err := BuildTree(tr.Specs())
	if err != nil || !strict.Equal(tr) {
		t.Fatalf("BuildTree(kept specs of %+v) = %v; want the same tree", specs, err)
	}
	if _, err := BuildTree(specs); (err == nil) != (len(left) == 0) {
		t.Fatalf("BuildTree error %v but %d queues left out", err, len(left))
	}
}

var fuzzScalarNames = []string{gpu, foo}

// fuzzResource builds a Resource; bit i of mask decides whether scalar i is present.
func fuzzResource(cpu, mem, s0, s1 int64, mask uint8) Resource {
	r := Resource{MilliCPU: cpu, Memory: mem}
	for i, v := range []int64{s0, s1} {
		if mask&(1<<i) != 0 {
			if r.Scalars == nil {
				r.Scalars = map[string]int64{}
			}
			r.Scalars[fuzzScalarNames[i]] = v // may be zero: must act as absent
		}
	}
	return r
}

func FuzzResourceArith(f *testing.F) {
	f.Add(int64(1000), int64(1<<30), int64(1), int64(0), uint8(1), int64(500), int64(0), int64(2), int64(3), uint8(3))
	f.Add(int64(math.MaxInt64), int64(0), int64(0), int64(0), uint8(0), int64(1), int64(0), int64(0), int64(0), uint8(0))
	f.Add(int64(math.MinInt64), int64(0), int64(0), int64(0), uint8(0), int64(-1), int64(0), int64(0), int64(0), uint8(0))
	f.Add(int64(0), int64(0), int64(math.MinInt64), int64(0), uint8(1), int64(0), int64(0), int64(math.MinInt64), int64(0), uint8(1))
	f.Add(int64(-1), int64(5), int64(0), int64(7), uint8(3), int64(math.MaxInt64), int64(-5), int64(9), int64(0), uint8(2))
	f.Fuzz(func(t *testing.T, ac, am, as0, as1 int64, amask uint8, bc, bm, bs0, bs1 int64, bmask uint8) {
		a := fuzzResource(ac, am, as0, as1, amask)
		b := fuzzResource(bc, bm, bs0, bs1, bmask)
		a0, b0 := deepCopy(a), deepCopy(b)
		dims := append([]string{CPU, Memory}, fuzzScalarNames...)

		sum, addErr := a.Add(b)
		addOverflows := false
		for _, d := range dims {
			x := new(big.Int).Add(big.NewInt(a.Get(d)), big.NewInt(b.Get(d)))
			if !x.IsInt64() {
				addOverflows = true
			} else if addErr == nil && sum.Get(d) != x.Int64() {
				t.Fatalf("(%v + %v).%s = %d, want %d", a, b, d, sum.Get(d), x.Int64())
			}
		}
		if addOverflows != (addErr != nil) {
			t.Fatalf("%#v + %#v: error %v, overflow expected = %v", a, b, addErr, addOverflows)
		}
		if addErr != nil && !errors.Is(addErr, ErrOverflow) {
			t.Fatalf("Add error %v does not wrap ErrOverflow", addErr)
		}

		diff, subErr := a.Sub(b)
		subOverflows, subShort := false, false
		for _, d := range dims {
			x := new(big.Int).Sub(big.NewInt(a.Get(d)), big.NewInt(b.Get(d)))
			switch {
			case !x.IsInt64():
				subOverflows = true
			case x.Sign() < 0:
				subShort = true
			}
		}
		switch {
		case subOverflows:
			if !errors.Is(subErr, ErrOverflow) {
				t.Fatalf("%#v - %#v: error %v, want ErrOverflow", a, b, subErr)
			}
		case subShort:
			if !errors.Is(subErr, ErrUnderflow) {
				t.Fatalf("%#v - %#v: error %v, want ErrUnderflow", a, b, subErr)
			}
		default:
			if subErr != nil {
				t.Fatalf("%#v - %#v: unexpected error %v", a, b, subErr)
			}
		}
		if !subOverflows {
			for _, d := range dims {
				if want := a.Get(d) - b.Get(d); diff.Get(d) != want {
					t.Fatalf("(%v - %v).%s = %d, want %d", a, b, d, diff.Get(d), want)
				}
			}
			assertNoZeroScalars(t, diff)
		}

		if addErr == nil {
			assertNoZeroScalars(t, sum)
			back, err := sum.Sub(b)
			if errors.Is(err, ErrOverflow) {
				t.Fatalf("(a+b)-b overflowed although a+b fit: %v", err)
			}
			if err == nil || errors.Is(err, ErrUnderflow) {
				// On underflow Sub still returns the exact difference.
				if !back.Equal(a) {
					t.Fatalf("(%v + %v) - %v = %v, want %v", a, b, b, back, a)
				}
			}
			if err != nil && !errors.Is(err, ErrUnderflow) {
				t.Fatalf("(a+b)-b: unexpected error %v", err)
			}
		}

		if !reflectEqualResources(a, a0) || !reflectEqualResources(b, b0) {
			t.Fatalf("operands mutated: %#v %#v (were %#v %#v)", a, b, a0, b0)
		}
	})
}

// reflectEqualResources compares exactly, including zero scalars and map nil-ness.
func reflectEqualResources(x, y Resource) bool {
	if x.MilliCPU != y.MilliCPU || x.Memory != y.Memory || (x.Scalars == nil) != (y.Scalars == nil) || len(x.Scalars) != len(y.Scalars) {
		return false
	}
	for k, v := range x.Scalars {
		if w, ok := y.Scalars[k]; !ok || w != v {
			return false
		}
	}
	return true
}
