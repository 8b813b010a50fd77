package status

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for field, mod := range map[string]func(*Config){
		"Interval":     func(c *Config) { c.Interval = 0 },
		"MaxPending":   func(c *Config) { c.MaxPending = 0 },
		"WriteTimeout": func(c *Config) { c.WriteTimeout = -time.Second },
		"Concurrency":  func(c *Config) { c.Concurrency = maxConcurrency + 1 },
		"CountsEvery":  func(c *Config) { c.CountsEvery = -time.Second },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: got %v, want an error naming the field", field, err)
		}
		if _, err := New(newFakeWriter(), cfg); err == nil {
			t.Errorf("New accepted a bad %s", field)
		}
	}
	if _, err := New(nil, DefaultConfig()); err == nil {
		t.Error("New accepted a nil Writer")
	}
}

func TestCoalescing(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	ctx := context.Background()

	for i := int32(1); i <= 100; i++ {
		b.SetQueue("q", qs(i))
	}
	if st := b.Stats(); st.Pending != 1 || st.Coalesced != 99 {
		t.Fatalf("after 100 sets: %+v, want 1 pending and 99 coalesced", st)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := w.queueWrites("q")
	if len(got) != 1 || !queueStatusEqual(got[0], qs(100)) {
		t.Fatalf("writes %v, want one write of the latest value", got)
	}

	// The value written is not written again.
	b.SetQueue("q", qs(100))
	if st := b.Stats(); st.Pending != 0 {
		t.Fatalf("an unchanged value is pending: %+v", st)
	}
	// Nor is a change that is undone before the next flush.
	b.SetQueue("q", qs(7))
	b.SetQueue("q", qs(100))
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.callCount(); n != 1 {
		t.Fatalf("%d writes, want 1: unchanged values were rewritten", n)
	}
	st := b.Stats()
	if st.Writes != 1 || st.Coalesced != 102 || st.Pending != 0 || st.Objects != 1 || st.Flushes != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEqualityIgnoresRepresentation(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	b.SetQueue("q", api.QueueStatus{Allocated: api.Resource{MilliCPU: 1, Scalars: map[string]int64{"nvidia.com/gpu": 0}}})
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A zero scalar and an absent one are the same resource.
	b.SetQueue("q", api.QueueStatus{Allocated: api.Resource{MilliCPU: 1}})
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Conditions: []api.JobCondition{{Type: "Scheduled", LastTransition: when}}})
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The same instant in another location is the same condition.
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Conditions: []api.JobCondition{{Type: "Scheduled", LastTransition: when.In(time.FixedZone("x", 3600))}}})
	if st := b.Stats(); st.Pending != 0 || st.Writes != 2 {
		t.Fatalf("stats %+v, want 2 writes and nothing pending", st)
	}
}

func TestSetCopiesItsArgument(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	st := api.QueueStatus{Allocated: api.NewResource(0, 0, map[string]int64{"nvidia.com/gpu": 2})}
	b.SetQueue("q", st)
	st.Allocated.Scalars["nvidia.com/gpu"] = 5 // the caller reuses its map
	js := api.JobStatus{Conditions: []api.JobCondition{{Type: "A"}}}
	b.SetPodGroup("ns", "pg", "u1", js)
	js.Conditions[0].Type = "B"
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.queueWrites("q")[0].Allocated.Get("nvidia.com/gpu"); got != 2 {
		t.Errorf("queue written with %d GPUs, want the 2 that were set", got)
	}
	if got := w.groupWrites("u1")[0].st.Conditions[0].Type; got != "A" {
		t.Errorf("condition written as %q, want the A that was set", got)
	}
}

