package main

// The fault scenarios (-modes faults): shardsched as real OS processes,
// each shard's connections to etcd, to the kube-apiserver and from the
// other shards' gossip passing through proxies of bench/faults, so that one
// shard can be cut off, slowed or paused while it keeps running: the cases
// where double-booking hides. Each scenario runs -fault-seeds times; a seed
// picks the victim (half the time the coordinator's leader) and the moment
// of the fault.
//
// The cluster is filled on purpose: every pod asks for half a node's CPU
// and the stream asks for 90 % of the cluster, so that two shards placing
// on the same node overbook it; the gangs' queue is capped at 60 % of what
// its gangs ask, so that quota is contended and some gangs wait for good.
//
// After every seed the invariants are computed from the API server and the
// coordinator's etcd, never from a shard's belief:
//
//	pods_bound_twice        a pod's nodeName changed once set (informer)
//	double_booked_nodes     a node whose bound pods request more CPU than it has
//	quota_overruns          the capped queue's bound pods request more than its capability
//	gangs_partly_bound      a gang with some but not all of its pods bound
//	admitted_jobs_lost      a PodGroup Inqueue or Running before the fault that,
//	                        at the end, is gone, not wholly bound, or holds no
//	                        reservation in etcd
//	pods_never_bound        a pod that could have been bound (every single
//	                        pod, and the gangs the capability admits) was not
//	                        by -fault-timeout after the last one was created
//
// Each violation is reported with its timeline: the fault's moments and the
// bind times of the pods involved.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/faults"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/kube"
)

const (
	modeFaults = "faults"

	// faultsFill is the share of the cluster's CPU the stream asks for.
	faultsFill = 0.9
	// faultsCapShare is the gangs' queue capability as a share of what its
	// gangs ask.
	faultsCapShare = 0.6
	// faultsShards is the number of shard processes of a fault run.
	faultsShards = 3
)

// Invariant names only the fault runs report.
const (
	invQuotaOverrun = "quota_overruns"
	invGangPartly   = "gangs_partly_bound"
)

// faultInvariants is every invariant a fault run checks, in report order.
func faultInvariants() []string {
	return []string{invBoundTwice, invDoubleBooked, invQuotaOverrun, invGangPartly, invAdmittedLost, invNeverBound}
}

// faultOptions sizes the fault runs.
type faultOptions struct {
	seeds     int           // runs per scenario
	scenarios []string      // names; all when empty
	stream    time.Duration // the pods of a run are created evenly over this long
	timeout   time.Duration // bound on binding after the last pod was created
	firstSeed uint64
	// victim is who the fault falls on: victimAny (the coordinator's
	// leader half the time), victimLeader or victimOther.
	victim string
	// logs, when set, receives the shard logs of every run with a
	// violation, in a directory named after the run.
	logs string
}

// faultScenario is one fault, injected on a victim shard and held.
type faultScenario struct {
	name  string
	about string
	// hold is how long the fault lasts.
	hold time.Duration
	// inject starts the fault on victim v; heal ends it.
	inject func(f *faultRun, v int)
	heal   func(f *faultRun, v int)
}

// lease is the shards' session TTL.
const lease = chaosSessionTTL * time.Second

// apiChunkDelay slows a shard's API server connection: every chunk either
// way waits this long, so a bind takes seconds.
const apiChunkDelay = 700 * time.Millisecond

