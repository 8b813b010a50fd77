package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/internal/cluster"
)

// Invariant names in report.Run.Invariants.
const (
	invBoundTwice   = "pods_bound_twice"
	invDoubleBooked = "double_booked_nodes"
)

// printTables writes one Markdown table per mode; ratios are against the
// first system of the mode (the mean of its runs when it ran again last).
func printTables(w io.Writer, o options, results []result) {
	if b := o.workload; b != nil {
		fmt.Fprintf(w, "realbench: %d kwok nodes × %s, workload %s (%s, seed %d): %d pods in %d jobs per run, %d creators\n",
			o.nodes, o.shape, b.label(), b.path, b.seed, o.pods, len(b.jobs), o.creators)
	} else {
		fmt.Fprintf(w, "realbench: %d kwok nodes × 64 CPU, %d pods of 1 CPU / 2Gi per run, %d creators, %d PodGroups\n",
			o.nodes, o.pods, o.creators, o.groups)
	}
	for _, mode := range o.modes {
		var rs []result
		for _, r := range results {
			if r.mode == mode {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		base := rs[0]
		if mode == modeRestart {
			fmt.Fprintf(w, "\n### %s mode\n\n", mode)
			fmt.Fprintf(w, "%d pods created bound round-robin at %.0f pods/s before the system started (kwok marks them running); each start below is timed to /readyz.\n", base.pods, base.createPerSec)
		} else {
			printThroughput(w, mode, rs)
		}
		for _, r := range rs {
			if mode == modeBacklog && len(r.bindTimes) > 0 {
				fmt.Fprintf(w, "%s: first bind %.2f s after it was started.\n", r.sys.name, r.bindTimes[0])
			}
			if !r.inProcess {
				fmt.Fprintf(w, "%s: the harness (this process: pod creators and watch) used %.1f CPU s beside it.\n", r.sys.name, r.harnessCPU.Seconds())
			}
			for _, n := range r.notes {
				fmt.Fprintf(w, "%s: %s.\n", r.sys.name, n)
			}
			starts := slices.Clone(r.restarts)
			if r.coldStart != nil {
				starts = append(starts, *r.coldStart)
			}
			for _, rs := range starts {
				if rs.Error != "" {
					fmt.Fprintf(w, "%s: %s: not timed: %s.\n", r.sys.name, rs.What, rs.Error)
					continue
				}
				fmt.Fprintf(w, "%s: %s: ready after %.1f s (%.1f CPU s, peak RSS %.0f MiB)", r.sys.name, rs.What, rs.ReadySeconds, rs.CPUSeconds, rs.PeakRSSMiB)
				if rs.OwnedSeconds > 0 {
					fmt.Fprintf(w, ", owned its keys again after %.1f s", rs.OwnedSeconds)
				}
				if rs.Steps != "" {
					fmt.Fprintf(w, "; its steps: %s", rs.Steps)
				}
				fmt.Fprintln(w, ".")
			}
			if l := reportLoad(r.load); l != nil {
				fmt.Fprintf(w, "%s: machine load (1 min) %.2f when the clock started, %.2f on average (max %.2f) while it ran, on %d CPUs.\n",
					r.sys.name, l.Before, l.Mean, l.Max, l.CPUs)
			}
		}
	}
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w, "\n¹ in-process systems: CPU of the whole bench process over the run, harness included.")
	fmt.Fprintln(w, "² in-process systems: peak RSS of the whole bench process so far (it only grows over the invocation).")
}

// printThroughput is a stream or backlog mode's table and its pod creation
// rate. The ratios are against the baseline's pods/s: the mean of its runs
// when it ran again after the others (-baseline-again).
func printThroughput(w io.Writer, mode string, rs []result) {
	base := rs[0]
	baseRate, each := baselineRate(rs, mode, base.sys.name)
	latency := "create→bound"
	if mode == modeBacklog {
		latency = "start→bound"
	}
	vs := base.sys.name
	if len(each) > 1 {
		vs += fmt.Sprintf(" (mean of %d runs)", len(each))
	}
	fmt.Fprintf(w, "\n### %s mode\n\n", mode)
	fmt.Fprintf(w, "| system | pods/s | vs %s | %s p50 | p99 | max | CPU s | CPU s / 1000 pods | peak RSS MiB | unbound | bound twice | double-booked nodes |\n", vs, latency)
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		cpuNote, rssNote := "", ""
		if r.inProcess {
			cpuNote, rssNote = "¹", "²"
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %.1f%s | %.2f%s | %.0f%s | %d | %d | %d |\n",
			r.sys.name, r.podsPerSec, ratio(r.podsPerSec, baseRate),
			seconds(report.Percentile(r.latencies, 50)), seconds(report.Percentile(r.latencies, 99)), seconds(report.Percentile(r.latencies, 100)),
			r.cpu.Seconds(), cpuNote, cpuPer1000(r), cpuNote, float64(r.peakRSSKiB)/1024, rssNote,
			r.pods-r.bound(), r.boundTwice, r.doubleBooked)
	}
	if len(each) > 1 {
		fmt.Fprintf(w, "\n%s ran first and again last (%s pods/s); the ratios are against their mean, %.0f pods/s.\n", base.sys.name, joinRates(each), baseRate)
	}
	fmt.Fprintf(w, "\npod creation ran at %.0f pods/s in the %s run", base.createPerSec, base.sys.name)
	if mode == modeStream {
		fmt.Fprintf(w, " (the ceiling of any scheduler in stream mode)")
	} else {
		fmt.Fprintf(w, " (before the scheduler started; not timed)")
	}
	fmt.Fprintln(w, ".")
}