func TestFailedWriteStaysPending(t *testing.T) {
	boom := errors.New("apiserver unavailable")
	w := newFakeWriter()
	failures := 1
	w.hook = func(context.Context, string, string) error {
		if failures > 0 {
			failures-- // only touched by the single flush goroutine of one write
			return boom
		}
		return nil
	}
	b := newTestBatcher(t, w, nil)
	ctx := context.Background()

	b.SetQueue("q", qs(1))
	err := b.Flush(ctx)
	if !errors.Is(err, boom) {
		t.Fatalf("Flush: %v, want it to wrap the write error", err)
	}
	if st := b.Stats(); st.Pending != 1 || st.Writes != 1 || st.Errors != 1 || st.Conflicts != 0 {
		t.Fatalf("after a failed write: %+v, want the entry kept pending", st)
	}
	if n := w.callCount(); n != 1 {
		t.Fatalf("%d calls, want 1: the flush retried on its own", n)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.queueWrites("q"); len(got) != 1 || !queueStatusEqual(got[0], qs(1)) {
		t.Fatalf("server has %v, want the value written at the next flush", got)
	}
	if st := b.Stats(); st.Pending != 0 || st.Writes != 2 || st.Errors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNewerValueWinsOverFailedWrite(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	first := true
	w.hook = func(_ context.Context, _, key string) error {
		if first {
			first = false
			b.SetQueue(key, qs(2)) // arrives while qs(1) is being written
			return errors.New("timeout")
		}
		return nil
	}
	b.SetQueue("q", qs(1))
	_ = b.Flush(context.Background())
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := w.queueWrites("q")
	if len(got) != 1 || !queueStatusEqual(got[0], qs(2)) {
		t.Fatalf("server has %v, want only the newer value", got)
	}
	st := b.Stats()
	// qs(1) failed and was superseded; qs(2) was written.
	if st.Writes != 2 || st.Errors != 1 || st.Coalesced != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSetDuringSuccessfulWrite(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	calls := 0
	w.hook = func(_ context.Context, _, key string) error {
		calls++
		switch calls {
		case 1:
			b.SetQueue(key, qs(1)) // the value being written: nothing to do
		case 2:
			b.SetQueue(key, qs(3)) // a newer value: written at the next flush
		}
		return nil
	}
	ctx := context.Background()
	b.SetQueue("q", qs(1))
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Pending != 0 || st.Coalesced != 1 {
		t.Fatalf("a set of the value in flight left %+v", st)
	}
	b.SetQueue("q", qs(2))
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Pending != 1 {
		t.Fatalf("a newer value set during a write was lost: %+v", st)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := w.queueWrites("q")
	if len(got) != 3 || !queueStatusEqual(got[2], qs(3)) {
		t.Fatalf("server has %v, want qs(1), qs(2), qs(3)", got)
	}
}

func TestConflictIsCountedNotRetried(t *testing.T) {
	w := newFakeWriter()
	w.hook = func(_ context.Context, kind, key string) error {
		return fmt.Errorf("apply %s %s: the server reported a conflict: %w", kind, key, ErrConflict)
	}
	b := newTestBatcher(t, w, nil)
	b.SetQueue("q", qs(1))
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Phase: api.JobRunning})
	err := b.Flush(context.Background())
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Flush: %v, want ErrConflict", err)
	}
	if n := w.callCount(); n != 2 {
		t.Fatalf("%d calls, want 2: a conflict was retried within the flush", n)
	}
	if st := b.Stats(); st.Conflicts != 2 || st.Errors != 2 || st.Pending != 2 {
		t.Fatalf("stats %+v, want 2 conflicts counted and both kept pending", st)
	}
}

// A failed write is retried at the next interval tick, never by an early,
// size-triggered flush: a failing API server sees at most one write per
// object per Interval.
func TestRetryWaitsForTick(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.MaxPending = 2 })
	fail := make(chan bool, 1)
	fail <- true
	w.hook = func(_ context.Context, _, key string) error {
		if key == "a" {
			select {
			case <-fail:
				return errors.New("unavailable")
			default:
			}
		}
		return nil
	}
	ticker := useFakeTicker(b)
	startRun(t, b)

	b.SetQueue("a", qs(1))
	ticker.tick(t, b)
	if st := b.Stats(); st.Errors != 1 || st.Pending != 1 {
		t.Fatalf("after the failing tick: %+v", st)
	}
	// Two new values reach MaxPending: an early flush writes them, not a.
	b.SetQueue("b", qs(1))
	b.SetQueue("c", qs(1))
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.queueWrites("c")) == 1 && len(w.queueWrites("b")) == 1 }, "the early flush is written")
	testenv.Eventually(t, 10*time.Second, func() bool { return !flushing(b) }, "the early flush has finished")
	if n := w.callCount(); n != 3 {
		t.Fatalf("%d calls, want 3: the early flush retried the failed write", n)
	}
	ticker.tick(t, b)
	if got := w.queueWrites("a"); len(got) != 1 {
		t.Fatalf("a was not retried at the next tick: %v", got)
	}
	if st := b.Stats(); st.Pending != 0 || st.Writes != 4 || st.Flushes != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// Values waiting for a retry do not count toward MaxPending: otherwise,
