package api

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Well-known queue names. The root is the top of every tree and always
// exists; the default queue is a leaf under the root that receives jobs that
// name no queue.
const (
	RootQueue    = "root"
	DefaultQueue = "default"
)

// Dequeue strategies: how a queue's jobs leave it for admission. With FIFO
// (the default) the jobs behind one that does not fit wait for it; with
// Traverse they are tried in turn. Volcano's spec.dequeueStrategy.
const (
	DequeueFIFO     = "fifo"
	DequeueTraverse = "traverse"
)

// Errors wrapped by tree validation, so callers can tell them apart.
var (
	ErrQueueCycle     = errors.New("queue cycle")
	ErrUnknownQueue   = errors.New("unknown queue")
	ErrUnknownParent  = errors.New("unknown parent queue")
	ErrNotLeaf        = errors.New("queue is not a leaf")
	ErrDuplicateQueue = errors.New("duplicate queue")
	ErrCapability     = errors.New("child capability above parent's")
	// ErrQueueSpec is wrapped for a queue whose own fields are invalid: an
	// empty name, a negative weight, an unknown dequeue strategy.
	ErrQueueSpec = errors.New("invalid queue")
	// ErrAncestorLeftOut is wrapped for a queue left out only because an
	// ancestor was.
	ErrAncestorLeftOut = errors.New("ancestor queue left out")
)

// QueueSpec is one queue as the user declared it.
type QueueSpec struct {
	Name string
	// Parent is the parent queue's name; empty means the root.
	Parent string
	// Capability is the hard limit on what the queue and its descendants may
	// hold at once. Unset dimensions are unlimited.
	Capability Limit
	// Deserved is the share the queue should get when the cluster is
	// contended; Guarantee is reserved for it even when idle.
	Deserved  Resource
	Guarantee Resource
	// Weight orders queues for fair share when Deserved is unset (≥ 1).
	Weight int32
	// DequeueStrategy is DequeueFIFO (the default when empty) or
	// DequeueTraverse.
	DequeueStrategy string `json:",omitempty"`
	// Closed is set while the queue admits nothing new: Volcano's queue
	// controller owns Queue.status.state and sets it Closing or Closed
	// (cascading to children); what runs keeps running.
	Closed bool `json:",omitempty"`
	// NotReclaimable is Volcano's spec.reclaimable set to false: what
	// this queue uses above its deserved share is never taken back by
	// another queue (its own jobs may still preempt each other).
	NotReclaimable bool `json:",omitempty"`
	// Priority is Volcano's spec.priority: when quota is taken back, the
	// queues of lower priority give first (after the most over-deserved).
	Priority int32 `json:",omitempty"`
}

// Reclaimable reports whether what the queue borrowed may be taken back.
func (s QueueSpec) Reclaimable() bool { return !s.NotReclaimable }

// Equal reports whether two specs declare the same queue, field by field
// (amounts compared by value, a zero scalar equal to an absent one).
func (s QueueSpec) Equal(o QueueSpec) bool {
	return s.Name == o.Name && s.Parent == o.Parent && s.Weight == o.Weight &&
		s.DequeueStrategy == o.DequeueStrategy && s.Closed == o.Closed && s.NotReclaimable == o.NotReclaimable &&
		s.Priority == o.Priority && limitsEqual(s.Capability, o.Capability) &&
		s.Deserved.Equal(o.Deserved) && s.Guarantee.Equal(o.Guarantee)
}

func limitsEqual(a, b Limit) bool {
	if len(a.set) != len(b.set) {
		return false
	}
	for d, v := range a.set {
		if w, ok := b.set[d]; !ok || w != v {
			return false
		}
	}
	return true
}

