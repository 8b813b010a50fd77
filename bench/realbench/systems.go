package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/daemon"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
)

// benchEnv is what every run shares: the control plane and the etcd the
// shardsched shards coordinate through.
type benchEnv struct {
	rest       *rest.Config
	cs         kubernetes.Interface
	kubeconfig string // admin kubeconfig of the control plane
	dir        string // control plane state directory, removed at the end
	etcd       []string
	// controlPIDs are the control plane's processes by name, whose CPU
	// each run reports.
	controlPIDs map[string]int
	// dumpMetrics prints each shard's metrics when its run ends.
	dumpMetrics bool
	// profileSeconds, when positive, is how long a CPU profile of each
	// shard process is taken for from the run's clock start, written into
	// profileDir.
	profileSeconds int
	// restarts is how many times the shardsched-proc-N systems restart
	// shard-0 once their pods are bound (restart warm-up), each timed.
	restarts int
	// apiProfileSeconds, when positive, is how long a CPU profile of
	// kube-apiserver is taken for from each stream run's clock start, also
	// written into profileDir.
	apiProfileSeconds int
	profileDir        string
	// shardschedBin is cmd/shardsched, built when a run needs it.
	shardschedBin string
}

// profilePath is where a run's CPU profile of name is written.
func (env *benchEnv) profilePath(run runSpec, name string) string {
	return filepath.Join(env.profileDir, fmt.Sprintf("cpu-%s-%s.pb.gz", run.namespace, name))
}

// runSpec names one run: the namespace its pods live in and the
// schedulerName they ask for.
type runSpec struct {
	index     int // unique in the invocation
	namespace string
	schedName string
	pods      int
}

// system is one scheduler under test.
type system interface {
	// start launches the system for the pods of run.schedName and returns
	// once it is ready to schedule. On error nothing is left running.
	start(ctx context.Context, env *benchEnv, run runSpec) (*instance, error)
}

// instance is a started system. Its functions are called from the
// goroutine that started it.
type instance struct {
	// inProcess is true when the system runs inside the bench process: its
	// CPU and RSS then include the harness (pod creators and watch).
	inProcess bool
	// cpu returns the CPU time used since start was called.
	cpu func() time.Duration
	// check returns an error once the system has died.
	check func() error
	// ready, when set, waits until every part of the system says it is
	// ready (its /readyz), at most timeout; sinceStart then gives the CPU
	// its processes used since they started (start-up included, which cpu
	// leaves out) and the largest peak RSS among them.
	ready      func(ctx context.Context, timeout time.Duration) error
	sinceStart func() (cpu time.Duration, peakRSSMiB float64)
	// stop ends the system, waits for it and returns its peak RSS in KiB.
	stop func() (peakRSSKiB int64)
	// finish, when set, is called once the run's pods are bound, before
	// stop: what it returns goes into the run.
	finish func(ctx context.Context) (finished, error)
	// clockStarted, when set, is called as the run's clock starts (the
	// system may start measuring itself there: profiles it takes go into
	// the run's set, whose notes the run waits for before finish).
	clockStarted func(ctx context.Context, profiles *profileSet)
}

// finished is what a system measures of itself once the run's pods are
// bound.
type finished struct {
	notes []string
	// restarts are a shard's restarts, each timed, and coldStart the
	// baseline's cold start against the same cluster (nil when it did not
	// start: a note says why).
	restarts  []report.Restart
	coldStart *report.Restart
}

// sysSpec is a system as named on the command line.
type sysSpec struct {
	name   string
	shards int // shardsched only
	impl   system
	// again marks the baseline's second run of a mode (-baseline-again);
	// its name is the baseline's with againSuffix.
	again bool
}

// againSuffix ends the name of the baseline's second run of a mode.
const againSuffix = "-again"

// runAgain is s's second run of a mode: its own name (so its own namespace
// and schedulerName), the same system.
func (s sysSpec) runAgain() sysSpec {
	s.name += againSuffix
	s.again = true
	return s
}

// baseName is the system's name as listed in -systems (the baseline's,
// for its second run).
func (s sysSpec) baseName() string {
	if s.again {
		return strings.TrimSuffix(s.name, againSuffix)
	}
	return s.name
}

