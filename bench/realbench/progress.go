package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
)

// Intervals of a runMonitor.
const (
	progressEvery   = 5 * time.Second // a progress line
	loadSampleEvery = time.Second     // a reading of the load average
)

// runMonitor follows one run while its clock runs: a procstat.LoadSampler
// reads the machine's load average every loadSampleEvery, and a goroutine
// of its own prints a progress line every progressEvery. stop ends both;
// it may be called from any goroutine, any number of times.
type runMonitor struct {
	load *procstat.LoadSampler
	quit chan struct{} // closed by the first stop
	done chan struct{} // closed when the progress goroutine has returned
	once sync.Once
}

// startMonitor starts following a run named label (system and mode) of
// total pods whose clock started at start; bound says how many are bound
// so far and must be safe to call from another goroutine.
func startMonitor(out io.Writer, every time.Duration, label string, total int, start time.Time, bound func() int) *runMonitor {
	m := &runMonitor{load: procstat.StartLoadSampler(loadSampleEvery), quit: make(chan struct{}), done: make(chan struct{})}
	go m.progress(out, every, label, total, start, bound)
	return m
}

// progress prints a progress line on out every interval until quit.
func (m *runMonitor) progress(out io.Writer, every time.Duration, label string, total int, start time.Time, bound func() int) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
			one, _, _, err := procstat.LoadAvg()
			fmt.Fprintln(out, progressLine(label, bound(), total, time.Since(start), one, err))
		}
	}
}

// stop ends the monitor, waits for its goroutines and returns what the
// load sampler saw (the zero LoadStats on a nil monitor: a run that failed
// before its clock started).
func (m *runMonitor) stop() procstat.LoadStats {
	if m == nil {
		return procstat.LoadStats{}
	}
	m.once.Do(func() { close(m.quit) })
	<-m.done
	return m.load.Stop()
}

// progressLine is one progress line of a run, e.g.
// "  shardsched-1 stream: 1234/2000 bound, 12.3 s, load 1.85"; the load is
// "n/a" when loadErr says it could not be read.
func progressLine(label string, bound, total int, elapsed time.Duration, load float64, loadErr error) string {
	l := "n/a"
	if loadErr == nil {
		l = fmt.Sprintf("%.2f", load)
	}
	return fmt.Sprintf("  %s: %d/%d bound, %.1f s, load %s", label, bound, total, elapsed.Seconds(), l)
}

// reportLoad turns what a procstat.LoadSampler saw into a report.Load;
// nil when no sampler ran (the zero LoadStats) or the load average could
// not be read at all (not Linux).
func reportLoad(st procstat.LoadStats) *report.Load {
	if st.CPUs == 0 || (st.Samples == 0 && st.Err != nil) {
		return nil
	}
	return &report.Load{Before: st.Before, Mean: st.Mean, Max: st.Max, Samples: st.Samples, CPUs: st.CPUs}
}
