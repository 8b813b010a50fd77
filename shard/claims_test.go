package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runClaims starts the claim store of a running shard until the test ends
// and waits until it has loaded the records.
func (tc *testCluster) runClaims(r *running) *Claims {
	tc.t.Helper()
	c := NewClaims(r.s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	tc.t.Cleanup(func() {
		cancel()
		<-done
	})
	testenv.Eventually(tc.t, 5*time.Second, func() bool { return viewRev(c) > 0 }, "the claim store is loaded")
	return c
}

// viewRev is the revision up to which c reflects every claim event (0:
// the records are not loaded yet).
func viewRev(c *Claims) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// queueHeldBy returns a queue of the cluster that r holds.
func (tc *testCluster) queueHeldBy(r *running) string {
	tc.t.Helper()
	for _, q := range tc.queues {
		if r.s.Holds(wire.QueueKey(q)) {
			return q
		}
	}
	tc.t.Fatalf("%s holds none of the queues %v", r.s.Name(), tc.queues)
	return ""
}

// record reads a claim record straight from etcd.
func (tc *testCluster) record(cli *clientv3.Client, uid string) (Claim, bool) {
	tc.t.Helper()
	resp, err := cli.Get(context.Background(), tc.prefix+"/claims/"+uid)
	if err != nil {
		tc.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return Claim{}, false
	}
	c := claimFromKV(tc.t, resp.Kvs[0].Value)
	c.Rev, c.Lease = resp.Kvs[0].ModRevision, resp.Kvs[0].Lease
	return c, true
}

func claimFromKV(t *testing.T, b []byte) Claim {
	t.Helper()
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("claim record %q: %v", b, err)
	}
	return c
}

// sees waits until the store shows the record at revision rev.
func sees(t *testing.T, c *Claims, uid string, rev int64) {
	t.Helper()
	if !seen(c, uid, rev) {
		t.Fatalf("the store does not show %s at revision %d after 5s", uid, rev)
	}
}

