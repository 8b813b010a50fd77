// Package cache keeps one shard's view of the cluster: the nodes, tasks
// (pods) and jobs (PodGroups) reported by informer events, the books of the
// nodes this shard owns (used, releasing, idle), and the private snapshot
// each scheduling cycle works on.
//
// # What it owns
//
//   - Every node, task and job it has been told about, as deep copies that it
//     never hands out: readers get copies too.
//   - The books (api.NodeBooks) of every known node the shard owns
//     (Options.Owns). Tasks are tracked by UID whether or not their node is
//     known or owned; they are booked only on owned, known nodes, and a task
//     seen before its node is booked when the node arrives.
//   - Detection of failure F2: a node whose used resources would exceed its
//     allocatable in any dimension (allocatable shrank, a pod bound by
//     nodeName or by another scheduler, more pods than its "pods" scalar) is
//     marked OutOfSync, counted, and reported through Options.OnOutOfSync.
//     It recovers by itself on the next event that makes its books
//     consistent, or when Rebuild replaces its state with the API server's.
//   - Optimistic binding: Assume books a pending task onto a node before the
//     bind call returns, Forget undoes it, and the informer update that shows
//     the pod bound confirms it without counting it twice.
//   - Snapshots (failure F1, STYLE item 1): UpdateSnapshot refreshes a
//     Snapshot by generation, copying only the nodes whose books changed and
//     dropping deleted ones; it also carries the pending tasks, every task
//     of the jobs that have pending tasks, and every job, each copied again
//     only when it changed. A snapshot shares nothing mutable with the
//     cache, so a cycle reads it without any lock.
//
// # Generations
//
// The cache counts every change with one increasing generation. The books
// of the owned nodes sit in a list ordered by the generation of their last
// change, newest first, so a refresh walks only the nodes changed since the
// snapshot's generation; a snapshot that holds more nodes than the cache
// after that walk has seen a deletion and drops what is gone.
//
// # What it must never do
//
//   - Panic, whatever the input: resource arithmetic is checked and
//     saturating, a negative request is booked as zero, and books that cannot
//     be kept exact are recomputed from the tasks and marked out of sync.
//   - Delete by name alone (failure F4): DeleteNode, DeleteTask and DeleteJob
//     match the UID, so a delayed delete of an old object never removes a new
//     one created under the same name.
//   - Hold package-level mutable state, or let any reader or writer touch the
//     shared state without taking the Cache's single lock.
//   - Call out while holding that lock, except Options.Owns, which must
//     therefore be fast and must not call back into the Cache.
//   - Talk to the API server: it consumes events; rebuilding a node from the
//     API server is the caller's job, through Rebuild.
//
// # Threading
//
// Every method of Cache is safe for concurrent use; event handlers may call
// them from many goroutines. A Snapshot belongs to one scheduling cycle and
// is not safe for concurrent use: one goroutine refreshes and reads it.
package cache
