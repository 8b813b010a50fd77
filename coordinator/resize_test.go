package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Resize keeps a reservation equal to what its job holds: grows are checked
// at every level like a new reservation, shrinks always pass.

func rzLedger(t *testing.T) *Ledger {
	t.Helper()
	return lgLedger(t, []api.QueueSpec{
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 4000})},
		{Name: "a", Parent: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 3000})},
		{Name: "b", Parent: "org"},
	})
}

func cpu(m int64) api.Resource { return api.NewResource(m, 0, nil) }

func TestLedgerResizeGrowsWhileEveryLevelFits(t *testing.T) {
	l := rzLedger(t)
	if _, _, err := l.Reserve(lgReq("d", "a", cpu(1000))); err != nil {
		t.Fatal(err)
	}
	// A Deployment of 6 × 1 CPU in a 3-CPU queue: one target per replica.
	var targets []api.Resource
	for n := int64(2); n <= 6; n++ {
		targets = append(targets, cpu(n*1000))
	}
	r, granted, refused, err := l.Resize(ResizeRequest{UID: "d", Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if granted != 2 || !r.Amount.Equal(cpu(3000)) {
		t.Fatalf("granted %d, amount %v; want 2 targets, 3 CPU (the leaf's capability)", granted, r.Amount)
	}
	if refused == nil || refused.Queue != "a" || refused.Resource != api.CPU || refused.Short != 1000 {
		t.Fatalf("refusal %+v, want queue a short of cpu by 1", refused)
	}
	lgUsage(t, l, "a", cpu(3000))
	lgUsage(t, l, "org", cpu(3000))

	// The parent is the limit for a sibling.
	if _, _, err := l.Reserve(lgReq("e", "b", cpu(500))); err != nil {
		t.Fatal(err)
	}
	_, granted, refused, err = l.Resize(ResizeRequest{UID: "e", Targets: []api.Resource{cpu(1000), cpu(1500)}})
	if err != nil || granted != 1 || refused == nil || refused.Queue != "org" {
		t.Fatalf("granted %d refused %+v err %v; want 1 granted, refused at org", granted, refused, err)
	}
	lgUsage(t, l, "org", cpu(4000))
}

func TestLedgerResizeShrinksUnderLoweredCapability(t *testing.T) {
	l := rzLedger(t)
	if _, _, err := l.Reserve(lgReq("d", "a", cpu(3000))); err != nil {
		t.Fatal(err)
	}
	if _, err := l.SetTree([]api.QueueSpec{
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 1000})},
		{Name: "a", Parent: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 1000})},
		{Name: "b", Parent: "org"},
	}); err != nil {
		t.Fatal(err)
	}
	// Still over the new capability after the shrink: allowed, it only lowers.
	r, granted, refused, err := l.Resize(ResizeRequest{UID: "d", Targets: []api.Resource{cpu(2000)}})
	if err != nil || granted != 1 || refused != nil || !r.Amount.Equal(cpu(2000)) {
		t.Fatalf("shrink: %+v granted %d refused %v err %v", r.Amount, granted, refused, err)
	}
	lgUsage(t, l, "org", cpu(2000))
	// A grow is refused, naming the leaf (first level short).
	_, granted, refused, _ = l.Resize(ResizeRequest{UID: "d", Targets: []api.Resource{cpu(2500)}})
	if granted != 0 || refused == nil || refused.Queue != "a" {
		t.Fatalf("grow over a lowered capability: granted %d refused %+v", granted, refused)
	}
	// A new dimension the queue does not cap is unlimited.
	r, granted, _, _ = l.Resize(ResizeRequest{UID: "d", Targets: []api.Resource{cpu(2000).With(api.Pods, 3)}})
	if granted != 1 || r.Amount.Get(api.Pods) != 3 {
		t.Fatalf("uncapped dimension: granted %d amount %v", granted, r.Amount)
	}
}