// EqualSpecs reports whether two spec lists declare the same queues,
// whatever their order (specs of one name keep their relative order). It
// lets callers skip work when a list is unchanged.
func EqualSpecs(a, b []QueueSpec) bool {
	if len(a) != len(b) {
		return false
	}
	as, bs := sortedSpecs(a), sortedSpecs(b)
	for i := range as {
		if !as[i].Equal(bs[i]) {
			return false
		}
	}
	return true
}

func sortedSpecs(specs []QueueSpec) []QueueSpec {
	out := append([]QueueSpec(nil), specs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tree is a validated queue hierarchy. It is immutable once built and safe
// for concurrent readers.
type Tree struct {
	queues   map[string]QueueSpec
	children map[string][]string
	// paths holds each queue's path to the root, leaf first, worked out
	// once when the tree is built (the coordinator asks for a path at every
	// reservation); Path hands them out read-only.
	paths map[string][]string
	// leftOut holds, per declared queue that is not in the tree, why.
	leftOut map[string]error
}

// BuildTree validates specs and returns the tree, or an error when any
// queue is invalid (see BuildTreePartial for the rules). The root queue is
// added when absent, and so is the default queue. The error names the queues
// involved; when several are invalid it is the first (by name) that is
// invalid by itself rather than through an ancestor.
func BuildTree(specs []QueueSpec) (*Tree, error) {
	t, left := BuildTreePartial(specs)
	if len(left) == 0 {
		return t, nil
	}
	names := make([]string, 0, len(left))
	for n := range left {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !errors.Is(left[n], ErrAncestorLeftOut) {
			return nil, left[n]
		}
	}
	return nil, left[names[0]]
}

// BuildTreePartial builds the tree of every valid queue in specs and says,
// per queue left out, why. A queue is left out, with all its descendants,
// when: its name is empty or declared more than once; an amount, its weight
// or its dequeue strategy is invalid; its parent does not exist; it is part
// of a cycle; or a capability dimension is above that of the nearest kept
// ancestor that sets the same dimension. The error of a queue left out only
// because of an ancestor wraps ErrAncestorLeftOut and names that ancestor;
// the others wrap the sentinel of their own problem (ErrQueueCycle,
// ErrUnknownParent, ErrDuplicateQueue, ErrCapability, ErrNegative,
// ErrQueueSpec). Every error names the queue; the map's key is its name.
//
// The root and the default queue are always in the tree: when not declared,
// or declared invalid (their error is in the map too), an implicit one is
// used (the root with no limit, the default as a leaf under the root). The
// result does not depend on the order of specs. Empty parents mean the
// root, zero weights 1 and empty strategies DequeueFIFO, in the tree's specs.
//
// Cost: O(queues × depth) time; nothing panics whatever the input.
func BuildTreePartial(specs []QueueSpec) (*Tree, map[string]error) {
	return BuildTreeExcluding(specs, nil)
}

// BuildTreeExcluding is BuildTreePartial with queues already known to be
// invalid (a Queue object that could not be converted, say): each name in
// invalid is left out with its error, whatever specs declare under that
// name, and its descendants are left out naming it.
func BuildTreeExcluding(specs []QueueSpec, invalid map[string]error) (*Tree, map[string]error) {
	left := make(map[string]error, len(invalid))
	// 1. Each declaration by itself.
	count := make(map[string]int, len(specs)+len(invalid))
	for n, err := range invalid {
		if err == nil {
			err = fmt.Errorf("%w: queue %q", ErrQueueSpec, n)
		}
		left[n] = err
		count[n]++
	}
	for _, s := range specs {
		count[s.Name]++
	}
	decl := make(map[string]QueueSpec, len(specs)+2)
	for _, s := range specs {
		if _, ok := invalid[s.Name]; ok {
			continue
		}
		if s.Name == "" {
			left[""] = fmt.Errorf("%w: queue with empty name (parent %q)", ErrQueueSpec, s.Parent)
			continue
		}
		if n := count[s.Name]; n > 1 {
			left[s.Name] = fmt.Errorf("%w: %q declared %d times", ErrDuplicateQueue, s.Name, n)
			continue
		}
		ns, err := normalize(s)
		if err != nil {
			left[s.Name] = err
			continue
		}
		decl[s.Name] = ns
	}
	// The root and default fall back to implicit queues. An undeclared
	// default may be a parent; a declared default that is left out keeps its
	// declared children out (they hang below the declaration, not the
	// implicit leaf added at the end).
	if _, ok := decl[RootQueue]; !ok {
		if err, bad := left[RootQueue]; bad {
			left[RootQueue] = fmt.Errorf("%w (the declaration is ignored; the implicit root is used)", err)
		}
		decl[RootQueue] = QueueSpec{Name: RootQueue, Weight: 1, DequeueStrategy: DequeueFIFO}
	}
	if _, declared := count[DefaultQueue]; !declared {
		decl[DefaultQueue] = implicitDefault()
	}

	// 2. Structure: every queue must reach the root through declared,
	// valid queues.
	kept := make(map[string]bool, len(decl))
	kept[RootQueue] = true
	for _, n := range sortedKeysOf(decl) {
		resolve(n, decl, kept, left)
	}
	// 3. Capability, top-down, against the nearest kept ancestor setting
	// each dimension; a queue left out here takes its subtree with it.
	children := map[string][]string{}
	for n := range kept {
		if n != RootQueue {
			p := decl[n].Parent
			children[p] = append(children[p], n)
		}
	}
	for _, c := range children {
		sort.Strings(c)
	}
	t := &Tree{queues: make(map[string]QueueSpec, len(kept)+1), children: map[string][]string{}, leftOut: left}
	t.queues[RootQueue] = decl[RootQueue]
	stack := []string{RootQueue}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[p] {
			if err := t.checkCapability(decl[c]); err != nil {
				left[c] = err
				dropSubtree(c, children, left)
				continue
			}
			t.queues[c] = decl[c]
			t.children[p] = append(t.children[p], c)
			stack = append(stack, c)
		}
	}
	if _, ok := t.queues[DefaultQueue]; !ok {
		if err, bad := left[DefaultQueue]; bad {
			left[DefaultQueue] = fmt.Errorf("%w (the declaration is ignored; the implicit default queue under the root is used)", err)
		}
		t.queues[DefaultQueue] = implicitDefault()
		t.children[RootQueue] = append(t.children[RootQueue], DefaultQueue)
	}
	for p := range t.children {
		sort.Strings(t.children[p])
	}
	t.paths = make(map[string][]string, len(t.queues))
	for name := range t.queues {
		t.paths[name] = t.walkPath(name)
	}
	return t, left
}

func implicitDefault() QueueSpec {
	return QueueSpec{Name: DefaultQueue, Parent: RootQueue, Weight: 1, DequeueStrategy: DequeueFIFO}
}

// normalize checks one declaration by itself and fills its defaults.
func normalize(s QueueSpec) (QueueSpec, error) {
	if s.Name == RootQueue {
		if s.Parent != "" {
			return s, fmt.Errorf("%w: root queue cannot have parent %q", ErrQueueCycle, s.Parent)
		}
	} else if s.Parent == "" {
		s.Parent = RootQueue
	}
	if s.Parent == s.Name {
		return s, fmt.Errorf("%w: queue %q is its own parent", ErrQueueCycle, s.Name)
	}
	for _, d := range s.Capability.Dims() {
		if v, _ := s.Capability.Get(d); v < 0 {
			return s, fmt.Errorf("queue %q capability: %w: %s is %s", s.Name, ErrNegative, d, FormatQuantity(d, v))
		}
	}
	if err := s.Deserved.Validate(); err != nil {
		return s, fmt.Errorf("queue %q deserved: %w", s.Name, err)
	}
	if err := s.Guarantee.Validate(); err != nil {
		return s, fmt.Errorf("queue %q guarantee: %w", s.Name, err)
	}
	if s.Weight < 0 {
		return s, fmt.Errorf("%w: queue %q has negative weight %d", ErrQueueSpec, s.Name, s.Weight)
	}
	if s.Weight == 0 {
		s.Weight = 1
	}
	switch s.DequeueStrategy {
	case "":
		s.DequeueStrategy = DequeueFIFO
	case DequeueFIFO, DequeueTraverse:
	default:
		return s, fmt.Errorf("%w: queue %q has dequeue strategy %q (want %q or %q)",
			ErrQueueSpec, s.Name, s.DequeueStrategy, DequeueFIFO, DequeueTraverse)
	}
	return s, nil
}

// resolve decides whether n reaches the root through valid declarations,
// walking up until a queue already decided, the root, a missing parent or a
// cycle, and records the outcome for every queue on the walk.
func resolve(n string, decl map[string]QueueSpec, kept map[string]bool, left map[string]error) {
	if kept[n] || left[n] != nil {
		return
	}
	var path []string
	onPath := map[string]int{}
	cur := n
	for {
		if kept[cur] {
			for _, q := range path {
				kept[q] = true
			}
			return
		}
		if err := left[cur]; err != nil {
			// cur is left out (by itself or through its ancestors): so
			// is everything below it on the walk.
			cause := rootCause(cur, left)
			markBelow(path, cause, left)
			return
		}
		if i, seen := onPath[cur]; seen {
			cycle := path[i:]
			for j, q := range cycle {
				spelled := append(append(append([]string{}, cycle[j:]...), cycle[:j]...), q)
				left[q] = fmt.Errorf("%w: %s", ErrQueueCycle, strings.Join(spelled, " -> "))
			}
			markBelow(path[:i], cycle[0], left)
			return
		}
		s, ok := decl[cur]
		if !ok {
			// Only reached for a parent named by the queue below it.
			below := path[len(path)-1]
			left[below] = fmt.Errorf("%w: queue %q names parent %q, which does not exist", ErrUnknownParent, below, cur)
			markBelow(path[:len(path)-1], below, left)
			return
		}
		onPath[cur] = len(path)
		path = append(path, cur)
		cur = s.Parent
	}
}

// rootCause returns the queue whose own problem left q out: q itself, or
// the ancestor its ErrAncestorLeftOut error names.
func rootCause(q string, left map[string]error) string {
	var ae *ancestorError
	if errors.As(left[q], &ae) {
		return ae.ancestor
	}
	return q
}

// markBelow leaves out every queue of path (each one below the next) because
// of the ancestor cause.
func markBelow(path []string, cause string, left map[string]error) {
	for _, q := range path {
		left[q] = &ancestorError{queue: q, ancestor: cause, cause: left[cause]}
	}
}

// dropSubtree leaves out every descendant of q (already left out) in the
// candidate children map.
func dropSubtree(q string, children map[string][]string, left map[string]error) {
	cause := rootCause(q, left)
	stack := append([]string(nil), children[q]...)
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		left[c] = &ancestorError{queue: c, ancestor: cause, cause: left[cause]}
		stack = append(stack, children[c]...)
	}
}