// baselineRate is the mean pods/s of system name's runs in mode (its
// second run, from -baseline-again, included) and each run's, in order;
// 0 and nil if it did not run.
func baselineRate(results []result, mode, name string) (float64, []float64) {
	return meanOf(baselineRuns(results, mode, name), func(r result) float64 { return r.podsPerSec })
}

// baselineRuns is the runs in mode of the system listed as name in
// -systems (its run again, from -baseline-again, included), in order.
func baselineRuns(results []result, mode, name string) []result {
	var out []result
	for _, r := range results {
		if r.mode == mode && r.sys.baseName() == name {
			out = append(out, r)
		}
	}
	return out
}

// meanOf is the mean of f over runs and each run's value, in order; 0 and
// nil without runs.
func meanOf(runs []result, f func(result) float64) (float64, []float64) {
	if len(runs) == 0 {
		return 0, nil
	}
	each := make([]float64, len(runs))
	var sum float64
	for i, r := range runs {
		each[i] = f(r)
		sum += each[i]
	}
	return sum / float64(len(runs)), each
}

// joinRates is "812 and 745" (pods/s, rounded).
func joinRates(rates []float64) string {
	s := make([]string, len(rates))
	for i, v := range rates {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func ratio(v, base float64) string {
	if !(base > 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

// p50Of is a run's median create→bound (or start→bound) latency, as
// reported (toRun).
func p50Of(r result) float64 { return report.Percentile(r.latencies, 50) }

// harnessPer1000 is the harness's CPU s per 1000 bound pods beside a
// system that runs as processes of its own.
func harnessPer1000(r result) float64 {
	if r.bound() == 0 {
		return 0
	}
	return r.harnessCPU.Seconds() / float64(r.bound()) * 1000
}

func cpuPer1000(r result) float64 {
	if r.bound() == 0 {
		return 0
	}
	return r.cpu.Seconds() / float64(r.bound()) * 1000
}

// buildReport turns the results into a report.Report with the targets the
// real mode is judged by.
func buildReport(o options, results []result, chaosRuns, faultRuns []report.Run, started time.Time) report.Report {
	rep := report.Report{
		Title:   fmt.Sprintf("realbench: %d kwok nodes, %d pods per run", o.nodes, o.pods),
		Command: strings.Join(append([]string{"realbench"}, os.Args[1:]...), " "),
		Started: started,
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Notes: []string{
			"Each run has its own namespace and schedulerName and starts on empty nodes (the previous run's pods are deleted).",
			"stream: latency is create→bound. backlog: every pod exists before the scheduler starts; the clock starts when it is started and latency is start→bound, so its p99 is about the drain time and the p99 target is judged on stream runs only.",
			"In-process systems (binder, shardsched-N): CPU is the whole bench process over the run, harness (pod creators, watch) included; peak RSS is the bench process's peak so far. kube-scheduler and shard processes (shardsched-proc-N) run as processes of their own: their CPU and peak RSS are their own (the peak read from /proc just before they are stopped, so a graceful stop's own memory is not in it; for a shard restarted by the run, its last process's).",
			"kube-scheduler " + cluster.KubeVersion + ": one profile named after the run's schedulerName, leader election off, default plugins and percentageOfNodesToScore; kube-scheduler uses client QPS 50 / burst 100 (its defaults), kube-scheduler-qps 5000 / 5000.",
		},
	}
	if slices.ContainsFunc(results, func(r result) bool { return r.sys.again }) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("stream and backlog: %s, the baseline, runs first and again after the last system (%s%s); the ratios are against the mean of its two runs, so that a drift of the machine's speed over the invocation favours no system.", o.systems[0].name, o.systems[0].name, againSuffix))
	}
	if slices.Contains(o.modes, modeRestart) {
		rep.Notes = append(rep.Notes, "restart: the run's pods are created already bound (spec.nodeName, round-robin over the nodes) before the system starts, and kwok marks them running; the system's first start (its coordinator's etcd started and its first hand-off of keys included) is timed to every shard's /readyz, then shard-0's restarts, against kube-scheduler's cold start on the same cluster. Nothing is scheduled: the run's pods/s and latencies are not measured.")
	}
	tier, label := fmt.Sprintf("%d nodes", o.nodes), ""
	if b := o.workload; b != nil {
		tier, label = fmt.Sprintf("%s %s, %d nodes", b.w.Name, b.tierName, o.nodes), b.label()
		rep.Title += fmt.Sprintf(", workload %s (seed %d)", label, b.seed)
		rep.Notes = append(rep.Notes, workloadNotes(o)...)
	}
	for _, r := range results {
		rep.Runs = append(rep.Runs, toRun(r, tier, label))
	}
	rep.Targets = targets(results, rep.Runs)
	for _, r := range chaosRuns {
		rep.Runs = append(rep.Runs, r)
		rep.Targets = append(rep.Targets, chaosTargets(r)...)
	}
	if len(chaosRuns) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("chaos: shardsched shards as OS processes; at 30 %%, 50 %% and 70 %% of the pod creation period a shard that does not lead the coordinator is killed with SIGKILL, then the leader's process, then the coordinator's etcd is restarted. "+
			"Owners back: the first complete scrape of every live shard's /metrics (every %s), begun after the fault's action returned, whose owned keys sum to every partition and queue. "+
			"Throughput back: the end of the first %s window wholly after the fault whose bind rate is ≥ %.0f %% of the healthy rate, the rate over the %s before the first fault (so %s means no visible dip).",
			scrapeInterval, rateWindow, recoveredShare*100, preFaultWindow, rateWindow))
	}
	for _, r := range faultRuns {
		rep.Runs = append(rep.Runs, r)
		rep.Targets = append(rep.Targets, faultTarget(r))
	}
	if len(faultRuns) > 0 {
		rep.Notes = append(rep.Notes, "faults: shardsched shards as OS processes whose connections to etcd, to the API server and from each other's gossip pass through loopback proxies (bench/faults); one fault per run, on a victim and at a moment its seed picks; the invariants are computed after each run from the API server's pods and nodes and the coordinator's etcd. See bench/realbench/faults.go.")
	}
	return rep
}