// Bound raises a reservation to what its job's bound pods ask before any
// target is tried, capability or not (an in-place resize has already
// happened); the targets are then checked as usual, and a bound that is
// not a valid amount changes nothing.
func TestLedgerResizeRaisedToWhatIsBound(t *testing.T) {
	l := rzLedger(t)
	if _, _, err := l.Reserve(lgReq("d", "a", cpu(2000))); err != nil {
		t.Fatal(err)
	}
	// Bound within the leaf's 3 CPU: raised, and the target is the bound.
	bound := cpu(2500)
	r, granted, refused, err := l.Resize(ResizeRequest{UID: "d", Bound: &bound, Targets: []api.Resource{cpu(2500)}})
	if err != nil || refused != nil || granted != 1 || !r.Amount.Equal(cpu(2500)) {
		t.Fatalf("%v granted %d refused %+v err %v; want 2.5 CPU", r.Amount, granted, refused, err)
	}
	// Bound beyond it: counted anyway, and the target (a pending task on
	// top) refused at the leaf.
	bound = cpu(3500)
	r, granted, refused, err = l.Resize(ResizeRequest{UID: "d", Bound: &bound, Targets: []api.Resource{cpu(4500)}})
	if err != nil || granted != 0 || refused == nil || refused.Queue != "a" || !r.Amount.Equal(cpu(3500)) {
		t.Fatalf("%v granted %d refused %+v err %v; want 3.5 CPU held and the grow refused at a", r.Amount, granted, refused, err)
	}
	lgUsage(t, l, "a", cpu(3500))
	lgUsage(t, l, "org", cpu(3500))
	// Nothing else fits in the full leaf.
	if _, _, err := l.Reserve(lgReq("e", "a", cpu(100))); err == nil {
		t.Fatal("a new job admitted into a leaf already over its capability")
	}
	// A bound below the amount lowers nothing; the targets do.
	bound = cpu(1000)
	if r, _, _, err = l.Resize(ResizeRequest{UID: "d", Bound: &bound, Targets: []api.Resource{cpu(1000)}}); err != nil || !r.Amount.Equal(cpu(1000)) {
		t.Fatalf("%v %v; want 1 CPU", r.Amount, err)
	}
	lgUsage(t, l, "org", cpu(1000))
	// A negative bound is refused whole.
	bad := api.Resource{MilliCPU: -5}
	if _, _, _, err = l.Resize(ResizeRequest{UID: "d", Bound: &bad, Targets: []api.Resource{cpu(2000)}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative bound: %v, want ErrInvalid", err)
	}
	lgUsage(t, l, "a", cpu(1000))
}

func TestLedgerResizeBadInput(t *testing.T) {
	l := rzLedger(t)
	if _, _, err := l.Reserve(lgReq("d", "a", cpu(1000))); err != nil {
		t.Fatal(err)
	}
	before := lgSnap(l)
	if _, _, _, err := l.Resize(ResizeRequest{UID: "nope", Targets: []api.Resource{cpu(1)}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown uid: %v", err)
	}
	neg := api.Resource{}.With(api.CPU, -5)
	for name, req := range map[string]ResizeRequest{
		"no targets":      {UID: "d"},
		"empty target":    {UID: "d", Targets: []api.Resource{cpu(2000), {}}},
		"negative target": {UID: "d", Targets: []api.Resource{neg}},
	} {
		if _, _, _, err := l.Resize(req); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	lgSame(t, "bad resizes", before, l)
}

// Case 5 of the quota-lifecycle issue: a queue that changed owner re-asks
// for a job's reservation; the answer "existed" must come with the
// reservation moved to the asker's lease, in etcd too, so that the previous
// owner's lease ending does not take it away while the job is bound.
func TestReserveExistedMovesToAskersLease(t *testing.T) {
	ev := newEnv(t, 1, 5)
	ev.leader(10 * time.Second)
	oldOwner := ev.newShard("shard-old", 2)
	newOwner := ev.newShard("shard-new", 30)
	ctx := ctxT(t, 60*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()
	if _, err := newOwner.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 2000, 8*gi)}}); err != nil {
		t.Fatal(err)
	}
	job := JobRef{Namespace: "ns", Name: "j", UID: "uid-j"}
	if _, err := oldOwner.c.Reserve(ctx, job, "q", res(2000, gi)); err != nil {
		t.Fatal(err)
	}
	r, err := newOwner.c.Reserve(ctx, job, "q", res(2000, gi))
	if err != nil || !r.Existed {
		t.Fatalf("re-reserve: %+v %v", r, err)
	}
	if r.Reservation.Lease != int64(newOwner.session.Lease()) || r.Reservation.Shard != "shard-new" {
		t.Fatalf("existed reservation still on lease %x shard %q; want the asker's %x", r.Reservation.Lease, r.Reservation.Shard, newOwner.session.Lease())
	}
	if st := sdStored(ctx, t, etcd, ev.cfg.Prefix)["uid-j"]; st.Lease != int64(newOwner.session.Lease()) {
		t.Fatalf("stored key on lease %x, want %x", st.Lease, newOwner.session.Lease())
	}
	// The previous owner dies: the reservation stays, and nobody else gets
	// the quota it covers.
	_ = oldOwner.session.Close()
	time.Sleep(3 * time.Second)
	other := JobRef{Namespace: "ns", Name: "k", UID: "uid-k"}
	if _, err := newOwner.c.Reserve(ctx, other, "q", res(1000, gi)); err == nil {
		t.Fatal("another job got quota the moved reservation holds")
	}
	list, err := newOwner.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := sdByUID(list.Reservations); len(got) != 1 || got["uid-j"].Lease != int64(newOwner.session.Lease()) {
		t.Fatalf("reservations after the old lease ended: %+v", list.Reservations)
	}
}

