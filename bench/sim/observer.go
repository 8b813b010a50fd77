package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shardsched/shardsched/bench/report"
)

// reserveWatch is the shards' scheduler.Observer in the simulator: it keeps
// the wall-clock latency of every reservation call a shard made to the
// coordinator (a shard's view of the coordinator under the run's load) and
// drops the other measurements. Safe for concurrent use.
type reserveWatch struct {
	mu  sync.Mutex
	lat []float64 // seconds
}

// maxReserveSamples bounds the samples kept (at 8 bytes each).
const maxReserveSamples = 4 << 20

func (w *reserveWatch) Reserve(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lat) < maxReserveSamples {
		w.lat = append(w.lat, d.Seconds())
	}
}

func (*reserveWatch) SubmitToBind(time.Duration)     {}
func (*reserveWatch) Resize(time.Duration)           {}
func (*reserveWatch) AdmissionWait(time.Duration)    {}
func (*reserveWatch) Place(time.Duration)            {}
func (*reserveWatch) BindWait(time.Duration)         {}
func (*reserveWatch) BindCall(time.Duration)         {}
func (*reserveWatch) Evicted(string)                 {}
func (*reserveWatch) Victims(int)                    {}
func (*reserveWatch) ReclaimToRunning(time.Duration) {}

// note says how many reservation calls the shards made and their latency
// percentiles, or "" when there was none.
func (w *reserveWatch) note() string {
	w.mu.Lock()
	lat := slices.Clone(w.lat)
	w.mu.Unlock()
	if len(lat) == 0 {
		return ""
	}
	slices.Sort(lat)
	return fmt.Sprintf("reservation calls seen from the shards (wall clock, coordinator and etcd under the run's load): %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(lat), report.Percentile(lat, 50)*1000, report.Percentile(lat, 99)*1000, report.Percentile(lat, 100)*1000)
}
