package main

// The chaos scenario (-modes chaos): shardsched as real OS processes (the
// cmd/shardsched binary) under a steady, rate-limited stream of gangs and
// single pods, with three faults injected while the pods are being created:
//
//	30 % of the creation period  SIGKILL a shard process that does not lead the coordinator
//	50 %                         SIGKILL the process that leads the coordinator
//	70 %                         restart the coordinator's etcd (same ports, same data)
//
// What it measures per fault (report.ChaosEvent):
//
//   - OwnersBackAfter: from the fault to the end of the first /metrics scrape
//     round, started after the fault's action returned (for etcd: once it is
//     ready again), in which every live shard answered and their
//     shardsched_owned_keys sum to the key count (partitions + queues).
//     Shards are scraped every 100 ms.
//   - ThroughputBackAfter: from the fault to the end of the first 2 s window,
//     lying wholly after the fault, whose bind rate (from the pod informer)
//     is ≥ 90 % of the healthy rate: the rate over the 5 s before the first
//     fault. (The faults follow each other closely, so the rate just before
//     the second or third may still be depressed by the one before, even 0,
//     which would make "back to its pre-fault level" vacuous; each fault's
//     own pre-fault rate is in the notes.) 2 s is the smallest value and
//     means that no dip was visible; -1: never.
//
// The notes also give the spans during which the live shards owned fewer
// than every key, those during which a live shard's gossip saw fewer members
// than there were live shards, and the longest span without any bind after
// the first fault; with -out, the shard logs are copied to <out>/chaos-logs.
//
// Invariants, any of which fails the run: no pod bound twice (its nodeName
// changed once set; the informer sees every update), no node whose bound
// pods request more CPU than it has (sampled every 5 s from the informer and
// checked against the API server at the end), no admitted job lost (every
// PodGroup that was Inqueue or Running before a fault must at the end still
// exist, have every pod bound and hold its reservation in the coordinator's
// etcd), and every pod bound by -timeout after the last one was created (the
// workload fits the nodes). The run's own baseline is its rate before the
// first fault.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/kube"
)

const (
	modeChaos = "chaos"

	chaosPartitions   = 1024
	chaosSessionTTL   = 3 // seconds: a dead shard's keys expire quickly
	chaosGang         = 4 // minMember of the gangs; each block of 2·chaosGang pods is one gang and chaosGang single pods
	chaosQueueGangs   = "chaos-gangs"
	chaosQueueSingles = "chaos-singles"
	chaosPodMilliCPU  = 1000

	scrapeInterval = 100 * time.Millisecond
	bookedInterval = 5 * time.Second
	rateWindow     = 2 * time.Second
	preFaultWindow = 5 * time.Second
	recoveredShare = 0.9
)

// Invariant names only the chaos run reports.
const (
	invAdmittedLost = "admitted_jobs_lost"
	invNeverBound   = "pods_never_bound"
)

type faultKind int

const (
	faultKillShard faultKind = iota
	faultKillLeader
	faultRestartEtcd
)

// plannedFault is one fault at a fraction of the creation period.
type plannedFault struct {
	frac float64
	kind faultKind
}

func chaosPlan() []plannedFault {
	return []plannedFault{{0.3, faultKillShard}, {0.5, faultKillLeader}, {0.7, faultRestartEtcd}}
}

// faultRecord is one injected fault.
type faultRecord struct {
	what     string
	at, done time.Time // injected; its action returned
	preRate  float64   // pods/s over preFaultWindow before at
}

