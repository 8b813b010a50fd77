package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// slowBinder is a Binder whose every call takes callTime on the rig's
// clock.
type slowBinder struct {
	inner    Binder
	advance  func(time.Duration)
	callTime time.Duration
}

func (b slowBinder) Bind(ctx context.Context, t *api.Task, node string) error {
	b.advance(b.callTime)
	return b.inner.Bind(ctx, t, node)
}

// recObserver records the bind measurements.
type recObserver struct {
	noObserver
	mu          sync.Mutex
	waits, call []time.Duration
}

func (o *recObserver) BindWait(d time.Duration) {
	o.mu.Lock()
	o.waits = append(o.waits, d)
	o.mu.Unlock()
}
func (o *recObserver) BindCall(d time.Duration) {
	o.mu.Lock()
	o.call = append(o.call, d)
	o.mu.Unlock()
}

// Every bind is measured twice: its wait for a worker, once, and each of
// its calls, retries of an unknown outcome included, for as long as the
// call took.
func TestBindWaitAndCallObserved(t *testing.T) {
	r := newRig(t, "shard-o")
	r.stop()
	obs := &recObserver{}
	cfg := DefaultConfig()
	cfg.Now, cfg.BindBackoff = r.clock, 10*time.Millisecond
	s, err := New(cfg, Deps{Cache: r.c, Ownership: r.own, Quota: r.quota, Binder: slowBinder{r.binder, r.advance, 50 * time.Millisecond}, Recorder: nopRecorder{},
		Status: nopStatus{}, Peers: r.peers, Claims: r.claims, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	r.start(t)
	r.binder.mu.Lock()
	r.binder.unknown = 1 // one call answered with an unknown outcome, then tried again
	r.binder.mu.Unlock()
	r.node("n1", 32)
	r.gang("job", 3, 2)
	r.cycles(t, 1)
	if b := r.binder.Binds(); len(b) != 3 {
		t.Fatalf("bound %d of 3 tasks", len(b))
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.waits) != 3 {
		t.Errorf("%d bind waits observed, want 3 (one per pod, not per retry)", len(obs.waits))
	}
	if len(obs.call) != 4 {
		t.Errorf("%d bind calls observed, want 4 (three pods, one retried)", len(obs.call))
	}
	for _, d := range obs.call {
		if d < 50*time.Millisecond {
			t.Errorf("a bind call measured %v, the binder took 50ms on the clock", d)
		}
	}
}