// seen reports whether the store shows the record at revision rev within
// 5 s (usable from any goroutine).
func seen(c *Claims, uid string, rev int64) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got, ok := c.Lookup(uid); ok && got.Rev == rev && !got.Unknown {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func threeShards(t *testing.T) (*testCluster, [3]*running, [3]*Claims) {
	tc := newTestCluster(t)
	tc.queues = nil
	for i := 0; i < 30; i++ {
		tc.queues = append(tc.queues, fmt.Sprintf("q-%02d", i))
	}
	var rs [3]*running
	rs[0] = tc.start("shard-a")
	rs[1] = tc.start("shard-b", rs[0].s.GossipAddr())
	rs[2] = tc.start("shard-c", rs[0].s.GossipAddr())
	tc.waitConverged(10 * time.Second)
	var cs [3]*Claims
	for i, r := range rs {
		cs[i] = tc.runClaims(r)
	}
	return tc, rs, cs
}

// An offer re-addressed while its first target claims it: the first
// target's claim (of the first offer's revision) and the second target's
// claim (of the new offer) race through etcd; exactly one shard ends up
// with the job, and the record names it under its lease. Also two claims of
// the same revision at once: exactly one succeeds.
func TestClaimRaceExactlyOneWinner(t *testing.T) {
	tc, rs, cs := threeShards(t)
	a, b, c := cs[0], cs[1], cs[2]
	q := tc.queueHeldBy(rs[0])
	ctx := context.Background()
	wins := map[string]int{}
	for i := 0; i < 20; i++ {
		uid := fmt.Sprintf("race-%d", i)
		first, err := a.Offer(ctx, uid, q, "shard-b")
		if err != nil {
			t.Fatalf("offer %s: %v", uid, err)
		}
		sees(t, b, uid, first.Rev)
		var wg sync.WaitGroup
		var bErr, cErr, dropErr error
		cErr = errors.New("not tried: the offer was not withdrawn")
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, bErr = b.Claim(ctx, uid, first.Rev)
		}()
		go func() {
			defer wg.Done()
			if dropErr = a.Drop(ctx, uid, first.Rev); dropErr != nil {
				return
			}
			second, err := a.Offer(ctx, uid, q, "shard-c")
			if err != nil {
				cErr = fmt.Errorf("second offer: %w", err)
				return
			}
			if !seen(c, uid, second.Rev) {
				cErr = errors.New("shard-c never saw the second offer")
				return
			}
			_, cErr = c.Claim(ctx, uid, second.Rev)
		}()
		wg.Wait()
		if (bErr == nil) == (cErr == nil) {
			t.Fatalf("%s: claim by shard-b: %v; by shard-c: %v (withdrawal: %v): want exactly one winner", uid, bErr, cErr, dropErr)
		}
		winner, cl := "shard-b", b
		if cErr == nil {
			winner, cl = "shard-c", c
		} else if !errors.Is(cErr, ErrClaimChanged) && dropErr == nil {
			t.Fatalf("%s: shard-c's claim failed with %v, want ErrClaimChanged", uid, cErr)
		}
		wins[winner]++
		rec, ok := tc.record(rs[0].cli, uid)
		if !ok || rec.State != Claimed || rec.To != winner || rec.Lease != int64(rs[map[string]int{"shard-b": 1, "shard-c": 2}[winner]].s.Lease()) {
			t.Fatalf("%s: record %+v (present %v), want claimed by %s under its lease", uid, rec, ok, winner)
		}
		if !cl.Holds(uid) {
			t.Fatalf("%s: the winner %s does not hold its claim", uid, winner)
		}
		for _, loser := range []*Claims{b, c} {
			if loser != cl && loser.Holds(uid) {
				t.Fatalf("%s: the loser holds the claim too", uid)
			}
		}
		if a.OwnerMayPlace(uid, q) {
			t.Fatalf("%s: the queue owner may place a job claimed by %s", uid, winner)
		}
	}
	t.Logf("winners over 20 races: %v", wins)

	// Two claims of one revision at once.
	off, err := a.Offer(ctx, "twice", q, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	sees(t, b, "twice", off.Rev)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Claim(ctx, "twice", off.Rev)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two claims of revision %d: %v, %v; want exactly one success", off.Rev, errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrClaimChanged) {
			t.Fatalf("losing claim: %v, want ErrClaimChanged", err)
		}
	}
	// An offer can only be claimed by the shard it names.
	off2, err := a.Offer(ctx, "for-b", q, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	sees(t, c, "for-b", off2.Rev)
	if _, err := c.Claim(ctx, "for-b", off2.Rev); !errors.Is(err, ErrNotAddressed) {
		t.Fatalf("claim by a shard the offer does not name: %v, want ErrNotAddressed", err)
	}
}

// An offer is fenced by the queue's ownership record: a shard that no
// longer holds the queue (it moved to a shard that joined) cannot offer its
// jobs; the new owner can.
func TestOfferRefusedWithoutQueueRecord(t *testing.T) {
	tc := newTestCluster(t)
	tc.queues = nil
	for i := 0; i < 30; i++ {
		tc.queues = append(tc.queues, fmt.Sprintf("q-%02d", i))
	}
	a := tc.start("shard-a")
	tc.waitConverged(5 * time.Second)
	ca := tc.runClaims(a)
	b := tc.start("shard-b", a.s.GossipAddr())
	tc.waitConverged(10 * time.Second)
	cb := tc.runClaims(b)
	q := tc.queueHeldBy(b) // held by shard-a before shard-b joined
	ctx := context.Background()
	if _, err := ca.Offer(ctx, "job-x", q, "shard-b"); !errors.Is(err, ErrNotQueueOwner) {
		t.Fatalf("offer by the former owner of %s: %v, want ErrNotQueueOwner", q, err)
	}
	if _, ok := tc.record(a.cli, "job-x"); ok {
		t.Fatal("a refused offer left a record")
	}
	if _, ok := ca.Lookup("job-x"); ok {
		t.Fatal("a refused offer shows in the offerer's store")
	}
	if ca.OwnerMayPlace("job-x", q) {
		t.Fatalf("shard-a may place a job of %s, which it no longer holds", q)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return cb.OwnerMayPlace("job-x", q) }, "shard-b may place the job as the queue's owner")
	off, err := cb.Offer(ctx, "job-x", q, "shard-a")
	if err != nil {
		t.Fatalf("offer by the owner of %s: %v", q, err)
	}
	if off.State != Offered || off.From != "shard-b" || off.To != "shard-a" {
		t.Fatalf("offer %+v", off)
	}
	if cb.OwnerMayPlace("job-x", q) {
		t.Fatal("the owner may place a job it has just offered")
	}
}

