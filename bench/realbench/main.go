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
//
// Systems (the first listed is the baseline of the ratios):
//
//	binder              no-logic round-robin binder with 32 workers in this
//	                    process: the API server's ceiling
//	shardsched-N        N shardsched shards in this process
//	kube-scheduler      kube-scheduler v1.36.3 as a process, default
//	                    settings (client QPS 50, burst 100)
//	kube-scheduler-qps  the same with client QPS and burst 5000
//
// Each run gets its own namespace and schedulerName; its pods are deleted
// when it ends, so every run starts on empty nodes. Before the first run the
// binder binds -warmup pods, not reported, so that the baseline does not pay
// for a cold API server.
//
//	make bench-tools                                   # once: builds kube-scheduler
//	go run ./bench/realbench                           # 1,000 nodes × 64 CPU, 10,000 pods
//	go run ./bench/realbench -nodes 200 -pods 2000 -modes stream,backlog -out /tmp/realbench
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

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
	warmup                        int
	timeout                       time.Duration
	modes                         []string
	systems                       []sysSpec
	out                           string
}

func main() {
	var o options
	var modes, systems string
	flag.IntVar(&o.nodes, "nodes", 1000, "kwok nodes (64 CPU, 256Gi each)")
	flag.IntVar(&o.pods, "pods", 10000, "pods per run (1 CPU, 2Gi each)")
	flag.IntVar(&o.creators, "creators", 32, "concurrent pod creators")
	flag.IntVar(&o.groups, "groups", 100, "PodGroups the pods are spread over (like Jobs)")
	flag.IntVar(&o.warmup, "warmup", 1000, "pods the binder binds before the measured runs, to warm up the API server and etcd (not reported; 0: none)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the scheduling part of one run")
	flag.StringVar(&modes, "modes", modeStream, "modes to run, comma-separated: stream, backlog")
	flag.StringVar(&modes, "mode", modeStream, "same as -modes")
	flag.StringVar(&systems, "systems", "binder,shardsched-1,shardsched-3,kube-scheduler,kube-scheduler-qps",
		"systems to run, in order; the first is the baseline of the ratios")
	flag.StringVar(&o.out, "out", "", "also write the report (Markdown, JSON, plots) into this directory")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if err := o.parse(modes, systems); err != nil {
		fail(2, err)
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
	case o.pods < 1 || o.pods > 200000:
		return fmt.Errorf("-pods=%d: must be 1..200000", o.pods)
	case o.creators < 1 || o.creators > 256:
		return fmt.Errorf("-creators=%d: must be 1..256", o.creators)
	case o.groups < 1 || o.groups > o.pods:
		return fmt.Errorf("-groups=%d: must be 1..pods", o.groups)
	case o.warmup < 0 || o.warmup > o.pods:
		return fmt.Errorf("-warmup=%d: must be 0..pods", o.warmup)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout=%s: must be positive", o.timeout)
	}
	for _, m := range splitList(modes) {
		if m != modeStream && m != modeBacklog {
			return fmt.Errorf("-modes: unknown mode %q (stream or backlog)", m)
		}
		if slices.Contains(o.modes, m) {
			return fmt.Errorf("-modes: %q is listed twice", m)
		}
		o.modes = append(o.modes, m)
	}
	if len(o.modes) == 0 {
		return errors.New("-modes: empty")
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
	fmt.Fprintf(os.Stderr, "starting the control plane and %d kwok nodes...\n", o.nodes)
	cp, err := cluster.Start(ctx, cluster.Config{Kwok: true, CRDs: crds})
	if err != nil {
		return err
	}
	defer cp.Stop()
	rc := cp.RESTConfig()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := cluster.CreateFakeNodes(ctx, cs, "bench-node", o.nodes, "64", "256Gi", 5*time.Minute); err != nil {
		return err
	}
	coordEtcd, err := cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"})
	if err != nil {
		return err
	}
	defer coordEtcd.Close()
	env := &benchEnv{rest: rc, cs: cs, kubeconfig: cp.Kubeconfig, dir: cp.Dir, etcd: coordEtcd.Endpoints}

	if o.warmup > 0 {
		fmt.Fprintf(os.Stderr, "warming up: the binder binds %d pods...\n", o.warmup)
		w := o
		w.pods, w.groups = o.warmup, min(o.groups, o.warmup)
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
	for _, mode := range o.modes {
		for _, sys := range o.systems {
			fmt.Fprintf(os.Stderr, "running %s, %s mode: %d pods...\n", sys.name, mode, o.pods)
			r, err := runOne(ctx, o, env, mode, sys, len(results)+1)
			if err != nil {
				return fmt.Errorf("%s, %s mode: %w", sys.name, mode, err)
			}
			if err := cp.Check(); err != nil {
				return fmt.Errorf("control plane after %s, %s mode: %w", sys.name, mode, err)
			}
			results = append(results, r)
		}
	}
	printTables(os.Stdout, o, results)
	if o.out == "" {
		return nil
	}
	rep := buildReport(o, results, started)
	if err := writeReport(o.out, rep); err != nil {
		return fmt.Errorf("-out %s: %w", o.out, err)
	}
	fmt.Fprintf(os.Stderr, "report written to %s\n", o.out)
	return nil
}
