package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
)

// EnsureDefaultQueues creates the root and default Queue objects when they
// are absent, as Volcano does at start-up: root with weight 1, not
// reclaimable; default under root with weight 1, reclaimable. It only
// creates: an object that exists (an operator's, with its own weight or
// capability) is left as it is, and AlreadyExists is success. The error
// joins the failures of both creates.
func EnsureDefaultQueues(ctx context.Context, vc volcano.Interface) error {
	no, yes := false, true
	var errs []error
	for _, q := range []*schedv1beta1.Queue{
		{ObjectMeta: metav1.ObjectMeta{Name: api.RootQueue}, Spec: schedv1beta1.QueueSpec{Weight: 1, Reclaimable: &no}},
		{ObjectMeta: metav1.ObjectMeta{Name: api.DefaultQueue}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: api.RootQueue, Reclaimable: &yes}},
	} {
		_, err := vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create queue %q: %w", q.Name, err))
		}
	}
	return errors.Join(errs...)
}

// QueueObjects is what the reporter reads of the Queue objects (the
// Source's informer cache). Called from the reporter's goroutine.
type QueueObjects interface {
	// InvalidQueueMarks returns, per Queue carrying InvalidQueueAnnotation,
	// its text.
	InvalidQueueMarks() map[string]string
	// QueueUID returns the UID of a Queue object, "" when there is none.
	QueueUID(name string) string
}

var _ QueueObjects = (*Source)(nil)

// QueueReporter shows, on every Queue object left out of the queue tree,
// why: InvalidQueueAnnotation while it is left out (removed once it is
// valid), and a Warning Event InvalidQueue each time its reason changes.
//
// Report is called from any goroutine and never blocks; Run, on one
// goroutine, reconciles the objects with the latest report when one comes
// and every Interval (so a Queue whose owner changed, or a write that
// failed, is caught up). Writes are rate-limited by state: an annotation
// is written only when the object's differs, an Event only when the
// queue's reason differs from the last Event this reporter sent for it.
// Memory is O(queues left out).
type QueueReporter struct {
	w    *StatusWriter
	rec  *Recorder
	objs QueueObjects
	mine func(queue string) bool
	log  *slog.Logger
	// Interval is the period of the reconcile between reports.
	Interval time.Duration

	mu   sync.Mutex        // guards want
	want map[string]string // queue → reason, from the latest Report
	kick chan struct{}     // buffered, 1

	// Run's goroutine only:
	evented map[string]string // queue → reason last sent as an Event
	failed  map[string]string // queue → last write error logged (logged once, e.g. RBAC without patch on queues)
}

// NewQueueReporter returns a reporter writing through w and rec (rec may be
// nil: no Events), reading objs. mine tells whether this process writes for
// a queue (its owner shard: one writer per object); nil means every queue.
func NewQueueReporter(w *StatusWriter, rec *Recorder, objs QueueObjects, mine func(queue string) bool, log *slog.Logger) *QueueReporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &QueueReporter{w: w, rec: rec, objs: objs, mine: mine, log: log, Interval: 10 * time.Second,
		want: map[string]string{}, kick: make(chan struct{}, 1), evented: map[string]string{}, failed: map[string]string{}}
}

// Report sets the queues left out and why (the whole set: a queue absent
// from left is valid). It does not block.
func (r *QueueReporter) Report(left map[string]error) {
	want := make(map[string]string, len(left))
	for n, err := range left {
		if n != "" && err != nil { // a queue with no name has no object
			want[n] = err.Error()
		}
	}
	r.mu.Lock()
	r.want = want
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends.
func (r *QueueReporter) Run(ctx context.Context) error {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-t.C:
		}
		r.reconcile(ctx)
	}
}

func (r *QueueReporter) reconcile(ctx context.Context) {
	r.mu.Lock()
	want := r.want
	r.mu.Unlock()
	marks := r.objs.InvalidQueueMarks()
	for n, why := range want {
		if r.mine != nil && !r.mine(n) {
			continue
		}
		uid := r.objs.QueueUID(n)
		if uid == "" {
			continue // no object to report on (yet)
		}
		if marks[n] != InvalidQueueText(why) {
			r.logFailure(n, "cannot mark queue invalid", r.w.MarkQueueInvalid(ctx, n, uid, why))
		}
		if r.evented[n] != why {
			if r.rec != nil {
				r.rec.InvalidQueue(n, uid, why)
			}
			r.evented[n] = why
		}
	}
	for n := range marks {
		if _, bad := want[n]; bad || (r.mine != nil && !r.mine(n)) {
			continue
		}
		r.logFailure(n, "cannot clear queue's invalid mark", r.w.ClearQueueInvalid(ctx, n, r.objs.QueueUID(n)))
	}
	for n := range r.evented {
		if _, bad := want[n]; !bad {
			delete(r.evented, n) // valid again: a new problem is a new Event
		}
	}
	for n := range r.failed {
		if _, bad := want[n]; !bad {
			if _, marked := marks[n]; !marked {
				delete(r.failed, n)
			}
		}
	}
}

// logFailure logs a failed write once per queue and error text (the
// reconcile retries it every Interval), and forgets it on success.
func (r *QueueReporter) logFailure(queue, msg string, err error) {
	if err == nil {
		delete(r.failed, queue)
		return
	}
	if r.failed[queue] != err.Error() {
		r.failed[queue] = err.Error()
		r.log.Warn(msg, "queue", queue, "err", err)
	}
}
