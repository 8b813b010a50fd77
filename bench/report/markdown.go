package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Markdown renders the report: header, targets, one results row per run,
// chaos recoveries, notes, and the plots. The plots are linked by file
// name, as Write places them next to report.md; Markdown itself writes
// nothing. The output depends only on r.
func (r Report) Markdown() string {
	var b strings.Builder
	title := oneLine(r.Title)
	if title == "" {
		title = "Bench report"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	if r.Command != "" {
		fmt.Fprintf(&b, "- Command: %s\n", codeSpan(r.Command))
	}
	if r.Machine != "" {
		fmt.Fprintf(&b, "- Machine: %s\n", oneLine(r.Machine))
	}
	if !r.Started.IsZero() {
		fmt.Fprintf(&b, "- Started: %s\n", r.Started.UTC().Format(time.RFC3339))
	}
	b.WriteString("\n")
	r.writeTargets(&b)
	r.writeResults(&b)
	r.writeChaos(&b)
	r.writeReclaim(&b)
	r.writeRestarts(&b)
	r.writeNotes(&b)
	r.writePlots(&b)
	return b.String()
}

func (r Report) writeTargets(b *strings.Builder) {
	b.WriteString("## Targets\n\n")
	if len(r.Targets) == 0 {
		b.WriteString("No targets.\n\n")
		return
	}
	rows := make([][]string, len(r.Targets))
	for i, t := range r.Targets {
		met := "❌"
		if t.Met {
			met = "✅"
		}
		rows[i] = []string{t.Name, t.Goal, t.Value, met, t.Why}
	}
	writeTable(b, []column{{name: "Target"}, {name: "Goal"}, {name: "Value"}, {name: "Met"}, {name: "Why"}}, rows)
}

func (r Report) writeResults(b *strings.Builder) {
	b.WriteString("## Results\n\n")
	if len(r.Runs) == 0 {
		b.WriteString("No runs.\n\n")
		return
	}
	cols := []column{
		{name: "Run"}, {name: "Mode"}, {name: "Scenario"}, {name: "Tier"}, {name: "System"},
		{name: "Shards", right: true}, {name: "Pods", right: true}, {name: "Unbound", right: true},
		{name: "Pods/s", right: true}, {name: "vs baseline", right: true},
		{name: "p50 (s)", right: true}, {name: "p99 (s)", right: true}, {name: "Max (s)", right: true},
		{name: "CPU s / 1000 pods", right: true}, {name: "Util %", right: true},
		{name: "Max fair-share error", right: true}, {name: "API writes/pod", right: true},
		{name: "Status writes", right: true}, {name: "Conflicts", right: true},
		{name: "Peak RSS MiB", right: true}, {name: "RSS growth %", right: true},
		{name: "Load before → during"}, {name: "Invariants"}, {name: "Status"},
	}
	rows := make([][]string, len(r.Runs))
	for i, run := range r.Runs {
		shards := "–"
		if run.Shards != 0 {
			shards = strconv.Itoa(run.Shards)
		}
		status := "ok"
		if run.Failed() {
			status = "**FAILED**"
		}
		rows[i] = []string{
			run.Name, run.Mode, run.Scenario, run.Tier, run.System,
			shards, strconv.Itoa(run.Pods), strconv.Itoa(run.Unbound),
			num(run.PodsPerSec), r.vsBaseline(i),
			num(run.LatencyP50), num(run.LatencyP99), num(run.LatencyMax),
			num(run.CPUSecondsPer1000), num(run.Utilization * 100),
			num(run.MaxFairShareError), num(run.APIWritesPerPod),
			strconv.FormatInt(run.StatusWrites, 10), strconv.FormatInt(run.StatusConflicts, 10),
			num(run.PeakRSSMiB), num(run.RSSGrowthPct),
			loadCell(run.Load), invariantsCell(run), status,
		}
	}
	writeTable(b, cols, rows)
	b.WriteString("“vs baseline” is pods/s relative to the first run of the same mode, scenario and tier (to the mean of it and the baseline's run again after the other systems, where there is one). " +
		"A run fails when any invariant is non-zero, a chaos run lost an admitted job, or a start it timed did not come up (not timed, in the restart table).")
	if slices.ContainsFunc(r.Runs, func(run Run) bool { return run.Load != nil }) {
		b.WriteString(" “Load before → during” is the machine's 1-minute load average when the run's clock started → " +
			"the mean (and max) of the readings taken every second while it ran, beside the CPUs the run could use: " +
			"a load above the CPUs means processes waited for a CPU, and the run's figures are the machine's as much as the system's.")
	}
	b.WriteString("\n\n")
}

// loadCell is the machine's load around a run, "0.52 → 1.85 (max 2.10), 2
// CPUs"; "–" when it was not measured, "n/a" for what could not be read.
func loadCell(l *Load) string {
	if l == nil {
		return "–"
	}
	during := "n/a"
	if l.Samples > 0 {
		during = fmt.Sprintf("%s (max %s)", num(l.Mean), num(l.Max))
	}
	s := num(l.Before) + " → " + during
	if l.CPUs > 0 {
		s += fmt.Sprintf(", %d CPUs", l.CPUs)
	}
	return s
}

// vsBaseline is the pods/s of run i over that of the first run with the
// same mode, scenario and tier, or over the mean of that run and the later
// ones marked BaselineAgain when there are some.
func (r Report) vsBaseline(i int) string {
	run := r.Runs[i]
	same := func(o Run) bool { return o.Mode == run.Mode && o.Scenario == run.Scenario && o.Tier == run.Tier }
	base := i
	for j, o := range r.Runs[:i] {
		if same(o) {
			base = j
			break
		}
	}
	bv, n := r.Runs[base].PodsPerSec, 1
	for _, o := range r.Runs[base+1:] {
		if same(o) && o.BaselineAgain {
			bv += o.PodsPerSec
			n++
		}
	}
	bv /= float64(n)
	if !(bv > 0) || !finite(bv) || !finite(run.PodsPerSec) {
		if base == i {
			return "baseline"
		}
		return "n/a"
	}
	ratio := strconv.FormatFloat(run.PodsPerSec/bv, 'f', 2, 64) + "×"
	switch {
	case base == i:
		return ratio + " (baseline)"
	case run.BaselineAgain:
		return ratio + " (baseline, again)"
	}
	return ratio
}

// invariantsCell lists the broken invariants, "0" when none is; a chaos
// run's lost admitted jobs count even when Invariants does not repeat them.
func invariantsCell(r Run) string {
	bad := make(map[string]int64)
	for k, n := range r.Invariants {
		if n != 0 {
			bad[k] = n
		}
	}
	if r.Chaos != nil && r.Chaos.AdmittedJobsLost != 0 && bad["admitted_jobs_lost"] == 0 {
		bad["admitted_jobs_lost"] = int64(r.Chaos.AdmittedJobsLost)
	}
	if len(bad) == 0 {
		return "0"
	}
	parts := make([]string, 0, len(bad))
	for _, k := range slices.Sorted(maps.Keys(bad)) {
		parts = append(parts, k+"="+strconv.FormatInt(bad[k], 10))
	}
	return strings.Join(parts, ", ")
}

func (r Report) writeChaos(b *strings.Builder) {
	if !slices.ContainsFunc(r.Runs, func(run Run) bool { return run.Chaos != nil }) {
		return
	}
	b.WriteString("## Chaos\n\n")
	for _, run := range r.Runs {
		if run.Chaos == nil {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", oneLine(run.Name))
		fmt.Fprintf(b, "Admitted jobs lost: %d\n\n", run.Chaos.AdmittedJobsLost)
		if len(run.Chaos.Events) == 0 {
			b.WriteString("No faults were injected.\n\n")
			continue
		}
		rows := make([][]string, len(run.Chaos.Events))
		for i, e := range run.Chaos.Events {
			rows[i] = []string{num(e.At), e.What, recovery(e.OwnersBackAfter), recovery(e.ThroughputBackAfter)}
		}
		writeTable(b, []column{
			{name: "At (s)", right: true}, {name: "Fault"},
			{name: "Owners back after (s)", right: true}, {name: "Throughput back after (s)", right: true},
		}, rows)
	}
}

func (r Report) writeReclaim(b *strings.Builder) {
	if !slices.ContainsFunc(r.Runs, func(run Run) bool { return run.Reclaim != nil }) {
		return
	}
	b.WriteString("## Reclaim\n\n")
	b.WriteString("Idle queues bursting against borrowers: from the switch, the time until each lending queue holds its deserved share " +
		"(or all it asks), the CPU evicted against the least that had to be, pods evicted from a queue not above its deserved share " +
		"(loops, recounted from the pods), and pods of lenders evicted (a lender that borrowed beyond its share may lose that to another).\n\n")
	var rows [][]string
	for _, run := range r.Runs {
		rc := run.Reclaim
		if rc == nil {
			continue
		}
		rows = append(rows, []string{oneLine(run.Name), fmt.Sprintf("%d/%d", rc.Asking, rc.Lenders), num(rc.ReachP50), num(rc.ReachP99),
			fmt.Sprint(rc.NeverReached), fmt.Sprint(rc.EvictedPods), num(rc.EvictedCPU), num(rc.NeededCPU), num(rc.EvictedPerNeeded),
			fmt.Sprint(rc.Loops), fmt.Sprint(rc.LenderEvictions), fmt.Sprint(run.Invariants["quota_overruns"])})
	}
	writeTable(b, []column{
		{name: "Run"}, {name: "Lenders asking", right: true}, {name: "Share reached p50 (s)", right: true}, {name: "p99 (s)", right: true},
		{name: "Never", right: true}, {name: "Pods evicted", right: true}, {name: "CPU evicted", right: true},
		{name: "CPU needed", right: true}, {name: "Evicted / needed", right: true}, {name: "Loops", right: true}, {name: "Lender pods evicted", right: true}, {name: "Overruns", right: true},
	}, rows)
}

// writeRestarts gives, per run that restarted a shard, each restart beside
// the baseline's cold start against the same cluster.
func (r Report) writeRestarts(b *strings.Builder) {
	if !slices.ContainsFunc(r.Runs, func(run Run) bool { return len(run.Restarts) > 0 }) {
		return
	}
	b.WriteString("## Restart warm-up\n\n")
	b.WriteString("A shard stopped and started again with the run's pods in the cluster: the time until its /readyz answered " +
		"(its caches hold the cluster), the same against the baseline's cold start, the time until it owned its keys again, " +
		"and its CPU and peak RSS by the time it was ready.\n\n")
	for _, run := range r.Runs {
		if len(run.Restarts) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", oneLine(run.Name))
		rows := make([][]string, 0, len(run.Restarts)+1)
		for _, rs := range run.Restarts {
			vs := "n/a"
			if c := run.ColdStart; c != nil && c.ReadySeconds > 0 {
				vs = num(rs.ReadySeconds/c.ReadySeconds) + "×"
			}
			rows = append(rows, restartRow(rs, vs))
		}
		if c := run.ColdStart; c != nil {
			rows = append(rows, restartRow(*c, "1×"))
		}
		writeTable(b, []column{
			{name: "Start"}, {name: "Ready after (s)", right: true}, {name: "vs cold start", right: true},
			{name: "Owns its keys after (s)", right: true}, {name: "CPU s", right: true}, {name: "Peak RSS MiB", right: true}, {name: "Steps"},
		}, rows)
	}
}

func restartRow(rs Restart, vs string) []string {
	owned := "–"
	if rs.OwnedSeconds > 0 {
		owned = num(rs.OwnedSeconds)
	}
	if rs.Error != "" {
		return []string{rs.What, "**not timed**", "–", owned, num(rs.CPUSeconds), num(rs.PeakRSSMiB), oneLine(rs.Error)}
	}
	return []string{rs.What, num(rs.ReadySeconds), vs, owned, num(rs.CPUSeconds), num(rs.PeakRSSMiB), rs.Steps}
}

func recovery(v float64) string {
	if v < 0 {
		return "never"
	}
	return num(v)
}

func (r Report) writeNotes(b *strings.Builder) {
	items := slices.Clone(r.Notes)
	for _, run := range r.Runs {
		for _, n := range run.Notes {
			items = append(items, "**"+oneLine(run.Name)+"**: "+n)
		}
	}
	if len(items) == 0 {
		return
	}
	b.WriteString("## Notes\n\n")
	for _, it := range items {
		// Continuation lines stay inside the list item.
		fmt.Fprintf(b, "- %s\n", strings.ReplaceAll(strings.TrimSpace(it), "\n", "\n  "))
	}
	b.WriteString("\n")
}

func (r Report) writePlots(b *strings.Builder) {
	cs := r.charts()
	if len(cs) == 0 {
		return
	}
	b.WriteString("## Plots\n\n")
	alt := strings.NewReplacer("[", `\[`, "]", `\]`)
	for _, c := range cs {
		fmt.Fprintf(b, "![%s](%s)\n\n", alt.Replace(oneLine(c.title)), c.file)
	}
}

type column struct {
	name  string
	right bool // numbers: right-aligned
}

func writeTable(b *strings.Builder, cols []column, rows [][]string) {
	b.WriteString("|")
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.name)
	}
	b.WriteString("\n|")
	for _, c := range cols {
		if c.right {
			b.WriteString(" ---: |")
		} else {
			b.WriteString(" --- |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("|")
		for _, v := range row {
			fmt.Fprintf(b, " %s |", cell(v))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

var cellEscaper = strings.NewReplacer("|", `\|`)

// cell makes s safe inside a table cell: one line, pipes escaped.
func cell(s string) string { return cellEscaper.Replace(oneLine(s)) }

// oneLine collapses every run of white space, newlines included, into one
// space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// codeSpan quotes s as inline code, with a fence longer than any run of
// backticks inside it.
func codeSpan(s string) string {
	s = oneLine(s)
	longest, run := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if longest > 0 {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

// num formats a measurement with about three significant digits and no
// exponent for the values a bench produces.
func num(v float64) string {
	if !finite(v) {
		return "n/a"
	}
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 0.001:
		return strconv.FormatFloat(v, 'f', 2-int(math.Floor(math.Log10(a))), 64)
	default:
		return strconv.FormatFloat(v, 'e', 2, 64)
	}
}
