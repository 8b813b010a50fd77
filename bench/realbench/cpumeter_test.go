package main

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCPUSpentNote(t *testing.T) {
	s := cpuSpent{parts: map[string]time.Duration{"kwok": 1 * time.Second, "kube-apiserver": 4 * time.Second, "etcd": 2 * time.Second},
		machine: 12 * time.Second}
	got := s.note(2000, 3*time.Second, 1*time.Second)
	want := "CPU s per 1000 bound pods over the run: the whole machine 6.00 = the system 1.50 + the harness 0.50 + etcd 1.00 + kube-apiserver 2.00 + kwok 0.50 + the rest 0.50; the system's CPU over kube-apiserver's: 0.750"
	if got != want {
		t.Errorf("note =\n%s\nwant\n%s", got, want)
	}
	if n := s.note(0, time.Second, 0); n != "" {
		t.Errorf("no pod bound: %q, want no note", n)
	}
	if n := (cpuSpent{}).note(10, time.Second, 0); n != "" {
		t.Errorf("nothing measured: %q, want no note", n)
	}
	// The harness inside the system (an in-process run): no harness term.
	if n := (cpuSpent{machine: 4 * time.Second}).note(1000, time.Second, 0); n != "CPU s per 1000 bound pods over the run: the whole machine 4.00 = the system 1.00 + the rest 3.00" {
		t.Errorf("in-process note = %q", n)
	}
	// Processes whose own figures add up to more than the machine's
	// tick-sampled reading: no negative rest.
	over := cpuSpent{parts: map[string]time.Duration{"kube-apiserver": 3 * time.Second}, machine: 4 * time.Second}
	if n := over.note(1000, 2*time.Second, 0); n != "CPU s per 1000 bound pods over the run: the whole machine 4.00 by /proc/stat, 1.00 less than its parts' own figures (busy time counted at the clock tick against the processes' runtime): the system 2.00 + kube-apiserver 3.00; the system's CPU over kube-apiserver's: 0.667" {
		t.Errorf("parts above the machine: note = %q", n)
	}
	// Above it by less than the note's rounding: a rest of none.
	near := cpuSpent{parts: map[string]time.Duration{"kube-apiserver": 2*time.Second + time.Millisecond}, machine: 4 * time.Second}
	if n := near.note(1000, 2*time.Second, 0); n != "CPU s per 1000 bound pods over the run: the whole machine 4.00 = the system 2.00 + kube-apiserver 2.00 + the rest 0.00; the system's CPU over kube-apiserver's: 1.000" {
		t.Errorf("parts above the machine by a rounding: note = %q", n)
	}
}

func TestCPUMeterReadsThisProcess(t *testing.T) {
	m := startCPUMeter(map[string]int{"self": os.Getpid(), "gone": 1 << 30})
	deadline := time.Now().Add(300 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = strings.Repeat("y", n%64)
	}
	s := m.stop()
	if s.parts["self"] <= 0 {
		t.Errorf("this process's CPU over 300 ms of work: %v, want > 0", s.parts["self"])
	}
	if _, ok := s.parts["gone"]; ok {
		t.Error("a process that does not exist has a figure")
	}
	// /proc/stat samples each CPU at its clock tick (10 ms) where a
	// process's time is exact: over a short window the machine's figure
	// may fall a tick or two per CPU short of the process's (seen: 60 ms
	// against 80 ms over 50 ms of work, on a VM).
	slack := 2 * 10 * time.Millisecond * time.Duration(runtime.NumCPU())
	if s.machine+slack < s.parts["self"] {
		t.Errorf("the machine's busy time %v is below this process's %v (beyond %v of tick sampling)", s.machine, s.parts["self"], slack)
	}
}

