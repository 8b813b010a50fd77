package coordinator

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// Pure unit tests of Ledger: no etcd, no HTTP.

const lgGPU = "nvidia.com/gpu"

func lgLimit(t *testing.T, dims map[string]int64) api.Limit {
	t.Helper()
	l, err := api.NewLimit(dims)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func lgLedger(t *testing.T, specs []api.QueueSpec) *Ledger {
	t.Helper()
	tree, err := api.BuildTree(specs)
	if err != nil {
		t.Fatalf("build tree: %v", err)
	}
	return NewLedger(tree)
}

func lgReq(uid, queue string, amount api.Resource) ReserveRequest {
	return ReserveRequest{Job: JobRef{Namespace: "ns", Name: "job-" + uid, UID: uid}, Queue: queue, Amount: amount}
}

// lgSnapshot is everything observable about a ledger, for "unchanged" checks.
type lgSnapshot struct {
	tree  *api.Tree
	specs []api.QueueSpec
	usage map[string]api.Resource
	res   []Reservation
}

func lgSnap(l *Ledger) lgSnapshot {
	s := lgSnapshot{tree: l.Tree(), specs: l.Tree().Specs(), usage: map[string]api.Resource{}, res: l.Reservations()}
	for _, n := range l.Tree().Names() {
		s.usage[n] = l.Usage(n)
	}
	// Queues that only reservations mention (a removed queue's old path).
	for _, r := range s.res {
		for _, q := range r.Path {
			s.usage[q] = l.Usage(q)
		}
	}
	return s
}

func lgSame(t *testing.T, what string, before lgSnapshot, l *Ledger) {
	t.Helper()
	after := lgSnap(l)
	if before.tree != after.tree {
		t.Errorf("%s: tree replaced", what)
	}
	if !reflect.DeepEqual(before.specs, after.specs) {
		t.Errorf("%s: specs changed:\nbefore %+v\nafter  %+v", what, before.specs, after.specs)
	}
	for q, u := range before.usage {
		if !u.Equal(after.usage[q]) {
			t.Errorf("%s: usage of %q changed from %v to %v", what, q, u, after.usage[q])
		}
	}
	for q, u := range after.usage {
		if !u.Equal(before.usage[q]) {
			t.Errorf("%s: usage of %q changed from %v to %v", what, q, before.usage[q], u)
		}
	}
	if !reflect.DeepEqual(before.res, after.res) {
		t.Errorf("%s: reservations changed:\nbefore %+v\nafter  %+v", what, before.res, after.res)
	}
}

func lgUsage(t *testing.T, l *Ledger, queue string, want api.Resource) {
	t.Helper()
	if got := l.Usage(queue); !got.Equal(want) {
		t.Errorf("usage of %q = %v, want %v", queue, got, want)
	}
}

func lgQuota(t *testing.T, err error) *QuotaError {
	t.Helper()
	var qe *QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("got %v, want a *QuotaError", err)
	}
	return qe
}

