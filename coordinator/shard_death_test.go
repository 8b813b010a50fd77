package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardsched/shardsched/api"
)

// sdStored reads the reservations stored in etcd, by UID, with the lease
// each key is attached to.
func sdStored(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) map[string]struct {
	R     Reservation
	Lease int64
} {
	t.Helper()
	resp, err := cli.Get(ctx, prefix+"/res/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read reservations from etcd: %v", err)
	}
	out := map[string]struct {
		R     Reservation
		Lease int64
	}{}
	for _, kv := range resp.Kvs {
		var r Reservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("stored reservation %s: %v", kv.Key, err)
		}
		uid := string(kv.Key[len(prefix+"/res/"):])
		if uid != r.Job.UID {
			t.Fatalf("key %s holds the reservation of uid %q", kv.Key, r.Job.UID)
		}
		out[uid] = struct {
			R     Reservation
			Lease int64
		}{r, kv.Lease}
	}
	return out
}

func sdByUID(rs []Reservation) map[string]Reservation {
	out := map[string]Reservation{}
	for _, r := range rs {
		out[r.Job.UID] = r
	}
	return out
}

func TestShardDeathDropsTentativeKeepsConfirmed(t *testing.T) {
	const shardTTL = 2
	ev := newEnv(t, 2, 5)
	ev.leader(10 * time.Second)
	dying := ev.newShard("shard-dying", shardTTL)
	other := ev.newShard("shard-other", 10)
	ctx := ctxT(t, 60*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()

	if _, err := other.c.SetQueues(ctx, []api.QueueSpec{
		{Name: "org", Capability: limit(t, 4000, 8*gi)},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org"},
	}); err != nil {
		t.Fatal(err)
	}
	jobA := JobRef{Namespace: "ns", Name: "job-a", UID: "uid-a"}
	jobB := JobRef{Namespace: "ns", Name: "job-b", UID: "uid-b"}
	jobC := JobRef{Namespace: "ns", Name: "job-c", UID: "uid-c"}
	amountA := res(3000, 4*gi)

	ra, err := dying.c.Reserve(ctx, jobA, "team-a", amountA)
	if err != nil {
		t.Fatalf("reserve A: %v", err)
	}
	if ra.Reservation.State != Tentative || ra.Reservation.Lease != int64(dying.session.Lease()) || ra.Reservation.Shard != "shard-dying" {
		t.Fatalf("A %+v, want tentative on the dying shard's lease %x", ra.Reservation, dying.session.Lease())
	}
	if _, err := dying.c.Reserve(ctx, jobB, "team-a", res(1000, gi)); err != nil {
		t.Fatalf("reserve B: %v", err)
	}
	rb, err := dying.c.Confirm(ctx, jobB.UID)
	if err != nil {
		t.Fatalf("confirm B: %v", err)
	}
	if rb.Reservation.State != Confirmed || rb.Reservation.Lease != 0 {
		t.Fatalf("confirmed B %+v", rb.Reservation)
	}
	stored := sdStored(ctx, t, etcd, ev.cfg.Prefix)
	if s, ok := stored[jobA.UID]; !ok || s.Lease != int64(dying.session.Lease()) || s.R.State != Tentative {
		t.Fatalf("A in etcd: %+v (present %v), want tentative on lease %x", s, ok, dying.session.Lease())
	}
	if s, ok := stored[jobB.UID]; !ok || s.Lease != 0 || s.R.State != Confirmed {
		t.Fatalf("B in etcd: %+v (present %v), want confirmed with no lease", s, ok)
	}
	// While A is held, C (needing A's amount) does not fit org.
	var qe *QuotaError
	if _, err := other.c.Reserve(ctx, jobC, "team-b", amountA); !errors.As(err, &qe) || qe.Queue != "org" {
		t.Fatalf("C while A is held: got %v, want a QuotaError at org", err)
	}

	// The dying shard's process goes away: no keepalive, no revoke.
	dying.session.Orphan()
	dying.c.Close()
	if err := dying.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("closing the dying shard's etcd client: %v", err)
	}
	died := time.Now()

	deadline := died.Add(shardTTL*time.Second + 4*time.Second)
	var list Result
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		list, err = other.c.List(lctx)
		cancel()
		if err == nil {
			if _, held := sdByUID(list.Reservations)[jobA.UID]; !held {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("A still held %s after its shard died (TTL %d s); last list %+v err %v",
				time.Since(died).Round(time.Millisecond), shardTTL, list.Reservations, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("tentative reservation dropped %s after its shard died (session TTL %d s)", time.Since(died).Round(time.Millisecond), shardTTL)

	got := sdByUID(list.Reservations)
	if b, ok := got[jobB.UID]; !ok || b.State != Confirmed || b.Queue != "team-a" || !b.Amount.Equal(res(1000, gi)) {
		t.Fatalf("B after its shard died: %+v (present %v), want it confirmed on team-a", b, ok)
	}
	if len(got) != 1 {
		t.Fatalf("reservations after the shard died: %+v, want only B", list.Reservations)
	}
	stored = sdStored(ctx, t, etcd, ev.cfg.Prefix)
	if _, ok := stored[jobA.UID]; ok {
		t.Fatalf("A still stored in etcd: %+v", stored[jobA.UID])
	}
	if _, ok := stored[jobB.UID]; !ok {
		t.Fatal("B no longer stored in etcd")
	}

	// A's quota is free again: C, asking exactly A's amount, fits.
	rc, err := other.c.Reserve(ctx, jobC, "team-b", amountA)
	if err != nil {
		t.Fatalf("C after A expired: %v", err)
	}
	if rc.Existed || rc.Reservation.State != Tentative || rc.Reservation.Shard != "shard-other" {
		t.Fatalf("C reservation %+v", rc)
	}
	// And org is exactly full again (B 1000m + C 3000m).
	if _, err := other.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "job-d", UID: "uid-d"}, "team-a", res(1, 0)); !errors.As(err, &qe) || qe.Queue != "org" || qe.Reserved != 4000 || qe.Short != 1 {
		t.Fatalf("D with org full: got %v, want org short by 1m with 4000m reserved", err)
	}
}

func TestReserveWithRevokedLeaseFails(t *testing.T) {
	ev := newEnv(t, 2, 5)
	ev.leader(10 * time.Second)
	live := ev.newShard("shard-live", 10)
	gone := ev.newShard("shard-gone", 10)
	ctx := ctxT(t, 60*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()

	if _, err := live.c.SetQueues(ctx, []api.QueueSpec{
		{Name: "org", Capability: limit(t, 4000, 8*gi)},
		{Name: "team-a", Parent: "org"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := live.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "kept", UID: "uid-kept"}, "team-a", res(1000, gi)); err != nil {
		t.Fatal(err)
	}
	before := biState(ctx, t, live.c)
	lead := ev.leader(time.Second)
	lead.s.mu.Lock()
	termBefore := lead.s.term
	lead.s.mu.Unlock()

	// Revoke the shard's lease (Close revokes), then reserve with it.
	lease := gone.session.Lease()
	if err := gone.session.Close(); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if ttl, err := etcd.TimeToLive(ctx, lease); err != nil || ttl.TTL > 0 {
		t.Fatalf("lease %x still alive after revoke: %+v %v", lease, ttl, err)
	}
	_, err := gone.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "late", UID: "uid-late"}, "team-a", res(1000, gi))
	if !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("reserve with a revoked lease: got %v, want an error wrapping ErrSessionExpired", err)
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotLeader) {
		t.Fatalf("reserve with a revoked lease also reports %v", err)
	}
	if after := biState(ctx, t, live.c); after != before {
		t.Fatalf("ledger changed by the refused reserve:\nbefore %s\nafter  %s", before, after)
	}
	if _, ok := sdStored(ctx, t, etcd, ev.cfg.Prefix)["uid-late"]; ok {
		t.Fatal("the refused reservation is stored in etcd")
	}
	// The leader kept its term: a dead shard lease is the caller's problem,
	// not a reason to step down.
	lead.s.mu.Lock()
	termAfter, leading := lead.s.term, lead.s.calls != nil
	lead.s.mu.Unlock()
	if !leading || termAfter != termBefore {
		t.Fatalf("leader changed by the refused reserve: leading=%v term %d -> %d", leading, termBefore, termAfter)
	}
	// The quota it asked for is still free.
	if _, err := live.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "fits", UID: "uid-fits"}, "team-a", res(3000, gi)); err != nil {
		t.Fatalf("reserve after the refused one: %v", err)
	}
}
