package report

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const (
	// maxQueueLines is how many queues a queue-share plot draws one by
	// one; the rest are summed into one "others" line.
	maxQueueLines = 10
	// logSpan is the max/min ratio of the latencies beyond which the CDF
	// uses a logarithmic x axis.
	logSpan = 100
	// maxSlugLen bounds the run-name part of a file name.
	maxSlugLen = 60

	timeLabel = "time since start (s; virtual in sim runs)"

	plotWidth  = 10 * vg.Inch
	plotHeight = 6 * vg.Inch
	legendGap  = 10 // points, around a legend drawn beside the plot
)

// chart is one SVG plot, its data already cleaned: every point finite, and
// positive on a logarithmic axis. Charts are computed from the Report
// alone, so Markdown names exactly the plots Write draws.
type chart struct {
	file           string // base name, e.g. "latency-cdf-sim.svg"
	title          string
	xLabel, yLabel string
	logX           bool
	yFrom0         bool    // stretch the y axis down to 0
	yTo            float64 // stretch the y axis up to this when > 0
	legendTop      bool
	lines          []line
}

type line struct {
	name string
	xys  plotter.XYs
}

// seriesKind is a plot drawn with one line per run, split by mode when the
// report has several.
type seriesKind struct {
	base           string // file name without ".svg"
	title          string
	xLabel, yLabel string
	cdf            bool
	yFrom0         bool
	yTo            float64
	legendTop      bool
	split          bool                  // one file per mode when the report has several modes
	data           func(Run) plotter.XYs // cleaned; empty when the run has none
}

func seriesKinds() []seriesKind {
	return []seriesKind{{
		base:   "latency-cdf",
		title:  "Submit→bind latency, CDF",
		xLabel: "submit→bind latency (s)",
		yLabel: "fraction of pods bound",
		cdf:    true, yFrom0: true, yTo: 1,
		split: true,
		data:  func(r Run) plotter.XYs { return cdfXYs(r.LatencyCDF) },
	}, {
		base:   "throughput",
		title:  "Throughput",
		xLabel: timeLabel,
		yLabel: "pods bound per second",
		yFrom0: true, legendTop: true,
		split: true,
		data:  func(r Run) plotter.XYs { return seriesXYs(r.Throughput, 1) },
	}, {
		base:   "utilization",
		title:  "Cluster CPU utilization",
		xLabel: timeLabel,
		yLabel: "CPU allocated / allocatable (%)",
		yFrom0: true, legendTop: true,
		data: func(r Run) plotter.XYs { return seriesXYs(r.UtilSeries, 100) },
	}, {
		base:   "rss",
		title:  "Resident memory",
		xLabel: timeLabel,
		yLabel: "RSS (MiB)",
		yFrom0: true, legendTop: true,
		data: func(r Run) plotter.XYs { return seriesXYs(r.RSSSeries, 1) },
	}}
}

// charts returns every plot the report has data for, in a stable order:
// latency CDF, throughput, utilization, RSS, then queue shares per run.
func (r Report) charts() []chart {
	modes := r.modes()
	var out []chart
	for _, k := range seriesKinds() {
		if k.split && len(modes) > 1 {
			for _, m := range modes {
				out = appendChart(out, k, r.Runs, m, k.base+"-"+m+".svg", k.title+" ("+m+")")
			}
			continue
		}
		out = appendChart(out, k, r.Runs, "", k.base+".svg", k.title)
	}
	out = append(out, scaleOutCharts(r.Runs)...)
	slugs := runSlugs(r.Runs)
	for i, run := range r.Runs {
		lines := queueLines(run.QueueShares)
		if len(lines) == 0 {
			continue
		}
		out = append(out, chart{
			file:      "queue-shares-" + slugs[i] + ".svg",
			title:     "Share of allocated CPU per queue: " + run.Name,
			xLabel:    timeLabel,
			yLabel:    "share of allocated CPU (%)",
			yFrom0:    true,
			legendTop: true,
			lines:     lines,
		})
	}
	return out
}

// appendChart adds the chart of kind k over the runs of mode (all runs when
// mode is ""), unless none of them has data for it.
func appendChart(out []chart, k seriesKind, runs []Run, mode, file, title string) []chart {
	c := chart{
		file: file, title: title, xLabel: k.xLabel, yLabel: k.yLabel,
		yFrom0: k.yFrom0, yTo: k.yTo, legendTop: k.legendTop,
	}
	for _, run := range runs {
		if mode != "" && modeKey(run) != mode {
			continue
		}
		if xys := k.data(run); len(xys) > 0 {
			c.lines = append(c.lines, line{name: run.Name, xys: xys})
		}
	}
	if k.cdf {
		c.logX = wideSpan(c.lines)
		if c.logX {
			c.lines = positiveX(c.lines)
		}
	}
	if len(c.lines) == 0 {
		return out
	}
	return append(out, c)
}