func TestLedgerReserveAtomicAcrossLevels(t *testing.T) {
	// The root caps cpu, org caps memory, the leaves cap nothing: a cpu
	// refusal happens at the root only, after team-a and org were checked.
	l := lgLedger(t, []api.QueueSpec{
		{Name: api.RootQueue, Capability: lgLimit(t, map[string]int64{api.CPU: 5000})},
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.Memory: 8 * gi})},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org"},
	})
	if _, existed, err := l.Reserve(lgReq("u1", "team-a", res(4000, 2*gi))); err != nil || existed {
		t.Fatalf("u1: existed=%v err=%v", existed, err)
	}
	before := lgSnap(l)
	_, _, err := l.Reserve(lgReq("u2", "team-b", res(2000, gi)))
	qe := lgQuota(t, err)
	if qe.Queue != api.RootQueue || qe.Resource != api.CPU || qe.Short != 1000 {
		t.Fatalf("refusal %+v, want root short of cpu by 1000m", qe)
	}
	lgSame(t, "refused at the root", before, l)
	lgUsage(t, l, "team-b", api.Resource{})
	lgUsage(t, l, "org", res(4000, 2*gi))
	if _, ok := l.Get("u2"); ok {
		t.Fatal("refused u2 holds a reservation")
	}

	// A refusal in the middle (memory at org) leaves the leaf and root unchanged too.
	_, _, err = l.Reserve(lgReq("u3", "team-b", res(100, 7*gi)))
	qe = lgQuota(t, err)
	if qe.Queue != "org" || qe.Resource != api.Memory || qe.Short != gi {
		t.Fatalf("refusal %+v, want org short of memory by 1Gi", qe)
	}
	lgSame(t, "refused at org", before, l)

	// What fits exactly is admitted at every level at once.
	r, _, err := l.Reserve(lgReq("u4", "team-b", res(1000, 6*gi)))
	if err != nil {
		t.Fatalf("u4 fits exactly: %v", err)
	}
	if want := []string{"team-b", "org", api.RootQueue}; !reflect.DeepEqual(r.Path, want) {
		t.Fatalf("u4 path %v, want %v", r.Path, want)
	}
	lgUsage(t, l, "team-b", res(1000, 6*gi))
	lgUsage(t, l, "org", res(5000, 8*gi))
	lgUsage(t, l, api.RootQueue, res(5000, 8*gi))
	if r.State != Confirmed {
		t.Fatalf("a reservation with no lease is %s, want Confirmed", r.State)
	}
}

func TestLedgerQuotaErrorFirstShortLeafToRoot(t *testing.T) {
	specs := []api.QueueSpec{
		{Name: api.RootQueue, Capability: lgLimit(t, map[string]int64{api.CPU: 10000, api.Memory: 64 * gi})},
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 6000})},
		{Name: "team-a", Parent: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 3000, api.Memory: 4 * gi})},
		{Name: "team-b", Parent: "org"},
		{Name: "other"},
	}
	l := lgLedger(t, specs)
	for _, r := range []ReserveRequest{
		lgReq("a1", "team-a", res(2000, 2*gi)),
		lgReq("b1", "team-b", res(3000, gi)),
		lgReq("o1", "other", res(4000, gi)),
	} {
		if _, _, err := l.Reserve(r); err != nil {
			t.Fatalf("%s: %v", r.Job.UID, err)
		}
	}
	// Usage now: team-a 2000, org 5000, root 9000 (cpu).
	cases := []struct {
		name   string
		req    ReserveRequest
		want   QuotaError
		inText []string
	}{
		{
			// Short at team-a (by 1500), org (by 2500) and root (by 1500):
			// the leaf is named.
			name: "leaf first",
			req:  lgReq("x1", "team-a", res(2500, 0)),
			want: QuotaError{Queue: "team-a", Resource: api.CPU, Reserved: 2000, Asked: 2500, Capability: 3000, Short: 1500},
		},
		{
			// team-b is unlimited; org short by 1000 and root by 0: org.
			name: "middle",
			req:  lgReq("x2", "team-b", res(2000, 0)),
			want: QuotaError{Queue: "org", Resource: api.CPU, Reserved: 5000, Asked: 2000, Capability: 6000, Short: 1000},
		},
		{
			// other is unlimited; only the root is short.
			name: "root",
			req:  lgReq("x3", "other", res(1250, 0)),
			want: QuotaError{Queue: api.RootQueue, Resource: api.CPU, Reserved: 9000, Asked: 1250, Capability: 10000, Short: 250},
		},
		{
			// cpu fits everywhere; memory is short at the leaf only.
			name: "memory at the leaf",
			req:  lgReq("x4", "team-a", res(500, 3*gi)),
			want: QuotaError{Queue: "team-a", Resource: api.Memory, Reserved: 2 * gi, Asked: 3 * gi, Capability: 4 * gi, Short: gi},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := lgSnap(l)
			_, _, err := l.Reserve(tc.req)
			qe := lgQuota(t, err)
			if *qe != tc.want {
				t.Fatalf("refusal %+v, want %+v", *qe, tc.want)
			}
			if !strings.Contains(err.Error(), `"`+tc.want.Queue+`"`) || !strings.Contains(err.Error(), tc.want.Resource) {
				t.Fatalf("message %q does not name queue %q and resource %q", err, tc.want.Queue, tc.want.Resource)
			}
			lgSame(t, tc.name, before, l)
		})
	}
}

