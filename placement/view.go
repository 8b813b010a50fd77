package placement

import (
	"math"

	"github.com/shardsched/shardsched/api"
)

// staticFilter is implemented by the filters of this package whose verdict
// depends only on the node's books (never on NodeView.Free) and on the
// task's NodeSelector, Affinity and Tolerations. PlaceGang computes a
// node's Free only once the chain reaches a filter that is not static, so
// nodes rejected on labels, taints or cordon cost no allocation; and it
// runs the chain's leading static filters once per node for all the tasks
// of a gang that share those constraints. Filters from other packages
// cannot implement it and are run for every task, with Free.
type staticFilter interface{ static() }

func (OutOfSync) static()         {}
func (NodeUnschedulable) static() {}
func (NodeSelector) static()      {}
func (RequiredAffinity) static()  {}
func (Taints) static()            {}

// builtin is implemented by the steps of this package, which read what is
// free on a node through NodeView's accessors rather than the Free field.
// When every step of a Config is built in, PlaceGang never materializes
// Free: it keeps a tally per node instead (free cpu, memory and pods as
// numbers, other scalars as what the plan assumed), so a scan over every
// node allocates nothing.
type builtin interface{ builtin() }

func (OutOfSync) builtin()         {}
func (NodeUnschedulable) builtin() {}
func (NodeSelector) builtin()      {}
func (RequiredAffinity) builtin()  {}
func (Taints) builtin()            {}
func (Resources) builtin()         {}
func (BinPack) builtin()           {}
func (Spread) builtin()            {}
func (SpareDevices) builtin()      {}

// NodeView is what filters and scorers see of one node during one
// placement: the node's books, read only, and what is free on it in the
// plan being built.
type NodeView struct {
	Books *api.NodeBooks
	// Free is the node's idle resources (allocatable − used, each
	// dimension clamped to 0..allocatable) minus what earlier tasks of the
	// same gang were assumed onto it in the current plan.
	//
	// When a Config holds any step from another package, PlaceGang fills
	// Free before that step sees a node. When it holds only this
	// package's steps, PlaceGang leaves Free empty and they read the same
	// amounts through the view's unexported accessors, which saves an
	// allocation per node.
	Free api.Resource

	// tally, when set, means Free is not computed: the built-in steps
	// read what is free through the accessors below.
	tally *tally
	// facts, when set, is what the planner worked out once about the task
	// it is placing now (see taskFacts); the built-in steps use it only
	// for that very task.
	facts *taskFacts
	// node, when set, is what the planner keeps of the node's allocatable
	// from one placement to the next (see nodeFacts); its books are Books.
	node *nodeFacts
}

// nodeFacts is what the built-in steps derive from a node's allocatable,
// worked out at most once per node for as long as a Planner sees the same
// books: gang after gang in a scheduling cycle, instead of once per gang
// and node. The allocatable of stored books never changes in place (a
// changed node is a new NodeBooks), so the books' address names the facts.
type nodeFacts struct {
	books *api.NodeBooks
	// allocPods is the allocatable "pods", valid once podsKnown.
	allocPods int64
	podsKnown bool
	devices   devState
	// static is the verdict of the filter chain's static prefix for the
	// tasks of constraint epoch `epoch` (see planner.epoch): it depends
	// on the books' labels, taints and flags, never on what is used.
	static Status
	epoch  uint64
}

// devState is what nodeFacts knows of its node's devices.
type devState uint8

const (
	devUnknown devState = iota
	devNone
	devSome
)

// pods returns the node's allocatable "pods".
func (f *nodeFacts) pods() int64 {
	if !f.podsKnown {
		f.allocPods, f.podsKnown = f.books.Node.Allocatable.Scalars[api.Pods], true
	}
	return f.allocPods
}

// hasDevices reports whether the node has some device (an extended
// resource, isDevice) with a positive allocatable.
func (f *nodeFacts) hasDevices() bool {
	if f.devices == devUnknown {
		f.devices = devNone
		if deviceIn(&f.books.Node.Allocatable) {
			f.devices = devSome
		}
	}
	return f.devices == devSome
}

// deviceIn reports whether r has a positive amount of some device.
func deviceIn(r *api.Resource) bool {
	for d, v := range r.Scalars {
		if v > 0 && isDevice(d) {
			return true
		}
	}
	return false
}

// hasDevices is nodeFacts.hasDevices for a view, cached when the planner
// keeps the node's facts.
func (n *NodeView) hasDevices() bool {
	if n.node != nil {
		return n.node.hasDevices()
	}
	return deviceIn(&n.Books.Node.Allocatable)
}

// taskFacts is what the built-in steps read of a task's request on every
// node, worked out once per task instead of once per node: the pods it
// asks for and whether it asks for any other scalar (device or not).
type taskFacts struct {
	task *api.Task
	// pods is the task's "pods" request; otherScalars whether the request
	// names a scalar besides "pods".
	pods         int64
	otherScalars bool
}

// set works out the facts of t.
func (f *taskFacts) set(t *api.Task) {
	f.task = t
	pods, asksPods := t.Request.Scalars[api.Pods]
	f.pods = pods
	f.otherScalars = len(t.Request.Scalars) > 1 || (len(t.Request.Scalars) == 1 && !asksPods)
}

