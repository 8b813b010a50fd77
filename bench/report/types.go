// Package report turns bench results into a Markdown report, a JSON file
// (machine-readable, for comparing runs) and SVG plots. Both bench modes
// (simulated and real) fill the same types.
package report

import (
	"slices"
	"time"
)

// Report is one bench invocation: every run compared in it, and the targets.
type Report struct {
	Title   string    `json:"title"`
	Command string    `json:"command"` // the command line that produced it
	Started time.Time `json:"started"`
	Machine string    `json:"machine"` // e.g. "linux/amd64, 2 CPUs, go1.26.0"; each run's Load says how busy it was
	Runs    []Run     `json:"runs"`
	Targets []Target  `json:"targets"`
	Notes   []string  `json:"notes,omitempty"`
}

// Target is one goal of the issue, judged against a run.
type Target struct {
	Name  string `json:"name"`  // e.g. "p99 submit→bind, churn 100k cores, 4 shards"
	Goal  string `json:"goal"`  // e.g. "≤ 1 s"
	Value string `json:"value"` // e.g. "0.42 s"
	Met   bool   `json:"met"`
	Why   string `json:"why,omitempty"` // when missed: why, and what would close it
}

// Run is one system on one scenario.
type Run struct {
	Name     string `json:"name"`     // unique in the report, e.g. "churn/100k/4 shards"
	Mode     string `json:"mode"`     // "sim" or "real"
	Scenario string `json:"scenario"` // "churn", "burst", "chaos", "stream", "backlog"
	Tier     string `json:"tier"`     // "10k", "100k", "1M" cores; real: "1000 nodes"
	System   string `json:"system"`   // "shardsched", "binder", "kube-scheduler", ...
	Shards   int    `json:"shards,omitempty"`

	Pods        int     `json:"pods"`        // pods bound
	Unbound     int     `json:"unbound"`     // pods still pending at the end
	WallSeconds float64 `json:"wallSeconds"` // wall time of the run
	// VirtualSeconds is the simulated time covered (sim mode only).
	VirtualSeconds float64 `json:"virtualSeconds,omitempty"`
	PodsPerSec     float64 `json:"podsPerSec"` // placements per wall second
	// BaselineAgain marks the baseline's second run of its mode, scenario
	// and tier, after the other systems: "vs baseline" is then against the
	// mean of the baseline's runs.
	BaselineAgain bool `json:"baselineAgain,omitempty"`
	// Latency is submit→bind in seconds (virtual in sim mode, wall in real mode).
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP99 float64 `json:"latencyP99"`
	LatencyMax float64 `json:"latencyMax"`
	// LatencyCDF is a sorted sample of at most 1,000 latencies (seconds),
	// evenly spaced over the full sorted set, for the CDF plot.
	LatencyCDF []float64 `json:"latencyCDF,omitempty"`

	CPUSeconds        float64 `json:"cpuSeconds"`        // process CPU time during the run
	CPUSecondsPer1000 float64 `json:"cpuSecondsPer1000"` // per 1,000 placements
	Utilization       float64 `json:"utilization"`       // mean CPU allocated / allocatable, 0..1
	// FairShareError is |actual share − deserved share| per leaf queue,
	// averaged over the run; MaxFairShareError is the largest of them.
	FairShareError    map[string]float64 `json:"fairShareError,omitempty"`
	MaxFairShareError float64            `json:"maxFairShareError"`
	APIWritesPerPod   float64            `json:"apiWritesPerPod"`
	StatusWrites      int64              `json:"statusWrites"`
	StatusConflicts   int64              `json:"statusConflicts"`
	PeakRSSMiB        float64            `json:"peakRSSMiB"`
	// RSSGrowthPct is the growth of RSS from the end of warm-up to the end
	// of the run, in percent.
	RSSGrowthPct float64 `json:"rssGrowthPct"`
	// AnonGrowthPct and FileGrowthPct split that growth, where the kernel
	// reports it: anonymous pages (the Go heap, stacks) and file pages
	// mapped in (an embedded etcd's database, for one), each in percent of
	// its own size at the end of warm-up.
	AnonGrowthPct float64 `json:"anonGrowthPct,omitempty"`
	FileGrowthPct float64 `json:"fileGrowthPct,omitempty"`
	// HeapGrowthPct and LiveHeapGrowthPct split the anonymous part further
	// (simulated runs, after a full collection): the Go heap's spans in use
	// and the live objects in them. Spans that grow while the live objects
	// do not are free slots between objects that outlived their
	// neighbours, not memory the process holds on to.
	HeapGrowthPct     float64 `json:"heapGrowthPct,omitempty"`
	LiveHeapGrowthPct float64 `json:"liveHeapGrowthPct,omitempty"`
	// ShardHeapMiB is the Go heap in use allocated by the shards' own code
	// at the end of the run, all shards together (simulated runs, where the
	// shards share one process: from its heap profile); ShardHeapGrowthPct
	// is its growth from the end of warm-up.
	ShardHeapMiB       float64 `json:"shardHeapMiB,omitempty"`
	ShardHeapGrowthPct float64 `json:"shardHeapGrowthPct,omitempty"`
	// ShardLiveHeapMiB is, per shard, the live Go heap that shard held at
	// the end of the run: measured by stopping the shards one after
	// another and reading the live heap after a full collection before and
	// after each (simulated runs that ask for it).
	ShardLiveHeapMiB []float64 `json:"shardLiveHeapMiB,omitempty"`

	// Invariants counts violations seen while the run went on; any
	// non-zero count fails the run. Keys: "quota_overruns",
	// "double_booked_nodes", "pods_bound_twice", "nodes_out_of_sync",
	// "admitted_jobs_lost".
	Invariants map[string]int64 `json:"invariants"`

	// Time series, sampled on the run's clock (virtual in sim mode).
	Throughput  []Point            `json:"throughput,omitempty"`  // pods bound per second
	UtilSeries  []Point            `json:"utilSeries,omitempty"`  // utilization 0..1
	RSSSeries   []Point            `json:"rssSeries,omitempty"`   // MiB
	QueueShares map[string][]Point `json:"queueShares,omitempty"` // leaf queue → share of allocated CPU, 0..1

	// Load is how busy the machine was around the run; nil when it was
	// not measured.
	Load *Load `json:"load,omitempty"`

	Chaos   *Chaos   `json:"chaos,omitempty"`
	Reclaim *Reclaim `json:"reclaim,omitempty"`
	// Restarts are a shard's restarts once the run's pods were bound, in
	// order, and ColdStart the baseline they are read against (another
	// scheduler started cold against the same cluster); real runs of shard
	// processes only.
	Restarts  []Restart `json:"restarts,omitempty"`
	ColdStart *Restart  `json:"coldStart,omitempty"`
	// VirtualCPU is set for a simulated run with a machine per shard
	// (Mode "sim-vcpu"); PodsPerSec is then per virtual second.
	VirtualCPU *VirtualCPU `json:"virtualCPU,omitempty"`
	Notes      []string    `json:"notes,omitempty"`
}

