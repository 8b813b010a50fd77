package report

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
)

// fixture has two sim runs and two real runs; the real ones ran the chaos
// scenario, and the second broke an invariant.
func fixture() Report {
	lat := make([]float64, 0, 200)
	for i := range 200 {
		lat = append(lat, 0.001*math.Pow(1.05, float64(i))) // 1 ms .. ~17 s: log axis
	}
	lat[0] = 0 // bound at submit time in virtual time: must not break the log axis
	shares := make(map[string][]Point)
	for q := range 12 {
		v := float64(q+1) / 78 // 1..12 over 78: sums to 1
		shares[fmt.Sprintf("team-%02d", q)] = []Point{{0, 0}, {10, v}, {20, v}}
	}
	series := func(scale float64) []Point {
		return []Point{{0, 0}, {5, 0.5 * scale}, {10, 0.8 * scale}, {15, 0.9 * scale}}
	}
	return Report{
		Title:   "Bench | churn and chaos",
		Command: "go run ./cmd/bench -tier 100k",
		Started: time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("CET", 3600)),
		Machine: "linux/amd64, 2 CPUs, go1.26.0",
		Targets: []Target{
			{Name: "p99 submit→bind, churn 100k", Goal: "≤ 1 s", Value: "0.42 s", Met: true},
			{Name: "chaos: owners back", Goal: "≤ 5 s", Value: "never", Met: false, Why: "shard-2 lease not released"},
		},
		Notes: []string{"sim latencies are virtual seconds"},
		Runs: []Run{{
			Name: "churn/100k/binder", Mode: "sim", Scenario: "churn", Tier: "100k", System: "binder",
			Pods: 50000, WallSeconds: 100, VirtualSeconds: 3600, PodsPerSec: 500,
			LatencyP50: 0.2, LatencyP99: 1.5, LatencyMax: 3, LatencyCDF: []float64{0.1, 0.2, 1.5, 3},
			CPUSeconds: 40, CPUSecondsPer1000: 0.8, Utilization: 0.71,
			APIWritesPerPod: 2, StatusWrites: 1000, PeakRSSMiB: 300, RSSGrowthPct: 1.5,
			Invariants: map[string]int64{"quota_overruns": 0, "pods_bound_twice": 0},
			Throughput: series(600), UtilSeries: series(1), RSSSeries: series(300),
			Load: &Load{Before: 0.12, Mean: 1.85, Max: 2.5, Samples: 100, CPUs: 2},
		}, {
			Name: "churn/100k/shardsched 4 shards", Mode: "sim", Scenario: "churn", Tier: "100k",
			System: "shardsched", Shards: 4,
			Pods: 50000, WallSeconds: 50, VirtualSeconds: 3600, PodsPerSec: 1000,
			LatencyP50: 0.05, LatencyP99: 0.42, LatencyMax: 17, LatencyCDF: lat,
			CPUSeconds: 20, CPUSecondsPer1000: 0.4, Utilization: 0.873,
			FairShareError:    map[string]float64{"team-00": 0.01, "team-01": 0.02},
			MaxFairShareError: 0.02, APIWritesPerPod: 1.1, StatusWrites: 600, StatusConflicts: 3,
			PeakRSSMiB: 250.5, RSSGrowthPct: 0.4,
			Invariants: map[string]int64{"quota_overruns": 0},
			Throughput: series(1200), UtilSeries: series(1), RSSSeries: series(250), QueueShares: shares,
			Notes: []string{"warm-up: 60 virtual s"},
		}, {
			Name: "chaos/1000 nodes/shardsched", Mode: "real", Scenario: "chaos", Tier: "1000 nodes",
			System: "shardsched", Shards: 3, Pods: 10000, WallSeconds: 50, PodsPerSec: 200,
			LatencyP50: 0.1, LatencyP99: 0.9, LatencyMax: 4, LatencyCDF: []float64{0.05, 0.1, 0.9, 4},
			Invariants: map[string]int64{},
			Throughput: series(200),
			Chaos: &Chaos{Events: []ChaosEvent{
				{At: 10, What: "kill -9 shard-2", OwnersBackAfter: 2.5, ThroughputBackAfter: 4},
				{At: 30, What: "restart etcd", OwnersBackAfter: 1.25, ThroughputBackAfter: -1},
			}},
			Restarts: []Restart{
				{What: "shard-0, restart 1", ReadySeconds: 5, CPUSeconds: 3.5, PeakRSSMiB: 300, OwnedSeconds: 6.5, Steps: "informers 4.90 s"},
				{What: "shard-0, restart 2", ReadySeconds: 12, CPUSeconds: 4, PeakRSSMiB: 310, OwnedSeconds: 13},
			},
			ColdStart: &Restart{What: "kube-scheduler, cold start", ReadySeconds: 10, CPUSeconds: 4.5, PeakRSSMiB: 320},
		}, {
			Name: "chaos/1000 nodes/kube-scheduler", Mode: "real", Scenario: "chaos", Tier: "1000 nodes",
			System: "kube-scheduler", Pods: 10000, Unbound: 12, WallSeconds: 200, PodsPerSec: 50,
			LatencyP50: 1, LatencyP99: 9, LatencyMax: 20,
			Invariants: map[string]int64{"quota_overruns": 3, "double_booked_nodes": 0},
			Load:       &Load{Before: 3.5, CPUs: 2}, // nothing read during the run
		}},
	}
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "bench") // Write creates it
	want := fixture()
	files, err := Write(dir, want)
	if err != nil {
		t.Fatal(err)
	}

	if files.Markdown != filepath.Join(dir, "report.md") || files.JSON != filepath.Join(dir, "report.json") {
		t.Errorf("Files = %+v", files)
	}
	var plots []string
	for _, p := range files.Plots {
		if filepath.Dir(p) != dir {
			t.Errorf("plot %s is not in %s", p, dir)
		}
		plots = append(plots, filepath.Base(p))
	}
	wantPlots := []string{
		"latency-cdf-sim.svg", "latency-cdf-real.svg",
		"throughput-sim.svg", "throughput-real.svg",
		"utilization.svg", "rss.svg",
		"queue-shares-churn-100k-shardsched-4-shards.svg",
	}
	if !slices.Equal(plots, wantPlots) {
		t.Errorf("plots = %v, want %v", plots, wantPlots)
	}

	for _, p := range files.All() {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			t.Errorf("%s is empty", p)
		}
		if strings.HasSuffix(p, ".svg") {
			checkSVG(t, p, data)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(files.All()) {
		t.Errorf("%s holds %d entries, Files lists %d: temporary files left behind?", dir, len(entries), len(files.All()))
	}

	got, err := Read(files.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Started.Equal(want.Started) {
		t.Errorf("Started: read %v, wrote %v", got.Started, want.Started)
	}
	got.Started = want.Started
	if !reflect.DeepEqual(got, want) {
		t.Errorf("report.json does not round-trip:\nread  %+v\nwrote %+v", got, want)
	}

	md, err := os.ReadFile(files.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	if string(md) != want.Markdown() {
		t.Error("report.md differs from Report.Markdown()")
	}
	for _, p := range wantPlots {
		if !strings.Contains(string(md), "]("+p+")") {
			t.Errorf("report.md does not embed %s", p)
		}
	}
}

// checkSVG fails unless data is well-formed XML with an <svg> element.
func checkSVG(t *testing.T, path string, data []byte) {
	t.Helper()
	if !strings.Contains(string(data), "<svg") {
		t.Errorf("%s has no <svg", path)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	sawSVG := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s is not valid XML: %v", path, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "svg" {
			sawSVG = true
		}
	}
	if !sawSVG {
		t.Errorf("%s has no svg element", path)
	}
}

// row returns the Markdown table row whose first cell is name.
func row(t *testing.T, md, name string) []string {
	t.Helper()
	for l := range strings.Lines(md) {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "| ") || !strings.HasSuffix(l, " |") {
			continue
		}
		cells := strings.Split(l[2:len(l)-2], " | ")
		if cells[0] == name {
			return cells
		}
	}
	t.Fatalf("no table row for %q in:\n%s", name, md)
	return nil
}