func TestLedgerUnsetDimensionsUnlimited(t *testing.T) {
	l := lgLedger(t, []api.QueueSpec{
		{Name: "cpu-only", Capability: lgLimit(t, map[string]int64{api.CPU: 1000})},
		{Name: "leaf", Parent: "cpu-only"},
		{Name: "free"},
	})
	huge := int64(1) << 50
	if _, _, err := l.Reserve(lgReq("m", "leaf", api.NewResource(1000, huge, map[string]int64{lgGPU: 1000}))); err != nil {
		t.Fatalf("memory and gpu are unset on every level, so unlimited: %v", err)
	}
	if _, _, err := l.Reserve(lgReq("f", "free", api.NewResource(1<<40, huge, map[string]int64{lgGPU: 1 << 20}))); err != nil {
		t.Fatalf("a queue with no capability anywhere on its path is unlimited: %v", err)
	}
	_, _, err := l.Reserve(lgReq("c", "leaf", res(1, 0)))
	if qe := lgQuota(t, err); qe.Queue != "cpu-only" || qe.Resource != api.CPU || qe.Short != 1 {
		t.Fatalf("refusal %+v, want cpu-only short of cpu by 1m", qe)
	}
	lgUsage(t, l, api.RootQueue, api.NewResource(1000+1<<40, 2*huge, map[string]int64{lgGPU: 1000 + 1<<20}))

	// A capability set to zero is a bound, not "unset".
	l2 := lgLedger(t, []api.QueueSpec{{Name: "zero", Capability: lgLimit(t, map[string]int64{lgGPU: 0})}})
	if _, _, err := l2.Reserve(lgReq("z", "zero", res(100, gi))); err != nil {
		t.Fatalf("no gpu asked of a gpu=0 queue: %v", err)
	}
	_, _, err = l2.Reserve(lgReq("g", "zero", api.NewResource(100, 0, map[string]int64{lgGPU: 1})))
	if qe := lgQuota(t, err); qe.Queue != "zero" || qe.Resource != lgGPU || qe.Short != 1 {
		t.Fatalf("refusal %+v, want zero short of %s by 1", qe, lgGPU)
	}
}

func TestLedgerScalarsCounted(t *testing.T) {
	l := lgLedger(t, []api.QueueSpec{
		{Name: "gpu-org", Capability: lgLimit(t, map[string]int64{lgGPU: 8})},
		{Name: "gpu-a", Parent: "gpu-org", Capability: lgLimit(t, map[string]int64{lgGPU: 4})},
		{Name: "gpu-b", Parent: "gpu-org"},
	})
	gpus := func(n int64) api.Resource { return api.NewResource(1000, gi, map[string]int64{lgGPU: n}) }
	if _, _, err := l.Reserve(lgReq("a1", "gpu-a", gpus(3))); err != nil {
		t.Fatal(err)
	}
	_, _, err := l.Reserve(lgReq("a2", "gpu-a", gpus(2)))
	if qe := lgQuota(t, err); qe.Queue != "gpu-a" || qe.Resource != lgGPU || qe.Short != 1 || qe.Reserved != 3 || qe.Asked != 2 || qe.Capability != 4 {
		t.Fatalf("refusal %+v, want gpu-a short of %s by 1", qe, lgGPU)
	}
	if !strings.Contains(err.Error(), lgGPU) {
		t.Fatalf("message %q does not name %s", err, lgGPU)
	}
	if _, _, err := l.Reserve(lgReq("b1", "gpu-b", gpus(5))); err != nil {
		t.Fatalf("b1: 3+5 = 8 gpus fit gpu-org: %v", err)
	}
	if got := l.Usage("gpu-org").Get(lgGPU); got != 8 {
		t.Fatalf("gpu-org holds %d gpus, want 8", got)
	}
	if got := l.Usage(api.RootQueue).Get(lgGPU); got != 8 {
		t.Fatalf("root holds %d gpus, want 8", got)
	}
	_, _, err = l.Reserve(lgReq("b2", "gpu-b", gpus(1)))
	if qe := lgQuota(t, err); qe.Queue != "gpu-org" || qe.Resource != lgGPU || qe.Short != 1 {
		t.Fatalf("refusal %+v, want gpu-org short of %s by 1", qe, lgGPU)
	}
	// Releasing gives the scalar back at every level.
	if _, found := l.Release("a1"); !found {
		t.Fatal("a1 not found")
	}
	lgUsage(t, l, "gpu-a", api.Resource{})
	if got := l.Usage("gpu-org").Get(lgGPU); got != 5 {
		t.Fatalf("gpu-org holds %d gpus after releasing a1, want 5", got)
	}
	if _, _, err := l.Reserve(lgReq("b2", "gpu-b", gpus(3))); err != nil {
		t.Fatalf("b2 after release: %v", err)
	}
}

