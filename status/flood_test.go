package status

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// TestQueueStatusFloodCoalesced is failure F3: a flood of status changes
// for a few queues. 100,000 changes over 10 queues from 8 goroutines while
// Run flushes every 10ms: memory for pending status stays O(queues), writes
// are bounded by flushes × queues, the last value of every queue reaches the
// server, and nothing conflicts.
func TestQueueStatusFloodCoalesced(t *testing.T) {
	const (
		queues     = 10
		goroutines = 8
		changes    = 100_000
		interval   = 10 * time.Millisecond
	)
	w := newFakeWriter()
	w.delay = 100 * time.Microsecond // widen the window where Set meets a write in flight
	b := newTestBatcher(t, w, func(c *Config) { c.Interval = interval })

	// Sets of one queue are serialized by its lock, so "the last value
	// set" is well defined; sets of different queues run in parallel.
	var (
		qmu  [queues]sync.Mutex
		seq  [queues]int32
		last [queues]api.QueueStatus
	)
	name := func(q int) string { return fmt.Sprint("queue-", q) }

	start := time.Now()
	stopRun := startRun(t, b)

	// A sampler watches Pending while the flood runs.
	var overflow atomic.Int64
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			select {
			case <-stopSampler:
				return
			default:
			}
			if p := b.Stats().Pending; p > queues {
				overflow.Store(int64(p))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range changes / goroutines {
				q := r.IntN(queues)
				qmu[q].Lock()
				seq[q]++
				// Every other change repeats the previous value.
				v := qs(seq[q] / 2)
				v.Pending = int32(g)
				b.SetQueue(name(q), v)
				last[q] = v
				qmu[q].Unlock()
				if i%1000 == 0 {
					time.Sleep(time.Millisecond) // spread the flood over many flushes
				}
			}
		})
	}
	wg.Wait()
	if err := stopRun(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	elapsed := time.Since(start)
	close(stopSampler)
	<-samplerDone

	st := b.Stats()
	bound := uint64(elapsed/interval)*queues + queues
	t.Logf("%d changes in %v: %d writes (bound %d), %d flushes, %d coalesced, max pending %d",
		changes, elapsed.Round(time.Millisecond), st.Writes, bound, st.Flushes, st.Coalesced, st.MaxPending)

	if p := overflow.Load(); p != 0 {
		t.Errorf("sampled %d pending entries, more than the %d queues", p, queues)
	}
	if st.MaxPending > queues {
		t.Errorf("high-water mark of pending entries %d, more than the %d queues", st.MaxPending, queues)
	}
	if st.Writes > bound {
		t.Errorf("%d writes in %v, more than (duration/interval)×queues + queues = %d", st.Writes, elapsed, bound)
	}
	if st.Conflicts != 0 || st.Errors != 0 {
		t.Errorf("%d conflicts, %d errors", st.Conflicts, st.Errors)
	}
	if st.Pending != 0 || st.Objects != queues {
		t.Errorf("after Run: %d pending, %d objects", st.Pending, st.Objects)
	}
	// Every change is accounted for: written, or coalesced.
	if got := st.Writes - st.Errors + st.Coalesced; got != changes {
		t.Errorf("writes %d + coalesced %d = %d, want %d changes", st.Writes, st.Coalesced, got, changes)
	}
	if uint64(w.callCount()) != st.Writes {
		t.Errorf("writer saw %d calls, Stats %d", w.callCount(), st.Writes)
	}
	if w.overlaps != 0 {
		t.Errorf("%d writes overlapped a write of the same queue", w.overlaps)
	}
	for q := range queues {
		got := w.queueWrites(name(q))
		if len(got) == 0 {
			t.Errorf("%s: never written", name(q))
		} else if !queueStatusEqual(got[len(got)-1], last[q]) {
			t.Errorf("%s: last written %v, want the last set %v", name(q), got[len(got)-1], last[q])
		}
		for i := 1; i < len(got); i++ {
			if queueStatusEqual(got[i], got[i-1]) {
				t.Errorf("%s: write %d repeats the value already written", name(q), i)
			}
		}
	}
}