// A baseline that ran again after the other systems: "vs baseline" is
// against the mean of its two runs, for every run of the group and no
// other.
func TestVsBaselineAgainstTheMeanOfTheBaselinesRuns(t *testing.T) {
	r := Report{Runs: []Run{
		{Name: "binder", Mode: "real", Scenario: "stream", Tier: "t", PodsPerSec: 300},
		{Name: "shard", Mode: "real", Scenario: "stream", Tier: "t", PodsPerSec: 270},
		{Name: "other tier", Mode: "real", Scenario: "stream", Tier: "u", PodsPerSec: 100},
		{Name: "binder-again", Mode: "real", Scenario: "stream", Tier: "t", PodsPerSec: 240, BaselineAgain: true},
		{Name: "other tier 2", Mode: "real", Scenario: "stream", Tier: "u", PodsPerSec: 50},
	}}
	md := r.Markdown()
	for _, c := range []struct{ run, ratio string }{
		{"binder", "1.11× (baseline)"},
		{"shard", "1.00×"},
		{"binder-again", "0.89× (baseline, again)"},
		{"other tier", "1.00× (baseline)"},
		{"other tier 2", "0.50×"},
	} {
		if cells := row(t, md, c.run); !slices.Contains(cells, c.ratio) {
			t.Errorf("%s: no %q cell in %q", c.run, c.ratio, cells)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := fixture()
	md := r.Markdown()

	for _, s := range []string{
		"# Bench | churn and chaos\n", // not a table: no escaping needed
		"- Command: `go run ./cmd/bench -tier 100k`",
		"- Machine: linux/amd64, 2 CPUs, go1.26.0",
		"- Started: 2026-03-14T14:09:26Z",
		"## Targets", "## Results", "## Chaos", "## Notes", "## Plots",
		"- sim latencies are virtual seconds",
		"- **churn/100k/shardsched 4 shards**: warm-up: 60 virtual s",
		"![Submit→bind latency, CDF (sim)](latency-cdf-sim.svg)",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("Markdown lacks %q", s)
		}
	}

	if n := strings.Count(md, "FAILED"); n != 1 {
		t.Errorf("FAILED appears %d times, want once", n)
	}
	tests := []struct {
		run, ratio, invariants string
		failed                 bool
	}{
		{"churn/100k/binder", "1.00× (baseline)", "0", false},
		{"churn/100k/shardsched 4 shards", "2.00×", "0", false},
		{"chaos/1000 nodes/shardsched", "1.00× (baseline)", "0", false},
		{"chaos/1000 nodes/kube-scheduler", "0.25×", "quota_overruns=3", true},
	}
	for _, tt := range tests {
		cells := row(t, md, tt.run)
		if !slices.Contains(cells, tt.ratio) {
			t.Errorf("%s: no %q cell in %q", tt.run, tt.ratio, cells)
		}
		if !slices.Contains(cells, tt.invariants) {
			t.Errorf("%s: no invariants cell %q in %q", tt.run, tt.invariants, cells)
		}
		if got := strings.Contains(strings.Join(cells, "|"), "FAILED"); got != tt.failed {
			t.Errorf("%s: FAILED marker %v, want %v", tt.run, got, tt.failed)
		}
	}
	if cells := row(t, md, "churn/100k/shardsched 4 shards"); !slices.Contains(cells, "87.3") || !slices.Contains(cells, "0.420") {
		t.Errorf("utilization 87.3 %% and p99 0.420 s expected in %q", cells)
	}

	for _, tt := range []struct{ run, load string }{
		{"churn/100k/binder", "0.120 → 1.85 (max 2.50), 2 CPUs"},
		{"churn/100k/shardsched 4 shards", "–"}, // not measured
		{"chaos/1000 nodes/kube-scheduler", "3.50 → n/a, 2 CPUs"},
	} {
		if cells := row(t, md, tt.run); !slices.Contains(cells, tt.load) {
			t.Errorf("%s: no load cell %q in %q", tt.run, tt.load, cells)
		}
	}
	if !strings.Contains(md, "“Load before → during” is the machine's 1-minute load average") {
		t.Error("the load column is not explained")
	}

	if cells := row(t, md, "p99 submit→bind, churn 100k"); !slices.Contains(cells, "✅") {
		t.Errorf("met target not marked ✅: %q", cells)
	}
	if cells := row(t, md, "chaos: owners back"); !slices.Contains(cells, "❌") || !slices.Contains(cells, "shard-2 lease not released") {
		t.Errorf("missed target not marked ❌ with its reason: %q", cells)
	}

	if cells := row(t, md, "30.0"); !slices.Equal(cells[1:], []string{"restart etcd", "1.25", "never"}) {
		t.Errorf("chaos event row = %q", cells)
	}
	if cells := row(t, md, "shard-0, restart 1"); !slices.Equal(cells[1:], []string{"5.00", "0.500×", "6.50", "3.50", "300", "informers 4.90 s"}) {
		t.Errorf("restart row = %q", cells)
	}
	if cells := row(t, md, "shard-0, restart 2"); !slices.Equal(cells[1:3], []string{"12.0", "1.20×"}) {
		t.Errorf("slower restart row = %q", cells)
	}
	if cells := row(t, md, "kube-scheduler, cold start"); !slices.Equal(cells[1:5], []string{"10.0", "1×", "–", "4.50"}) {
		t.Errorf("cold start row = %q", cells)
	}
	if strings.Count(md, "## Restart warm-up") != 1 || strings.Contains(md, "### chaos/1000 nodes/kube-scheduler\n\n| Start") {
		t.Error("restart section missing, repeated, or given to a run without restarts")
	}
	if !strings.Contains(md, "### chaos/1000 nodes/shardsched\n\nAdmitted jobs lost: 0\n") {
		t.Error("chaos section of the shardsched run missing")
	}
	if strings.Contains(md, "### chaos/1000 nodes/kube-scheduler") {
		t.Error("chaos section for a run without chaos data")
	}
}

func TestMarkdownEdgeCases(t *testing.T) {
	var empty Report
	md := empty.Markdown()
	for _, s := range []string{"# Bench report\n", "No targets.", "No runs."} {
		if !strings.Contains(md, s) {
			t.Errorf("empty report: Markdown lacks %q", s)
		}
	}
	if strings.Contains(md, "## Plots") || strings.Contains(md, "## Chaos") || strings.Contains(md, "## Restart warm-up") {
		t.Errorf("empty report has plot or chaos sections:\n%s", md)
	}
	if md := (Report{Runs: []Run{{Name: "x"}}}).Markdown(); strings.Contains(md, "Load before → during” is") {
		t.Error("load column explained in a report where no run measured it")
	}

	r := Report{
		Command: "sh -c `echo a|b`",
		Runs: []Run{
			{Name: "a|b", Mode: "sim", Scenario: "s", PodsPerSec: 0},
			{Name: "c", Mode: "sim", Scenario: "s", PodsPerSec: 10},
			{Name: "lost", Mode: "real", PodsPerSec: math.NaN(), Chaos: &Chaos{AdmittedJobsLost: 2}},
		},
	}
	md = r.Markdown()
	if !strings.Contains(md, "- Command: `` sh -c `echo a|b` ``") {
		t.Errorf("command with backticks badly quoted:\n%s", md)
	}
	if cells := row(t, md, `a\|b`); !slices.Contains(cells, "baseline") {
		t.Errorf("zero-throughput baseline: %q", cells)
	}
	if cells := row(t, md, "c"); !slices.Contains(cells, "n/a") {
		t.Errorf("ratio over a zero baseline should be n/a: %q", cells)
	}
	cells := row(t, md, "lost")
	if !slices.Contains(cells, "admitted_jobs_lost=2") || !strings.Contains(strings.Join(cells, "|"), "FAILED") {
		t.Errorf("lost admitted jobs must show as a broken invariant: %q", cells)
	}
	if !strings.Contains(md, "No faults were injected.") {
		t.Error("chaos run without events not described")
	}
}

func TestChartsSingleMode(t *testing.T) {
	r := Report{Runs: []Run{
		{Name: "a", Mode: "sim", LatencyCDF: []float64{1, 2, 3}, Throughput: []Point{{0, 1}}},
		{Name: "b", Mode: "sim", LatencyCDF: []float64{math.NaN(), math.Inf(1)}}, // nothing plottable
		{Name: "c", Mode: "sim"},
	}}
	var files []string
	for _, c := range r.charts() {
		files = append(files, c.file)
	}
	if want := []string{"latency-cdf.svg", "throughput.svg"}; !slices.Equal(files, want) {
		t.Errorf("charts = %v, want %v", files, want)
	}
	cs := r.charts()
	if cs[0].logX {
		t.Error("latencies spanning 3× drawn on a log axis")
	}
	if len(cs[0].lines) != 1 || cs[0].lines[0].name != "a" {
		t.Errorf("latency lines = %+v, want only run a", cs[0].lines)
	}

	files2, err := Write(t.TempDir(), Report{Runs: []Run{{Name: "x", Mode: "real"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(files2.Plots) != 0 {
		t.Errorf("plots written without data: %v", files2.Plots)
	}
}

func TestLatencyCDFLogAxis(t *testing.T) {
	r := fixture()
	for _, c := range r.charts() {
		switch c.file {
		case "latency-cdf-sim.svg":
			if !c.logX {
				t.Error("sim latencies span 1 ms..17 s: want a log axis")
			}
			for _, l := range c.lines {
				for _, p := range l.xys {
					if p.X <= 0 {
						t.Errorf("line %s keeps x=%v on a log axis", l.name, p.X)
					}
				}
			}
		case "latency-cdf-real.svg":
			if c.logX {
				t.Error("real latencies span 80×: want a linear axis")
			}
		}
	}
}

func TestQueueLines(t *testing.T) {
	shares := make(map[string][]Point)
	for q := range 12 {
		shares[fmt.Sprintf("q%02d", q)] = []Point{{0, 0.01}, {10, float64(q) / 100}}
	}
	// Sampled at other times than the rest: summed as a step function.
	shares["late"] = []Point{{5, 0.001}}
	shares["nan"] = []Point{{0, math.NaN()}}
	lines := queueLines(shares)
	if len(lines) != maxQueueLines+1 {
		t.Fatalf("got %d lines, want %d", len(lines), maxQueueLines+1)
	}
	if lines[0].name != "q11" || lines[9].name != "q02" {
		t.Errorf("lines not ordered by final share: first %s, tenth %s", lines[0].name, lines[9].name)
	}
	others := lines[maxQueueLines]
	if others.name != "others (3 queues)" {
		t.Errorf("others line named %q", others.name)
	}
	// q00 and q01 are 1 % each at 0; late joins at 5; at 10 q00 is 0 % and q01 1 %.
	want := []struct{ x, y float64 }{{0, 2}, {5, 2.1}, {10, 1.1}}
	if len(others.xys) != len(want) {
		t.Fatalf("others = %v", others.xys)
	}
	for i, w := range want {
		if p := others.xys[i]; p.X != w.x || math.Abs(p.Y-w.y) > 1e-9 {
			t.Errorf("others[%d] = %v, want %v", i, p, w)
		}
	}
}

func TestRunSlugs(t *testing.T) {
	runs := []Run{{Name: "A b"}, {Name: "a-b"}, {Name: "→"}, {Name: "a b"}, {Name: "  Ünïcode→X/100k  "}}
	want := []string{"a-b", "a-b-2", "run", "a-b-3", "n-code-x-100k"}
	if got := runSlugs(runs); !slices.Equal(got, want) {
		t.Errorf("runSlugs = %v, want %v", got, want)
	}
	if got := slug(strings.Repeat("ab-", 40)); len(got) > maxSlugLen || strings.HasSuffix(got, "-") {
		t.Errorf("long slug %q", got)
	}
}

func TestWriteRejectsNonFinite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	r := fixture()
	r.Runs[1].Throughput[2].V = math.Inf(1)
	_, err := Write(dir, r)
	if err == nil || !strings.Contains(err.Error(), "runs[1].throughput[2].v is +Inf") {
		t.Fatalf("Write with +Inf: err = %v, want one naming runs[1].throughput[2].v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed Write created %s (stat: %v)", dir, err)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "report.json")
	if err := os.WriteFile(bad, []byte(`{"title": "x", "runs": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Read(malformed) = %v, want an error naming %s", err, bad)
	}
	missing := filepath.Join(dir, "nope.json")
	if _, err := Read(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Read(missing) = %v, want an error naming %s", err, missing)
	}
}

// Runs with a virtual CPU per shard are plotted against their shard count,
// one line per scenario and tier, in shard order; other runs are not.
func TestScaleOutCharts(t *testing.T) {
	v := func(shard, apply float64) *VirtualCPU {
		return &VirtualCPU{ShardPct: shard, ShardCachePct: shard / 3, ApplyPct: apply, CommitPct: apply / 2}
	}
	r := Report{Runs: []Run{
		{Name: "burst 4", Mode: "sim-vcpu", Scenario: "burst", Tier: "100k", Shards: 4, PodsPerSec: 400, LatencyP99: 1, VirtualCPU: v(90, 40)},
		{Name: "burst 1", Mode: "sim-vcpu", Scenario: "burst", Tier: "100k", Shards: 1, PodsPerSec: 100, LatencyP99: 4, VirtualCPU: v(99, 10)},
		{Name: "churn 2", Mode: "sim-vcpu", Scenario: "churn", Tier: "1M", Shards: 2, PodsPerSec: 3000, LatencyP99: math.NaN(), VirtualCPU: v(50, 5)},
		{Name: "plain", Mode: "sim", Scenario: "burst", Tier: "100k", Shards: 8, PodsPerSec: 9999},
	}}
	got := map[string]chart{}
	for _, c := range scaleOutCharts(r.Runs) {
		got[c.file] = c
	}
	tp, ok := got["scale-out-throughput.svg"]
	if !ok || len(got) != 3 {
		t.Fatalf("charts %v, want throughput, p99 and busy", got)
	}
	if len(tp.lines) != 2 || tp.lines[0].name != "burst 100k" || tp.lines[1].name != "churn 1M" {
		t.Fatalf("throughput lines %+v, want burst 100k then churn 1M", tp.lines)
	}
	if want := (plotter.XYs{{X: 1, Y: 100}, {X: 4, Y: 400}}); !slices.Equal(tp.lines[0].xys, want) {
		t.Errorf("burst throughput %v, want %v (in shard order, without the plain run)", tp.lines[0].xys, want)
	}
	if p := got["scale-out-p99.svg"]; len(p.lines[1].xys) != 0 {
		t.Errorf("a NaN p99 was plotted: %v", p.lines[1].xys)
	}
	if b := got["scale-out-busy.svg"]; len(b.lines) != 8 || b.lines[1].xys[1].Y != 30 || b.lines[2].xys[1].Y != 40 {
		t.Errorf("busy lines %+v, want 4 per group, with 4 shards the slowest shard's cache at 30 %% and the coordinator at 40 %%", b.lines)
	}
	if cs := scaleOutCharts(r.Runs[3:]); cs != nil {
		t.Errorf("charts without a virtual-CPU run: %v", cs)
	}
}

// A restart the harness could not time (not ready within its bound) fails
// the run, and the report says so beside the figures that were measured.
func TestRestartNotTimedFailsTheRun(t *testing.T) {
	run := Run{
		Name: "restart/shardsched-proc-8", Mode: "restart", System: "shardsched", Shards: 8, Pods: 250000,
		Invariants: map[string]int64{},
		Restarts: []Restart{
			{What: "first start", ReadySeconds: 1278.8, CPUSeconds: 900, PeakRSSMiB: 548},
			{What: "shard-0, restart 1", Error: "wrap.sh not ready after 10m0s\n(503 Service Unavailable)"},
		},
	}
	if !run.Failed() {
		t.Fatal("a run whose restart was not timed is not failed")
	}
	if rs, ok := NotTimed(run.Restarts); !ok || rs.What != "shard-0, restart 1" {
		t.Errorf("NotTimed = %+v, %v; want shard-0's restart", rs, ok)
	}
	timed := run
	timed.Restarts = run.Restarts[:1]
	if timed.Failed() {
		t.Fatal("a run whose starts were all timed is failed")
	}
	md := Report{Title: "restart", Runs: []Run{run}}.Markdown()
	if cells := row(t, md, "restart/shardsched-proc-8"); !slices.Contains(cells, "**FAILED**") {
		t.Errorf("run row %q lacks the FAILED status", cells)
	}
	for _, s := range []string{
		"| first start | 1279 |",
		"| shard-0, restart 1 | **not timed** | – | – |",
		"wrap.sh not ready after 10m0s (503 Service Unavailable) |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("Markdown lacks %q", s)
		}
	}
}