// shardschedBinary returns bin when set, else builds cmd/shardsched into a
// new temporary directory; cleanup removes what it built.
func shardschedBinary(ctx context.Context, bin string) (path string, cleanup func(), err error) {
	if bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("-shardsched-bin: %w", err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "realbench-shardsched-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "shardsched")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/shardsched/shardsched/cmd/shardsched")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/shardsched (run realbench from the repository, or pass -shardsched-bin): %w\n%s", err, out)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// chaosShard is one shard OS process.
type chaosShard struct {
	name    string
	proc    *schedulerProcess
	metrics string // URL of its /metrics
	readyz  string
	killed  atomic.Bool // set just before the harness kills it
	gossip  string      // the address its gossip listens on (TCP and UDP)
	dir     string      // its working directory (its log is there)
	args    []string    // its flags, to start it again
	cpu0    time.Duration
}

// shardLink is where one shard process connects: its etcd endpoint, its
// kubeconfig, and the gossip address it advertises ("" for its own).
type shardLink struct {
	etcd, kubeconfig, gossipAdvertise string
}

// directLinks connects every shard straight to etcd and the API server.
func directLinks(etcd, kubeconfig string) func(int, string) (shardLink, error) {
	return func(int, string) (shardLink, error) { return shardLink{etcd: etcd, kubeconfig: kubeconfig}, nil }
}

// startChaosShards starts n cmd/shardsched processes gossiping on loopback,
// each in a directory of its own under dir (its log is there); links says
// where shard i connects given the address its gossip listens on. extra
// flags are passed to every shard. It returns once every shard's /readyz
// answers, waiting at most readyWithin for each; on error the ones started
// are stopped.
func startChaosShards(dir, bin string, n int, schedName string, links func(i int, gossip string) (shardLink, error), readyWithin time.Duration, extra ...string) ([]*chaosShard, error) {
	var out []*chaosShard
	fail := func(err error) ([]*chaosShard, error) {
		for _, s := range out {
			s.proc.stop()
		}
		return nil, err
	}
	var seed string
	// The shards share one coordinator token, made for this run.
	tokenFile := filepath.Join(dir, "coordinator.token")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := cluster.WriteToken(tokenFile); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("shard-%d", i)
		sdir := filepath.Join(dir, name)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return fail(err)
		}
		// The gossip port is held while links sets up what it needs (it
		// may listen on ports of its own, which must not take this one),
		// and the other ports are picked after.
		gl, ul, err := holdGossipPort()
		if err != nil {
			return fail(err)
		}
		gossip := gl.Addr().String()
		link, err := links(i, gossip)
		_, _ = gl.Close(), ul.Close()
		if err != nil {
			return fail(err)
		}
		gossipPort := gl.Addr().(*net.TCPAddr).Port
		// Ports picked free may be taken by another process before the
		// shard binds them (other test packages run beside this one): a
		// shard that exits for that is started again on other ports.
		var started *chaosShard
		for attempt := 1; started == nil; attempt++ {
			var ports [2]int // HTTP, coordinator
			for k := range ports {
				p, err := cluster.FreePort()
				if err != nil {
					return fail(err)
				}
				ports[k] = p
			}
			httpAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
			args := []string{
				"--shard-name=" + name, "--kubeconfig=" + link.kubeconfig, "--etcd-endpoints=" + link.etcd,
				"--gossip-bind-addr=127.0.0.1", "--gossip-port=" + strconv.Itoa(gossipPort), "--gossip-profile=local",
				"--http-addr=" + httpAddr, "--coordinator-addr=127.0.0.1:" + strconv.Itoa(ports[1]),
				"--scheduler-name=" + schedName, "--partitions=" + strconv.Itoa(chaosPartitions),
				"--session-ttl=" + strconv.Itoa(chaosSessionTTL), "--log-level=info",
				"--coordinator-token-file=" + tokenFile,
			}
			// Without an advertise address memberlist advertises the bound
			// address and port.
			advertised := gossip
			if link.gossipAdvertise != "" {
				host, port, err := net.SplitHostPort(link.gossipAdvertise)
				if err != nil {
					return fail(fmt.Errorf("%s: gossip advertise address: %w", name, err))
				}
				args = append(args, "--gossip-advertise-addr="+host, "--gossip-advertise-port="+port)
				advertised = link.gossipAdvertise
			}
			args = append(args, extra...)
			if seed != "" {
				args = append(args, "--join="+seed)
			}
			p, err := startSchedulerProcess(sdir, bin, args...)
			if err != nil {
				return fail(err)
			}
			_, err = cluster.WaitHTTPOK(context.Background(), "http://"+httpAddr+"/healthz", nil, time.Minute, p.check)
			if err != nil {
				p.stop()
				if b, _ := os.ReadFile(p.log); attempt < 3 && strings.Contains(string(b), "address already in use") && !strings.Contains(string(b), ":"+strconv.Itoa(gossipPort)) {
					continue
				}
				return fail(fmt.Errorf("%s did not start: %w", name, errors.Join(err, p.check())))
			}
			if seed == "" {
				seed = advertised
			}
			started = &chaosShard{name: name, proc: p, metrics: "http://" + httpAddr + "/metrics", readyz: "http://" + httpAddr + "/readyz",
				gossip: gossip, dir: sdir, args: args}
		}
		out = append(out, started)
	}
	// /healthz answers from the shard's first steps on, while its informers
	// still list the cluster; a run must not start its clock before every
	// shard can schedule, so each one's /readyz is waited for too (they
	// warm up together).
	for _, s := range out {
		if err := s.proc.waitReady(context.Background(), s.readyz, readyWithin); err != nil {
			return fail(fmt.Errorf("%s: %w", s.name, err))
		}
	}
	return out, nil
}

