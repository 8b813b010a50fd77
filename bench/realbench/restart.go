package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
)

// modeRestart measures start-up at a size the stream mode cannot fill in
// a session: the run's pods are created already bound (spec.nodeName set,
// round-robin over the nodes, as pods a scheduler bound before) and left
// to kwok, which marks them running; once the machine is quiet the system
// is started and its first start timed to /readyz (it takes every bound
// pod into its caches and its quota books), then shard-0 is restarted
// -restarts times and kube-scheduler started cold against the same cluster
// as the baseline. Only the shardsched-proc-N systems run in it.
const modeRestart = "restart"

// maxRestartPods bounds -pods in restart mode (250,000 pods on 16,000
// nodes of 64 CPU is the 1M-core scale); the other modes keep
// maxSchedulePods.
const (
	maxRestartPods  = 300000
	maxSchedulePods = 200000
)

// checkRestartOptions refuses what restart mode cannot run: a system other
// than shardsched-proc-N, a workload (its pods would be placed by
// round-robin, not by what they ask), or more pods than the nodes hold at
// the fill the workloads allow.
func checkRestartOptions(o *options) error {
	for _, s := range o.systems {
		if _, ok := s.impl.(procSystem); !ok {
			return fmt.Errorf("-modes %s: system %s is not a shardsched-proc-N (only their start-up is measured)", modeRestart, s.name)
		}
	}
	if o.workload != nil {
		return fmt.Errorf("-modes %s: not with -workload (its pods are bound round-robin, which a workload's would not fit)", modeRestart)
	}
	if int64(o.pods) > int64(o.nodes)*o.shape.cpu*maxFillPercent/100 {
		return fmt.Errorf("-modes %s: -pods=%d of 1 CPU would take more than %d %% of -nodes=%d × %d CPU", modeRestart, o.pods, maxFillPercent, o.nodes, o.shape.cpu)
	}
	return nil
}

// roundRobinBinder returns a create call that binds each pod to the next of
// nodes before creating it.
func roundRobinBinder(create func(context.Context, *corev1.Pod) (*corev1.Pod, error), nodes []string) func(context.Context, *corev1.Pod) (*corev1.Pod, error) {
	var next atomic.Int64
	return func(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
		if len(nodes) == 0 {
			return nil, errors.New("no node to bind the pod to")
		}
		p.Spec.NodeName = nodes[int((next.Add(1)-1)%int64(len(nodes)))]
		return create(ctx, p)
	}
}

// runRestart is one system's run in restart mode (see modeRestart). The
// last run of an invocation leaves its pods to the control plane's end
// (deleting 250,000 pods one page at a time takes minutes).
func runRestart(ctx context.Context, o options, env *benchEnv, sys sysSpec, index int, last bool) (result, error) {
	run := newRunSpec(index, modeRestart, sys.name, o.pods)
	plan := uniformPlan(o.pods, o.groups, run)
	if err := createNamespace(ctx, env, run, plan.groups); err != nil {
		return result{}, err
	}
	list, err := env.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	nodes := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		nodes = append(nodes, n.Name)
	}
	list = nil
	fmt.Fprintf(os.Stderr, "  creating %d pods bound round-robin to %d nodes...\n", o.pods, len(nodes))
	createDur, err := createPods(ctx, roundRobinBinder(podCreator(env.cs, run.namespace), nodes), o.creators, plan, newBindWatch(), false)
	if err != nil {
		return result{}, err
	}
	plan = podPlan{} // the harness keeps no pod while the system starts
	r := result{mode: modeRestart, sys: sys, pods: o.pods, createPerSec: float64(o.pods) / createDur.Seconds()}
	fmt.Fprintf(os.Stderr, "  created at %.0f pods/s; waiting for kwok to mark them running (the machine quiet)...\n", r.createPerSec)
	quietNote, err := o.quiet.wait(ctx)
	if err != nil {
		return result{}, err
	}
	if quietNote != "" {
		r.notes = append(r.notes, "before the first start: "+quietNote)
	}
	load := procstat.StartLoadSampler(time.Second)
	defer load.Stop()
	harness0, t0 := procstat.CPU(), time.Now()
	inst, err := sys.impl.start(ctx, env, run)
	if err != nil {
		return result{}, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			r.peakRSSKiB = inst.stop()
		}
	}
	defer stop()
	if inst.ready == nil || inst.sinceStart == nil {
		return result{}, fmt.Errorf("%s: its start-up cannot be timed", sys.name)
	}
	if err := inst.ready(ctx, 10*time.Minute); err != nil {
		return result{}, fmt.Errorf("first start: %w", err)
	}
	first := report.Restart{What: fmt.Sprintf("first start with %d bound pods in the cluster (etcd's start and the shards' first hand-off included)", o.pods), ReadySeconds: time.Since(t0).Seconds()}
	cpu, rss := inst.sinceStart()
	first.CPUSeconds, first.PeakRSSMiB = cpu.Seconds(), rss
	fmt.Fprintf(os.Stderr, "  %s: ready after %.1f s; waiting for the machine to be quiet before the restarts...\n", first.What, first.ReadySeconds)
	if n, err := o.quiet.wait(ctx); err != nil {
		return result{}, err
	} else if n != "" {
		r.notes = append(r.notes, "before the restarts: "+n)
	}
	if inst.finish != nil {
		f, err := inst.finish(ctx)
		if err != nil {
			return result{}, err
		}
		r.notes = append(r.notes, f.notes...)
		r.restarts, r.coldStart = append([]report.Restart{first}, f.restarts...), f.coldStart
	} else {
		r.restarts = []report.Restart{first}
	}
	r.wall = time.Since(t0)
	r.cpu = inst.cpu()
	r.harnessCPU = procstat.CPU() - harness0
	stop()
	r.load = load.Stop()
	if last {
		return r, nil
	}
	if err := deletePods(ctx, env.cs, run.namespace); err != nil {
		return result{}, fmt.Errorf("delete the run's pods: %w", err)
	}
	return r, nil
}
