package gcfloor

import (
	"context"
	"math"
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
		scan, floor uint64 // scan: the live heap, stacks and globals
		base, want  int
	}{
		{scan: 32 * mib, floor: 256 * mib, base: 100, want: 700},  // goal 32+224 MiB
		{scan: 30 * mib, floor: 256 * mib, base: 100, want: 754},  // rounded up: the goal is never below the floor
		{scan: 128 * mib, floor: 256 * mib, base: 100, want: 100}, // the floor is what base gives
		{scan: 120 * mib, floor: 256 * mib, base: 100, want: 114},
		{scan: 256 * mib, floor: 256 * mib, base: 100, want: 100},
		{scan: 1024 * mib, floor: 256 * mib, base: 100, want: 100},
		{scan: 32 * mib, floor: 256 * mib, base: 1000, want: 1000},        // base already above the floor's
		{scan: 1 * mib, floor: 256 * mib, base: 100, want: 6400},          // the runtime's minimum goal (4 MiB × 64) is the floor
		{scan: 100 * 1024, floor: 512 * mib, base: 100, want: MaxPercent}, // its minimum, 400 MiB, is within the floor
		{scan: 1 * mib, floor: 8 * mib, base: 100, want: 200},             // not 800: the minimum goal would be 32 MiB
		{scan: 1 * mib, floor: 2 * mib, base: 100, want: 100},             // a floor below 4 MiB: the base's minimum already
		{scan: 9 * mib / 2, floor: 10 * mib, base: 100, want: 123},        // below the bound of 250, not at it
		{scan: 0, floor: 256 * mib, base: 100, want: 100},                 // before the first collection: not known
		{scan: 3 * mib, floor: 64 << 30, base: 100, want: MaxPercent},
		{scan: 1<<64 - 1, floor: 1 << 36, base: 100, want: 100}, // no overflow
		{scan: 1<<57 + 1, floor: 1<<57 - 1, base: 100, want: 100},
		{scan: 1<<56 + 1, floor: 1<<62 - 1, base: 100, want: 6300},
		{scan: 32 * mib, floor: 0, base: 100, want: 100},       // no floor
		{scan: 32 * mib, floor: 256 * mib, base: -1, want: -1}, // GOGC=off stays off
		{scan: 1, floor: 1 << 62, base: 100, want: MaxPercent}, // no overflow
	} {
		if got := Percent(c.scan, c.floor, c.base); got != c.want {
			t.Errorf("Percent(scan %d, floor %d, base %d) = %d, want %d", c.scan, c.floor, c.base, got, c.want)
		}
	}
}

// fakeRuntime is what a Tuner reads as scanned and the percents it sets;
// each set is also signalled on setDone when it is not nil.
type fakeRuntime struct {
	mu      sync.Mutex
	heap    uint64
	sets    []int
	setDone chan struct{}
}

func (f *fakeRuntime) scan() uint64 {
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

// The percent follows what the collector scanned: up while it is small, back to the
// base once it passes the floor, and left alone when it moves by less
// than an eighth.
func TestTunerFollowsWhatTheCollectorScanned(t *testing.T) {
	f := &fakeRuntime{}
	tu := newTuner(256*mib, 100, f.scan, f.set)
	steps := []struct {
		heap uint64
		want int
	}{
		{32 * mib, 700},
		{33 * mib, 700}, // 676: within an eighth, kept
		{40 * mib, 540},
		{300 * mib, 100}, // past the floor: the base
		{310 * mib, 100},
		{64 * mib, 300},
		{120 * mib, 114},
		{130 * mib, 100}, // past half the floor: back to the base, though within an eighth of 114
	}
	for _, s := range steps {
		f.setHeap(s.heap)
		if got := tu.Step(); got != s.want {
			t.Errorf("scanned %d MiB: percent %d, want %d", s.heap/mib, got, s.want)
		}
	}
	if got, want := f.setCalls(), []int{700, 540, 100, 300, 114, 100}; !slices.Equal(got, want) {
		t.Errorf("set the percent %v, want %v (once per change)", got, want)
	}
}

// runFake runs a Tuner (floor 256 MiB, base 100) over a fake runtime
// whose scan starts at 32 MiB, with the given period, until stop; it
// returns once the first step has set the percent.
func runFake(every time.Duration) (f *fakeRuntime, stop func()) {
	f = &fakeRuntime{heap: 32 * mib, setDone: make(chan struct{}, 16)}
	tu := newTuner(256*mib, 100, f.scan, f.set)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tu.Run(ctx, every)
	}()
	<-f.setDone // the first step's
	return f, func() {
		cancel()
		<-done
	}
}

