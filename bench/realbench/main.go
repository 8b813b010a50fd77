// Command realbench measures scheduling throughput, latency and cost on the
// real local control plane (kube-apiserver + kwok nodes). Every system runs
// in the same invocation on the same control plane, one after the other, so
// the ratios between them are meaningful on a noisy machine.
//
// Modes:
//
//	stream   the scheduler runs while -creators workers create the pods;
//	         latency is create→bound.
//	backlog  every pod is created first, then the scheduler is started and
//	         the clock starts with it; latency is scheduler start→bound.
//	restart  the shardsched-proc-N systems' start-up at a size the other
//	         modes cannot fill in a session (-pods up to 300,000: 250,000
//	         on 16,000 nodes is 1M cores): the pods are created already
//	         bound, round-robin over the nodes, and kwok marks them
//	         running; once the machine is quiet the system's first start
//	         is timed to every shard's /readyz, then shard-0 is restarted
//	         -restarts times and kube-scheduler started cold as the
//	         baseline. Identical pods only (no -workload). See restart.go.
//	chaos    not a mode of -systems: -chaos-shards shardsched shards as OS
//	         processes (cmd/shardsched, built with go build unless
//	         -shardsched-bin is given) on an etcd of their own, while
//	         -pods pods (gangs of 4 and single pods) are created at -rate
//	         pods/s; at 30 %, 50 % and 70 % of the creation period a shard
//	         that does not lead the coordinator is killed with SIGKILL, then
//	         the leader's process, then the coordinator's etcd is
//	         restarted. The report gives, per fault, the time until every
//	         partition and queue has an owner again and until the bind rate
//	         is back to 90 % of its level before the fault, and the admitted
//	         jobs lost. A broken invariant (pod bound twice, node
//	         double-booked, admitted job lost, pod never bound) fails the
//	         command after the report is written. See chaos.go.
//	faults   not a mode of -systems either: 3 shard processes whose
//	         connections to etcd, to the API server and from each other's
//	         gossip pass through loopback proxies (bench/faults); each of
//	         -fault-scenarios (a shard cut off from etcd while its binds are
//	         slowed, the API server slowed for one shard, etcd stalled for
//	         all, a gossip partition, a shard paused past its lease) runs
//	         -fault-seeds times on a cluster filled to 90 %, and the
//	         invariants (no pod bound twice, no node over its allocatable,
//	         no queue over its capability, no gang partly bound, no
//	         admitted job lost, every pod that fits bound) are computed from
//	         the API server and etcd after each run; a violation is
//	         reported with its timeline and fails the command. See faults.go.
//
// Systems (the first listed is the baseline of the ratios; in stream and
// backlog modes it runs again after the last, and the ratios are against
// the mean of its two runs: -baseline-again):
//
//	binder              no-logic round-robin binder with 32 workers in this
//	                    process: the API server's ceiling (it skips the
//	                    nodes it has filled, and ignores PodGroups and queues)
//	shardsched-N        N shardsched shards in this process
//	shardsched-N-json   the same with pods, nodes and bindings as JSON instead
//	                    of protobuf (to compare the two)
//	shardsched-N-bindW  (also after -json) with W bind workers per shard
//	                    instead of the scheduler's default
//	shardsched-proc-N   N cmd/shardsched OS processes on an etcd of their own:
//	                    CPU and peak RSS per process, and shard-0's restart
//	                    warm-up once the pods are bound (time to /readyz and
//	                    to every key owned again)
//	kube-scheduler      kube-scheduler v1.36.3 as a process, default
//	                    settings (client QPS 50, burst 100)
//	kube-scheduler-qps  the same with client QPS and burst 5000
//
// Pods: without -workload every pod asks for 1 CPU / 2Gi and the pods are
// spread over -groups PodGroups of minMember 1. With -workload FILE -tier
// NAME they are the jobs of a declarative workload file (the same files as
// bench/sim, bench/workloads/*.yaml): the first jobs of its generator
// (seeded with -seed) up to -pods pods, each a PodGroup (minMember = its
// size, in its leaf queue) and that many pods with the job's CPU, memory
// and GPU requests; the nodes take the workload's shape (GPUs on every
// gpuEvery-th node) and its queue tree is created once as Volcano Queues,
// capabilities and shares computed for -nodes nodes rather than the tier's.
// Arrival times and lifetimes are ignored (kwok pods never finish), so the
// pods must fit at once: realbench refuses a -pods whose pods request more
// than 90 % of the cluster's CPU, memory or GPUs. Only shardsched honours
// the PodGroups and queues; kube-scheduler and the binder place pods one by
// one. See workload.go.
//
// Each run gets its own namespace and schedulerName; its pods are deleted
// when it ends, so every run starts on empty nodes. Before the first run the
// binder binds -warmup pods, not reported, so that the baseline does not pay
// for a cold API server.
//
//	make bench-tools                                   # once: builds kube-scheduler
//	go run ./bench/realbench                           # 1,000 nodes × 64 CPU, 10,000 pods
//	go run ./bench/realbench -nodes 200 -pods 2000 -modes stream,backlog -out /tmp/realbench
//	go run ./bench/realbench -nodes 16000 -pods 250000 -groups 2500 -warmup 0 -modes restart -systems shardsched-proc-1 -quiet-max 10m
//	go run ./bench/realbench -nodes 200 -pods 6000 -rate 100 -modes chaos -out /tmp/realbench-chaos
//	go run ./bench/realbench -nodes 200 -warmup 0 -modes faults -fault-seeds 20 -out /tmp/realbench-faults
//	go run ./bench/realbench -workload bench/workloads/churn.yaml -tier 100k -nodes 1000 -pods 10000 -systems binder,shardsched-1,kube-scheduler-qps
//
// With -modes chaos or faults alone, -systems is not read (kube-scheduler
// need not be built). Those scenarios have pods of their own: -workload
// cannot be combined with them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
)