// modes returns the mode keys of the runs in order of first appearance.
func (r Report) modes() []string {
	var ms []string
	for _, run := range r.Runs {
		if m := modeKey(run); !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	return ms
}

func modeKey(r Run) string {
	if s := slug(r.Mode); s != "" {
		return s
	}
	return "unknown"
}

// cdfXYs pairs each finite latency with the fraction of the sample at or
// below it.
func cdfXYs(lat []float64) plotter.XYs {
	vs := make([]float64, 0, len(lat))
	for _, v := range lat {
		if finite(v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	xys := make(plotter.XYs, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: v, Y: float64(i+1) / float64(len(vs))}
	}
	return xys
}

// seriesXYs returns the finite points of ps in time order, values scaled.
func seriesXYs(ps []Point, scale float64) plotter.XYs {
	xys := make(plotter.XYs, 0, len(ps))
	for _, p := range ps {
		if v := p.V * scale; finite(p.T) && finite(v) {
			xys = append(xys, plotter.XY{X: p.T, Y: v})
		}
	}
	slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	return xys
}

// wideSpan reports whether the positive x values of lines span more than
// logSpan times, so that a logarithmic axis reads better.
func wideSpan(lines []line) bool {
	lo, hi := math.Inf(1), 0.0
	for _, l := range lines {
		for _, p := range l.xys {
			if p.X > 0 {
				lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
			}
		}
	}
	return hi > 0 && hi/lo > logSpan
}

// positiveX drops the points a logarithmic x axis cannot show. A CDF line
// then starts at the fraction already reached by its first positive value.
func positiveX(lines []line) []line {
	var out []line
	for _, l := range lines {
		var xys plotter.XYs
		for _, p := range l.xys {
			if p.X > 0 {
				xys = append(xys, p)
			}
		}
		if len(xys) > 0 {
			out = append(out, line{name: l.name, xys: xys})
		}
	}
	return out
}

// queueLines returns one line per queue for the maxQueueLines queues with
// the highest final share, in that order, and an "others" line summing the
// rest. Shares are in percent.
func queueLines(shares map[string][]Point) []line {
	var qs []line
	for name, ps := range shares {
		if xys := seriesXYs(ps, 100); len(xys) > 0 {
			qs = append(qs, line{name: name, xys: xys})
		}
	}
	final := func(l line) float64 { return l.xys[len(l.xys)-1].Y }
	slices.SortFunc(qs, func(a, b line) int {
		if c := cmp.Compare(final(b), final(a)); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	if len(qs) <= maxQueueLines {
		return qs
	}
	rest := qs[maxQueueLines:]
	name := "others (" + strconv.Itoa(len(rest)) + " queues)"
	return append(qs[:maxQueueLines:maxQueueLines], line{name: name, xys: sumSteps(rest)})
}

// sumSteps adds series sampled at possibly different times: at every time
// any of them has a sample, each contributes its latest value at or before
// that time (0 before its first sample).
func sumSteps(lines []line) plotter.XYs {
	var ts []float64
	for _, l := range lines {
		for _, p := range l.xys {
			ts = append(ts, p.X)
		}
	}
	slices.Sort(ts)
	ts = slices.Compact(ts)
	next := make([]int, len(lines)) // per line, index of its first sample after the current time
	out := make(plotter.XYs, len(ts))
	for i, t := range ts {
		sum := 0.0
		for j, l := range lines {
			for next[j] < len(l.xys) && l.xys[next[j]].X <= t {
				next[j]++
			}
			if next[j] > 0 {
				sum += l.xys[next[j]-1].Y
			}
		}
		out[i] = plotter.XY{X: t, Y: sum}
	}
	return out
}

// render draws the chart in format: "svg" for the report, "png" to look at
// it where no SVG viewer is at hand.
func (c chart) render(format string) (out []byte, err error) {
	// The checks above keep the data within what gonum/plot accepts; this
	// turns any panic left in the plotting library into an error rather
	// than letting a bad sample kill the bench.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("drawing %s: %v", c.file, v)
		}
	}()
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = c.xLabel
	p.Y.Label.Text = c.yLabel
	if c.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, l := range c.lines {
		pl, err := plotter.NewLine(l.xys)
		if err != nil {
			return nil, fmt.Errorf("drawing %s, line %q: %w", c.file, l.name, err)
		}
		pl.LineStyle.Color = plotutil.Color(i)
		pl.LineStyle.Dashes = plotutil.Dashes(i)
		pl.LineStyle.Width = vg.Points(1.5)
		p.Add(pl)
		p.Legend.Add(l.name, pl)
	}
	if c.yFrom0 {
		p.Y.Min = math.Min(p.Y.Min, 0)
	}
	if c.yTo > 0 {
		p.Y.Max = math.Max(p.Y.Max, c.yTo)
	}
	cw, err := draw.NewFormattedCanvas(plotWidth, plotHeight, format)
	if err != nil {
		return nil, fmt.Errorf("drawing %s: %w", c.file, err)
	}
	dc := draw.New(cw)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// The legend goes right of the axes, where it hides no line, unless it
	// would leave the data too little room.
	lw := p.Legend.Rectangle(draw.Canvas{}).Size().X
	if margin := lw + 2*legendGap; margin <= plotWidth*2/5 {
		p.Legend.Top = true
		p.Legend.XOffs = lw + legendGap
		p.Draw(draw.Crop(dc, 0, -margin, 0, 0))
	} else {
		p.Legend.Top = c.legendTop
		p.Draw(dc)
	}
	var buf bytes.Buffer
	if _, err := cw.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("drawing %s: %w", c.file, err)
	}
	return buf.Bytes(), nil
}

// slug turns s into a file-name part: lower case, [a-z0-9] runs joined by
// single dashes, at most maxSlugLen bytes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if b.Len() > 0 && !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	out := b.String()
	if len(out) > maxSlugLen {
		out = out[:maxSlugLen]
	}
	return strings.TrimRight(out, "-")
}