// holdGossipPort listens on a loopback port free for both TCP and UDP
// (memberlist takes both), holding it until the caller closes the two.
func holdGossipPort() (net.Listener, net.PacketConn, error) {
	var last error
	for range 10 {
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ul, err := net.ListenPacket("udp", gl.Addr().String())
		if err == nil {
			return gl, ul, nil
		}
		last = err
		_ = gl.Close()
	}
	return nil, nil, fmt.Errorf("no loopback port free for both TCP and UDP: %w", last)
}

// kill sends SIGKILL to the shard's process group: no graceful stop, its
// etcd session and ownership records stay until their lease expires.
func (s *chaosShard) kill() {
	s.killed.Store(true)
	_ = syscall.Kill(-s.proc.cmd.Process.Pid, syscall.SIGKILL)
}

// unexpectedExit returns an error, with the end of its log, when a shard
// the harness did not kill has exited.
func unexpectedExit(shards []*chaosShard) error {
	for _, s := range shards {
		if !s.killed.Load() && s.proc.exited() {
			return fmt.Errorf("%s: %w", s.name, s.proc.check())
		}
	}
	return nil
}

// chaosQueues creates the two leaf queues of the scenario (no capability)
// and returns the number of ownership keys: partitions plus every queue of
// the tree the shards build (the Queue objects, root and default).
func chaosQueues(ctx context.Context, vc volcano.Interface) (int, error) {
	for _, name := range []string{chaosQueueGangs, chaosQueueSingles} {
		q := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedv1beta1.QueueSpec{Weight: 1}}
		if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("create queue %s: %w", name, err)
		}
	}
	return ownershipKeys(ctx, vc)
}

// overbooked counts the nodes whose pods, as the informer has seen them
// bound, request more CPU than alloc (milli-CPU by node name).
func (w *bindWatch) overbooked(alloc map[string]int64) int64 {
	w.mu.Lock()
	used := map[string]int64{}
	for _, node := range w.node {
		used[node] += chaosPodMilliCPU
	}
	w.mu.Unlock()
	var n int64
	for node, u := range used {
		if a, ok := alloc[node]; !ok || u > a {
			n++
		}
	}
	return n
}

// streamSpec is a rate-limited stream of gangs and single pods.
type streamSpec struct {
	pods     int
	rate     float64 // pods created per second
	creators int
	milliCPU int64 // each pod's CPU request
	// gangQueue holds the gangs, singleQueue the single pods.
	gangQueue, singleQueue string
}

// chaosStream is the chaos scenario's stream.
func chaosStream(o options) streamSpec {
	return streamSpec{pods: o.pods, rate: o.rate, creators: o.creators, milliCPU: chaosPodMilliCPU,
		gangQueue: chaosQueueGangs, singleQueue: chaosQueueSingles}
}

// gangName is the name of block b's gang; its pods are <gang>-<pos>.
func gangName(b int) string { return fmt.Sprintf("gang-%d", b) }

