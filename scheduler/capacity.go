package scheduler

import (
	"math"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/wire"
)

// What a shard gossips of its nodes (wire.Capacity) and how the hand-off
// reads another shard's: capacity sums this shard's free and allocatable
// resources, publishCapacity gossips them when they changed noticeably,
// and capacityFits and allocFits tell whether a shard's gossiped figures
// may hold a gang now, or could were its nodes empty.

// capacityFits reports whether a gossiped capacity may hold a gang: a
// necessary condition only (the per-dimension largest free amounts may be
// on different nodes); the claimer's own placement decides.
func capacityFits(c wire.Capacity, sum, largest api.Resource) bool {
	gpu := func(r api.Resource) int64 { return r.Get(gpuResource) }
	return c.Nodes > 0 &&
		sum.MilliCPU <= c.FreeMilliCPU && sum.Memory <= c.FreeMemory && gpu(sum) <= c.FreeGPU &&
		largest.MilliCPU <= c.LargestCPU && largest.Memory <= c.LargestMemory && gpu(largest) <= c.LargestFreeGPU
}

// allocFits reports whether a gossiped capacity could hold a gang were its
// nodes empty: the same necessary condition as capacityFits, on what the
// nodes hold rather than on what they have free.
func allocFits(c wire.Capacity, sum, largest api.Resource) bool {
	gpu := func(r api.Resource) int64 { return r.Get(gpuResource) }
	return c.Nodes > 0 &&
		sum.MilliCPU <= c.AllocMilliCPU && sum.Memory <= c.AllocMemory && gpu(sum) <= c.AllocGPU &&
		largest.MilliCPU <= c.LargestAllocCPU && largest.Memory <= c.LargestAllocMem && gpu(largest) <= c.LargestAllocGPU
}

// gpuResource is the scalar gossiped as GPU capacity.
const gpuResource = "nvidia.com/gpu"

// capacity summarizes the free resources of the nodes in the snapshot
// that placement may use (in sync, schedulable, not held for a starving
// gang). Each node's part comes from s.ho.figs, read again from its books
// only for the nodes that changed since the last sum.
func (s *Scheduler) capacity() wire.Capacity {
	nodes, figs := s.ho.figs.update(s.snap)
	var held map[*api.NodeBooks]bool
	if len(s.held.byNode) > 0 {
		held = make(map[*api.NodeBooks]bool, len(s.held.byNode))
		for name := range s.held.byNode {
			if b, ok := s.snap.Node(name); ok {
				held[b] = true
			}
		}
	}
	return sumFigs(nodes, figs, held)
}

// sumFigs sums the figures of nodes (figs, index for index) but those of
// the held books.
func sumFigs(nodes []*api.NodeBooks, figs []nodeFig, held map[*api.NodeBooks]bool) wire.Capacity {
	var c wire.Capacity
	for i := range figs {
		f := &figs[i]
		if f.skip || (held != nil && held[nodes[i]]) {
			continue
		}
		c.Nodes++
		c.FreeMilliCPU = satAdd(c.FreeMilliCPU, f.cpu)
		c.FreeMemory = satAdd(c.FreeMemory, f.mem)
		c.FreeGPU = satAdd(c.FreeGPU, f.gpu)
		c.LargestCPU = max(c.LargestCPU, f.cpu)
		c.LargestMemory = max(c.LargestMemory, f.mem)
		c.LargestFreeGPU = max(c.LargestFreeGPU, f.gpu)
		c.AllocMilliCPU = satAdd(c.AllocMilliCPU, max(f.allocCPU, 0))
		c.AllocMemory = satAdd(c.AllocMemory, max(f.allocMem, 0))
		c.AllocGPU = satAdd(c.AllocGPU, max(f.allocGPU, 0))
		c.LargestAllocCPU = max(c.LargestAllocCPU, f.allocCPU)
		c.LargestAllocMem = max(c.LargestAllocMem, f.allocMem)
		c.LargestAllocGPU = max(c.LargestAllocGPU, f.allocGPU)
	}
	return c
}

