package api

import (
	"errors"
	"fmt"
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

// Errors wrapped by tree validation, so callers can tell them apart.
var (
	ErrQueueCycle     = errors.New("queue cycle")
	ErrUnknownQueue   = errors.New("unknown queue")
	ErrUnknownParent  = errors.New("unknown parent queue")
	ErrNotLeaf        = errors.New("queue is not a leaf")
	ErrDuplicateQueue = errors.New("duplicate queue")
	ErrCapability     = errors.New("child capability above parent's")
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
}

// Tree is a validated queue hierarchy. It is immutable once built and safe
// for concurrent readers.
type Tree struct {
	queues   map[string]QueueSpec
	children map[string][]string
}

// BuildTree validates specs and returns the tree. The root queue is added
// when absent, and so is the default queue. It rejects, with an error naming
// the queues involved: an empty or duplicate name, a parent that does not
// exist, a cycle, a negative amount, and a child whose capability is above
// the nearest ancestor that sets the same resource.
func BuildTree(specs []QueueSpec) (*Tree, error) {
	t := &Tree{queues: make(map[string]QueueSpec, len(specs)+2), children: map[string][]string{}}
	for _, s := range specs {
		if s.Name == "" {
			return nil, fmt.Errorf("queue with empty name (parent %q)", s.Parent)
		}
		if _, dup := t.queues[s.Name]; dup {
			return nil, fmt.Errorf("%w: %q declared twice", ErrDuplicateQueue, s.Name)
		}
		if s.Name == RootQueue {
			if s.Parent != "" {
				return nil, fmt.Errorf("%w: root queue cannot have parent %q", ErrQueueCycle, s.Parent)
			}
		} else if s.Parent == "" {
			s.Parent = RootQueue
		}
		if s.Parent == s.Name {
			return nil, fmt.Errorf("%w: queue %q is its own parent", ErrQueueCycle, s.Name)
		}
		for _, d := range s.Capability.Dims() {
			if v, _ := s.Capability.Get(d); v < 0 {
				return nil, fmt.Errorf("queue %q capability: %w: %s is %s", s.Name, ErrNegative, d, FormatQuantity(d, v))
			}
		}
		if err := s.Deserved.Validate(); err != nil {
			return nil, fmt.Errorf("queue %q deserved: %w", s.Name, err)
		}
		if err := s.Guarantee.Validate(); err != nil {
			return nil, fmt.Errorf("queue %q guarantee: %w", s.Name, err)
		}
		if s.Weight < 0 {
			return nil, fmt.Errorf("queue %q: negative weight %d", s.Name, s.Weight)
		}
		if s.Weight == 0 {
			s.Weight = 1
		}
		t.queues[s.Name] = s
	}
	if _, ok := t.queues[RootQueue]; !ok {
		t.queues[RootQueue] = QueueSpec{Name: RootQueue, Weight: 1}
	}
	if _, ok := t.queues[DefaultQueue]; !ok {
		t.queues[DefaultQueue] = QueueSpec{Name: DefaultQueue, Parent: RootQueue, Weight: 1}
	}
	names := t.Names()
	for _, n := range names {
		q := t.queues[n]
		if n == RootQueue {
			continue
		}
		if _, ok := t.queues[q.Parent]; !ok {
			return nil, fmt.Errorf("%w: queue %q names parent %q, which does not exist", ErrUnknownParent, n, q.Parent)
		}
		t.children[q.Parent] = append(t.children[q.Parent], n)
	}
	// Every queue must reach the root; a walk longer than the number of
	// queues has met a cycle.
	for _, n := range names {
		seen := map[string]bool{}
		var path []string
		for cur := n; cur != RootQueue; cur = t.queues[cur].Parent {
			if seen[cur] {
				i := indexOf(path, cur)
				cycle := append(append([]string{}, path[i:]...), cur)
				return nil, fmt.Errorf("%w: %s", ErrQueueCycle, strings.Join(cycle, " -> "))
			}
			seen[cur] = true
			path = append(path, cur)
		}
	}
	for _, n := range names {
		if err := t.checkCapability(n); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return 0
}

// checkCapability compares each set dimension of n's capability with the
// nearest ancestor that sets it.
func (t *Tree) checkCapability(n string) error {
	q := t.queues[n]
	for _, d := range q.Capability.Dims() {
		v, _ := q.Capability.Get(d)
		for anc := q.Parent; n != RootQueue; anc = t.queues[anc].Parent {
			if pv, ok := t.queues[anc].Capability.Get(d); ok {
				if v > pv {
					return fmt.Errorf("%w: queue %q capability %s=%s is above ancestor %q's %s=%s",
						ErrCapability, n, d, FormatQuantity(d, v), anc, d, FormatQuantity(d, pv))
				}
				break
			}
			if anc == RootQueue {
				break
			}
		}
	}
	return nil
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

// Path returns the queue and its ancestors, leaf first and root last.
func (t *Tree) Path(name string) ([]string, error) {
	if _, ok := t.queues[name]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownQueue, name)
	}
	var out []string
	for cur := name; ; cur = t.queues[cur].Parent {
		out = append(out, cur)
		if cur == RootQueue {
			return out, nil
		}
	}
}

// JobPath validates that a job may be placed in queue name (it exists and is
// a leaf) and returns its path to the root, leaf first.
func (t *Tree) JobPath(name string) ([]string, error) {
	if _, ok := t.queues[name]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownQueue, name)
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