// with the API server down, every new change would trigger another early
// flush, one write per event.
func TestRetriesDoNotTriggerEarlyFlush(t *testing.T) {
	w := newFakeWriter()
	w.hook = func(context.Context, string, string) error { return errors.New("unavailable") }
	b := newTestBatcher(t, w, func(c *Config) { c.MaxPending = 2 })
	b.SetQueue("a", qs(1))
	b.SetQueue("b", qs(1))
	if len(b.kick) != 1 {
		t.Fatal("2 pending values with MaxPending 2 did not ask for an early flush")
	}
	_ = b.Flush(context.Background())
	if st := b.Stats(); st.Pending != 2 || len(b.kick) != 0 {
		t.Fatalf("after the failed flush: %+v, kick %d", st, len(b.kick))
	}
	b.SetQueue("c", qs(1))
	if len(b.kick) != 0 {
		t.Fatal("2 retries and 1 new value asked for an early flush")
	}
	b.SetQueue("d", qs(1))
	if len(b.kick) != 1 {
		t.Fatal("2 new values did not ask for an early flush")
	}
}

func TestMaxPendingFlushesEarly(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.MaxPending = 5 })
	useFakeTicker(b) // never ticks
	startRun(t, b)

	for i := range 4 {
		b.SetQueue(fmt.Sprint("q", i), qs(1))
	}
	b.SetQueue("q0", qs(2)) // coalesced: still 4 objects
	if st := b.Stats(); st.Flushes != 0 || st.Pending != 4 {
		t.Fatalf("flushed below MaxPending: %+v", st)
	}
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Phase: api.JobInqueue})
	testenv.Eventually(t, 10*time.Second, func() bool { return b.Stats().Writes == 5 }, "the early flush is written")
	st := b.Stats()
	if st.Flushes != 1 || st.Pending != 0 || st.MaxPending != 5 {
		t.Fatalf("stats %+v, want one early flush of all 5", st)
	}
}

func TestShutdownFlushesPending(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	useFakeTicker(b)
	stop := startRun(t, b)
	for i := range 3 {
		b.SetQueue(fmt.Sprint("q", i), qs(int32(i)))
	}
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Phase: api.JobRunning})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := range 3 {
		if got := w.queueWrites(fmt.Sprint("q", i)); len(got) != 1 || !queueStatusEqual(got[0], qs(int32(i))) {
			t.Errorf("q%d: server has %v", i, got)
		}
	}
	if got := w.groupWrites("u1"); len(got) != 1 {
		t.Errorf("podgroup: server has %v", got)
	}
	if st := b.Stats(); st.Pending != 0 || st.Flushes != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestShutdownFlushIsBounded(t *testing.T) {
	w := newFakeWriter()
	w.hook = func(ctx context.Context, _, _ string) error {
		<-ctx.Done() // an API server that never answers
		return ctx.Err()
	}
	b := newTestBatcher(t, w, func(c *Config) { c.WriteTimeout = 50 * time.Millisecond })
	useFakeTicker(b)
	stop := startRun(t, b)
	b.SetQueue("q", qs(1))
	start := time.Now()
	err := stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the deadline of the final flush", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v with a 50ms WriteTimeout", d)
	}
	if st := b.Stats(); st.Pending != 1 || st.Errors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRunTwice(t *testing.T) {
	b := newTestBatcher(t, newFakeWriter(), nil)
	useFakeTicker(b)
	startRun(t, b)
	testenv.Eventually(t, 10*time.Second, b.running.Load, "Run has started")
	if err := b.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
}

