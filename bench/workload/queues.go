package workload

import (
	"fmt"

	"github.com/shardsched/shardsched/api"
)

// Leaves returns the leaf queue names with their parent and weight.
func (w *Workload) Leaves() []LeafQueue {
	var out []LeafQueue
	i := 0
	for p := 0; p < w.Queues.Parents; p++ {
		for l := 0; l < w.Queues.LeavesPerParent; l++ {
			out = append(out, LeafQueue{Name: fmt.Sprintf("q%d-%d", p, l), Parent: fmt.Sprintf("p%d", p),
				Weight: w.Queues.Weights[i%len(w.Queues.Weights)]})
			i++
		}
	}
	return out
}

// LeafQueue is one leaf of the generated tree.
type LeafQueue struct {
	Name, Parent string
	Weight       int32
}

// QueueSpecs builds root → parents → leaves for a cluster of t.Nodes nodes
// of the workload's shape: each parent may hold a fraction of the cluster's
// CPU; each leaf deserves its weight's share. Only t.Nodes is read, so a
// caller whose cluster differs from the tier's may set it.
func QueueSpecs(w *Workload, t Tier) []api.QueueSpec {
	total := int64(t.Nodes) * w.Node.CPU * 1000
	var out []api.QueueSpec
	leaves := w.Leaves()
	sumW := int64(0)
	for _, l := range leaves {
		sumW += int64(l.Weight)
	}
	for p := 0; p < w.Queues.Parents; p++ {
		capCPU := int64(float64(total) * w.Queues.ParentCapabilityFraction)
		lim, _ := api.NewLimit(map[string]int64{api.CPU: capCPU})
		out = append(out, api.QueueSpec{Name: fmt.Sprintf("p%d", p), Capability: lim, Weight: 1})
	}
	for _, l := range leaves {
		out = append(out, api.QueueSpec{Name: l.Name, Parent: l.Parent, Weight: l.Weight,
			Deserved: api.NewResource(total*int64(l.Weight)/sumW, 0, nil)})
	}
	return out
}

// ReclaimSides splits the leaves: in each parent, even-numbered leaves
// borrow and odd-numbered ones lend.
func (w *Workload) ReclaimSides() (borrowers, lenders []LeafQueue) {
	for i, l := range w.Leaves() {
		if i%w.Queues.LeavesPerParent%2 == 0 {
			borrowers = append(borrowers, l)
		} else {
			lenders = append(lenders, l)
		}
	}
	return borrowers, lenders
}
