package sim

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardsched/shardsched/scheduler"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
)

// driver is one run on the virtual clock: the report it fills and what
// its steps need. The samples' accumulators (sample.go), the faults
// (faults.go) and the invariants' count (invariants.go) are kept here too,
// each used by its own file's methods.
type driver struct {
	s   *sim
	cfg Config
	w   *workload.Workload
	end time.Duration // virtual end of the run
	run report.Run

	gen    *workload.Generator
	events []workload.NodeEvent // node events not applied yet, by time
	step   time.Duration
	retain time.Duration
	vt     time.Duration // virtual time of the current step

	wallStart time.Time
	cpu0      time.Duration
	// pending is the cluster's pending pods at the last sample (-1 when
	// unknown; a burst counts them at every step).
	pending           int
	lastProgress      time.Time
	lastProgressBinds int64
	lastProgressAt    time.Duration
	stepsIdle         int       // burst: steps since the last bind
	lastBindWall      time.Time // burst: when the step that bound the last pod ended

	vcpu    vcpuAccount   // VirtualCPU only
	faults  []*fault      // chaos only
	sampler sampler       // the periodic samples
	rw      *reclaimWatch // reclaim scenario only
	// outOfSyncBad counts nodes_out_of_sync: out-of-sync nodes whose truth
	// fits, and books that drifted silently.
	outOfSyncBad int64
	// offered sums, per parent queue, what the jobs submitted ask for
	// over their lives: pods × CPU seconds × lifetime (not for a burst).
	offered map[string]float64
}

// newDriver names the run, prepares the job generator, the node events,
// the faults (chaos) and the reclaim watch, and starts the wall clock and
// the CPU count.
func (s *sim) newDriver(rss0 float64) *driver {
	cfg, w, tier := s.cfg, s.w, s.tier
	end := time.Duration(tier.Minutes * float64(time.Minute))
	d := &driver{s: s, cfg: cfg, w: w, end: end}
	d.gen = workload.NewGenerator(w, tier, cfg.Seed)
	scenario := w.Name
	if cfg.Chaos {
		scenario = "chaos"
	}
	d.run = report.Run{Name: runName(cfg, scenario), Mode: "sim", Scenario: scenario,
		Tier: cfg.Tier, System: "shardsched", Shards: cfg.Shards, Invariants: map[string]int64{}, QueueShares: map[string][]report.Point{}}
	if cfg.VirtualCPU {
		d.run.Mode = ModeVirtualCPU
	}
	if cfg.Chaos {
		d.faults = planFaults(end)
		d.run.Chaos = &report.Chaos{}
	}
	d.events = append([]workload.NodeEvent(nil), w.Events...)
	sort.Slice(d.events, func(i, j int) bool { return d.events[i].At < d.events[j].At })

	d.step = cfg.Step
	d.retain = 10 * time.Second
	d.sampler = sampler{sampleEvery: max(time.Second, end/300), warmAt: end / 3, fairErr: map[string]float64{}, rss0: rss0}
	d.wallStart = time.Now()
	d.cpu0 = procstat.CPU()
	d.lastProgress = time.Now()
	if w.Reclaim != nil {
		scenario = "reclaim"
		d.run.Scenario = scenario
		d.run.Name = runName(cfg, scenario)
		d.rw = newReclaimWatch(w, s.tree, end)
		_, lenders := w.ReclaimSides()
		s.cl.setLenders(lenders)
	}
	return d
}

// over reports whether the run has ended: past its virtual end or, for a
// burst, once the backlog is placed or nothing more gets placed.
func (d *driver) over() bool {
	if d.w.Burst {
		// Done when the backlog is placed, or when nothing more has
		// been placed for a while (what is left does not fit).
		// A while is 5 virtual seconds and 20 steps: a step with a
		// virtual CPU per shard may itself last seconds (the first one
		// takes the whole backlog into the caches).
		binds := d.s.cl.Stats().Binds
		d.stepsIdle++
		if binds != d.lastProgressBinds {
			d.lastProgressBinds, d.lastProgressAt, d.lastBindWall, d.stepsIdle = binds, d.vt, time.Now(), 0
		}
		stalled := d.vt-d.lastProgressAt > 5*time.Second && d.stepsIdle > 20
		return d.vt > 0 && (d.pending == 0 || stalled) || d.vt > d.end
	}
	return d.vt > d.end
}

