package sim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/internal/cluster"
)

// sampler holds what the periodic samples accumulate over a run.
type sampler struct {
	sampleEvery time.Duration
	nextSample  time.Duration
	samples     int
	// warmAt is the end of the warm-up: the mean utilization (but for a
	// burst) and the RSS growth count from there.
	warmAt      time.Duration
	utilSum     float64
	utilN       int
	fairErr     map[string]float64 // leaf → sum of its fair-share errors
	fairN       int
	rss0        float64 // MiB before the shards started
	memWarm     memory  // at the end of the warm-up, settled (settledMemory)
	peakRSS     float64
	lastBinds   int64
	lastSampleT time.Duration
	// After warm-up: sums over the samples of the free CPU, the part of
	// it on empty nodes and the room for the largest pods (sample).
	freeSum, emptySum, slotSum float64
	allocSum                   float64
	fragN                      int
}

// takeSample, when a sample is due, checks the books (invariants.go) and
// samples throughput, utilization, queue shares, fair-share error and RSS;
// between samples the pending pods are unknown (-1), but for a burst,
// whose end depends on them.
func (d *driver) takeSample() {
	s, w, vt, sp, run := d.s, d.w, d.vt, &d.sampler, &d.run
	if vt < sp.nextSample {
		d.pending = -1 // unknown until the next sample
		if w.Burst {
			d.pending = s.cl.pending()
		}
		return
	}
	sp.nextSample += sp.sampleEvery
	d.checkBooks(sp.samples)
	sp.samples++
	sm := s.cl.sample(s.leaves, false)
	d.pending = sm.pending
	st := s.cl.Stats()
	dt := (vt - sp.lastSampleT).Seconds()
	if dt > 0 {
		run.Throughput = append(run.Throughput, report.Point{T: vt.Seconds(), V: float64(st.Binds-sp.lastBinds) / dt})
	}
	sp.lastBinds, sp.lastSampleT = st.Binds, vt
	if sm.allocCPU > 0 {
		u := float64(sm.usedCPU) / float64(sm.allocCPU)
		run.UtilSeries = append(run.UtilSeries, report.Point{T: vt.Seconds(), V: u})
		if vt >= sp.warmAt || w.Burst {
			sp.utilSum += u
			sp.utilN++
		}
		if vt >= sp.warmAt && !w.Burst {
			sp.freeSum += float64(sm.freeCPU)
			sp.emptySum += float64(sm.emptyCPU)
			sp.slotSum += float64(sm.bigSlots)
			sp.allocSum += float64(sm.allocCPU)
			sp.fragN++
		}
	}
	if d.rw != nil {
		d.rw.observe(vt, sm, s.leaves)
	}
	demand := map[string]int64{}
	for _, l := range s.leaves {
		demand[l.Name] = sm.leafUsed[l.Name] + sm.leafPending[l.Name]
		if sm.usedCPU > 0 {
			run.QueueShares[l.Name] = append(run.QueueShares[l.Name], report.Point{T: vt.Seconds(), V: float64(sm.leafUsed[l.Name]) / float64(sm.usedCPU)})
		}
	}
	if sm.allocCPU > 0 {
		fair := fairShares(s.leaves, demand, sm.allocCPU)
		for _, l := range s.leaves {
			sp.fairErr[l.Name] += math.Abs(float64(sm.leafUsed[l.Name])-fair[l.Name]) / float64(sm.allocCPU)
		}
		sp.fairN++
	}
	r := procstat.RSSMiB()
	sp.peakRSS = max(sp.peakRSS, r)
	run.RSSSeries = append(run.RSSSeries, report.Point{T: vt.Seconds(), V: r})
	if sp.memWarm.Total == 0 && vt >= sp.warmAt {
		sp.memWarm = d.settledMemory("warm")
	}
}

// memory is the process's resident memory, the Go heap in use and the
// part of it the shards' code allocated, in MiB, with what one shard's
// cache holds (every shard's holds every pod and job). Live is the bytes
// of the heap's objects after the collection, all of them reachable; Heap
// is the heap's spans in use, which also hold the free slots between live
// objects.
type memory struct {
	procstat.Resident
	Heap, Live, ShardHeap float64
	Cache                 cache.Stats
	// FileBefore is the file-backed part before etcd was settled (its
	// high-water mark included); Etcd is what settling it did.
	FileBefore float64
	Etcd       cluster.Settled
}