// streamNote says how a workload's pods are created.
func streamNote(serial bool, creators int) string {
	how := fmt.Sprintf("the %d creators take the next pod, the jobs' pods in order, so a job's pods are created side by side as a job controller creates them", creators)
	if serial {
		how = fmt.Sprintf("each of the %d creators takes the next whole job and creates its pods one after the other (-serial-job-pods)", creators)
	}
	return "Arrival times and the tier's rate are ignored: in stream mode " + how + ", as fast as the API server takes them; in backlog mode every pod exists before the scheduler starts."
}

// faultTarget judges a fault scenario: no violation over its seeds.
func faultTarget(r report.Run) report.Target {
	var total int64
	for _, n := range r.Invariants {
		total += n
	}
	t := report.Target{Name: "invariant violations over every seed (" + r.Name + ", " + r.Tier + ")", Goal: "0", Value: fmt.Sprint(total), Met: total == 0}
	if !t.Met {
		t.Why = "each violation and its timeline is in the run's notes"
	}
	return t
}

// chaosTargets judges a chaos run: no admitted job lost, and both
// ownership and throughput back after every fault.
func chaosTargets(r report.Run) []report.Target {
	where := fmt.Sprintf("%s, %s", r.Name, r.Tier)
	lost := report.Target{
		Name:  "admitted jobs lost through the faults (" + where + ")",
		Goal:  "0",
		Value: fmt.Sprintf("%d", r.Chaos.AdmittedJobsLost),
		Met:   r.Chaos.AdmittedJobsLost == 0,
	}
	owners := report.Target{Name: "every partition and queue owned again after each fault (" + where + ")", Goal: "yes, after every fault", Met: true}
	thru := report.Target{Name: "throughput back to ≥ 90 % of its pre-fault rate after each fault (" + where + ")", Goal: "yes, after every fault", Met: true}
	var ov, tv []string
	for _, e := range r.Chaos.Events {
		ov = append(ov, fmt.Sprintf("%s: %s s", e.What, recoverySeconds(e.OwnersBackAfter)))
		tv = append(tv, fmt.Sprintf("%s: %s s", e.What, recoverySeconds(e.ThroughputBackAfter)))
		owners.Met = owners.Met && e.OwnersBackAfter >= 0
		thru.Met = thru.Met && e.ThroughputBackAfter >= 0
	}
	owners.Value, thru.Value = strings.Join(ov, "; "), strings.Join(tv, "; ")
	return []report.Target{lost, owners, thru}
}