func TestIdleRates(t *testing.T) {
	// The "system" is a counter that gains 30 ms of CPU per call after the
	// first: its rate over the window must come out positive, and the
	// note names every part measured.
	var calls int
	system := func() time.Duration { calls++; return time.Duration(calls) * 30 * time.Millisecond }
	got, err := idleRates(context.Background(), 100*time.Millisecond, map[string]int{"self": os.Getpid()}, system, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.system <= 0 || got.system > 1 {
		t.Errorf("system rate %.3f cores, want in (0, 1]", got.system)
	}
	if _, ok := got.parts["self"]; !ok {
		t.Error("no rate for the process named self")
	}
	n := got.note(100 * time.Millisecond)
	for _, want := range []string{"the whole machine", "the system", "self"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q does not name %q", n, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := idleRates(ctx, time.Minute, nil, system, true); err == nil {
		t.Error("a cancelled context: no error")
	}
	if n := (idleCPU{}).note(time.Second); n != "" {
		t.Errorf("nothing measured: %q, want no note", n)
	}
}

func TestWaitsNote(t *testing.T) {
	m := map[string]float64{
		"submit_to_bind_seconds_sum": 500, "submit_to_bind_seconds_count": 1000,
		"reservation_seconds_sum": 2, "reservation_seconds_count": 400,
		"resize_seconds_sum": 18, "resize_seconds_count": 900,
		"bind_wait_seconds_sum": 10, "bind_wait_seconds_count": 1000,
		"bind_call_seconds_sum": 100, "bind_call_seconds_count": 1000,
	}
	want := "where a pod's time went (means of the shard's histograms): creation to bind 500 ms over 1000 pods; a reservation call 5.0 ms (400); a resize of a reservation 20.0 ms (900); a placed pod's wait for a bind worker 10.0 ms (1000); a bind call 100.0 ms (1000)"
	if got := waitsNote(m); got != want {
		t.Errorf("waitsNote =\n%s\nwant\n%s", got, want)
	}
	if got := waitsNote(map[string]float64{"bind_call_seconds_count": 3}); got != "" {
		t.Errorf("no pod bound: %q, want no note", got)
	}
}

func TestHandoffNote(t *testing.T) {
	a := map[string]float64{"handoff_offers_total": 5, "handoff_claims_total": 1, "handoff_refusals_total": 1, "handoff_offer_timeouts_total": 1}
	b := map[string]float64{"handoff_offers_total": 2, "handoff_claims_total": 6, "handoff_refusals_total": 2}
	want := "hand-off between shards: 7 offers, 7 claimed, 3 refused or given back, 1 withdrawn unclaimed"
	if got := handoffNote([]map[string]float64{a, b}, 2); got != want {
		t.Errorf("handoffNote =\n%s\nwant\n%s", got, want)
	}
	want = "hand-off between shards (1 of 3 shards read): 5 offers, 1 claimed, 1 refused or given back, 1 withdrawn unclaimed"
	if got := handoffNote([]map[string]float64{a}, 3); got != want {
		t.Errorf("one shard of three read: %q, want %q", got, want)
	}
}

// fakeBusy is a machine busy with the given cores in successive windows
// (the last value for the rest): each reading adds the cores of its
// window times the real time since the reading before.
func fakeBusy(cores ...float64) func() (time.Duration, error) {
	var total time.Duration
	var last time.Time
	i := 0
	return func() (time.Duration, error) {
		now := time.Now()
		if i > 0 {
			total += time.Duration(cores[min(i-1, len(cores)-1)] * float64(now.Sub(last)))
		}
		last = now
		i++
		return total, nil
	}
}

func TestQuietWait(t *testing.T) {
	const w = 10 * time.Millisecond
	// Busy for three windows, then quiet: it waits for the fourth.
	q := quietWait{below: 0.3, window: w, max: time.Minute, busy: fakeBusy(1.2, 0.9, 0.6, 0.01)}
	t0 := time.Now()
	note, err := q.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 4*w {
		t.Errorf("returned after %s, before the fourth window (the first quiet one)", d)
	}
	if !strings.HasPrefix(note, "waited ") || !strings.Contains(note, "below 0.30") {
		t.Errorf("note %q, want a wait that ended quiet", note)
	}
	// Never quiet: it gives up after max.
	q = quietWait{below: 0.3, window: w, max: 5 * w, busy: fakeBusy(1)}
	if note, err = q.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "not quiet") || !strings.Contains(note, "started anyway") {
		t.Errorf("note %q, want a wait given up", note)
	}
	// Off: no wait, no note.
	if note, err = (quietWait{}).wait(context.Background()); err != nil || note != "" {
		t.Errorf("off: note %q, err %v; want neither", note, err)
	}
	// A failed reading is a note, not a failed run.
	q = quietWait{below: 0.3, window: w, max: time.Minute, busy: func() (time.Duration, error) { return 0, errors.New("no /proc") }}
	if note, err = q.wait(context.Background()); err != nil || !strings.Contains(note, "no /proc") {
		t.Errorf("failed reading: note %q, err %v", note, err)
	}
	// The end of ctx ends it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q = quietWait{below: 0.3, window: w, max: time.Minute, busy: fakeBusy(1)}
	if _, err = q.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
}

// A run's profiles are taken in the background; wait returns every note,
// sorted, once all have returned.
func TestProfileSet(t *testing.T) {
	var p profileSet
	release := make(chan struct{})
	for _, name := range []string{"shard-1", "kube-apiserver", "shard-0"} {
		p.take(context.Background(), func(context.Context) string { <-release; return name + ": note" })
	}
	done := make(chan []string)
	go func() { done <- p.wait() }()
	select {
	case n := <-done:
		t.Fatalf("wait returned %v before the profiles did", n)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	got := <-done
	want := []string{"kube-apiserver: note", "shard-0: note", "shard-1: note"}
	if !slices.Equal(got, want) {
		t.Errorf("notes %v, want %v", got, want)
	}
}
