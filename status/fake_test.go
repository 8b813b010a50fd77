package status

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

// fakeWriter is an in-memory Writer. It records every call, the server's
// state per object, and whether two writes of one object ever overlapped.
type fakeWriter struct {
	// delay is slept in every write, to widen the window in which Set
	// races with a write in flight. Set before use.
	delay time.Duration
	// hook, if set, runs in every write outside the lock (it may call the
	// Batcher) and returns the write's error; a failed write changes
	// nothing on the server. Set before use.
	hook func(ctx context.Context, kind, key string) error

	mu       sync.Mutex // guards the fields below
	calls    int
	queues   map[string][]api.QueueStatus // successful writes, in order
	groups   map[string][]groupWrite      // by UID
	inflight map[string]bool              // kind/key of writes in progress
	overlaps int                          // writes that started while one of the same object ran
}

type groupWrite struct {
	namespace, name string
	st              api.JobStatus
}

var _ Writer = (*fakeWriter)(nil)

func newFakeWriter() *fakeWriter {
	return &fakeWriter{
		queues:   map[string][]api.QueueStatus{},
		groups:   map[string][]groupWrite{},
		inflight: map[string]bool{},
	}
}

func (f *fakeWriter) begin(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.inflight[id] {
		f.overlaps++
	}
	f.inflight[id] = true
}

func (f *fakeWriter) run(ctx context.Context, kind, key string) error {
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if f.hook != nil {
		return f.hook(ctx, kind, key)
	}
	return nil
}

func (f *fakeWriter) WriteQueueStatus(ctx context.Context, queue string, st api.QueueStatus) error {
	id := "queue/" + queue
	f.begin(id)
	err := f.run(ctx, "queue", queue)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	if err == nil {
		f.queues[queue] = append(f.queues[queue], st)
	}
	return err
}

func (f *fakeWriter) WritePodGroupStatus(ctx context.Context, namespace, name, uid string, st api.JobStatus) error {
	id := "podgroup/" + uid
	f.begin(id)
	err := f.run(ctx, "podgroup", uid)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	if err == nil {
		f.groups[uid] = append(f.groups[uid], groupWrite{namespace, name, st})
	}
	return err
}

func (f *fakeWriter) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// queueWrites returns a copy of the successful writes of one queue.
func (f *fakeWriter) queueWrites(q string) []api.QueueStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.QueueStatus(nil), f.queues[q]...)
}

func (f *fakeWriter) groupWrites(uid string) []groupWrite {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]groupWrite(nil), f.groups[uid]...)
}

// fakeTicker is a ticker the test drives by hand.
type fakeTicker struct{ c chan time.Time }

func useFakeTicker(b *Batcher) *fakeTicker {
	t := &fakeTicker{c: make(chan time.Time)}
	b.newTicker = func(time.Duration) (<-chan time.Time, func()) { return t.c, func() {} }
	return t
}

// tick delivers one tick and returns once Run has finished the flush it
// caused.
func (t *fakeTicker) tick(tb testing.TB, b *Batcher) {
	tb.Helper()
	before := b.Stats().Flushes
	t.c <- time.Now()
	testenv.Eventually(tb, 10*time.Second, func() bool { return b.Stats().Flushes > before && !flushing(b) }, "the tick's flush has finished")
}

// flushing reports whether a flush holds flushMu.
func flushing(b *Batcher) bool {
	if b.flushMu.TryLock() {
		b.flushMu.Unlock()
		return false
	}
	return true
}

// startRun runs b.Run in a goroutine; the returned function cancels it and
// returns Run's error.
func startRun(tb testing.TB, b *Batcher) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

func qs(n int32) api.QueueStatus {
	return api.QueueStatus{Running: n, Allocated: api.NewResource(int64(n)*1000, 0, nil)}
}

func newTestBatcher(tb testing.TB, w Writer, mod func(*Config)) *Batcher {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Interval = time.Hour // tests flush by hand or tick a fake ticker
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(w, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestMain fails the package when a test leaves a goroutine running (a Run
// that did not return, a stuck flush worker).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
