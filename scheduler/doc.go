// Package scheduler is the scheduling core of one shard: each cycle it
// takes a private snapshot of the cache, admits pending jobs of the queues
// this shard owns through the coordinator (hierarchical quota, F5), places
// admitted gangs on the partitions it owns (all minMember tasks or none),
// binds them with a bounded pool of workers, and hands Queue and PodGroup
// status to the per-shard batcher (one writer per object, F3).
//
// It depends on small ports (Binder, Quota, Ownership, Recorder, Status),
// never on client-go: the Kubernetes adapter in internal/kube implements
// them, and the bench harness can put a simulated cluster behind them.
//
// Rule that keeps two shards from placing the same job: a job is admitted
// and placed only by the owner of its queue (the shard holding the queue's
// ownership record), and only onto nodes of partitions that shard holds;
// every bind re-checks the partition's record (Ownership.Use) and the API
// server refuses to bind a pod twice. Handing a job that does not fit on
// the owner's partitions to a shard with room is not implemented yet; such a
// job waits with a FailedScheduling event.
package scheduler