// Run steps until its context ends, then puts the base back.
func TestRunPutsTheBaseBack(t *testing.T) {
	f, stop := runFake(time.Millisecond)
	f.setHeap(64 * mib)
	<-f.setDone // a tick's, for the new heap
	stop()
	if got, want := f.setCalls(), []int{700, 300, 100}; !slices.Equal(got, want) {
		t.Errorf("set %v, want %v", got, want)
	}
}

// Run steps when a collection ends, not only every period: with a period
// of an hour, a collection is what brings the step for a new heap.
func TestRunStepsAfterACollection(t *testing.T) {
	f, stop := runFake(time.Hour)
	// Twice: the hook is armed again after each collection.
	for _, heap := range []uint64{64 * mib, 128 * mib} {
		f.setHeap(heap)
		stepped := false
		for i := 0; i < 50 && !stepped; i++ {
			runtime.GC()
			select {
			case <-f.setDone:
				stepped = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !stepped {
			stop()
			t.Fatalf("no step for a scan of %d MiB after 50 collections: Run steps only on its period", heap/mib)
		}
	}
	stop()
	if got, want := f.setCalls(), []int{700, 300, 100}; !slices.Equal(got, want) {
		t.Errorf("set %v, want %v", got, want)
	}
}

// Against the real runtime: a Tuner reads what the collector scanned once
// it has run, raises the percent for a small heap so that the runtime's
// own heap goal is the floor (less the stacks and globals, which count in
// the goal too), and Run leaves the program's percent as it found it.
func TestTunerOfTheRunningProgram(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	// A soft memory limit (GOMEMLIMIT) would lower the goals read below.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	// A live heap of its own, so that the runtime's minimum goal (4 MiB
	// times percent/100) stays below the floor.
	ballast := make([]byte, 8*mib)
	runtime.GC()
	live, stacks, globals := readUint64("/gc/heap/live:bytes"), readUint64("/gc/scan/stack:bytes"), readUint64("/gc/scan/globals:bytes")
	if live == 0 || scanned() != live+stacks+globals {
		t.Fatalf("scanned %d after a collection, want live %d + stacks %d + globals %d", scanned(), live, stacks, globals)
	}
	if globals == 0 {
		t.Fatal("no scannable globals read: the goal would be computed on the live heap alone")
	}
	const floor = 64 * mib
	tu := New(floor)
	if tu.base != 150 {
		t.Fatalf("base %d, want the percent in force (150)", tu.base)
	}
	p := tu.Step()
	if want := Percent(live+stacks+globals, floor, 150); p != want || p <= 150 {
		t.Fatalf("percent %d, want %d (above the base)", p, want)
	}
	if now := gcPercent(); now != p {
		t.Errorf("the runtime's percent is %d, want %d", now, p)
	}
	// The goal is the floor less the stacks and globals; the percent is
	// rounded up, so it may pass that by a hundredth of what was scanned,
	// no more.
	goal := readUint64("/gc/heap/goal:bytes")
	if lo := floor - stacks - globals; goal < lo || goal > lo+(live+stacks+globals)/100+1 {
		t.Errorf("heap goal %d, want the floor %d less stacks %d and globals %d (%d), up to a hundredth of the scan more", goal, uint64(floor), stacks, globals, lo)
	}
	runtime.KeepAlive(ballast)

	debug.SetGCPercent(150)
	// A heap of a few MiB, as at start-up: the percent is held to what
	// keeps the runtime's minimum goal (4 MiB × percent/100) within the
	// floor, where MaxPercent would make it 400 MiB.
	runtime.GC()
	live, scan := readUint64("/gc/heap/live:bytes"), scanned()
	p = tu.Step()
	if want := Percent(scan, floor, 150); p != want || p != floor*100/heapMinimum {
		t.Fatalf("percent %d for a scan of %d, want %d (floor×100/4MiB)", p, scan, want)
	}
	if goal := readUint64("/gc/heap/goal:bytes"); goal < floor || goal > live+floor+scan/100+1 {
		t.Errorf("heap goal %d with a live heap of %d, want the floor %d to live+floor", goal, live, uint64(floor))
	}

	debug.SetGCPercent(150)
	tu = New(1 << 40) // far above any heap of this test
	if got := tu.Step(); got != MaxPercent {
		t.Errorf("percent %d for a heap far below the floor, want %d", got, MaxPercent)
	}
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

// readUint64 is metric's value, 0 when the runtime does not report it.
func readUint64(name string) uint64 {
	v, _ := metric(name)
	return v
}
