package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/wire"
)

// BenchmarkSteadyCycle is one scheduling cycle of a shard owning 1,000
// nodes with 100 running jobs of 100 bound pods each and nothing to place:
// the cost every cycle pays (50 a second at the default interval) before
// any work arrives.
func BenchmarkSteadyCycle(b *testing.B) {
	r := newRig(b, "shard-o")
	for i := 0; i < 1000; i++ {
		r.node(fmt.Sprintf("n%d", i), 64)
	}
	for j := 0; j < 100; j++ {
		uid := fmt.Sprintf("job-%d", j)
		r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: "q", MinMember: 1, Phase: api.JobRunning})
		for k := 0; k < 100; k++ {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, k), UID: fmt.Sprintf("%s-%d", uid, k), Job: uid,
				Request: api.NewResource(1000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskRunning, SchedulerName: "volcano",
				NodeName: fmt.Sprintf("n%d", (j*100+k)%1000)})
		}
	}
	ctx := context.Background()
	r.s.Cycle(ctx)
	b.ReportAllocs()
	for b.Loop() {
		r.s.Cycle(ctx)
	}
}

// BenchmarkCycleForeignJobs is one cycle of a shard that holds one queue
// of 20 running jobs while the cluster has 5,000 more running jobs (4 pods
// each) in a queue another shard holds: with N shards most of the jobs every
// snapshot holds are other shards' to work on, and what a cycle spends on
// them is spent again by every shard. The clock moves on by the status
// interval each cycle, so that every cycle also writes queue status.
func BenchmarkCycleForeignJobs(b *testing.B) {
	r := newRig(b, "shard-o", wire.QueueKey("other"))
	for i := 0; i < 100; i++ {
		r.node(fmt.Sprintf("n%d", i), 64)
	}
	job := func(queue, uid string, tasks int) {
		r.c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: uid, UID: uid, Queue: queue, MinMember: 1, Phase: api.JobRunning})
		for k := 0; k < tasks; k++ {
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", uid, k), UID: fmt.Sprintf("%s-%d", uid, k), Job: uid,
				Request: api.NewResource(100, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskRunning, SchedulerName: "volcano",
				NodeName: fmt.Sprintf("far-%d", k)})
		}
	}
	for j := 0; j < 20; j++ {
		job("q", fmt.Sprintf("own-%d", j), 4)
	}
	for j := 0; j < 5000; j++ {
		job("other", fmt.Sprintf("foreign-%d", j), 4)
	}
	ctx := context.Background()
	r.s.Cycle(ctx)
	b.ReportAllocs()
	for b.Loop() {
		r.advance(statusEvery)
		r.s.Cycle(ctx)
	}
}

// BenchmarkCycleManyJobs is one cycle of a shard that holds every queue of
// a cluster with 1,500 admitted gangs (10 bound pods each) over 50 queues
// and 500 gangs of 8 of which 4 pods exist so far, nothing to place: as a
// stream of jobs builds up, every cycle goes over all of them (admission's
// order, the queues' shares, status), 50 times a second. Namespaces are as
// long as a real run's.
func BenchmarkCycleManyJobs(b *testing.B) {
	r := newRig(b, "shard-o")
	for i := 0; i < 2000; i++ {
		r.node(fmt.Sprintf("n%d", i), 64)
	}
	const ns = "bench-2-stream-shardsched-proc-1"
	job := func(uid string, q int, minMember, tasks int) {
		r.c.AddOrUpdateJob(api.Job{Namespace: ns, Name: uid, UID: uid, Queue: fmt.Sprintf("leaf-%d", q), MinMember: int32(minMember), Phase: api.JobPending})
		for k := 0; k < tasks; k++ {
			t := api.Task{Namespace: ns, Name: fmt.Sprintf("%s-%d", uid, k), UID: fmt.Sprintf("%s-%d", uid, k), Job: uid,
				Request: api.NewResource(1000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano"}
			r.claims.mu.Lock()
			r.claims.jobOf[t.UID] = uid
			r.claims.mu.Unlock()
			r.c.AddOrUpdateTask(t)
		}
	}
	for j := 0; j < 1500; j++ {
		job(fmt.Sprintf("gang-%d", j), j%50, 10, 10)
	}
	ctx := context.Background()
	for range 20 {
		r.s.Cycle(ctx)
		r.advance(DefaultConfig().CycleInterval)
	}
	r.waitBinds(b, 30*time.Second)
	if got := r.s.Stats().Binds; got != 15000 {
		b.Fatalf("%d of 15000 pods bound before the benchmark", got)
	}
	for j := 0; j < 500; j++ {
		job(fmt.Sprintf("later-%d", j), j%50, 8, 4)
	}
	r.s.Cycle(ctx)
	b.ReportAllocs()
	for b.Loop() {
		r.advance(DefaultConfig().CycleInterval)
		r.s.Cycle(ctx)
	}
}

// BenchmarkCapacity is one capacity sum (what a shard gossips) on a shard
// of 5,000 nodes, a fifth of them with GPUs, with what comes before it:
// 5 pods bound on 5 nodes and the snapshot refreshed. publishCapacity sums
// at most every quarter CapacityInterval.
func BenchmarkCapacity(b *testing.B) {
	r := newRig(b, "shard-o")
	const nodes = 5000
	for i := range nodes {
		sc := map[string]int64{api.Pods: 110}
		if i%5 == 0 {
			sc[gpuResource] = 8
		}
		r.c.AddOrUpdateNode(api.Node{Name: fmt.Sprintf("n%d", i), UID: fmt.Sprintf("n%d", i), Allocatable: api.NewResource(64000, 256*gi, sc)})
	}
	ctx := context.Background()
	r.s.Cycle(ctx)
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		for range 5 {
			k++
			uid := fmt.Sprintf("p%d", k)
			r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: uid, UID: uid, Job: "other", NodeName: fmt.Sprintf("n%d", (k*7919)%nodes),
				Phase: api.TaskRunning, Request: api.NewResource(1, 1, map[string]int64{api.Pods: 1}), SchedulerName: "volcano"})
		}
		r.c.UpdateSnapshot(r.s.snap)
		_ = r.s.capacity()
	}
}