func TestLedgerIdempotentByUID(t *testing.T) {
	l := lgLedger(t, []api.QueueSpec{
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 4000})},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org"},
	})
	req := ReserveRequest{Job: JobRef{Namespace: "ns", Name: "job", UID: "u1"}, Queue: "team-a", Amount: res(3000, gi), Lease: 42, Shard: "s1"}
	first, existed, err := l.Reserve(req)
	if err != nil || existed {
		t.Fatalf("first reserve: existed=%v err=%v", existed, err)
	}
	if first.State != Tentative || first.Lease != 42 || first.Shard != "s1" {
		t.Fatalf("first reservation %+v, want tentative on lease 42 of s1", first)
	}
	before := lgSnap(l)
	// A retry, even one that asks another amount, returns the reservation
	// that exists and counts nothing twice (another queue is a move:
	// TestLedgerReserveMovesToAnotherQueue).
	for _, retry := range []ReserveRequest{
		req,
		{Job: JobRef{Namespace: "other", Name: "renamed", UID: "u1"}, Queue: "team-a", Amount: res(3500, 9*gi), Lease: 42},
		{Job: JobRef{UID: "u1"}, Queue: "team-a", Amount: res(-1, 0)},
		{Job: JobRef{UID: "u1"}, Amount: res(1, 0)},
	} {
		got, existed, err := l.Reserve(retry)
		if err != nil || !existed {
			t.Fatalf("retry %+v: existed=%v err=%v, want the existing reservation", retry, existed, err)
		}
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("retry returned %+v, want %+v", got, first)
		}
		lgSame(t, "retried reserve", before, l)
	}
	// A retry from another shard session (the queue changed owner) gets
	// the same reservation, moved to its lease; nothing else changes.
	moved, existed, err := l.Reserve(ReserveRequest{Job: JobRef{UID: "u1"}, Queue: "team-a", Amount: res(1, 0), Lease: 7, Shard: "s2"})
	if err != nil || !existed || moved.Lease != 7 || moved.Shard != "s2" || !moved.Amount.Equal(first.Amount) || moved.Queue != "team-a" {
		t.Fatalf("re-reserve from another lease: %+v existed=%v err=%v; want the same reservation on lease 7 of s2", moved, existed, err)
	}
	// Same namespace/name, another UID: another job, which does not fit.
	_, _, err = l.Reserve(ReserveRequest{Job: JobRef{Namespace: "ns", Name: "job", UID: "u2"}, Queue: "team-a", Amount: res(3000, gi)})
	if qe := lgQuota(t, err); qe.Queue != "org" || qe.Short != 2000 {
		t.Fatalf("refusal %+v, want org short by 2000m", qe)
	}
	// Confirm is idempotent and keeps usage.
	for i := 0; i < 2; i++ {
		c, err := l.Confirm("u1")
		if err != nil || c.State != Confirmed || c.Lease != 0 {
			t.Fatalf("confirm %d: %+v %v", i, c, err)
		}
	}
	lgUsage(t, l, "org", res(3000, gi))
	if _, err := l.Confirm("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("confirm of an unknown uid: %v, want ErrNotFound", err)
	}
	// Release once frees; again finds nothing and changes nothing.
	if r, found := l.Release("u1"); !found || r.Job.UID != "u1" {
		t.Fatalf("release: %+v %v", r, found)
	}
	after := lgSnap(l)
	if _, found := l.Release("u1"); found {
		t.Fatal("second release found the reservation again")
	}
	lgSame(t, "second release", after, l)
	lgUsage(t, l, "org", api.Resource{})
	lgUsage(t, l, api.RootQueue, api.Resource{})
	// The UID may be reserved again once released.
	if _, existed, err := l.Reserve(req); err != nil || existed {
		t.Fatalf("reserve after release: existed=%v err=%v", existed, err)
	}
	if l.Len() != 1 {
		t.Fatalf("ledger holds %d reservations, want 1", l.Len())
	}
}

