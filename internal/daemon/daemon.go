// Package daemon wires one shard process: the etcd client, the coordinator
// participant, membership and ownership, the cache fed by informers, the
// scheduler, the status batcher, the binder and the event recorder. The
// shard binary and the integration tests run it; it holds no global state.
package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/internal/shardproc"
	"github.com/shardsched/shardsched/internal/version"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
	"github.com/shardsched/shardsched/wire"
)

// The Kubernetes adapters of the scheduler's ports (the rest are checked
// in internal/shardproc, where they are wired).
var (
	_ scheduler.Binder  = (*kube.Binder)(nil)
	_ scheduler.Evictor = (*kube.Evictor)(nil)
)

// Options configure one shard process.
type Options struct {
	Name          string
	REST          *rest.Config
	EtcdEndpoints []string
	EtcdTLS       *tls.Config // nil: plain
	// HTTPAddr serves /metrics, /healthz and /readyz; empty disables it.
	HTTPAddr string
	// Profiling also serves Go's profiles (net/http/pprof) under
	// /debug/pprof/ on HTTPAddr, as kube-scheduler's --profiling does.
	Profiling   bool
	Shard       shard.Config // Name and APIAddr are set here; Partitions is the one setting of node partitions (the scheduler takes it)
	Coordinator coordinator.Config
	Scheduler   scheduler.Config
	Status      status.Config
	Logger      *slog.Logger
	// Tracer is the tracer provider (telemetry.Setup); nil: no tracing.
	Tracer trace.TracerProvider
	// NoImplicitGroups: do not create PodGroups for pods that name none
	// (Volcano's podgroup controller runs beside the shards and does).
	NoImplicitGroups bool
	// StatusNamespace is where the shard keeps its status Lease for
	// operators (kube.PublishShardStatus); empty: none is kept.
	StatusNamespace string
	// StatusEvery is how often that Lease is renewed (10 s when zero); it
	// is valid for three times as long.
	StatusEvery time.Duration
	// JSON makes the built-in objects (pods, nodes, events, bindings)
	// travel as JSON instead of protobuf (for comparing the two).
	JSON bool
	// ListFirst makes the pod and node informers list first, then watch,
	// instead of taking their initial state as a stream of watch events
	// (client-go's watch-list, its default since 1.35, which kube-scheduler
	// uses too): measured, a faster start for a higher peak of memory while
	// the list is decoded (the README's restart figures).
	ListFirst bool
}

// HTTPAddr is the address /metrics, /healthz and /readyz are served on
// ("" when Options.HTTPAddr was empty): Options.HTTPAddr with the port the
// system chose when it named port 0.
func (d *Daemon) HTTPAddr() string { return d.httpAddr }

// Daemon is a running shard process.
type Daemon struct {
	opts   Options
	Shard  *shard.Shard
	Coord  *coordinator.Server
	Cache  *cache.Cache
	Status *status.Batcher
	Quota  *coordinator.Client
	Source *kube.Source
	// Claims are the claim records of jobs handed between shards.
	Claims *shard.Claims

	// httpAddr is the address the HTTP endpoints listen on (HTTPAddr with
	// its port chosen when it asked for port 0); set before ready is called.
	httpAddr string

	sched    *scheduler.Scheduler
	obs      *promObserver
	registry *prometheus.Registry
	proc     *shardproc.Proc
	steps    *startup
	// synced is set once the informers have handed their initial lists to
	// the cache and scheduling has started (/readyz answers 503 before).
	synced atomic.Bool
}

// Startup returns how long each step of the process's start took, in
// order (the last, "scheduling", ends once /readyz can answer).
func (d *Daemon) Startup() []StartStep { return d.steps.Steps() }

// QueueTreePushes returns how many times this process has sent its queue
// tree to the coordinator: once per change of the valid queue specs (and
// per retry of a failed push), never per Queue status write.
func (d *Daemon) QueueTreePushes() int64 { return d.proc.TreePushes() }

