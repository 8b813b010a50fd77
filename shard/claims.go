package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardsched/shardsched/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// unknownHold is how long a record whose write had an unknown outcome and
// was then found absent still counts as present: a Txn whose client gave
// up may still be applied by the server for a moment (etcd bounds a
// request by its own timeout of a few seconds).
const unknownHold = 5 * time.Second

// Claims is this shard's view of the claim records, the store through which
// a job that does not fit on its queue owner's partitions is handed to
// another shard. It is fed by a watch on <prefix>/claims/ and updated at
// once by this shard's own writes, so it never misses a record this shard
// created. Every write is one etcd Txn:
//
//   - Offer (queue owner): create the record, state offered, under the
//     owner's lease, if the owner still holds the queue's ownership record
//     under that lease and the record does not exist.
//   - Claim (the shard offered to): replace the record, state claimed, under
//     the claimer's lease, if its ModRevision is the one the claimer saw.
//   - Drop (refuse an offer, withdraw an offer that timed out, give up a
//     claim): delete the record if its ModRevision is the one seen.
//   - Delete (the job is gone): delete the record.
//
// An offer dies with its owner's lease, a claim with its claimer's.
//
// All methods are safe for concurrent use. Lookups never block; writes
// block for one etcd round trip.
type Claims struct {
	sh     *Shard
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger

	mu sync.Mutex // guards the fields below; never held while taking sh.mu
	// rev: every claim event up to rev is reflected in entries (0: not
	// loaded yet).
	rev int64
	// entries by job UID; deleted records stay as tombstones until the
	// watch has passed their revision, so a late event cannot revive them.
	entries      map[string]*claimEntry
	wantProgress bool
}

type claimEntry struct {
	c         Claim
	rev       int64 // ModRevision of the put, or revision of the delete
	gone      bool
	unknown   bool
	holdUntil time.Time // gone, but counts as present until then
	uses      int       // binds in flight under the claim
	dropping  bool      // a drop started: no new use
}

// NewClaims returns the claim store of s (same etcd client and prefix).
// Run must follow; until it has loaded the records, OwnerMayPlace refuses.
func NewClaims(s *Shard) *Claims {
	return &Claims{sh: s, cli: s.cli, prefix: s.claimPrefix(), log: s.log, entries: map[string]*claimEntry{}}
}

func (c *Claims) key(uid string) string { return c.prefix + uid }

// Run loads the records and follows them with a watch until ctx ends,
// reloading after a broken watch. It also resolves the records whose write
// had an unknown outcome.
func (c *Claims) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		rev, err := c.load(ctx)
		if err != nil {
			c.log.Warn("claim records not loaded; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		c.follow(ctx, rev)
	}
	return nil
}

// load reads every record (a linearizable read) and returns its revision.
func (c *Claims) load(ctx context.Context) (int64, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(gctx, c.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	c.mu.Lock()
	defer c.mu.Unlock()
	present := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		uid := string(kv.Key[len(c.prefix):])
		present[uid] = true
		c.applyLocked(uid, kv, kv.ModRevision, false)
	}
	for uid, e := range c.entries {
		if !present[uid] && e.rev <= rev && !e.gone {
			c.setGoneLocked(e, rev)
		}
	}
	c.rev = max(c.rev, rev)
	return rev, nil
}

// follow applies watch events from rev+1 until the watch breaks or ctx ends.
func (c *Claims) follow(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-wch:
			if !ok {
				return
			}
			if err := resp.Err(); err != nil {
				c.log.Warn("claim watch broken; reloading", "err", err)
				return
			}
			c.onWatch(resp)
		case <-tick.C:
			c.resolveUnknown(ctx)
			c.mu.Lock()
			// Behind a record this shard acquired: ask now rather than
			// when the first job of that queue is to be placed.
			want := c.wantProgress || c.tombstonesAheadLocked() || c.rev < c.sh.acquiredRev.Load()
			c.wantProgress = false
			c.pruneLocked(time.Now())
			c.mu.Unlock()
			if want {
				// The answer comes on wch: it moves rev to the server's
				// current revision once the watch has caught up.
				_ = c.cli.RequestProgress(wctx)
			}
		}
	}
}