func parseSystem(name string) (sysSpec, error) {
	switch {
	case name == "binder":
		return sysSpec{name: name, impl: binderSystem{workers: 32}}, nil
	case strings.HasPrefix(name, "shardsched-proc-"):
		var n int
		if _, err := fmt.Sscanf(name, "shardsched-proc-%d", &n); err != nil || n < 1 || n > 16 || fmt.Sprintf("shardsched-proc-%d", n) != name {
			return sysSpec{}, fmt.Errorf("system %q: want shardsched-proc-N with N in 1..16", name)
		}
		return sysSpec{name: name, shards: n, impl: procSystem{shards: n}}, nil
	case strings.HasPrefix(name, "shardsched-"):
		// shardsched-N[-json][-bindW]
		var n, workers int
		base := name
		if i := strings.LastIndex(base, "-bind"); i > 0 {
			if _, err := fmt.Sscanf(base[i:], "-bind%d", &workers); err != nil || workers < 1 || workers > 1024 || fmt.Sprintf("-bind%d", workers) != base[i:] {
				return sysSpec{}, fmt.Errorf("system %q: -bindW wants W bind workers in 1..1024", name)
			}
			base = base[:i]
		}
		base, json := strings.CutSuffix(base, "-json")
		if _, err := fmt.Sscanf(base, "shardsched-%d", &n); err != nil || n < 1 || n > 16 || fmt.Sprintf("shardsched-%d", n) != base {
			return sysSpec{}, fmt.Errorf("system %q: want shardsched-N, shardsched-N-json or either with -bindW, N in 1..16", name)
		}
		return sysSpec{name: name, shards: n, impl: shardschedSystem{shards: n, json: json, bindWorkers: workers}}, nil
	case name == "kube-scheduler" || name == "kube-scheduler-qps":
		bin, err := kubeSchedulerBinary()
		if err != nil {
			return sysSpec{}, err
		}
		ks := kubeSchedulerSystem{bin: bin}
		if name == "kube-scheduler-qps" {
			ks.qps, ks.burst = 5000, 5000
		}
		return sysSpec{name: name, impl: ks}, nil
	}
	return sysSpec{}, fmt.Errorf("unknown system %q (binder, shardsched-N[-json][-bindW], shardsched-proc-N, kube-scheduler, kube-scheduler-qps)", name)
}

// processPeakRSSKiB is the peak RSS of the bench process so far (Linux
// reports ru_maxrss in KiB).
func processPeakRSSKiB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss
}

// inProcess starts body in a goroutine of this process and returns its
// instance; stopping cancels body's context and waits for it.
func inProcess(ctx context.Context, body func(ctx context.Context, wg *sync.WaitGroup)) (*instance, context.CancelFunc) {
	cpu0 := procstat.CPU()
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	body(sctx, &wg)
	stop := func() int64 {
		cancel()
		wg.Wait()
		return processPeakRSSKiB()
	}
	return &instance{
		inProcess: true,
		cpu:       func() time.Duration { return procstat.CPU() - cpu0 },
		check:     func() error { return nil },
		stop:      stop,
	}, func() { stop() }
}

// binderSystem is the no-logic baseline: every pending pod of the run is
// bound to the next node, round-robin, by workers workers. It keeps a tally
// of what it bound to each node and skips a node the pod no longer fits
// (so that workload pods of up to a node's size do not double-book it); it
// ignores PodGroups and queues. A pod that fits no node is left unbound.
type binderSystem struct{ workers int }

func (b binderSystem) start(ctx context.Context, env *benchEnv, run runSpec) (*instance, error) {
	nodes, err := env.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	placer, err := newRRPlacer(nodes.Items)
	if err != nil {
		return nil, fmt.Errorf("binder: %w", err)
	}
	// Not the harness's client (main: the harness has connections of its
	// own); this one shares the transport of env.rest.
	cs, err := kubernetes.NewForConfig(env.rest)
	if err != nil {
		return nil, err
	}
	inst, _ := inProcess(ctx, func(ctx context.Context, wg *sync.WaitGroup) {
		wg.Add(1)
		go func() { defer wg.Done(); runBinder(ctx, cs, placer, run, b.workers) }()
	})
	return inst, nil
}

func runBinder(ctx context.Context, cs kubernetes.Interface, placer *rrPlacer, run runSpec, workers int) {
	queue := make(chan *corev1.Pod, run.pods)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(run.namespace))
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == "" && p.Spec.SchedulerName == run.schedName {
			select {
			case queue <- p:
			default:
			}
		}
	}})
	f.Start(ctx.Done())
	defer f.Shutdown()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-queue:
					req, err := kube.PodRequest(p)
					if err != nil {
						continue
					}
					node, ok := placer.place(req)
					if !ok {
						continue
					}
					_ = cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
						ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
						Target:     corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
				}
			}
		}()
	}
	wg.Wait()
}

