package status

import (
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"time"
)

// Config configures a Batcher. Start from DefaultConfig.
type Config struct {
	// Interval is the period of regular flushes; a failed write is retried
	// no sooner than the next one. Default 1s.
	Interval time.Duration
	// MaxPending flushes early when this many objects have a new value
	// waiting (values of failed writes waiting for their retry do not
	// count). Default 1000.
	MaxPending int
	// WriteTimeout bounds each write, and the final flush when Run stops.
	// Default 10s.
	WriteTimeout time.Duration
	// Concurrency is the number of writes in flight at once during a flush.
	// Default 8.
	Concurrency int
	// CountsEvery is the least time between two writes of a PodGroup whose
	// new status differs from the last written only in its counts
	// (running, succeeded, failed): such a value waits for the first tick
	// flush this long after that write, while a change of phase or
	// conditions goes out at the next flush as before. A gang binding pod
	// by pod otherwise cost a PodGroup PATCH every Interval (0.25 per pod
	// at 1,000 nodes, ~0.3 ms of kube-apiserver CPU per pod). Flush and
	// Run's final flush write held values too. 0 holds nothing. Default 5s.
	CountsEvery time.Duration
	// QueueCountsEvery is the same for a Queue: a new status of a queue
	// that was busy when last written and is still busy (some job pending,
	// in queue or running, or something allocated) waits this long after
	// that write; a queue going idle or leaving idle is written at the next
	// flush. A queue in a stream of pods otherwise cost a write every
	// Interval, each 2.4-3.8 ms of kube-apiserver CPU (BenchmarkQueueStatusWrite
	// in internal/kube). 0 holds nothing. Default 5s.
	QueueCountsEvery time.Duration
	// Tracer provides a span per flush; nil means no tracing.
	Tracer trace.TracerProvider
}

// Defaults of DefaultConfig.
const (
	DefaultInterval     = time.Second
	DefaultMaxPending   = 1000
	DefaultWriteTimeout = 10 * time.Second
	DefaultConcurrency  = 8
	DefaultCountsEvery  = 5 * time.Second
	// DefaultQueueCountsEvery is Config.QueueCountsEvery's default.
	DefaultQueueCountsEvery = 5 * time.Second
)

// maxConcurrency bounds Concurrency: more parallel writes than this from one
// shard would only queue up in the client's rate limiter.
const maxConcurrency = 1024

// DefaultConfig returns production defaults: flush every second or at 1,000
// pending objects, 8 writes in parallel, 10 s per write, a PodGroup's
// changed counts alone at most every 5 s.
func DefaultConfig() Config {
	return Config{
		Interval:     DefaultInterval,
		MaxPending:   DefaultMaxPending,
		WriteTimeout: DefaultWriteTimeout,
		Concurrency:  DefaultConcurrency,
		CountsEvery:  DefaultCountsEvery,

		QueueCountsEvery: DefaultQueueCountsEvery,
	}
}

// Validate reports the first bad field, naming it.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("status Interval %v: must be positive", c.Interval)
	case c.MaxPending < 1:
		return fmt.Errorf("status MaxPending %d: must be at least 1", c.MaxPending)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("status WriteTimeout %v: must be positive", c.WriteTimeout)
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return fmt.Errorf("status Concurrency %d: must be between 1 and %d", c.Concurrency, maxConcurrency)
	case c.CountsEvery < 0:
		return fmt.Errorf("status CountsEvery %v: must not be negative", c.CountsEvery)
	case c.QueueCountsEvery < 0:
		return fmt.Errorf("status QueueCountsEvery %v: must not be negative", c.QueueCountsEvery)
	}
	return nil
}