func TestFlushStopsSendingWhenCancelled(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.Concurrency = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	w.hook = func(context.Context, string, string) error { cancel(); return nil }
	for i := range 5 {
		b.SetQueue(fmt.Sprint("q", i), qs(1))
	}
	err := b.Flush(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush: %v, want context.Canceled", err)
	}
	if st := b.Stats(); st.Writes != 1 || st.Errors != 0 || st.Pending != 4 {
		t.Fatalf("stats %+v, want 1 write and 4 values still pending", st)
	}
	w.hook = nil
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Writes != 5 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPodGroupKeyedByUID(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	old := api.JobStatus{Phase: api.JobRunning, Running: 3}
	recreated := api.JobStatus{Phase: api.JobPending}
	b.SetPodGroup("ns", "pg", "uid-1", old)
	b.SetPodGroup("ns", "pg", "uid-2", recreated)
	if st := b.Stats(); st.Pending != 2 || st.Coalesced != 0 {
		t.Fatalf("same name, two UIDs: %+v, want two entries", st)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[string]api.JobStatus{"uid-1": old, "uid-2": recreated} {
		got := w.groupWrites(uid)
		if len(got) != 1 || got[0].namespace != "ns" || got[0].name != "pg" || !jobStatusEqual(got[0].st, want) {
			t.Errorf("%s: server has %+v, want %+v", uid, got, want)
		}
	}
	// The old PodGroup is deleted: forgetting it leaves the new one alone.
	<-b.ForgetPodGroup("uid-1")
	b.SetPodGroup("ns", "pg", "uid-2", recreated)
	if st := b.Stats(); st.Objects != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestForget(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, nil)
	b.SetQueue("q", qs(1))
	select {
	case <-b.Forget("q"):
	default:
		t.Fatal("Forget with no write in flight returned an open channel")
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Writes != 0 || st.Pending != 0 || st.Objects != 0 {
		t.Fatalf("a forgotten queue was written: %+v", st)
	}

	// Forgotten during its write, which fails: the value is not kept, and
	// the channel closes when the write returns.
	var done <-chan struct{}
	w.hook = func(context.Context, string, string) error {
		done = b.Forget("q")
		select {
		case <-done:
			t.Error("Forget's channel closed while the write was in flight")
		default:
		}
		return errors.New("unavailable")
	}
	b.SetQueue("q", qs(2))
	_ = b.Flush(context.Background())
	<-done
	if st := b.Stats(); st.Pending != 0 || st.Objects != 0 {
		t.Fatalf("a queue forgotten during its write came back: %+v", st)
	}
	// Once forgotten, the last written value is forgotten too.
	w.hook = nil
	b.SetQueue("q", qs(2))
	if st := b.Stats(); st.Pending != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The equality and copy functions name every field of the api types; this
// fails when a field is added there, so that they are updated.
func TestStatusTypesFieldsAreCovered(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeFor[api.QueueStatus]():  4,
		reflect.TypeFor[api.JobStatus]():    5,
		reflect.TypeFor[api.JobCondition](): 5,
		reflect.TypeFor[api.Resource]():     3,
	} {
		if typ.NumField() != n {
			t.Errorf("%v has %d fields, equal.go knows %d: update queueStatusEqual/jobStatusEqual and the clones", typ, typ.NumField(), n)
		}
	}
}

// A PodGroup whose counts alone changed is written at most every
// CountsEvery (at a tick flush), while a change of phase goes out at the
// next flush; a held value does not ask for early flushes; Flush writes it.
func TestCountsOnlyChangeIsHeld(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.MaxPending = 2; c.CountsEvery = 5 * time.Second })
	var clock atomic.Int64 // seconds after t0
	t0 := time.Now()
	b.now = func() time.Time { return t0.Add(time.Duration(clock.Load()) * time.Second) }
	ticker := useFakeTicker(b)
	startRun(t, b)
	running := func(n int32) api.JobStatus { return api.JobStatus{Phase: api.JobRunning, Running: n} }
	writes := func() int { return len(w.groupWrites("u1")) }

	b.SetPodGroup("ns", "pg", "u1", running(1))
	ticker.tick(t, b)
	if writes() != 1 {
		t.Fatalf("%d writes of the first value, want 1", writes())
	}
	clock.Store(1)
	b.SetPodGroup("ns", "pg", "u1", running(2))
	ticker.tick(t, b)
	if st := b.Stats(); writes() != 1 || st.Held != 1 || st.Pending != 1 {
		t.Fatalf("a count change 1 s after the last write: %d writes, stats %+v; want it held", writes(), st)
	}
	// The held value with a newer count and another group's new value
	// reach MaxPending: the early flush writes the other group only, and
	// the held value no longer counts towards another.
	b.SetPodGroup("ns", "pg", "u1", running(3))
	b.SetPodGroup("ns", "pg2", "u2", api.JobStatus{Phase: api.JobInqueue})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.groupWrites("u2")) == 1 && !flushing(b) }, "the early flush is written")
	if writes() != 1 || len(b.kick) != 0 {
		t.Fatalf("after the early flush: %d writes of u1, kick %d; want u1 still held and no flush asked", writes(), len(b.kick))
	}
	// 5 s after the write, the next tick writes the latest count.
	clock.Store(5)
	ticker.tick(t, b)
	if g := w.groupWrites("u1"); len(g) != 2 || g[1].st.Running != 3 {
		t.Fatalf("u1 writes %v, want the count 3 written once 5 s passed", g)
	}
	// A change of phase is not held, however soon.
	clock.Store(6)
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Phase: api.JobCompleted, Succeeded: 3})
	ticker.tick(t, b)
	if g := w.groupWrites("u1"); len(g) != 3 || g[2].st.Phase != api.JobCompleted {
		t.Fatalf("u1 writes %v, want the phase change written at once", g)
	}
	// Flush writes a held value.
	b.SetPodGroup("ns", "pg", "u1", api.JobStatus{Phase: api.JobCompleted, Succeeded: 3, Failed: 1})
	ticker.tick(t, b)
	if writes() != 3 {
		t.Fatalf("%d writes, want the count change held", writes())
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g := w.groupWrites("u1"); len(g) != 4 || g[3].st.Failed != 1 {
		t.Fatalf("u1 writes %v, want Flush to write the held value", g)
	}
	if st := b.Stats(); st.Pending != 0 {
		t.Fatalf("stats %+v, want nothing pending", st)
	}
}

