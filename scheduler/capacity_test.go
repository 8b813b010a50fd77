package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// walkCapacity is the capacity as if nothing were kept between sums: every
// node not held (Scheduler.unheld) read from its books now. The kept
// figures must always sum to it; what each figure holds is checked by
// TestCapacityEveryFigure.
func walkCapacity(s *Scheduler) wire.Capacity {
	nodes := s.unheld(s.snap.Nodes())
	figs := make([]nodeFig, len(nodes))
	for i, b := range nodes {
		figs[i] = figOf(b)
	}
	return sumFigs(nodes, figs, nil)
}

// Each of the thirteen figures of the capacity, against the cluster: a
// GPU node partly used, a node without GPUs, a cordoned GPU node and a
// node held for a starving gang (neither counted).
func TestCapacityEveryFigure(t *testing.T) {
	r := newRig(t, "shard-o")
	node := func(name string, cpu, mem, gpus int64, cordoned bool) {
		sc := map[string]int64{api.Pods: 110}
		if gpus > 0 {
			sc[gpuResource] = gpus
		}
		r.c.AddOrUpdateNode(api.Node{Name: name, UID: name, Unschedulable: cordoned, Allocatable: api.NewResource(cpu*1000, mem*gi, sc)})
	}
	node("gpu", 8, 64, 4, false)
	node("plain", 16, 32, 0, false)
	node("cordoned", 64, 512, 8, true)
	node("held", 96, 1024, 16, false)
	r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "p", UID: "p", Job: "other", NodeName: "gpu", Phase: api.TaskRunning,
		Request: api.NewResource(2000, 8*gi, map[string]int64{api.Pods: 1, gpuResource: 1}), SchedulerName: "volcano"})
	r.c.UpdateSnapshot(r.s.snap)
	r.s.held.byNode = map[string]string{"held": "starving"}
	want := wire.Capacity{Nodes: 2,
		FreeMilliCPU: 22000, FreeMemory: 88 * gi, FreeGPU: 3,
		LargestCPU: 16000, LargestMemory: 56 * gi, LargestFreeGPU: 3,
		AllocMilliCPU: 24000, AllocMemory: 96 * gi, AllocGPU: 4,
		LargestAllocCPU: 16000, LargestAllocMem: 64 * gi, LargestAllocGPU: 4}
	if got := r.s.capacity(); got != want {
		t.Fatalf("capacity %+v, want %+v", got, want)
	}
}

// A gang placed by a cycle is in the capacity summed right after it, before
// the next refresh: placement books the snapshot's copy of its node in
// place (the same pointer), and the node is read again.
func TestCapacityCountsWhatTheCycleBooked(t *testing.T) {
	r := newRig(t, "shard-o")
	r.node("a", 8)
	r.node("b", 8)
	r.c.UpdateSnapshot(r.s.snap)
	if c := r.s.capacity(); c.FreeMilliCPU != 16000 || c.LargestCPU != 8000 {
		t.Fatalf("before: %+v, want 16 CPU free, 8 on the largest", c)
	}
	r.gang("g", 1, 3)
	r.advance(r.s.cfg.CycleInterval)
	r.s.Cycle(context.Background())
	booked := 0
	for _, b := range r.s.snap.EachNode {
		booked += b.Tasks
	}
	if booked != 1 {
		t.Fatalf("%d tasks on the snapshot's nodes after the cycle, want the gang's 1", booked)
	}
	if c, want := r.s.capacity(), walkCapacity(r.s); c != want || c.FreeMilliCPU != 13000 || c.LargestCPU != 8000 {
		t.Fatalf("after the cycle: %+v, want 13 CPU free, 8 on the largest (summed from every node: %+v)", c, want)
	}
}

// The capacity a shard gossips, kept node by node between sums, equals
// the sum over every node's books after any sequence of what changes them:
// nodes added, removed, resized and cordoned, pods bound and gone (some
// overfilling a node, which puts it out of sync), gangs placed by a cycle
// (which books the snapshot's copies in place, after the refresh), nodes
// held for a starving gang, and refreshes with nothing new.
func TestCapacityKeptEqualsTheWalk(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := newRig(t, "shard-o")
			rng := rand.New(rand.NewPCG(seed, 7))
			ctx := context.Background()
			addNode := func(name string) {
				sc := map[string]int64{api.Pods: 110}
				if rng.IntN(3) == 0 {
					sc[gpuResource] = int64(1 + rng.IntN(8))
				}
				r.c.AddOrUpdateNode(api.Node{Name: name, UID: name, Unschedulable: rng.IntN(8) == 0,
					Allocatable: api.NewResource(int64(4+rng.IntN(60))*1000, int64(8+rng.IntN(248))*gi, sc)})
			}
			for i := range 30 {
				addNode(fmt.Sprintf("n%d", i))
			}
			var pods []string
			gangs, booked := 0, 0
			for step := range 400 {
				node := fmt.Sprintf("n%d", rng.IntN(40))
				switch op := rng.IntN(10); {
				case op == 0:
					addNode(node) // a new node, or one resized or cordoned
				case op == 1:
					r.c.DeleteNode(node, node)
				case op <= 5:
					uid := fmt.Sprintf("pod-%d", step)
					req := map[string]int64{api.Pods: 1}
					if rng.IntN(4) == 0 {
						req[gpuResource] = int64(1 + rng.IntN(4))
					}
					r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: uid, UID: uid, Job: "other", NodeName: node, Phase: api.TaskRunning,
						Request: api.NewResource(int64(1+rng.IntN(24))*1000, int64(1+rng.IntN(64))*gi, req), SchedulerName: "volcano"})
					pods = append(pods, uid)
				case op == 6 && len(pods) > 0:
					i := rng.IntN(len(pods))
					r.c.DeleteTask(pods[i])
					pods = append(pods[:i], pods[i+1:]...)
				case op == 7:
					gangs++
					r.gang(fmt.Sprintf("g%d", gangs), 1+rng.IntN(4), int64(1+rng.IntN(8)))
				}
				if rng.IntN(3) == 0 {
					r.advance(r.s.cfg.CycleInterval)
					r.s.Cycle(ctx) // placement books the snapshot after its refresh
					for _, b := range r.s.snap.EachNode {
						if r.s.snap.Booked(b) {
							booked++
						}
					}
				} else if rng.IntN(2) == 0 {
					r.c.UpdateSnapshot(r.s.snap)
				}
				if rng.IntN(5) == 0 && r.s.snap.NumNodes() > 0 {
					// Nodes held for a starving gang are not gossiped.
					saved := r.s.held.byNode
					r.s.held.byNode = map[string]string{}
					for i, b := range r.s.snap.EachNode {
						if i%3 == 0 {
							r.s.held.byNode[b.Node.Name] = "starving"
						}
					}
					got, want := r.s.capacity(), walkCapacity(r.s)
					r.s.held.byNode = saved
					if got != want {
						t.Fatalf("step %d, with nodes held: kept capacity %+v, summed from every node %+v", step, got, want)
					}
				}
				if got, want := r.s.capacity(), walkCapacity(r.s); got != want {
					t.Fatalf("step %d: kept capacity %+v, summed from every node %+v", step, got, want)
				}
			}
			if booked == 0 {
				t.Fatal("no cycle booked a node in 400 steps: the books placement changes in place were not exercised")
			}
		})
	}
}
