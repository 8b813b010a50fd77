package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/shardproc"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
	"github.com/shardsched/shardsched/wire"
)

// Config is one simulated run.
type Config struct {
	Workload *Workload
	Tier     string
	Shards   int
	Seed     uint64
	// Minutes overrides the tier's simulated duration when positive.
	Minutes float64
	// Step is the virtual time between scheduling cycles (default 100 ms).
	// A step whose cycles take longer in wall time advances the virtual
	// clock by that wall time instead, so a slow scheduler shows up as
	// virtual latency.
	Step time.Duration
	// Pace, when positive, keeps the virtual clock from running ahead of
	// the wall clock (1 = real time): needed when real timers matter
	// (leases and gossip in the chaos scenario).
	Pace bool
	// Chaos kills one shard at 30 % of the run, the coordinator leader's
	// shard at 50 %, and restarts etcd at 70 %.
	Chaos bool
	// Fsync makes the embedded etcd sync its log (durable, slower).
	Fsync bool
	// Partitions of the node ring (default wire.DefaultPartitions).
	Partitions int
	Progress   io.Writer
	Logger     *slog.Logger
}

const schedulerName = "volcano"

// shardProc is one shard "process": the daemon's assembly (shardproc)
// with the simulator's ports.
type shardProc struct {
	*shardproc.Proc
	name   string
	cli    *clientv3.Client
	cancel context.CancelFunc
	dead   bool
	check  cache.Snapshot // the driver's own view of the shard's books
}

