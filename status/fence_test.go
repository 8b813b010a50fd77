package status

import (
	"context"
	"sync"
	"testing"
)

// fakeFence is the queue ownership of one shard.
type fakeFence struct {
	mu   sync.Mutex
	owns map[string]bool
}

func (f *fakeFence) set(q string, own bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owns[q] = own
}

func (f *fakeFence) Use(q string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owns[q]
}

func (f *fakeFence) Done(string) {}

// Case 7 of the quota-lifecycle issue: after a queue changes owner, the old
// owner's pending status write must not land after the new owner's.
func TestFencedQueueStatusHasOneWriterAcrossOwnerChange(t *testing.T) {
	server := newFakeWriter()
	fa := &fakeFence{owns: map[string]bool{"q": true}}
	fb := &fakeFence{owns: map[string]bool{}}
	a := newTestBatcher(t, FenceQueues(server, fa), nil)
	b := newTestBatcher(t, FenceQueues(server, fb), nil)
	ctx := context.Background()

	a.SetQueue("q", qs(1))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.SetQueue("q", qs(2)) // pending when the queue moves
	fa.set("q", false)
	fb.set("q", true)
	b.SetQueue("q", qs(3))
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatalf("a fenced write is not a failure: %v", err)
	}
	got := server.queueWrites("q")
	if last := got[len(got)-1]; !queueStatusEqual(last, qs(3)) {
		t.Fatalf("server ends with %v, want the new owner's %v (writes %v)", last, qs(3), got)
	}
	if len(got) != 2 {
		t.Fatalf("writes %v, want the old owner's first and the new owner's only", got)
	}
	if st := a.Stats(); st.Fenced != 1 || st.Pending != 0 || st.Errors != 0 {
		t.Fatalf("old owner's stats %+v: want 1 fenced, nothing pending or failed", st)
	}
	// Ownership comes back: the same value as before is written again,
	// since what the server has may be another shard's.
	fb.set("q", false)
	fa.set("q", true)
	a.SetQueue("q", qs(1))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got = server.queueWrites("q")
	if last := got[len(got)-1]; !queueStatusEqual(last, qs(1)) {
		t.Fatalf("after taking the queue back the server has %v, want %v", last, qs(1))
	}
}