// createChaosStream creates sp.pods pods at sp.rate pods/s from start: in
// blocks of 2·chaosGang, a gang of chaosGang pods (its PodGroup created just
// before its first pod) in sp.gangQueue, then chaosGang single pods that
// name no PodGroup (the shards create an implicit one) in sp.singleQueue.
// A trailing block too short for a whole gang is single pods.
func createChaosStream(ctx context.Context, cs kubernetes.Interface, vc volcano.Interface, sp streamSpec, run runSpec, w *bindWatch, start time.Time) error {
	cpu, mem := *resource.NewMilliQuantity(sp.milliCPU, resource.DecimalSI), resource.MustParse("2Gi")
	block := 2 * chaosGang
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(sp.creators, sp.pods)
	errs := make([]error, workers)
	create := podCreator(cs, run.namespace)
	for c := 0; c < workers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= sp.pods {
					return
				}
				due := start.Add(time.Duration(float64(i) / sp.rate * float64(time.Second)))
				select {
				case <-ctx.Done():
					errs[c] = ctx.Err()
					return
				case <-time.After(time.Until(due)):
				}
				b, pos := i/block, i%block
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: run.namespace, Annotations: map[string]string{}},
					Spec: corev1.PodSpec{SchedulerName: run.schedName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}}}},
				}
				if pos < chaosGang && b*block+chaosGang <= sp.pods {
					group := gangName(b)
					p.Name = fmt.Sprintf("%s-%d", group, pos)
					p.Annotations[kube.GroupNameAnnotation] = group
					if pos == 0 {
						pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: group, Namespace: run.namespace},
							Spec: schedv1beta1.PodGroupSpec{MinMember: chaosGang, Queue: sp.gangQueue}}
						if _, err := createRetrying(ctx, createBackoff(),
							func(ctx context.Context) (*schedv1beta1.PodGroup, error) {
								return vc.SchedulingV1beta1().PodGroups(run.namespace).Create(ctx, pg, metav1.CreateOptions{})
							},
							func(ctx context.Context) (*schedv1beta1.PodGroup, error) {
								return vc.SchedulingV1beta1().PodGroups(run.namespace).Get(ctx, group, metav1.GetOptions{})
							}); err != nil {
							errs[c] = fmt.Errorf("create podgroup %s: %w", group, err)
							return
						}
					}
				} else {
					p.Name = fmt.Sprintf("single-%d", i)
					p.Annotations[kube.QueueNameAnnotation] = sp.singleQueue
				}
				t0 := time.Now()
				out, err := create(ctx, p)
				if err != nil {
					errs[c] = fmt.Errorf("create pod %s: %w", p.Name, err)
					return
				}
				w.noteCreated(out.UID, t0)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// admittedGroups returns the PodGroups of ns that are Inqueue or Running,
// by UID (value: name).
func admittedGroups(ctx context.Context, vc volcano.Interface, ns string) (map[string]string, error) {
	l, err := vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, pg := range l.Items {
		if pg.Status.Phase == schedv1beta1.PodGroupInqueue || pg.Status.Phase == schedv1beta1.PodGroupRunning {
			out[string(pg.UID)] = pg.Name
		}
	}
	return out, nil
}

// stream is a pod stream created in the background.
type stream struct {
	ch   chan error
	done bool // its creators have returned (read and set by poll only)
}

// startStream runs create in a goroutine counted in bg.
func startStream(bg *sync.WaitGroup, create func() error) *stream {
	st := &stream{ch: make(chan error, 1)}
	bg.Add(1)
	go func() { defer bg.Done(); st.ch <- create() }()
	return st
}

// poll notes whether the stream has ended and returns its error, once, if
// it failed. Called from one goroutine.
func (st *stream) poll() error {
	if st.done {
		return nil
	}
	select {
	case err := <-st.ch:
		st.done = true
		if err != nil {
			return fmt.Errorf("pod creation: %w", err)
		}
	default:
	}
	return nil
}

// sleepUntil waits until t, failing early when check does or ctx ends.
func sleepUntil(ctx context.Context, t time.Time, check func() error) error {
	for {
		if err := check(); err != nil {
			return err
		}
		d := time.Until(t)
		if d <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(d, 200*time.Millisecond)):
		}
	}
}

// chaosRun is one chaos scenario: what its steps share.
type chaosRun struct {
	o      options
	run    runSpec
	vc     volcano.Interface
	etcd   *cluster.Etcd // the coordinator's
	shards []*chaosShard
	mon    *monitor
	w      *bindWatch
	total  int       // ownership keys: partitions and queues
	start  time.Time // the clock: pod creation starts

	// admitted holds the PodGroups that were Inqueue or Running before
	// some fault, UID → name.
	admitted map[string]string
	faults   []faultRecord
}

// chaosEnd is what the run measured once the pods were bound.
type chaosEnd struct {
	wall, createDur, cpu, harness time.Duration
	peakRSSKiB                    int64
	booked                        int64 // double-booked nodes: the most seen while running, or at the end
	lost                          int
	lostWhy                       string
	samples                       []ownerSample
}

