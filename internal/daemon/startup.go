package daemon

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StartStep is one step of a shard process's start: how long it took, and
// when it ended (from the start of Run).
type StartStep struct {
	Name      string
	Took, End time.Duration
}

// startup times the steps of Run, in order, so that a slow warm-up (a
// restart among 100k pods) says which step it spent its time in: each step
// is logged as it ends, and its end exported as
// shardsched_startup_step_end_seconds{step} (sorted by value they are in
// order; each step took the difference from the one before).
type startup struct {
	log   *slog.Logger
	began time.Time
	desc  *prometheus.Desc

	mu    sync.Mutex
	last  time.Time
	steps []StartStep
}

func newStartup(log *slog.Logger) *startup {
	now := time.Now()
	return &startup{log: log, began: now, last: now, desc: prometheus.NewDesc("shardsched_startup_step_end_seconds",
		"Seconds from the start of the shard to the end of each step of its start-up (clients, parts, serving: /healthz and /metrics answer, default-queues, informers: listed and handed to the cache, scheduling: /readyz answers).",
		[]string{"step"}, nil)}
}

// done ends the step name (begun when the previous one ended) and logs it
// with attrs.
func (s *startup) done(name string, attrs ...any) {
	s.mu.Lock()
	now := time.Now()
	st := StartStep{Name: name, Took: now.Sub(s.last), End: now.Sub(s.began)}
	s.last = now
	s.steps = append(s.steps, st)
	s.mu.Unlock()
	s.log.Info("start-up step done", append([]any{"step", name, "took", st.Took.Round(time.Millisecond), "since_start", st.End.Round(time.Millisecond)}, attrs...)...)
}

// Steps returns the steps ended so far, in order.
func (s *startup) Steps() []StartStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]StartStep(nil), s.steps...)
}

// Describe and Collect export the steps (prometheus.Collector).
func (s *startup) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *startup) Collect(ch chan<- prometheus.Metric) {
	for _, st := range s.Steps() {
		sendConst(ch, s.desc, prometheus.GaugeValue, st.End.Seconds(), st.Name)
	}
}
