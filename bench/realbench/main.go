// Command realbench measures scheduling throughput and latency on the real
// local control plane (kube-apiserver + kwok): a stream of pods created by
// concurrent workers while the scheduler runs, for shardsched with 1 and 3
// shards and for a no-logic baseline binder (round-robin binds with 32
// workers: the API server's ceiling), all in the same run on the same
// control plane, so the ratios are meaningful on a noisy machine.
//
//	go run ./bench/realbench                          # 1,000 nodes × 64 CPU, 10,000 pods
//	go run ./bench/realbench -nodes 200 -pods 2000    # quick
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/daemon"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
)

type options struct {
	nodes, pods, creators, groups int
	timeout                       time.Duration
	systems                       string
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 1000, "kwok nodes (64 CPU, 256Gi each)")
	flag.IntVar(&o.pods, "pods", 10000, "pods per system (1 CPU, 2Gi each)")
	flag.IntVar(&o.creators, "creators", 32, "concurrent pod creators")
	flag.IntVar(&o.groups, "groups", 100, "PodGroups the pods are spread over (like Jobs)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on one system's run")
	flag.StringVar(&o.systems, "systems", "binder,shardsched-1,shardsched-3", "systems to run, in order")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(2, fmt.Errorf("-cpuprofile: %w", err))
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(2, fmt.Errorf("-cpuprofile: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	switch {
	case o.nodes < 1 || o.nodes > 20000:
		fail(2, fmt.Errorf("-nodes=%d: must be 1..20000", o.nodes))
	case o.pods < 1 || o.pods > 200000:
		fail(2, fmt.Errorf("-pods=%d: must be 1..200000", o.pods))
	case o.creators < 1 || o.creators > 256:
		fail(2, fmt.Errorf("-creators=%d: must be 1..256", o.creators))
	case o.groups < 1 || o.groups > o.pods:
		fail(2, fmt.Errorf("-groups=%d: must be 1..pods", o.groups))
	}
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fail(1, err)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "realbench:", err)
	os.Exit(code)
}