// runChaos runs the chaos scenario once; the report.Run it returns is
// complete even when an invariant broke (the caller fails afterwards).
func runChaos(ctx context.Context, o options, env *benchEnv, bin string, index int) (report.Run, error) {
	c := &chaosRun{o: o, w: newBindWatch(), admitted: map[string]string{},
		run: runSpec{index: index, namespace: fmt.Sprintf("bench-%d-chaos-shardsched", index), schedName: "bench-chaos-shardsched", pods: o.pods}}
	var err error
	if c.vc, err = volcano.NewForConfig(env.rest); err != nil {
		return report.Run{}, err
	}
	if _, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.run.namespace}}, metav1.CreateOptions{}); err != nil {
		return report.Run{}, err
	}
	if c.total, err = chaosQueues(ctx, c.vc); err != nil {
		return report.Run{}, err
	}
	nodes, err := env.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return report.Run{}, err
	}
	alloc := make(map[string]int64, len(nodes.Items))
	for _, n := range nodes.Items {
		alloc[n.Name] = n.Status.Allocatable.Cpu().MilliValue()
	}
	// The coordinator's etcd is the run's own, so that restarting it
	// touches nothing else and the reservations read at the end are this
	// run's.
	if c.etcd, err = cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"}); err != nil {
		return report.Run{}, err
	}
	defer c.etcd.Close()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := informers.NewSharedInformerFactoryWithOptions(env.cs, 0, informers.WithNamespace(c.run.namespace))
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.w.onPod, UpdateFunc: func(_, obj any) { c.w.onPod(obj) }}); err != nil {
		return report.Run{}, err
	}
	f.Start(rctx.Done())
	defer func() { cancel(); f.Shutdown() }()
	f.WaitForCacheSync(rctx.Done())

	if c.shards, err = startChaosShards(filepath.Join(env.dir, c.run.namespace), bin, o.chaosShards, c.run.schedName, directLinks(c.etcd.Endpoints[0], env.kubeconfig), shardReadyWithin); err != nil {
		return report.Run{}, err
	}
	var end chaosEnd
	stopped := false
	stopShards := func() {
		if !stopped {
			stopped = true
			for _, s := range c.shards {
				end.peakRSSKiB = max(end.peakRSSKiB, s.proc.stop())
			}
		}
	}
	defer stopShards()
	c.mon = newMonitor(c.shards)
	if err := c.mon.waitSettled(rctx, c.total, 2*time.Minute); err != nil {
		return report.Run{}, err
	}
	leader, err := c.mon.leader(rctx, 10*time.Second)
	if err != nil {
		return report.Run{}, err
	}
	fmt.Fprintf(os.Stderr, "chaos: %d shards own all %d keys, %s leads the coordinator; creating %d pods at %.0f pods/s\n",
		len(c.shards), c.total, c.shards[leader].name, o.pods, o.rate)

	// The clock starts with pod creation.
	for _, s := range c.shards {
		s.cpu0 = s.proc.cpu()
	}
	harness0 := procstat.CPU()
	c.start = time.Now()
	var bg sync.WaitGroup
	defer func() { cancel(); bg.Wait() }()
	bg.Add(1)
	go func() { defer bg.Done(); c.mon.run(rctx) }()
	var bookedMax atomic.Int64
	bg.Add(1)
	go func() { defer bg.Done(); sampleBooked(rctx, c.w, alloc, &bookedMax) }()
	stream := startStream(&bg, func() error { return createChaosStream(rctx, env.cs, c.vc, chaosStream(o), c.run, c.w, c.start) })
	// check fails once the creators failed or a shard died unasked.
	check := func() error {
		if err := stream.poll(); err != nil {
			return err
		}
		return unexpectedExit(c.shards)
	}
	if err := c.injectAll(rctx, check); err != nil {
		return report.Run{}, err
	}
	for !stream.done {
		if err := sleepUntil(rctx, time.Now().Add(200*time.Millisecond), check); err != nil {
			return report.Run{}, err
		}
	}
	end.createDur = time.Since(c.start)
	if err := waitFor(rctx, o.timeout, func() (bool, error) {
		_, bound := c.w.counts()
		return bound >= o.pods, unexpectedExit(c.shards)
	}); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return report.Run{}, err
	}
	end.wall = time.Since(c.start)
	// Judge the admitted jobs while the shards still run: tentative
	// reservations die with their shard's session.
	if end.lost, end.lostWhy, err = lostJobs(rctx, env.cs, c.vc, c.etcd.Endpoints, c.run.namespace, c.admitted); err != nil {
		return report.Run{}, err
	}
	end.samples = c.mon.snapshot()
	cancel()
	bg.Wait()
	stopShards()
	for _, s := range c.shards {
		end.cpu += s.proc.cpu() - s.cpu0
	}
	end.harness = procstat.CPU() - harness0
	booked, err := doubleBookedNodes(ctx, env.cs)
	if err != nil {
		return report.Run{}, fmt.Errorf("check nodes: %w", err)
	}
	end.booked = max(booked, bookedMax.Load())
	out := c.assemble(end)
	if o.out != "" {
		if err := copyShardLogs(filepath.Join(o.out, "chaos-logs"), c.shards); err != nil {
			return report.Run{}, fmt.Errorf("-out: copy the shard logs: %w", err)
		}
	}
	if err := deletePods(ctx, env.cs, c.run.namespace); err != nil {
		return report.Run{}, fmt.Errorf("delete the run's pods: %w", err)
	}
	return out, nil
}

