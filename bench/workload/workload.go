// Package workload is the declarative workload file format of the bench
// harness (the files themselves are in bench/workloads): the cluster's node
// shape and tiers, the queue tree, the job mix, pod sizes and lifetimes,
// node events and the reclaim phase; the validation of a file; the queue
// tree it declares; and the Generator, which turns a file and a tier into
// jobs in arrival order, deterministically for a seed. Both bench modes read
// it: the simulated one (bench/sim) and the real one (bench/realbench).
package workload

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"sigs.k8s.io/yaml"
)

// Workload is a declarative workload file (bench/workloads/*.yaml).
type Workload struct {
	Name  string          `json:"name"`
	Tiers map[string]Tier `json:"tiers"`
	Node  struct {
		CPU      int64 `json:"cpu"`
		MemoryGi int64 `json:"memoryGi"`
		GPUs     int64 `json:"gpus"`
		GPUEvery int   `json:"gpuEvery"`
		// GPUPool, when set, names the GPU nodes "<pool>-<index>" and
		// makes them one node pool (the shards' --node-pools): one shard
		// owns them all, as an operator of an ML cluster would configure
		// it so that a gang as large as the pool fits. The simulator
		// honours it; realbench's kwok nodes do not.
		GPUPool string `json:"gpuPool"`
	} `json:"node"`
	Queues struct {
		Parents                  int     `json:"parents"`
		LeavesPerParent          int     `json:"leavesPerParent"`
		Weights                  []int32 `json:"weights"`
		ParentCapabilityFraction float64 `json:"parentCapabilityFraction"`
	} `json:"queues"`
	Jobs []JobKind `json:"jobs"`
	Pod  struct {
		CPU []struct {
			Value  int64 `json:"value"`
			Weight int   `json:"weight"`
		} `json:"cpu"`
		MemoryGiPerCPU int64   `json:"memoryGiPerCPU"`
		GPUJobFraction float64 `json:"gpuJobFraction"`
	} `json:"pod"`
	Lifetime struct {
		MeanSeconds float64 `json:"meanSeconds"`
		Jitter      float64 `json:"jitter"`
	} `json:"lifetime"`
	Events []NodeEvent `json:"events"`
	// Burst submits Tier.Pods at t = 0 instead of a stream.
	Burst bool `json:"burst"`
	// Reclaim, when set, makes the run a reclaim scenario (see bench/sim's
	// reclaim.go): the shards may take quota back, and the arrivals are
	// phased.
	Reclaim *ReclaimPhase `json:"reclaim,omitempty"`
}

// Job kinds: what creates a job's pods and how its PodGroup says so.
const (
	// KindGang is a Volcano/Kubeflow job: an explicit PodGroup with
	// minMember = size, every pod created at once (size 1: a single pod).
	KindGang = "gang"
	// KindElastic is an explicit PodGroup with minMember < size, all pods
	// created at once, optionally with minResources below what its pods ask.
	KindElastic = "elastic"
	// KindDeployment is a ReplicaSet's pods: by default they name no
	// PodGroup, so the scheduler creates an implicit one (minMember 1).
	KindDeployment = "deployment"
	// KindBatch is a batch/v1 Job with completions (size) above
	// parallelism: parallelism pods at once, and the Job controller creates
	// the next pod when one succeeds, in the same PodGroup, until size pods
	// have succeeded.
	KindBatch = "batch"
)

// PodGroup styles of a job kind.
const (
	GroupExplicit = "explicit" // the user's PodGroup, named by the pods
	GroupImplicit = "implicit" // pods name none; the scheduler creates it
)

