package status

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsched/shardsched/api"
)

// ErrRunning is returned by Run when the Batcher is already running.
var ErrRunning = errors.New("status batcher is already running")

// errAborted marks a write that was collected but not sent because the
// flush's context ended first; the value goes back to pending, uncounted.
var errAborted = errors.New("status write not sent")

// Stats are the Batcher's counters. Without Forget, every value given to a
// Set call ends up in exactly one of: written (Writes − Errors), Coalesced,
// or Pending, once no write is in flight.
type Stats struct {
	// Pending is the number of objects with a value waiting to be written.
	Pending int
	// MaxPending is the high-water mark of Pending.
	MaxPending int
	// Objects is the number of objects tracked: pending, being written, or
	// remembered with their last written value until forgotten.
	Objects int
	// Writes counts Writer calls, failed ones included.
	Writes uint64
	// Errors counts failed Writer calls, conflicts included.
	Errors uint64
	// Conflicts counts failed Writer calls whose error wraps ErrConflict.
	// With one writer per object it stays 0.
	Conflicts uint64
	// Coalesced counts values that are never written: replaced by a newer
	// value before their write (or after their write failed), or equal to
	// the value already written or being written.
	Coalesced uint64
	// Flushes counts flush passes, empty ones included.
	Flushes uint64
	// Fenced counts values dropped because the Writer said this shard no
	// longer owns the object (ErrNotOwner): they are neither written nor
	// retried, and the object's last written value is forgotten, so that
	// the shard writes it again if it becomes the owner once more.
	Fenced uint64
	// Held counts the times a flush left a value pending: a PodGroup's
	// whose counts alone changed within Config.CountsEvery of its last
	// write, or a busy Queue's within Config.QueueCountsEvery.
	Held uint64
}

// Batcher coalesces Queue and PodGroup status per object and writes it in
// batches. Set, Forget and Stats may be called concurrently from any
// goroutine and never block on I/O; Run and Flush do the writes. See the
// package documentation.
type Batcher struct {
	w   Writer
	cfg Config
	// kick (capacity 1) asks Run for an early flush.
	kick chan struct{}
	// closed is a closed channel, returned by Forget when no write is in flight.
	closed chan struct{}
	// newTicker makes Run's interval ticker; tests replace it before Run.
	newTicker func(time.Duration) (<-chan time.Time, func())
	// now is the clock of CountsEvery; tests replace it before use.
	now     func() time.Time
	running atomic.Bool

	// flushMu serializes flushes, so that no object is written twice at
	// once. Lock order: flushMu, then mu.
	flushMu sync.Mutex

	// mu guards everything below. It is never held across a Writer call.
	mu     sync.Mutex
	queues table[api.QueueStatus] // by queue name
	groups table[api.JobStatus]   // by PodGroup UID
	ready  int                    // pending slots an early flush takes (not retries, not held)
	stats  Stats                  // Pending and Objects are computed by Stats()
}

// slot is the state of one object. All fields are guarded by Batcher.mu.
type slot[V any] struct {
	namespace, name string // PodGroups only: the latest given for the UID

	want    V    // the latest value not yet handed to a write
	pending bool // want is set, and the slot is in table.pending
	retry   bool // want is a failed write's value, or a held one (table.held): only a tick flush takes it

	sending  V             // the value being written
	inflight bool          //
	done     chan struct{} // closed when the write of sending has returned

	written    V         // the last value written successfully
	hasWritten bool      //
	writtenAt  time.Time // when that write returned (Batcher.now)
}

// table holds the slots of one kind of object. Guarded by Batcher.mu.
type table[V any] struct {
	all     map[string]*slot[V]
	pending map[string]*slot[V] // the slots with pending set
	equal   func(a, b V) bool
	clone   func(V) V
	// minor, when set, tells a new value that may wait holdFor after the
	// last write (Config.CountsEvery, QueueCountsEvery) from one that may
	// not.
	minor   func(want, written V) bool
	holdFor time.Duration
}

func newTable[V any](equal func(a, b V) bool, clone func(V) V) table[V] {
	return table[V]{
		all:     map[string]*slot[V]{},
		pending: map[string]*slot[V]{},
		equal:   equal,
		clone:   clone,
	}
}

// held reports whether the pending value of s waits (a minor change
// within holdFor of the last write). Called with b.mu held.
func (t *table[V]) held(s *slot[V], now time.Time) bool {
	return t.minor != nil && t.holdFor > 0 && s.hasWritten && now.Sub(s.writtenAt) < t.holdFor && t.minor(s.want, s.written)
}