// VirtualCPU is how a run with a virtual CPU per shard spent its virtual
// time, each figure a percentage of it: the slowest shard's cycles and
// binds in each step, and the coordinator leader applying calls and
// committing them to etcd (one leader serves every shard, so its share
// grows with the shards' calls; at 100 % it sets the pace).
type VirtualCPU struct {
	ShardPct float64 `json:"shardPct"`
	// ShardCachePct is the part of ShardPct the slowest shards' caches
	// spent taking pod events before their cycles: the work every shard
	// repeats, which does not shrink as shards are added.
	ShardCachePct float64 `json:"shardCachePct,omitempty"`
	ApplyPct      float64 `json:"applyPct"`
	CommitPct     float64 `json:"commitPct"`
	// CoordLimitedPct is the share of steps in which the coordinator was
	// busy longer than every shard (it, not the shards, set the step).
	CoordLimitedPct float64 `json:"coordLimitedPct"`
}

// Load is the machine's 1-minute load average (runnable and waiting tasks,
// from /proc/loadavg) around one run, to read against the cores in
// Report.Machine: a load above the core count means the run's processes
// queued for CPU.
type Load struct {
	Before float64 `json:"before"` // just before the run's clock started
	// Mean and Max are over the readings taken while the run went on
	// (every second, and one at its end); Samples counts them.
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
	// CPUs is the number of CPUs the run's processes could use (kept with
	// each run: a report may merge runs from another machine's report).
	CPUs int `json:"cpus,omitempty"`
}

