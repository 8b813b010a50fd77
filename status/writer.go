package status

import (
	"context"
	"errors"

	"github.com/shardsched/shardsched/api"
)

// ErrConflict is wrapped by a Writer's error when the API server answered
// 409 Conflict, so that the Batcher can count conflicts (Stats.Conflicts).
var ErrConflict = errors.New("status write conflict")

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
