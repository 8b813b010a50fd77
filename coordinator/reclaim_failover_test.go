package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// A plan survives a leader change, is carried on by the next leader as
// stored, and is undone when the shard that asked for it dies before its
// victims went: the victims are unmarked (in etcd too), the quota held for
// the nominee goes back, and nothing is taken twice.
func TestReclaimPlanAcrossLeaderChangeAndNomineeDeath(t *testing.T) {
	const shardTTL = 2
	ev := newEnv(t, 2, 5)
	first := ev.leader(10 * time.Second)
	asker := ev.newShard("shard-asker", shardTTL)
	owner := ev.newShard("shard-owner", 30)
	ctx := ctxT(t, 90*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()
	if _, err := owner.c.SetQueues(ctx, []api.QueueSpec{
		{Name: "p", Capability: api.LimitOf(res(4000, 0))},
		{Name: "a", Parent: "p", Deserved: res(2000, 0)},
		{Name: "b", Parent: "p", Deserved: res(2000, 0)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"b1", "b2", "b3", "b4"} {
		if _, err := owner.c.ReserveWith(ctx, JobRef{Namespace: "ns", Name: uid, UID: uid}, "b", res(1000, 0), &Terms{Created: int64(len(uid))}); err != nil {
			t.Fatal(err)
		}
		if _, err := owner.c.Confirm(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	a1 := JobRef{Namespace: "ns", Name: "a1", UID: "a1"}
	got, err := asker.c.ReserveWith(ctx, a1, "a", res(2000, 0), &Terms{Reclaim: true})
	if err != nil || got.Reservation.State != Nominated || len(got.Victims) != 2 {
		t.Fatalf("a1: %+v %v, want nominated with 2 victims", got, err)
	}
	marked := func() map[string]bool {
		out := map[string]bool{}
		for uid, s := range sdStored(ctx, t, etcd, ev.cfg.Prefix) {
			if s.R.Evict != nil {
				out[uid] = true
			}
		}
		return out
	}
	if m := marked(); len(m) != 2 {
		t.Fatalf("victims marked in etcd: %v, want 2", m)
	}
	// The leader goes; the next one serves the same evictions from etcd.
	first.stop()
	ev.leader(20 * time.Second)
	list, err := owner.c.Evictions(ctx)
	if err != nil || len(list.Reservations) != 2 {
		t.Fatalf("evictions after the leader change: %+v %v, want 2", list.Reservations, err)
	}
	// A third job cannot take the quota held for a1 meanwhile.
	var qe *QuotaError
	if _, err := owner.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "c", UID: "c"}, "a", res(1000, 0)); !errors.As(err, &qe) {
		t.Fatalf("a third job while a1 waits: %v, want a QuotaError", err)
	}
	// The asking shard dies before any victim went: its nomination
	// expires with its lease and the plan is undone.
	asker.session.Orphan()
	asker.c.Close()
	_ = asker.cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := owner.c.Evictions(ctx)
		if err == nil && len(list.Reservations) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("victims still marked 30s after the nominee's shard died: %+v %v", list.Reservations, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := marked(); len(m) != 0 {
		t.Fatalf("victims still marked in etcd: %v", m)
	}
	all, err := owner.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all.Reservations {
		if r.Job.UID == "a1" {
			t.Fatalf("a1's nomination outlived its shard: %+v", r)
		}
	}
	if len(all.Reservations) != 4 {
		t.Fatalf("%d reservations left, want B's 4 untouched", len(all.Reservations))
	}
	// Asked again (by a live shard), a1 gets the same plan once, not two.
	got, err = owner.c.ReserveWith(context.Background(), a1, "a", res(2000, 0), &Terms{Reclaim: true})
	if err != nil || got.Reservation.State != Nominated || len(got.Victims) != 2 {
		t.Fatalf("a1 again: %+v %v, want nominated with 2 victims", got, err)
	}
}