// Reclaim is what the reclaim scenario measured.
type Reclaim struct {
	At      float64 `json:"at"`      // seconds: when the lenders started asking
	Lenders int     `json:"lenders"` // lending leaf queues
	Asking  int     `json:"asking"`  // lenders that asked for anything
	// ReachP50/P99: seconds from At until a lender held its deserved share
	// (or all it asked, when less), over the lenders that asked; one that
	// never did counts as the rest of the run and in NeverReached.
	ReachP50     float64 `json:"reachP50"`
	ReachP99     float64 `json:"reachP99"`
	NeverReached int     `json:"neverReached"`
	// EvictedPods/CPU were evicted to give quota back; NeededCPU is the
	// least that had to be (what the lenders got, up to their shares,
	// beyond what their parents had free at At); EvictedPerNeeded their
	// ratio.
	EvictedPods      int64   `json:"evictedPods"`
	EvictedCPU       float64 `json:"evictedCPU"`
	NeededCPU        float64 `json:"neededCPU"`
	EvictedPerNeeded float64 `json:"evictedPerNeeded"`
	// Loops counts pods evicted from a queue that was not above its
	// deserved share (recounted from the pods): a reclaim reclaimed back.
	Loops int64 `json:"loops"`
	// LenderEvictions counts pods of lenders evicted: a lender that
	// borrowed beyond its share once it had it may lose that to another.
	LenderEvictions int64 `json:"lenderEvictions"`
}

// Restart is one start of a scheduler process against a cluster that
// already holds the run's pods: how long it took to be ready, and what it
// cost to get there. Seconds are from the process's start.
type Restart struct {
	What string `json:"what"` // e.g. "shard-0, restart 2", "kube-scheduler, cold start"
	// ReadySeconds is until its /readyz answered (its caches hold the
	// cluster); CPUSeconds and PeakRSSMiB are the process's by then.
	ReadySeconds float64 `json:"readySeconds"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	PeakRSSMiB   float64 `json:"peakRSSMiB"`
	// OwnedSeconds is until the restarted shard itself owned as many keys
	// (partitions and queues) as before it stopped, every key owned by
	// some shard; 0 when not measured (a baseline).
	OwnedSeconds float64 `json:"ownedSeconds,omitempty"`
	// Steps are its start-up steps as it reported them, e.g. "informers
	// 4.10 s, scheduling 0.01 s".
	Steps string `json:"steps,omitempty"`
	// Error, when set, says why the start was not timed (e.g. not ready
	// within the harness's bound); the run then failed.
	Error string `json:"error,omitempty"`
}

// Point is one sample of a time series.
type Point struct {
	T float64 `json:"t"` // seconds since the run started
	V float64 `json:"v"`
}

// Chaos is what the fault scenario measured.
type Chaos struct {
	Events []ChaosEvent `json:"events"`
	// AdmittedJobsLost counts jobs admitted before a fault whose
	// reservation or pods were lost (must be 0).
	AdmittedJobsLost int `json:"admittedJobsLost"`
}

// ChaosEvent is one fault and the recovery after it.
type ChaosEvent struct {
	At   float64 `json:"at"`   // seconds since the run started
	What string  `json:"what"` // "kill -9 shard-2", "kill coordinator leader", "restart etcd"
	// OwnersBackAfter is the time until every partition and queue had an
	// owner again; ThroughputBackAfter until pods/s was back to ≥ 90 % of
	// its level before the fault. Seconds; -1 if it never recovered.
	OwnersBackAfter     float64 `json:"ownersBackAfter"`
	ThroughputBackAfter float64 `json:"throughputBackAfter"`
}

// Failed reports whether any invariant of the run was broken, or a
// restart it timed did not come up (Restart.Error).
func (r Run) Failed() bool {
	for _, n := range r.Invariants {
		if n != 0 {
			return true
		}
	}
	if _, ok := NotTimed(r.Restarts); ok {
		return true
	}
	return r.Chaos != nil && r.Chaos.AdmittedJobsLost != 0
}

// NotTimed returns the first of starts that was not timed (its Error set).
func NotTimed(starts []Restart) (Restart, bool) {
	i := slices.IndexFunc(starts, func(rs Restart) bool { return rs.Error != "" })
	if i < 0 {
		return Restart{}, false
	}
	return starts[i], true
}