// sampleBooked keeps in most the largest number of double-booked nodes
// seen by w every bookedInterval until ctx ends.
func sampleBooked(ctx context.Context, w *bindWatch, alloc map[string]int64, most *atomic.Int64) {
	t := time.NewTicker(bookedInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := w.overbooked(alloc); n > most.Load() {
				most.Store(n)
			}
		}
	}
}

// injectAll injects the planned faults at their times, noting the
// PodGroups admitted before each; it stops early when check fails.
func (c *chaosRun) injectAll(ctx context.Context, check func() error) error {
	period := time.Duration(float64(c.o.pods) / c.o.rate * float64(time.Second))
	for _, pf := range chaosPlan() {
		if err := sleepUntil(ctx, c.start.Add(time.Duration(pf.frac*float64(period))), check); err != nil {
			return err
		}
		adm, err := admittedGroups(ctx, c.vc, c.run.namespace)
		if err != nil {
			return fmt.Errorf("list podgroups before a fault: %w", err)
		}
		for uid, name := range adm {
			c.admitted[uid] = name
		}
		fr, err := c.inject(ctx, pf.kind)
		if err != nil {
			return err
		}
		c.faults = append(c.faults, fr)
		fmt.Fprintf(os.Stderr, "chaos at %.1f s: %s (%d PodGroups admitted so far)\n", fr.at.Sub(c.start).Seconds(), fr.what, len(c.admitted))
	}
	return nil
}

// inject injects one fault.
func (c *chaosRun) inject(ctx context.Context, kind faultKind) (faultRecord, error) {
	var fr faultRecord
	switch kind {
	case faultKillShard, faultKillLeader:
		l, err := c.mon.leader(ctx, 30*time.Second)
		if err != nil {
			return fr, err
		}
		victim := l
		if kind == faultKillShard {
			victim = slices.IndexFunc(c.shards, func(s *chaosShard) bool { return s != c.shards[l] && !s.killed.Load() })
			if victim < 0 {
				return fr, errors.New("no live shard besides the coordinator leader to kill")
			}
			fr.what = fmt.Sprintf("kill -9 %s (not the coordinator leader)", c.shards[victim].name)
		} else {
			fr.what = fmt.Sprintf("kill -9 %s (the coordinator leader)", c.shards[victim].name)
		}
		fr.at = time.Now()
		c.shards[victim].kill()
	case faultRestartEtcd:
		fr.what = "restart the coordinator's etcd"
		fr.at = time.Now()
		if err := c.etcd.Restart(); err != nil {
			return fr, err
		}
	}
	fr.done = time.Now()
	return fr, nil
}