// ancestorError says that queue is left out because ancestor is.
type ancestorError struct {
	queue, ancestor string
	cause           error
}

func (e *ancestorError) Error() string {
	return fmt.Sprintf("%s: queue %q is below %q, which is left out: %v", ErrAncestorLeftOut, e.queue, e.ancestor, e.cause)
}

func (e *ancestorError) Unwrap() error { return ErrAncestorLeftOut }

func sortedKeysOf(m map[string]QueueSpec) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkCapability compares each set dimension of q's capability with the
// nearest ancestor in t that sets it; every ancestor of q is already in t.
func (t *Tree) checkCapability(q QueueSpec) error {
	for _, d := range q.Capability.Dims() {
		v, _ := q.Capability.Get(d)
		for anc := q.Parent; ; {
			as, ok := t.queues[anc]
			if !ok {
				break
			}
			if pv, ok := as.Capability.Get(d); ok {
				if v > pv {
					return fmt.Errorf("%w: queue %q capability %s=%s is above ancestor %q's %s=%s",
						ErrCapability, q.Name, d, FormatQuantity(d, v), anc, d, FormatQuantity(d, pv))
				}
				break
			}
			if anc == RootQueue {
				break
			}
			anc = as.Parent
		}
	}
	return nil
}

// LeftOut returns, per declared queue that is not in the tree (or, for the
// root and the default queue, whose declaration was replaced by the implicit
// queue), why. It is a copy; empty for a tree built without errors.
func (t *Tree) LeftOut() map[string]error {
	out := make(map[string]error, len(t.leftOut))
	for k, v := range t.leftOut {
		out[k] = v
	}
	return out
}