// toRun turns a result into a report.Run; label, when not empty, names the
// workload and tier in the run's name ("stream/churn/100k/binder").
func toRun(r result, tier, label string) report.Run {
	system := r.sys.baseName()
	if r.sys.shards > 0 {
		system = "shardsched"
	}
	name := r.mode + "/" + r.sys.name
	if label != "" {
		name = r.mode + "/" + label + "/" + r.sys.name
	}
	pods, unbound := r.bound(), r.pods-r.bound()
	if r.mode == modeRestart { // created bound: nothing was scheduled
		pods, unbound = r.pods, 0
	}
	run := report.Run{
		Name:              name,
		Mode:              "real",
		Scenario:          r.mode,
		Tier:              tier,
		System:            system,
		Shards:            r.sys.shards,
		Pods:              pods,
		Unbound:           unbound,
		WallSeconds:       r.wall.Seconds(),
		PodsPerSec:        r.podsPerSec,
		BaselineAgain:     r.sys.again,
		LatencyP50:        p50Of(r),
		LatencyP99:        report.Percentile(r.latencies, 99),
		LatencyMax:        report.Percentile(r.latencies, 100),
		LatencyCDF:        report.CDFSample(r.latencies, report.CDFPoints),
		CPUSeconds:        r.cpu.Seconds(),
		CPUSecondsPer1000: cpuPer1000(r),
		PeakRSSMiB:        float64(r.peakRSSKiB) / 1024,
		Invariants:        map[string]int64{invBoundTwice: r.boundTwice, invDoubleBooked: r.doubleBooked},
		Load:              reportLoad(r.load),
		Restarts:          r.restarts,
		ColdStart:         r.coldStart,
	}
	rate := report.NewRate(1)
	for _, t := range r.bindTimes {
		rate.Add(t, 1)
	}
	rate.Add(r.wall.Seconds(), 0)
	run.Throughput = rate.Points()
	note := fmt.Sprintf("pods created at %.0f pods/s", r.createPerSec)
	if len(r.bindTimes) > 0 {
		note += fmt.Sprintf("; first bind %.2f s after the clock started", r.bindTimes[0])
	}
	if r.inProcess {
		note += "; CPU and peak RSS are the whole bench process's"
	} else {
		note += fmt.Sprintf("; the harness used %.1f CPU s beside it (not counted)", r.harnessCPU.Seconds())
	}
	run.Notes = append([]string{note}, r.notes...)
	return run
}