// rrPlacer hands out nodes round-robin, skipping the nodes whose free
// resources (allocatable less what it handed out) the request does not fit.
// Safe for concurrent use.
type rrPlacer struct {
	mu    sync.Mutex
	names []string       // guarded by mu, like the fields below; never changes
	free  []api.Resource // free[i] is names[i]'s
	next  int            // index tried first
}

func newRRPlacer(nodes []corev1.Node) (*rrPlacer, error) {
	if len(nodes) == 0 {
		return nil, errors.New("no nodes")
	}
	p := &rrPlacer{next: 1 % len(nodes)}
	for i := range nodes {
		n, err := kube.NodeFromNode(&nodes[i])
		if err != nil {
			return nil, err
		}
		p.names = append(p.names, n.Name)
		p.free = append(p.free, n.Allocatable)
	}
	return p, nil
}

// place takes req from the first node, from the round-robin cursor on,
// that fits it; false when none does.
func (p *rrPlacer) place(req api.Resource) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.names)
	for k := 0; k < n; k++ {
		i := (p.next + k) % n
		if !req.Fits(p.free[i]) {
			continue
		}
		free, err := p.free[i].Sub(req)
		if err != nil {
			continue
		}
		p.free[i], p.next = free, (i+1)%n
		return p.names[i], true
	}
	return "", false
}

// shardschedSystem runs shards daemons in this process, each with its own
// gossip port, coordinating through the bench etcd under a prefix of the
// run's own.
// shardschedSystem is shards in-process shards; json makes their built-in
// objects travel as JSON rather than protobuf (daemon.Options.JSON).
type shardschedSystem struct {
	shards int
	json   bool
	// bindWorkers, when positive, replaces the scheduler's BindWorkers.
	bindWorkers int
}

func (s shardschedSystem) start(ctx context.Context, env *benchEnv, run runSpec) (*instance, error) {
	var startErr error
	inst, abort := inProcess(ctx, func(ctx context.Context, wg *sync.WaitGroup) {
		var seed string
		for i := 0; i < s.shards; i++ {
			opts := daemonOptions(env.rest, env.etcd, fmt.Sprintf("shardsched-%d-%d", run.index, i), fmt.Sprintf("/bench/%d", run.index), run.schedName)
			opts.JSON = s.json
			if s.bindWorkers > 0 {
				opts.Scheduler.BindWorkers = s.bindWorkers
			}
			if seed != "" {
				opts.Shard.Join = []string{seed}
			}
			readyc := make(chan string, 1)
			exited := make(chan error, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := daemon.Run(ctx, opts, func(d *daemon.Daemon) {
					readyc <- d.Shard.GossipAddr()
					if env.dumpMetrics {
						go func() { <-ctx.Done(); dumpMetrics(d) }()
					}
				})
				exited <- err
				if err != nil && !errors.Is(err, context.Canceled) {
					fmt.Fprintln(os.Stderr, "daemon:", err)
				}
			}()
			select {
			case seed = <-readyc:
			case err := <-exited:
				startErr = fmt.Errorf("shard %d ended before it was ready: %v", i, err)
				return
			case <-time.After(time.Minute):
				startErr = fmt.Errorf("shard %d did not start within a minute", i)
				return
			}
		}
	})
	if startErr != nil {
		abort()
		return nil, startErr
	}
	time.Sleep(3 * time.Second) // ownership settles
	return inst, nil
}

func daemonOptions(rc *rest.Config, etcd []string, name, prefix, schedName string) daemon.Options {
	o := daemon.Options{Name: name, REST: rc, EtcdEndpoints: etcd, Logger: slog.New(slog.DiscardHandler)}
	o.Shard = shard.DefaultConfig()
	o.Shard.BindAddr, o.Shard.BindPort, o.Shard.GossipProfile = "127.0.0.1", 0, "local"
	o.Shard.EtcdPrefix = prefix + "/shards"
	o.Shard.Partitions = 1024
	o.Shard.SessionTTL = 5
	o.Coordinator = coordinator.DefaultConfig()
	o.Coordinator.Prefix = prefix + "/coordinator"
	o.Scheduler = scheduler.DefaultConfig()
	o.Scheduler.SchedulerName, o.Scheduler.Partitions = schedName, 1024
	o.Status = status.DefaultConfig()
	return o
}

// dumpMetrics prints a shard's scheduling series to stderr (-dump-metrics),
// to see where a run's time went.
func dumpMetrics(d *daemon.Daemon) {
	rec := httptest.NewRecorder()
	d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "shardsched_") && !strings.Contains(line, "_bucket") && !strings.HasPrefix(line, "shardsched_queue_") {
			fmt.Fprintln(os.Stderr, d.Shard.Name()+": "+line)
		}
	}
}
