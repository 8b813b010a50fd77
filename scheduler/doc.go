// Package scheduler is the scheduling core of one shard: each cycle it
// takes a private snapshot of the cache, admits pending jobs of the queues
// this shard owns through the coordinator (hierarchical quota, F5), places
// admitted gangs on the partitions it owns (all minMember tasks or none),
// binds them with a bounded pool of workers, and hands Queue and PodGroup
// status to the per-shard batcher (one writer per object, F3).
//
// It depends on small ports (Binder, Quota, Ownership, Recorder, Status,
// and optionally Peers and Claims for the hand-off of jobs between shards),
// never on client-go: the Kubernetes adapter in internal/kube implements
// them, and the bench harness can put a simulated cluster behind them.
//
// Rule that keeps two shards from placing the same job: a job is placed by
// exactly one shard at a time, the shard named by its claim record
// <prefix>/claims/<job UID> in etcd (state claimed) if one exists, else
// the owner of its queue (the shard holding the queue's ownership record);
// while an offer is pending nobody places it. Admission, Confirm and
// Release of its reservation stay with the queue owner. A shard places only
// onto nodes of partitions it holds, and every bind re-checks, for its
// duration, the partition's record and either the claim (Claims.Use) or the
// queue's record (Ownership.Use); the API server refuses to bind a pod
// twice.
//
// How a job moves: when the queue owner's own partitions cannot hold the
// gang (or, once the gang is bound, the job's further pods), it picks a live shard whose gossiped capacity (free resources and
// largest free node, published by every shard from its snapshot) has room,
// and creates the claim record, state offered, in one etcd Txn that also
// checks that it still holds the queue's record and that no record exists;
// the offer lives on the owner's lease. The shard offered to claims it if
// the gang fits on its nodes, in a Txn that replaces the record seen (same
// ModRevision) with a claimed one under its own lease, and only then
// places it; otherwise it deletes the offer (a refusal). The owner
// withdraws an offer unclaimed after OfferTimeout; a claimer that cannot
// place the job for ClaimGiveUp gives it back; a dead claimer's record
// vanishes with its lease. In each case the owner places the job again or
// offers it to another shard (not to one that refused it within
// RefusedFor). A starving gang (hold.go) that no shard has room for now
// and that its owner's nodes could not hold even empty is offered to the
// shard whose nodes could (the gossip also carries what the nodes hold
// when empty) with the most free of what it asks for (GPUs, else CPU).
// That shard claims it only if it can hold nodes for it, and keeps the
// claim while the hold lasts (at most MaxHold) instead of giving it back
// after ClaimGiveUp. It holds for such offers only (no shard gossips room
// for the gang, and the offerer's nodes could not hold it); any other
// offer that does not fit is refused as before.
// The record is deleted when the job is gone (by the claimer,
// or by the owner when it releases the reservation). The owner treats a job
// as unclaimed only when its view of the records is at least as new as its
// acquisition of the queue's record (only that record's holder creates
// offers, and it learns of its own at once); a claimer stops the moment its
// record is gone, its session is replaced or its lease is stale.
//
// A job's quota lifecycle (quota.go, resize.go, jobs.go): the queue owner
// reserves max(minResources, the requests of the bound tasks and the first
// minMember pending ones) on the leaf and every ancestor; the shard that
// places the job (owner or claimer) resizes that reservation to cover its
// pending tasks before placing them, growing one absolute target per task
// while every level has room (and only for tasks that fit in what its
// nodes have free), and binds only what the reservation covers (tasks
// beyond the gang that do not fit in that room are a reason to hand the
// job on, as a gang that does not fit is: place.go, uncovered); finished
// tasks shrink it; the owner confirms it once the gang is bound and
// releases it when the job is gone and its pods with it, or when every
// task finished. Reconciliation releases reservations that cover no job,
// and forgets the admissions whose reservation is gone (a tentative one
// goes with the session lease it was asked under, when this shard's
// session is replaced after a pause or a cut from etcd), so they are asked
// for again: the owner would otherwise learn of the loss only at Confirm,
// and a job another shard places would never be bound (its claimer's
// resize finds no reservation to grow).
// What the shard remembers of a job is one record (jobRec), dropped once
// empty.
package scheduler