// Case 9: the lease expiry of a job's tentative reservation (its shard
// died) and a new Reserve of the same UID by another shard land in one
// commit group, the Reserve first. The Reserve rewrites the key under the
// asker's lease; the expiry's delete event, older than that write, must not
// release the reservation from the ledger while etcd keeps it.
func TestReReserveAndExpiryInOneGroup(t *testing.T) {
	ev := newEnv(t, 0, 5)
	ev.cfg.GroupDelay = 800 * time.Millisecond // the calls below and the delete event share a group
	ev.add()
	ev.leader(10 * time.Second)
	dying := ev.newShard("shard-dying", 30)
	other := ev.newShard("shard-other", 30)
	ctx := ctxT(t, 60*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()
	if _, err := other.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 8000, 8*gi)}}); err != nil {
		t.Fatal(err)
	}
	job := JobRef{Namespace: "ns", Name: "j", UID: "uid-j"}
	if _, err := dying.c.Reserve(ctx, job, "q", res(1000, gi)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { // opens the group
		_, err := other.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "x", UID: "uid-x"}, "q", res(1000, gi))
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond)
	go func() {
		_, err := other.c.Reserve(ctx, job, "q", res(1000, gi))
		errs <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := etcd.Revoke(ctx, dying.session.Lease()); err != nil { // the dying shard's lease ends
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // the delete event is applied by now
	list, err := other.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, inLedger := sdByUID(list.Reservations)["uid-j"]
	st, inEtcd := sdStored(ctx, t, etcd, ev.cfg.Prefix)["uid-j"]
	if !inLedger || !inEtcd {
		t.Fatalf("reservation in ledger %v, in etcd %v; want both", inLedger, inEtcd)
	}
	if r.Lease != int64(other.session.Lease()) || st.Lease != int64(other.session.Lease()) {
		t.Fatalf("ledger lease %x, stored lease %x; want the asker's %x", r.Lease, st.Lease, other.session.Lease())
	}
}

// Resize through the client and the leader: the amount is stored, and a
// tentative reservation stays on its lease.
func TestResizeThroughClient(t *testing.T) {
	ev := newEnv(t, 1, 5)
	ev.leader(10 * time.Second)
	sh := ev.newShard("shard", 30)
	ctx := ctxT(t, 60*time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 3000, 8*gi)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.c.Resize(ctx, "uid-none", nil, []api.Resource{res(1000, gi)}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resize of nothing: %v", err)
	}
	job := JobRef{Namespace: "ns", Name: "j", UID: "uid-j"}
	if _, err := sh.c.Reserve(ctx, job, "q", res(1000, gi)); err != nil {
		t.Fatal(err)
	}
	r, err := sh.c.Resize(ctx, job.UID, nil, []api.Resource{res(2000, gi), res(3000, gi), res(4000, gi)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Granted != 2 || r.Refused == nil || r.Refused.Queue != "q" || !r.Reservation.Amount.Equal(res(3000, gi)) {
		t.Fatalf("resize: granted %d refused %+v amount %v", r.Granted, r.Refused, r.Reservation.Amount)
	}
	st := sdStored(ctx, t, etcd, ev.cfg.Prefix)["uid-j"]
	if !st.R.Amount.Equal(res(3000, gi)) || st.Lease != int64(sh.session.Lease()) {
		t.Fatalf("stored %v on lease %x", st.R.Amount, st.Lease)
	}
	// Retried (absolute targets): same outcome.
	r, err = sh.c.Resize(ctx, job.UID, nil, []api.Resource{res(2000, gi), res(3000, gi), res(4000, gi)})
	if err != nil || r.Granted != 2 || !r.Reservation.Amount.Equal(res(3000, gi)) {
		t.Fatalf("retried resize: %+v %v", r, err)
	}
	r, err = sh.c.Resize(ctx, job.UID, nil, []api.Resource{res(500, gi)})
	if err != nil || !r.Reservation.Amount.Equal(res(500, gi)) {
		t.Fatalf("shrink: %+v %v", r, err)
	}
}