// settledMemory collects the garbage and returns the freed memory to the
// OS before it reads the resident memory, so that two readings compare what
// the process holds, not what the Go runtime had not yet given back. The
// embedded etcd is settled first (cluster.Etcd.Settle: history compacted to
// now, database defragmented), for the same reason: its memory-mapped file
// otherwise keeps the pages of its high-water mark, which depends on where
// in its compaction cycle the reading falls. The
// heap profile it takes for the shards' part is also written to
// <HeapProfile>-<which>.pb.gz when the run asks for it (a failure to write
// is reported on the progress stream and the run goes on).
func (d *driver) settledMemory(which string) memory {
	var m memory
	if r, err := procstat.ResidentMiB(); err == nil {
		m.FileBefore = r.File
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	settled, err := d.s.etcd.Settle(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(d.s.cfg.Progress, "sim: settling etcd before the %s reading: %v\n", which, err)
	}
	m.Etcd = settled
	debug.FreeOSMemory()
	r, err := procstat.ResidentMiB()
	if err != nil {
		r = procstat.Resident{Total: procstat.RSSMiB()}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.Resident, m.Heap, m.Live = r, float64(ms.HeapInuse)/(1<<20), float64(ms.HeapAlloc)/(1<<20)
	var prof bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&prof, 0); err == nil {
		m.ShardHeap, _ = shardHeapOf(prof.Bytes()) // 0 when it cannot be parsed
		d.writeHeap(which, prof.Bytes())
	}
	for _, p := range d.s.procs {
		if !p.dead {
			m.Cache = p.Cache.Stats()
			break
		}
	}
	return m
}

// String gives the figures as the run's notes print them.
func (m memory) String() string {
	return fmt.Sprintf("%.0f MiB (%.0f anonymous, of which Go heap in use %.0f, its live objects %.0f, %.0f of it allocated by the shards' code; %.0f file-backed, %.0f before etcd was settled, its database %.1f → %.1f MiB in %v; a shard's cache: %d tasks, %d pending, %d jobs)",
		m.Total, m.Anon, m.Heap, m.Live, m.ShardHeap, m.File, m.FileBefore, float64(m.Etcd.Before)/(1<<20), float64(m.Etcd.After)/(1<<20), m.Etcd.Took.Round(time.Millisecond), m.Cache.Tasks, m.Cache.Pending, m.Cache.Jobs)
}

// writeHeap writes prof to <HeapProfile>-<which>.pb.gz when the run asks
// for heap profiles.
func (d *driver) writeHeap(which string, prof []byte) {
	prefix := d.s.cfg.HeapProfile
	if prefix == "" {
		return
	}
	name := prefix + "-" + which + ".pb.gz"
	if err := os.WriteFile(name, prof, 0o644); err != nil {
		fmt.Fprintf(d.s.cfg.Progress, "sim: heap profile %s: %v\n", name, err)
	}
}

// roomNote says where the free CPU was after warm-up (mean of the
// samples): how much, how much of it on empty nodes, and how many of the
// workload's largest pods it could have taken; "" without samples.
func (sp *sampler) roomNote(bigPodCPU int64) string {
	if sp.fragN == 0 || sp.allocSum == 0 {
		return ""
	}
	n := float64(sp.fragN)
	emptyShare := 0.0
	if sp.freeSum > 0 {
		emptyShare = 100 * sp.emptySum / sp.freeSum
	}
	return fmt.Sprintf("free CPU after warm-up (mean of %d samples): %.1f %% of the schedulable CPU (%.0f cores), %.0f %% of it on nodes running nothing; room for %.0f pods of %d CPU, the largest size",
		sp.fragN, 100*sp.freeSum/sp.allocSum, sp.freeSum/n/1000, emptyShare, sp.slotSum/n, bigPodCPU/1000)
}

// sampleFigures fills the run's mean utilization, fair-share errors and
// RSS figures from the samples and the RSS at the end of the run.
func (d *driver) sampleFigures(end memory) {
	run, sp := &d.run, &d.sampler
	if sp.utilN > 0 {
		run.Utilization = sp.utilSum / float64(sp.utilN)
	}
	if sp.fairN > 0 {
		run.FairShareError = map[string]float64{}
		for q, e := range sp.fairErr {
			run.FairShareError[q] = e / float64(sp.fairN)
			run.MaxFairShareError = max(run.MaxFairShareError, e/float64(sp.fairN))
		}
	}
	run.PeakRSSMiB = sp.peakRSS
	run.ShardHeapMiB = end.ShardHeap
	if w := sp.memWarm; w.Total > 0 {
		run.RSSGrowthPct = growthPct(w.Total, end.Total)
		run.AnonGrowthPct = growthPct(w.Anon, end.Anon)
		run.HeapGrowthPct = growthPct(w.Heap, end.Heap)
		run.LiveHeapGrowthPct = growthPct(w.Live, end.Live)
		run.FileGrowthPct = growthPct(w.File, end.File)
		run.ShardHeapGrowthPct = growthPct(w.ShardHeap, end.ShardHeap)
	}
}

// growthPct is the growth from a to b in percent of a; 0 when either is
// unknown (0).
func growthPct(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return (b - a) / a * 100
}

// fairShares water-fills capacity (milli-CPU) over the leaves by weight,
// each capped at its demand: the allocation max-min fairness would give.
func fairShares(leaves []workload.LeafQueue, demand map[string]int64, capacity int64) map[string]float64 {
	out := map[string]float64{}
	active := map[string]bool{}
	for _, l := range leaves {
		if demand[l.Name] > 0 {
			active[l.Name] = true
		}
	}
	left := float64(capacity)
	for len(active) > 0 && left > 1e-6 {
		sumW := 0.0
		for _, l := range leaves {
			if active[l.Name] {
				sumW += float64(l.Weight)
			}
		}
		unit := left / sumW
		capped := false
		for _, l := range leaves {
			if !active[l.Name] {
				continue
			}
			want := float64(demand[l.Name]) - out[l.Name]
			if want <= unit*float64(l.Weight) {
				out[l.Name] += want
				left -= want
				delete(active, l.Name)
				capped = true
			}
		}
		if !capped {
			for _, l := range leaves {
				if active[l.Name] {
					out[l.Name] += unit * float64(l.Weight)
				}
			}
			left = 0
		}
	}
	return out
}