// Modes of a run.
const (
	modeStream  = "stream"
	modeBacklog = "backlog"
)

type options struct {
	nodes, pods, creators, groups int
	// serialJobPods: see createPods.
	serialJobPods bool
	warmup        int
	timeout       time.Duration
	// idleWindow is how long each stream run measures every process's
	// CPU with its system started and no pod, before the clock (0: not).
	idleWindow time.Duration
	// quiet is how each run first waits for the machine to be quiet
	// (busy set by main).
	quiet quietWait
	// profileSeconds: see benchEnv.profileSeconds.
	profileSeconds int
	// restarts: see benchEnv.restarts.
	restarts int
	// apiProfileSeconds: see benchEnv.apiProfileSeconds.
	apiProfileSeconds int
	modes             []string
	systems           []sysSpec
	// baselineAgain: stream and backlog modes with two systems or more
	// run the first again after the last (runOrder).
	baselineAgain bool
	out           string
	// chaos mode
	rate          float64
	chaosShards   int
	shardschedBin string
	dumpMetrics   bool
	// apiRequestTimeout is kube-apiserver's --request-timeout (0: its default).
	apiRequestTimeout time.Duration
	// faults mode
	fault faultOptions
	// shape is every kwok node's; workload is nil without -workload.
	shape    nodeShape
	workload *benchWorkload
}

// plan is what one run creates.
func (o options) plan(run runSpec) (podPlan, error) {
	if o.workload == nil {
		return uniformPlan(o.pods, o.groups, run), nil
	}
	return jobsPlan(o.workload.jobs, run)
}

