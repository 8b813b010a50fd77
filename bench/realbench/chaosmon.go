package main

// What the chaos scenario observes while it runs (the shards' /metrics,
// scraped every scrapeInterval) and how it turns the observations into
// recovery times.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scrapeMetrics reads the unlabelled shardsched_* series of one /metrics
// page, without the prefix.
func scrapeMetrics(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	body, err := httpGet(ctx, client, url)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "shardsched_") || strings.ContainsRune(name, '{') {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[strings.TrimPrefix(name, "shardsched_")] = v
		}
	}
	return out, sc.Err()
}

// httpGet is the body of a GET of url, an error unless it answers 200 OK
// (with the start of the body it did answer).
func httpGet(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %.200s", url, resp.Status, bytes.TrimSpace(body))
	}
	return body, err
}

// ownerSample is one scrape round over the live shards.
type ownerSample struct {
	start, end time.Time
	complete   bool  // every live shard answered
	owned      int   // sum of their owned_keys
	ownedBy    []int // each shard's owned_keys, by index (-1: killed or did not answer)
	leaders    []int // shards reporting coordinator_leader 1
	live       int   // shards not killed
	// fewestMembers is the smallest gossip_members a live shard reported
	// (live when none answered).
	fewestMembers int
}

// monitor scrapes every live shard every scrapeInterval. samples is
// appended by run and read by the harness under mu.
type monitor struct {
	shards []*chaosShard
	client *http.Client

	mu      sync.Mutex
	samples []ownerSample
}

func newMonitor(shards []*chaosShard) *monitor {
	return &monitor{shards: shards, client: &http.Client{Timeout: time.Second}}
}

// round scrapes the shards not killed, concurrently.
func (m *monitor) round(ctx context.Context) ownerSample {
	s := ownerSample{start: time.Now(), complete: true, ownedBy: make([]int, len(m.shards))}
	for i := range s.ownedBy {
		s.ownedBy[i] = -1
	}
	type answer struct {
		i   int
		m   map[string]float64
		err error
	}
	ch := make(chan answer, len(m.shards))
	for i, sh := range m.shards {
		if sh.killed.Load() {
			continue
		}
		s.live++
		go func() {
			v, err := scrapeMetrics(ctx, m.client, sh.metrics)
			ch <- answer{i, v, err}
		}()
	}
	s.fewestMembers = s.live
	for n := s.live; n > 0; n-- {
		a := <-ch
		if a.err != nil {
			s.complete = false
			continue
		}
		s.owned += int(a.m["owned_keys"])
		s.ownedBy[a.i] = int(a.m["owned_keys"])
		s.fewestMembers = min(s.fewestMembers, int(a.m["gossip_members"]))
		if a.m["coordinator_leader"] == 1 {
			s.leaders = append(s.leaders, a.i)
		}
	}
	slices.Sort(s.leaders)
	s.end = time.Now()
	return s
}

// run records a round every scrapeInterval until ctx ends.
func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(scrapeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := m.round(ctx)
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		m.samples = append(m.samples, s)
		m.mu.Unlock()
	}
}

func (m *monitor) snapshot() []ownerSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.samples)
}

// waitSettled scrapes until, for a whole second, every shard answers, the
// owned keys sum to total and exactly one shard leads the coordinator.
func (m *monitor) waitSettled(ctx context.Context, total int, timeout time.Duration) error {
	_, err := m.settledAt(ctx, total, timeout)
	return err
}

// settledAt is waitSettled returning when the round that began the settled
// second started: the moment every key was first seen owned again.
func (m *monitor) settledAt(ctx context.Context, total int, timeout time.Duration) (time.Time, error) {
	at, _, err := m.settle(ctx, total, timeout)
	return at, err
}

// settle is settledAt also returning the settled second's last round.
func (m *monitor) settle(ctx context.Context, total int, timeout time.Duration) (time.Time, ownerSample, error) {
	return m.until(ctx, timeout, time.Second,
		func(s ownerSample) bool { return s.complete && s.owned == total && len(s.leaders) == 1 },
		func(s ownerSample) error {
			return fmt.Errorf("shards not settled after %s: every shard answered %v, owned keys %d of %d, leaders %v",
				timeout, s.complete, s.owned, total, s.leaders)
		})
}

// ownsAgainAt scrapes until shard i owns at least want keys and the live
// shards own all total, and returns when the first such round started:
// with several shards, the others hold a stopped shard's keys until it is
// back, so every key owned does not say that it is.
func (m *monitor) ownsAgainAt(ctx context.Context, i, want, total int, timeout time.Duration) (time.Time, error) {
	at, _, err := m.until(ctx, timeout, 0,
		func(s ownerSample) bool { return s.complete && s.owned == total && s.ownedBy[i] >= want },
		func(s ownerSample) error {
			return fmt.Errorf("%s owns %d keys after %s, %d before it stopped (the shards own %d of %d; every shard answered: %v)",
				m.shards[i].name, s.ownedBy[i], timeout, want, s.owned, total, s.complete)
		})
	return at, err
}

