// Package coordinator decides hierarchical quota: it is the one place where a
// job's reservation on its leaf queue and every ancestor is granted or
// refused (failure F5 of the design: two children overrunning their parent).
//
// # Semantics
//
// A reservation names a job (namespace/name and UID), its leaf queue and an
// amount (api.Resource). It succeeds only if, for the leaf and every
// ancestor up to the root, reserved + amount ≤ capability, where a dimension
// a queue's capability does not set is unlimited at that level. On success
// the amount is applied at every level at once; on failure nothing changes
// and the answer (a *QuotaError) names the first level that is short,
// walking from the leaf to the root, by which resource and by how much.
//
// Reservations are idempotent by job UID: a retried Reserve returns the
// existing reservation. Jobs are never matched by name: the same
// namespace/name with another UID is another job.
//
// A reservation is Tentative while its gang is being placed: it is stored in
// etcd under the asking shard's session lease, so it vanishes if that shard
// dies before it confirms. Confirm makes it durable (no lease); it is then
// released only by Release(UID), which queue owners also call when they
// reconcile reservations against the jobs that exist.
//
// Lowering a queue's capability never cancels existing reservations; it
// blocks new ones until usage falls below it. Borrowing and lending limits
// (Kueue's hierarchical cohorts) fit the same rule, admission is valid iff it
// fits at every level, and would be more per-level bounds checked in
// Ledger.Reserve; fair share is decided by the shards, not here.
//
// # Mechanism
//
// Every shard process runs a Server. The Servers campaign in an etcd
// election (client/v3/concurrency); the leader publishes its HTTP address as
// the election value. The leader rebuilds the Ledger from etcd before it
// answers anything, then applies requests strictly one after another in one
// goroutine. Requests that arrive while a commit is in flight form the next
// group; each group is one etcd Txn guarded by a compare on the leader's
// election key, and a request is answered only once its group is durable.
// A lost session or a failed compare stops the leader at once: pending
// requests fail with ErrNotLeader and clients retry on the next leader,
// which rebuilds from etcd (replays are safe because every operation is
// idempotent by UID). Tentative reservations that expire with their shard's
// lease reach the leader through a watch on the reservation prefix.
//
// A client given the Server of its own process (ClientConfig.Local) hands
// its batches to it directly while that Server leads: the same calls
// through the same leader loop, without HTTP or JSON. Whatever it does not
// settle (the Server stopped leading) goes to the leader over HTTP.
//
// A shard asks for a queue's jobs in one batch (Client.ReserveInOrder):
// each reserve after the first names the one before it, and the leader,
// applying them in order, answers ErrBehind without trying one whose
// predecessor was refused (unless the predecessor can never fit), so a
// fifo queue's outcome is that of asking one job after another.
//
// Layout in etcd, under Config.Prefix:
//
//	<prefix>/election/<lease>   election keys (value: leader address)
//	<prefix>/tree               the queue specs (JSON)
//	<prefix>/res/<uid>          one reservation (JSON); tentative ones carry the shard's lease
//
// The package never talks to the Kubernetes API; shards feed it queue specs.
package coordinator