// TestAgainstModel drives the Batcher with random sets, forgets and flushes
// whose writes fail at random, and checks it against a naive model: after a
// final successful flush the server holds the last value set for every
// object that was not forgotten since, and no write repeats the value the
// server already had.
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.Concurrency = 1 + r.IntN(3) })

	var (
		modelMu sync.Mutex           // guards the model and hr: writes run on flush workers
		wantQ   = map[string]int32{} // last value set per queue not forgotten since
		wantG   = map[string]int32{} // the same per PodGroup UID
		hr      = rand.New(rand.NewPCG(seed, 8))
	)
	var failRate, setRate atomic.Int64 // percent
	var sets atomic.Int64
	w.hook = func(_ context.Context, kind, key string) error {
		modelMu.Lock()
		defer modelMu.Unlock()
		if hr.IntN(100) < int(setRate.Load()) {
			// A change arrives while this object is being written.
			v := int32(hr.IntN(3))
			if kind == "queue" {
				b.SetQueue(key, qs(v))
				wantQ[key] = v
				sets.Add(1)
			} else {
				b.SetPodGroup("ns", key, key, api.JobStatus{Running: v})
				wantG[key] = v
				sets.Add(1)
			}
		}
		if hr.IntN(100) < int(failRate.Load()) {
			if hr.IntN(2) == 0 {
				return fmt.Errorf("apply: %w", ErrConflict)
			}
			return errors.New("unavailable")
		}
		return nil
	}

	keys := []string{"a", "b", "c", "d"}
	forgets := seed%2 == 1 // half the runs never forget, to check the accounting
	for range 300 {
		k := keys[r.IntN(len(keys))]
		switch op := r.IntN(10); {
		case op < 7 || op < 8 && !forgets:
			v := int32(r.IntN(3))
			modelMu.Lock()
			sets.Add(1)
			if r.IntN(2) == 0 {
				b.SetQueue(k, qs(v))
				wantQ[k] = v
			} else {
				b.SetPodGroup("ns", k, k, api.JobStatus{Running: v})
				wantG[k] = v
			}
			modelMu.Unlock()
		case op < 8:
			modelMu.Lock()
			<-b.Forget(k)
			<-b.ForgetPodGroup(k)
			delete(wantQ, k)
			delete(wantG, k)
			modelMu.Unlock()
		default:
			failRate.Store(int64(r.IntN(60)))
			setRate.Store(int64(r.IntN(30)))
			_ = b.Flush(context.Background())
		}
		if st := b.Stats(); st.Pending > 2*len(keys) || st.Objects > 2*len(keys) {
			t.Fatalf("stats %+v: more entries than objects", st)
		}
		checkInvariants(t, b)
	}
	failRate.Store(0)
	setRate.Store(0)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k, v := range wantQ {
		if q := w.queueWrites(k); len(q) == 0 || q[len(q)-1].Running != v {
			t.Errorf("queue %s: server %v, want Running %d", k, q, v)
		}
	}
	for k, v := range wantG {
		if g := w.groupWrites(k); len(g) == 0 || g[len(g)-1].st.Running != v {
			t.Errorf("podgroup %s: server %v, want Running %d", k, g, v)
		}
	}
	st := b.Stats()
	if !forgets {
		// Every value set was written or coalesced.
		if got, want := st.Writes-st.Errors+st.Coalesced, uint64(sets.Load()); got != want {
			t.Errorf("writes−errors+coalesced = %d, want the %d values set (%+v)", got, want, st)
		}
		// Without forgets no successful write repeats the value the server had.
		for _, k := range keys {
			q, g := w.queueWrites(k), w.groupWrites(k)
			for i := 1; i < len(q); i++ {
				if queueStatusEqual(q[i], q[i-1]) {
					t.Errorf("queue %s: write %d repeats the value the server had", k, i)
				}
			}
			for i := 1; i < len(g); i++ {
				if jobStatusEqual(g[i].st, g[i-1].st) {
					t.Errorf("podgroup %s: write %d repeats the value the server had", k, i)
				}
			}
		}
	}
	if st.Pending != 0 || st.Conflicts > st.Errors || st.Writes != uint64(w.callCount()) || w.overlaps != 0 {
		t.Errorf("stats %+v, writer calls %d, overlaps %d", st, w.callCount(), w.overlaps)
	}
}

// checkInvariants checks the Batcher's books between flushes: every pending
// slot is tracked, ready counts the pending slots that are not retries, and
// nothing is in flight.
func checkInvariants(t *testing.T, b *Batcher) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	ready := checkTable(t, &b.queues) + checkTable(t, &b.groups)
	if ready != b.ready {
		t.Fatalf("ready is %d, %d pending slots are not retries", b.ready, ready)
	}
	if p := b.pendingLocked(); p > b.stats.MaxPending {
		t.Fatalf("pending %d above its high-water mark %d", p, b.stats.MaxPending)
	}
}

func checkTable[V any](t *testing.T, tb *table[V]) (ready int) {
	t.Helper()
	for k, s := range tb.pending {
		if tb.all[k] != s || !s.pending {
			t.Fatalf("%s: pending slot not tracked or not marked pending", k)
		}
		if !s.retry {
			ready++
		}
	}
	for k, s := range tb.all {
		if s.pending != (tb.pending[k] == s) {
			t.Fatalf("%s: pending flag %v disagrees with the pending set", k, s.pending)
		}
		if s.inflight || s.done != nil {
			t.Fatalf("%s: in flight between flushes", k)
		}
	}
	return ready
}