func main() {
	var o options
	var modes, systems, workload, tier string
	var seed uint64
	flag.IntVar(&o.nodes, "nodes", 1000, "kwok nodes (64 CPU, 256Gi each; with -workload, the workload's node)")
	flag.IntVar(&o.pods, "pods", 10000, "pods per run (1 CPU, 2Gi each; with -workload, the workload's)")
	flag.IntVar(&o.creators, "creators", 32, "concurrent pod creators")
	flag.BoolVar(&o.serialJobPods, "serial-job-pods", false, "with -workload, each creator takes a whole job and makes its pods one after the other (the sixteenth to eighteenth sessions' runs), instead of the creators making each job's pods side by side, jobs in order, as a job controller does")
	flag.IntVar(&o.groups, "groups", 100, "PodGroups the pods are spread over (like Jobs); not read with -workload")
	flag.StringVar(&workload, "workload", "", "declarative workload file (bench/workloads/*.yaml) the pods are drawn from (empty: identical pods over -groups PodGroups)")
	flag.StringVar(&tier, "tier", "", "tier of -workload (its job mix, queue tree and GPUs; the cluster is -nodes, not the tier's)")
	flag.Uint64Var(&seed, "seed", 1, "seed of -workload's generator")
	flag.IntVar(&o.warmup, "warmup", 1000, "pods the binder binds before the measured runs, to warm up the API server and etcd (not reported; 0: none)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the scheduling part of one run")
	flag.Float64Var(&o.quiet.below, "quiet-below", 0.3, "stream, backlog and restart modes: before each run (and in restart mode before the restarts), wait until the whole machine is busy below this many cores over a second (the run before's deletes still being worked through), at most -quiet-max (0: do not wait)")
	flag.DurationVar(&o.quiet.max, "quiet-max", time.Minute, "the longest wait for -quiet-below, after which the run starts anyway (1s..10m)")
	flag.DurationVar(&o.idleWindow, "idle-window", 5*time.Second, "stream mode: how long each run first measures every process's CPU with its system started and no pod (0: not measured; at most 1m)")
	flag.StringVar(&modes, "modes", modeStream, "modes to run, comma-separated: stream, backlog, restart, chaos, faults")
	flag.StringVar(&modes, "mode", modeStream, "same as -modes")
	flag.StringVar(&systems, "systems", "binder,shardsched-1,shardsched-3,kube-scheduler,kube-scheduler-qps",
		"systems to run, in order; the first is the baseline of the ratios")
	flag.BoolVar(&o.baselineAgain, "baseline-again", true, "stream and backlog modes with two systems or more: run the first system again after the last, and take the ratios against the mean of its two runs (the machine's speed drifts over an invocation; a baseline measured on both sides of the others favours none of them)")
	flag.StringVar(&o.out, "out", "", "also write the report (Markdown, JSON, plots) into this directory")
	flag.Float64Var(&o.rate, "rate", 100, "chaos mode: pods created per second (the creators are rate-limited)")
	flag.IntVar(&o.chaosShards, "chaos-shards", 4, "chaos mode: shard processes (two are killed)")
	flag.StringVar(&o.shardschedBin, "shardsched-bin", "", "chaos and faults modes and the shardsched-proc-N systems: the cmd/shardsched binary to run (empty: go build it into a temporary directory)")
	flag.IntVar(&o.fault.seeds, "fault-seeds", 20, "faults mode: runs of each scenario, each with its own seed (victim and moment of the fault)")
	flag.Uint64Var(&o.fault.firstSeed, "fault-first-seed", 1, "faults mode: the first seed; the runs take the seeds that follow it")
	faultScenarioList := flag.String("fault-scenarios", "", "faults mode: scenarios to run, comma-separated (empty: all): "+strings.Join(scenarioNames(), ", "))
	flag.StringVar(&o.fault.victim, "fault-victim", victimAny, "faults mode: whom a fault falls on: any (the coordinator's leader half the time), leader, or other (never the leader)")
	flag.DurationVar(&o.fault.stream, "fault-stream", 12*time.Second, "faults mode: each run creates its pods evenly over this long (the fault falls at 20–50 % of it)")
	flag.DurationVar(&o.fault.timeout, "fault-timeout", 90*time.Second, "faults mode: bound on binding after a run's last pod was created")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.IntVar(&o.restarts, "restarts", 1, "shardsched-proc-N: times shard-0 is restarted once a run's pods are bound, each timed (1..10); a kube-scheduler is then started cold beside it as the baseline")
	flag.IntVar(&o.profileSeconds, "shard-cpuprofile-seconds", 0, "shardsched-proc-N: take a CPU profile of each shard process over this many seconds from the clock's start, into -out (0: none; at most 600)")
	flag.IntVar(&o.apiProfileSeconds, "apiserver-cpuprofile-seconds", 0, "stream runs: take a CPU profile of kube-apiserver over this many seconds from each run's clock start, into -out (0: none; at most 600)")
	flag.DurationVar(&o.apiRequestTimeout, "apiserver-request-timeout", 0, "kube-apiserver's --request-timeout (0: its default, 60s; else 1s..1h); it keeps max(75s, this + 15s) of watch history, which a pod watch must resume within after a list of every pod")
	flag.BoolVar(&o.dumpMetrics, "dump-metrics", false, "print each shard's shardsched_* metrics to stderr when its run ends")
	flag.Parse()
	o.fault.scenarios = splitList(*faultScenarioList)
	if o.out != "" {
		o.fault.logs = filepath.Join(o.out, "fault-logs")
	}
	o.quiet.window, o.quiet.busy = time.Second, procstat.MachineBusy
	if err := o.parse(modes, systems); err != nil {
		fail(2, err)
	}
	if err := o.loadWorkload(workload, tier, seed); err != nil {
		fail(2, err)
	}
	if slices.Contains(o.modes, modeRestart) {
		if err := checkRestartOptions(&o); err != nil {
			fail(2, err)
		}
	}
	if o.profileSeconds > 0 || o.apiProfileSeconds > 0 {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			fail(2, fmt.Errorf("-out: %w", err))
		}
	}
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
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fail(1, err)
	}
}

