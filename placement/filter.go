package placement

import "github.com/shardsched/shardsched/api"

// Filter is one feasibility step: may task t go onto node n?
//
// Contract: Filter is called concurrently from many goroutines (one per
// placement in flight) and must not block, do I/O or keep state between
// calls. It must not modify t or n, nor anything they point to. It must not
// panic: a nil t or n, nil maps and odd values are data, not bugs. It
// should not allocate on Success, since it runs once per node per task.
type Filter interface {
	// Name identifies the step in configs and traces.
	Name() string
	// Filter returns Success, or why the node is rejected.
	Filter(t *api.Task, n *NodeView) Status
}

// Reasons reported by the filters of this package. Insufficient
// resources are reported as "Insufficient <dimension>".
const (
	ReasonOutOfSync         = "node out of sync"
	ReasonNodeUnschedulable = "node(s) were unschedulable"
	ReasonNodeSelector      = "node(s) didn't match Pod's node affinity/selector"
	ReasonTooManyPods       = "Too many pods"
	ReasonNoNode            = "node(s) not found"

	reasonInsufficientCPU    = "Insufficient cpu"
	reasonInsufficientMemory = "Insufficient memory"
)

// Compile-time checks that every step implements its interface.
var (
	_ Filter = OutOfSync{}
	_ Filter = NodeUnschedulable{}
	_ Filter = NodeSelector{}
	_ Filter = RequiredAffinity{}
	_ Filter = Taints{}
	_ Filter = Resources{}
)

// OutOfSync rejects nodes whose books are out of sync (F2): they would go
// negative, so nothing about them can be trusted until the cache rebuilds
// them. PlaceGang applies this check even when a Config omits it.
type OutOfSync struct{}

// Name implements Filter.
func (OutOfSync) Name() string { return "OutOfSync" }

// Filter implements Filter.
func (OutOfSync) Filter(_ *api.Task, n *NodeView) Status {
	if n == nil || n.Books == nil {
		return rejectForGood(ReasonNoNode)
	}
	if n.Books.OutOfSync {
		return reject(ReasonOutOfSync)
	}
	return Status{}
}

// UnschedulableTaintKey is the taint Kubernetes associates with a cordoned
// node (spec.unschedulable); a task that tolerates it may still go there.
const UnschedulableTaintKey = "node.kubernetes.io/unschedulable"

// NodeUnschedulable rejects cordoned nodes (spec.unschedulable), unless the
// task tolerates the node.kubernetes.io/unschedulable:NoSchedule taint,
// as DaemonSet pods do.
type NodeUnschedulable struct{}

// Name implements Filter.
func (NodeUnschedulable) Name() string { return "NodeUnschedulable" }

// Filter implements Filter.
func (NodeUnschedulable) Filter(t *api.Task, n *NodeView) Status {
	if n == nil || n.Books == nil {
		return rejectForGood(ReasonNoNode)
	}
	if !n.Books.Node.Unschedulable {
		return Status{}
	}
	if t != nil && ToleratesCordon(t) {
		return Status{}
	}
	return rejectForGood(ReasonNodeUnschedulable)
}

// ToleratesCordon reports whether t tolerates the taint of a cordoned node
// (UnschedulableTaintKey:NoSchedule), so that NodeUnschedulable lets it go
// there.
func ToleratesCordon(t *api.Task) bool {
	cordon := api.Taint{Key: UnschedulableTaintKey, Effect: api.TaintNoSchedule}
	for i := range t.Tolerations {
		if Tolerates(&t.Tolerations[i], &cordon) {
			return true
		}
	}
	return false
}

// Resources rejects nodes whose Free cannot hold the task's request: the
// pod count (the "pods" scalar), CPU, memory and every other scalar such as
// nvidia.com/gpu. A scalar the task asks for and the node lacks never fits;
// a non-positive request always fits. The reason names the first short
// dimension in the order pods, cpu, memory, then scalars by name.
type Resources struct{}

// Name implements Filter.
func (Resources) Name() string { return "Resources" }

// Filter implements Filter.
func (Resources) Filter(t *api.Task, n *NodeView) Status {
	if n == nil {
		return rejectForGood(ReasonNoNode)
	}
	if t == nil {
		return Status{}
	}
	req := &t.Request
	pods, others := n.podsAndOthers(t)
	if pods > 0 && pods > n.freeScalar(api.Pods) {
		return reject(ReasonTooManyPods)
	}
	if req.MilliCPU > 0 && req.MilliCPU > n.freeCPU() {
		return reject(reasonInsufficientCPU)
	}
	if req.Memory > 0 && req.Memory > n.freeMemory() {
		return reject(reasonInsufficientMemory)
	}
	if !others {
		return Status{} // the common case: no map iteration
	}
	short := ""
	for d, v := range req.Scalars {
		if d == api.Pods || v <= 0 || v <= n.freeScalar(d) {
			continue
		}
		if short == "" || d < short { // deterministic despite map order
			short = d
		}
	}
	if short != "" {
		return reject("Insufficient " + short)
	}
	return Status{}
}