// BenchmarkIdleCycle is one cycle of a shard owning 5,000 nodes and
// holding all 50 queues, with 1,500 PodGroups whose pods do not exist yet
// (minMember 8, no minResources): nothing to admit or place, what an idle
// shard pays every cycle (10 times a second by default) while a
// workload's groups wait for their pods.
func BenchmarkIdleCycle(b *testing.B) {
	r := newRig(b, "shard-o")
	for i := 0; i < 5000; i++ {
		r.node(fmt.Sprintf("n%d", i), 64)
	}
	const ns = "bench-2-stream-shardsched-proc-1"
	for j := 0; j < 1500; j++ {
		uid := fmt.Sprintf("gang-%d", j)
		r.c.AddOrUpdateJob(api.Job{Namespace: ns, Name: uid, UID: uid, Queue: fmt.Sprintf("leaf-%d", j%50), MinMember: 8, Phase: api.JobPending})
	}
	ctx := context.Background()
	r.s.Cycle(ctx)
	b.ReportAllocs()
	for b.Loop() {
		r.advance(DefaultConfig().CycleInterval)
		r.s.Cycle(ctx)
	}
}

// BenchmarkStreamCycle is real mode's stream at 1,000 nodes as one shard
// sees it, a cycle at a time: 100 PodGroups of minMember 1 (like
// Deployments) in one queue, 32 new pods a cycle spread over them (about
// 320 pods/s at the default interval), each cycle's binds then seen back
// by the cache as the informer would show them (the node set, then
// Running), and a group's oldest pod deleted once it has 100, so the
// cluster stays the same size. One op is one cycle and the 32 pods it
// places; ns/pod is the cycle's cost per pod placed.
func BenchmarkStreamCycle(b *testing.B) {
	r := newRig(b, "shard-o")
	for i := 0; i < 1000; i++ {
		r.node(fmt.Sprintf("n%d", i), 64)
	}
	const ns, groups, perGroup, perCycle = "bench-2-stream-shardsched-proc-1", 100, 100, 32
	for g := 0; g < groups; g++ {
		uid := fmt.Sprintf("job-%d", g)
		r.c.AddOrUpdateJob(api.Job{Namespace: ns, Name: uid, UID: uid, Queue: "q", MinMember: 1, Phase: api.JobPending})
	}
	ctx := context.Background()
	var made []api.Task // in creation order
	seen := 0           // binds already shown to the cache
	step := func() {
		for range perCycle {
			k := len(made)
			job := fmt.Sprintf("job-%d", k%groups)
			t := api.Task{Namespace: ns, Name: fmt.Sprintf("p-%d", k), UID: fmt.Sprintf("p-%d", k), Job: job,
				Request: api.NewResource(1000, 2*gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano"}
			made = append(made, t)
			r.c.AddOrUpdateTask(t)
			if old := k - groups*perGroup; old >= 0 {
				r.c.DeleteTask(made[old].UID)
			}
		}
		r.s.Cycle(ctx)
		r.waitBinds(b, 30*time.Second)
		for ; seen < len(made); seen++ {
			t := made[seen]
			node := r.binder.boundTo(t.UID)
			if node == "" {
				break // not placed yet: shown once it is
			}
			t.NodeName = node
			r.c.AddOrUpdateTask(t)
			t.Phase = api.TaskRunning
			r.c.AddOrUpdateTask(t)
		}
		r.advance(DefaultConfig().CycleInterval)
	}
	for range groups * perGroup / perCycle {
		step() // up to the steady size
	}
	if got, want := r.s.Stats().Binds, int64(groups*perGroup/perCycle*perCycle); got < want-perCycle {
		b.Fatalf("%d pods bound while filling, want about %d", got, want)
	}
	b.ReportAllocs()
	start, cpu0 := r.s.Stats().Binds, procstat.CPU()
	for b.Loop() {
		step()
	}
	placed, cpu := r.s.Stats().Binds-start, procstat.CPU()-cpu0
	if placed < int64(b.N*perCycle)-perCycle {
		b.Fatalf("%d pods placed in %d cycles of %d new pods", placed, b.N, perCycle)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(placed, 1)), "ns/pod")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(placed, 1)), "cpu-ns/pod")
}