// podsAndOthers returns t's "pods" request and whether it asks for any
// other scalar: from the planner's facts when the view has them for t.
func (n *NodeView) podsAndOthers(t *api.Task) (int64, bool) {
	if t == nil {
		return 0, false
	}
	if f := n.factsFor(t); f != nil {
		return f.pods, f.otherScalars
	}
	var f taskFacts
	f.set(t)
	return f.pods, f.otherScalars
}

// factsFor returns the planner's facts about t, or nil when the view has
// none for this task (a step called outside a plan, or for another task).
func (n *NodeView) factsFor(t *api.Task) *taskFacts {
	if n.facts != nil && n.facts.task == t {
		return n.facts
	}
	return nil
}

// tally is what a lazy plan keeps per node instead of a materialized Free:
// the free cpu, memory and pod count as plain numbers (computed once per
// call from the books, then decremented as tasks are assumed), and the
// other scalars the plan assumed onto the node (nil until a task asks for
// one). It costs no allocation for the nodes a plan does not pick.
type tally struct {
	cpu, memory, pods int64
	allocPods         int64
	assumed           map[string]int64
}

// init computes the tally from a node's books and the facts kept of them.
func (t *tally) init(b *api.NodeBooks, f *nodeFacts) {
	a, u := &b.Node.Allocatable, &b.Used
	t.cpu = clampedSub(a.MilliCPU, u.MilliCPU)
	t.memory = clampedSub(a.Memory, u.Memory)
	if f != nil {
		t.allocPods = f.pods()
	} else {
		t.allocPods = a.Scalars[api.Pods]
	}
	t.pods = clampedSub(t.allocPods, u.Scalars[api.Pods])
}

// take assumes req onto the node.
func (t *tally) take(req *api.Resource) {
	t.cpu = clampedSub(t.cpu, req.MilliCPU)
	t.memory = clampedSub(t.memory, req.Memory)
	for d, v := range req.Scalars {
		switch {
		case v <= 0:
		case d == api.Pods:
			t.pods = clampedSub(t.pods, v)
		default:
			if t.assumed == nil {
				t.assumed = make(map[string]int64, len(req.Scalars))
			}
			t.assumed[d] = saturatingAdd(t.assumed[d], v)
		}
	}
}

func (n *NodeView) freeCPU() int64 {
	if n.tally == nil {
		return n.Free.MilliCPU
	}
	return n.tally.cpu
}

func (n *NodeView) freeMemory() int64 {
	if n.tally == nil {
		return n.Free.Memory
	}
	return n.tally.memory
}

func (n *NodeView) freeScalar(d string) int64 {
	switch {
	case n.tally == nil:
		return n.Free.Scalars[d]
	case d == api.Pods:
		return n.tally.pods
	default:
		// Clamped subtraction makes idle − r1 − r2 equal idle − (r1 + r2),
		// so this agrees with a materialized Free.
		return clampedSub(clampedSub(n.Books.Node.Allocatable.Scalars[d], n.Books.Used.Scalars[d]), n.tally.assumed[d])
	}
}

// allocScalar returns one scalar of the node's allocatable.
func (n *NodeView) allocScalar(d string) int64 {
	if n.tally != nil && d == api.Pods {
		return n.tally.allocPods
	}
	return n.Books.Node.Allocatable.Scalars[d]
}

// idle returns allocatable − used for one node, each dimension clamped to
// 0..allocatable (a negative used counts as 0). The Scalars map is new, so
// the plan may change it in place; it never aliases the books.
func idle(b *api.NodeBooks) api.Resource {
	a, u := &b.Node.Allocatable, &b.Used
	out := api.Resource{
		MilliCPU: clampedSub(a.MilliCPU, u.MilliCPU),
		Memory:   clampedSub(a.Memory, u.Memory),
	}
	for d, v := range a.Scalars {
		if f := clampedSub(v, u.Scalars[d]); f > 0 {
			if out.Scalars == nil {
				out.Scalars = make(map[string]int64, len(a.Scalars))
			}
			out.Scalars[d] = f
		}
	}
	return out
}

// clampedSub returns max(a, 0) − max(b, 0), or 0 when that is negative; it
// cannot overflow.
func clampedSub(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if b >= a {
		return 0
	}
	return a - b
}

// saturatingAdd returns a + max(b, 0) for a ≥ 0, capped at MaxInt64.
func saturatingAdd(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// takeFree takes req off a materialized free in place (free belongs to
// the plan). A non-positive request takes nothing; a dimension never goes
// below zero, and zero scalars are dropped.
func takeFree(free *api.Resource, req *api.Resource) {
	free.MilliCPU = clampedSub(free.MilliCPU, req.MilliCPU)
	free.Memory = clampedSub(free.Memory, req.Memory)
	for d, v := range req.Scalars {
		if v <= 0 {
			continue
		}
		if f := clampedSub(free.Scalars[d], v); f > 0 {
			free.Scalars[d] = f
		} else {
			delete(free.Scalars, d)
		}
	}
}