// satAdd adds two non-negative amounts, saturating at the int64 maximum.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// publishCapacity gossips this shard's capacity at most every
// CapacityInterval, and only when it changed noticeably (a node more or
// less, any GPU, or more than 1/64 of a CPU or memory figure) or, if it
// changed at all, every 10 intervals. Between publications it sums the
// capacity (capacity: a pass over every owned node's kept figures) at
// most every quarter interval, not every cycle: a change is gossiped at
// most a quarter interval later than the cycle that made it.
func (s *Scheduler) publishCapacity() {
	if s.deps.Peers == nil {
		return
	}
	now := s.cfg.Now()
	if !s.ho.capAt.IsZero() && (now.Sub(s.ho.capAt) < s.cfg.CapacityInterval || now.Sub(s.ho.capChecked) < s.cfg.CapacityInterval/4) {
		return
	}
	s.ho.capChecked = now
	c := s.capacity()
	old := s.ho.lastCap
	if c == old && !s.ho.capAt.IsZero() {
		return
	}
	if !s.ho.capAt.IsZero() && !noticeable(old, c) && now.Sub(s.ho.capAt) < 10*s.cfg.CapacityInterval {
		return
	}
	s.ho.capAt, s.ho.lastCap = now, c
	s.deps.Peers.SetCapacity(c)
}

func noticeable(a, b wire.Capacity) bool {
	near := func(x, y int64) bool {
		d := x - y
		if d < 0 {
			d = -d
		}
		return d <= max(x, y)/64
	}
	return a.Nodes != b.Nodes || a.FreeGPU != b.FreeGPU || a.LargestFreeGPU != b.LargestFreeGPU ||
		a.AllocGPU != b.AllocGPU || a.LargestAllocGPU != b.LargestAllocGPU ||
		!near(a.AllocMilliCPU, b.AllocMilliCPU) || !near(a.AllocMemory, b.AllocMemory) ||
		!near(a.LargestAllocCPU, b.LargestAllocCPU) || !near(a.LargestAllocMem, b.LargestAllocMem) ||
		!near(a.FreeMilliCPU, b.FreeMilliCPU) || !near(a.FreeMemory, b.FreeMemory) ||
		!near(a.LargestCPU, b.LargestCPU) || !near(a.LargestMemory, b.LargestMemory)
}

// nodeFig is one node's part of the capacity summary: what it has idle
// and allocatable of CPU, memory and GPUs; skip when it is out of sync or
// unschedulable (not counted).
type nodeFig struct {
	skip                         bool
	cpu, mem, gpu                int64
	allocCPU, allocMem, allocGPU int64
}

func figOf(b *api.NodeBooks) nodeFig {
	if b.OutOfSync || b.Node.Unschedulable {
		return nodeFig{skip: true}
	}
	a := &b.Node.Allocatable
	return nodeFig{cpu: b.IdleOf(api.CPU), mem: b.IdleOf(api.Memory), gpu: b.IdleOf(gpuResource),
		allocCPU: a.MilliCPU, allocMem: a.Memory, allocGPU: a.Get(gpuResource)}
}

// capFigs keeps each node's nodeFig between capacity sums (loop only). A
// snapshot keeps a node's books, the same pointer, from one refresh to the
// next while they are unchanged (cache.Snapshot.Book), so a node whose
// books are the ones of the last sum, at the same index in the list, and
// not booked in place since (Snapshot.Booked), has the same figures; only
// the others are read again. Reading every node's books at each sum was
// 10.6 % of a shard's CPU in a 60 s profile of a 5,000-node run (each
// read a cache miss, the GPU figures map lookups).
type capFigs struct {
	books []*api.NodeBooks
	figs  []nodeFig
}

// update brings the figures up to date with snap's nodes and returns
// them with the books they were read from, index for index: a node is
// read again when the books at its index are not the ones of the last
// sum (it changed, or nodes came or went before it in the list) or were
// booked in place.
func (cf *capFigs) update(snap *cache.Snapshot) ([]*api.NodeBooks, []nodeFig) {
	if n := snap.NumNodes(); n != len(cf.books) {
		cf.books, cf.figs = make([]*api.NodeBooks, n), make([]nodeFig, n)
	}
	for i, b := range snap.EachNode {
		if cf.books[i] != b || snap.Booked(b) {
			cf.books[i], cf.figs[i] = b, figOf(b)
		}
	}
	return cf.books, cf.figs
}