// assemble turns what the run measured into its report.Run.
func (c *chaosRun) assemble(end chaosEnd) report.Run {
	o, start := c.o, c.start
	out := report.Run{
		Name:     fmt.Sprintf("chaos/shardsched-%d", len(c.shards)),
		Mode:     "real",
		Scenario: modeChaos,
		Tier:     fmt.Sprintf("%d nodes", o.nodes),
		System:   "shardsched",
		Shards:   len(c.shards),
		Chaos:    &report.Chaos{AdmittedJobsLost: end.lost},
	}
	c.w.mu.Lock()
	var latencies, bindTimes []float64
	var last time.Duration
	for uid, b := range c.w.bound {
		cr, ok := c.w.created[uid]
		if !ok {
			continue
		}
		latencies = append(latencies, b.Sub(cr).Seconds())
		bindTimes = append(bindTimes, b.Sub(start).Seconds())
		last = max(last, b.Sub(start))
	}
	twice := c.w.twice
	c.w.mu.Unlock()
	sort.Float64s(latencies)
	sort.Float64s(bindTimes)
	if len(latencies) < o.pods {
		last = end.wall
	}
	out.Pods, out.Unbound = len(latencies), o.pods-len(latencies)
	out.WallSeconds = last.Seconds()
	if last > 0 {
		out.PodsPerSec = float64(len(latencies)) / last.Seconds()
	}
	out.LatencyP50, out.LatencyP99, out.LatencyMax = report.Percentile(latencies, 50), report.Percentile(latencies, 99), report.Percentile(latencies, 100)
	out.LatencyCDF = report.CDFSample(latencies, report.CDFPoints)
	out.CPUSeconds = end.cpu.Seconds()
	if len(latencies) > 0 {
		out.CPUSecondsPer1000 = end.cpu.Seconds() / float64(len(latencies)) * 1000
	}
	out.PeakRSSMiB = float64(end.peakRSSKiB) / 1024
	out.Invariants = map[string]int64{
		invBoundTwice:   twice,
		invDoubleBooked: end.booked,
		invAdmittedLost: int64(end.lost),
		invNeverBound:   int64(out.Unbound),
	}
	rate := report.NewRate(1)
	for _, t := range bindTimes {
		rate.Add(t, 1)
	}
	rate.Add(last.Seconds(), 0)
	out.Throughput = rate.Points()

	var pre []string
	var healthy float64
	for i, fr := range c.faults {
		fr.preRate = windowRate(bindTimes, fr.at.Sub(start)-preFaultWindow, fr.at.Sub(start))
		if i == 0 {
			healthy = fr.preRate
		}
		out.Chaos.Events = append(out.Chaos.Events, report.ChaosEvent{
			At:                  fr.at.Sub(start).Seconds(),
			What:                fr.what,
			OwnersBackAfter:     ownersBackAfter(end.samples, fr, c.total),
			ThroughputBackAfter: throughputBackAfter(bindTimes, fr.at.Sub(start), healthy, last),
		})
		pre = append(pre, fmt.Sprintf("%s: %.0f pods/s before it, injecting it took %.2f s", fr.what, fr.preRate, fr.done.Sub(fr.at).Seconds()))
	}
	var gap string
	if len(c.faults) > 0 {
		from, to := longestGap(bindTimes, c.faults[0].at.Sub(start).Seconds(), last.Seconds())
		gap = fmt.Sprintf("; the longest span without any bind after the first fault: %.1f s (%.1f–%.1f s)", to-from, from, to)
	}
	maxOwned := 0
	for _, s := range end.samples {
		if s.complete {
			maxOwned = max(maxOwned, s.owned)
		}
	}
	out.Notes = []string{
		fmt.Sprintf("%d shard processes (cmd/shardsched, session TTL %d s, %d partitions, %d keys with the queues), coordinator etcd embedded in the harness; %d pods created at %.0f pods/s over %.1f s (blocks of a gang of %d in %s and %d single pods in %s)",
			len(c.shards), chaosSessionTTL, chaosPartitions, c.total, o.pods, o.rate, end.createDur.Seconds(), chaosGang, chaosQueueGangs, chaosGang, chaosQueueSingles),
		fmt.Sprintf("healthy rate (5 s before the first fault) %.0f pods/s; ", healthy) + strings.Join(pre, "; ") + gap,
		"live shards owned fewer than all keys (or did not all answer) during: " + ownershipSpans(end.samples, start, c.total),
		"a live shard saw fewer gossip members than there were live shards during: " + gossipSpans(end.samples, start),
		fmt.Sprintf("CPU is the shard processes' own (killed ones up to their death); peak RSS is the largest shard's; the harness (creators, watch, scrapes, coordinator etcd) used %.1f CPU s beside them", end.harness.Seconds()),
		fmt.Sprintf("%d PodGroups were Inqueue or Running before some fault; %d of them lost%s; the live shards' owned keys summed to at most %d of %d in a complete scrape round",
			len(c.admitted), end.lost, end.lostWhy, maxOwned, c.total),
	}
	return out
}