func faultScenarios() []faultScenario {
	return []faultScenario{
		{
			name:  "etcd-cut-slow-binds",
			about: fmt.Sprintf("the victim's etcd connections stalled for 2×TTL (%s) while every chunk of its API server connection waits %s (binds take seconds); the delay lasts 2 s past the cut", 2*lease, apiChunkDelay),
			hold:  2 * lease,
			inject: func(f *faultRun, v int) {
				f.api[v].SetDelay(apiChunkDelay)
				f.etcd[v].Stall()
			},
			heal: func(f *faultRun, v int) {
				f.etcd[v].Resume()
				time.Sleep(2 * time.Second)
				f.api[v].SetDelay(0)
			},
		},
		{
			name:   "api-slow-one",
			about:  fmt.Sprintf("the victim's API server connection alone slowed (every chunk waits %s) for 10 s", apiChunkDelay),
			hold:   10 * time.Second,
			inject: func(f *faultRun, v int) { f.api[v].SetDelay(apiChunkDelay) },
			heal:   func(f *faultRun, v int) { f.api[v].SetDelay(0) },
		},
		{
			name:  "etcd-stalled",
			about: fmt.Sprintf("etcd stalled for every shard (all their connections to it hang) for 2×TTL (%s): every lease expires at once", 2*lease),
			hold:  2 * lease,
			inject: func(f *faultRun, _ int) {
				for _, p := range f.etcd {
					p.Stall()
				}
			},
			heal: func(f *faultRun, _ int) {
				for _, p := range f.etcd {
					p.Resume()
				}
			},
		},
		{
			name:  "gossip-partition",
			about: "the victim's gossip cut for 10 s (TCP to it hangs, UDP to and from it dropped; its own TCP push-pulls still reach the others) while etcd is fine: the ring views disagree",
			hold:  10 * time.Second,
			inject: func(f *faultRun, v int) {
				f.gossip[v].Cut(true)
				for i, g := range f.gossip {
					if i != v {
						g.UDP.DropFrom(f.shards[v].gossip, true)
					}
				}
			},
			heal: func(f *faultRun, v int) {
				f.gossip[v].Cut(false)
				for i, g := range f.gossip {
					if i != v {
						g.UDP.DropFrom(f.shards[v].gossip, false)
					}
				}
			},
		},
		{
			name:   "sigstop",
			about:  fmt.Sprintf("the victim's process paused (SIGSTOP) for 2×TTL (%s), past its lease, then resumed (SIGCONT)", 2*lease),
			hold:   2 * lease,
			inject: func(f *faultRun, v int) { _ = syscall.Kill(-f.shards[v].proc.cmd.Process.Pid, syscall.SIGSTOP) },
			heal:   func(f *faultRun, v int) { _ = syscall.Kill(-f.shards[v].proc.cmd.Process.Pid, syscall.SIGCONT) },
		},
	}
}

// The choices of -fault-victim.
const (
	victimAny    = "any"
	victimLeader = "leader"
	victimOther  = "other"
)

// pickVictim returns the shard a fault falls on, of n, given the
// coordinator's leader: for victimAny the leader half the time and a shard
// drawn from all otherwise, for victimLeader the leader, for victimOther
// one of the others.
func pickVictim(rng *rand.Rand, mode string, n, leader int) int {
	switch mode {
	case victimLeader:
		return leader
	case victimOther:
		v := rng.IntN(n - 1)
		if v >= leader {
			v++
		}
		return v
	}
	v := rng.IntN(n)
	if rng.IntN(2) == 0 {
		v = leader
	}
	return v
}