// submit starts the step that began (in wall time) at t0: the cluster
// advances to the virtual time, its clock runs, the jobs that have arrived
// are submitted and the node events due are applied.
func (d *driver) submit(t0 time.Time) {
	s, vt := d.s, d.vt
	s.cl.advance(vt, d.retain)
	s.cl.runClock(t0)
	for {
		js, ok := d.gen.Next(vt)
		if !ok {
			break
		}
		s.cl.Submit(js, schedulerName)
		if !d.w.Burst {
			if d.offered == nil {
				d.offered = map[string]float64{}
			}
			d.offered[s.cl.topQueue(js.Queue)] += float64(js.Size) * float64(js.CPU) / 1000 * js.Lifetime.Seconds()
		}
	}
	for len(d.events) > 0 && time.Duration(d.events[0].At*float64(d.end)) <= vt {
		e := d.events[0]
		d.events = d.events[1:]
		s.nodeEvent(e)
	}
}

// offeredNote says how much of the cluster the jobs submitted asked for,
// in all and by parent queue beside each parent's capability: a churn's
// latency depends on it as much as on the scheduler. "" for a burst.
func (d *driver) offeredNote() string {
	if len(d.offered) == 0 || d.vt <= 0 {
		return ""
	}
	cores := float64(d.s.tier.Nodes) * float64(d.w.Node.CPU)
	denom := cores * min(d.vt, d.end).Seconds()
	total := 0.0
	parents := make([]string, 0, len(d.offered))
	for p, v := range d.offered {
		total += v
		parents = append(parents, p)
	}
	slices.Sort(parents)
	parts := make([]string, 0, len(parents))
	for _, p := range parents {
		parts = append(parts, fmt.Sprintf("%s %.1f %%", p, 100*d.offered[p]/denom))
	}
	capped := ""
	if f := d.w.Queues.ParentCapabilityFraction; f > 0 {
		capped = fmt.Sprintf(" (each capped at %.0f %% of the cluster)", 100*f)
	}
	return fmt.Sprintf("offered load: the jobs submitted asked for %.1f %% of the cluster's %.0f cores over the run (pods × CPU × lifetime, counted whole though some end after the run: slightly over); by parent queue: %s%s",
		100*total/denom, cores, strings.Join(parts, ", "), capped)
}

// nodeEvent applies a workload node event to the cluster.
func (s *sim) nodeEvent(e workload.NodeEvent) {
	names := s.cl.NodeNames()
	n := max(1, int(e.Nodes*float64(len(names))))
	switch e.Kind {
	case "add":
		s.cl.AddNodes(s.w, n)
	case "drain":
		s.cl.Drain(names[len(names)-n:])
	case "shrink":
		s.cl.Shrink(names[:n], e.CPU*1000)
	}
	fmt.Fprintf(s.cfg.Progress, "sim: %s %d nodes at %s\n", e.Kind, n, s.cl.Elapsed().Round(time.Second))
}

// cycle runs one cycle per live shard, concurrently, then waits for their
// binds (30 s at most).
func (s *sim) cycle(ctx context.Context) {
	var wg sync.WaitGroup
	live := s.live()
	for _, p := range live {
		wg.Add(1)
		go func() { defer wg.Done(); p.Sched.Cycle(ctx) }()
	}
	wg.Wait()
	waitBinds(live)
}