// JobKind is one entry of a workload's job mix.
type JobKind struct {
	Weight int `json:"weight"`
	// Kind is gang (the default), elastic, deployment or batch.
	Kind string `json:"kind,omitempty"`
	// Size is the pods of a gang or elastic job, the replicas of a
	// Deployment, the completions of a batch Job. With MaxSize, the size is
	// drawn uniformly from Size..MaxSize.
	Size    int `json:"size"`
	MaxSize int `json:"maxSize,omitempty"`
	// MinMember of an explicit PodGroup: elastic 1..size-1 (required);
	// batch 1..parallelism (default parallelism); deployment 1..size
	// (default 1). A gang's is its size; an implicit group's is 1.
	MinMember int `json:"minMember,omitempty"`
	// Parallelism of a batch Job: 1..size-1 pods at once (required).
	Parallelism int `json:"parallelism,omitempty"`
	// MinMilliCPU, when positive, is the explicit PodGroup's minResources
	// (cpu only, in milli-CPU): e.g. 1 for "cpu: 1m", far below its pods.
	MinMilliCPU int64 `json:"minMilliCPU,omitempty"`
	// PodGroup is explicit or implicit; default implicit for deployment and
	// batch (plain Kubernetes workloads), explicit for gang and elastic.
	PodGroup string `json:"podGroup,omitempty"`
	// CPU, when set, are the CPU choices (cores, equally likely) of this
	// kind's pods instead of pod.cpu.
	CPU []int64 `json:"cpu,omitempty"`
	// LifetimeScale multiplies lifetime.meanSeconds (default 1): long-lived
	// services above 1.
	LifetimeScale float64 `json:"lifetimeScale,omitempty"`
}

// kind returns the kind, gang when unset.
func (k JobKind) kind() string {
	if k.Kind == "" {
		return KindGang
	}
	return k.Kind
}

// implicit reports whether the kind's pods name no PodGroup.
func (k JobKind) implicit() bool {
	if k.PodGroup != "" {
		return k.PodGroup == GroupImplicit
	}
	return k.kind() == KindDeployment || k.kind() == KindBatch
}

// LargestPodCPU is the most cores any pod of the workload asks for.
func (w *Workload) LargestPodCPU() int64 {
	var most int64
	for _, c := range w.Pod.CPU {
		most = max(most, c.Value)
	}
	for _, k := range w.Jobs {
		for _, c := range k.CPU {
			most = max(most, c)
		}
	}
	return most
}

// meanSize is the mean number of pods a job of this kind creates over its life.
func (k JobKind) meanSize() float64 {
	if k.MaxSize > k.Size {
		return float64(k.Size+k.MaxSize) / 2
	}
	return float64(k.Size)
}

// validate reports the first bad field of the kind.
func (k JobKind) validate(nodeCPU int64) error {
	kind := k.kind()
	switch {
	case kind != KindGang && kind != KindElastic && kind != KindDeployment && kind != KindBatch:
		return fmt.Errorf("kind %q must be gang, elastic, deployment or batch", k.Kind)
	case k.Weight < 1 || k.Size < 1 || k.Size > 10000:
		return fmt.Errorf("weight %d must be ≥ 1 and size %d in 1..10000", k.Weight, k.Size)
	case k.MaxSize != 0 && (k.MaxSize < k.Size || k.MaxSize > 10000):
		return fmt.Errorf("maxSize %d must be size %d..10000 (or unset)", k.MaxSize, k.Size)
	case k.PodGroup != "" && k.PodGroup != GroupExplicit && k.PodGroup != GroupImplicit:
		return fmt.Errorf("podGroup %q must be explicit or implicit", k.PodGroup)
	case k.implicit() && (kind == KindGang || kind == KindElastic):
		return fmt.Errorf("podGroup: a %s job needs an explicit PodGroup (an implicit one has minMember 1)", kind)
	case k.implicit() && (k.MinMember != 0 || k.MinMilliCPU != 0):
		return fmt.Errorf("minMember %d, minMilliCPU %d: an implicit PodGroup sets neither", k.MinMember, k.MinMilliCPU)
	case k.MinMember < 0 || k.MinMilliCPU < 0 || k.Parallelism < 0 || k.LifetimeScale < 0:
		return fmt.Errorf("minMember %d, minMilliCPU %d, parallelism %d and lifetimeScale %v must not be negative", k.MinMember, k.MinMilliCPU, k.Parallelism, k.LifetimeScale)
	case kind == KindGang && k.MinMember != 0:
		return fmt.Errorf("minMember %d: a gang's minMember is its size (use kind elastic)", k.MinMember)
	case kind == KindElastic && (k.MinMember < 1 || k.MinMember >= k.Size):
		return fmt.Errorf("minMember %d: an elastic job needs 1..size-1 (size %d)", k.MinMember, k.Size)
	case kind == KindDeployment && k.MinMember > k.Size:
		return fmt.Errorf("minMember %d: above the replicas %d", k.MinMember, k.Size)
	case kind == KindBatch && (k.Parallelism < 1 || k.Parallelism >= k.Size):
		return fmt.Errorf("parallelism %d: a batch Job needs 1..size-1 (completions %d)", k.Parallelism, k.Size)
	case kind == KindBatch && k.MinMember > k.Parallelism:
		return fmt.Errorf("minMember %d: above the parallelism %d", k.MinMember, k.Parallelism)
	case kind != KindBatch && k.Parallelism != 0:
		return fmt.Errorf("parallelism %d: only for kind batch", k.Parallelism)
	}
	for i, c := range k.CPU {
		if c < 1 || c > nodeCPU {
			return fmt.Errorf("cpu[%d]: %d must be 1..node cpu %d", i, c, nodeCPU)
		}
	}
	return nil
}

