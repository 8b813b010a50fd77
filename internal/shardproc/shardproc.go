// Package shardproc assembles one shard process: the coordinator
// participant, membership and ownership, the claim store, the quota client,
// the cache, the status batcher and the scheduler, and the loops that tie
// them (ownership → the cache's books, with out-of-sync nodes rebuilt from
// the truth; the valid queue tree → the coordinator). The daemon and the
// simulated bench both build their shards here, with only the
// environment's ports swapped (binder, status writer, recorder, groups,
// evictor, the truth of a node, the clock), so the bench measures the
// wiring that ships. It holds no global state.
package shardproc

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
	"github.com/shardsched/shardsched/wire"
)

// Options configure one shard process. Name is the shard's name in every
// part; Shard.Partitions is the one setting of the number of node
// partitions (the scheduler's is taken from it).
type Options struct {
	Name string
	// Etcd is the process's etcd client; the caller closes it after Wait.
	Etcd        *clientv3.Client
	Shard       shard.Config
	Coordinator coordinator.Config
	Scheduler   scheduler.Config
	Status      status.Config
	Logger      *slog.Logger
	Tracer      trace.TracerProvider // nil: no tracing
	// HandoverQuiet is how long a partition must have been held before its
	// nodes' books are kept and placed on (DefaultHandoverQuiet when 0):
	// the previous holder's last binds ended before its lease could expire
	// (shard.Shard.UseUntil), and this is the allowance for this shard's
	// informers to show them.
	HandoverQuiet time.Duration
}

// DefaultHandoverQuiet is Options.HandoverQuiet's default.
const DefaultHandoverQuiet = time.Second

// Ports are what the environment provides: the API server's or the
// simulator's.
type Ports struct {
	Binder   scheduler.Binder
	Recorder scheduler.Recorder
	Status   status.Writer
	Groups   scheduler.Groups   // nil: no implicit PodGroups are created
	Evictor  scheduler.Evictor  // nil: quota is never taken back
	Observer scheduler.Observer // nil: measurements dropped
	// NodeState calls apply with the truth about one node (its object and
	// the tasks bound to it), to rebuild the books of a node out of sync,
	// taking no other event of its pods into the cache in between; false
	// (apply not called) when it is not known or cannot be read. Called
	// from the ownership loop.
	NodeState func(name string, apply func(node api.Node, tasks []api.Task)) bool
	// OnOutOfSync is told each node whose books go out of sync (nil: not).
	OnOutOfSync func(node, reason string)
}

// Proc is one assembled shard process. Its parts are exported for the
// environment to feed (Cache) and to read (the rest); its loops run between
// Start and the end of the context given to it, and Wait returns once they
// have stopped.
type Proc struct {
	Name   string
	Coord  *coordinator.Server
	Shard  *shard.Shard
	Quota  *coordinator.Client
	Claims *shard.Claims
	Cache  *cache.Cache
	Status *status.Batcher
	Sched  *scheduler.Scheduler

	log        *slog.Logger
	partitions int
	pools      *regexp.Regexp
	quiet      time.Duration
	nodeState  func(string, func(api.Node, []api.Task)) bool
	// pushTree holds the latest valid queue specs not yet sent; a newer
	// list replaces an unsent one (pushMu makes drain-and-send atomic).
	pushTree   chan []api.QueueSpec
	pushMu     sync.Mutex
	treePushes atomic.Int64
	// owned is what the books were last set to (ownership loop only).
	owned []string
	wg    sync.WaitGroup
}