// parse validates the numeric flags and parses the lists, naming the flag
// at fault.
func (o *options) parse(modes, systems string) error {
	switch {
	case o.nodes < 1 || o.nodes > 20000:
		return fmt.Errorf("-nodes=%d: must be 1..20000", o.nodes)
	case o.pods < 1 || o.pods > maxRestartPods:
		return fmt.Errorf("-pods=%d: must be 1..%d", o.pods, maxRestartPods)
	case o.creators < 1 || o.creators > 256:
		return fmt.Errorf("-creators=%d: must be 1..256", o.creators)
	case o.groups < 1 || o.groups > o.pods:
		return fmt.Errorf("-groups=%d: must be 1..pods", o.groups)
	case o.warmup < 0 || o.warmup > o.pods:
		return fmt.Errorf("-warmup=%d: must be 0..pods", o.warmup)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout=%s: must be positive", o.timeout)
	case o.restarts < 1 || o.restarts > 10:
		return fmt.Errorf("-restarts=%d: must be 1..10", o.restarts)
	case o.profileSeconds < 0 || o.profileSeconds > 600:
		return fmt.Errorf("-shard-cpuprofile-seconds=%d: must be 0..600", o.profileSeconds)
	case o.profileSeconds > 0 && o.out == "":
		return errors.New("-shard-cpuprofile-seconds: needs -out, where the profiles are written")
	case o.apiProfileSeconds < 0 || o.apiProfileSeconds > 600:
		return fmt.Errorf("-apiserver-cpuprofile-seconds=%d: must be 0..600", o.apiProfileSeconds)
	case o.apiProfileSeconds > 0 && o.out == "":
		return errors.New("-apiserver-cpuprofile-seconds: needs -out, where the profiles are written")
	case !(o.quiet.below >= 0 && o.quiet.below <= 1024):
		return fmt.Errorf("-quiet-below=%g: must be 0..1024 cores", o.quiet.below)
	case o.apiRequestTimeout != 0 && (o.apiRequestTimeout < time.Second || o.apiRequestTimeout > time.Hour):
		return fmt.Errorf("-apiserver-request-timeout=%s: must be 0 (kube-apiserver's default) or 1s..1h", o.apiRequestTimeout)
	case o.quiet.max < time.Second || o.quiet.max > 10*time.Minute:
		return fmt.Errorf("-quiet-max=%s: must be 1s..10m", o.quiet.max)
	case o.idleWindow < 0 || o.idleWindow > time.Minute:
		return fmt.Errorf("-idle-window=%s: must be 0..1m", o.idleWindow)
	case !(o.rate > 0 && o.rate <= 10000):
		return fmt.Errorf("-rate=%g: must be in (0, 10000]", o.rate)
	case o.chaosShards < 3 || o.chaosShards > 16:
		return fmt.Errorf("-chaos-shards=%d: must be 3..16 (two are killed)", o.chaosShards)
	case o.fault.seeds < 1 || o.fault.seeds > 1000:
		return fmt.Errorf("-fault-seeds=%d: must be 1..1000", o.fault.seeds)
	case o.fault.stream < time.Second || o.fault.stream > time.Hour:
		return fmt.Errorf("-fault-stream=%s: must be 1s..1h", o.fault.stream)
	case o.fault.timeout <= 0:
		return fmt.Errorf("-fault-timeout=%s: must be positive", o.fault.timeout)
	case o.fault.victim != victimAny && o.fault.victim != victimLeader && o.fault.victim != victimOther:
		return fmt.Errorf("-fault-victim=%q: must be %s, %s or %s", o.fault.victim, victimAny, victimLeader, victimOther)
	}
	if _, err := pickScenarios(o.fault.scenarios); err != nil {
		return fmt.Errorf("-fault-scenarios: %w", err)
	}
	for _, m := range splitList(modes) {
		if m != modeStream && m != modeBacklog && m != modeRestart && m != modeChaos && m != modeFaults {
			return fmt.Errorf("-modes: unknown mode %q (stream, backlog, restart, chaos or faults)", m)
		}
		if slices.Contains(o.modes, m) {
			return fmt.Errorf("-modes: %q is listed twice", m)
		}
		o.modes = append(o.modes, m)
	}
	if len(o.modes) == 0 {
		return errors.New("-modes: empty")
	}
	if !slices.ContainsFunc(o.modes, func(m string) bool { return m != modeChaos && m != modeFaults }) {
		return nil // the chaos and fault scenarios have their own system
	}
	for _, name := range splitList(systems) {
		s, err := parseSystem(name)
		if err != nil {
			return fmt.Errorf("-systems: %w", err)
		}
		if slices.ContainsFunc(o.systems, func(t sysSpec) bool { return t.name == s.name }) {
			return fmt.Errorf("-systems: %q is listed twice", name)
		}
		o.systems = append(o.systems, s)
	}
	if len(o.systems) == 0 {
		return errors.New("-systems: empty")
	}
	if slices.ContainsFunc(o.modes, func(m string) bool { return m == modeStream || m == modeBacklog }) && o.pods > maxSchedulePods {
		return fmt.Errorf("-pods=%d: at most %d in stream and backlog modes (up to %d in restart mode alone)", o.pods, maxSchedulePods, maxRestartPods)
	}
	return nil
}

