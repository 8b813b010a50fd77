// Package sim is the simulated mode of the bench harness: an in-memory
// cluster behind the same ports as the Kubernetes adapter (events into each
// shard's cache, a binder, a status writer, an event recorder), on a virtual
// clock, driving real shards (memberlist on loopback, ownership fenced in
// etcd) and the real coordinator on an embedded etcd, all in one process.
//
// The workload (arrivals, sizes, lifetimes, node events) is deterministic
// for a seed; the interleaving of the shards' goroutines is not.
//
// This file starts and stops the shards and holds the run's outline
// (drive); the steps are in step.go, the chaos faults in faults.go, the
// samples in sample.go and the invariants in invariants.go.
package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
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
	Workload *workload.Workload
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
	// VirtualCPU runs every shard as if on a machine of its own: in each
	// step the shards cycle one after another, each on a clock started
	// afresh at the step's virtual time, and the step lasts (in virtual
	// time) as long as its slowest shard, or as long as the coordinator's
	// leader was busy over the step (its applies and its etcd commits, for
	// every shard's calls) when that is longer. Pods/s and latencies are
	// then those of N shards on N machines sharing one coordinator.
	VirtualCPU bool
	// Partitions of the node ring (default wire.DefaultPartitions).
	Partitions int
	// HeapProfile, when set, is a path prefix: the heap is written to
	// <prefix>-warm.pb.gz after the warm-up's GC and to <prefix>-end.pb.gz
	// after the end's, so `go tool pprof -base` shows what grew.
	HeapProfile string
	// ShardMemory, when set, measures each shard's live heap at the end
	// of the run (Run.ShardLiveHeapMiB) by stopping the shards one by one.
	ShardMemory bool
	Progress    io.Writer
	Logger      *slog.Logger
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
	rss0 := procstat.RSSMiB()

	specs := workload.QueueSpecs(w, tier)
	tree, err := api.BuildTree(specs)
	if err != nil {
		return report.Run{}, fmt.Errorf("queue tree: %w", err)
	}
	cl, err := NewCluster(w, tier.Nodes, tree)
	if err != nil {
		return report.Run{}, err
	}
	if cfg.VirtualCPU {
		cl.TimeCaches()
	}
	// Compacted as in deploy/ (every 10 minutes there), scaled to the
	// simulator's pace (a simulated minute takes 15–40 wall seconds):
	// without it etcd's key index and database grow with every
	// reservation for the whole run.
	etcd, err := cluster.StartEtcd(cluster.EtcdOptions{NoFsync: !cfg.Fsync, LogLevel: "fatal", CompactionRetention: 3 * time.Minute})
	if err != nil {
		return report.Run{}, err
	}
	defer etcd.Close()

	pools, err := gpuPools(w)
	if err != nil {
		return report.Run{}, err
	}
	warns := &warnCounts{}
	cfg.Logger = slog.New(warnCounter{next: cfg.Logger.Handler(), counts: warns})
	s := &sim{cfg: cfg, w: w, tier: tier, tree: tree, specs: specs, cl: cl, etcd: etcd, leaves: w.Leaves(), pools: pools, warns: warns}
	s.holders.Store(&[]*shard.Shard{})
	defer func() { s.stopAll() }()
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
	// Every key held is not yet every key where it belongs: the shards
	// that started first hold what the later ones will take over, and a
	// run whose clock started before that hand-over measured it (a burst
	// with 8 shards bound its last pods 3 s late in one run of three).
	s.waitSettled(ctx, time.Minute)
	// A partition's nodes are placed on once it has been held for the
	// hand-over quiet period (wall clock): the virtual clock starts after.
	select {
	case <-ctx.Done():
		return report.Run{}, ctx.Err()
	case <-time.After(shardproc.DefaultHandoverQuiet):
	}
	if err := s.waitTree(ctx, time.Minute); err != nil {
		return report.Run{}, err
	}
	fmt.Fprintf(cfg.Progress, "sim: %d shards own all %d keys and the coordinator has the queue tree after %s\n", cfg.Shards, s.keyCount(), time.Since(settle).Round(time.Millisecond))
	return s.drive(ctx, rss0)
}

type sim struct {
	cfg    Config
	w      *workload.Workload
	tier   workload.Tier
	tree   *api.Tree
	specs  []api.QueueSpec
	cl     *Cluster
	etcd   *cluster.Etcd
	leaves []workload.LeafQueue
	procs  []*shardProc
	seed   string // gossip address of a live shard
	// holders are the live shards, for the binders' fencing check (read
	// by bind workers; replaced whole by the driver).
	holders atomic.Pointer[[]*shard.Shard]
	// reserves collects every shard's reservation latencies.
	reserves reserveWatch
	// pools is the shards' node pool pattern (gpuPools; nil: none).
	pools *regexp.Regexp
	// warns counts what the shards logged at Warn and above.
	warns *warnCounts
}