// New returns a Batcher that writes through w. It does nothing until Run
// or Flush is called.
func New(w Writer, cfg Config) (*Batcher, error) {
	if w == nil {
		return nil, errors.New("status: Writer is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	closed := make(chan struct{})
	close(closed)
	groups := newTable(jobStatusEqual, cloneJobStatus)
	groups.minor, groups.holdFor = countsOnly, cfg.CountsEvery
	queues := newTable(queueStatusEqual, cloneQueueStatus)
	queues.minor, queues.holdFor = queueStillBusy, cfg.QueueCountsEvery
	return &Batcher{
		w:         w,
		cfg:       cfg,
		kick:      make(chan struct{}, 1),
		closed:    closed,
		newTicker: realTicker,
		now:       time.Now,
		queues:    queues,
		groups:    groups,
	}, nil
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// SetQueue records st as the status the Queue named queue should have. It
// replaces any value still pending for that queue, and is dropped when st
// equals the value last written (or being written). st is copied.
func (b *Batcher) SetQueue(queue string, st api.QueueStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set(b, &b.queues, queue, st)
}

// SetPodGroup records st as the status the PodGroup with this UID should
// have. The object is keyed by uid: a PodGroup re-created under the same
// namespace/name has another UID and is another object. st is copied.
func (b *Batcher) SetPodGroup(namespace, name, uid string, st api.JobStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := set(b, &b.groups, uid, st)
	s.namespace, s.name = namespace, name
}

// Forget drops the Queue named queue: its pending value and its last
// written value. Call it when the shard stops owning the queue or the queue
// is deleted. A write already in flight is not interrupted; the returned
// channel is closed once no write of the queue is in flight (at once if
// none is), so a shard handing the queue over can wait for it before it
// releases ownership.
func (b *Batcher) Forget(queue string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return forget(b, &b.queues, queue)
}

// ForgetPodGroup is Forget for the PodGroup with this UID; call it when the
// PodGroup is deleted or its queue changes owner.
func (b *Batcher) ForgetPodGroup(uid string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return forget(b, &b.groups, uid)
}

// Stats returns a snapshot of the counters.
func (b *Batcher) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Pending = b.pendingLocked()
	s.Objects = len(b.queues.all) + len(b.groups.all)
	return s
}

func (b *Batcher) pendingLocked() int { return len(b.queues.pending) + len(b.groups.pending) }

// Run flushes at every Interval tick, and early when Config.MaxPending
// objects have a new value waiting, until ctx ends. Then it flushes once
// more, bounded by Config.WriteTimeout, and returns that flush's error (nil
// when everything pending was written). Errors of earlier flushes are
// counted in Stats; their values are retried at the next tick. Stopping
// takes at most twice WriteTimeout: writes already sent finish, then the
// final flush runs. Only one Run may be active at a time; another returns
// ErrRunning.
func (b *Batcher) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer b.running.Store(false)
	tick, stop := b.newTicker(b.cfg.Interval)
	defer stop()
	// Writes already sent finish even when ctx ends (each is bounded by
	// WriteTimeout); only the sending of more writes stops.
	keep := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick:
			_ = b.flush(ctx, keep, tickFlush)
		case <-b.kick:
			_ = b.flush(ctx, keep, earlyFlush)
		}
	}
	final, cancel := context.WithTimeout(keep, b.cfg.WriteTimeout)
	defer cancel()
	return b.flush(final, final, allFlush)
}

// Flush writes every pending value now, failed and held ones included, and returns
// when all writes have returned. It stops sending writes when ctx ends;
// values not sent stay pending. The error reports the failed and unsent
// writes; the values of failed writes stay pending unless a newer value
// replaced them. Flush is for tests and shutdown; Run calls it on its own.
func (b *Batcher) Flush(ctx context.Context) error {
	return b.flush(ctx, ctx, allFlush)
}

// flushKind is what a flush takes of the pending values.
type flushKind int

const (
	earlyFlush flushKind = iota // new values only: no retry, nothing held
	tickFlush                   // retries too, and held values whose wait is over
	allFlush                    // everything (Flush, and Run's last flush)
)

// job is one write of a flush.
type job struct {
	write  func(ctx context.Context) error
	finish func(err error) // called with b.mu held
}

// flush takes the pending values kind says and writes them with at most
// Concurrency writes at once. It stops sending when dispatch ends; writes
// run under write, each bounded by WriteTimeout.
func (b *Batcher) flush(dispatch, write context.Context, kind flushKind) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()

	b.mu.Lock()
	select {
	case <-b.kick: // this flush serves any early flush asked so far
	default:
	}
	b.stats.Flushes++
	now := b.now()
	jobs := collect(b, &b.queues, kind, now, nil, func(ctx context.Context, queue, _, _ string, st api.QueueStatus) error {
		return b.w.WriteQueueStatus(ctx, queue, st)
	})
	jobs = collect(b, &b.groups, kind, now, jobs, func(ctx context.Context, uid, ns, name string, st api.JobStatus) error {
		return b.w.WritePodGroupStatus(ctx, ns, name, uid, st)
	})
	b.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	_, span := b.cfg.Tracer.Tracer("shardsched/status").Start(write, "status.flush",
		trace.WithAttributes(attribute.Int("writes", len(jobs))))
	defer span.End()

	var (
		next            atomic.Int64
		errMu           sync.Mutex // guards the three below
		failed, aborted int
		firstErr        error
		wg              sync.WaitGroup
	)
	for range min(b.cfg.Concurrency, len(jobs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				err := errAborted
				if dispatch.Err() == nil {
					ctx, cancel := context.WithTimeout(write, b.cfg.WriteTimeout)
					err = jobs[i].write(ctx)
					cancel()
				}
				b.mu.Lock()
				jobs[i].finish(err)
				b.mu.Unlock()
				if err == nil || errors.Is(err, ErrNotOwner) {
					continue
				}
				errMu.Lock()
				if err == errAborted {
					aborted++
				} else {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
				errMu.Unlock()
			}
		})
	}
	wg.Wait()

	var errs []error
	if failed > 0 {
		errs = append(errs, fmt.Errorf("status flush: %d of %d writes failed, the first: %w", failed, len(jobs)-aborted, firstErr))
	}
	if aborted > 0 {
		errs = append(errs, fmt.Errorf("status flush: %d writes not sent: %w", aborted, context.Cause(dispatch)))
	}
	return errors.Join(errs...)
}