// pickScenarios returns the scenarios named (all for none), or an error
// naming one that does not exist.
func pickScenarios(names []string) ([]faultScenario, error) {
	all := faultScenarios()
	if len(names) == 0 {
		return all, nil
	}
	var out []faultScenario
	for _, n := range names {
		i := slices.IndexFunc(all, func(s faultScenario) bool { return s.name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown fault scenario %q (known: %s)", n, strings.Join(scenarioNames(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// faultRun is one seed of one scenario.
type faultRun struct {
	shards []*chaosShard
	etcd   []*faults.Proxy  // shard i → etcd
	api    []*faults.Proxy  // shard i → kube-apiserver
	gossip []*faults.Gossip // the others → shard i's gossip
}

// close closes every proxy.
func (f *faultRun) close() {
	for _, p := range f.etcd {
		_ = p.Close()
	}
	for _, p := range f.api {
		_ = p.Close()
	}
	for _, g := range f.gossip {
		_ = g.Close()
	}
}

// seedResult is what one seed found.
type seedResult struct {
	seed       uint64
	victim     string
	leader     bool // the victim led the coordinator
	violations map[string]int64
	details    []string // each violation with its timeline
	pods       int      // pods created
	bound      int
	latencies  []float64
	at, healed float64 // the fault's moments, seconds from the start of creation
	cpu        time.Duration
	admitted   int
}

// faultWorld is what every seed of a fault run shares.
type faultWorld struct {
	env      *benchEnv
	bin      string
	vc       volcano.Interface
	apiAddr  string // host:port of the kube-apiserver
	nodeCPU  int64  // milli-CPU of the smallest node
	nodes    int
	podMilli int64
	pods     int
}

// runFaults runs every scenario of fo for fo.seeds seeds each, handing
// done a report.Run per scenario as soon as its seeds have run; it stops at
// done's first error.
func runFaults(ctx context.Context, fo faultOptions, env *benchEnv, bin string, done func(report.Run) error) error {
	scenarios, err := pickScenarios(fo.scenarios)
	if err != nil {
		return err
	}
	w := &faultWorld{env: env, bin: bin}
	if w.vc, err = volcano.NewForConfig(env.rest); err != nil {
		return err
	}
	u, err := url.Parse(env.rest.Host)
	if err != nil || u.Host == "" {
		return fmt.Errorf("the API server's address %q: %v", env.rest.Host, err)
	}
	w.apiAddr = u.Host
	nodes, err := env.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		return errors.New("no nodes")
	}
	w.nodes = len(nodes.Items)
	for i, n := range nodes.Items {
		c := n.Status.Allocatable.Cpu().MilliValue()
		if i == 0 || c < w.nodeCPU {
			w.nodeCPU = c
		}
	}
	// Two pods fill a node; the stream asks for faultsFill of the cluster,
	// in whole blocks of a gang and as many single pods.
	w.podMilli = w.nodeCPU / 2
	block := 2 * chaosGang
	w.pods = int(float64(2*w.nodes)*faultsFill) / block * block
	if w.pods < block {
		return fmt.Errorf("%d nodes are too few for a fault run (at least %d pods of half a node)", w.nodes, block)
	}
	for n, sc := range scenarios {
		var seeds []seedResult
		load := procstat.StartLoadSampler(loadSampleEvery)
		for k := 0; k < fo.seeds; k++ {
			seed := fo.firstSeed + uint64(k)
			fmt.Fprintf(os.Stderr, "faults: %s, seed %d (%d of %d): %d pods of %dm CPU on %d nodes...\n", sc.name, seed, k+1, fo.seeds, w.pods, w.podMilli, w.nodes)
			r, err := w.runSeed(ctx, fo, sc, seed, n*fo.seeds+k)
			if err != nil {
				load.Stop()
				return fmt.Errorf("%s, seed %d: %w", sc.name, seed, err)
			}
			fmt.Fprintf(os.Stderr, "faults: %s, seed %d: %s (%s%s), %d/%d pods bound, violations %s\n",
				sc.name, seed, r.victim, map[bool]string{true: "coordinator leader", false: "not the leader"}[r.leader],
				fmt.Sprintf(", fault %.1f–%.1f s", r.at, r.healed), r.bound, r.pods, formatViolations(r.violations))
			seeds = append(seeds, r)
		}
		r := assembleFaults(sc, seeds, w)
		r.Load = reportLoad(load.Stop())
		if err := done(r); err != nil {
			return err
		}
	}
	return nil
}

// scenarioNames lists the fault scenarios' names.
func scenarioNames() []string {
	var out []string
	for _, s := range faultScenarios() {
		out = append(out, s.name)
	}
	return out
}

// formatViolations is "none" or "name=n, ..." for the non-zero counts.
func formatViolations(v map[string]int64) string {
	var parts []string
	for _, k := range faultInvariants() {
		if v[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// shardKubeconfig writes a copy of the admin kubeconfig whose clusters are
// reached through addr (a proxy in front of the API server; TLS passes
// through it untouched, and the server's certificate names 127.0.0.1).
func shardKubeconfig(admin, addr, path string) error {
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// runSeed runs one scenario once.
func (w *faultWorld) runSeed(ctx context.Context, fo faultOptions, sc faultScenario, seed uint64, index int) (seedResult, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	res := seedResult{seed: seed, pods: w.pods, violations: map[string]int64{}}
	for _, k := range faultInvariants() {
		res.violations[k] = 0
	}
	name := fmt.Sprintf("faults-%d-%s-%d", index, sc.name, seed)
	run := runSpec{index: index, namespace: name, schedName: name, pods: w.pods}
	gangQueue, singleQueue := name+"-gangs", name+"-singles"
	gangs := w.pods / (2 * chaosGang)
	admitGangs := int(float64(gangs) * faultsCapShare)
	capMilli := int64(admitGangs) * chaosGang * w.podMilli
	cs := w.env.cs

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	qs := []*schedv1beta1.Queue{
		{ObjectMeta: metav1.ObjectMeta{Name: gangQueue}, Spec: schedv1beta1.QueueSpec{Weight: 1,
			Capability: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(capMilli, resource.DecimalSI)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: singleQueue}, Spec: schedv1beta1.QueueSpec{Weight: 1}},
	}
	for _, q := range qs {
		if _, err := w.vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("create queue %s: %w", q.Name, err)
		}
	}
	defer func() {
		for _, q := range qs {
			_ = w.vc.SchedulingV1beta1().Queues().Delete(context.WithoutCancel(ctx), q.Name, metav1.DeleteOptions{})
		}
	}()
	total, err := ownershipKeys(ctx, w.vc)
	if err != nil {
		return res, err
	}

	etcd, err := cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"})
	if err != nil {
		return res, err
	}
	defer etcd.Close()
	etcdURL, err := url.Parse(etcd.Endpoints[0])
	if err != nil {
		return res, err
	}
	f := &faultRun{}
	defer f.close()
	dir := filepath.Join(w.env.dir, name)
	links := func(i int, gossip string) (shardLink, error) {
		e, err := faults.Listen(etcdURL.Host)
		if err != nil {
			return shardLink{}, err
		}
		f.etcd = append(f.etcd, e)
		a, err := faults.Listen(w.apiAddr)
		if err != nil {
			return shardLink{}, err
		}
		f.api = append(f.api, a)
		g, err := faults.ListenGossip(gossip)
		if err != nil {
			return shardLink{}, err
		}
		f.gossip = append(f.gossip, g)
		kc := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", i))
		if err := shardKubeconfig(w.env.kubeconfig, a.Addr(), kc); err != nil {
			return shardLink{}, err
		}
		return shardLink{etcd: etcdURL.Scheme + "://" + e.Addr(), kubeconfig: kc, gossipAdvertise: g.Addr()}, nil
	}
	if f.shards, err = startChaosShards(dir, w.bin, faultsShards, name, links, shardReadyWithin); err != nil {
		return res, err
	}
	stopped := false
	stopShards := func() {
		if stopped {
			return
		}
		stopped = true
		for _, s := range f.shards {
			// A paused process cannot stop.
			_ = syscall.Kill(-s.proc.cmd.Process.Pid, syscall.SIGCONT)
			s.proc.stop()
			res.cpu += s.proc.cpu()
		}
	}
	defer stopShards()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw := newBindWatch()
	inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(name))
	if _, err := inf.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: bw.onPod, UpdateFunc: func(_, obj any) { bw.onPod(obj) }}); err != nil {
		return res, err
	}
	inf.Start(rctx.Done())
	defer func() { cancel(); inf.Shutdown() }()
	inf.WaitForCacheSync(rctx.Done())

	mon := newMonitor(f.shards)
	if err := mon.waitSettled(rctx, total, 2*time.Minute); err != nil {
		return res, err
	}
	leader, err := mon.leader(rctx, 10*time.Second)
	if err != nil {
		return res, err
	}
	v := pickVictim(rng, fo.victim, len(f.shards), leader)
	res.victim, res.leader = f.shards[v].name, v == leader

	sp := streamSpec{pods: w.pods, rate: float64(w.pods) / fo.stream.Seconds(), creators: 16, milliCPU: w.podMilli, gangQueue: gangQueue, singleQueue: singleQueue}
	start := time.Now()
	var bg sync.WaitGroup
	defer func() { cancel(); bg.Wait() }()
	bg.Add(1)
	go func() { defer bg.Done(); mon.run(rctx) }()
	stream := startStream(&bg, func() error { return createChaosStream(rctx, cs, w.vc, sp, run, bw, start) })
	check := func() error {
		if err := stream.poll(); err != nil {
			return err
		}
		return unexpectedExit(f.shards)
	}

	// The fault, at 20–50 % of the creation period.
	at := start.Add(time.Duration((0.2 + 0.3*rng.Float64()) * float64(fo.stream)))
	if err := sleepUntil(rctx, at, check); err != nil {
		return res, err
	}
	admitted, err := admittedGroups(rctx, w.vc, name)
	if err != nil {
		return res, fmt.Errorf("list podgroups before the fault: %w", err)
	}
	res.admitted = len(admitted)
	faultAt := time.Now()
	sc.inject(f, v)
	// A paused or cut-off shard may look dead while the fault lasts.
	if err := sleepUntil(rctx, faultAt.Add(sc.hold), stream.poll); err != nil {
		sc.heal(f, v)
		return res, err
	}
	sc.heal(f, v)
	healed := time.Now()
	res.at, res.healed = faultAt.Sub(start).Seconds(), healed.Sub(start).Seconds()
	for !stream.done {
		if err := sleepUntil(rctx, time.Now().Add(200*time.Millisecond), check); err != nil {
			return res, err
		}
	}
	lastCreated := time.Now()
	expected := w.pods - (gangs-admitGangs)*chaosGang
	err = waitFor(rctx, fo.timeout, func() (bool, error) {
		_, b := bw.counts()
		return b >= expected, unexpectedExit(f.shards)
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return res, err
	}
	// Any bind beyond what may be bound (a gang over the capability) would
	// come soon after the last expected one: give it the time to show.
	if err := sleepUntil(rctx, time.Now().Add(3*time.Second), check); err != nil {
		return res, err
	}
	lost, lostWhy, err := lostJobs(rctx, cs, w.vc, etcd.Endpoints, name, admitted)
	if err != nil {
		return res, err
	}
	samples := mon.snapshot()
	cancel()
	bg.Wait()
	stopShards()

	// The truth: the API server's pods and nodes, read after the shards
	// stopped.
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	bw.mu.Lock()
	boundAt := map[string]float64{} // pod name → seconds from start
	for i := range pods.Items {
		p := &pods.Items[i]
		if t, ok := bw.bound[p.UID]; ok && p.Namespace == name {
			boundAt[p.Name] = t.Sub(start).Seconds()
		}
	}
	for uid, b := range bw.bound {
		if c, ok := bw.created[uid]; ok {
			res.latencies = append(res.latencies, b.Sub(c).Seconds())
		}
	}
	res.violations[invBoundTwice] = bw.twice
	bw.mu.Unlock()
	sort.Float64s(res.latencies)
	timeline := fmt.Sprintf("fault on %s at %.1f s, healed at %.1f s, last pod created at %.1f s", res.victim, res.at, res.healed, lastCreated.Sub(start).Seconds())
	describe := func(ps []*corev1.Pod) string {
		var b []string
		for _, p := range ps {
			if t, ok := boundAt[p.Name]; ok {
				b = append(b, fmt.Sprintf("%s/%s bound at %.1f s", p.Namespace, p.Name, t))
			} else {
				b = append(b, fmt.Sprintf("%s/%s bound (time unseen)", p.Namespace, p.Name))
			}
		}
		return strings.Join(b, ", ")
	}
	for node, ps := range overAllocated(pods.Items, nodes.Items) {
		res.violations[invDoubleBooked]++
		res.details = append(res.details, fmt.Sprintf("node %s over its allocatable CPU: %s; %s", node, describe(ps), timeline))
	}
	ours := slices.DeleteFunc(slices.Clone(pods.Items), func(p corev1.Pod) bool { return p.Namespace != name })
	groupQueue := map[string]string{}
	for b := 0; b < gangs; b++ {
		groupQueue[gangName(b)] = gangQueue
	}
	if used := queueUse(ours, groupQueue)[gangQueue]; used > capMilli {
		res.violations[invQuotaOverrun]++
		res.details = append(res.details, fmt.Sprintf("queue %s: its bound pods request %dm CPU, capability %dm; %s", gangQueue, used, capMilli, timeline))
	}
	for g, ps := range partlyBound(ours, chaosGang) {
		res.violations[invGangPartly]++
		res.details = append(res.details, fmt.Sprintf("gang %s has %d of %d pods bound: %s; %s", g, len(ps), chaosGang, describe(ps), timeline))
	}
	res.violations[invAdmittedLost] = int64(lost)
	if lost > 0 {
		res.details = append(res.details, fmt.Sprintf("%d admitted jobs lost%s; %s", lost, lostWhy, timeline))
	}
	var unbound []string
	for i := range ours {
		if ours[i].Spec.NodeName != "" {
			res.bound++
		} else if !strings.HasPrefix(ours[i].Name, "gang-") {
			unbound = append(unbound, fmt.Sprintf("%s (uid %s)", ours[i].Name, ours[i].UID))
		}
	}
	if res.bound < expected {
		sort.Strings(unbound)
		res.violations[invNeverBound] = int64(expected - res.bound)
		res.details = append(res.details, fmt.Sprintf("%d of the %d pods that fit were not bound %s after the last was created (single pods among them: %s); %s; live shards owned fewer than all keys during: %s",
			expected-res.bound, expected, fo.timeout, strings.Join(unbound[:min(len(unbound), 10)], ", "), timeline, ownershipSpans(samples, start, total)))
	}
	if len(res.details) > 0 && fo.logs != "" {
		if err := copyShardLogs(filepath.Join(fo.logs, name), f.shards); err != nil {
			return res, fmt.Errorf("copy the shard logs: %w", err)
		}
		res.details = append(res.details, "shard logs in "+filepath.Join(fo.logs, name))
	}
	if err := deletePods(ctx, cs, name); err != nil {
		return res, fmt.Errorf("delete the run's pods: %w", err)
	}
	return res, nil
}

// ownershipKeys is the number of ownership keys the shards build: the
// partitions and every queue of the tree (the Queue objects, root and
// default).
func ownershipKeys(ctx context.Context, vc volcano.Interface) (int, error) {
	l, err := vc.SchedulingV1beta1().Queues().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	names := map[string]bool{api.RootQueue: true, api.DefaultQueue: true}
	for _, q := range l.Items {
		names[q.Name] = true
	}
	return chaosPartitions + len(names), nil
}

// podMilliCPU is what a pod's containers request of CPU.
func podMilliCPU(p *corev1.Pod) int64 {
	var m int64
	for _, c := range p.Spec.Containers {
		m += c.Resources.Requests.Cpu().MilliValue()
	}
	return m
}

// holdsNode reports whether p counts against its node: bound and not
// finished.
func holdsNode(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// overAllocated returns the nodes whose bound pods request more CPU than
// the node's allocatable, with those pods; a pod on a node that does not
// exist counts as over.
func overAllocated(pods []corev1.Pod, nodes []corev1.Node) map[string][]*corev1.Pod {
	alloc := make(map[string]int64, len(nodes))
	for i := range nodes {
		alloc[nodes[i].Name] = nodes[i].Status.Allocatable.Cpu().MilliValue()
	}
	on := map[string][]*corev1.Pod{}
	used := map[string]int64{}
	for i := range pods {
		p := &pods[i]
		if !holdsNode(p) {
			continue
		}
		on[p.Spec.NodeName] = append(on[p.Spec.NodeName], p)
		used[p.Spec.NodeName] += podMilliCPU(p)
	}
	out := map[string][]*corev1.Pod{}
	for node, u := range used {
		if a, ok := alloc[node]; !ok || u > a {
			out[node] = on[node]
		}
	}
	return out
}

// queueUse sums the CPU requested by the bound pods of each queue: a pod's
// queue is its group's (groupQueue, by the group annotation), else the
// queue it names itself.
func queueUse(pods []corev1.Pod, groupQueue map[string]string) map[string]int64 {
	out := map[string]int64{}
	for i := range pods {
		p := &pods[i]
		if !holdsNode(p) {
			continue
		}
		q, ok := groupQueue[p.Annotations[kube.GroupNameAnnotation]]
		if !ok {
			q = p.Annotations[kube.QueueNameAnnotation]
		}
		out[q] += podMilliCPU(p)
	}
	return out
}

// partlyBound returns the gangs (pods naming a group) of which some but
// fewer than minMember pods are bound, with their bound pods.
func partlyBound(pods []corev1.Pod, minMember int) map[string][]*corev1.Pod {
	bound := map[string][]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if g := p.Annotations[kube.GroupNameAnnotation]; g != "" && holdsNode(p) {
			bound[g] = append(bound[g], p)
		}
	}
	for g, ps := range bound {
		if len(ps) >= minMember {
			delete(bound, g)
		}
	}
	return bound
}

// assembleFaults turns one scenario's seeds into a report.Run.
func assembleFaults(sc faultScenario, seeds []seedResult, w *faultWorld) report.Run {
	out := report.Run{
		Name:       "faults/" + sc.name,
		Mode:       "real",
		Scenario:   modeFaults,
		Tier:       fmt.Sprintf("%d nodes", w.nodes),
		System:     "shardsched",
		Shards:     faultsShards,
		Invariants: map[string]int64{},
	}
	var lat []float64
	var cpu time.Duration
	leaders, admitted := 0, 0
	for _, s := range seeds {
		for k, n := range s.violations {
			out.Invariants[k] += n
		}
		out.Pods += s.bound
		lat = append(lat, s.latencies...)
		cpu += s.cpu
		admitted += s.admitted
		if s.leader {
			leaders++
		}
		for _, d := range s.details {
			out.Notes = append(out.Notes, fmt.Sprintf("seed %d: %s", s.seed, d))
		}
	}
	for _, k := range faultInvariants() {
		out.Invariants[k] += 0
	}
	sort.Float64s(lat)
	out.LatencyP50, out.LatencyP99, out.LatencyMax = report.Percentile(lat, 50), report.Percentile(lat, 99), report.Percentile(lat, 100)
	out.CPUSeconds = cpu.Seconds()
	out.Notes = append([]string{
		fmt.Sprintf("%s; %d seeds, the victim the coordinator's leader in %d; %d shard processes (session TTL %d s); per seed %d pods of %dm CPU (two fill a node) at a stream, gangs of %d capped at %.0f %% of their demand; %d PodGroups admitted before a fault over all seeds; latency is create→bound over every seed",
			sc.about, len(seeds), leaders, faultsShards, chaosSessionTTL, w.pods, w.podMilli, chaosGang, faultsCapShare*100, admitted),
	}, out.Notes...)
	return out
}

// printFaults writes the fault scenarios as a Markdown table, then every
// violation with its timeline.
func printFaults(w io.Writer, runs []report.Run) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### faults\n\n| scenario | pods bound | create→bound p50 | p99 | %s | status |\n|---|---:|---:|---:|%s---|\n",
		strings.Join(faultInvariants(), " | "), strings.Repeat("---:|", len(faultInvariants())))
	for _, r := range runs {
		status := "ok"
		if r.Failed() {
			status = "FAILED"
		}
		var counts []string
		for _, k := range faultInvariants() {
			counts = append(counts, fmt.Sprint(r.Invariants[k]))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", r.Name, r.Pods, seconds(r.LatencyP50), seconds(r.LatencyP99), strings.Join(counts, " | "), status)
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s.\n", r.Name, n)
		}
	}
}
