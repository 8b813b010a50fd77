// Package gcfloor keeps Go's garbage collector from running more often than
// once per floor bytes of heap growth while the live heap is small.
//
// At Go's default (GOGC=100) the collector runs each time the heap has
// grown by its live size. A shard of a small or medium cluster has a live
// heap of tens of MiB and allocates on every pod event, so it collects
// several times a second: in a real run at 1,000 nodes the collector (its
// mark workers, assists and sweeping) took about a tenth of the shard's
// CPU. A Tuner raises the GC percent so that the heap goal is at least the
// live heap plus the floor, which bounds the collector's work while adding
// about the floor at most to the heap; once the live heap is larger than
// the floor the percent is the base again (the goal twice the live heap at
// GOGC=100), so a shard of a large cluster keeps the memory it had. A soft
// memory limit (GOMEMLIMIT, which the StatefulSet sets from the
// container's limit) still caps the heap whatever the percent.
package gcfloor

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// MaxPercent bounds the percent a Tuner sets, so that a nearly empty heap
// (at start-up) does not ask for an unbounded one.
const MaxPercent = 10000

// Percent is the GC percent that makes the heap goal the larger of what
// base gives and live+floor: max(base, ⌈floor×100/live⌉), at most
// MaxPercent (and at least base). A negative base (the collector off), a
// zero floor or a live heap not known yet (0: no collection has run) leave
// base as it is.
func Percent(live, floor uint64, base int) int {
	switch {
	case base < 0 || floor == 0 || live == 0:
		return base
	case floor/live >= MaxPercent/100:
		return max(base, MaxPercent)
	case live > math.MaxUint64/128:
		return base // a live heap this size is far above any floor
	}
	// floor < 100·live here; the remainder's part cannot overflow.
	p := floor/live*100 + (floor%live*100+live-1)/live
	return max(base, int(min(p, MaxPercent)))
}

// Tuner sets the GC percent from the live heap that the last collection
// marked, read every period of Run. Step and Run are for one goroutine.
type Tuner struct {
	floor uint64
	base  int
	live  func() uint64 // the live heap marked by the last collection
	set   func(int) int // sets the GC percent, returns the one before
	cur   int           // the percent last set
}

// New returns a Tuner of the running program with the given floor in
// bytes; its base is the GC percent in force now (GOGC's, or 100).
func New(floor uint64) *Tuner {
	return newTuner(floor, gcPercent(), liveHeap, debug.SetGCPercent)
}

func newTuner(floor uint64, base int, live func() uint64, set func(int) int) *Tuner {
	return &Tuner{floor: floor, base: base, live: live, set: set, cur: base}
}

// Step reads the live heap and sets the percent Percent gives for it,
// unless it is within an eighth of the one in force (a heap that moves a
// little does not reset the collector's goal every time, so the goal may
// be up to an eighth off live+floor; going back to the base is always
// done); it returns the percent in force after the step.
func (t *Tuner) Step() int {
	p := Percent(t.live(), t.floor, t.base)
	if p != t.cur && (p == t.base || abs(p-t.cur) > abs(t.cur)/8) {
		t.set(p)
		t.cur = p
	}
	return t.cur
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Run steps every period until ctx ends, then sets the base percent back.
func (t *Tuner) Run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	t.Step()
	for {
		select {
		case <-ctx.Done():
			if t.cur != t.base {
				t.set(t.base)
				t.cur = t.base
			}
			return
		case <-tick.C:
			t.Step()
		}
	}
}

// liveHeap is the heap the last collection marked live (0 before the
// first one, or if the runtime does not report it).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// gcPercent is the GC percent in force (GOGC's, -1 for off), read without
// setting it; 100, Go's default, if the runtime does not report it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1 // not a percent: off
	}
	return int(v)
}