// Run starts every part and blocks until ctx ends, then stops them in
// order (scheduler, status flush, ownership release, coordinator).
func Run(ctx context.Context, opts Options, ready func(*Daemon)) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("shard", opts.Name)
	steps := newStartup(log)
	cli, err := clientv3.New(clientv3.Config{Endpoints: opts.EtcdEndpoints, DialTimeout: 5 * time.Second, TLS: opts.EtcdTLS, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	// Built-in objects travel as protobuf, as kube-scheduler's do:
	// decoding every pod update from JSON is a large share of a shard's
	// CPU. Volcano's objects are custom resources: JSON only.
	core := rest.CopyConfig(opts.REST)
	if !opts.JSON {
		core.ContentType = runtime.ContentTypeProtobuf
		core.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	cs, err := kubernetes.NewForConfig(core)
	if err != nil {
		return err
	}
	vc, err := volcano.NewForConfig(opts.REST)
	if err != nil {
		return err
	}

	steps.done("clients")
	recorder := kube.NewRecorder(cs, opts.Scheduler.SchedulerName)
	defer recorder.Shutdown()
	statusWriter := kube.NewStatusWriter(vc, "shardsched")
	obs := newPromObserver()
	var groups scheduler.Groups
	if !opts.NoImplicitGroups {
		groups = kube.NewGroups(vc)
	}
	// The source is built once the process is (it feeds its cache); the
	// truth of a node is read from it.
	var src *kube.Source
	pr, err := shardproc.New(ctx, shardproc.Options{Name: opts.Name, Etcd: cli, Shard: opts.Shard, Coordinator: opts.Coordinator,
		Scheduler: opts.Scheduler, Status: opts.Status, Logger: opts.Logger, Tracer: opts.Tracer}, shardproc.Ports{
		Binder: kube.NewBinder(cs), Recorder: recorder, Status: statusWriter, Groups: groups, Evictor: kube.NewEvictor(cs, recorder),
		Observer: obs,
		// A closure: src is set once the process is built (a method value
		// would bind the nil it is now).
		NodeState: func(name string, apply func(api.Node, []api.Task)) bool {
			return src.NodeState(name, apply)
		},
		OnOutOfSync: func(node, reason string) { log.Warn("node out of sync", "node", node, "reason", reason) },
	})
	if err != nil {
		return err
	}
	defer pr.Close()
	sh, coord, c := pr.Shard, pr.Coord, pr.Cache
	steps.done("parts", "gossip", sh.GossipAddr(), "coordinator", coord.Addr())

	// The queue tree is validated queue by queue: every valid queue is
	// scheduled; each one left out (with its subtree) is reported on its
	// Queue object by its owner shard, and logged.
	var reporter *kube.QueueReporter // set before the source starts
	onQueues := func(specs []api.QueueSpec, bad map[string]error) {
		tree, left := api.BuildTreeExcluding(specs, bad)
		for _, n := range slices.Sorted(maps.Keys(left)) {
			log.Warn("queue left out of the queue tree", "queue", n, "err", left[n])
		}
		pr.SetTree(tree)
		reporter.Report(left)
	}
	var informed kubernetes.Interface = cs
	if opts.ListFirst {
		informed = kube.ListFirst(cs)
	}
	src = kube.NewSource(informed, vc, c, onQueues, log)
	reporter = kube.NewQueueReporter(statusWriter, recorder, src, func(q string) bool {
		owner, ok := sh.Ring().Owner(wire.QueueKey(q))
		return ok && owner == opts.Name
	}, log)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr.Start(rctx)
	// The endpoints are served from here on: /healthz answers during a
	// long warm-up (a liveness probe does not kill a shard listing 100k
	// pods), /metrics shows the start-up's steps, --profiling profiles it;
	// /readyz waits for the informers and the ring.
	d := &Daemon{opts: opts, Shard: sh, Coord: coord, Cache: c, Status: pr.Status, Quota: pr.Quota, Source: src, Claims: pr.Claims, sched: pr.Sched,
		obs: obs, proc: pr, steps: steps}
	d.registry = d.registerMetrics()
	if opts.HTTPAddr != "" {
		ln, err := net.Listen("tcp", opts.HTTPAddr)
		if err != nil {
			cancel()
			pr.Wait()
			return fmt.Errorf("--http-addr %s: %w", opts.HTTPAddr, err)
		}
		d.httpAddr = ln.Addr().String()
		hs := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() { defer close(served); _ = hs.Serve(ln) }()
		defer func() {
			// Requests in flight (a scrape, a profile) get a moment to
			// end; the server's goroutine is joined either way.
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = hs.Shutdown(sctx)
			scancel()
			_ = hs.Close()
			<-served
		}()
	}
	steps.done("serving", "addr", d.httpAddr)
	pr.Go(rctx, reporter.Run)
	// Volcano creates root and default when missing; so do we, without
	// ever overwriting an operator's. A failure does not stop the shard
	// (the tree has implicit root and default queues either way).
	ectx, ecancel := context.WithTimeout(rctx, 10*time.Second)
	if err := kube.EnsureDefaultQueues(ectx, vc); err != nil {
		log.Warn("cannot create the root and default queues", "err", err)
	}
	ecancel()
	steps.done("default-queues")
	if err := src.Start(rctx); err != nil {
		cancel()
		src.Shutdown()
		pr.Wait()
		if ctx.Err() != nil {
			// Stopped while warming up (SIGTERM during a long initial
			// list): a clean stop, not a failure.
			log.Info("stopped before the informers had synced", "err", err)
			return nil
		}
		return err
	}
	defer src.Shutdown()
	cs0 := c.Stats()
	steps.done("informers", "nodes", cs0.Nodes, "tasks", cs0.Tasks, "jobs", cs0.Jobs)
	pr.Schedule(rctx, false)
	if opts.StatusNamespace != "" {
		pr.Go(rctx, func(ctx context.Context) error {
			publishStatus(ctx, cs, opts, sh, coord, c, pr.Sched, log)
			return nil
		})
	}
	d.synced.Store(true)
	steps.done("scheduling")
	if ready != nil {
		ready(d)
	}
	<-ctx.Done()
	cancel()
	pr.Wait()
	return nil
}

// publishStatus keeps the shard's status Lease until ctx ends: what it
// holds, whether it leads the coordinator, its binds. A failed write is
// logged and tried again at the next tick; scheduling never waits for it.
func publishStatus(ctx context.Context, cs kubernetes.Interface, opts Options, sh *shard.Shard, coord *coordinator.Server,
	c *cache.Cache, sched *scheduler.Scheduler, log *slog.Logger) {
	every := opts.StatusEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	started := time.Now()
	var lastBinds int64
	var lastAt time.Time // zero until the first record: no rate yet
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st := kube.ShardStatus{Shard: opts.Name, Version: version.String(), GossipAddr: sh.GossipAddr(),
			CoordinatorLeader: coord.IsLeader(), PartitionsTotal: opts.Shard.Partitions, Started: started}
		for _, m := range sh.Members() {
			st.Members = append(st.Members, m.ID)
		}
		slices.Sort(st.Members)
		for _, k := range sh.Owned() {
			switch kind, name, ok := wire.ParseKey(k); {
			case !ok:
			case kind == wire.KindPartition:
				st.Partitions++
			case kind == wire.KindQueue:
				st.QueuesHeld++
				if len(st.Queues) < 100 {
					st.Queues = append(st.Queues, name)
				}
			}
		}
		st.Nodes = c.Stats().BookedNodes
		ss := sched.Stats()
		st.Binds, st.BindFailures, st.OwnershipChanges = ss.Binds, ss.BindFailures, sh.OwnershipChanges()
		now := time.Now()
		if dt := now.Sub(lastAt).Seconds(); !lastAt.IsZero() && dt > 0 {
			st.BindsPerSecond = float64(st.Binds-lastBinds) / dt
		}
		lastBinds, lastAt = st.Binds, now
		pctx, cancel := context.WithTimeout(ctx, every)
		if err := kube.PublishShardStatus(pctx, cs, opts.StatusNamespace, st, 3*every); err != nil && ctx.Err() == nil {
			log.Warn("shard status lease not written", "namespace", opts.StatusNamespace, "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