// leader returns the one live shard that reports leading the coordinator,
// waiting up to timeout for there to be exactly one.
func (m *monitor) leader(ctx context.Context, timeout time.Duration) (int, error) {
	_, s, err := m.until(ctx, timeout, 0,
		func(s ownerSample) bool { return s.complete && len(s.leaders) == 1 },
		func(s ownerSample) error {
			return fmt.Errorf("no single coordinator leader among the live shards after %s (leaders %v, every shard answered %v)", timeout, s.leaders, s.complete)
		})
	if err != nil {
		return 0, err
	}
	return s.leaders[0], nil
}

// until scrapes a round every scrapeInterval until ok has held of every
// round for hold (0: of one round), and returns when the first of those
// rounds started and the last round; a shard exiting unasked, ctx ending
// or timeout passing ends it with an error (after timeout, failed's of the
// last round).
func (m *monitor) until(ctx context.Context, timeout, hold time.Duration, ok func(ownerSample) bool, failed func(ownerSample) error) (time.Time, ownerSample, error) {
	deadline := time.Now().Add(timeout)
	var since time.Time
	for {
		if err := unexpectedExit(m.shards); err != nil {
			return time.Time{}, ownerSample{}, err
		}
		last := m.round(ctx)
		if !ok(last) {
			since = time.Time{}
		} else {
			if since.IsZero() {
				since = last.start
			}
			if time.Since(since) >= hold {
				return since, last, nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, ownerSample{}, failed(last)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ownerSample{}, ctx.Err()
		case <-time.After(scrapeInterval):
		}
	}
}

// spans lists, in seconds since start, the spans of consecutive samples
// for which bad holds, each followed by what note says of its samples.
func spans(samples []ownerSample, start time.Time, bad func(ownerSample) bool, note func([]ownerSample) string) string {
	var parts []string
	for i := 0; i < len(samples); {
		if !bad(samples[i]) {
			i++
			continue
		}
		j := i
		for j < len(samples) && bad(samples[j]) {
			j++
		}
		to := samples[j-1].end
		if j < len(samples) {
			to = samples[j].start
		}
		parts = append(parts, fmt.Sprintf("%.1f–%.1f s%s", samples[i].start.Sub(start).Seconds(), to.Sub(start).Seconds(), note(samples[i:j])))
		i = j
	}
	if len(parts) == 0 {
		return "never"
	}
	return strings.Join(parts, ", ")
}

// ownershipSpans lists when the live shards owned fewer than total keys
// (or did not all answer), with the lowest complete sum of each span.
func ownershipSpans(samples []ownerSample, start time.Time, total int) string {
	return spans(samples, start, func(s ownerSample) bool { return !s.complete || s.owned < total }, func(ss []ownerSample) string {
		lowest := total
		for _, s := range ss {
			if s.complete {
				lowest = min(lowest, s.owned)
			}
		}
		return fmt.Sprintf(" (lowest %d of %d)", lowest, total)
	})
}

// gossipSpans lists when some live shard saw fewer gossip members than
// there were live shards.
func gossipSpans(samples []ownerSample, start time.Time) string {
	return spans(samples, start, func(s ownerSample) bool { return s.fewestMembers < s.live }, func(ss []ownerSample) string {
		fewest, live := ss[0].fewestMembers, ss[0].live
		for _, s := range ss {
			fewest = min(fewest, s.fewestMembers)
		}
		return fmt.Sprintf(" (fewest %d of %d)", fewest, live)
	})
}

// windowRate is the number of bind times (seconds, ascending) in
// (from, to], per second.
func windowRate(bindTimes []float64, from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	lo := sort.SearchFloat64s(bindTimes, from.Seconds())
	for lo < len(bindTimes) && bindTimes[lo] <= from.Seconds() {
		lo++
	}
	hi := sort.SearchFloat64s(bindTimes, to.Seconds())
	for hi < len(bindTimes) && bindTimes[hi] <= to.Seconds() {
		hi++
	}
	return float64(hi-lo) / (to - from).Seconds()
}

// ownersBackAfter is the time from the fault to the end of the first
// complete scrape round, begun after the fault's action returned, in which
// the live shards own total keys; -1 if none did.
func ownersBackAfter(samples []ownerSample, fr faultRecord, total int) float64 {
	for _, s := range samples {
		if s.start.Before(fr.done) || !s.complete || s.owned < total {
			continue
		}
		return s.end.Sub(fr.at).Seconds()
	}
	return -1
}

// throughputBackAfter is the time from the fault (at, since the clock
// started) to the end of the first rateWindow, wholly after it and ending by
// end + rateWindow, whose bind rate is at least recoveredShare of ref (the
// healthy rate); -1 if none is, 0 if ref is 0.
func throughputBackAfter(bindTimes []float64, at time.Duration, ref float64, end time.Duration) float64 {
	if ref <= 0 {
		return 0
	}
	for t := at + rateWindow; t <= end+rateWindow; t += scrapeInterval {
		if windowRate(bindTimes, t-rateWindow, t) >= recoveredShare*ref {
			return (t - at).Seconds()
		}
	}
	return -1
}
