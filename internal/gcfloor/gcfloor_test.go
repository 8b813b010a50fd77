package gcfloor

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		base, want  int
	}{
		{live: 32 * mib, floor: 256 * mib, base: 100, want: 800},  // goal 32+256 MiB
		{live: 30 * mib, floor: 256 * mib, base: 100, want: 854},  // rounded up: the goal is never below live+floor
		{live: 256 * mib, floor: 256 * mib, base: 100, want: 100}, // the floor is what base gives
		{live: 1024 * mib, floor: 256 * mib, base: 100, want: 100},
		{live: 32 * mib, floor: 256 * mib, base: 1000, want: 1000}, // base already above the floor's
		{live: 1 * mib, floor: 256 * mib, base: 100, want: MaxPercent},
		{live: 0, floor: 256 * mib, base: 100, want: 100}, // before the first collection: not known
		{live: 3 * mib, floor: 64 << 30, base: 100, want: MaxPercent},
		{live: 1<<64 - 1, floor: 1 << 36, base: 100, want: 100}, // no overflow
		{live: 1<<57 + 1, floor: 1<<57 - 1, base: 100, want: 100},
		{live: 1<<56 + 1, floor: 1<<62 - 1, base: 100, want: 6400},
		{live: 32 * mib, floor: 0, base: 100, want: 100},       // no floor
		{live: 32 * mib, floor: 256 * mib, base: -1, want: -1}, // GOGC=off stays off
		{live: 1, floor: 1 << 62, base: 100, want: MaxPercent}, // no overflow
	} {
		if got := Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("Percent(live %d, floor %d, base %d) = %d, want %d", c.live, c.floor, c.base, got, c.want)
		}
	}
}

// fakeRuntime is the live heap a Tuner reads and the percents it sets;
// each set is also signalled on setDone when it is not nil.
type fakeRuntime struct {
	mu      sync.Mutex
	heap    uint64
	sets    []int
	setDone chan struct{}
}

func (f *fakeRuntime) live() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heap
}

func (f *fakeRuntime) setHeap(h uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heap = h
}

func (f *fakeRuntime) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, p)
	if f.setDone != nil {
		f.setDone <- struct{}{}
	}
	return 0
}

func (f *fakeRuntime) setCalls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sets...)
}

// The percent follows the live heap: up while it is small, back to the
// base once it passes the floor, and left alone when it moves by less
// than an eighth.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	f := &fakeRuntime{}
	tu := newTuner(256*mib, 100, f.live, f.set)
	steps := []struct {
		heap uint64
		want int
	}{
		{32 * mib, 800},
		{33 * mib, 800}, // 776: within an eighth, kept
		{40 * mib, 640},
		{300 * mib, 100}, // past the floor: the base
		{310 * mib, 100},
		{64 * mib, 400},
		{233 * mib, 110},
		{300 * mib, 100}, // back to the base, though within an eighth of 110
	}
	for _, s := range steps {
		f.setHeap(s.heap)
		if got := tu.Step(); got != s.want {
			t.Errorf("live %d MiB: percent %d, want %d", s.heap/mib, got, s.want)
		}
	}
	if got, want := f.setCalls(), []int{800, 640, 100, 400, 110, 100}; !slices.Equal(got, want) {
		t.Errorf("set the percent %v, want %v (once per change)", got, want)
	}
}

// Run steps until its context ends, then puts the base back.
func TestRunPutsTheBaseBack(t *testing.T) {
	f := &fakeRuntime{heap: 32 * mib, setDone: make(chan struct{}, 16)}
	tu := newTuner(256*mib, 100, f.live, f.set)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tu.Run(ctx, time.Millisecond)
	}()
	<-f.setDone // the first step's
	f.setHeap(64 * mib)
	<-f.setDone // a tick's, for the new heap
	cancel()
	<-done
	if got, want := f.setCalls(), []int{800, 400, 100}; !slices.Equal(got, want) {
		t.Errorf("set %v, want %v", got, want)
	}
}

// Against the real runtime: a Tuner reads a live heap once the collector
// has run, raises the percent for a small heap, and Run leaves the
// program's percent as it found it.
func TestTunerOfTheRunningProgram(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	runtime.GC()
	if liveHeap() == 0 {
		t.Fatal("no live heap read after a collection")
	}
	tu := New(1 << 40) // far above this test's heap
	if tu.base != 150 {
		t.Fatalf("base %d, want the percent in force (150)", tu.base)
	}
	if got := tu.Step(); got != MaxPercent {
		t.Errorf("percent %d for a heap far below the floor, want %d", got, MaxPercent)
	}
	if now := gcPercent(); now != MaxPercent {
		t.Errorf("the runtime's percent is %d, want %d", now, MaxPercent)
	}
	debug.SetGCPercent(MaxPercent)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tu.Run(ctx, time.Hour)
	if now := debug.SetGCPercent(150); now != 150 {
		t.Errorf("after Run the runtime's percent is %d, want the base 150", now)
	}
	debug.SetGCPercent(-1)
	if p := gcPercent(); p != -1 {
		t.Errorf("with the collector off the percent reads %d, want -1", p)
	}
}