type result struct {
	system           string
	pods             int
	podsPerSec       float64
	p50, p99, max    time.Duration
	createPerSec     float64
	cpuSeconds       float64
	wall             time.Duration
	bound, unbounded int
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "starting the control plane and %d kwok nodes...\n", o.nodes)
	cp, err := cluster.Start(ctx, cluster.Config{Kwok: true, CRDs: crds})
	if err != nil {
		return err
	}
	defer cp.Stop()
	rc := cp.RESTConfig()
	cs := kubernetes.NewForConfigOrDie(rc)
	if err := cluster.CreateFakeNodes(ctx, cs, "bench-node", o.nodes, "64", "256Gi", 5*time.Minute); err != nil {
		return err
	}
	coordEtcd, err := cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"})
	if err != nil {
		return err
	}
	defer coordEtcd.Close()

	var results []result
	for i, sys := range splitList(o.systems) {
		fmt.Fprintf(os.Stderr, "running %s: %d pods...\n", sys, o.pods)
		r, err := runSystem(ctx, o, rc, cs, coordEtcd.Endpoints, sys, i)
		if err != nil {
			return fmt.Errorf("%s: %w", sys, err)
		}
		results = append(results, r)
	}
	base := results[0]
	fmt.Printf("realbench: %d kwok nodes × 64 CPU, %d pods of 1 CPU / 2Gi per system, stream mode (%d creators), %d PodGroups\n\n",
		o.nodes, o.pods, o.creators, o.groups)
	fmt.Printf("| system | pods/s | vs %s | create→bound p50 | p99 | max | CPU s (whole process) | unbound |\n", base.system)
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Printf("| %s | %.0f | %.2f× | %s | %s | %s | %.1f | %d |\n", r.system, r.podsPerSec, r.podsPerSec/base.podsPerSec,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond), r.cpuSeconds, r.unbounded)
	}
	fmt.Printf("\npod creation ran at %.0f pods/s in the baseline run (the ceiling of any scheduler in stream mode).\n", base.createPerSec)
	return nil
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func runSystem(ctx context.Context, o options, rc *rest.Config, cs kubernetes.Interface, etcd []string, sys string, round int) (result, error) {
	ns := fmt.Sprintf("bench-%d-%s", round, sys)
	schedName := "bench-" + sys
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	vc := volcano.NewForConfigOrDie(rc)
	for g := 0; g < o.groups; g++ {
		pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", g), Namespace: ns},
			Spec: schedv1beta1.PodGroupSpec{MinMember: 1, Queue: "default"}}
		if _, err := vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return result{}, err
		}
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	switch {
	case sys == "binder":
		wg.Add(1)
		go func() { defer wg.Done(); runBinder(sctx, cs, ns, schedName, 32) }()
	case len(sys) > len("shardsched-") && sys[:len("shardsched-")] == "shardsched-":
		var n int
		if _, err := fmt.Sscanf(sys, "shardsched-%d", &n); err != nil || n < 1 || n > 16 {
			return result{}, fmt.Errorf("system %q: want shardsched-N with N in 1..16", sys)
		}
		ready := make(chan struct{}, n)
		var seed string
		for i := 0; i < n; i++ {
			opts := daemonOptions(rc, etcd, fmt.Sprintf("%s-%d", sys, i), fmt.Sprintf("/bench/%d", round), schedName)
			if seed != "" {
				opts.Shard.Join = []string{seed}
			}
			seedc := make(chan string, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := daemon.Run(sctx, opts, func(d *daemon.Daemon) { seedc <- d.Shard.GossipAddr(); ready <- struct{}{} })
				if err != nil && !errors.Is(err, context.Canceled) {
					fmt.Fprintln(os.Stderr, "daemon:", err)
				}
			}()
			select {
			case seed = <-seedc:
			case <-time.After(time.Minute):
				return result{}, errors.New("shard did not start")
			}
		}
		for i := 0; i < n; i++ {
			<-ready
		}
		time.Sleep(3 * time.Second) // ownership settles
	default:
		return result{}, fmt.Errorf("unknown system %q (binder or shardsched-N)", sys)
	}

	// Watch binds.
	var mu sync.Mutex
	created := map[types.UID]time.Time{}
	bound := map[types.UID]time.Time{}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		mu.Lock()
		if _, seen := bound[p.UID]; !seen {
			bound[p.UID] = time.Now()
		}
		mu.Unlock()
	}
	// A pod may already be bound when the informer first sees it.
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) }})
	f.Start(sctx.Done())
	f.WaitForCacheSync(sctx.Done())
	defer func() { stop(); f.Shutdown() }()

	cpu0 := cpuTime()
	start := time.Now()
	var next atomic.Int64
	var cwg sync.WaitGroup
	var createErr atomic.Value
	for w := 0; w < o.creators; w++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.pods {
					return
				}
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: ns,
						Annotations: map[string]string{"scheduling.k8s.io/group-name": fmt.Sprintf("job-%d", i%o.groups)}},
					Spec: corev1.PodSpec{SchedulerName: schedName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}},
				}
				t0 := time.Now()
				out, err := cs.CoreV1().Pods(ns).Create(sctx, p, metav1.CreateOptions{})
				if err != nil {
					createErr.Store(err)
					return
				}
				mu.Lock()
				created[out.UID] = t0
				mu.Unlock()
			}
		}()
	}
	cwg.Wait()
	createDone := time.Since(start)
	if err, ok := createErr.Load().(error); ok {
		return result{}, fmt.Errorf("create pods: %w", err)
	}
	deadline := time.Now().Add(o.timeout)
	for {
		mu.Lock()
		n := len(bound)
		mu.Unlock()
		if n >= o.pods || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	var last time.Time
	for uid, b := range bound {
		if c, ok := created[uid]; ok {
			lat = append(lat, b.Sub(c))
		}
		if b.After(last) {
			last = b
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := result{system: sys, pods: o.pods, wall: wall, cpuSeconds: cpu.Seconds(), bound: len(bound), unbounded: o.pods - len(bound),
		createPerSec: float64(o.pods) / createDone.Seconds()}
	if len(lat) > 0 {
		r.p50, r.p99, r.max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
		r.podsPerSec = float64(len(bound)) / last.Sub(start).Seconds()
	}
	return r, nil
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

// runBinder is the no-logic baseline: every pending pod of schedName is
// bound to the next node, round-robin, by workers workers.
func runBinder(ctx context.Context, cs kubernetes.Interface, ns, schedName string, workers int) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		return
	}
	queue := make(chan *corev1.Pod, 100000)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == "" && p.Spec.SchedulerName == schedName {
			select {
			case queue <- p:
			default:
			}
		}
	}})
	f.Start(ctx.Done())
	defer f.Shutdown()
	var rr atomic.Int64
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
					node := nodes.Items[int(rr.Add(1))%len(nodes.Items)].Name
					_ = cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
						ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
						Target:     corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
				}
			}
		}()
	}
	wg.Wait()
}
