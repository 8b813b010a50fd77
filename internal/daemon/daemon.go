// Package daemon wires one shard process: the etcd client, the coordinator
// participant, membership and ownership, the cache fed by informers, the
// scheduler, the status batcher, the binder and the event recorder. The
// shard binary and the integration tests run it; it holds no global state.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
)

// Options configure one shard process.
type Options struct {
	Name          string
	REST          *rest.Config
	EtcdEndpoints []string
	EtcdTLS       *tls.Config // nil: plain
	// HTTPAddr serves /metrics, /healthz and /readyz; empty disables it.
	HTTPAddr    string
	Shard       shard.Config // Name, EtcdPrefix and Partitions are filled from here if empty
	Coordinator coordinator.Config
	Scheduler   scheduler.Config
	Status      status.Config
	Logger      *slog.Logger
	// Tracer is the tracer provider (telemetry.Setup); nil: no tracing.
	Tracer trace.TracerProvider
}

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

	sched    *scheduler.Scheduler
	registry *prometheus.Registry
}

// Run starts every part and blocks until ctx ends, then stops them in
// order (scheduler, status flush, ownership release, coordinator).
func Run(ctx context.Context, opts Options, ready func(*Daemon)) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("shard", opts.Name)
	cli, err := clientv3.New(clientv3.Config{Endpoints: opts.EtcdEndpoints, DialTimeout: 5 * time.Second, TLS: opts.EtcdTLS, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	cs, err := kubernetes.NewForConfig(opts.REST)
	if err != nil {
		return err
	}
	vc, err := volcano.NewForConfig(opts.REST)
	if err != nil {
		return err
	}

	ccfg := opts.Coordinator
	ccfg.Name = opts.Name
	ccfg.Logger = log
	ccfg.Tracer = opts.Tracer
	coord, err := coordinator.NewServer(cli, ccfg)
	if err != nil {
		return err
	}
	scfg := opts.Shard
	scfg.Name = opts.Name
	scfg.APIAddr = coord.Addr()
	scfg.Logger = log
	sh, err := shard.New(ctx, cli, scfg)
	if err != nil {
		return err
	}
	qcfg := coordinator.DefaultClientConfig()
	qcfg.Prefix, qcfg.Shard, qcfg.LeaseFunc, qcfg.Tracer = ccfg.Prefix, opts.Name, sh.Lease, opts.Tracer
	quota, err := coordinator.NewClient(cli, qcfg)
	if err != nil {
		return err
	}
	defer quota.Close()

	parts := scfg.Partitions
	ownsFrom := func(held []string) func(string) bool {
		set := make(map[string]bool, len(held))
		for _, k := range held {
			set[k] = true
		}
		return func(node string) bool { return set[shard.PartitionKey(shard.Partition(node, parts))] }
	}
	c := cache.New(cache.Options{Owns: ownsFrom(nil), OnOutOfSync: func(node, reason string) {
		log.Warn("node out of sync", "node", node, "reason", reason)
	}})
	stCfg := opts.Status
	stCfg.Tracer = opts.Tracer
	batcher, err := status.New(kube.NewStatusWriter(vc, "shardsched"), stCfg)
	if err != nil {
		return err
	}
	rec := kube.NewRecorder(cs, opts.Scheduler.SchedulerName)
	defer rec.Shutdown()

	var sched *scheduler.Scheduler // set before the source starts
	var treeMu sync.Mutex
	pushTree := make(chan []api.QueueSpec, 1)
	onQueues := func(specs []api.QueueSpec) {
		tree, err := api.BuildTree(specs)
		if err != nil {
			log.Error("queue tree rejected; keeping the previous one", "err", err)
			return
		}
		sh.SetQueues(tree.Names())
		sched.SetTree(tree)
		treeMu.Lock()
		select {
		case <-pushTree:
		default:
		}
		pushTree <- specs
		treeMu.Unlock()
	}
	src := kube.NewSource(cs, vc, c, onQueues, log)

	schedCfg := opts.Scheduler
	schedCfg.Logger = log
	schedCfg.Tracer = opts.Tracer
	claims := shard.NewClaims(sh)
	sched, err = scheduler.New(schedCfg, scheduler.Deps{
		Cache: c, Ownership: sh, Quota: quota, Binder: kube.NewBinder(cs), Recorder: rec, Status: batcher, Groups: kube.NewGroups(vc),
		Peers: sh, Claims: claims,
	})
	if err != nil {
		return err
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	run := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(rctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("component stopped", "err", err)
			}
		}()
	}
	run(coord.Run)
	run(sh.Run)
	run(claims.Run)
	if err := src.Start(rctx); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	defer src.Shutdown()
	run(batcher.Run)
	run(sched.Run)
	// The queue tree goes to the coordinator (idempotent from every shard).
	run(func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case specs := <-pushTree:
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := quota.SetQueues(cctx, specs); err != nil {
					log.Warn("queue tree not accepted by the coordinator", "err", err)
				}
				ccancel()
			}
		}
	})
	// Ownership → cache books; out-of-sync nodes are rebuilt from the
	// informers (the API server's state).
	run(func(ctx context.Context) error {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var last []string
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			held := sh.Owned()
			if !slices.Equal(held, last) {
				last = held
				c.SetOwns(ownsFrom(held))
			}
			for _, n := range c.OutOfSync() {
				if node, tasks, err := src.NodeState(n); err == nil {
					c.Rebuild(node, tasks)
				}
			}
		}
	})
	d := &Daemon{opts: opts, Shard: sh, Coord: coord, Cache: c, Status: batcher, Quota: quota, Source: src, Claims: claims, sched: sched}
	d.registry = d.registerMetrics()
	if opts.HTTPAddr != "" {
		ln, err := net.Listen("tcp", opts.HTTPAddr)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("--http-addr %s: %w", opts.HTTPAddr, err)
		}
		hs := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}
	if ready != nil {
		ready(d)
	}
	<-ctx.Done()
	cancel()
	wg.Wait()
	return nil
}
