// Package cache keeps one shard's view of the cluster: the nodes, tasks
// (pods) and jobs (PodGroups) reported by informer events, the books of the
// nodes this shard keeps books for (used, releasing, idle), and the private snapshot
// each scheduling cycle works on.
//
// # What it owns
//
//   - Every node, task and job it has been told about, as deep copies that it
//     never mutates once stored; readers get copies, and snapshots share
//     the stored tasks and jobs read-only.
//   - The books (api.NodeBooks) of every known node the shard keeps books for
//     (Options.KeepsBooks). Tasks are tracked by UID whether or not their node is
//     known or owned; they are booked only on owned, known nodes, and a task
//     seen before its node is booked when the node arrives.
//   - Slim records (slim.go) of the tasks that are placed or finished and
//     not assumed, nearly all of them on other shards' nodes: their name,
//     node, phase and creation time, the rest shared by the tasks of their
//     job of the same shape. Readers get the full task back, equal to the
//     one given (Task, JobTasks, a snapshot's TasksOfJob); what the cache
//     counts (books, JobSummary, a snapshot's BoundBySpec) reads the
//     record directly. At 1M cores with 8 shards this took a shard's
//     heap per placed task from 603 to 314 bytes (BenchmarkHeapPerPlacedTask).
//   - Detection of failure F2: a node whose used resources would exceed its
//     allocatable in any dimension (allocatable shrank, a pod bound by
//     nodeName or by another scheduler, more pods than its "pods" scalar) is
//     marked OutOfSync, counted, and reported through Options.OnOutOfSync.
//     It recovers by itself on the next event that makes its books
//     consistent, or when Rebuild replaces its state with the API server's.
//   - Optimistic binding: Assume books a pending task onto a node before the
//     bind call returns, Forget undoes it, and the informer update that shows
//     the pod bound confirms it without counting it twice.
//   - Snapshots (failure F1, docs/design.md): UpdateSnapshot refreshes a
//     Snapshot by generation, copying only the nodes whose books changed and
//     dropping deleted ones; it also carries the pending tasks, every task
//     of the jobs that have pending tasks, and every job. Those tasks and
//     jobs are the cache's stored ones, shared: the cache never mutates
//     what it stored (an event or an assumption stores a new one), so a
//     snapshot shares nothing mutable with the cache and a cycle reads it
//     without any lock. Copying them for every shard's snapshot was a
//     seventh of the heap at 1M cores with 8 shards.
//
// # Job identity
//
// Tasks are grouped by the job they name (namespace and PodGroup name, the
// only link a pod carries: Volcano pods name their group by annotation, not
// by UID). A PodGroup deleted and re-created under the same name (a vcjob
// deleted and submitted again, a PodGroup replaced) gets a new UID, and the
// pods of the old one may still be there, terminating (TaskReleasing) for
// their grace period or finished. They are not members of the new job:
// counting them let dying pods satisfy the new gang's minMember, sized its
// reservation from their requests and placed it piecemeal.
//
// Membership is decided from the objects alone, never from the order the
// cache happened to see events in, so that every shard, and a shard that
// restarts, decides alike. A task that names job J is a member of J unless
//
//	it is releasing or terminal, and it was created before J.
//
// A task is always a member when J is unknown (no PodGroup of that name),
// when either creation time is unknown (zero), or when J is an implicit
// group (Job.Implicit): the scheduler creates an implicit PodGroup after the
// pods of its plain workload exist, so creation order cannot tell its own
// pods from a predecessor's; it is recreated only once no pod of the
// workload is left, and its minMember of 1 leaves no gang for a
// predecessor's pod to fill.
//
// A live task (pending, assumed, bound, running) is always a member, even
// one created before J. Pods that were pending or bound before their group
// existed belong to it (a manifest applied in any order; a PodGroup deleted
// while its pods live on, then created again, which should adopt them and
// count their usage against the queue). A predecessor's pod still running
// when the new group appears cannot be told from those, so it counts as a
// member until its deletion starts (it turns releasing) and leaves then:
// over-counting live usage for that moment is the safe side of the quota
// rule, whereas leaving live pods out would hide usage. Creation times come
// from the API server with one-second resolution; a predecessor's pod
// created in the same second as the new group stays a member.
//
// The rule is applied wherever a job's tasks are reported: TasksOfJob, and
// JobSummary (Pending, Bound, Done and Allocated count members only;
// Predecessors counts the others). Pending tasks are members by definition,
// so PendingTasks and the pending counts are unaffected. Membership never
// touches the books: a predecessor's releasing pod stays booked on its node
// (in Used and Releasing) until it is gone. The rule needs no extra walk:
// each group keeps the cutoff (its job's creation time), and a job event
// that moves the cutoff (a new UID under the name, a delete) touches the
// group once, so snapshots copy it again and the group's summary is
// counted again from its tasks; a status update of the same PodGroup
// touches nothing. Otherwise a group's summary moves task by task: each
// change of a task takes out what the summary counted for it before
// (groupedAs, as bookedAs does for the books) and adds what it counts now.
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