// waitBinds waits until the shards have no bind in flight, 30 s at most.
func waitBinds(procs []*shardProc) {
	for waitStart := time.Now(); time.Since(waitStart) < 30*time.Second; {
		n := 0
		for _, p := range procs {
			n += p.Sched.BindsInFlight()
		}
		if n == 0 {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// cycleAlone is the step's cycles with each shard on a machine of its own
// (Config.VirtualCPU): the shards cycle one after another, each with the
// cluster's clock started again at the step's virtual time, and each is
// charged the wall time from its cycle's start to its last bind, plus what
// its own cache spent taking events since its last cycle (the step's
// arrivals, the other shards' binds): on machines of their own the caches
// take the same events side by side. While a shard cycles, only its own
// cache is updated; the others' updates are held and given to them when
// it is done (Cluster.HoldOthers), so that neither their work nor the
// collection of their garbage lands in its wall time. It returns the virtual time
// the step is charged: the slowest shard's, or the coordinator leader's
// busy time over the step (applies and etcd commits for every shard's
// calls) when that is longer, and adds both to the run's account.
func (d *driver) cycleAlone(ctx context.Context) time.Duration {
	s := d.s
	apply0, commit0 := s.coordBusy()
	live := s.live()
	if d.vcpu.charged == nil {
		// What the caches took before the run's first step (start-up)
		// is nobody's step.
		d.vcpu.charged = map[*shardProc]time.Duration{}
		for _, p := range live {
			d.vcpu.charged[p] = s.cl.CacheTime(p.Cache)
		}
		d.vcpu.binds = map[string]int64{}
	}
	var slow slowStep // the step's slowest shard
	for _, p := range live {
		owed := s.cl.CacheTime(p.Cache) - d.vcpu.charged[p]
		b0 := s.cl.Stats().Binds
		s.cl.HoldOthers(p.Cache)
		t0 := time.Now()
		s.cl.runClock(t0.Add(-owed))
		p.Sched.Cycle(ctx)
		waitBinds([]*shardProc{p})
		took := time.Since(t0)
		s.cl.Release()
		bound := s.cl.Stats().Binds - b0
		d.vcpu.binds[p.name] += bound
		d.vcpu.charged[p] = s.cl.CacheTime(p.Cache)
		if st := (slowStep{shard: p.name, cache: owed, cycle: max(took, 0), binds: bound}); st.busy() > slow.busy() {
			slow = st
		}
	}
	slowest := slow.busy()
	if len(d.vcpu.slowSteps) < listedSteps {
		d.vcpu.slowSteps = append(d.vcpu.slowSteps, slow)
	}
	apply1, commit1 := s.coordBusy()
	coord := (apply1 - apply0) + (commit1 - commit0)
	d.vcpu.steps++
	d.vcpu.slowest += slowest
	d.vcpu.slowestCache += slow.cache
	d.vcpu.apply += apply1 - apply0
	d.vcpu.commit += commit1 - commit0
	if coord > slowest {
		d.vcpu.coordLimited++
		return coord
	}
	return slowest
}

// coordBusy sums, over every shard's coordinator server (only a leader
// counts any), the time spent applying calls and committing them to etcd.
func (s *sim) coordBusy() (apply, commit time.Duration) {
	for _, p := range s.procs {
		st := p.Coord.Stats()
		apply += st.ApplyTime
		commit += st.CommitTime
	}
	return apply, commit
}

// vcpuAccount is what a VirtualCPU run charged: steps, the slowest
// shards' time and the coordinator's, and the steps the coordinator was
// the longer.
type vcpuAccount struct {
	steps, coordLimited    int
	slowest, apply, commit time.Duration
	// slowestCache is the part of slowest its shards' caches spent taking
	// events (the step's arrivals, every shard's binds) before their
	// cycles: work each shard repeats, whatever the shard count.
	slowestCache time.Duration
	// charged is, per shard, its cache's time already charged to it.
	charged map[*shardProc]time.Duration
	// binds counts, per shard, the binds its cycles made; slowSteps is
	// the first listedSteps steps' slowest shards.
	binds     map[string]int64
	slowSteps []slowStep
}

// listedSteps is how many steps' slowest shards a run's notes list (a
// burst takes a few steps; a churn run thousands).
const listedSteps = 6

// slowStep is the slowest shard of one step: its cache's time taking
// events, its cycle's (placement, admission, binds) and the binds made.
type slowStep struct {
	shard        string
	cache, cycle time.Duration
	binds        int64
}

// busy is all the shard was charged for the step.
func (st slowStep) busy() time.Duration { return st.cache + st.cycle }

// shardNote says how the binds spread over the shards' cycles (fewest,
// median, most) and which shard was the slowest of the first steps, with
// what it did: where a run with more shards loses its rate.
func (a *vcpuAccount) shardNote() string {
	if len(a.binds) == 0 {
		return ""
	}
	names := slices.Collect(maps.Keys(a.binds))
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(a.binds[x], a.binds[y]), cmp.Compare(x, y)) })
	lo, mid, hi := names[0], names[len(names)/2], names[len(names)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "binds made by each shard's cycles: fewest %d (%s), median %d, most %d (%s); the slowest shard of ", a.binds[lo], lo, a.binds[mid], a.binds[hi], hi)
	if len(a.slowSteps) < a.steps {
		fmt.Fprintf(&b, "the first %d steps", len(a.slowSteps))
	} else {
		b.WriteString("each step")
	}
	for i, st := range a.slowSteps {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%d. %s %.2f s (%.2f s of it its cache taking events) for %d binds", sep, i+1, st.shard, st.busy().Seconds(), st.cache.Seconds(), st.binds)
	}
	return b.String()
}