// targets judges the shardsched runs of each mode against the binder and
// kube-scheduler-qps runs of the same mode; a target whose runs are absent
// is skipped. runs[i] is results[i] as a report.Run.
func targets(results []result, runs []report.Run) []report.Target {
	var out []report.Target
	for i, r := range results {
		if r.sys.shards == 0 {
			continue
		}
		s := runs[i]
		where := fmt.Sprintf("%s, %s, %s", r.sys.name, r.mode, s.Tier)
		b, each := baselineRate(results, r.mode, "binder")
		if b > 0 {
			q := s.PodsPerSec / b
			t := report.Target{
				Name:  "shardsched pods/s vs binder (" + where + ")",
				Goal:  "≥ 0.9× binder",
				Value: fmt.Sprintf("%.2f× (%.0f vs %.0f pods/s)", q, s.PodsPerSec, b),
				Met:   q >= 0.9,
			}
			if len(each) > 1 {
				t.Value = fmt.Sprintf("%.2f× (%.0f vs %.0f pods/s, the mean of the binder's runs before and after the others: %s)", q, s.PodsPerSec, b, joinRates(each))
			}
			if !t.Met {
				t.Why = cpuWhy(r, results, r.mode, "binder")
			}
			out = append(out, t)
		}
		if r.mode == modeStream {
			t := report.Target{
				Name:  "p99 create→bound (" + where + ")",
				Goal:  "≤ 2 s",
				Value: fmt.Sprintf("%.2f s", s.LatencyP99),
				Met:   s.LatencyP99 <= 2 && s.Unbound == 0,
			}
			if s.Unbound > 0 {
				t.Why = fmt.Sprintf("%d pods were never bound", s.Unbound)
			} else if !t.Met && r.makingP99 > 0 {
				t.Why = fmt.Sprintf("a gang binds once its last pod exists: its pods waited for their job's last create call up to %.2f s (p99), and from that call to bound the p99 is %.2f s", r.makingP99, r.fromLastP99)
			}
			out = append(out, t)
		}
		if r.mode == modeStream {
			for _, ks := range []string{"kube-scheduler", "kube-scheduler-qps"} {
				if p50, each := meanOf(baselineRuns(results, r.mode, ks), p50Of); len(each) > 0 {
					out = append(out, report.Target{
						Name:  "p50 create→bound vs " + ks + " (" + where + ")",
						Goal:  "no worse than " + ks + "'s",
						Value: fmt.Sprintf("%.2f s vs %.2f s (%s)", s.LatencyP50, p50, ratio(s.LatencyP50, p50)),
						Met:   s.Unbound == 0 && s.LatencyP50 <= p50,
					})
				}
			}
		}
		kube := baselineRuns(results, r.mode, "kube-scheduler-qps")
		if len(kube) == 0 {
			continue
		}
		kRate, _ := meanOf(kube, func(k result) float64 { return k.podsPerSec })
		q := s.PodsPerSec / kRate
		kt := report.Target{
			Name:  "pods/s vs kube-scheduler-qps (" + where + ")",
			Goal:  "≥ 2× kube-scheduler-qps",
			Value: fmt.Sprintf("%.2f× (%.0f vs %.0f pods/s)", q, s.PodsPerSec, kRate),
			Met:   q >= 2,
		}
		if !kt.Met && b > 0 {
			kt.Why = fmt.Sprintf("with its client limits raised, kube-scheduler reaches %.2f× the no-logic binder here, so no scheduler can be 2× faster on this control plane: the API server (and, in stream mode, pod creation) is the ceiling", kRate/b)
		}
		out = append(out, kt)
		kCPU, _ := meanOf(kube, cpuPer1000)
		t := report.Target{
			Name:  "CPU s per 1000 pods vs kube-scheduler-qps (" + where + ")",
			Goal:  "≤ 0.5× kube-scheduler-qps",
			Value: fmt.Sprintf("%.2f vs %.2f (%s)", s.CPUSecondsPer1000, kCPU, ratio(s.CPUSecondsPer1000, kCPU)),
			Met:   s.Pods > 0 && kCPU > 0 && s.CPUSecondsPer1000 <= kCPU/2,
		}
		if r.inProcess {
			harness, _ := meanOf(kube, harnessPer1000)
			t.Value += fmt.Sprintf(" (shardsched's figure includes the harness, %.2f per 1000 pods beside kube-scheduler-qps)", harness)
		}
		out = append(out, t)
	}
	return out
}

