package report

import "math"

// CDFPoints is the largest number of latencies a Run keeps in LatencyCDF.
const CDFPoints = 1000

// Percentile returns the nearest-rank p-th percentile of sorted, which
// must be in ascending order: the smallest value such that at least p % of
// the values are less than or equal to it. p is clamped to [0, 100]; p = 0
// gives the minimum and p = 100 the maximum. An empty slice, or a NaN p,
// gives 0.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return 0
	}
	p = math.Max(0, math.Min(100, p))
	// p*n/100 rather than p/100*n: exact for whole percentiles.
	rank := int(math.Ceil(p * float64(n) / 100))
	rank = max(1, min(n, rank))
	return sorted[rank-1]
}

// CDFSample returns at most n values of sorted, evenly spaced by rank over
// the whole slice, for plotting a CDF. The first and the last values are
// always included when n ≥ 2; n = 1 gives only the last (the maximum); n ≤
// 0 or an empty input gives nil. When sorted has no more than n values, the
// result is a copy of it. The result never aliases sorted.
func CDFSample(sorted []float64, n int) []float64 {
	l := len(sorted)
	switch {
	case l == 0 || n <= 0:
		return nil
	case l <= n:
		return append([]float64(nil), sorted...)
	case n == 1:
		return []float64{sorted[l-1]}
	}
	out := make([]float64, n)
	step := float64(l-1) / float64(n-1) // > 1 because l > n
	for i := range out {
		idx := int(math.Round(float64(i) * step))
		out[i] = sorted[min(idx, l-1)]
	}
	return out
}

// maxRecorderBuckets bounds the memory of a Recorder: an event time far
// beyond any bench run (a unit mistake, a corrupt clock) is dropped rather
// than allocating a slice of that length.
const maxRecorderBuckets = 1 << 20

// Recorder turns event counts into a rate time series: it sums the counts
// into consecutive buckets of a fixed width and reports each bucket as
// events per second. Bucket i covers [i·width, (i+1)·width) seconds since
// the run started.
//
// A Recorder is not safe for concurrent use; callers that add from several
// goroutines hold their own lock. The zero value is not usable; call
// NewRate.
type Recorder struct {
	width   float64
	counts  []int64
	dropped int64
}

// NewRate returns a Recorder with buckets of width seconds. A width that
// is not a positive finite number is replaced by one second (see Width).
func NewRate(width float64) *Recorder {
	if !(width > 0) || math.IsInf(width, 0) {
		width = 1
	}
	return &Recorder{width: width}
}

// Width returns the bucket width in seconds.
func (r *Recorder) Width() float64 { return r.width }

// Add records n events at t seconds since the run started. A negative t
// (a clock read just before the start) counts in the first bucket. n = 0
// records nothing but extends the series to t, so that Points covers the
// whole run, idle end included. A negative n is ignored. Events whose time
// is NaN, infinite or so late that the series would exceed 2^20 buckets
// are not recorded and are counted by Dropped.
func (r *Recorder) Add(t float64, n int) {
	if n < 0 {
		return
	}
	if math.IsNaN(t) || math.IsInf(t, 0) {
		r.dropped += int64(n)
		return
	}
	b := math.Floor(math.Max(0, t) / r.width)
	if b >= maxRecorderBuckets {
		r.dropped += int64(n)
		return
	}
	i := int(b)
	if i >= len(r.counts) {
		r.counts = append(r.counts, make([]int64, i+1-len(r.counts))...)
	}
	r.counts[i] += int64(n)
}

// Dropped returns the number of events Add could not place in time.
func (r *Recorder) Dropped() int64 { return r.dropped }

// Points returns one point per bucket from the run start to the last
// bucket that was added to, empty buckets included as 0: T is the start
// of the bucket in seconds and V the events per second in it. It returns
// nil when nothing was added.
func (r *Recorder) Points() []Point {
	if len(r.counts) == 0 {
		return nil
	}
	out := make([]Point, len(r.counts))
	for i, c := range r.counts {
		out[i] = Point{T: float64(i) * r.width, V: float64(c) / r.width}
	}
	return out
}