func TestLedgerSetTreeInvalidLeavesLedgerUnchanged(t *testing.T) {
	specs := []api.QueueSpec{
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 4000})},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org"},
	}
	l := lgLedger(t, specs)
	for _, r := range []ReserveRequest{lgReq("u1", "team-a", res(1000, gi)), lgReq("u2", "team-b", res(2000, gi))} {
		if _, _, err := l.Reserve(r); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct {
		name  string
		specs []api.QueueSpec
		words []string
	}{
		{"cycle", []api.QueueSpec{{Name: "org"}, {Name: "team-a", Parent: "team-b"}, {Name: "team-b", Parent: "team-a"}}, []string{"cycle", "team-a", "team-b"}},
		{"unknown parent", []api.QueueSpec{{Name: "org"}, {Name: "team-a", Parent: "ghost"}, {Name: "team-b", Parent: "org"}}, []string{"team-a", "ghost"}},
		{"duplicate", []api.QueueSpec{{Name: "org"}, {Name: "org"}}, []string{"org"}},
		{"empty name", []api.QueueSpec{{Name: "", Parent: "org"}, {Name: "org"}}, []string{"empty name"}},
		{"child above parent", []api.QueueSpec{
			{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 4000})},
			{Name: "team-a", Parent: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 5000})},
			{Name: "team-b", Parent: "org"},
		}, []string{"team-a", "org"}},
		{"negative deserved", []api.QueueSpec{{Name: "org", Deserved: res(-1, 0)}, {Name: "team-a", Parent: "org"}, {Name: "team-b", Parent: "org"}}, []string{"org"}},
		{"root with a parent", []api.QueueSpec{{Name: api.RootQueue, Parent: "org"}, {Name: "org"}}, []string{"root"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			before := lgSnap(l)
			tree, err := l.SetTree(tc.specs)
			if !errors.Is(err, ErrInvalid) || tree != nil {
				t.Fatalf("SetTree: tree=%v err=%v, want ErrInvalid and no tree", tree, err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name %q", err, w)
				}
			}
			lgSame(t, tc.name, before, l)
			// The ledger still works on the old tree.
			_, _, err = l.Reserve(lgReq("probe", "team-a", res(1500, 0)))
			if qe := lgQuota(t, err); qe.Queue != "org" || qe.Short != 500 {
				t.Fatalf("probe refusal %+v, want org short by 500m", qe)
			}
		})
	}
}

