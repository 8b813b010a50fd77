package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWindowRate(t *testing.T) {
	binds := []float64{0.5, 1, 1.5, 2, 2.5, 3}
	for _, c := range []struct {
		from, to float64
		want     float64
	}{
		{0, 2, 2},   // 0.5, 1, 1.5, 2
		{1, 3, 2},   // (1, 3]: 1.5, 2, 2.5, 3
		{3, 5, 0},   // nothing after 3
		{-5, 0, 0},  // nothing before the start
		{2, 2, 0},   // empty window
		{0.5, 1, 2}, // (0.5, 1]: 1
	} {
		got := windowRate(binds, secs(c.from), secs(c.to))
		if got != c.want {
			t.Errorf("windowRate(%g, %g) = %g, want %g", c.from, c.to, got, c.want)
		}
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// steady returns bind times at rate per second over [from, to).
func steady(from, to, rate float64) []float64 {
	var out []float64
	for t := from; t < to; t += 1 / rate {
		out = append(out, t)
	}
	return out
}

func TestThroughputBackAfter(t *testing.T) {
	// 100 pods/s, an outage from 10 s to 13 s, then 100 pods/s again.
	binds := append(steady(0, 10, 100), steady(13, 30, 100)...)
	got := throughputBackAfter(binds, secs(10), 100, secs(30))
	// The first 2 s window wholly after the fault with ≥ 90 pods/s ends
	// 1.8 s after the binds resume.
	if got < 4.7 || got > 4.9 {
		t.Errorf("after a 3 s outage: %g s, want about 4.8", got)
	}
	if got := throughputBackAfter(steady(0, 30, 100), secs(10), 100, secs(30)); got != 2 {
		t.Errorf("no dip: %g s, want 2 (one window)", got)
	}
	if got := throughputBackAfter(steady(0, 10, 100), secs(10), 100, secs(30)); got != -1 {
		t.Errorf("never back: %g, want -1", got)
	}
	if got := throughputBackAfter(nil, secs(10), 0, secs(30)); got != 0 {
		t.Errorf("nothing before the fault: %g, want 0", got)
	}
}

func TestOwnersBackAfter(t *testing.T) {
	at := time.Unix(100, 0)
	fr := faultRecord{at: at, done: at.Add(time.Second)}
	s := func(start float64, complete bool, owned int) ownerSample {
		st := at.Add(secs(start))
		return ownerSample{start: st, end: st.Add(10 * time.Millisecond), complete: complete, owned: owned}
	}
	samples := []ownerSample{
		s(0.5, true, 10), // before the action returned: ignored
		s(1.5, false, 10),
		s(2.0, true, 9),
		s(2.5, true, 10),
	}
	if got := ownersBackAfter(samples, fr, 10); got != 2.51 {
		t.Errorf("ownersBackAfter = %g, want 2.51", got)
	}
	if got := ownersBackAfter(samples[:3], fr, 10); got != -1 {
		t.Errorf("never complete: %g, want -1", got)
	}
}

func TestScrapeMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP shardsched_owned_keys x\n# TYPE shardsched_owned_keys gauge\nshardsched_owned_keys 257\n"+
			"shardsched_coordinator_leader 1\nshardsched_queue_jobs{queue=\"a\",state=\"running\"} 3\ngo_goroutines 12\n"+
			"shardsched_binds_total 1.5e+03\n")
	}))
	defer srv.Close()
	m, err := scrapeMetrics(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"owned_keys": 257, "coordinator_leader": 1, "binds_total": 1500}
	if len(m) != len(want) {
		t.Errorf("got %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %g, want %g", k, m[k], v)
		}
	}
}

// The start-up steps come out in the order they ended (the exposition
// sorts them by name), each with the time from the end of the one before.
func TestStartupSteps(t *testing.T) {
	scrape := "# HELP shardsched_startup_step_end_seconds x\n# TYPE shardsched_startup_step_end_seconds gauge\n" +
		`shardsched_startup_step_end_seconds{step="clients"} 0.01` + "\n" +
		`shardsched_startup_step_end_seconds{step="default-queues"} 0.5` + "\n" +
		`shardsched_startup_step_end_seconds{step="informers"} 3.25` + "\n" +
		`shardsched_startup_step_end_seconds{step="parts"} 0.25` + "\n" +
		`shardsched_startup_step_end_seconds{step="scheduling"} 3.26` + "\n" +
		"shardsched_owned_keys 257\n"
	want := "clients 0.01 s, parts 0.24 s, default-queues 0.25 s, informers 2.75 s, scheduling 0.01 s"
	if got := startupSteps([]byte(scrape)); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := startupSteps([]byte("shardsched_owned_keys 257\n")); got != "none" {
		t.Errorf("a shard exporting no steps: got %q", got)
	}
}

func TestOwnershipSpans(t *testing.T) {
	start := time.Unix(100, 0)
	s := func(at float64, complete bool, owned int) ownerSample {
		st := start.Add(secs(at))
		return ownerSample{start: st, end: st.Add(100 * time.Millisecond), complete: complete, owned: owned, live: 3, fewestMembers: 3}
	}
	samples := []ownerSample{s(1, true, 10), s(2, true, 7), s(3, false, 0), s(4, true, 9), s(5, true, 10), s(6, true, 8)}
	want := "2.0–5.0 s (lowest 7 of 10), 6.0–6.1 s (lowest 8 of 10)"
	if got := ownershipSpans(samples, start, 10); got != want {
		t.Errorf("ownershipSpans = %q, want %q", got, want)
	}
	if got := ownershipSpans(samples[:1], start, 10); got != "never" {
		t.Errorf("all owned: %q, want never", got)
	}
	samples[1].fewestMembers = 2
	if got, want := gossipSpans(samples, start), "2.0–3.0 s (fewest 2 of 3)"; got != want {
		t.Errorf("gossipSpans = %q, want %q", got, want)
	}
}

// A restarted shard is back when it owns its keys again: the survivors
// owning every key while it starts (as they do with several shards) is
// not enough.
func TestOwnsAgainWaitsForTheRestartedShard(t *testing.T) {
	// Each shard's owned_keys, one value per scrape (the last repeats):
	// the survivor holds all ten keys for two rounds, then hands five back.
	owned := [][]int{{0, 0, 2, 5}, {10, 10, 8, 5}}
	var shards []*chaosShard
	for i, seq := range owned {
		var mu sync.Mutex
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			v := seq[min(n, len(seq)-1)]
			n++
			mu.Unlock()
			fmt.Fprintf(w, "shardsched_owned_keys %d\n", v)
		}))
		t.Cleanup(srv.Close)
		shards = append(shards, &chaosShard{name: fmt.Sprintf("shard-%d", i), metrics: srv.URL, proc: &schedulerProcess{done: make(chan struct{})}})
	}
	m := newMonitor(shards)
	t0 := time.Now()
	at, err := m.ownsAgainAt(context.Background(), 0, 5, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds start scrapeInterval apart at least: the fourth one's start.
	if got := at.Sub(t0); got < 3*scrapeInterval {
		t.Errorf("back after %s: before the restarted shard owned its keys (the fourth round, at least %s)", got, 3*scrapeInterval)
	}
	if _, err := m.ownsAgainAt(context.Background(), 0, 6, 10, 0); err == nil || !strings.Contains(err.Error(), "shard-0 owns 5 keys") {
		t.Errorf("a shard that never gets its keys back: err = %v", err)
	}
}
