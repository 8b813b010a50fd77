// Command simbench runs the simulated mode of the bench harness: the
// workload files of bench/workloads against an in-memory cluster on a
// virtual clock, with real shards (memberlist on loopback, ownership in
// etcd) and the real coordinator on an embedded etcd, all in this process.
// It writes a Markdown report, a JSON file and SVG plots.
//
//	go run ./bench/simbench                                   # quick tier: 10k cores, 1/2/4 shards
//	go run ./bench/simbench -tier 100k -shards 1,2,4,8         # the seed's churn case
//	go run ./bench/simbench -include out/real/report.json      # one report with the real mode's runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/bench/sim"
	"github.com/shardsched/shardsched/bench/workload"
)

type options struct {
	dir         string
	tiers       []string
	scenarios   []string
	shards      []int
	chaosTier   string
	minutes     float64
	chaosMin    float64
	seed        uint64
	out         string
	include     string
	fsync       bool
	vcpu        bool
	noPools     bool
	verbose     bool
	rejudge     bool
	heapProfile string
}

func main() {
	var o options
	var tiers, scenarios, shards string
	flag.StringVar(&o.dir, "workloads", "bench/workloads", "directory of the workload files")
	flag.StringVar(&tiers, "tier", "10k", "tiers to run, comma-separated (10k, 100k, 1M)")
	flag.StringVar(&scenarios, "scenarios", "churn,burst,chaos", "scenarios: churn, burst (peak throughput), chaos (faults) and reclaim (idle queues bursting against borrowers)")
	flag.StringVar(&shards, "shards", "1,2,4", "shard counts to run each scenario with")
	flag.StringVar(&o.chaosTier, "chaos-tier", "10k", "tier of the chaos scenario (it runs in real time, with 4 shards or the largest count listed)")
	flag.Float64Var(&o.minutes, "minutes", 0, "override the tier's simulated minutes for churn and reclaim (0: the workload file's)")
	flag.Float64Var(&o.chaosMin, "chaos-minutes", 2, "simulated (= wall) minutes of the chaos scenario")
	flag.Uint64Var(&o.seed, "seed", 1, "workload seed")
	flag.StringVar(&o.out, "out", "bench/out/sim", "directory for report.md, report.json and the plots")
	flag.StringVar(&o.include, "include", "", "report.json files, comma-separated, whose runs and targets to include (e.g. the real mode's); -rejudge reads one")
	flag.BoolVar(&o.fsync, "fsync", true, "the embedded etcd syncs its log (as in production)")
	flag.BoolVar(&o.vcpu, "virtual-cpu", false, "churn, burst and reclaim run each shard as if on a machine of its own (one after another, each on its own virtual clock): pods/s and p99 against the shard count, with the coordinator's share (chaos is unaffected)")
	flag.BoolVar(&o.noPools, "no-node-pools", false, "leave the workloads' GPU nodes out of any node pool (node.gpuPool): named node-NNNNN and hashed over the ring like the rest, as before node pools")
	flag.BoolVar(&o.verbose, "v", false, "log the shards' warnings to stderr")
	flag.BoolVar(&o.rejudge, "rejudge", false, "run nothing: judge the simulated runs of the -include report again and write it to -out")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&o.heapProfile, "memprofile", "", "write each run's heap after the warm-up and at the end to <this prefix>-<scenario>-<tier>-<shards>-{warm,end}.pb.gz (compare with go tool pprof -base)")
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
	o.tiers = split(tiers)
	o.scenarios = split(scenarios)
	for _, s := range split(shards) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			fail(2, fmt.Errorf("-shards: %q is not a shard count in 1..64", s))
		}
		o.shards = append(o.shards, n)
	}
	for _, s := range o.scenarios {
		if s != "churn" && s != "burst" && s != "chaos" && s != "reclaim" {
			fail(2, fmt.Errorf("-scenarios: unknown scenario %q (churn, burst, chaos, reclaim)", s))
		}
	}
	switch {
	case len(o.tiers) == 0:
		fail(2, errors.New("-tier: none given"))
	case len(o.shards) == 0:
		fail(2, errors.New("-shards: none given"))
	case o.minutes < 0 || o.chaosMin <= 0:
		fail(2, errors.New("-minutes must not be negative and -chaos-minutes must be positive"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		pprof.StopCPUProfile()
		fail(1, err)
	}
}

func split(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "simbench:", err)
	os.Exit(code)
}

