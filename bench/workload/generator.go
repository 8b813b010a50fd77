package workload

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// JobSpec is one generated job.
type JobSpec struct {
	Seq   int
	At    time.Duration // arrival, from the start of the run
	Queue string
	// Kind is gang, elastic, deployment or batch (empty: gang).
	Kind string
	// Size is the pods the job creates over its life (a batch Job's
	// completions); Parallelism the pods it has at once (0: Size).
	Size, Parallelism int
	// Implicit: the pods name no PodGroup (the scheduler creates one with
	// minMember 1). Otherwise the explicit PodGroup has MinMember (0: Size)
	// and, when MinMilliCPU > 0, minResources of that much CPU.
	Implicit    bool
	MinMember   int
	MinMilliCPU int64
	CPU         int64 // milli-CPU per pod
	Memory      int64 // bytes per pod
	GPU         int64 // per pod
	Lifetime    time.Duration
}

// EffectiveKind is the job's kind, gang when unset.
func (j JobSpec) EffectiveKind() string {
	if j.Kind == "" {
		return KindGang
	}
	return j.Kind
}

// EffectiveParallelism is the number of pods the job has at once.
func (j JobSpec) EffectiveParallelism() int {
	if j.Parallelism <= 0 || j.Parallelism > j.Size {
		return j.Size
	}
	return j.Parallelism
}

// EffectiveMinMember is the explicit PodGroup's minMember (1 for an
// implicit group).
func (j JobSpec) EffectiveMinMember() int32 {
	switch {
	case j.Implicit:
		return 1
	case j.MinMember <= 0 || j.MinMember > j.Size:
		return int32(j.Size)
	}
	return int32(j.MinMember)
}

// Generator yields the workload's jobs in arrival order, deterministically
// for a seed.
type Generator struct {
	w        *Workload
	rng      *rand.Rand
	leaves   []LeafQueue
	leafCum  []int
	jobCum   []int
	cpuCum   []int
	rate     float64 // jobs per second
	next     time.Duration
	seq      int
	limit    int // burst: pods to submit; 0 = stream
	produced int
	// Reclaim phases: before lendAt jobs go to the borrowing leaves
	// (cumulative weights borrowCum), from it on to the lending ones.
	lendAt             time.Duration
	borrowCum, lendCum []int
	borrowers, lenders []LeafQueue
}

// NewGenerator returns a generator for tier t.
func NewGenerator(w *Workload, t Tier, seed uint64) *Generator {
	g := &Generator{w: w, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), leaves: w.Leaves()}
	sum := 0
	for _, l := range g.leaves {
		sum += int(l.Weight)
		g.leafCum = append(g.leafCum, sum)
	}
	sum, mean := 0, 0.0
	for _, j := range w.Jobs {
		sum += j.Weight
		g.jobCum = append(g.jobCum, sum)
	}
	for _, j := range w.Jobs {
		mean += j.meanSize() * float64(j.Weight) / float64(sum)
	}
	sum = 0
	for _, c := range w.Pod.CPU {
		sum += c.Weight
		g.cpuCum = append(g.cpuCum, sum)
	}
	g.rate = float64(t.PodsPerMinute) / 60 / mean
	if w.Burst {
		g.limit = t.Pods
	}
	if w.Reclaim != nil {
		g.lendAt = time.Duration(w.Reclaim.At * t.Minutes * float64(time.Minute))
		g.borrowers, g.lenders = w.ReclaimSides()
		for _, side := range []struct {
			leaves []LeafQueue
			cum    *[]int
		}{{g.borrowers, &g.borrowCum}, {g.lenders, &g.lendCum}} {
			sum := 0
			for _, l := range side.leaves {
				sum += int(l.Weight)
				*side.cum = append(*side.cum, sum)
			}
		}
	}
	return g
}

func pick(rng *rand.Rand, cum []int) int {
	x := rng.IntN(cum[len(cum)-1])
	return sort.SearchInts(cum, x+1)
}

// Next returns the next job if it arrives no later than until.
func (g *Generator) Next(until time.Duration) (JobSpec, bool) {
	if g.limit > 0 {
		if g.produced >= g.limit {
			return JobSpec{}, false
		}
	} else if g.next > until {
		return JobSpec{}, false
	}
	w := g.w
	k := w.Jobs[pick(g.rng, g.jobCum)]
	queue := g.leaves[pick(g.rng, g.leafCum)].Name
	if g.w.Reclaim != nil {
		if g.next < g.lendAt {
			queue = g.borrowers[pick(g.rng, g.borrowCum)].Name
		} else {
			queue = g.lenders[pick(g.rng, g.lendCum)].Name
		}
	}
	j := JobSpec{Seq: g.seq, At: g.next, Queue: queue, Kind: k.kind(), Size: k.Size,
		Parallelism: k.Parallelism, Implicit: k.implicit(), MinMember: k.MinMember, MinMilliCPU: k.MinMilliCPU}
	if k.MaxSize > k.Size {
		j.Size = k.Size + g.rng.IntN(k.MaxSize-k.Size+1)
	}
	switch {
	case j.Kind == KindElastic:
		j.MinMember = min(j.MinMember, j.Size-1)
	case j.Kind == KindBatch && j.MinMember == 0 && !j.Implicit:
		j.MinMember = j.Parallelism
	case j.Kind == KindDeployment && j.MinMember == 0 && !j.Implicit:
		j.MinMember = 1
	}
	if g.limit > 0 {
		// A burst submits what exists at t = 0 and nothing completes: a
		// batch Job past the backlog's end is cut to what it has at once.
		j.At = 0
		if left := g.limit - g.produced; j.EffectiveParallelism() > left {
			j.Size, j.Parallelism = left, 0
			j.MinMember = min(j.MinMember, left)
		}
	}
	cpu := w.Pod.CPU[pick(g.rng, g.cpuCum)].Value
	if len(k.CPU) > 0 {
		cpu = k.CPU[g.rng.IntN(len(k.CPU))]
	}
	j.CPU = cpu * 1000
	j.Memory = cpu * w.Pod.MemoryGiPerCPU << 30
	if w.Node.GPUs > 0 && w.Node.GPUEvery > 0 && g.rng.Float64() < w.Pod.GPUJobFraction {
		j.GPU = 1
	}
	life := w.Lifetime.MeanSeconds * (1 + w.Lifetime.Jitter*(2*g.rng.Float64()-1))
	if k.LifetimeScale > 0 {
		life *= k.LifetimeScale
	}
	j.Lifetime = time.Duration(life * float64(time.Second))
	g.seq++
	if g.limit > 0 {
		g.produced += j.EffectiveParallelism()
	} else {
		g.produced += j.Size
	}
	if g.limit == 0 {
		// Poisson arrivals.
		gap := -math.Log(1-g.rng.Float64()) / g.rate
		g.next += time.Duration(gap * float64(time.Second))
	}
	return j, true
}
