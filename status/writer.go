package status

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardsched/shardsched/api"
)

// ErrConflict is wrapped by a Writer's error when the API server answered
// 409 Conflict, so that the Batcher can count conflicts (Stats.Conflicts).
var ErrConflict = errors.New("status write conflict")

// ErrNotOwner is wrapped by a Writer's error when this shard may not write
// the object (it does not hold its queue's ownership record): the Batcher
// drops the value instead of retrying it (see Stats.Fenced).
var ErrNotOwner = errors.New("not the owner of this status")

// Fence says whether this shard may write a queue's status now. Use
// reports whether it holds the queue's ownership record and, if so, keeps
// it from being released until Done (*shard.Shard through a queue key).
// Safe for concurrent use; Use must not block for long.
type Fence interface {
	Use(queue string) bool
	Done(queue string)
}

// FenceQueues wraps w so that a Queue's status is written only while f
// lets this shard use the queue, for the duration of the write: a shard
// that lost a queue drops what it had pending for it (one writer per
// object, F3, also across an ownership change). PodGroup writes pass
// through.
func FenceQueues(w Writer, f Fence) Writer { return fenced{w: w, f: f} }

type fenced struct {
	w Writer
	f Fence
}

func (x fenced) WriteQueueStatus(ctx context.Context, queue string, st api.QueueStatus) error {
	if !x.f.Use(queue) {
		return fmt.Errorf("queue %q: %w", queue, ErrNotOwner)
	}
	defer x.f.Done(queue)
	return x.w.WriteQueueStatus(ctx, queue, st)
}

func (x fenced) WritePodGroupStatus(ctx context.Context, namespace, name, uid string, st api.JobStatus) error {
	return x.w.WritePodGroupStatus(ctx, namespace, name, uid, st)
}

// Writer writes status to the API server. It is the port the Kubernetes
// adapter (server-side apply under the shard's field manager, owning only
// the fields it sets) and the simulated cluster implement.
//
// Threading and blocking contract:
//   - Calls come only from the Batcher's flush, which runs one flush at a
//     time but may issue up to Config.Concurrency calls in parallel, never
//     two for the same object at once.
//   - A call may block on I/O but must return when ctx is done; ctx carries
//     Config.WriteTimeout.
//   - A call must not retry on its own (no conflict-retry loop, F3): the
//     Batcher keeps a failed value pending and tries again at its next
//     interval tick.
//   - A call must return an error wrapping ErrConflict for an HTTP 409.
//   - A call must neither keep nor modify st: the Batcher keeps it as the
//     last written value.
type Writer interface {
	// WriteQueueStatus writes the status of the Queue named queue.
	WriteQueueStatus(ctx context.Context, queue string, st api.QueueStatus) error
	// WritePodGroupStatus writes the status of the PodGroup namespace/name
	// whose UID is uid; it must not write a different PodGroup that has the
	// same name (a UID precondition).
	WritePodGroupStatus(ctx context.Context, namespace, name, uid string, st api.JobStatus) error
}