func run(ctx context.Context, o options) error {
	rep := report.Report{Title: "shardsched bench", Command: strings.Join(os.Args, " "), Started: time.Now().UTC(),
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())}
	if o.rejudge {
		if o.include == "" || strings.Contains(o.include, ",") {
			return errors.New("-rejudge needs -include with one report (the report to judge again)")
		}
		inc, err := report.Read(o.include)
		if err != nil {
			return err
		}
		var sims []report.Run
		for _, r := range inc.Runs {
			if r.Mode == "sim" {
				sims = append(sims, r)
			}
		}
		judged := simTargets(sims)
		names := map[string]bool{}
		for _, t := range judged {
			names[t.Name] = true
		}
		var kept []report.Target
		for _, t := range inc.Targets {
			if !names[t.Name] {
				kept = append(kept, t)
			}
		}
		inc.Targets = append(kept, judged...)
		files, err := report.Write(o.out, inc)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "simbench: wrote %s\n", strings.Join(files.All(), ", "))
		return nil
	}
	for _, path := range strings.Split(o.include, ",") {
		if path == "" {
			continue
		}
		inc, err := report.Read(path)
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, inc.Runs...)
		rep.Targets = append(rep.Targets, inc.Targets...)
		rep.Notes = append(rep.Notes, inc.Notes...)
		rep.Notes = append(rep.Notes, fmt.Sprintf("runs from %s (%s)", path, inc.Command))
	}
	logger := slog.New(slog.DiscardHandler)
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	load := func(name string) (*workload.Workload, error) {
		w, err := workload.Load(o.dir + "/" + name + ".yaml")
		if err == nil && o.noPools {
			w.Node.GPUPool = ""
		}
		return w, err
	}
	var simRuns []report.Run
	for _, tier := range o.tiers {
		for _, sc := range o.scenarios {
			if sc == "chaos" {
				continue
			}
			w, err := load(sc)
			if err != nil {
				return err
			}
			for _, n := range o.shards {
				cfg := sim.Config{Workload: w, Tier: tier, Shards: n, Seed: o.seed, Fsync: o.fsync, VirtualCPU: o.vcpu, Progress: os.Stderr, Logger: logger}
				if o.heapProfile != "" {
					cfg.HeapProfile = fmt.Sprintf("%s-%s-%s-%d", o.heapProfile, sc, tier, n)
				}
				// The target of memory per shard is the 1M tier's: each
				// shard's own heap is measured at the end of those runs.
				cfg.ShardMemory = tier == "1M" && sc != "chaos"
				if sc == "churn" || sc == "reclaim" {
					cfg.Minutes = o.minutes
				}
				if sc == "burst" {
					// A throughput test: the virtual clock follows the wall
					// clock (1 ms steps), so latencies are wall time too.
					cfg.Step = time.Millisecond
				}
				label := fmt.Sprintf("%s/%s/%d shards", sc, tier, n)
				if o.vcpu {
					label += ", a CPU each"
				}
				r, err := runSim(ctx, label, cfg)
				if err != nil {
					return fmt.Errorf("%s: %w", label, err)
				}
				per := "wall"
				if o.vcpu {
					per = "virtual"
				}
				fmt.Fprintf(os.Stderr, "simbench: %s: %d pods, %.0f pods/s (%s), p99 %.3f s (virtual), invariants %v\n", r.Name, r.Pods, r.PodsPerSec, per, r.LatencyP99, r.Invariants)
				simRuns = append(simRuns, r)
			}
		}
	}
	if contains(o.scenarios, "chaos") {
		w, err := load("churn")
		if err != nil {
			return err
		}
		n := max(4, o.shards[len(o.shards)-1])
		r, err := runSim(ctx, fmt.Sprintf("chaos/%s/%d shards", o.chaosTier, n), sim.Config{Workload: w, Tier: o.chaosTier, Shards: n, Seed: o.seed, Fsync: o.fsync, Chaos: true, Pace: true,
			Minutes: o.chaosMin, Progress: os.Stderr, Logger: logger})
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		simRuns = append(simRuns, r)
	}
	rep.Runs = append(rep.Runs, simRuns...)
	rep.Targets = append(rep.Targets, simTargets(simRuns)...)
	files, err := report.Write(o.out, rep)
	if err != nil {
		return err
	}
	fmt.Println(rep.Markdown())
	fmt.Fprintf(os.Stderr, "simbench: wrote %s\n", strings.Join(files.All(), ", "))
	for _, r := range simRuns {
		if r.Failed() {
			return fmt.Errorf("run %s broke an invariant: %v", r.Name, r.Invariants)
		}
	}
	return nil
}