// New builds every part; nothing runs until Start. On error what was
// built is stopped.
func New(ctx context.Context, o Options, p Ports) (_ *Proc, err error) {
	if o.Etcd == nil {
		return nil, errors.New("shardproc: an etcd client is needed")
	}
	if p.Binder == nil || p.Recorder == nil || p.Status == nil || p.NodeState == nil {
		return nil, errors.New("shardproc: the binder, recorder, status writer and node truth ports are needed")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	log := o.Logger.With("shard", o.Name)
	pr := &Proc{Name: o.Name, log: log, nodeState: p.NodeState, pushTree: make(chan []api.QueueSpec, 1), quiet: o.HandoverQuiet}
	if pr.quiet <= 0 {
		pr.quiet = DefaultHandoverQuiet
	}
	defer func() {
		if err == nil {
			return
		}
		if pr.Quota != nil {
			pr.Quota.Close()
		}
		if pr.Shard != nil {
			pr.Shard.Crash()
		}
		if pr.Coord != nil {
			done, stop := context.WithCancel(context.Background())
			stop()
			_ = pr.Coord.Run(done) // serves nothing, closes its listener
		}
	}()

	ccfg := o.Coordinator
	ccfg.Name, ccfg.Logger, ccfg.Tracer = o.Name, log, o.Tracer
	if pr.Coord, err = coordinator.NewServer(o.Etcd, ccfg); err != nil {
		return nil, err
	}
	scfg := o.Shard
	scfg.Name, scfg.APIAddr, scfg.Logger = o.Name, pr.Coord.Addr(), log
	if pr.Shard, err = shard.New(ctx, o.Etcd, scfg); err != nil {
		return nil, err
	}
	pr.partitions, pr.pools = pr.Shard.Partitions(), pr.Shard.NodePools()
	qcfg := coordinator.DefaultClientConfig()
	qcfg.Prefix, qcfg.Shard, qcfg.LeaseFunc, qcfg.Tracer, qcfg.Token = ccfg.Prefix, o.Name, pr.Shard.Lease, o.Tracer, ccfg.Token
	// While this process's participant leads, the shard's calls go to it
	// in-process (no HTTP, no JSON).
	qcfg.Local = pr.Coord
	if pr.Quota, err = coordinator.NewClient(o.Etcd, qcfg); err != nil {
		return nil, err
	}
	pr.Claims = shard.NewClaims(pr.Shard)
	pr.Cache = cache.New(cache.Options{KeepsBooks: func(string) bool { return false }, OnOutOfSync: p.OnOutOfSync})
	stCfg := o.Status
	stCfg.Tracer = o.Tracer
	// Queue status is written only while this shard holds the queue's
	// record (one writer per Queue, also across an ownership change).
	if pr.Status, err = status.New(status.FenceQueues(p.Status, shard.QueueUse{Shard: pr.Shard}), stCfg); err != nil {
		return nil, err
	}
	sc := o.Scheduler
	sc.Logger, sc.Tracer, sc.Partitions, sc.NodePools = log, o.Tracer, pr.partitions, pr.pools
	pr.Sched, err = scheduler.New(sc, scheduler.Deps{
		Cache: pr.Cache, Ownership: pr.Shard, Quota: pr.Quota, Binder: p.Binder, Recorder: p.Recorder, Status: pr.Status,
		Groups: p.Groups, Evictor: p.Evictor, Observer: p.Observer, Peers: pr.Shard, Claims: pr.Claims,
	})
	if err != nil {
		return nil, err
	}
	return pr, nil
}

// The ports of the scheduling core, checked where they are wired.
var (
	_ scheduler.Ownership = (*shard.Shard)(nil)
	_ scheduler.Peers     = (*shard.Shard)(nil)
	_ scheduler.Claims    = (*shard.Claims)(nil)
	_ scheduler.Quota     = (*coordinator.Client)(nil)
)

// Go runs f until ctx ends, as one of the process's loops (Wait waits for
// it); an error other than the end of ctx is logged. The environment runs
// its own loops (an event source's reporter, a status Lease) with it.
func (pr *Proc) Go(ctx context.Context, f func(context.Context) error) {
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
			pr.log.Error("component stopped", "err", err)
		}
	}()
}

// Start runs the coordinator participant, membership and ownership, and
// the claim store until ctx ends: what must run before the environment's
// event source starts.
func (pr *Proc) Start(ctx context.Context) {
	pr.Go(ctx, pr.Coord.Run)
	pr.Go(ctx, pr.Shard.Run)
	pr.Go(ctx, pr.Claims.Run)
}