func (c *Claims) onWatch(resp clientv3.WatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if resp.IsProgressNotify() {
		c.rev = max(c.rev, resp.Header.Revision)
		return
	}
	for _, ev := range resp.Events {
		uid := string(ev.Kv.Key[len(c.prefix):])
		c.applyLocked(uid, ev.Kv, ev.Kv.ModRevision, ev.Type == mvccpb.DELETE)
		c.rev = max(c.rev, ev.Kv.ModRevision)
	}
}

// applyLocked records the state of one record at revision rev, unless the
// store already knows a state as new or newer.
func (c *Claims) applyLocked(uid string, kv *mvccpb.KeyValue, rev int64, deleted bool) {
	e := c.entries[uid]
	if e != nil && rev <= e.rev {
		return
	}
	if e == nil {
		e = &claimEntry{}
		c.entries[uid] = e
	}
	if deleted {
		c.setGoneLocked(e, rev)
		return
	}
	var v Claim
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		// A record that is not ours to read still blocks placement by the
		// queue owner: keep it present, held by nobody.
		v = Claim{Job: uid, Unknown: true}
	}
	v.Job, v.Rev, v.Lease = uid, rev, kv.Lease
	e.c, e.rev, e.gone, e.unknown, e.dropping, e.holdUntil = v, rev, false, false, false, time.Time{}
}

func (c *Claims) setGoneLocked(e *claimEntry, rev int64) {
	if e.unknown {
		e.holdUntil = time.Now().Add(unknownHold)
	}
	e.rev, e.gone, e.unknown, e.dropping = rev, true, false, false
}

// markUnknownLocked records that a write to uid had an unknown outcome.
func (c *Claims) markUnknownLocked(uid string) {
	e := c.entries[uid]
	if e == nil {
		e = &claimEntry{c: Claim{Job: uid}}
		c.entries[uid] = e
	}
	e.unknown = true
}

// tombstonesAheadLocked reports whether a tombstone is newer than rev (it
// can be pruned only once the watch has passed it).
func (c *Claims) tombstonesAheadLocked() bool {
	for _, e := range c.entries {
		if e.gone && e.rev > c.rev {
			return true
		}
	}
	return false
}

// pruneLocked forgets tombstones the watch has passed.
func (c *Claims) pruneLocked(now time.Time) {
	for uid, e := range c.entries {
		if e.gone && !e.unknown && e.uses == 0 && e.rev <= c.rev && !now.Before(e.holdUntil) {
			delete(c.entries, uid)
		}
	}
}

// resolveUnknown reads the records whose write had an unknown outcome.
func (c *Claims) resolveUnknown(ctx context.Context) {
	c.mu.Lock()
	var uids []string
	for uid, e := range c.entries {
		if e.unknown {
			uids = append(uids, uid)
		}
	}
	c.mu.Unlock()
	for _, uid := range uids {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.cli.Get(gctx, c.key(uid))
		cancel()
		if err != nil {
			continue
		}
		c.mu.Lock()
		e := c.entries[uid]
		if e != nil && e.unknown {
			if len(resp.Kvs) == 1 {
				e.rev = 0 // the read is authoritative: accept its revision
				c.applyLocked(uid, resp.Kvs[0], resp.Kvs[0].ModRevision, false)
			} else {
				c.setGoneLocked(e, max(e.rev, resp.Header.Revision))
			}
		}
		c.mu.Unlock()
	}
}

// presentLocked reports whether e stands for a record that exists (or may).
func presentLocked(e *claimEntry, now time.Time) bool {
	return e != nil && (!e.gone || e.unknown || now.Before(e.holdUntil))
}