// gpuPools is the node pool pattern that makes the workload's GPU nodes
// one pool (workload node.gpuPool; nil when it names none).
func gpuPools(w *workload.Workload) (*regexp.Regexp, error) {
	if w.Node.GPUPool == "" {
		return nil, nil
	}
	return wire.CompileNodePools("^(" + regexp.QuoteMeta(w.Node.GPUPool) + ")-[0-9]+$")
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
	scfg.Partitions, scfg.SessionTTL, scfg.NodePools = s.cfg.Partitions, 3, s.pools
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
	parts, pools := s.cfg.Partitions, s.pools
	pr, err := shardproc.New(ctx, shardproc.Options{Name: name, Etcd: cli, Shard: scfg, Coordinator: ccfg, Scheduler: sc,
		Status: status.DefaultConfig(), Logger: s.cfg.Logger}, shardproc.Ports{
		Observer: &s.reserves,
		Recorder: &Recorder{c: s.cl}, Status: &StatusWriter{c: s.cl, shard: name}, Groups: &Groups{c: s.cl}, Evictor: evictor,
		NodeState: s.cl.NodeState,
		Binder: &Binder{c: s.cl, shard: name, othersHold: func(node string) bool {
			key := wire.PartitionKey(wire.PartitionIn(node, parts, pools))
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

// stopAll stops every live shard and returns them. Every shard's loops
// end before any is waited for, so none takes over what another held
// while it stops.
func (s *sim) stopAll() []*shardProc {
	var stopped []*shardProc
	for _, p := range s.procs {
		if !p.dead {
			p.dead = true
			s.cl.Unsubscribe(p.Cache)
			p.cancel()
			stopped = append(stopped, p)
		}
	}
	s.setHolders()
	for _, p := range stopped {
		p.Wait()
		p.Close()
		_ = p.cli.Close()
	}
	return stopped
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

// ownersSettled reports whether every key is held by the shard the ring
// of the live shards assigns it to, as every live shard sees that ring.
func (s *sim) ownersSettled() bool {
	live := s.live()
	names := make([]string, 0, len(live))
	holder := map[string]string{}
	for _, p := range live {
		names = append(names, p.name)
		for _, k := range p.Shard.Owned() {
			if _, twice := holder[k]; twice {
				return false // mid hand-over
			}
			holder[k] = p.name
		}
	}
	ring := shard.NewRing(names)
	for _, p := range live {
		if r := p.Shard.Ring(); !slices.Equal(r.Members(), ring.Members()) {
			return false
		}
	}
	keys := make([]string, 0, s.keyCount())
	for i := range s.cfg.Partitions {
		keys = append(keys, wire.PartitionKey(i))
	}
	for _, q := range s.tree.Names() {
		keys = append(keys, wire.QueueKey(q))
	}
	for _, k := range keys {
		if owner, ok := ring.Owner(k); !ok || holder[k] != owner {
			return false
		}
	}
	return true
}

// waitSettled waits, up to limit, until ownersSettled; past the limit the
// run goes on and says so on its progress stream.
func (s *sim) waitSettled(ctx context.Context, limit time.Duration) {
	if !waitUntil(ctx, limit, s.ownersSettled) && ctx.Err() == nil {
		fmt.Fprintf(s.cfg.Progress, "sim: keys still moving between shards after %s; the run starts anyway\n", limit)
	}
}

func (s *sim) waitOwners(ctx context.Context, limit time.Duration) error {
	if waitUntil(ctx, limit, s.ownersComplete) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("shards did not take every key within %s", limit)
}

// waitUntil polls cond every 20 ms until it holds (true), limit passes or
// ctx ends (false).
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
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

// drive runs the virtual clock until the end of the run, then fills the
// run's figures. Each step submits the jobs that arrived (step.go),
// injects the chaos faults due (faults.go), syncs the shards' books,
// cycles the shards, follows the recovery from the faults, samples
// (sample.go) and advances the clock; at the end come the invariants and
// notes (invariants.go).
func (s *sim) drive(ctx context.Context, rss0 float64) (report.Run, error) {
	d := s.newDriver(rss0)
	for {
		if err := ctx.Err(); err != nil {
			return d.run, err
		}
		if d.over() {
			break
		}
		t0 := time.Now()
		d.submit(t0)
		if err := d.injectFaults(ctx); err != nil {
			return d.run, err
		}
		d.syncBooks()
		var charged time.Duration
		if s.cfg.VirtualCPU {
			charged = d.cycleAlone(ctx)
		} else {
			s.cycle(ctx)
		}
		d.trackRecovery()
		d.takeSample()
		d.progress()
		d.advance(t0, charged)
	}
	e := d.measureEnd()
	d.stepFigures(e)
	d.sampleFigures(e.mem)
	d.invariants(e.st)
	d.notes(e.st, e.mem)
	if err := d.chaosFigures(ctx, e.sm); err != nil {
		return d.run, err
	}
	if s.cfg.ShardMemory {
		d.run.ShardLiveHeapMiB = s.shardLiveHeaps()
		d.run.Notes = append(d.run.Notes, fmt.Sprintf("live heap of each shard at the end, MiB, in the order they were stopped (the heap's fall as each stopped): %.0f", d.run.ShardLiveHeapMiB))
	}
	return d.run, nil
}

func (s *sim) anyQuota() *coordinator.Client {
	for _, p := range s.live() {
		return p.Quota
	}
	return s.procs[0].Quota
}