// Equal reports whether two trees hold the same queue specs (why queues
// were left out is not compared). Nil trees are equal only to each other.
func (t *Tree) Equal(o *Tree) bool {
	if t == nil || o == nil {
		return t == o
	}
	if len(t.queues) != len(o.queues) {
		return false
	}
	for n, s := range t.queues {
		if os, ok := o.queues[n]; !ok || !s.Equal(os) {
			return false
		}
	}
	return true
}

// Names returns every queue name, sorted.
func (t *Tree) Names() []string {
	out := make([]string, 0, len(t.queues))
	for n := range t.queues {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns the spec of one queue.
func (t *Tree) Get(name string) (QueueSpec, bool) {
	q, ok := t.queues[name]
	return q, ok
}

// Children returns the children of a queue, sorted.
func (t *Tree) Children(name string) []string {
	c := append([]string(nil), t.children[name]...)
	sort.Strings(c)
	return c
}

// IsLeaf reports whether the queue exists and has no children.
func (t *Tree) IsLeaf(name string) bool {
	_, ok := t.queues[name]
	return ok && len(t.children[name]) == 0
}

// unknown is the error for a name that is not in the tree: for a queue left
// out, it says why.
func (t *Tree) unknown(name string) error {
	if why, ok := t.leftOut[name]; ok {
		return fmt.Errorf("%w: %q is left out of the queue tree: %v", ErrUnknownQueue, name, why)
	}
	return fmt.Errorf("%w: %q", ErrUnknownQueue, name)
}

// Path returns the queue and its ancestors, leaf first and root last. The
// slice is the tree's own: callers read it and never write into it.
func (t *Tree) Path(name string) ([]string, error) {
	p, ok := t.paths[name]
	if !ok {
		return nil, t.unknown(name)
	}
	return p, nil
}

// walkPath is name's path to the root, leaf first, clipped to its length
// (an append to the whole of what Path returns copies it; an append to a
// shorter re-slice of it would write into the tree's, which no caller does).
func (t *Tree) walkPath(name string) []string {
	var out []string
	for cur := name; ; cur = t.queues[cur].Parent {
		out = append(out, cur)
		if cur == RootQueue {
			return slices.Clip(out)
		}
	}
}

// JobPath validates that a job may be placed in queue name (it exists and is
// a leaf) and returns its path to the root, leaf first.
func (t *Tree) JobPath(name string) ([]string, error) {
	if _, ok := t.queues[name]; !ok {
		return nil, t.unknown(name)
	}
	if !t.IsLeaf(name) {
		return nil, fmt.Errorf("%w: jobs must name a leaf queue, %q has children %s", ErrNotLeaf, name, strings.Join(t.Children(name), ", "))
	}
	return t.Path(name)
}

// Specs returns every queue spec (root and default included), sorted by name.
func (t *Tree) Specs() []QueueSpec {
	out := make([]QueueSpec, 0, len(t.queues))
	for _, n := range t.Names() {
		out = append(out, t.queues[n])
	}
	return out
}