func TestLedgerRestoreAndRecomputeOnMove(t *testing.T) {
	specs := []api.QueueSpec{
		{Name: "org-a", Capability: lgLimit(t, map[string]int64{api.CPU: 4000})},
		{Name: "org-b", Capability: lgLimit(t, map[string]int64{api.CPU: 10000})},
		{Name: "team", Parent: "org-a"},
		{Name: "stay", Parent: "org-b"},
	}
	l := lgLedger(t, specs)
	// Restore as storage holds it: a confirmed reservation and a tentative
	// one whose stored path is stale (the tree decides the path).
	l.Restore(Reservation{Job: JobRef{Namespace: "ns", Name: "j1", UID: "u1"}, Queue: "team",
		Path: []string{"team", "org-a", api.RootQueue}, Amount: res(3000, gi), State: Confirmed})
	l.Restore(Reservation{Job: JobRef{Namespace: "ns", Name: "j2", UID: "u2"}, Queue: "stay",
		Path: []string{"stay", "long-gone", api.RootQueue}, Amount: res(1000, gi), State: Tentative, Lease: 9, Shard: "s"})
	lgUsage(t, l, "team", res(3000, gi))
	lgUsage(t, l, "org-a", res(3000, gi))
	lgUsage(t, l, "org-b", res(1000, gi))
	lgUsage(t, l, "long-gone", api.Resource{})
	lgUsage(t, l, api.RootQueue, res(4000, 2*gi))
	if r, _ := l.Get("u2"); !reflect.DeepEqual(r.Path, []string{"stay", "org-b", api.RootQueue}) || r.State != Tentative || r.Lease != 9 {
		t.Fatalf("restored u2 %+v, want path stay/org-b/root, tentative on lease 9", r)
	}
	// Restoring a UID again replaces it instead of counting it twice.
	l.Restore(Reservation{Job: JobRef{Namespace: "ns", Name: "j1", UID: "u1"}, Queue: "team",
		Path: []string{"team", "org-a", api.RootQueue}, Amount: res(2000, gi), State: Confirmed})
	lgUsage(t, l, "org-a", res(2000, gi))
	lgUsage(t, l, api.RootQueue, res(3000, 2*gi))
	if l.Len() != 2 {
		t.Fatalf("ledger holds %d reservations, want 2", l.Len())
	}
	// Restored usage counts against capabilities.
	_, _, err := l.Reserve(lgReq("u3", "team", res(2500, 0)))
	if qe := lgQuota(t, err); qe.Queue != "org-a" || qe.Reserved != 2000 || qe.Short != 500 {
		t.Fatalf("refusal %+v, want org-a short by 500m with 2000m reserved", qe)
	}

	// Move team under org-b: its usage follows it.
	moved := []api.QueueSpec{specs[0], specs[1], {Name: "team", Parent: "org-b"}, specs[3]}
	if _, err := l.SetTree(moved); err != nil {
		t.Fatal(err)
	}
	lgUsage(t, l, "org-a", api.Resource{})
	lgUsage(t, l, "org-b", res(3000, 2*gi))
	lgUsage(t, l, "team", res(2000, gi))
	lgUsage(t, l, api.RootQueue, res(3000, 2*gi))
	if r, _ := l.Get("u1"); !reflect.DeepEqual(r.Path, []string{"team", "org-b", api.RootQueue}) {
		t.Fatalf("u1 path after the move %v, want team/org-b/root", r.Path)
	}
	if _, _, err := l.Reserve(lgReq("u3", "team", res(2500, 0))); err != nil {
		t.Fatalf("u3 fits org-b after the move: %v", err)
	}
	if _, _, err := l.Reserve(lgReq("u4", "team", res(5000, 0))); err == nil {
		t.Fatal("u4 (3000+2500+5000 > 10000 at org-b) admitted")
	} else if qe := lgQuota(t, err); qe.Queue != "org-b" || qe.Reserved != 5500 || qe.Short != 500 {
		t.Fatalf("refusal %+v, want org-b short by 500m with 5500m reserved", qe)
	}
	// Releasing after the move takes the amount off the new path.
	if _, found := l.Release("u1"); !found {
		t.Fatal("u1 not found")
	}
	lgUsage(t, l, "org-b", res(3500, gi))
	lgUsage(t, l, "org-a", api.Resource{})
	lgUsage(t, l, "team", res(2500, 0))

	// Move it back under a parent whose capability is now below its usage:
	// nothing is cancelled, new reservations are blocked.
	back := []api.QueueSpec{{Name: "org-a", Capability: lgLimit(t, map[string]int64{api.CPU: 2000})}, specs[1], specs[2], specs[3]}
	if _, err := l.SetTree(back); err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 {
		t.Fatalf("ledger holds %d reservations after the capability fell, want 2", l.Len())
	}
	lgUsage(t, l, "org-a", res(2500, 0))
	_, _, err = l.Reserve(lgReq("u5", "team", res(1, 0)))
	if qe := lgQuota(t, err); qe.Queue != "org-a" || qe.Short != 501 {
		t.Fatalf("refusal %+v, want org-a short by 501m", qe)
	}
}