// Run runs one simulated scenario and returns its figures.
func Run(ctx context.Context, cfg Config) (report.Run, error) {
	w := cfg.Workload
	tier, err := w.Tier(cfg.Tier)
	if err != nil {
		return report.Run{}, err
	}
	if cfg.Shards < 1 || cfg.Shards > 64 {
		return report.Run{}, fmt.Errorf("shards %d: must be 1..64", cfg.Shards)
	}
	if cfg.Step <= 0 {
		cfg.Step = 100 * time.Millisecond
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = wire.DefaultPartitions
	}
	if cfg.Minutes > 0 {
		tier.Minutes = cfg.Minutes
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	runtime.GC()
	rss0 := rssMiB()

	specs := QueueSpecs(w, tier)
	tree, err := api.BuildTree(specs)
	if err != nil {
		return report.Run{}, fmt.Errorf("queue tree: %w", err)
	}
	cl, err := NewCluster(w, tier.Nodes, tree)
	if err != nil {
		return report.Run{}, err
	}
	etcd, err := cluster.StartEtcd(cluster.EtcdOptions{NoFsync: !cfg.Fsync, LogLevel: "fatal"})
	if err != nil {
		return report.Run{}, err
	}
	defer etcd.Close()

	s := &sim{cfg: cfg, w: w, tier: tier, tree: tree, specs: specs, cl: cl, etcd: etcd, leaves: w.Leaves()}
	s.holders.Store(&[]*shard.Shard{})
	defer s.stopAll()
	fmt.Fprintf(cfg.Progress, "sim %s/%s: %d nodes, %d shards: starting shards...\n", w.Name, cfg.Tier, tier.Nodes, cfg.Shards)
	for i := 0; i < cfg.Shards; i++ {
		if err := s.startShard(ctx, fmt.Sprintf("shard-%d", i)); err != nil {
			return report.Run{}, err
		}
	}
	settle := time.Now()
	if err := s.waitOwners(ctx, time.Minute); err != nil {
		return report.Run{}, err
	}
	if err := s.waitTree(ctx, time.Minute); err != nil {
		return report.Run{}, err
	}
	fmt.Fprintf(cfg.Progress, "sim: %d shards own all %d keys and the coordinator has the queue tree after %s\n", cfg.Shards, s.keyCount(), time.Since(settle).Round(time.Millisecond))
	return s.drive(ctx, rss0)
}

type sim struct {
	cfg    Config
	w      *Workload
	tier   Tier
	tree   *api.Tree
	specs  []api.QueueSpec
	cl     *Cluster
	etcd   *cluster.Etcd
	leaves []LeafQueue
	procs  []*shardProc
	seed   string // gossip address of a live shard
	// holders are the live shards, for the binders' fencing check (read
	// by bind workers; replaced whole by the driver).
	holders atomic.Pointer[[]*shard.Shard]
}

// setHolders publishes the live shards to the binders.
func (s *sim) setHolders() {
	var hs []*shard.Shard
	for _, p := range s.procs {
		if !p.dead {
			hs = append(hs, p.Shard)
		}
	}
	s.holders.Store(&hs)
}

// QueueSpecs builds root → parents → leaves for a cluster of t.Nodes nodes
// of the workload's shape: each parent may hold a fraction of the cluster's
// CPU; each leaf deserves its weight's share. Only t.Nodes is read, so a
// caller whose cluster differs from the tier's may set it.
func QueueSpecs(w *Workload, t Tier) []api.QueueSpec {
	total := int64(t.Nodes) * w.Node.CPU * 1000
	var out []api.QueueSpec
	leaves := w.Leaves()
	sumW := int64(0)
	for _, l := range leaves {
		sumW += int64(l.Weight)
	}
	for p := 0; p < w.Queues.Parents; p++ {
		capCPU := int64(float64(total) * w.Queues.ParentCapabilityFraction)
		lim, _ := api.NewLimit(map[string]int64{api.CPU: capCPU})
		out = append(out, api.QueueSpec{Name: fmt.Sprintf("p%d", p), Capability: lim, Weight: 1})
	}
	for _, l := range leaves {
		out = append(out, api.QueueSpec{Name: l.Name, Parent: l.Parent, Weight: l.Weight,
			Deserved: api.NewResource(total*int64(l.Weight)/sumW, 0, nil)})
	}
	return out
}

func (s *sim) keys() []string {
	keys := make([]string, 0, s.cfg.Partitions+len(s.specs)+2)
	for p := 0; p < s.cfg.Partitions; p++ {
		keys = append(keys, wire.PartitionKey(p))
	}
	for _, q := range s.tree.Names() {
		keys = append(keys, wire.QueueKey(q))
	}
	return keys
}

func (s *sim) keyCount() int { return s.cfg.Partitions + len(s.tree.Names()) }

func (s *sim) startShard(ctx context.Context, name string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	ccfg := coordinator.DefaultConfig()
	ccfg.SessionTTL = 3
	scfg := shard.DefaultConfig()
	scfg.BindAddr, scfg.BindPort, scfg.GossipProfile = "127.0.0.1", 0, "local"
	scfg.Partitions, scfg.SessionTTL = s.cfg.Partitions, 3
	if s.seed != "" {
		scfg.Join = []string{s.seed}
	}
	sc := scheduler.DefaultConfig()
	sc.SchedulerName, sc.Now, sc.Seed = schedulerName, s.cl.Now, s.cfg.Seed
	// Quota is taken back only in the reclaim scenario: the other
	// scenarios' figures stay comparable with earlier runs.
	var evictor scheduler.Evictor
	if s.w.Reclaim != nil {
		evictor = &Evictor{c: s.cl}
	}
	parts := s.cfg.Partitions
	pr, err := shardproc.New(ctx, shardproc.Options{Name: name, Etcd: cli, Shard: scfg, Coordinator: ccfg, Scheduler: sc,
		Status: status.DefaultConfig(), Logger: s.cfg.Logger}, shardproc.Ports{
		Recorder: &Recorder{c: s.cl}, Status: &StatusWriter{c: s.cl, shard: name}, Groups: &Groups{c: s.cl}, Evictor: evictor,
		NodeState: s.cl.NodeState,
		Binder: &Binder{c: s.cl, shard: name, othersHold: func(node string) bool {
			key := wire.PartitionKey(wire.Partition(node, parts))
			for _, o := range *s.holders.Load() {
				if o.Name() != name && o.Holds(key) {
					return true
				}
			}
			return false
		}}})
	if err != nil {
		_ = cli.Close()
		return err
	}
	p := &shardProc{Proc: pr, name: name, cli: cli}
	s.cl.Subscribe(p.Cache)
	rctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.Start(rctx)
	p.Schedule(rctx, true)
	p.SetTree(s.tree)
	s.procs = append(s.procs, p)
	s.seed = p.Shard.GossipAddr()
	s.setHolders()
	return nil
}

// kill stops a shard the way kill -9 would: no goodbye, its leases left to
// expire.
func (s *sim) kill(p *shardProc) {
	p.dead = true
	s.setHolders()
	p.Shard.Crash()
	p.Coord.Abandon()
	p.cancel()
	s.cl.Unsubscribe(p.Cache)
	p.Wait()
	p.Close()
	p.cli.Close()
	for _, q := range s.procs {
		if !q.dead {
			s.seed = q.Shard.GossipAddr()
		}
	}
}

func (s *sim) stopAll() {
	for _, p := range s.procs {
		if p.dead {
			continue
		}
		p.dead = true
		p.cancel()
		p.Wait()
		p.Close()
		p.cli.Close()
	}
}

func (s *sim) live() []*shardProc {
	var out []*shardProc
	for _, p := range s.procs {
		if !p.dead {
			out = append(out, p)
		}
	}
	return out
}

// ownersComplete reports whether every key is held by a live shard.
func (s *sim) ownersComplete() bool {
	held := map[string]bool{}
	for _, p := range s.live() {
		for _, k := range p.Shard.Owned() {
			held[k] = true
		}
	}
	return len(held) >= s.keyCount()
}

func (s *sim) waitOwners(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !s.ownersComplete() {
		if time.Now().After(deadline) {
			return fmt.Errorf("shards did not take every key within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitTree waits until the coordinator leader serves the queue tree, so the
// first cycles do not refuse every job for an unknown queue (while the
// virtual clock runs).
func (s *sim) waitTree(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := s.anyQuota().List(cctx)
		cancel()
		if err == nil && len(res.Specs) >= len(s.tree.Names()) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the coordinator did not get the queue tree within %s (last error: %v)", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncOwnership gives each live shard's cache the nodes it now owns and
// rebuilds out-of-sync nodes from the cluster's truth (what the daemon
// does from its informers). It returns the out-of-sync nodes whose truth
// fits: books that disagree with the API server (an invariant).
func (s *sim) syncOwnership() int {
	bad := 0
	for _, p := range s.live() {
		p.SyncOwnership()
		for _, n := range p.Cache.OutOfSync() {
			if s.cl.Fits(n) {
				bad++
			}
		}
	}
	return bad
}

// booksDrift compares every live shard's books of its nodes with the
// cluster's truth, between steps (no bind in flight): a node whose books
// are in sync but disagree on CPU, memory or pod count has drifted silently.
func (s *sim) booksDrift() int {
	bad := 0
	for _, p := range s.live() {
		p.Cache.UpdateSnapshot(&p.check)
		for _, b := range p.check.Nodes() {
			if b.OutOfSync {
				continue // counted by syncOwnership when the truth fits
			}
			cpu, mem, pods, ok := s.cl.NodeUsage(b.Node.Name)
			if ok && (b.Used.MilliCPU != cpu || b.Used.Memory != mem || b.Tasks != pods) {
				bad++
			}
		}
	}
	return bad
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}

// ProcessCPU is the CPU time (user and system) of this process so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fairShares water-fills capacity (milli-CPU) over the leaves by weight,
// each capped at its demand: the allocation max-min fairness would give.
func fairShares(leaves []LeafQueue, demand map[string]int64, capacity int64) map[string]float64 {
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

// drive runs the virtual clock until the end of the run.
func (s *sim) drive(ctx context.Context, rss0 float64) (report.Run, error) {
	cfg, w, tier := s.cfg, s.w, s.tier
	end := time.Duration(tier.Minutes * float64(time.Minute))
	gen := NewGenerator(w, tier, cfg.Seed)
	scenario := w.Name
	if cfg.Chaos {
		scenario = "chaos"
	}
	run := report.Run{Name: fmt.Sprintf("%s/%s/%d shards", scenario, cfg.Tier, cfg.Shards), Mode: "sim", Scenario: scenario,
		Tier: cfg.Tier, System: "shardsched", Shards: cfg.Shards, Invariants: map[string]int64{}, QueueShares: map[string][]report.Point{}}
	type fault struct {
		at    time.Duration
		what  string
		done  bool
		event *report.ChaosEvent
		// recovery tracking
		wallAt               time.Time
		backlog              int
		ownersBack, thruBack bool
		admittedBefore       map[string]bool
	}
	var faults []*fault
	if cfg.Chaos {
		faults = []*fault{{at: end * 3 / 10, what: "kill -9 a shard"}, {at: end * 5 / 10, what: "kill -9 the coordinator leader's shard"}, {at: end * 7 / 10, what: "restart etcd"}}
		run.Chaos = &report.Chaos{}
	}
	events := append([]NodeEvent(nil), w.Events...)
	sort.Slice(events, func(i, j int) bool { return events[i].At < events[j].At })

	var (
		step              = cfg.Step
		vt                time.Duration
		nextSample        time.Duration
		sampleEvery       = max(time.Second, end/300)
		samples           int
		wallStart         = time.Now()
		cpu0              = ProcessCPU()
		lastProgress      = time.Now()
		utilSum           float64
		utilN             int
		fairErr           = map[string]float64{}
		fairN             int
		outOfSyncBad      int64
		rssWarm           float64
		peakRSS           float64
		pending           int
		retain            = 10 * time.Second
		lastBinds         int64
		lastSampleT       time.Duration
		lastProgressBinds int64
		lastBindWall      time.Time // burst: when the last pod was bound
		lastProgressAt    time.Duration
	)
	warmAt := end / 3
	var rw *reclaimWatch
	if w.Reclaim != nil {
		scenario = "reclaim"
		run.Scenario = scenario
		run.Name = fmt.Sprintf("%s/%s/%d shards", scenario, cfg.Tier, cfg.Shards)
		rw = newReclaimWatch(w, s.tree, end)
		_, lenders := w.ReclaimSides()
		s.cl.setLenders(lenders)
	}
	for {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		if w.Burst {
			// Done when the backlog is placed, or when nothing more has
			// been placed for a while (what is left does not fit).
			binds := s.cl.Stats().Binds
			if binds != lastProgressBinds {
				lastProgressBinds, lastProgressAt, lastBindWall = binds, vt, time.Now()
			}
			if vt > 0 && (pending == 0 || vt-lastProgressAt > 5*time.Second) || vt > end {
				break
			}
		} else if vt > end {
			break
		}
		t0 := time.Now()
		s.cl.advance(vt, retain)
		s.cl.runClock(t0)
		for {
			js, ok := gen.Next(vt)
			if !ok {
				break
			}
			s.cl.Submit(js, schedulerName)
		}
		for len(events) > 0 && time.Duration(events[0].At*float64(end)) <= vt {
			e := events[0]
			events = events[1:]
			s.nodeEvent(e)
		}
		for _, f := range faults {
			if f.done || vt < f.at {
				continue
			}
			f.done = true
			sm := s.cl.sample(s.leaves, true)
			f.backlog = sm.pending
			// Admitted before the fault: every job holding a reservation.
			f.admittedBefore = map[string]bool{}
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			if res, err := s.anyQuota().List(lctx); err == nil {
				for _, r := range res.Reservations {
					f.admittedBefore[r.Job.UID] = true
				}
			} else {
				run.Notes = append(run.Notes, fmt.Sprintf("before %q the reservations could not be listed (%v); jobs running then stand in for them", f.what, err))
				f.admittedBefore = sm.runningJobs
			}
			lcancel()
			f.wallAt = time.Now()
			f.event = &report.ChaosEvent{At: vt.Seconds(), What: f.what, OwnersBackAfter: -1, ThroughputBackAfter: -1}
			if err := s.fault(f.what); err != nil {
				return run, fmt.Errorf("chaos %q: %w", f.what, err)
			}
			fmt.Fprintf(cfg.Progress, "sim: chaos at %s: %s\n", vt.Round(time.Second), f.what)
		}
		outOfSyncBad += int64(s.syncOwnership())
		// One cycle per live shard, concurrently, then wait for their binds.
		var wg sync.WaitGroup
		for _, p := range s.live() {
			wg.Add(1)
			go func() { defer wg.Done(); p.Sched.Cycle(ctx) }()
		}
		wg.Wait()
		for waitStart := time.Now(); time.Since(waitStart) < 30*time.Second; {
			n := 0
			for _, p := range s.live() {
				n += p.Sched.BindsInFlight()
			}
			if n == 0 {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		// Recovery of the faults under way.
		for _, f := range faults {
			if !f.done || f.event == nil {
				continue
			}
			if !f.ownersBack && s.ownersComplete() {
				f.ownersBack = true
				f.event.OwnersBackAfter = time.Since(f.wallAt).Seconds()
			}
			if !f.thruBack {
				if pend := s.cl.pending(); pend <= max(f.backlog*3/2, f.backlog+50) && time.Since(f.wallAt) > 100*time.Millisecond {
					f.thruBack = true
					f.event.ThroughputBackAfter = time.Since(f.wallAt).Seconds()
				}
			}
		}
		if vt >= nextSample {
			nextSample += sampleEvery
			outOfSyncBad += int64(s.booksDrift())
			// The full recount from every pod checks the sums kept at each
			// bind and end (which the overrun check uses at every bind);
			// a drift persists, so every 10th sample (and the end) finds
			// it, at a tenth of the cost (O(pods) under the cluster lock).
			if samples%10 == 0 {
				s.cl.CheckQuota()
			}
			samples++
			sm := s.cl.sample(s.leaves, false)
			pending = sm.pending
			st := s.cl.Stats()
			dt := (vt - lastSampleT).Seconds()
			if dt > 0 {
				run.Throughput = append(run.Throughput, report.Point{T: vt.Seconds(), V: float64(st.Binds-lastBinds) / dt})
			}
			lastBinds, lastSampleT = st.Binds, vt
			if sm.allocCPU > 0 {
				u := float64(sm.usedCPU) / float64(sm.allocCPU)
				run.UtilSeries = append(run.UtilSeries, report.Point{T: vt.Seconds(), V: u})
				if vt >= warmAt || w.Burst {
					utilSum += u
					utilN++
				}
			}
			if rw != nil {
				rw.observe(vt, sm, s.leaves)
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
					fairErr[l.Name] += math.Abs(float64(sm.leafUsed[l.Name])-fair[l.Name]) / float64(sm.allocCPU)
				}
				fairN++
			}
			r := rssMiB()
			peakRSS = max(peakRSS, r)
			run.RSSSeries = append(run.RSSSeries, report.Point{T: vt.Seconds(), V: r})
			if rssWarm == 0 && vt >= warmAt {
				runtime.GC()
				rssWarm = rssMiB()
			}
		} else {
			pending = -1 // unknown until the next sample
			if w.Burst {
				pending = s.cl.pending()
			}
		}
		if time.Since(lastProgress) > 10*time.Second {
			lastProgress = time.Now()
			st := s.cl.Stats()
			fmt.Fprintf(cfg.Progress, "sim %s: virtual %s/%s, wall %s, bound %d, pending %d, %.0f pods/s (wall)\n", run.Name,
				vt.Round(time.Second), end.Round(time.Second), time.Since(wallStart).Round(time.Second), st.Binds, pending,
				float64(st.Binds)/time.Since(wallStart).Seconds())
		}
		// Advance the virtual clock by the step, or by the wall time the
		// step took when that is longer (it ran with the wall clock during
		// the step, so nothing bound in it is stamped later than that).
		s.cl.freezeClock()
		took := time.Since(t0)
		if cfg.Pace {
			if ahead := (vt + step) - time.Since(wallStart); ahead > 0 {
				time.Sleep(ahead)
			}
			vt = max(vt+step, time.Since(wallStart))
		} else {
			vt += max(step, took)
		}
	}
	wall := time.Since(wallStart)
	cpu := (ProcessCPU() - cpu0).Seconds()
	runtime.GC()
	rssEnd := rssMiB()
	s.cl.CheckQuota()
	st := s.cl.Stats()
	p50, p99, maxLat, cdf := s.cl.latencies()
	sm := s.cl.sample(s.leaves, true)

	run.Pods = int(st.Binds)
	run.Unbound = sm.pending
	run.WallSeconds = wall.Seconds()
	run.VirtualSeconds = vt.Seconds()
	run.PodsPerSec = float64(st.Binds) / wall.Seconds()
	if w.Burst && !lastBindWall.IsZero() {
		// Placement throughput: up to the last bind, not the idle steps
		// that wait to see whether anything else will fit.
		run.PodsPerSec = float64(st.Binds) / lastBindWall.Sub(wallStart).Seconds()
	}
	run.LatencyP50, run.LatencyP99, run.LatencyMax, run.LatencyCDF = p50, p99, maxLat, cdf
	run.CPUSeconds = cpu
	if st.Binds > 0 {
		run.CPUSecondsPer1000 = cpu / float64(st.Binds) * 1000
	}
	if utilN > 0 {
		run.Utilization = utilSum / float64(utilN)
	}
	if fairN > 0 {
		run.FairShareError = map[string]float64{}
		for q, e := range fairErr {
			run.FairShareError[q] = e / float64(fairN)
			run.MaxFairShareError = max(run.MaxFairShareError, e/float64(fairN))
		}
	}
	var statusWrites, conflicts int64
	for _, p := range s.procs {
		bs := p.Status.Stats()
		statusWrites += int64(bs.Writes)
		conflicts += int64(bs.Conflicts)
	}
	run.StatusWrites, run.StatusConflicts = statusWrites, conflicts
	if st.Binds > 0 {
		run.APIWritesPerPod = float64(st.Binds+st.BindRefused+statusWrites+st.Events) / float64(st.Binds)
	}
	run.PeakRSSMiB = peakRSS
	if rssWarm > 0 {
		run.RSSGrowthPct = (rssEnd - rssWarm) / rssWarm * 100
	}
	run.Invariants["quota_overruns"] = st.QuotaOverruns
	run.Invariants["quota_overruns_sampled"] = st.QuotaOverrunSamples
	run.Invariants["double_booked_nodes"] = st.DoubleBookedNodes
	run.Invariants["pods_bound_twice"] = st.PodsBoundTwice
	run.Invariants["unfenced_binds"] = st.UnfencedBinds
	run.Invariants["nodes_out_of_sync"] = outOfSyncBad
	if rw != nil {
		run.Reclaim = rw.figures(st, vt)
		run.Invariants["reclaim_loops"] = run.Reclaim.Loops
		run.Notes = append(run.Notes, fmt.Sprintf("reclaim: lenders switched on at %.0f s; %d of %d lenders asked; deserved share (or all asked) reached p50 %.1f s, p99 %.1f s after (%d never); %d pods / %.0f CPU evicted against %.0f CPU at least needed (%.2fx); %d pods evicted from a queue not above its deserved share (loops), %d of lenders",
			run.Reclaim.At, run.Reclaim.Asking, run.Reclaim.Lenders, run.Reclaim.ReachP50, run.Reclaim.ReachP99, run.Reclaim.NeverReached,
			run.Reclaim.EvictedPods, run.Reclaim.EvictedCPU, run.Reclaim.NeededCPU, run.Reclaim.EvictedPerNeeded, run.Reclaim.Loops, run.Reclaim.LenderEvictions))
	}
	if !cfg.Pace {
		run.Notes = append(run.Notes, "the scheduler's timers (backoffs, offer timeouts) run on the virtual clock, which may run ahead of the wall clock here, while leases and gossip run on the wall clock")
	}
	run.Notes = append(run.Notes,
		fmt.Sprintf("%d pods submitted, %d bound, %d completed, %d evicted by drains; %d binds refused by the API (already bound or gone)", st.Submitted, st.Binds, st.Completed, st.Evicted, st.BindRefused),
		fmt.Sprintf("status writes: %d queue, %d PodGroup; most shards writing one queue: %d, one PodGroup: %d", st.QueueWrites, st.PodGroupWrites, st.WritersPerQueue, st.WritersPerPodGroup),
		fmt.Sprintf("RSS: %.0f MiB before the shards started, %.0f MiB at the end of warm-up, %.0f MiB at the end (after GC); whole process: cluster model, embedded etcd and %d shards", rss0, rssWarm, rssEnd, cfg.Shards))
	run.Notes = append(run.Notes, quotaNotes(s.cl, st)...)
	if st.GroupsCreated > 0 || st.GroupsDeletedUnderPods > 0 {
		run.Notes = append(run.Notes, fmt.Sprintf("implicit PodGroups: %d created and %d deleted by the shards; %d deleted while their pods still ran or waited",
			st.GroupsCreated, st.GroupsDeleted, st.GroupsDeletedUnderPods))
	}
	if ps := s.cl.pendingByClass(); len(ps) > 0 {
		classes := make([]jobClass, 0, len(ps))
		for k := range ps {
			classes = append(classes, k)
		}
		sort.Slice(classes, func(a, b int) bool {
			if classes[a].kind != classes[b].kind {
				return classes[a].kind < classes[b].kind
			}
			return classes[a].size < classes[b].size
		})
		var parts []string
		for _, k := range classes {
			e := ps[k]
			why := e.why
			if why == "" {
				why = "no event yet"
			}
			gpu := ""
			if e.gpu {
				gpu = ", asks for GPUs"
			}
			completed := ""
			if e.inCompleted > 0 {
				completed = fmt.Sprintf(", %d of them in a PodGroup already Completed", e.inCompleted)
			}
			parts = append(parts, fmt.Sprintf("%s size %d: %d jobs (oldest %.0f s%s%s: %q)", k.kind, k.size, e.jobs, e.oldest, gpu, completed, why))
		}
		run.Notes = append(run.Notes, "jobs with pending pods at the end, by kind and size: "+strings.Join(parts, ", "))
	}
	if cfg.Chaos {
		lost := 0
		res, err := s.anyQuota().List(ctx)
		if err != nil {
			return run, fmt.Errorf("list reservations after chaos: %w", err)
		}
		have := map[string]bool{}
		for _, r := range res.Reservations {
			have[r.Job.UID] = true
		}
		for _, f := range faults {
			if f.event != nil {
				run.Chaos.Events = append(run.Chaos.Events, *f.event)
			}
		}
		// Lost: admitted before some fault, still there at the end, not
		// all of its pods bound or finished, and no reservation left.
		seen := map[string]bool{}
		for _, f := range faults {
			for uid := range f.admittedBefore {
				if seen[uid] {
					continue
				}
				seen[uid] = true
				if exists, settled := s.cl.jobSettled(uid); exists && !settled && !have[uid] {
					lost++
					run.Notes = append(run.Notes, "admitted job lost (no reservation, pods unbound): "+uid)
				}
			}
		}
		for uid := range sm.runningJobs {
			if !have[uid] {
				run.Notes = append(run.Notes, "running job without a reservation: "+uid)
			}
		}
		run.Chaos.AdmittedJobsLost = lost
		run.Invariants["admitted_jobs_lost"] = int64(lost)
	}
	return run, nil
}

// quotaNotes describes the quota overruns found: how each count is made,
// the first few (queue, resource, used vs capability, time) and the
// overrunning binds by job kind.
func quotaNotes(cl *Cluster, st Stats) []string {
	out := []string{"quota_overruns counts binds × queue levels (leaf and every ancestor) left above capability, quota_overruns_sampled queue levels above capability at samples; both recount requests of bound, unfinished pods from the cluster model, never from the coordinator's ledger"}
	if st.QuotaBooksMismatch > 0 {
		out = append(out, fmt.Sprintf("BUG in the cluster model: its per-queue running sums differed from a recount over the pods %d times", st.QuotaBooksMismatch))
	}
	first, byKind := cl.Overruns()
	if len(first) == 0 {
		return out
	}
	parts := make([]string, 0, len(first))
	for _, o := range first {
		parts = append(parts, o.String())
	}
	out = append(out, "first quota overruns: "+strings.Join(parts, "; "))
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts = parts[:0]
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	if len(parts) > 0 {
		out = append(out, "overrunning binds by job kind (the bind that found the queue full, not necessarily the job that took quota it had not reserved): "+strings.Join(parts, ", "))
	}
	return out
}

func (s *sim) anyQuota() *coordinator.Client {
	for _, p := range s.live() {
		return p.Quota
	}
	return s.procs[0].Quota
}

// nodeEvent applies a workload node event to the cluster.
func (s *sim) nodeEvent(e NodeEvent) {
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

// fault injects one chaos fault.
func (s *sim) fault(what string) error {
	switch {
	case strings.Contains(what, "leader"):
		for _, p := range s.live() {
			if p.Coord.IsLeader() {
				s.kill(p)
				return nil
			}
		}
		return errors.New("no live shard leads the coordinator")
	case strings.Contains(what, "etcd"):
		return s.etcd.Restart()
	default:
		live := s.live()
		for _, p := range live {
			if !p.Coord.IsLeader() && len(live) > 1 {
				s.kill(p)
				return nil
			}
		}
		return errors.New("need at least two live shards to kill one that does not lead")
	}
}