// set records v for key and returns its slot. Called with b.mu held.
func set[V any](b *Batcher, t *table[V], key string, v V) *slot[V] {
	s := t.all[key]
	if s == nil {
		s = &slot[V]{}
		t.all[key] = s
	}
	if s.pending {
		b.stats.Coalesced++ // replaced before it was written
		unpend(b, t, key, s)
	}
	if s.inflight && t.equal(v, s.sending) || !s.inflight && s.hasWritten && t.equal(v, s.written) {
		b.stats.Coalesced++ // the API server has it, or is about to
		return s
	}
	pend(b, t, key, s, t.clone(v), false)
	return s
}

// pend makes v the pending value of s. Called with b.mu held.
func pend[V any](b *Batcher, t *table[V], key string, s *slot[V], v V, retry bool) {
	s.want, s.pending, s.retry = v, true, retry
	t.pending[key] = s
	b.stats.MaxPending = max(b.stats.MaxPending, b.pendingLocked())
	if retry {
		return
	}
	b.ready++
	if b.ready >= b.cfg.MaxPending {
		select {
		case b.kick <- struct{}{}:
		default: // an early flush is already asked for
		}
	}
}

// unpend clears the pending value of s. Called with b.mu held.
func unpend[V any](b *Batcher, t *table[V], key string, s *slot[V]) {
	if !s.retry {
		b.ready--
	}
	var zero V
	s.want, s.pending, s.retry = zero, false, false
	delete(t.pending, key)
}

// collect moves the pending values of t that kind takes to in flight and
// appends a job per value to jobs. Unless kind is allFlush, a value held
// at now (see table.held) stays pending and waits, as a retry does, for a
// tick flush, so that it no longer counts towards an early one. Called
// with b.mu held.
func collect[V any](b *Batcher, t *table[V], kind flushKind, now time.Time, jobs []job,
	send func(ctx context.Context, key, namespace, name string, v V) error) []job {
	for key, s := range t.pending {
		if s.retry && kind == earlyFlush {
			continue
		}
		if s.hasWritten && t.equal(s.want, s.written) {
			b.stats.Coalesced++ // a failed write left behind a value the server has
			unpend(b, t, key, s)
			continue
		}
		if kind != allFlush && t.held(s, now) {
			if !s.retry {
				s.retry = true
				b.ready--
			}
			b.stats.Held++
			continue
		}
		v, retry, ns, name := s.want, s.retry, s.namespace, s.name
		unpend(b, t, key, s)
		s.sending, s.inflight, s.done = v, true, make(chan struct{})
		jobs = append(jobs, job{
			write:  func(ctx context.Context) error { return send(ctx, key, ns, name, v) },
			finish: func(err error) { finish(b, t, key, s, retry, err) },
		})
	}
	return jobs
}

// finish records the outcome of the write of s.sending. retry is whether
// the value was a retry when collected. Called with b.mu held.
func finish[V any](b *Batcher, t *table[V], key string, s *slot[V], retry bool, err error) {
	v := s.sending
	var zero V
	s.sending, s.inflight = zero, false
	close(s.done)
	s.done = nil
	if errors.Is(err, ErrNotOwner) {
		b.stats.Fenced++
		var zero V
		s.written, s.hasWritten = zero, false
		return
	}
	if err != errAborted {
		b.stats.Writes++
		if err != nil {
			b.stats.Errors++
			if errors.Is(err, ErrConflict) {
				b.stats.Conflicts++
			}
		}
	}
	switch {
	case err == nil:
		s.written, s.hasWritten, s.writtenAt = v, true, b.now()
	case s.pending:
		// A newer value arrived during the write: it wins, v is dropped.
		b.stats.Coalesced++
		if s.hasWritten && t.equal(s.want, s.written) {
			b.stats.Coalesced++
			unpend(b, t, key, s)
		}
	case t.all[key] != s:
		// Forgotten during the write.
	case err == errAborted:
		pend(b, t, key, s, v, retry)
	default:
		pend(b, t, key, s, v, true) // at the next tick, not sooner
	}
}

// forget drops key from t. Called with b.mu held.
func forget[V any](b *Batcher, t *table[V], key string) <-chan struct{} {
	s := t.all[key]
	if s == nil {
		return b.closed
	}
	if s.pending {
		unpend(b, t, key, s)
	}
	delete(t.all, key)
	if s.inflight {
		return s.done
	}
	return b.closed
}