// runSlugs returns a distinct slug per run, in run order: names that
// sanitize alike get "-2", "-3", ... after the first.
func runSlugs(runs []Run) []string {
	seen := make(map[string]bool, len(runs))
	out := make([]string, len(runs))
	for i, r := range runs {
		base := slug(r.Name)
		if base == "" {
			base = "run"
		}
		s := base
		for n := 2; seen[s]; n++ {
			s = base + "-" + strconv.Itoa(n)
		}
		seen[s] = true
		out[i] = s
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// scaleOutCharts plots the runs made with a virtual CPU per shard against
// their shard count, one line per scenario and tier: pods bound per
// virtual second, p99 submit→bind, and the share of the virtual time the
// slowest shard and the coordinator's leader (applying, committing to
// etcd) were busy. None when no run has a virtual CPU per shard.
func scaleOutCharts(runs []Run) []chart {
	var keys []string
	groups := map[string][]Run{}
	for _, run := range runs {
		if run.VirtualCPU == nil || run.Shards < 1 {
			continue
		}
		k := run.Scenario + " " + run.Tier
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], run)
	}
	if len(keys) == 0 {
		return nil
	}
	byShards := func(rs []Run, f func(Run) float64) plotter.XYs {
		var xys plotter.XYs
		for _, r := range rs {
			if v := f(r); finite(v) {
				xys = append(xys, plotter.XY{X: float64(r.Shards), Y: v})
			}
		}
		slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		return xys
	}
	const xLabel = "shards (a CPU each)"
	tp := chart{file: "scale-out-throughput.svg", title: "Scale-out, a virtual CPU per shard: throughput", xLabel: xLabel,
		yLabel: "pods bound per virtual second", yFrom0: true, legendTop: true}
	p99 := chart{file: "scale-out-p99.svg", title: "Scale-out, a virtual CPU per shard: p99 submit→bind", xLabel: xLabel,
		yLabel: "p99 submit→bind (s, virtual)", yFrom0: true, legendTop: true}
	busy := chart{file: "scale-out-busy.svg", title: "Scale-out, a virtual CPU per shard: who is busy", xLabel: xLabel,
		yLabel: "share of the virtual time (%)", yFrom0: true, legendTop: true}
	for _, k := range keys {
		rs := groups[k]
		tp.lines = append(tp.lines, line{name: k, xys: byShards(rs, func(r Run) float64 { return r.PodsPerSec })})
		p99.lines = append(p99.lines, line{name: k, xys: byShards(rs, func(r Run) float64 { return r.LatencyP99 })})
		busy.lines = append(busy.lines,
			line{name: k + ": slowest shard", xys: byShards(rs, func(r Run) float64 { return r.VirtualCPU.ShardPct })},
			line{name: k + ": its cache taking events", xys: byShards(rs, func(r Run) float64 { return r.VirtualCPU.ShardCachePct })},
			line{name: k + ": coordinator applying", xys: byShards(rs, func(r Run) float64 { return r.VirtualCPU.ApplyPct })},
			line{name: k + ": etcd commits", xys: byShards(rs, func(r Run) float64 { return r.VirtualCPU.CommitPct })})
	}
	return []chart{tp, p99, busy}
}