// A busy Queue's new status is written at most every QueueCountsEvery (at a
// tick flush); going idle or leaving idle goes out at the next flush.
func TestQueueHeldWhileBusy(t *testing.T) {
	w := newFakeWriter()
	b := newTestBatcher(t, w, func(c *Config) { c.QueueCountsEvery = 5 * time.Second })
	var clock atomic.Int64 // seconds after t0
	t0 := time.Now()
	b.now = func() time.Time { return t0.Add(time.Duration(clock.Load()) * time.Second) }
	ticker := useFakeTicker(b)
	startRun(t, b)
	busy := func(running int32) api.QueueStatus {
		return api.QueueStatus{Running: running, Allocated: api.Resource{MilliCPU: 1000 * int64(running)}}
	}
	last := func() (api.QueueStatus, int) {
		ws := w.queueWrites("q")
		if len(ws) == 0 {
			return api.QueueStatus{}, 0
		}
		return ws[len(ws)-1], len(ws)
	}

	b.SetQueue("q", busy(1)) // leaving idle (nothing written yet)
	ticker.tick(t, b)
	if _, n := last(); n != 1 {
		t.Fatalf("%d writes of the first value, want 1", n)
	}
	clock.Store(1)
	b.SetQueue("q", busy(2))
	ticker.tick(t, b)
	if _, n := last(); n != 1 || b.Stats().Held != 1 {
		t.Fatalf("a busy queue's change 1 s after its write: %d writes, stats %+v; want it held", n, b.Stats())
	}
	clock.Store(5)
	ticker.tick(t, b)
	if st, n := last(); n != 2 || st.Running != 2 {
		t.Fatalf("writes %v, want the held value written once 5 s passed", w.queueWrites("q"))
	}
	// Going idle is written at once, and so is leaving idle.
	clock.Store(6)
	b.SetQueue("q", api.QueueStatus{})
	ticker.tick(t, b)
	if st, n := last(); n != 3 || !queueIdle(st) {
		t.Fatalf("writes %v, want the idle status written at once", w.queueWrites("q"))
	}
	clock.Store(7)
	b.SetQueue("q", api.QueueStatus{Pending: 1})
	ticker.tick(t, b)
	if st, n := last(); n != 4 || st.Pending != 1 {
		t.Fatalf("writes %v, want a queue leaving idle written at once", w.queueWrites("q"))
	}
	// Flush writes a held value.
	clock.Store(8)
	b.SetQueue("q", api.QueueStatus{Pending: 2})
	ticker.tick(t, b)
	if _, n := last(); n != 4 {
		t.Fatalf("%d writes, want the busy queue's change held", n)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, n := last(); n != 5 || st.Pending != 2 {
		t.Fatalf("writes %v, want Flush to write the held value", w.queueWrites("q"))
	}
}