// progress reports on cfg.Progress every 10 s of wall time.
func (d *driver) progress() {
	if time.Since(d.lastProgress) > 10*time.Second {
		d.lastProgress = time.Now()
		st := d.s.cl.Stats()
		fmt.Fprintf(d.cfg.Progress, "sim %s: virtual %s/%s, wall %s, bound %d, pending %s, %.0f pods/s (wall)\n", d.run.Name,
			d.vt.Round(time.Second), d.end.Round(time.Second), time.Since(d.wallStart).Round(time.Second), st.Binds, pendingText(d.pending),
			float64(st.Binds)/time.Since(d.wallStart).Seconds())
	}
}

// pendingText is the progress line's count of pending pods: between two
// samples the driver does not know it (d.pending is -1, takeSample), and
// says so rather than print a negative count.
func pendingText(n int) string {
	if n < 0 {
		return "not counted since the last sample"
	}
	return strconv.Itoa(n)
}

// advance ends the step that began (in wall time) at t0; charged is the
// step's virtual time in a VirtualCPU run (cycleAlone), 0 otherwise.
func (d *driver) advance(t0 time.Time, charged time.Duration) {
	// Advance the virtual clock by the step, or by the wall time the
	// step took when that is longer (it ran with the wall clock during
	// the step, so nothing bound in it is stamped later than that). With
	// a virtual CPU per shard each shard's clock started at the step's
	// time, so the step took what it was charged.
	d.s.cl.freezeClock()
	took := time.Since(t0)
	if d.cfg.VirtualCPU {
		took = charged
	}
	if d.cfg.Pace {
		if ahead := (d.vt + d.step) - time.Since(d.wallStart); ahead > 0 {
			time.Sleep(ahead)
		}
		d.vt = max(d.vt+d.step, time.Since(d.wallStart))
	} else {
		d.vt += max(d.step, took)
	}
}

// ending is what the run measures once its clock has stopped.
type ending struct {
	wall             time.Duration
	cpu              float64 // CPU seconds of the whole process during the run
	mem              memory  // settled (settledMemory)
	st               Stats
	p50, p99, maxLat float64
	cdf              []float64
	sm               sample // with the jobs
}

// measureEnd takes the end-of-run measurements in this order: the wall
// and CPU time first, then the settled resident memory, then the quota recount, the
// cluster's counters, the latencies and a last sample.
func (d *driver) measureEnd() ending {
	s := d.s
	var e ending
	e.wall = time.Since(d.wallStart)
	e.cpu = (procstat.CPU() - d.cpu0).Seconds()
	e.mem = d.settledMemory("end")
	s.cl.CheckQuota()
	e.st = s.cl.Stats()
	e.p50, e.p99, e.maxLat, e.cdf = s.cl.latencies()
	e.sm = s.cl.sample(s.leaves, true)
	return e
}