// runSim runs one simulated scenario, saying on stderr when it starts and
// when it ends (with its wall time), and keeps in the run the machine's
// load average before and while it ran (shards' start included).
func runSim(ctx context.Context, label string, cfg sim.Config) (report.Run, error) {
	fmt.Fprintf(os.Stderr, "simbench: %s: starting\n", label)
	start := time.Now()
	ls := procstat.StartLoadSampler(time.Second)
	r, err := sim.Run(ctx, cfg)
	st := ls.Stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "simbench: %s: failed after %.1f s\n", label, time.Since(start).Seconds())
		return r, err
	}
	r.Load = reportLoad(st)
	fmt.Fprintf(os.Stderr, "simbench: %s: done in %.1f s, load %.2f before, %.2f during (max %.2f) on %d CPUs\n",
		label, time.Since(start).Seconds(), st.Before, st.Mean, st.Max, st.CPUs)
	return r, nil
}

// reportLoad turns what a procstat.LoadSampler saw into a report.Load;
// nil when the load average could not be read at all (not Linux).
func reportLoad(st procstat.LoadStats) *report.Load {
	if st.CPUs == 0 || (st.Samples == 0 && st.Err != nil) {
		return nil
	}
	return &report.Load{Before: st.Before, Mean: st.Mean, Max: st.Max, Samples: st.Samples, CPUs: st.CPUs}
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// simTargets judges the simulated-mode targets on the runs made.
func simTargets(runs []report.Run) []report.Target {
	var out []report.Target
	for _, r := range runs {
		switch {
		case r.Mode == sim.ModeVirtualCPU:
			// Scale-out figures (the report's scale-out plots): no
			// target of their own beyond the invariants.
		case r.Scenario == "churn" && r.Tier == "100k":
			p99 := report.Target{Name: "p99 submit→bind, " + r.Name, Goal: "≤ 1 s (virtual)", Value: fmt.Sprintf("%.3f s", r.LatencyP99), Met: r.LatencyP99 <= 1}
			if !p99.Met {
				p99.Why = fmt.Sprintf("the cluster ran %.0f %% full; %d pods were still pending at the end (the run's notes list the waiting jobs by size, with the reason they last got)", r.Utilization*100, r.Unbound)
			}
			rss := report.Target{Name: "RSS growth after warm-up, " + r.Name, Goal: "< 5 %", Value: fmt.Sprintf("%.1f %%", r.RSSGrowthPct), Met: r.RSSGrowthPct < 5}
			if r.ShardHeapMiB > 0 {
				rss.Value += fmt.Sprintf(" (the shards' own heap: %+.1f %%)", r.ShardHeapGrowthPct)
			}
			if !rss.Met {
				rss.Why = "RSS is the whole process's: the cluster model, the embedded etcd (its database is memory-mapped) and every shard"
				if r.AnonGrowthPct != 0 || r.FileGrowthPct != 0 {
					rss.Why += fmt.Sprintf("; anonymous memory (Go heap, stacks) grew %.1f %% and the file-backed pages (the binary's and etcd's database, settled before each reading) %.1f %%", r.AnonGrowthPct, r.FileGrowthPct)
					if r.HeapGrowthPct != 0 || r.LiveHeapGrowthPct != 0 {
						rss.Why += fmt.Sprintf("; the Go heap's spans in use %+.1f %%, the live objects in them %+.1f %%", r.HeapGrowthPct, r.LiveHeapGrowthPct)
					}
					rss.Why += "; the heap profiles of -memprofile split it further"
				}
			}
			out = append(out, p99, rss)
		case r.Scenario == "burst":
			t := report.Target{Name: "placement throughput, " + r.Name, Goal: "≥ 20,000 pods/s (wall)", Value: fmt.Sprintf("%.0f pods/s", r.PodsPerSec), Met: r.PodsPerSec >= 20000}
			if !t.Met {
				t.Why = fmt.Sprintf("%.2f CPU ms per placed pod (admission through the coordinator and etcd, placement, bind, and the cluster model's updates fanned out to every shard's cache) on %d cores shared by all shards, the coordinator and etcd", r.CPUSecondsPer1000, runtime.NumCPU())
			}
			out = append(out, t)
		}
		if r.Tier == "1M" && r.Shards == 8 {
			out = append(out, memoryTarget(r))
		}
		inv := "0"
		if r.Failed() {
			inv = fmt.Sprint(r.Invariants)
		}
		out = append(out, report.Target{Name: "invariants, " + r.Name, Goal: "all 0", Value: inv, Met: !r.Failed()})
	}
	return out
}

// memoryTarget judges the memory of one shard at 1M cores. Where each
// shard's live heap was measured (sim.Config.ShardMemory), a shard
// process is charged twice the largest of them: with GOGC=100 the heap
// grows to twice what is live before a collection. Otherwise only the
// process's peak RSS divided by the shards is at hand.
func memoryTarget(r report.Run) report.Target {
	per := r.PeakRSSMiB / float64(r.Shards)
	t := report.Target{Name: "memory per shard, " + r.Name, Goal: "< 500 MiB"}
	if live := slices.Clone(r.ShardLiveHeapMiB); len(live) > 0 {
		slices.Sort(live)
		top := live[len(live)-1]
		t.Met = 2*top < 500
		t.Value = fmt.Sprintf("live heap of each shard at the end, measured by stopping one after another: %.0f / %.0f / %.0f MiB (min / median / max), so ≤ %.0f MiB a shard process at GOGC=100 (pods' names and UIDs, which the cluster model allocates and every shard shares here, not counted: a shard decoding its own pods holds them too); peak process RSS / shards, cluster model and etcd included: %.0f MiB",
			live[0], live[len(live)/2], top, 2*top, per)
		if !t.Met {
			t.Why = "every shard's cache keeps a record of every pod and job of the cluster (slim for placed pods), not only of its own nodes and queues"
		}
		return t
	}
	t.Met = per < 500
	t.Value = fmt.Sprintf("%.0f MiB (peak process RSS / shards, cluster model and etcd included)", per)
	if r.ShardHeapMiB > 0 {
		t.Value += fmt.Sprintf("; Go heap allocated by the shards' code at the end: %.0f MiB a shard (heap profile)", r.ShardHeapMiB/float64(r.Shards))
	}
	if !t.Met {
		t.Why = "the process's RSS holds the cluster model, the embedded etcd and the Go runtime's headroom besides the shards; run with the shards' own measurement (1M tier) to judge one shard"
	}
	return t
}