// Lookup returns the job's claim record as this shard knows it. ok is
// false when there is none; a record whose state is not known yet is
// returned with Unknown set.
func (c *Claims) Lookup(uid string) (Claim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[uid]
	if !presentLocked(e, time.Now()) {
		return Claim{}, false
	}
	out := e.c
	out.Unknown = out.Unknown || e.unknown || e.gone
	return out, true
}

// List returns every record this shard knows, sorted by job UID.
func (c *Claims) List() []Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	out := make([]Claim, 0, len(c.entries))
	for _, e := range c.entries {
		if presentLocked(e, now) {
			cl := e.c
			cl.Unknown = cl.Unknown || e.unknown || e.gone
			out = append(out, cl)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Job < out[j].Job })
	return out
}

// OwnerMayPlace reports whether this shard may place the job as the owner
// of its queue: it holds the queue's ownership record (fresh lease), it
// has seen every claim record written up to the revision at which it
// acquired that record (only the record's holder creates claim records, and
// it learns of its own at once), and it knows of no claim record for the
// job. While its view is behind, it asks the watch for progress and says no.
func (c *Claims) OwnerMayPlace(uid, queue string) bool {
	epoch, held := c.sh.heldEpoch(wire.QueueKey(queue))
	if !held {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rev == 0 {
		return false
	}
	if c.rev < epoch {
		c.wantProgress = true
		return false
	}
	return !presentLocked(c.entries[uid], time.Now())
}

// Holds reports whether this shard may place the job under its claim now:
// the record says claimed by this shard, under its current session lease,
// the lease is fresh, and no drop has started.
func (c *Claims) Holds(uid string) bool {
	lease, fresh := c.sh.leaseState()
	if !fresh {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holdsLocked(uid, lease)
}

func (c *Claims) holdsLocked(uid string, lease clientv3.LeaseID) bool {
	e := c.entries[uid]
	return e != nil && !e.gone && !e.unknown && !e.dropping && e.c.State == Claimed &&
		e.c.To == c.sh.Name() && e.c.Lease == int64(lease)
}

// Use starts one bind under the job's claim; it fails unless Holds. Every
// successful Use must be followed by Done; a drop waits for the last Done.
func (c *Claims) Use(uid string) bool {
	lease, fresh := c.sh.leaseState()
	if !fresh {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holdsLocked(uid, lease) {
		return false
	}
	c.entries[uid].uses++
	return true
}

// Done ends a use started by Use.
func (c *Claims) Done(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[uid]; e != nil && e.uses > 0 {
		e.uses--
	}
}

// Offer creates the job's claim record, offered by this shard (the owner of
// queue) to shard to, under this shard's lease. It fails with
// ErrNotQueueOwner if this shard's ownership record of the queue is not
// under its current lease, and with ErrClaimExists if a record exists. Any
// other error leaves the outcome unknown (the record then counts as
// present until resolved).
func (c *Claims) Offer(ctx context.Context, uid, queue, to string) (Claim, error) {
	if uid == "" || strings.Contains(uid, "/") || to == "" || to == c.sh.Name() {
		return Claim{}, fmt.Errorf("offer of job %q to shard %q: bad arguments", uid, to)
	}
	lease, _ := c.sh.leaseState()
	c.mu.Lock()
	if presentLocked(c.entries[uid], time.Now()) {
		c.mu.Unlock()
		return Claim{}, ErrClaimExists
	}
	c.mu.Unlock()
	v := Claim{Job: uid, Queue: queue, From: c.sh.Name(), To: to, State: Offered, At: time.Now().UTC()}
	val, _ := json.Marshal(v)
	own, key := c.sh.ownPrefix()+wire.QueueKey(queue), c.key(uid)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(own), "=", lease), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.markUnknownLocked(uid)
		return Claim{}, fmt.Errorf("offer of job %s: outcome unknown: %w", uid, err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			c.applyLocked(uid, kvs[0], kvs[0].ModRevision, false)
			return Claim{}, ErrClaimExists
		}
		return Claim{}, ErrNotQueueOwner
	}
	v.Rev, v.Lease = resp.Header.Revision, int64(lease)
	c.setLocked(uid, v)
	return v, nil
}

// setLocked records this shard's own successful put.
func (c *Claims) setLocked(uid string, v Claim) {
	e := c.entries[uid]
	if e == nil {
		e = &claimEntry{}
		c.entries[uid] = e
	}
	if v.Rev < e.rev {
		return // (cannot happen: a later state was already seen)
	}
	e.c, e.rev, e.gone, e.unknown, e.dropping, e.holdUntil = v, v.Rev, false, false, false, time.Time{}
}

// Claim takes the job offered to this shard: it replaces the record seen
// at revision rev with a claimed one under this shard's lease. It fails
// with ErrNotAddressed if the record at rev does not offer the job to this
// shard and with ErrClaimChanged if the record changed meanwhile (another
// write won). Any other error leaves the outcome unknown (the claim is then
// not held).
func (c *Claims) Claim(ctx context.Context, uid string, rev int64) (Claim, error) {
	lease, fresh := c.sh.leaseState()
	if !fresh {
		return Claim{}, fmt.Errorf("claim of job %s: this shard's lease is not fresh", uid)
	}
	c.mu.Lock()
	e := c.entries[uid]
	if e == nil || e.gone || e.unknown || e.rev != rev {
		c.mu.Unlock()
		return Claim{}, ErrClaimChanged
	}
	if e.c.State != Offered || e.c.To != c.sh.Name() {
		c.mu.Unlock()
		return Claim{}, ErrNotAddressed
	}
	v := e.c
	c.mu.Unlock()
	v.State, v.At, v.Rev, v.Lease = Claimed, time.Now().UTC(), 0, 0
	val, _ := json.Marshal(v)
	key := c.key(uid)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
		Commit()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.markUnknownLocked(uid)
		return Claim{}, fmt.Errorf("claim of job %s: outcome unknown: %w", uid, err)
	}
	if !resp.Succeeded {
		return Claim{}, ErrClaimChanged
	}
	v.Rev, v.Lease = resp.Header.Revision, int64(lease)
	c.setLocked(uid, v)
	return v, nil
}