// Tier sizes a workload: the cluster and the arrival rate.
type Tier struct {
	Nodes         int     `json:"nodes"`
	PodsPerMinute int     `json:"podsPerMinute"`
	Pods          int     `json:"pods"`
	Minutes       float64 `json:"minutes"`
}

// NodeEvent changes nodes mid-run: at a fraction of the run, a fraction of
// the nodes is drained (cordoned, pods evicted and re-created by their job),
// shrunk (allocatable CPU lowered to CPU), or added.
type NodeEvent struct {
	At    float64 `json:"at"`
	Kind  string  `json:"kind"`
	Nodes float64 `json:"nodes"`
	CPU   int64   `json:"cpu,omitempty"`
}

// ReclaimPhase is a workload's reclaim section: in every parent queue, half
// the leaves (the borrowers, see ReclaimSides) submit everything until At
// of the run, the other half (the lenders) from then on.
type ReclaimPhase struct {
	// At is the fraction of the run at which the lenders start (and the
	// borrowers stop) submitting.
	At float64 `json:"at"`
}

// Load reads and validates a workload file.
func Load(path string) (*Workload, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var w Workload
	if err := yaml.UnmarshalStrict(b, &w); err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	return &w, nil
}

// Validate reports the first bad field, naming it.
func (w *Workload) Validate() error {
	switch {
	case w.Name == "":
		return errors.New("name is empty")
	case len(w.Tiers) == 0:
		return errors.New("tiers: none")
	case w.Node.CPU < 1 || w.Node.MemoryGi < 1 || w.Node.GPUs < 0 || w.Node.GPUEvery < 0:
		return fmt.Errorf("node: cpu %d and memoryGi %d must be positive, gpus %d and gpuEvery %d not negative", w.Node.CPU, w.Node.MemoryGi, w.Node.GPUs, w.Node.GPUEvery)
	case w.Node.GPUPool != "" && !validPoolName(w.Node.GPUPool):
		return fmt.Errorf("node.gpuPool %q: must be lowercase letters, digits and '-', starting with a letter", w.Node.GPUPool)
	case w.Queues.Parents < 1 || w.Queues.LeavesPerParent < 1 || len(w.Queues.Weights) == 0:
		return fmt.Errorf("queues: parents %d and leavesPerParent %d must be positive, weights non-empty", w.Queues.Parents, w.Queues.LeavesPerParent)
	case w.Queues.ParentCapabilityFraction <= 0 || w.Queues.ParentCapabilityFraction > 1:
		return fmt.Errorf("queues.parentCapabilityFraction %v: must be in (0, 1]", w.Queues.ParentCapabilityFraction)
	case len(w.Jobs) == 0:
		return errors.New("jobs: none")
	case len(w.Pod.CPU) == 0 || w.Pod.MemoryGiPerCPU < 0 || w.Pod.GPUJobFraction < 0 || w.Pod.GPUJobFraction > 1:
		return errors.New("pod: cpu choices needed, memoryGiPerCPU ≥ 0, gpuJobFraction in [0, 1]")
	case w.Lifetime.MeanSeconds <= 0 || w.Lifetime.Jitter < 0 || w.Lifetime.Jitter >= 1:
		return fmt.Errorf("lifetime: meanSeconds %v must be positive, jitter %v in [0, 1)", w.Lifetime.MeanSeconds, w.Lifetime.Jitter)
	}
	for _, q := range w.Queues.Weights {
		if q < 1 {
			return fmt.Errorf("queues.weights: %d must be ≥ 1", q)
		}
	}
	for name, t := range w.Tiers {
		if t.Nodes < 1 || t.Nodes > 100000 || t.Minutes <= 0 || t.PodsPerMinute < 0 || t.Pods < 0 {
			return fmt.Errorf("tier %s: nodes %d must be 1..100000, minutes %v positive, pods %d and podsPerMinute %d not negative",
				name, t.Nodes, t.Minutes, t.Pods, t.PodsPerMinute)
		}
		if w.Burst && t.Pods < 1 {
			return fmt.Errorf("tier %s: a burst workload needs pods ≥ 1 (got %d)", name, t.Pods)
		}
		if !w.Burst && t.PodsPerMinute < 1 {
			return fmt.Errorf("tier %s: podsPerMinute %d must be ≥ 1", name, t.PodsPerMinute)
		}
	}
	for i, j := range w.Jobs {
		if err := j.validate(w.Node.CPU); err != nil {
			return fmt.Errorf("jobs[%d]: %w", i, err)
		}
	}
	for i, c := range w.Pod.CPU {
		if c.Value < 1 || c.Value > w.Node.CPU || c.Weight < 1 {
			return fmt.Errorf("pod.cpu[%d]: value %d must be 1..node cpu %d, weight ≥ 1", i, c.Value, w.Node.CPU)
		}
	}
	if r := w.Reclaim; r != nil && (r.At <= 0 || r.At >= 1 || w.Queues.LeavesPerParent < 2 || w.Burst) {
		return fmt.Errorf("reclaim: at %v must be in (0, 1), with at least 2 leaves per parent and a stream (not a burst)", r.At)
	}
	for i, e := range w.Events {
		switch {
		case e.At < 0 || e.At > 1 || e.Nodes <= 0 || e.Nodes > 1:
			return fmt.Errorf("events[%d]: at %v and nodes %v must be fractions in (0, 1]", i, e.At, e.Nodes)
		case e.Kind != "drain" && e.Kind != "shrink" && e.Kind != "add":
			return fmt.Errorf("events[%d]: kind %q must be drain, shrink or add", i, e.Kind)
		case e.Kind == "shrink" && (e.CPU < 1 || e.CPU >= w.Node.CPU):
			return fmt.Errorf("events[%d]: shrink cpu %d must be 1..%d", i, e.CPU, w.Node.CPU-1)
		}
	}
	return nil
}

// Tier returns the named tier.
func (w *Workload) Tier(name string) (Tier, error) {
	t, ok := w.Tiers[name]
	if !ok {
		names := make([]string, 0, len(w.Tiers))
		for n := range w.Tiers {
			names = append(names, n)
		}
		sort.Strings(names)
		return Tier{}, fmt.Errorf("workload %s has no tier %q (have %v)", w.Name, name, names)
	}
	return t, nil
}

// validPoolName reports whether s can prefix node names: lowercase letters,
// digits and '-', starting with a letter, at most 40 bytes.
func validPoolName(s string) bool {
	if len(s) == 0 || len(s) > 40 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
