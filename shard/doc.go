// Package shard is one scheduler shard: membership (hashicorp/memberlist),
// the ring that says which shard owns which node partitions and queues
// (xxhash rendezvous hashing), and the fenced handoff of that ownership
// through etcd.
//
// # Ownership
//
// Nodes hash into P partitions (xxhash of the node name mod P). Every
// partition and every queue is a key; the owner of a key is the live member
// with the highest rendezvous score xxhash(key, member). A join or a leave
// moves only the keys the joining or leaving member wins or held, about 1/N.
//
// Gossip is eventually consistent, so ownership is fenced in etcd. A shard
// uses a key (schedules onto a partition, admits for a queue, writes a
// queue's status) only while it holds the key's ownership record, created
// in a Txn under its session lease when the record is absent. On losing a
// key in the ring the old owner stops using it first, drains in-flight
// binds, then deletes the record; the new owner acquires only when the
// record is absent. A dead shard's records vanish when its lease expires. A
// shard that sees its record deleted or its session expire stops using the
// key at once.
//
// # Why a bind cannot outlive the record
//
// The lease is known alive until T (the last keepalive answer's arrival
// plus the TTL; the lease cannot expire earlier than the server's renewal
// plus the TTL, which is no later). Uses start only before T − margin
// (LeaseMargin, a third of the TTL by default), and each use is given the
// deadline T − margin/2 (UseUntil): the scheduler's bind call gets no later
// deadline, so a bind begun under a record ends, one way or the other,
// before the lease, and so the record, could be gone. A cut-off shard whose
// keepalives stop therefore stops binding before another shard can acquire
// its keys, whatever its binds' call timeout. Not covered here: the API
// server may still apply a request whose client gave up at the deadline a
// moment later (the margin/2 left is that allowance). A new holder may not
// yet have seen the previous holder's last binds in its informers: it keeps
// books for (and places on) a partition's nodes only once it has held the
// key for a quiet period (HeldFor; internal/shardproc's HandoverQuiet, 1 s),
// and rebuilds a node's books when they disagree with the truth.
//
// Within one holder the same gap opens the other way: a bind the shard
// gave up on (its deadline passed, its connection broke, the server timed
// out) may still have been carried out. The scheduler therefore forgets a
// pod's room only on an answer that refuses the bind; a bind whose outcome
// is unknown (wire.ErrBindUnknown) keeps the room and is asked again until
// the answer is known or the informer shows the pod, so the holder never
// places a second pod on room the first may occupy. The fault runs
// (bench/realbench -modes faults: a shard cut off from etcd while its binds
// are slowed, the API server slowed for one shard, etcd stalled, a gossip
// partition, a shard paused past its lease) check both allowances from the
// API server's pods after every run; the slowed API server found the second
// gap (two nodes double-booked) before the scheduler kept rooms in doubt.
// What no allowance covers: a bind request delayed in the network beyond
// margin/2 past its deadline and then applied, after a new holder placed on
// the node; the pods/binding subresource cannot be fenced by the record.
//
// # Claims
//
// A job that does not fit on its queue owner's partitions can be handed to
// another shard through a claim record <prefix>/claims/<job UID> (Claims):
// the queue owner offers it (a Txn that also compares its ownership record
// of the queue with its lease, and creates the record only if absent, under
// its lease); the shard offered to claims it (a Txn on the record's
// ModRevision, under its own lease). A job is placed by the shard its
// claimed record names if one exists, else by its queue's owner. Shards
// gossip a capacity summary of their nodes (Meta.Capacity) to choose whom
// to offer a job to.
//
// The decisions are made by Machine, a deterministic state machine driven by
// events and a clock; Shard wraps it in one goroutine that talks to
// memberlist and etcd.
package shard