// loadWorkload reads -workload and takes its jobs for -tier and -seed; it
// sets the node shape either way.
func (o *options) loadWorkload(path, tier string, seed uint64) error {
	o.shape = uniformShape()
	switch {
	case path == "" && tier != "":
		return fmt.Errorf("-tier=%s: needs -workload", tier)
	case path == "":
		return nil
	case tier == "":
		return fmt.Errorf("-workload=%s: needs -tier", path)
	case slices.Contains(o.modes, modeChaos) || slices.Contains(o.modes, modeFaults):
		return errors.New("-workload: not with -modes chaos or faults, whose pods are their own")
	}
	w, err := workload.Load(path)
	if err != nil {
		return fmt.Errorf("-workload: %w", err)
	}
	b, err := newBenchWorkload(path, w, tier, seed, o.pods, o.nodes)
	if err != nil {
		return err
	}
	if o.warmup > 0 && int64(o.warmup)*1000 > int64(o.nodes)*b.shape().cpu*1000*maxFillPercent/100 {
		return fmt.Errorf("-warmup=%d: its 1-CPU pods would take more than %d %% of -nodes=%d × %d CPU", o.warmup, maxFillPercent, o.nodes, b.shape().cpu)
	}
	o.workload, o.shape = b, b.shape()
	return nil
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "realbench:", err)
	os.Exit(code)
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	started := time.Now()
	var shardschedBin string
	if slices.Contains(o.modes, modeChaos) || slices.Contains(o.modes, modeFaults) ||
		slices.ContainsFunc(o.systems, func(s sysSpec) bool { _, ok := s.impl.(procSystem); return ok }) {
		if o.shardschedBin == "" {
			fmt.Fprintln(os.Stderr, "building cmd/shardsched for the shard processes...")
		}
		bin, cleanup, err := shardschedBinary(ctx, o.shardschedBin)
		if err != nil {
			return err
		}
		defer cleanup()
		shardschedBin = bin
	}
	fmt.Fprintf(os.Stderr, "starting the control plane and %d kwok nodes...\n", o.nodes)
	cp, err := cluster.Start(ctx, cluster.Config{Kwok: true, CRDs: crds, APIServerRequestTimeout: o.apiRequestTimeout})
	if err != nil {
		return err
	}
	defer cp.Stop()
	rc := cp.RESTConfig()
	// The harness (creators, its watch of binds) talks to the API server
	// over connections of its own: client-go shares one HTTP/2 connection
	// among the clients of equal configurations in a process, and with
	// the in-process systems on it too, their watches and binds queued
	// behind the creators' requests (the harness's watch saw pods 3.5–5 s
	// after their creation in the binder and shardsched runs, 0.2 s beside
	// kube-scheduler's own process). A dialer of its own gives it a
	// transport (and connections) that no other client shares.
	hc := rest.CopyConfig(rc)
	hc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	cs, err := kubernetes.NewForConfig(hc)
	if err != nil {
		return err
	}
	nodes, err := o.shape.nodes("bench-node", o.nodes)
	if err != nil {
		return err
	}
	if err := cluster.CreateNodes(ctx, cs, nodes, 5*time.Minute); err != nil {
		return err
	}
	if o.workload != nil {
		fmt.Fprintf(os.Stderr, "creating the %d queues of workload %s...\n", len(o.workload.queues), o.workload.w.Name)
		if err := createQueues(ctx, rc, queueObjects(o.workload.queues)); err != nil {
			return err
		}
	}
	coordEtcd, err := cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"})
	if err != nil {
		return err
	}
	defer coordEtcd.Close()
	env := &benchEnv{rest: rc, cs: cs, kubeconfig: cp.Kubeconfig, dir: cp.Dir, etcd: coordEtcd.Endpoints, controlPIDs: cp.PIDs(), profileSeconds: o.profileSeconds, restarts: o.restarts, apiProfileSeconds: o.apiProfileSeconds, profileDir: o.out, dumpMetrics: o.dumpMetrics, shardschedBin: shardschedBin}

	if o.warmup > 0 {
		fmt.Fprintf(os.Stderr, "warming up: the binder binds %d pods...\n", o.warmup)
		w := o
		w.pods, w.groups, w.workload = o.warmup, min(o.groups, o.warmup), nil // identical pods
		binder, err := parseSystem("binder")
		if err != nil {
			return err
		}
		binder.name = "warmup-binder" // a namespace and schedulerName of its own
		if _, err := runOne(ctx, w, env, modeStream, binder, 0); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var results []result
	var chaosRuns, faultRuns []report.Run
	// Each run's figures are written as soon as it ends, so that a later
	// failure loses nothing measured before it.
	save := func() error {
		if o.out == "" {
			return nil
		}
		if err := writeReport(o.out, buildReport(o, results, chaosRuns, faultRuns, started)); err != nil {
			return fmt.Errorf("-out %s: %w", o.out, err)
		}
		return nil
	}
	runs := func() error {
		for _, mode := range o.modes {
			switch mode {
			case modeChaos:
				fmt.Fprintf(os.Stderr, "running the chaos scenario: %d shard processes, %d pods at %.0f pods/s...\n", o.chaosShards, o.pods, o.rate)
				r, err := runChaos(ctx, o, env, shardschedBin, len(results)+len(chaosRuns)+1)
				if err != nil {
					return fmt.Errorf("chaos: %w", err)
				}
				if err := cp.Check(); err != nil {
					return fmt.Errorf("control plane after the chaos scenario: %w", err)
				}
				chaosRuns = append(chaosRuns, r)
				if err := save(); err != nil {
					return err
				}
				continue
			case modeFaults:
				err := runFaults(ctx, o.fault, env, shardschedBin, func(r report.Run) error {
					faultRuns = append(faultRuns, r)
					if err := cp.Check(); err != nil {
						return fmt.Errorf("control plane after %s: %w", r.Name, err)
					}
					return save()
				})
				if err != nil {
					return fmt.Errorf("faults: %w", err)
				}
				continue
			}
			order := o.runOrder(mode)
			for si, sys := range order {
				fmt.Fprintf(os.Stderr, "running %s, %s mode: %d pods%s...\n", sys.name, mode, o.pods, o.workloadNote())
				var r result
				var err error
				if mode == modeRestart {
					last := mode == o.modes[len(o.modes)-1] && si == len(order)-1
					r, err = runRestart(ctx, o, env, sys, len(results)+len(chaosRuns)+1, last)
				} else {
					r, err = runOne(ctx, o, env, mode, sys, len(results)+len(chaosRuns)+1)
				}
				if err != nil {
					return fmt.Errorf("%s, %s mode: %w", sys.name, mode, err)
				}
				if err := cp.Check(); err != nil {
					return fmt.Errorf("control plane after %s, %s mode: %w", sys.name, mode, err)
				}
				results = append(results, r)
				if err := save(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	runErr := runs()
	printTables(os.Stdout, o, results)
	printChaos(os.Stdout, chaosRuns)
	printFaults(os.Stdout, faultRuns)
	if runErr != nil {
		if o.out != "" {
			fmt.Fprintf(os.Stderr, "the figures of the runs that ended are in %s\n", o.out)
		}
		return runErr
	}
	if o.out != "" {
		fmt.Fprintf(os.Stderr, "report written to %s\n", o.out)
	}
	return outcome(results, append(chaosRuns, faultRuns...))
}

// outcome is what the command ends with once every run's figures are out:
// an error for the first run that broke an invariant (a pod bound twice or
// a node double-booked in any mode; in chaos and fault runs also an
// admitted job lost) or whose restart was not timed, else nil.
func outcome(results []result, others []report.Run) error {
	for _, r := range results {
		if r.boundTwice != 0 || r.doubleBooked != 0 {
			return fmt.Errorf("%s, %s mode broke an invariant: %d pods bound twice, %d nodes double-booked", r.sys.name, r.mode, r.boundTwice, r.doubleBooked)
		}
		if rs, ok := report.NotTimed(r.restarts); ok {
			return fmt.Errorf("%s, %s mode: %s not timed: %s", r.sys.name, r.mode, rs.What, rs.Error)
		}
	}
	for _, r := range others {
		if r.Failed() {
			return fmt.Errorf("%s broke an invariant: %v", r.Name, r.Invariants)
		}
	}
	return nil
}

// runOrder is the systems a mode runs, in order: -systems, and in stream
// and backlog modes with -baseline-again and two systems or more, the
// first once more after the last, so that the baseline is measured on both
// sides of the others and a drift of the machine over the invocation
// favours neither.
func (o options) runOrder(mode string) []sysSpec {
	if !o.baselineAgain || len(o.systems) < 2 || (mode != modeStream && mode != modeBacklog) {
		return o.systems
	}
	return append(slices.Clone(o.systems), o.systems[0].runAgain())
}

// workloadNote is " of churn/100k (812 jobs)" with a workload, else "".
func (o options) workloadNote() string {
	if o.workload == nil {
		return ""
	}
	return fmt.Sprintf(" of %s (%d jobs)", o.workload.label(), len(o.workload.jobs))
}

// createQueues creates the workload's Volcano Queues, parents first (the
// order of workload.QueueSpecs).
func createQueues(ctx context.Context, rc *rest.Config, queues []*schedv1beta1.Queue) error {
	vc, err := volcano.NewForConfig(rc)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create queue %s: %w", q.Name, err)
		}
	}
	return nil
}