// Drop deletes the job's record if it is still the one seen at revision
// rev: a refused offer, an offer withdrawn after its timeout, a claim given
// up. For a claim of this shard no new bind starts under it from the call
// on; while binds are in flight it returns ErrClaimInUse and deletes
// nothing (call again). ErrClaimChanged: the record changed meanwhile.
func (c *Claims) Drop(ctx context.Context, uid string, rev int64) error {
	c.mu.Lock()
	e := c.entries[uid]
	if e == nil || e.gone || e.rev != rev {
		c.mu.Unlock()
		return ErrClaimChanged
	}
	e.dropping = true
	if e.uses > 0 {
		c.mu.Unlock()
		return ErrClaimInUse
	}
	c.mu.Unlock()
	key := c.key(uid)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.markUnknownLocked(uid)
		return fmt.Errorf("drop of job %s's claim record: outcome unknown: %w", uid, err)
	}
	if !resp.Succeeded {
		return ErrClaimChanged
	}
	if e := c.entries[uid]; e != nil {
		c.setGoneLocked(e, max(e.rev, resp.Header.Revision))
	}
	return nil
}

// Delete deletes the job's record whatever it says: the job is gone.
func (c *Claims) Delete(ctx context.Context, uid string) error {
	c.mu.Lock()
	if e := c.entries[uid]; e != nil {
		e.dropping = true
	}
	c.mu.Unlock()
	resp, err := c.cli.Delete(ctx, c.key(uid))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.markUnknownLocked(uid)
		return fmt.Errorf("delete of job %s's claim record: %w", uid, err)
	}
	e := c.entries[uid]
	if e == nil {
		e = &claimEntry{c: Claim{Job: uid}}
		c.entries[uid] = e
	}
	c.setGoneLocked(e, max(e.rev, resp.Header.Revision))
	return nil
}