// stepFigures fills the run's pods, times, throughput, latencies, CPU and
// API writes.
func (d *driver) stepFigures(e ending) {
	run, st, wall, cpu := &d.run, e.st, e.wall, e.cpu
	run.Pods = int(st.Binds)
	run.Unbound = e.sm.pending
	run.WallSeconds = wall.Seconds()
	run.VirtualSeconds = d.vt.Seconds()
	run.PodsPerSec = float64(st.Binds) / wall.Seconds()
	if last := d.s.cl.LastBind(); d.w.Burst && last.After(d.wallStart) {
		// Placement throughput: up to the last bind, not the idle steps
		// that wait to see whether anything else will fit, nor the rest
		// of the step that bound it (its confirms, the sample); the note
		// gives both, to compare with figures taken to the step's end.
		run.PodsPerSec = float64(st.Binds) / last.Sub(d.wallStart).Seconds()
		if !d.lastBindWall.IsZero() {
			// With a virtual CPU per shard the table's figure is per
			// virtual second (vcpuFigures); this note stays on the wall
			// clock, and says so.
			clock := ""
			if d.cfg.VirtualCPU {
				clock = " on the wall clock"
			}
			run.Notes = append(run.Notes, fmt.Sprintf("placement throughput%s up to the last bind %.0f pods/s (%s); up to the end of the step that bound it %.0f pods/s (%s)",
				clock, run.PodsPerSec, last.Sub(d.wallStart).Round(time.Millisecond),
				float64(st.Binds)/d.lastBindWall.Sub(d.wallStart).Seconds(), d.lastBindWall.Sub(d.wallStart).Round(time.Millisecond)))
		}
	}
	if d.cfg.VirtualCPU {
		d.vcpuFigures()
	}
	run.LatencyP50, run.LatencyP99, run.LatencyMax, run.LatencyCDF = e.p50, e.p99, e.maxLat, e.cdf
	run.CPUSeconds = cpu
	if st.Binds > 0 {
		run.CPUSecondsPer1000 = cpu / float64(st.Binds) * 1000
	}
	var statusWrites, conflicts int64
	for _, p := range d.s.procs {
		bs := p.Status.Stats()
		statusWrites += int64(bs.Writes)
		conflicts += int64(bs.Conflicts)
	}
	run.StatusWrites, run.StatusConflicts = statusWrites, conflicts
	if len(d.s.procs) > 1 {
		var ho scheduler.Stats
		for _, p := range d.s.procs {
			st := p.Sched.Stats()
			ho.Offers += st.Offers
			ho.HoldOffers += st.HoldOffers
			ho.Claims += st.Claims
			ho.Refusals += st.Refusals
			ho.OfferTimeouts += st.OfferTimeouts
			ho.Holds += st.Holds
		}
		run.Notes = append(run.Notes, fmt.Sprintf("hand-off between shards: %d offers (%d of them of starving gangs to a shard that could hold nodes for them), %d claimed, %d refused or given back, %d withdrawn unclaimed; %d starvation holds",
			ho.Offers, ho.HoldOffers, ho.Claims, ho.Refusals, ho.OfferTimeouts, ho.Holds))
	}
	if st.Binds > 0 {
		run.APIWritesPerPod = float64(st.Binds+st.BindRefused+statusWrites+st.Events) / float64(st.Binds)
	}
}

// runName names a run: scenario/tier/shards, and says when each shard had
// a virtual CPU of its own.
func runName(cfg Config, scenario string) string {
	name := fmt.Sprintf("%s/%s/%d shards", scenario, cfg.Tier, cfg.Shards)
	if cfg.VirtualCPU {
		name += ", a CPU each"
	}
	return name
}

// ModeVirtualCPU is the Run.Mode of a simulated run with a CPU per shard.
const ModeVirtualCPU = "sim-vcpu"

// vcpuFigures fills a VirtualCPU run's throughput (per virtual second: up
// to the last bind in a burst, over the run otherwise) and its account.
func (d *driver) vcpuFigures() {
	run, binds := &d.run, float64(d.s.cl.Stats().Binds)
	span := d.vt
	if d.w.Burst && d.lastProgressAt > 0 {
		span = d.lastProgressAt // the step after the last bind began then
	}
	if span > 0 {
		run.PodsPerSec = binds / span.Seconds()
	}
	if d.vt <= 0 || d.vcpu.steps == 0 {
		return
	}
	pct := func(x time.Duration) float64 { return 100 * x.Seconds() / d.vt.Seconds() }
	run.VirtualCPU = &report.VirtualCPU{ShardPct: pct(d.vcpu.slowest), ShardCachePct: pct(d.vcpu.slowestCache), ApplyPct: pct(d.vcpu.apply), CommitPct: pct(d.vcpu.commit),
		CoordLimitedPct: 100 * float64(d.vcpu.coordLimited) / float64(d.vcpu.steps)}
	run.Notes = append(run.Notes, fmt.Sprintf("a virtual CPU per shard: over %d steps the slowest shard was busy %.0f %% of the virtual time (%.0f %% in its cache taking the pods' events, which every shard's cache takes whatever the shard count; the rest its cycles, placement and binds), the coordinator's leader %.0f %% applying and %.0f %% committing to etcd; it set the step in %.0f %% of them",
		d.vcpu.steps, run.VirtualCPU.ShardPct, run.VirtualCPU.ShardCachePct, run.VirtualCPU.ApplyPct, run.VirtualCPU.CommitPct, run.VirtualCPU.CoordLimitedPct))
	if n := d.vcpu.shardNote(); n != "" {
		run.Notes = append(run.Notes, n)
	}
}
