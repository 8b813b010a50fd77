package scheduler

import (
	"math"

	"github.com/shardsched/shardsched/api"
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
// that placement may use (in sync, schedulable).
func (s *Scheduler) capacity() wire.Capacity {
	var c wire.Capacity
	for _, b := range s.unheld(s.snap.Nodes()) {
		if b.OutOfSync || b.Node.Unschedulable {
			continue
		}
		// Per dimension: no Resource built for every node every interval.
		cpu, mem, gpu := b.IdleOf(api.CPU), b.IdleOf(api.Memory), b.IdleOf(gpuResource)
		a := &b.Node.Allocatable
		c.Nodes++
		c.FreeMilliCPU = satAdd(c.FreeMilliCPU, cpu)
		c.FreeMemory = satAdd(c.FreeMemory, mem)
		c.FreeGPU = satAdd(c.FreeGPU, gpu)
		c.LargestCPU = max(c.LargestCPU, cpu)
		c.LargestMemory = max(c.LargestMemory, mem)
		c.LargestFreeGPU = max(c.LargestFreeGPU, gpu)
		c.AllocMilliCPU = satAdd(c.AllocMilliCPU, max(a.MilliCPU, 0))
		c.AllocMemory = satAdd(c.AllocMemory, max(a.Memory, 0))
		c.AllocGPU = satAdd(c.AllocGPU, max(a.Get(gpuResource), 0))
		c.LargestAllocCPU = max(c.LargestAllocCPU, a.MilliCPU)
		c.LargestAllocMem = max(c.LargestAllocMem, a.Memory)
		c.LargestAllocGPU = max(c.LargestAllocGPU, a.Get(gpuResource))
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
// capacity (a pass over every owned node) at most every quarter interval,
// not every cycle: a change is gossiped at most a quarter interval later
// than the cycle that made it.
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