// cpuWhy explains a rate short of the baseline's from where the machine's
// CPU went per bound pod, in r's run against the mean of the baseline's
// runs: in stream mode on a machine whose cores are all busy, a rate is
// the machine's CPU over its CPU per pod, so the part that grew is what
// slowed it. Without the figures, it says what is known in general.
func cpuWhy(r result, results []result, mode, baseline string) string {
	const general = "the API server is the bottleneck on this machine and shardsched writes more per pod than the binder (a Scheduled event, PodGroup and Queue status besides the bind); its own CPU also competes with the API server's for the 2 cores"
	machine, api, system, ok := r.msPerPod()
	if !ok {
		return general
	}
	base := baselineRuns(results, mode, baseline)
	if len(base) == 0 {
		return general
	}
	for _, b := range base {
		if _, _, _, ok := b.msPerPod(); !ok {
			return general
		}
	}
	bm, _ := meanOf(base, func(b result) float64 { m, _, _, _ := b.msPerPod(); return m })
	ba, _ := meanOf(base, func(b result) float64 { _, a, _, _ := b.msPerPod(); return a })
	bs, _ := meanOf(base, func(b result) float64 { _, _, sy, _ := b.msPerPod(); return sy })
	n := len(base)
	return fmt.Sprintf("the machine spent %.2f ms of CPU per bound pod in this run against %.2f in the %s's (the mean of its %d run(s)): kube-apiserver %.2f against %.2f, this system and the harness beside it %.2f against %.2f, the rest (etcd, kwok, other processes) %.2f against %.2f; with every core busy, the rate falls as the CPU per pod grows",
		machine, bm, baseline, n, api, ba, system, bs, machine-api-system, bm-ba-bs)
}

// writeReport writes report.md, report.json and the plots into dir.
func writeReport(dir string, rep report.Report) error {
	_, err := report.Write(dir, rep)
	return err
}

// workloadNotes say how a workload's jobs were turned into a real run.
func workloadNotes(o options) []string {
	b := o.workload
	var cpu, gpu int64
	for _, j := range b.jobs {
		cpu += j.CPU * int64(j.Size)
		gpu += j.GPU * int64(j.Size)
	}
	notes := []string{
		fmt.Sprintf("Workload %s (%s), tier %s, seed %d: the first %d jobs of its generator, the last cut to make %d pods. Each job is a PodGroup (minMember = its size, in its leaf queue, created with the run's namespace before the clock starts) and that many pods requesting the job's CPU, memory and GPUs, annotated with the PodGroup and the queue.",
			b.w.Name, b.path, b.tierName, b.seed, len(b.jobs), o.pods),
		streamNote(o.serialJobPods, o.creators),
		fmt.Sprintf("Lifetimes are ignored: kwok pods never finish, so nothing is freed during a run and every pod must fit at once; the pods request %s of the cluster's %s CPU (%.0f %%; realbench refuses more than %d %%).",
			api.FormatQuantity(api.CPU, cpu), api.FormatQuantity(api.CPU, int64(o.nodes)*o.shape.cpu*1000), float64(cpu)/float64(int64(o.nodes)*o.shape.cpu*1000)*100, maxFillPercent),
		fmt.Sprintf("Queues: the workload's tree (root → %d parents → %d leaves) as Volcano Queues, created once before the runs, with each parent's CPU capability and each leaf's deserved share as workload.QueueSpecs computes them, but for the %d real nodes instead of the tier's %d.",
			b.w.Queues.Parents, b.w.Queues.Parents*b.w.Queues.LeavesPerParent, o.nodes, b.tier.Nodes),
		"Gangs and queues are honoured by shardsched only: kube-scheduler and the binder ignore PodGroups and queues and place pods one by one (the binder round-robin, skipping nodes it has filled), so their figures are for the same pods without gang or quota semantics.",
	}
	if o.shape.gpuNodes(o.nodes) > 0 {
		notes = append(notes, fmt.Sprintf("Nodes: %s (%d of the %d nodes have GPUs); the pods of GPU jobs ask for %s, %d in all.",
			o.shape, o.shape.gpuNodes(o.nodes), o.nodes, gpuResource, gpu))
	} else {
		notes = append(notes, fmt.Sprintf("Nodes: %s; the workload's nodes have no GPUs, so no pod asks for one.", o.shape))
	}
	return notes
}