// Schedule runs the rest until ctx ends: the status batcher, the queue
// tree's pushes to the coordinator, and either the scheduling loop with
// the ownership loop (driven false: every CycleInterval and 100 ms), or
// only the bind workers (driven: the caller calls SyncOwnership and
// Sched.Cycle itself, as the simulated bench does on its virtual clock).
func (pr *Proc) Schedule(ctx context.Context, driven bool) {
	pr.Go(ctx, pr.Status.Run)
	pr.Go(ctx, pr.pushLoop)
	if driven {
		wait := pr.Sched.StartBinders(ctx)
		pr.wg.Add(1)
		go func() { defer pr.wg.Done(); <-ctx.Done(); wait() }()
		return
	}
	pr.Go(ctx, pr.Sched.Run)
	pr.Go(ctx, func(ctx context.Context) error {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				pr.SyncOwnership()
			}
		}
	})
}

// Wait returns once every loop started by Start, Schedule and Go has
// stopped (after their context ended).
func (pr *Proc) Wait() { pr.wg.Wait() }

// Close releases the quota client; call it after Wait.
func (pr *Proc) Close() { pr.Quota.Close() }

// SyncOwnership gives the cache the nodes whose partitions this shard has
// held for HandoverQuiet and rebuilds the books of nodes out of sync from
// the truth. Called by one goroutine at a time (the ownership loop, or the
// driver).
func (pr *Proc) SyncOwnership() {
	held := pr.Shard.OwnedFor(pr.quiet)
	if !slices.Equal(held, pr.owned) {
		pr.owned = held
		set := make(map[string]bool, len(held))
		for _, k := range held {
			set[k] = true
		}
		parts, pools := pr.partitions, pr.pools
		pr.Cache.SetKeepsBooks(func(node string) bool { return set[wire.PartitionKey(wire.PartitionIn(node, parts, pools))] })
	}
	for _, n := range pr.Cache.OutOfSync() {
		pr.nodeState(n, pr.Cache.Rebuild)
	}
}

// SetTree gives the valid queue tree to the shard (the queues it may own),
// to the scheduler, and to the coordinator (sent by the push loop, only
// when it differs from the last one accepted). Safe for concurrent use.
func (pr *Proc) SetTree(tree *api.Tree) {
	pr.Shard.SetQueues(tree.Names())
	pr.Sched.SetTree(tree)
	pr.pushMu.Lock()
	defer pr.pushMu.Unlock()
	select {
	case <-pr.pushTree:
	default:
	}
	pr.pushTree <- tree.Specs()
}

// TreePushes is how many times this process has sent its queue tree to the
// coordinator: once per change of the valid queue specs (and per retry of
// a failed push), never per Queue status write.
func (pr *Proc) TreePushes() int64 { return pr.treePushes.Load() }

// pushLoop sends the latest valid queue tree to the coordinator
// (idempotent from every shard) when it differs from the last one
// accepted; a failed push is retried with backoff until accepted or
// replaced.
func (pr *Proc) pushLoop(ctx context.Context) error {
	var pushed, pending []api.QueueSpec
	havePushed, havePending := false, false
	var retry <-chan time.Time
	const first = 200 * time.Millisecond
	backoff := first
	for {
		select {
		case <-ctx.Done():
			return nil
		case specs := <-pr.pushTree:
			pending, havePending = specs, true
		case <-retry:
		}
		retry = nil
		if !havePending || (havePushed && api.EqualSpecs(pending, pushed)) {
			havePending = false
			continue
		}
		pr.treePushes.Add(1)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := pr.Quota.SetQueues(cctx, pending)
		cancel()
		if err != nil {
			pr.log.Warn("queue tree not accepted by the coordinator; retrying", "err", err, "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		pushed, havePushed, havePending, backoff = pending, true, false, first
	}
}