// A second offer of a job that has a record is refused: by the store
// itself, and by etcd when the store does not know of the record (a fresh
// store that never loaded). Once the record is dropped, a new offer works.
func TestSecondOfferRefused(t *testing.T) {
	tc, rs, cs := threeShards(t)
	a := cs[0]
	q := tc.queueHeldBy(rs[0])
	ctx := context.Background()
	first, err := a.Offer(ctx, "job-2", q, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Offer(ctx, "job-2", q, "shard-c"); !errors.Is(err, ErrClaimExists) {
		t.Fatalf("second offer: %v, want ErrClaimExists", err)
	}
	blind := NewClaims(rs[0].s) // never loaded: only etcd can refuse
	if _, err := blind.Offer(ctx, "job-2", q, "shard-c"); !errors.Is(err, ErrClaimExists) {
		t.Fatalf("second offer from a store that does not know the first: %v, want ErrClaimExists", err)
	}
	if rec, ok := tc.record(rs[0].cli, "job-2"); !ok || rec.To != "shard-b" || rec.Rev != first.Rev {
		t.Fatalf("record after refused offers: %+v (present %v), want the first offer unchanged", rec, ok)
	}
	if err := a.Drop(ctx, "job-2", first.Rev); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Offer(ctx, "job-2", q, "shard-c"); err != nil {
		t.Fatalf("offer after the first was withdrawn: %v", err)
	}
}

// An offer lives on its offerer's lease and a claim on its claimer's: when
// the lease goes, the record goes, the claimer stops holding the job, and
// the queue owner may place it again.
func TestClaimRecordsDieWithTheirLease(t *testing.T) {
	tc, rs, cs := threeShards(t)
	a, b := cs[0], cs[1]
	q := tc.queueHeldBy(rs[0])
	ctx := context.Background()

	off, err := a.Offer(ctx, "claimed", q, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	sees(t, b, "claimed", off.Rev)
	cl, err := b.Claim(ctx, "claimed", off.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Holds("claimed") || !b.Use("claimed") {
		t.Fatal("the claimer does not hold its fresh claim")
	}
	b.Done("claimed")
	if _, err := rs[1].cli.Revoke(ctx, clientv3.LeaseID(cl.Lease)); err != nil {
		t.Fatal(err)
	}
	if _, ok := tc.record(rs[0].cli, "claimed"); ok {
		t.Fatal("the claim record outlived its claimer's lease")
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return !b.Holds("claimed") && !b.Use("claimed") }, "the claimer no longer holds the job")
	testenv.Eventually(t, 5*time.Second, func() bool { return a.OwnerMayPlace("claimed", q) }, "the queue owner may place the job again")

	off2, err := a.Offer(ctx, "offered", q, "shard-c")
	if err != nil {
		t.Fatal(err)
	}
	sees(t, cs[2], "offered", off2.Rev)
	if _, err := rs[0].cli.Revoke(ctx, clientv3.LeaseID(off2.Lease)); err != nil {
		t.Fatal(err)
	}
	if _, ok := tc.record(rs[0].cli, "offered"); ok {
		t.Fatal("the offer outlived its offerer's lease")
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, ok := cs[2].Lookup("offered")
		return !ok
	}, "the target sees the offer gone")
	if _, err := cs[2].Claim(ctx, "offered", off2.Rev); !errors.Is(err, ErrClaimChanged) {
		t.Fatalf("claim of a vanished offer: %v, want ErrClaimChanged", err)
	}
}

// A drop of a claim stops new binds at once, waits for the binds in flight
// (ErrClaimInUse), and then deletes the record.
func TestDropWaitsForBindsInFlight(t *testing.T) {
	tc, rs, cs := threeShards(t)
	a, b := cs[0], cs[1]
	q := tc.queueHeldBy(rs[0])
	ctx := context.Background()
	off, err := a.Offer(ctx, "busy", q, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	sees(t, b, "busy", off.Rev)
	cl, err := b.Claim(ctx, "busy", off.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Use("busy") {
		t.Fatal("Use of a held claim failed")
	}
	if err := b.Drop(ctx, "busy", cl.Rev); !errors.Is(err, ErrClaimInUse) {
		t.Fatalf("drop with a bind in flight: %v, want ErrClaimInUse", err)
	}
	if b.Use("busy") || b.Holds("busy") {
		t.Fatal("a new bind started under a claim being dropped")
	}
	if _, ok := tc.record(rs[0].cli, "busy"); !ok {
		t.Fatal("the record was deleted with a bind in flight")
	}
	b.Done("busy")
	if err := b.Drop(ctx, "busy", cl.Rev); err != nil {
		t.Fatalf("drop after the last bind: %v", err)
	}
	if _, ok := tc.record(rs[0].cli, "busy"); ok {
		t.Fatal("the record survived the drop")
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return a.OwnerMayPlace("busy", q) }, "the queue owner may place the job again")
}

// A store loaded before its shard acquired the queue's record must catch
// up to that acquisition before the shard may place the queue's jobs as
// owner: with no claim traffic at all, only a progress notification from
// the watch moves its view forward.
func TestOwnerMayPlaceAfterViewCatchesUp(t *testing.T) {
	tc := newTestCluster(t)
	cfg := tc.config("shard-a")
	cli := tc.etcd()
	defer cli.Close()
	s, err := New(context.Background(), cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClaims(s)
	ctx, cancel := context.WithCancel(context.Background())
	claimsDone, shardDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(claimsDone)
		_ = c.Run(ctx)
	}()
	defer func() {
		cancel()
		<-claimsDone
		<-shardDone
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return viewRev(c) > 0 }, "the claim store is loaded")
	loaded := viewRev(c)
	s.SetQueues(tc.queues)
	go func() {
		defer close(shardDone)
		_ = s.Run(ctx)
	}()
	q := tc.queues[0]
	testenv.Eventually(t, 5*time.Second, func() bool { return s.Holds(wire.QueueKey(q)) }, "the shard holds the queue")
	epoch, _ := s.heldEpoch(wire.QueueKey(q))
	if epoch <= loaded {
		t.Fatalf("queue acquired at revision %d, not after the load at %d: the test proves nothing", epoch, loaded)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return c.OwnerMayPlace("job", q) }, "the owner may place the queue's jobs")
	caught := viewRev(c)
	if caught < epoch {
		t.Fatalf("owner may place with a view at revision %d, before its acquisition at %d", caught, epoch)
	}
}

// A shard's claim store catches up with the ownership records the shard
// acquires by itself, before any placement asks: the owner of a queue taken
// after the store loaded may place its jobs in its first cycle. Nothing is
// written under the claims prefix here, so only a progress request moves
// the store's revision past the records'.
func TestClaimsCatchUpWithAcquiredRecords(t *testing.T) {
	tc := newTestCluster(t)
	tc.queues = []string{"q-0", "q-1", "q-2", "q-3"}
	a := tc.start("shard-a")
	ca := tc.runClaims(a) // loaded before the shard holds anything
	tc.waitConverged(10 * time.Second)
	q := tc.queueHeldBy(a)
	epoch, held := a.s.heldEpoch(wire.QueueKey(q))
	if !held {
		t.Fatalf("shard-a does not hold %s", q)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		ca.mu.Lock()
		defer ca.mu.Unlock()
		return ca.rev >= epoch
	}, "the claim store reaches the revision at which shard-a took %s without being asked", q)
	if !ca.OwnerMayPlace("job-y", q) {
		t.Fatalf("shard-a may not place a job of %s, which it holds", q)
	}
}
