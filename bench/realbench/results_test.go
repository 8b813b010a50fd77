package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/bench/report"
)

// In stream and backlog modes the baseline runs once more after the last
// system, under a name of its own; elsewhere, or when asked not to, or
// alone, the systems run as listed.
func TestRunOrderRunsTheBaselineAgain(t *testing.T) {
	var o options
	for _, n := range []string{"binder", "shardsched-1"} {
		s, err := parseSystem(n)
		if err != nil {
			t.Fatal(err)
		}
		o.systems = append(o.systems, s)
	}
	o.baselineAgain = true
	names := func(ss []sysSpec) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.name)
		}
		return strings.Join(out, ",")
	}
	for _, mode := range []string{modeStream, modeBacklog} {
		got := o.runOrder(mode)
		if names(got) != "binder,shardsched-1,binder-again" {
			t.Fatalf("%s: runs %s", mode, names(got))
		}
		last := got[2]
		if !last.again || last.baseName() != "binder" || last.impl != o.systems[0].impl {
			t.Errorf("%s: the second run is %+v, want the binder again", mode, last)
		}
		if o.systems[0].again || o.systems[0].name != "binder" {
			t.Errorf("%s: the listed baseline changed: %+v", mode, o.systems[0])
		}
	}
	if got := o.runOrder(modeRestart); names(got) != "binder,shardsched-1" {
		t.Errorf("restart: runs %s", names(got))
	}
	alone := options{systems: o.systems[1:], baselineAgain: true}
	if got := alone.runOrder(modeStream); names(got) != "shardsched-1" {
		t.Errorf("one system: runs %s", names(got))
	}
	o.baselineAgain = false
	if got := o.runOrder(modeStream); names(got) != "binder,shardsched-1" {
		t.Errorf("-baseline-again=false: runs %s", names(got))
	}
}