// copyShardLogs copies each shard's log into dir as <shard>.log.
func copyShardLogs(dir string, shards []*chaosShard) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range shards {
		b, err := os.ReadFile(s.proc.log)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, s.name+".log"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// longestGap returns the longest span in [from, to] holding no bind time.
func longestGap(bindTimes []float64, from, to float64) (float64, float64) {
	bestFrom, bestTo := from, from
	prev := from
	for _, t := range append(slices.Clone(bindTimes), to) {
		if t < from {
			continue
		}
		if t > to {
			t = to
		}
		if t-prev > bestTo-bestFrom {
			bestFrom, bestTo = prev, t
		}
		prev = t
	}
	return bestFrom, bestTo
}

// lostJobs counts the PodGroups of admitted (UID → name) that, now, are
// gone, have a pod not bound, or hold no reservation in the coordinator's
// etcd; why says how many for each reason.
func lostJobs(ctx context.Context, cs kubernetes.Interface, vc volcano.Interface, etcdEndpoints []string, ns string, admitted map[string]string) (int, string, error) {
	pgs, err := vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, "", err
	}
	exists := map[string]bool{}
	for _, pg := range pgs.Items {
		exists[string(pg.UID)] = true
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, "", err
	}
	unbound := map[string]int{} // group name → pods not bound
	for i := range pods.Items {
		p := &pods.Items[i]
		g := p.Annotations[kube.GroupNameAnnotation]
		if g == "" {
			g = kube.ImplicitGroupName(p)
		}
		if p.Spec.NodeName == "" {
			unbound[g]++
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, "", err
	}
	defer cli.Close()
	prefix := coordinator.DefaultConfig().Prefix + "/res/"
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := cli.Get(gctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return 0, "", fmt.Errorf("read the coordinator's reservations: %w", err)
	}
	reserved := map[string]bool{}
	for _, kv := range resp.Kvs {
		reserved[strings.TrimPrefix(string(kv.Key), prefix)] = true
	}
	var gone, notBound, noRes int
	for uid, name := range admitted {
		switch {
		case !exists[uid]:
			gone++
		case unbound[name] > 0:
			notBound++
		case !reserved[uid]:
			noRes++
		default:
			continue
		}
	}
	lost := gone + notBound + noRes
	why := ""
	if lost > 0 {
		why = fmt.Sprintf(" (%d gone, %d with pods not bound, %d without a reservation)", gone, notBound, noRes)
	}
	return lost, why, nil
}

// printChaos writes the chaos runs and their faults as Markdown tables.
func printChaos(w io.Writer, runs []report.Run) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### chaos\n\n")
	fmt.Fprintf(w, "| run | pods/s | create→bound p50 | p99 | max | CPU s | CPU s / 1000 pods | peak RSS MiB | unbound | bound twice | double-booked nodes | admitted jobs lost | status |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range runs {
		status := "ok"
		if r.Failed() {
			status = "FAILED"
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.1f | %.2f | %.0f | %d | %d | %d | %d | %s |\n",
			r.Name, r.PodsPerSec, seconds(r.LatencyP50), seconds(r.LatencyP99), seconds(r.LatencyMax),
			r.CPUSeconds, r.CPUSecondsPer1000, r.PeakRSSMiB, r.Unbound,
			r.Invariants[invBoundTwice], r.Invariants[invDoubleBooked], r.Chaos.AdmittedJobsLost, status)
	}
	for _, r := range runs {
		fmt.Fprintf(w, "\n%s faults:\n\n| at s | fault | owners back after s | throughput back after s |\n|---:|---|---:|---:|\n", r.Name)
		for _, e := range r.Chaos.Events {
			fmt.Fprintf(w, "| %.1f | %s | %s | %s |\n", e.At, e.What, recoverySeconds(e.OwnersBackAfter), recoverySeconds(e.ThroughputBackAfter))
		}
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s.\n", r.Name, n)
		}
	}
}

func recoverySeconds(v float64) string {
	if v < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2f", v)
}
