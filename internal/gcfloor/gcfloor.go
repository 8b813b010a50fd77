// Package gcfloor keeps Go's garbage collector from running before the
// heap has reached a floor while the live heap is small.
//
// At Go's default (GOGC=100) the collector runs each time the heap has
// grown by its live size. A shard of a small or medium cluster has a live
// heap of tens of MiB and allocates on every pod event, so it collects
// several times a second: in a real run at 1,000 nodes the collector (its
// mark workers, assists and sweeping) took about a tenth of the shard's
// CPU. A Tuner raises the GC percent so that the heap goal is at least the
// floor: the collector then runs once per floor-minus-live of allocation,
// and the heap does not grow past the floor on its account. Once the live
// heap is half the floor, Go's own goal (twice the live heap at GOGC=100)
// is the larger and the percent is the base again: a shard of a large
// cluster keeps the memory Go's pacing gives it. (The floor was first a
// headroom, the goal at least live+floor: the same for a small heap, but
// at 1M cores, a live heap of ~200 MB, it held ~75 MiB more than Go's
// pacing for a fifth fewer collections.) A soft memory limit (GOMEMLIMIT,
// which the StatefulSet sets to the container's limit less a tenth) still
// caps the heap whatever the percent.
package gcfloor

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// MaxPercent bounds the percent a Tuner sets, so that a nearly empty heap
// (at start-up) does not ask for an unbounded one.
const MaxPercent = 10000

// heapMinimum is the runtime's smallest heap goal at GOGC=100 (4 MiB, its
// defaultHeapMinimum); the runtime scales it with the percent, so that at
// GOGC=10000 no goal is below 400 MiB.
const heapMinimum = 4 << 20

// Percent is the GC percent that makes the heap goal the larger of what
// base gives and the floor. Go's goal is the live heap plus percent/100 of
// what the last collection scanned: the live heap, the goroutine stacks and
// the globals (scan here), and never less than 4 MiB × percent/100. So the
// percent is ⌈(floor−scan)×100/scan⌉ (the goal the floor less the stacks
// and globals scanned, a MiB or two, which the live heap alone is not
// told apart from here), at most floor×100/4MiB (the minimum goal then
// stays within the floor) and MaxPercent, and at least base. Without that
// second bound a shard at 1,000 nodes grew its heap to 400 MiB while
// starting (a few MiB live: the percent at MaxPercent, so the minimum goal
// was 400 MiB) where the floor was 256 MiB. A negative base (the collector
// off), a zero floor or a scan not known yet (0: no collection has run)
// leave base as it is.
func Percent(scan, floor uint64, base int) int {
	switch {
	case base < 0 || floor == 0 || scan == 0:
		return base
	case scan >= floor:
		return base // Go's goal is above the floor at any percent
	case scan > math.MaxUint64/128:
		return base // a heap this size is far above any floor
	}
	top := uint64(MaxPercent)
	if floor/heapMinimum < MaxPercent/100 {
		top = floor * 100 / heapMinimum // floor < 400 MiB: no overflow
	}
	room := floor - scan
	if room/scan >= MaxPercent/100 {
		return max(base, int(top))
	}
	// room < 100·scan here; the remainder's part cannot overflow.
	p := room/scan*100 + (room%scan*100+scan-1)/scan
	return max(base, int(min(p, top)))
}

// Tuner sets the GC percent from what the last collection scanned (see
// Percent), read every period of Run. Step and Run are for one goroutine.
type Tuner struct {
	floor uint64
	base  int
	scan  func() uint64 // what the last collection scanned, 0 before one ran
	set   func(int) int // sets the GC percent, returns the one before
	cur   int           // the percent last set
}

// New returns a Tuner of the running program with the given floor in
// bytes; its base is the GC percent in force now (GOGC's, or 100).
func New(floor uint64) *Tuner {
	return newTuner(floor, gcPercent(), scanned, debug.SetGCPercent)
}

func newTuner(floor uint64, base int, scan func() uint64, set func(int) int) *Tuner {
	return &Tuner{floor: floor, base: base, scan: scan, set: set, cur: base}
}

// Step reads what the last collection scanned and sets the percent that
// Percent gives for it, unless it is within an eighth of the one in force
// (a heap that moves a little does not reset the collector's goal every
// time, so the goal may be up to an eighth off the floor; going back to
// the base is always done); it returns the percent in force after the
// step.
func (t *Tuner) Step() int {
	p := Percent(t.scan(), t.floor, t.base)
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

// Run steps after every collection and every period until ctx ends, then
// sets the base percent back. The runtime computes the next goal when a
// collection ends, with the percent in force then, which was set for the
// scan of the collection before: while the heap grows fast (a shard
// filling its informers) that percent is far too high for the new scan,
// and a shard starting at 1M cores was seen with a goal of 1.8 GB for a
// live heap of ~27 MB until the next period's step. Stepping as each
// collection ends makes that window the time its cleanup takes to run,
// not a period.
func (t *Tuner) Run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	gcs := make(chan struct{}, 1)
	afterNextGC(gcs)
	t.Step()
	for {
		select {
		case <-ctx.Done():
			if t.cur != t.base {
				t.set(t.base)
				t.cur = t.base
			}
			return
		case <-gcs:
			afterNextGC(gcs)
			t.Step()
		case <-tick.C:
			t.Step()
		}
	}
}

// sentinel is an object nothing keeps: a following collection (the next
// one, or the one after if it was made while one was marking) finds it
// unreachable, and its cleanup runs once its span is swept. It holds a
// pointer so that it is not made by the tiny allocator, whose blocks are
// freed together.
type sentinel struct{ _ *byte }

// afterNextGC sends on gcs, without blocking, once a collection has run:
// the cleanup of a new sentinel. A send after Run has returned goes to a
// buffer nobody reads.
func afterNextGC(gcs chan<- struct{}) {
	runtime.AddCleanup(&sentinel{}, func(gcs chan<- struct{}) {
		select {
		case gcs <- struct{}{}:
		default:
		}
	}, gcs)
}

// scanned is what Go's heap goal takes the percent of (the pacer's
// heapMarked + lastStackScan + globalsScan): the heap the last collection
// marked live, the stack bytes it scanned and the scannable globals. 0
// before the first collection, or if the runtime does not report them.
func scanned() uint64 {
	v, ok := metricsOf("/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes")
	if !ok || v[0] == 0 { // live 0: no collection yet, the globals alone say nothing
		return 0
	}
	return v[0] + v[1] + v[2]
}

// gcPercent is the GC percent in force (GOGC's, -1 for off), read without
// setting it; 100, Go's default, if the runtime does not report it.
func gcPercent() int {
	v, ok := metric("/gc/gogc:percent")
	switch {
	case !ok:
		return 100
	case v > math.MaxInt32:
		return -1 // not a percent: off
	}
	return int(v)
}

// metric reads one of the runtime's uint64 metrics; false if the runtime
// does not report it.
func metric(name string) (uint64, bool) {
	v, ok := metricsOf(name)
	return v[0], ok
}

// metricsOf reads the runtime's uint64 metrics named, in one read (the
// values of one moment); false if the runtime does not report one of them.
func metricsOf(names ...string) ([]uint64, bool) {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	v := make([]uint64, len(names))
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return v, false
		}
		v[i] = s[i].Value.Uint64()
	}
	return v, true
}