// The ratios (the table's, the target's, the binder's rate quoted beside
// kube-scheduler's) are against the mean of the baseline's two runs, and
// against its one run when it ran once.
func TestRatiosAgainstTheBaselinesMean(t *testing.T) {
	binder, err := parseSystem("binder")
	if err != nil {
		t.Fatal(err)
	}
	shard := sysSpec{name: "shardsched-1", shards: 1}
	lat := []float64{0.1, 0.2, 0.3}
	results := []result{
		{mode: modeStream, sys: binder, podsPerSec: 1000, latencies: lat, pods: 3},
		{mode: modeStream, sys: shard, podsPerSec: 855, latencies: lat, pods: 3},
		{mode: modeStream, sys: binder.runAgain(), podsPerSec: 800, latencies: lat, pods: 3},
	}
	target := func(rs []result) (string, bool) {
		var runs []report.Run
		for _, r := range rs {
			runs = append(runs, toRun(r, "t", ""))
		}
		for _, tg := range targets(rs, runs) {
			if strings.HasPrefix(tg.Name, "shardsched pods/s vs binder") {
				return tg.Value, tg.Met
			}
		}
		t.Fatal("no target against the binder")
		return "", false
	}
	v, met := target(results)
	if !met || !strings.HasPrefix(v, "0.95× (855 vs 900 pods/s") || !strings.Contains(v, "1000 and 800") {
		t.Errorf("with the binder run twice: %q, met %v; want 0.95× against 900, met", v, met)
	}
	if v, met := target(results[:2]); met || !strings.HasPrefix(v, "0.85× (855 vs 1000 pods/s)") {
		t.Errorf("with the binder run once: %q, met %v; want 0.85× against 1000, missed", v, met)
	}
	var runs []report.Run
	for _, r := range results {
		runs = append(runs, toRun(r, "t", ""))
	}
	if got, _ := baselineRate(results, modeStream, "binder"); got != 900 {
		t.Errorf("the binder's rate = %g, want the mean 900", got)
	}
	if runs[2].System != "binder" || runs[2].Name != "stream/binder-again" || !runs[2].BaselineAgain || runs[0].BaselineAgain {
		t.Errorf("the second run is reported as system %q, name %q, again %v (the first: again %v)", runs[2].System, runs[2].Name, runs[2].BaselineAgain, runs[0].BaselineAgain)
	}
	var b bytes.Buffer
	printThroughput(&b, modeStream, results)
	out := b.String()
	for _, want := range []string{"vs binder (mean of 2 runs)", "| shardsched-1 | 855 | 0.95× |", "| binder-again | 800 | 0.89× |", "(1000 and 800 pods/s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestTargetsAgainstKubeScheduler checks the goals against
// kube-scheduler: p50 no worse than each kube-scheduler run's, CPU per pod
// at most half kube-scheduler-qps's, each against the mean of that
// system's runs when it ran twice (as the first system, run again last).
func TestTargetsAgainstKubeScheduler(t *testing.T) {
	ks, err := parseSystem("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	qps, err := parseSystem("kube-scheduler-qps")
	if err != nil {
		t.Fatal(err)
	}
	shard := sysSpec{name: "shardsched-proc-1", shards: 1}
	run := func(sys sysSpec, p50 float64, cpuPer1000 float64) result {
		lat := []float64{p50 / 2, p50, p50 * 2} // 3 bound pods, median p50
		return result{mode: modeStream, sys: sys, podsPerSec: 100, latencies: lat, pods: 3,
			cpu: time.Duration(cpuPer1000 * 3 / 1000 * float64(time.Second))}
	}
	judge := func(rs []result) map[string]report.Target {
		var runs []report.Run
		for _, r := range rs {
			runs = append(runs, toRun(r, "t", ""))
		}
		got := map[string]report.Target{}
		for _, tg := range targets(rs, runs) {
			got[strings.SplitN(tg.Name, " (", 2)[0]] = tg
		}
		return got
	}
	for _, tc := range []struct {
		name            string
		rs              []result
		p50ks, p50qps   bool // met
		cpu             bool
		cpuValuePrefix  string
		p50qpsValuePref string
	}{
		{"well under", []result{run(shard, 0.5, 1.0), run(ks, 0.6, 2.5), run(qps, 2.0, 3.0)}, true, true, true, "1.00 vs 3.00 (0.33×)", "0.50 s vs 2.00 s (0.25×)"},
		{"fewer but not half", []result{run(shard, 0.5, 1.6), run(ks, 0.6, 2.5), run(qps, 2.0, 3.0)}, true, true, false, "1.60 vs 3.00 (0.53×)", "0.50 s vs 2.00 s"},
		{"p50 behind kube-scheduler's default", []result{run(shard, 0.7, 1.0), run(ks, 0.6, 2.5), run(qps, 2.0, 3.0)}, false, true, true, "1.00 vs 3.00", "0.70 s vs 2.00 s"},
		{"the mean of its two runs", []result{run(qps, 1.0, 4.0), run(shard, 1.2, 1.9), run(qps.runAgain(), 2.0, 3.0)}, true, true, false, "1.90 vs 3.50 (0.54×)", "1.20 s vs 1.50 s (0.80×)"},
	} {
		got := judge(tc.rs)
		if p, ok := got["p50 create→bound vs kube-scheduler"]; ok != (tc.name != "the mean of its two runs") || (ok && p.Met != tc.p50ks) {
			t.Errorf("%s: p50 vs kube-scheduler present %v, met %v (%q); want met %v", tc.name, ok, p.Met, p.Value, tc.p50ks)
		}
		p := got["p50 create→bound vs kube-scheduler-qps"]
		if p.Met != tc.p50qps || !strings.HasPrefix(p.Value, tc.p50qpsValuePref) || p.Goal != "no worse than kube-scheduler-qps's" {
			t.Errorf("%s: p50 vs kube-scheduler-qps %q met %v (goal %q); want %q… met %v", tc.name, p.Value, p.Met, p.Goal, tc.p50qpsValuePref, tc.p50qps)
		}
		c := got["CPU s per 1000 pods vs kube-scheduler-qps"]
		if c.Met != tc.cpu || !strings.HasPrefix(c.Value, tc.cpuValuePrefix) || c.Goal != "≤ 0.5× kube-scheduler-qps" {
			t.Errorf("%s: CPU %q met %v (goal %q); want %q… met %v", tc.name, c.Value, c.Met, c.Goal, tc.cpuValuePrefix, tc.cpu)
		}
		if strings.Contains(c.Value, "includes the harness") {
			t.Errorf("%s: a shard process's CPU is its own, yet the target says it includes the harness: %q", tc.name, c.Value)
		}
	}
}

// TestRateMissExplainedFromTheCPUPerPod checks that a pods/s target missed
// against the binder says where the machine's CPU per pod went, in the
// run and in the binder's (the mean of its runs), from the run's own
// figures, and falls back to the general reason without them.
func TestRateMissExplainedFromTheCPUPerPod(t *testing.T) {
	binder, err := parseSystem("binder")
	if err != nil {
		t.Fatal(err)
	}
	shard := sysSpec{name: "shardsched-proc-1", shards: 1}
	lat := make([]float64, 1000) // 1000 bound pods
	ms := func(perPod float64) time.Duration { return time.Duration(perPod * 1000 * float64(time.Millisecond)) }
	run := func(sys sysSpec, rate, machine, api, system, harness float64) result {
		return result{mode: modeStream, sys: sys, podsPerSec: rate, latencies: lat, pods: 1000,
			cpu: ms(system), harnessCPU: ms(harness),
			spent: cpuSpent{machine: ms(machine), parts: map[string]time.Duration{apiServerPart: ms(api), "etcd": ms(0.8)}}}
	}
	results := []result{
		run(binder, 300, 7.0, 4.2, 1.0, 0),
		run(shard, 210, 9.4, 5.5, 1.0, 0.9),
		run(binder.runAgain(), 280, 7.4, 4.6, 1.1, 0),
	}
	why := func(rs []result) string {
		var runs []report.Run
		for _, r := range rs {
			runs = append(runs, toRun(r, "t", ""))
		}
		for _, tg := range targets(rs, runs) {
			if strings.HasPrefix(tg.Name, "shardsched pods/s vs binder") {
				if tg.Met {
					t.Fatalf("0.72× reported met: %+v", tg)
				}
				return tg.Why
			}
		}
		t.Fatal("no target against the binder")
		return ""
	}
	got := why(results)
	for _, want := range []string{"9.40 ms of CPU per bound pod in this run against 7.20 in the binder's (the mean of its 2 run(s))",
		"kube-apiserver 5.50 against 4.40", "the harness beside it 1.90 against 1.05", "the rest (etcd, kwok, other processes) 2.00 against 1.75"} {
		if !strings.Contains(got, want) {
			t.Errorf("why lacks %q:\n%s", want, got)
		}
	}
	results[1].spent = cpuSpent{} // not read
	if got := why(results); !strings.Contains(got, "the API server is the bottleneck") {
		t.Errorf("without the CPU figures: %q, want the general reason", got)
	}
}

// The command fails when any run broke an invariant, stream and backlog
// runs as well as chaos and fault runs, or a restart was not timed; runs
// that kept every invariant end it with nil.
func TestOutcomeFailsOnAnyRunsBrokenInvariant(t *testing.T) {
	shard := sysSpec{name: "shardsched-proc-1", shards: 1}
	clean := result{mode: modeStream, sys: shard, pods: 100}
	kept := report.Run{Name: "chaos/1", Invariants: map[string]int64{invBoundTwice: 0}}
	for _, c := range []struct {
		name    string
		results []result
		others  []report.Run
		want    string // in the error; "" for nil
	}{
		{name: "every invariant kept", results: []result{clean, clean}, others: []report.Run{kept}},
		{name: "a stream run bound a pod twice",
			results: []result{clean, {mode: modeStream, sys: shard, boundTwice: 2}},
			want:    "shardsched-proc-1, stream mode broke an invariant: 2 pods bound twice, 0 nodes double-booked"},
		{name: "a backlog run double-booked a node",
			results: []result{{mode: modeBacklog, sys: shard, doubleBooked: 1}},
			want:    "backlog mode broke an invariant: 0 pods bound twice, 1 nodes double-booked"},
		{name: "a restart not timed",
			results: []result{{mode: modeRestart, sys: shard, restarts: []report.Restart{{What: "shard-0, restart 1", Error: "no /readyz"}}}},
			want:    "shard-0, restart 1 not timed: no /readyz"},
		{name: "a chaos run lost an admitted job",
			results: []result{clean},
			others:  []report.Run{kept, {Name: "chaos/2", Chaos: &report.Chaos{AdmittedJobsLost: 1}}},
			want:    "chaos/2 broke an invariant"},
		{name: "a fault run double-booked a node",
			others: []report.Run{{Name: "faults/etcd-stall", Invariants: map[string]int64{invDoubleBooked: 3}}},
			want:   "faults/etcd-stall broke an invariant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := outcome(c.results, c.others)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("outcome = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("outcome = %v, want an error with %q", err, c.want)
			}
		})
	}
}

// A start of n shard processes is given shardReadyWithin and a minute more
// per 60,000 pods listed over the n of them, whole minutes only.
func TestProcReadyWithinGrowsWithThePodsListed(t *testing.T) {
	for _, c := range []struct {
		pods, n int
		want    time.Duration
	}{
		{pods: 0, n: 8, want: shardReadyWithin},
		{pods: 59_999, n: 1, want: shardReadyWithin},
		{pods: 60_000, n: 1, want: shardReadyWithin + time.Minute},
		{pods: 20_000, n: 3, want: shardReadyWithin + time.Minute},
		{pods: 250_000, n: 1, want: shardReadyWithin + 4*time.Minute},
		{pods: 250_000, n: 8, want: shardReadyWithin + 33*time.Minute},
	} {
		if got := procReadyWithin(c.pods, c.n); got != c.want {
			t.Errorf("procReadyWithin(%d, %d) = %v, want %v", c.pods, c.n, got, c.want)
		}
	}
}
