// Package status is a shard's only path to the status of Queues and
// PodGroups: it keeps, per object, the latest status the shard wants the API
// server to show, and writes it in batches through a Writer.
//
// # What it owns
//
// The Batcher owns the pending status of every Queue and PodGroup that its
// shard owns (the shard decides ownership; the Batcher trusts it) and the
// last value it wrote for each of them. Anyone may call SetQueue and
// SetPodGroup at any time and from any goroutine; the call only records the
// value under a lock and returns. One flush goroutine (Run) takes the pending
// values every Interval, or earlier when MaxPending objects are waiting, and
// writes them with at most Concurrency writes in parallel.
//
// A Queue is keyed by its name; a PodGroup by its UID, so a PodGroup deleted
// and re-created under the same name is a different object (F4).
//
// A PodGroup whose new status differs from the last written only in its
// counts (running, succeeded, failed) is written at most every
// CountsEvery: a gang binding pod by pod would otherwise be patched at
// every flush, at an API server cost per pod close to a pod's own status
// patch. Its phase and conditions, which controllers act on (Volcano's job
// controller creates a job's pods once its PodGroup is Inqueue), go out at
// the next flush as any other change. A Queue that was busy when last
// written and is busy still (a job pending, in queue or running, or
// something allocated) is written at most every QueueCountsEvery: in a
// stream of pods every busy queue changes at every flush. A queue going
// idle or leaving idle goes out at the next flush.
//
// # What it must never do (F3)
//
//   - Hold more than one pending value per object: a newer value replaces the
//     older one, so memory is O(objects), never O(events).
//   - Write a value equal to the one it last wrote (or is writing) for that
//     object.
//   - Retry in a loop. A failed write, conflicts included, keeps the object
//     pending (unless a newer value replaced it meanwhile) and is retried only
//     at the next Interval tick, never at an early, size-triggered flush; so a
//     failing API server sees at most one write per object per Interval.
//   - Re-read an object and retry on a conflict. A conflict means a second
//     writer touches the object, which the design forbids: it is counted in
//     Stats.Conflicts so it can be seen, not papered over.
//   - Write one object twice at the same time, or block a caller of Set on
//     I/O.
//   - Remember objects it was told to forget. Forget and ForgetPodGroup drop
//     an object when the shard loses its ownership or the object is deleted;
//     the caller must call them, or the Batcher keeps the last written value
//     of every object it has ever seen.
//
// The Batcher does no I/O of its own: the Writer port (implemented with
// server-side apply by the Kubernetes adapter and in memory by the bench
// harness) does.
package status
