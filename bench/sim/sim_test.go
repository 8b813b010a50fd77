package sim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/cache"
)

func loadChurn(t *testing.T) *workload.Workload {
	t.Helper()
	w, err := workload.Load("../workloads/churn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestFairSharesWaterFill(t *testing.T) {
	leaves := []workload.LeafQueue{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 1}}
	// c wants little: it gets its demand; a and b split the rest 1:2.
	got := fairShares(leaves, map[string]int64{"a": 1000, "b": 1000, "c": 10}, 310)
	if math.Abs(got["c"]-10) > 1e-6 || math.Abs(got["a"]-100) > 1e-6 || math.Abs(got["b"]-200) > 1e-6 {
		t.Errorf("got %v, want c=10 a=100 b=200", got)
	}
	// No contention: everyone gets its demand.
	got = fairShares(leaves, map[string]int64{"a": 5, "b": 5}, 1000)
	if got["a"] != 5 || got["b"] != 5 || got["c"] != 0 {
		t.Errorf("got %v, want demands", got)
	}
}

func newTestCluster(t *testing.T, nodes int) (*Cluster, *workload.Workload) {
	t.Helper()
	w := loadChurn(t)
	w.Node.GPUPool = "" // these tests name their nodes node-NNNNN (pools: pools_test.go)
	tree, err := api.BuildTree(workload.QueueSpecs(w, workload.Tier{Nodes: nodes}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(w, nodes, tree)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// The simulated API refuses a second bind and counts what the invariants
// are made of: overcommitted nodes, quota overruns and unfenced binds.
func TestClusterBindInvariants(t *testing.T) {
	c, _ := newTestCluster(t, 2)
	ca := cache.New(cache.Options{})
	c.Subscribe(ca)
	c.Submit(workload.JobSpec{Seq: 1, Queue: "q0-0", Size: 3, CPU: 40000, Memory: 1 << 30, Lifetime: time.Minute}, schedulerName)
	var tasks []api.Task
	for _, p := range c.pods {
		tasks = append(tasks, p.t)
	}
	if len(tasks) != 3 {
		t.Fatalf("%d pods, want 3", len(tasks))
	}
	if err := c.Bind(&tasks[0], "node-00000", "s", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Bind(&tasks[0], "node-00001", "s", true); err == nil {
		t.Fatal("second bind of the same pod accepted")
	}
	// 40 + 40 CPU on a 64-CPU node: accepted like the API server would,
	// counted as double booking; and without the partition held.
	if err := c.Bind(&tasks[1], "node-00000", "s", false); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Binds != 2 || st.BindRefused != 1 || st.PodsBoundTwice != 1 || st.DoubleBookedNodes != 1 || st.UnfencedBinds != 1 {
		t.Errorf("stats %+v", st)
	}
	// The cache saw the binds: the node is out of sync (F2), like a shard's.
	if out := ca.OutOfSync(); len(out) != 1 || out[0] != "node-00000" {
		t.Errorf("out of sync %v, want node-00000", out)
	}
	// p0 may hold 20 % of 2 × 64 CPU = 25.6 CPU: 40 bound is an overrun,
	// and so is 80.
	if st.QuotaOverruns != 2 {
		t.Errorf("%d quota overruns counted for 40 then 80 CPU under a 25.6 CPU parent, want 2", st.QuotaOverruns)
	}
}

// Pods succeed when their lifetime is up; finished jobs are deleted after
// the retention; drained pods are evicted and re-created pending.
func TestClusterLifecycle(t *testing.T) {
	c, _ := newTestCluster(t, 4)
	ca := cache.New(cache.Options{})
	c.Subscribe(ca)
	c.Submit(workload.JobSpec{Seq: 1, Queue: "q0-0", Size: 2, CPU: 1000, Memory: 1 << 30, Lifetime: 10 * time.Second}, schedulerName)
	c.Submit(workload.JobSpec{Seq: 2, Queue: "q0-1", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	for _, p := range c.pods {
		node := "node-00000"
		if p.job.spec.Seq == 2 {
			node = "node-00003"
		}
		t0 := p.t
		if err := c.Bind(&t0, node, "s", true); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(11*time.Second, 5*time.Second)
	if st := c.Stats(); st.Completed != 2 {
		t.Fatalf("completed %d, want 2", st.Completed)
	}
	if len(c.jobs) != 2 {
		t.Fatalf("job deleted before its retention")
	}
	c.advance(17*time.Second, 5*time.Second)
	if len(c.jobs) != 1 || len(c.pods) != 1 {
		t.Fatalf("after retention: %d jobs, %d pods; want 1, 1", len(c.jobs), len(c.pods))
	}
	c.Drain([]string{"node-00003"})
	if st := c.Stats(); st.Evicted != 1 {
		t.Fatalf("evicted %d, want 1", st.Evicted)
	}
	for _, p := range c.pods {
		if p.t.NodeName != "" {
			t.Errorf("pod %s still bound after drain", p.t.Name)
		}
	}
	if sm := c.sample(nil, false); sm.pending != 1 || sm.usedCPU != 0 {
		t.Errorf("after drain: %d pending, %d used; want 1, 0", sm.pending, sm.usedCPU)
	}
	if fits := c.Fits("node-00003"); !fits {
		t.Errorf("drained node's books do not fit")
	}
}

// The tail note attributes the pods that waited over 10 s to their kind
// and size of job, with the share of that class's pods; none without them.
func TestClusterTailNote(t *testing.T) {
	c, _ := newTestCluster(t, 4)
	c.Submit(workload.JobSpec{Seq: 1, Queue: "q0-0", Size: 2, CPU: 1000, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	bindSeq := func(seq int) {
		t.Helper()
		for _, p := range c.pods {
			if p.job.spec.Seq == seq && p.t.NodeName == "" {
				t0 := p.t
				if err := c.Bind(&t0, "node-00000", "s", true); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	bindSeq(1)
	if n := c.tailNote(); n != "" {
		t.Fatalf("pods bound at once, note %q", n)
	}
	c.Submit(workload.JobSpec{Seq: 2, Queue: "q0-1", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	c.setElapsed(90 * time.Second)
	bindSeq(2)
	n := c.tailNote()
	for _, want := range []string{"1 of 3 (33.33 %)", "size 1: 1 of 1 pods over 10 s (1 over 1 s, 1 over 60 s), longest 90 s",
		"The 1 pods that waited over 1 s, by the last reason their job was given: no reason given 100 %"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
	if strings.Contains(n, "size 2:") {
		t.Errorf("note %q names the job bound at once", n)
	}
	if n := c.quotaFreeNote(); n != "" {
		t.Errorf("no job was told to wait for quota, yet note %q", n)
	}
	// A job told to wait for quota counts among all pods, not the others.
	c.Submit(workload.JobSpec{Seq: 3, Queue: "q0-1", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	for _, p := range c.pods {
		if p.job.spec.Seq == 3 {
			(&Recorder{c: c}).Unschedulable(&api.Job{Name: p.job.name}, `waiting for quota: queue "p0" is short of cpu by 1`)
		}
	}
	c.setElapsed(200 * time.Second)
	bindSeq(3)
	n = c.quotaFreeNote()
	for _, want := range []string{"never told to wait for quota: 3 of 4 (75.0 %)", "longest 90 s", "p99 90.000 s"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
}

func TestWaitKind(t *testing.T) {
	for why, want := range map[string]string{
		"": "no reason given",
		`waiting for quota: queue "p2" is short of cpu by 723`:                                        "quota",
		"gang of 128 (minMember 128) does not fit: 0/1600 nodes are available: 1489 Insufficient cpu": "room",
		"0/1632 nodes are available: 1425 Insufficient cpu":                                           "room",
		"its PodGroup is Completed":                                                                   "other",
	} {
		if got := waitKind(why); got != want {
			t.Errorf("waitKind(%q) = %q, want %q", why, got, want)
		}
	}
}

// runShort runs 30 virtual seconds of churn at 10k cores with 2 shards
// (seed 3), each shard on a CPU of its own when vcpu.
func runShort(t *testing.T, vcpu bool) report.Run {
	t.Helper()
	if testing.Short() {
		t.Skip("starts shards and etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Workload: loadChurn(t), Tier: "10k", Shards: 2, Seed: 3, Minutes: 0.5, Partitions: 256, VirtualCPU: vcpu})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A short run on real shards, the real coordinator and an embedded etcd:
// pods are placed, and every invariant holds.
func TestRunSmall(t *testing.T) {
	r := runShort(t, false)
	// Seed 3 submits 433 pods in these 30 s (job sizes are heavy-tailed:
	// few 128-pod gangs this time), far from a full cluster: nearly all
	// must be bound.
	if r.Pods < 300 || r.Unbound > r.Pods/10 {
		t.Errorf("%d pods bound and %d left pending in 30 virtual seconds at 2,000 pods/min, want ≥ 300 bound and ≤ 10 %% pending", r.Pods, r.Unbound)
	}
	if r.Failed() {
		t.Errorf("invariants broken: %v", r.Invariants)
	}
	for _, k := range []string{"quota_overruns", "quota_overruns_sampled", "double_booked_nodes", "pods_bound_twice", "unfenced_binds", "nodes_out_of_sync"} {
		if _, ok := r.Invariants[k]; !ok {
			t.Errorf("invariant %s not reported", k)
		}
	}
	if r.LatencyP99 <= 0 || len(r.LatencyCDF) == 0 || len(r.Throughput) == 0 || r.Utilization <= 0 {
		t.Errorf("figures missing: p99 %v, cdf %d, throughput %d, util %v", r.LatencyP99, len(r.LatencyCDF), len(r.Throughput), r.Utilization)
	}
	// Both settled readings were taken (at the end of warm-up and at the
	// end), with the heap's live objects apart: their bytes, unlike pages,
	// are never the same twice in a run that allocates.
	if r.LiveHeapGrowthPct == 0 {
		t.Errorf("live heap growth missing (RSS growth %v %%, heap spans %v %%)", r.RSSGrowthPct, r.HeapGrowthPct)
	}
	t.Logf("%s: %d pods, p99 %.3f s virtual, %.0f pods/s wall, util %.2f", r.Name, r.Pods, r.LatencyP99, r.PodsPerSec, r.Utilization)
}

// With a virtual CPU per shard the shards cycle one after another, each
// step is charged what its slowest shard (or the coordinator) took, and
// throughput is per virtual second; the invariants hold as in any run.
func TestRunVirtualCPU(t *testing.T) {
	r := runShort(t, true)
	if r.Failed() {
		t.Errorf("invariants broken: %v", r.Invariants)
	}
	if r.Mode != ModeVirtualCPU || r.VirtualCPU == nil {
		t.Fatalf("mode %q, account %+v: want %q with its account", r.Mode, r.VirtualCPU, ModeVirtualCPU)
	}
	if r.Pods < 300 || r.VirtualSeconds < 30 {
		t.Errorf("%d pods bound over %.1f virtual seconds, want ≥ 300 over ≥ 30", r.Pods, r.VirtualSeconds)
	}
	if want := float64(r.Pods) / r.VirtualSeconds; math.Abs(r.PodsPerSec-want) > 1e-6*want {
		t.Errorf("pods/s %.3f, want per virtual second: %.3f", r.PodsPerSec, want)
	}
	v := r.VirtualCPU
	// Every step lasts at least as long as its slowest shard: that share
	// can reach 100 % of the virtual time, never exceed it.
	if v.ShardPct <= 0 || v.ShardPct > 100 || v.ApplyPct <= 0 || v.CommitPct <= 0 || v.CoordLimitedPct < 0 || v.CoordLimitedPct > 100 {
		t.Errorf("account %+v: want the shards and the coordinator busy, within 0..100 %%", *v)
	}
	// The caches took the pods' events (every shard's takes them all), a
	// part of the slowest shards' time, never more than it.
	if v.ShardCachePct <= 0 || v.ShardCachePct >= v.ShardPct {
		t.Errorf("account %+v: want the caches' part of the slowest shards' time above 0 and below all of it", *v)
	}
	t.Logf("%s: %d pods, p99 %.3f s virtual, %.0f pods per virtual s, %+v", r.Name, r.Pods, r.LatencyP99, r.PodsPerSec, *v)
}

// The latency histogram answers percentiles to the millisecond in constant
// memory, and reports the maximum for what overflows it.
func TestLatencyHist(t *testing.T) {
	var h latencyHist
	if h.quantile(0.99) != 0 || h.sample(10) != nil {
		t.Fatal("empty histogram must answer 0 and no sample")
	}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	h.add(5 * time.Minute) // beyond the last bucket
	if got := h.quantile(0.5); math.Abs(got-0.501) > 0.0015 {
		t.Errorf("p50 %v, want ≈ 0.501 s", got)
	}
	if got := h.quantile(0.99); math.Abs(got-0.991) > 0.0015 {
		t.Errorf("p99 %v, want ≈ 0.991 s", got)
	}
	if got := h.quantile(1); got != 300 {
		t.Errorf("max %v, want 300 s (the overflowing latency)", got)
	}
	s := h.sample(5)
	if len(s) != 5 || s[0] > s[4] || s[4] != 300 {
		t.Errorf("sample %v: want 5 sorted values ending at the maximum", s)
	}
}

// A pod evicted to give quota back is gone at once, its node's and queue's
// books with it, and its job re-creates it pending; evictions from lending
// queues are counted apart, and those from a queue not above its deserved
// share (what the reclaim rule forbids) are counted as loops.
func TestClusterEvictPod(t *testing.T) {
	c, _ := newTestCluster(t, 2)
	ca := cache.New(cache.Options{})
	c.Subscribe(ca)
	c.setLenders([]workload.LeafQueue{{Name: "q0-1", Parent: "p0"}})
	// q0-0's pod asks for more than its queue deserves; q0-1's for less.
	above := c.deserved["q0-0"] + 1000
	if above > 64000 {
		t.Fatalf("q0-0 deserves %d milli-CPU: too much for one node", above)
	}
	c.Submit(workload.JobSpec{Seq: 1, Queue: "q0-0", Size: 1, CPU: above, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	c.Submit(workload.JobSpec{Seq: 2, Queue: "q0-1", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Hour}, schedulerName)
	var uids []string
	for uid, p := range c.pods {
		t0 := p.t
		if err := c.Bind(&t0, "node-00000", "s", true); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, uid)
	}
	ev := &Evictor{c: c}
	for _, uid := range uids {
		tk, _ := ca.Task(uid)
		if err := ev.Evict(context.Background(), &tk, "Preempted", "test"); err != nil {
			t.Fatal(err)
		}
	}
	// Evicting a pod already gone changes nothing.
	tk := api.Task{UID: uids[0]}
	if err := ev.Evict(context.Background(), &tk, "Preempted", "again"); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.ReclaimEvicted != 2 || st.ReclaimEvictedCPU != above+1000 || st.LenderEvictions != 1 {
		t.Errorf("evicted %d pods, %d milli-CPU, %d from lenders; want 2, %d, 1", st.ReclaimEvicted, st.ReclaimEvictedCPU, st.LenderEvictions, above+1000)
	}
	// q0-0 was above its deserved share, q0-1 was not: one loop.
	if st.BelowShareEvictions != 1 {
		t.Errorf("%d evictions from queues not above their deserved share, want 1 (q0-1's)", st.BelowShareEvictions)
	}
	if sm := c.sample(nil, false); sm.pending != 2 || sm.usedCPU != 0 {
		t.Errorf("after evictions: %d pending, %d used; want the 2 pods re-created pending, 0 used", sm.pending, sm.usedCPU)
	}
	for _, uid := range uids {
		if _, ok := ca.Task(uid); ok {
			t.Errorf("evicted pod %s still in the cache", uid)
		}
	}
	if !c.Fits("node-00000") {
		t.Error("the node's books do not fit after the evictions")
	}
}

// The offered-load note divides what the jobs asked for (pods × CPU ×
// lifetime) by the cluster's cores × the run's length, per parent.
func TestOfferedNote(t *testing.T) {
	w := loadChurn(t)
	d := &driver{s: &sim{tier: workload.Tier{Nodes: 10}}, w: w, vt: 100 * time.Second, end: 100 * time.Second,
		offered: map[string]float64{"p0": 0.25 * 640 * 100, "p1": 0.5 * 640 * 100}}
	w.Node.CPU = 64
	got := d.offeredNote()
	for _, want := range []string{"asked for 75.0 % of the cluster's 640 cores", "p0 25.0 %, p1 50.0 %", "capped at 20 %"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	if (&driver{w: w}).offeredNote() != "" {
		t.Error("a run that offered nothing has an offered-load note")
	}
}

// The room note averages the samples taken after warm-up.
func TestRoomNote(t *testing.T) {
	sp := &sampler{freeSum: 2 * 10_000_000, emptySum: 2 * 2_500_000, slotSum: 2 * 1000, allocSum: 2 * 100_000_000, fragN: 2}
	got := sp.roomNote(8000)
	for _, want := range []string{"10.0 % of the schedulable CPU (10000 cores)", "25 % of it on nodes running nothing", "room for 1000 pods of 8 CPU"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	if (&sampler{}).roomNote(8000) != "" {
		t.Error("a note without samples")
	}
}

// A burst that fits the cluster, with 4 shards: every pod is bound. The
// second and later pods of Deployments, batch Jobs and elastic jobs whose
// gang was bound while their queue owner's nodes were full used to wait
// there, never offered to a shard with room and never told why (7 of the
// 2,000 pods were left pending here, 105 with 8 shards).
func TestBurstBindsEveryPodWithFourShards(t *testing.T) {
	if testing.Short() {
		t.Skip("starts shards and etcd")
	}
	w, err := workload.Load("../workloads/burst.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The run also measures each shard's heap at its end (ShardMemory),
	// which takes no second run: see the end of this test.
	r, err := Run(ctx, Config{Workload: w, Tier: "10k", Shards: 4, Seed: 1, ShardMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Unbound != 0 || r.Pods == 0 {
		t.Errorf("%d pods bound and %d left pending, want every pod of the burst bound; notes: %v", r.Pods, r.Unbound, r.Notes)
	}
	if r.Failed() {
		t.Errorf("invariants broken: %v", r.Invariants)
	}
	// Each shard's cache holds every one of the 2,000 pods, its nodes'
	// books and its snapshots: the heap must fall by well over 256 KiB as
	// each stops, or something still holds the stopped shard.
	if len(r.ShardLiveHeapMiB) != 4 {
		t.Fatalf("live heap of %d shards measured, want 4", len(r.ShardLiveHeapMiB))
	}
	t.Logf("live heap of each shard (MiB): %.2f", r.ShardLiveHeapMiB)
	for i, m := range r.ShardLiveHeapMiB {
		if m < 0.25 {
			t.Errorf("shard %d: the live heap fell by %.2f MiB when it stopped", i, m)
		}
	}
}

// While one cache is the only one updated at once, the others' updates
// wait and then arrive in the order they came: a pod submitted and bound
// reaches the held cache as bound, and its time is counted to that cache
// when it arrives, not before.
func TestClusterHoldsOtherCachesUpdates(t *testing.T) {
	c, _ := newTestCluster(t, 2)
	mine, other := cache.New(cache.Options{}), cache.New(cache.Options{})
	c.Subscribe(mine)
	c.Subscribe(other)
	c.TimeCaches()
	c.HoldOthers(mine)
	c.Submit(workload.JobSpec{Seq: 1, Queue: "q0-0", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Minute}, schedulerName)
	var task api.Task
	for _, p := range c.pods {
		task = p.t
	}
	if err := c.Bind(&task, "node-00000", "s", true); err != nil {
		t.Fatal(err)
	}
	if got, ok := mine.Task(task.UID); !ok || got.NodeName != "node-00000" {
		t.Fatalf("the cache updated at once has %+v (found %v), want the pod bound to node-00000", got, ok)
	}
	if _, ok := other.Task(task.UID); ok {
		t.Fatal("a held cache saw the pod before Release")
	}
	if c.CacheTime(other) != 0 {
		t.Errorf("a held cache was charged %v before its updates arrived", c.CacheTime(other))
	}
	c.Release()
	if got, ok := other.Task(task.UID); !ok || got.NodeName != "node-00000" {
		t.Fatalf("after Release the held cache has %+v (found %v), want the pod bound to node-00000", got, ok)
	}
	if c.CacheTime(other) <= 0 {
		t.Error("the held cache's updates were not timed when they arrived")
	}
	// Released, every cache is updated at once again.
	c.Submit(workload.JobSpec{Seq: 2, Queue: "q0-0", Size: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Minute}, schedulerName)
	if a, b := mine.Stats().Tasks, other.Stats().Tasks; a != 2 || b != 2 {
		t.Errorf("after Release: %d and %d tasks, want 2 in each", a, b)
	}
}
