// Config: what a shard's scheduler is tuned by, its defaults and checks.

package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shardsched/shardsched/placement"
	"github.com/shardsched/shardsched/wire"
)

// Config tunes the scheduler. Use DefaultConfig.
type Config struct {
	SchedulerName string
	Partitions    int
	// NodePools is the node pool pattern of the ring (wire.PartitionIn),
	// set with Partitions by the assembly.
	NodePools     *regexp.Regexp
	Strategy      string // "binpack" or "spread"
	CycleInterval time.Duration
	BindWorkers   int
	BindBackoff   time.Duration
	CallTimeout   time.Duration
	Seed          uint64
	Logger        *slog.Logger
	// Tracer provides the cycle, admission, placement and bind spans; nil
	// means no tracing.
	Tracer trace.TracerProvider
	// Now is the clock for backoffs, event rate limits and latencies; nil
	// means time.Now. The simulated bench runs the scheduler on a virtual
	// clock through it.
	Now func() time.Time
	// AdmitParallelism bounds the coordinator calls in flight at once:
	// reservations of different queues (a queue's own jobs are reserved
	// one after another, in priority order), resizes, confirms and
	// releases. 0 means 256 (defaultCallParallelism).
	AdmitParallelism int
	// Hand-off of jobs that do not fit on this shard (see handoff.go);
	// zero values mean the defaults. OfferTimeout: an offer nobody claimed
	// is withdrawn after it (5 s). ClaimGiveUp: a claimed job that does not
	// fit for this long is given back (3 s). RefusedFor: a shard that
	// refused a job is not offered it again for this long (10 s).
	// CapacityInterval: the capacity summary is gossiped at most this often
	// (500 ms).
	OfferTimeout, ClaimGiveUp, RefusedFor, CapacityInterval time.Duration
	// Starvation guard (see hold.go): a gang that does not fit after
	// waiting StarveAfter (default 10 s) gets nodes held for it, for at
	// most MaxHold (default 5 min). HoldShare is the most of the shard's
	// nodes held at once for such gangs, 0..1 (0 means 0.1); the first
	// hold is allowed whatever its size.
	StarveAfter, MaxHold time.Duration
	HoldShare            float64
	// InqueueTimeout: a job admitted before its pods exist (sized by its
	// minResources) whose gang's pods have not all come after this long
	// gets its reservation back and returns to Pending with a condition
	// saying why; it is admitted again after a quarter of it. 0 means 3
	// minutes.
	InqueueTimeout time.Duration
}

// defaultCallParallelism is what the coordinator client sends at once
// with its defaults (two batches of 128 calls in flight): with fewer, a
// cycle that resizes or confirms many jobs (a burst) waits one round trip
// per 32 of them, each carrying a few calls, while the client could carry
// them all in one or two.
const defaultCallParallelism = 256

// DefaultCycleInterval is the default period of the scheduling cycle.
// Most of a cycle's cost is the same whether it places one new pod or
// twenty (the snapshot's refresh, each job's roles and tasks, setting up
// placement), so a shorter period spends more CPU per pod for a shorter
// wait: at 1,000 nodes with pods arriving at ~200/s, 100 ms against 20 ms
// cut the shard's CPU per pod to ~0.75× and its idle CPU to ~0.55×, and
// with the CPU left to the API server on a shared machine, lowered p50
// and p99 as well (docs/benchmarks.md, twenty-eighth session). The
// simulated bench steps its shards at the same 100 ms.
const DefaultCycleInterval = 100 * time.Millisecond

// DefaultConfig returns bin-packing, 100 ms cycles and 128 bind workers.
func DefaultConfig() Config {
	return Config{
		SchedulerName: "volcano",
		Partitions:    wire.DefaultPartitions,
		Strategy:      "binpack",
		CycleInterval: DefaultCycleInterval,
		BindWorkers:   128,
		BindBackoff:   time.Second,
		CallTimeout:   10 * time.Second,
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.SchedulerName == "":
		return errors.New("scheduler name is empty")
	case c.Partitions < 1:
		return fmt.Errorf("partitions %d: must be positive", c.Partitions)
	case c.CycleInterval <= 0 || c.BindBackoff <= 0 || c.CallTimeout <= 0:
		return errors.New("cycle interval, bind backoff and call timeout must be positive")
	case c.BindWorkers < 1 || c.BindWorkers > 1024:
		return fmt.Errorf("bind workers %d: must be between 1 and 1024", c.BindWorkers)
	case c.HoldShare < 0 || c.HoldShare > 1 || math.IsNaN(c.HoldShare):
		return fmt.Errorf("hold share %v: must be between 0 and 1", c.HoldShare)
	}
	_, err := placement.DefaultConfig(c.Strategy)
	return err
}