// A PodGroup moved to another queue: a reserve naming the new queue moves
// the reservation, amount unchanged, if it fits on every level of the new
// path the old one does not share; a level on both paths keeps its usage
// (even over a capability lowered below it). Refused or invalid, nothing
// changes.
func TestLedgerReserveMovesToAnotherQueue(t *testing.T) {
	l := lgLedger(t, []api.QueueSpec{
		{Name: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 6000})},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org", Capability: lgLimit(t, map[string]int64{api.CPU: 3000})},
		{Name: "lab", Capability: lgLimit(t, map[string]int64{api.CPU: 2000})},
	})
	if _, _, err := l.Reserve(lgReq("u1", "team-a", res(3000, gi))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Reserve(lgReq("u2", "team-a", res(3000, gi))); err != nil {
		t.Fatal(err)
	}
	// org is full (6 of 6), but a move within org does not change its use.
	r, existed, err := l.Reserve(lgReq("u1", "team-b", res(1, 0)))
	if err != nil || !existed || r.Queue != "team-b" || !r.Amount.Equal(res(3000, gi)) {
		t.Fatalf("move within org: %+v existed=%v err=%v", r, existed, err)
	}
	if want := []string{"team-b", "org", api.RootQueue}; !reflect.DeepEqual(r.Path, want) {
		t.Fatalf("moved path %v, want %v", r.Path, want)
	}
	lgUsage(t, l, "team-a", res(3000, gi))
	lgUsage(t, l, "team-b", res(3000, gi))
	lgUsage(t, l, "org", res(6000, 2*gi))
	lgUsage(t, l, api.RootQueue, res(6000, 2*gi))
	// team-b is full now: u2 cannot follow; lab caps 2 CPU: u2 cannot go
	// there either; an unknown queue is invalid. Nothing changes.
	before := lgSnap(l)
	_, _, err = l.Reserve(lgReq("u2", "team-b", res(3000, gi)))
	if qe := lgQuota(t, err); qe.Queue != "team-b" || qe.Short != 3000 {
		t.Fatalf("refusal %+v, want team-b short by 3000m", qe)
	}
	_, _, err = l.Reserve(lgReq("u2", "lab", res(3000, gi)))
	if qe := lgQuota(t, err); qe.Queue != "lab" || qe.Short != 1000 {
		t.Fatalf("refusal %+v, want lab short by 1000m", qe)
	}
	if _, _, err := l.Reserve(lgReq("u2", "no-such-queue", res(3000, gi))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("move to an unknown queue: %v, want ErrInvalid", err)
	}
	lgSame(t, "refused moves", before, l)
	// Out of org into lab once u2 is small enough to fit: org and team-a
	// are freed, lab and root (on both paths) keep the sum.
	if _, _, _, err := l.Resize(ResizeRequest{UID: "u2", Targets: []api.Resource{res(2000, gi)}}); err != nil {
		t.Fatal(err)
	}
	if r, _, err := l.Reserve(lgReq("u2", "lab", res(1, 0))); err != nil || r.Queue != "lab" {
		t.Fatalf("move to lab: %+v %v", r, err)
	}
	lgUsage(t, l, "team-a", api.Resource{})
	lgUsage(t, l, "org", res(3000, gi))
	lgUsage(t, l, "lab", res(2000, gi))
	lgUsage(t, l, api.RootQueue, res(5000, 2*gi))
	// Released from where it went.
	if _, found := l.Release("u2"); !found {
		t.Fatal("u2 not found")
	}
	lgUsage(t, l, "lab", api.Resource{})
	lgUsage(t, l, api.RootQueue, res(3000, gi))
}
