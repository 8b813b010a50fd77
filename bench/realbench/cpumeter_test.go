package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestCPUSpentNote(t *testing.T) {
	s := cpuSpent{parts: map[string]time.Duration{"kwok": 1 * time.Second, "kube-apiserver": 4 * time.Second, "etcd": 2 * time.Second},
		machine: 12 * time.Second}
	got := s.note(2000, 3*time.Second, 1*time.Second)
	want := "CPU s per 1000 bound pods over the run: the whole machine 6.00 = the system 1.50 + the harness 0.50 + etcd 1.00 + kube-apiserver 2.00 + kwok 0.50 + the rest 0.50"
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
}

func TestCPUMeterReadsThisProcess(t *testing.T) {
	m := startCPUMeter(map[string]int{"self": os.Getpid(), "gone": 1 << 30})
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = strings.Repeat("y", n%64)
	}
	s := m.stop()
	if s.parts["self"] <= 0 {
		t.Errorf("this process's CPU over 50 ms of work: %v, want > 0", s.parts["self"])
	}
	if _, ok := s.parts["gone"]; ok {
		t.Error("a process that does not exist has a figure")
	}
	if s.machine < s.parts["self"] {
		t.Errorf("the machine's busy time %v is below this process's %v", s.machine, s.parts["self"])
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
		"bind_wait_seconds_sum": 10, "bind_wait_seconds_count": 1000,
		"bind_call_seconds_sum": 100, "bind_call_seconds_count": 1000,
	}
	want := "where a pod's time went (means of the shard's histograms): creation to bind 500 ms over 1000 pods; a reservation call 5.0 ms (400); a placed pod's wait for a bind worker 10.0 ms (1000); a bind call 100.0 ms (1000)"
	if got := waitsNote(m); got != want {
		t.Errorf("waitsNote =\n%s\nwant\n%s", got, want)
	}
	if got := waitsNote(map[string]float64{"bind_call_seconds_count": 3}); got != "" {
		t.Errorf("no pod bound: %q, want no note", got)
	}
}
