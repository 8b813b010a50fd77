package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/shardsched/shardsched/api"
)

// Direct tests of one leadership term (term.go): apply, dedupeOps and the
// commit paths that failover runs reach only by chance. The apply tests need
// no etcd, because apply only changes the ledger and builds operations; the
// commit tests lead a term on an embedded etcd without running a Server.

// tmTerm returns a term over a ledger of specs (nil: root and default
// queues only) with no etcd behind it.
func tmTerm(t *testing.T, specs []api.QueueSpec) *term {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Prefix = "/test/coordinator"
	s := &Server{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	tr := &term{s: s, ledger: NewLedger(nil), revs: map[string]int64{}}
	if specs != nil {
		if _, err := tr.ledger.SetTree(specs); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// tmSpecs is one queue q under the root, capped at cpu millicores.
func tmSpecs(t *testing.T, cpu int64) []api.QueueSpec {
	return []api.QueueSpec{{Name: "q", Capability: limit(t, cpu, 64*gi)}}
}

// tmReserve is a reserve call for job uid in queue q.
func tmReserve(uid string, milliCPU, lease int64, terms *Terms) *call {
	return &call{kind: opReserve, reserve: ReserveRequest{
		Job: JobRef{Namespace: "ns", Name: uid, UID: uid}, Queue: "q", Amount: res(milliCPU, gi),
		Lease: lease, Shard: "shard", Terms: terms,
	}, done: make(chan result, 1)}
}

// tmCall is a call of kind on uid.
func tmCall(kind opKind, uid string) *call {
	return &call{kind: kind, uid: uid, done: make(chan result, 1)}
}

// tmApply applies c and fails the test if apply itself reports an error
// (apply answers refusals in the result, not in its error).
func tmApply(t *testing.T, tr *term, c *call) (result, []clientv3.Op) {
	t.Helper()
	got, ops, err := tr.apply(c)
	if err != nil {
		t.Fatalf("apply %s: error %v", c.kind, err)
	}
	return got, ops
}

// tmOps describes operations as "put KEY" or "del KEY", the key without the
// reservation prefix.
func tmOps(tr *term, ops []clientv3.Op) []string {
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		key := string(op.KeyBytes())
		if p := tr.s.cfg.resPrefix(); len(key) > len(p) && key[:len(p)] == p {
			key = key[len(p):]
		}
		switch {
		case op.IsPut():
			out = append(out, "put "+key)
		case op.IsDelete():
			out = append(out, "del "+key)
		default:
			out = append(out, "other "+key)
		}
	}
	return out
}

// tmWritten decodes the reservation a put writes.
func tmWritten(t *testing.T, op clientv3.Op) Reservation {
	t.Helper()
	var r Reservation
	if err := json.Unmarshal(op.ValueBytes(), &r); err != nil {
		t.Fatalf("put of %s: %v", op.KeyBytes(), err)
	}
	return r
}

// tmAnswer returns the answer a commit gave c; commit answers before it
// returns, so an empty channel is a call left unanswered.
func tmAnswer(t *testing.T, c *call) result {
	t.Helper()
	select {
	case r := <-c.done:
		return r
	default:
		t.Fatalf("%s call was not answered", c.kind)
		return result{}
	}
}

func TestTermApplyReserveWritesOnlyWhatChanged(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))

	got, ops := tmApply(t, tr, tmReserve("a", 1000, 7, nil))
	if got.err != nil || got.Reservation == nil || got.Existed {
		t.Fatalf("first reserve: %+v, want a new reservation", got)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"put a"}) {
		t.Fatalf("first reserve writes %v, want [put a]", d)
	}
	if w := tmWritten(t, ops[0]); w.State != Tentative || w.Lease != 7 || w.Amount.MilliCPU != 1000 {
		t.Fatalf("first reserve stores %+v, want tentative under lease 7 with 1000m", w)
	}

	// A retry by the same shard finds the reservation as stored: nothing to
	// write, so its group commits no operation for it.
	got, ops = tmApply(t, tr, tmReserve("a", 1000, 7, nil))
	if got.err != nil || !got.Existed {
		t.Fatalf("retried reserve: %+v, want existed", got)
	}
	if len(ops) != 0 {
		t.Fatalf("retried reserve writes %v, want nothing", tmOps(tr, ops))
	}

	// Another shard's lease takes the reservation over: it is written again,
	// under the new lease, or it would vanish with the old one.
	got, ops = tmApply(t, tr, tmReserve("a", 1000, 8, nil))
	if got.err != nil || !got.Existed || got.Reservation.Lease != 8 {
		t.Fatalf("reserve under another lease: %+v, want existed under lease 8", got)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"put a"}) {
		t.Fatalf("reserve under another lease writes %v, want [put a]", d)
	}
	if w := tmWritten(t, ops[0]); w.Lease != 8 {
		t.Fatalf("reserve under another lease stores lease %d, want 8", w.Lease)
	}
	if u := tr.ledger.Usage("q"); u.MilliCPU != 1000 {
		t.Fatalf("q uses %dm after three reserves of one job, want 1000m", u.MilliCPU)
	}
}

func TestTermApplyRefusalsWriteNothing(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))

	got, ops := tmApply(t, tr, tmReserve("big", 5000, 7, nil))
	var qe *QuotaError
	if !errors.As(got.err, &qe) || qe.Queue != "q" {
		t.Fatalf("reserve over capability: %v, want a QuotaError at q", got.err)
	}
	if len(ops) != 0 || tr.ledger.Len() != 0 {
		t.Fatalf("refused reserve wrote %v and left %d reservations, want neither", tmOps(tr, ops), tr.ledger.Len())
	}

	got, ops = tmApply(t, tr, tmReserve("", 1000, 7, nil))
	if !errors.Is(got.err, ErrInvalid) || len(ops) != 0 {
		t.Fatalf("reserve with no UID: %v writing %v, want ErrInvalid writing nothing", got.err, tmOps(tr, ops))
	}

	got, ops = tmApply(t, tr, tmCall(opConfirm, "nobody"))
	if !errors.Is(got.err, ErrNotFound) || len(ops) != 0 {
		t.Fatalf("confirm of an unknown UID: %v writing %v, want ErrNotFound writing nothing", got.err, tmOps(tr, ops))
	}

	got, ops = tmApply(t, tr, tmCall(opKind(99), "x"))
	if !errors.Is(got.err, ErrInvalid) || len(ops) != 0 {
		t.Fatalf("unknown operation: %v writing %v, want ErrInvalid writing nothing", got.err, tmOps(tr, ops))
	}
}

// A resize refused part way (here a target that overflows) after the
// bound's raise changed the reservation writes what the ledger now holds,
// so that etcd and the ledger agree; one refused before any change writes
// nothing.
func TestTermApplyResizeRefusedPartWayWritesWhatChanged(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))
	for _, uid := range []string{"a", "b"} {
		if got, _ := tmApply(t, tr, tmReserve(uid, 1000, 7, nil)); got.err != nil {
			t.Fatal(got.err)
		}
	}
	resize := func(bound int64, target api.Resource) *call {
		b := res(bound, gi)
		return &call{kind: opResize, resize: ResizeRequest{UID: "a", Bound: &b, Targets: []api.Resource{target}}, done: make(chan result, 1)}
	}
	huge := api.Resource{MilliCPU: math.MaxInt64, Memory: gi}
	got, ops := tmApply(t, tr, resize(2000, huge))
	if got.err == nil {
		t.Fatal("a target that overflows the queue's usage was taken")
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"put a"}) {
		t.Fatalf("refused after the raise, writes %v, want [put a]", d)
	}
	if w := tmWritten(t, ops[0]); w.Amount.MilliCPU != 2000 {
		t.Fatalf("stores %dm, want the raised 2000m", w.Amount.MilliCPU)
	}
	got, ops = tmApply(t, tr, resize(2000, huge))
	if got.err == nil || len(ops) != 0 {
		t.Fatalf("refused with nothing changed: %v writing %v, want an error writing nothing", got.err, tmOps(tr, ops))
	}
}

func TestTermApplyConfirmAndRelease(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))
	tmApply(t, tr, tmReserve("a", 1000, 7, nil))

	got, ops := tmApply(t, tr, tmCall(opConfirm, "a"))
	if got.err != nil || got.Reservation == nil || got.Reservation.State != Confirmed {
		t.Fatalf("confirm: %+v, want a confirmed reservation", got)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"put a"}) {
		t.Fatalf("confirm writes %v, want [put a]", d)
	}
	if w := tmWritten(t, ops[0]); w.State != Confirmed || w.Lease != 0 {
		t.Fatalf("confirm stores %+v, want confirmed with no lease", w)
	}

	got, ops = tmApply(t, tr, tmCall(opConfirm, "a"))
	if got.err != nil || len(ops) != 0 {
		t.Fatalf("second confirm: %v writing %v, want success writing nothing", got.err, tmOps(tr, ops))
	}

	got, ops = tmApply(t, tr, tmCall(opRelease, "a"))
	if got.err != nil || !got.Found || got.Reservation == nil || got.Reservation.Job.UID != "a" {
		t.Fatalf("release: %+v, want a found", got)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"del a"}) {
		t.Fatalf("release writes %v, want [del a]", d)
	}
	if u := tr.ledger.Usage("q"); u.MilliCPU != 0 {
		t.Fatalf("q uses %dm after the release, want 0", u.MilliCPU)
	}

	got, ops = tmApply(t, tr, tmCall(opRelease, "a"))
	if got.err != nil || got.Found || len(ops) != 0 {
		t.Fatalf("second release: %+v writing %v, want not found writing nothing", got, tmOps(tr, ops))
	}
}

// TestTermApplyExpiry checks the rule that keeps a lease expiry from
// releasing a reservation the term has written since: a deletion counts only
// if it is newer than the term's last write of the key.
func TestTermApplyExpiry(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))
	for _, uid := range []string{"a", "b", "c"} {
		tmApply(t, tr, tmReserve(uid, 1000, 7, nil))
	}
	tr.revs["a"] = 100        // written at revision 100
	tr.revs["b"] = pendingRev // being written by the group in flight
	// c has no recorded write: the term never wrote it.

	expire := func(uid string, delRev int64) {
		t.Helper()
		c := tmCall(opExpire, uid)
		c.delRev = delRev
		got, ops := tmApply(t, tr, c)
		if got.err != nil || len(ops) != 0 {
			t.Fatalf("expiry of %s at %d: %v writing %v, want nothing written", uid, delRev, got.err, tmOps(tr, ops))
		}
	}
	has := func(uid string) bool { _, ok := tr.ledger.Get(uid); return ok }

	expire("a", 90) // the expiry of a version older than our write
	if !has("a") || tr.revs["a"] != 100 {
		t.Fatalf("a stale deletion released a (in ledger %v, rev %d)", has("a"), tr.revs["a"])
	}
	expire("b", 1<<40)
	if !has("b") {
		t.Fatal("a deletion seen while b's write is in flight released b")
	}
	expire("c", 1<<40)
	if !has("c") {
		t.Fatal("a deletion of a key the term never wrote released c")
	}
	expire("a", 101)
	if has("a") {
		t.Fatal("the expiry of a's own write did not release it")
	}
	if _, ok := tr.revs["a"]; ok {
		t.Fatal("a released by expiry still has a recorded revision")
	}
	if u := tr.ledger.Usage("q"); u.MilliCPU != 2000 {
		t.Fatalf("q uses %dm after one of three expired, want 2000m", u.MilliCPU)
	}
}

// TestTermApplyWritesVictims checks that apply adds, after the call's own
// write, the writes of the reservations the call changed as a side effect:
// a victim marked by a nominee, and unmarked when the nominee goes.
func TestTermApplyWritesVictims(t *testing.T) {
	tr := tmTerm(t, tmSpecs(t, 4000))
	tmApply(t, tr, tmReserve("low", 4000, 7, &Terms{Priority: 1, Created: 1}))
	tmApply(t, tr, tmCall(opConfirm, "low"))

	got, ops := tmApply(t, tr, tmReserve("high", 2000, 9, &Terms{Priority: 10, Created: 2, Reclaim: true}))
	if got.err != nil || got.Reservation == nil || got.Reservation.State != Nominated {
		t.Fatalf("reserve with reclaim: %+v, want a nominated reservation", got)
	}
	if len(got.Victims) != 1 || got.Victims[0].Job.UID != "low" {
		t.Fatalf("victims %+v, want [low]", got.Victims)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"put high", "put low"}) {
		t.Fatalf("nominating reserve writes %v, want [put high put low]", d)
	}
	if w := tmWritten(t, ops[0]); w.State != Nominated || w.Lease != 9 {
		t.Fatalf("nominee stored as %+v, want nominated under lease 9", w)
	}
	if w := tmWritten(t, ops[1]); w.Evict == nil || w.Evict.By.UID != "high" {
		t.Fatalf("victim stored as %+v, want marked for high", w)
	}

	// The nominee goes: its plan is undone, and the victim's unmarking is
	// written in the same group as the nominee's delete.
	got, ops = tmApply(t, tr, tmCall(opRelease, "high"))
	if got.err != nil || !got.Found {
		t.Fatalf("release of the nominee: %+v", got)
	}
	if d := tmOps(tr, ops); !slices.Equal(d, []string{"del high", "put low"}) {
		t.Fatalf("nominee release writes %v, want [del high put low]", d)
	}
	if w := tmWritten(t, ops[1]); w.Evict != nil || w.State != Confirmed {
		t.Fatalf("victim stored as %+v, want confirmed and unmarked", w)
	}
	// Nothing is left to write: the next call carries no stale side effect.
	if _, ops = tmApply(t, tr, tmCall(opList, "")); len(ops) != 0 {
		t.Fatalf("a list after the release writes %v, want nothing", tmOps(tr, ops))
	}
}

func TestTermApplySetTreeAndReads(t *testing.T) {
	tr := tmTerm(t, nil)
	c := &call{kind: opSetTree, specs: tmSpecs(t, 4000), done: make(chan result, 1)}
	got, ops := tmApply(t, tr, c)
	if got.err != nil || len(ops) != 1 || !ops[0].IsPut() || string(ops[0].KeyBytes()) != tr.s.cfg.treeKey() {
		t.Fatalf("set tree: %v writing %v, want one put of the tree key", got.err, tmOps(tr, ops))
	}
	var stored []api.QueueSpec
	if err := json.Unmarshal(ops[0].ValueBytes(), &stored); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(stored, func(s api.QueueSpec) bool { return s.Name == "q" }) {
		t.Fatalf("stored tree %+v has no queue q", stored)
	}

	tmApply(t, tr, tmReserve("a", 1000, 7, nil))
	got, ops = tmApply(t, tr, tmCall(opList, ""))
	if got.err != nil || len(ops) != 0 || len(got.Reservations) != 1 || got.Reservations[0].Job.UID != "a" {
		t.Fatalf("list: %+v writing %v, want [a] writing nothing", got, tmOps(tr, ops))
	}
	got, ops = tmApply(t, tr, tmCall(opEvicting, ""))
	if got.err != nil || len(ops) != 0 || len(got.Reservations) != 0 {
		t.Fatalf("evicting: %+v writing %v, want nothing marked and nothing written", got, tmOps(tr, ops))
	}
}

func TestDedupeOps(t *testing.T) {
	put := func(k, v string) clientv3.Op { return clientv3.OpPut(k, v) }
	del := func(k string) clientv3.Op { return clientv3.OpDelete(k) }
	describe := func(ops []clientv3.Op) []string {
		var out []string
		for _, op := range ops {
			if op.IsPut() {
				out = append(out, fmt.Sprintf("put %s=%s", op.KeyBytes(), op.ValueBytes()))
			} else {
				out = append(out, fmt.Sprintf("del %s", op.KeyBytes()))
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []clientv3.Op
		want []string
	}{
		{"empty", nil, nil},
		{"distinct keys keep their order", []clientv3.Op{put("b", "1"), del("a"), put("c", "2")},
			[]string{"put b=1", "del a", "put c=2"}},
		{"the last put of a key wins", []clientv3.Op{put("a", "1"), put("a", "2")},
			[]string{"put a=2"}},
		{"a delete after a put wins", []clientv3.Op{put("a", "1"), put("b", "1"), del("a")},
			[]string{"put b=1", "del a"}},
		{"a put after a delete wins", []clientv3.Op{del("a"), put("a", "3")},
			[]string{"put a=3"}},
		{"each key at the place of its last op", []clientv3.Op{
			put("a", "1"), put("b", "1"), put("a", "2"), put("c", "1"), del("b"), put("d", "1"),
		}, []string{"put a=2", "put c=1", "del b", "put d=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(dedupeOps(tc.in)); !slices.Equal(got, tc.want) {
				t.Fatalf("dedupeOps = %v, want %v", got, tc.want)
			}
		})
	}
}

// tmLeading wins the election on the embedded etcd of ev with its own
// session and returns a term of that leadership, loaded from etcd, whose
// Server talks to etcd through cli. Nothing runs in the background: the test
// drives the term by calling commit.
func tmLeading(t *testing.T, ev *env, cli *clientv3.Client) (*term, *concurrency.Election) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	s, err := NewServer(cli, ev.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ln.Close() }) // Run is never called, so nothing else closes it
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ev.cfg.SessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	el := concurrency.NewElection(sess, ev.cfg.electionPrefix())
	if err := el.Campaign(ctx, s.Addr()); err != nil {
		t.Fatal(err)
	}
	tr := &term{s: s, key: el.Key(), rev: el.Rev()}
	if _, err := tr.load(ctx); err != nil {
		t.Fatal(err)
	}
	return tr, el
}

// tmCommitTree stores the queue tree through the term, so that a rebuild
// from etcd finds it.
func tmCommitTree(t *testing.T, ctx context.Context, tr *term, specs []api.QueueSpec) {
	t.Helper()
	c := &call{kind: opSetTree, specs: specs, done: make(chan result, 1)}
	if err := tr.commit(ctx, []*call{c}); err != nil {
		t.Fatal(err)
	}
	if got := tmAnswer(t, c); got.err != nil {
		t.Fatal(got.err)
	}
}

// TestTermCommitRebuildsAfterDeadLease drives the ambiguous-commit path: a
// group whose Txn fails (here, one call writes under a revoked lease) is
// thrown away, the ledger is rebuilt from etcd, and the group is applied
// again without the calls whose lease is dead. The answers must come from
// that second application: a call the first one refused for lack of quota
// (taken by the doomed call) now succeeds.
func TestTermCommitRebuildsAfterDeadLease(t *testing.T) {
	ctx, tr, cli := tmLeadingWithTree(t)

	live, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, dead.ID); err != nil {
		t.Fatal(err)
	}

	// Together they do not fit in q (3000m + 3000m > 4000m): in the first
	// application the doomed call takes the quota and the live one is refused.
	doomed := tmReserve("doomed", 3000, int64(dead.ID), nil)
	kept := tmReserve("kept", 3000, int64(live.ID), nil)
	groupBefore := tr.group
	if err := tr.commit(ctx, []*call{doomed, kept}); err != nil {
		t.Fatalf("commit: %v, want the group committed on a later attempt", err)
	}

	if got := tmAnswer(t, doomed); !errors.Is(got.err, ErrSessionExpired) {
		t.Fatalf("call under the revoked lease answered %+v, want ErrSessionExpired", got)
	}
	got := tmAnswer(t, kept)
	if got.err != nil || got.Reservation == nil || got.Existed || got.Reservation.Lease != int64(live.ID) {
		t.Fatalf("call under the live lease answered %+v (err %v), want a new reservation under its lease", got, got.err)
	}
	if want := (Seq{Term: tr.rev, Group: groupBefore + 2, Index: 1}); got.Seq != want {
		t.Fatalf("answer sequence %+v, want %+v (the second attempt)", got.Seq, want)
	}

	if _, ok := tr.ledger.Get("doomed"); ok {
		t.Fatal("the ledger keeps the reservation of the revoked lease")
	}
	if u := tr.ledger.Usage("q"); u.MilliCPU != 3000 {
		t.Fatalf("q uses %dm, want 3000m (the kept reservation only)", u.MilliCPU)
	}
	resp, err := cli.Get(ctx, tr.s.cfg.resPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != tr.s.cfg.resPrefix()+"kept" {
		t.Fatalf("etcd holds %d reservation keys, want only kept", len(resp.Kvs))
	}
	if kv := resp.Kvs[0]; kv.Lease != int64(live.ID) || tr.revs["kept"] != kv.ModRevision {
		t.Fatalf("kept stored under lease %x at revision %d, term recorded %d; want lease %x and the stored revision",
			kv.Lease, kv.ModRevision, tr.revs["kept"], live.ID)
	}
	if _, ok := tr.revs["doomed"]; ok {
		t.Fatal("the term records a write of the doomed reservation")
	}

	// What the term holds in memory is what a fresh rebuild reads back.
	before, _ := json.Marshal(tr.ledger.Reservations())
	if _, err := tr.load(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(tr.ledger.Reservations())
	if string(before) != string(after) {
		t.Fatalf("ledger after the commit:\n%s\nrebuilt from etcd:\n%s", before, after)
	}
}

// TestTermCommitSameKeyTwice commits a group that writes one key twice
// (reserved, then released): etcd refuses such a Txn, so the group commits
// only because dedupeOps keeps the last operation on the key.
func TestTermCommitSameKeyTwice(t *testing.T) {
	ctx, tr, cli := tmLeadingWithTree(t)

	reserve, release := tmReserve("x", 1000, 0, nil), tmCall(opRelease, "x")
	groupBefore := tr.group
	if err := tr.commit(ctx, []*call{reserve, release}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if tr.group != groupBefore+1 {
		t.Fatalf("the group took %d attempts, want 1", tr.group-groupBefore)
	}
	if got := tmAnswer(t, reserve); got.err != nil || got.Reservation == nil {
		t.Fatalf("reserve answered %+v (err %v)", got, got.err)
	}
	if got := tmAnswer(t, release); got.err != nil || !got.Found {
		t.Fatalf("release answered %+v (err %v), want found", got, got.err)
	}
	resp, err := cli.Get(ctx, tr.s.cfg.resPrefix()+"x")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 || tr.ledger.Len() != 0 {
		t.Fatalf("after reserve+release: %d keys in etcd, %d in the ledger; want none", len(resp.Kvs), tr.ledger.Len())
	}
}

// TestTermCommitAnswersEveryCallWhenRebuildFails: when the commit fails and
// the rebuild from etcd fails too, the term ends and every call of the group
// is answered ErrUnavailable (none is left waiting).
func TestTermCommitAnswersEveryCallWhenRebuildFails(t *testing.T) {
	ev := newEnv(t, 0, 5)
	// A request on a closed client waits out its whole timeout, and the
	// commit makes two (the Txn, then the rebuild): keep them short.
	ev.cfg.CommitTimeout = time.Second
	ctx := ctxT(t, 60*time.Second)
	cli := ev.etcdClient()
	tr, _ := tmLeading(t, ev, cli)
	tmCommitTree(t, ctx, tr, tmSpecs(t, 4000))

	cli.Close() // every etcd request of the term fails from now on
	calls := []*call{tmReserve("a", 1000, 0, nil), tmCall(opList, "")}
	if err := tr.commit(ctx, calls); err == nil {
		t.Fatal("commit on a closed client succeeded")
	}
	for _, c := range calls {
		if got := tmAnswer(t, c); !errors.Is(got.err, ErrUnavailable) {
			t.Fatalf("%s answered %v, want ErrUnavailable", c.kind, got.err)
		}
	}
}

// TestTermCommitAfterLosingLeadership: once the election key is gone the
// compare fails, every call is answered ErrNotLeader at once (no rebuild, no
// retry) and nothing is written.
func TestTermCommitAfterLosingLeadership(t *testing.T) {
	ev := newEnv(t, 0, 5)
	ctx := ctxT(t, 60*time.Second)
	cli := ev.etcdClient()
	t.Cleanup(func() { cli.Close() })
	tr, el := tmLeading(t, ev, cli)
	tmCommitTree(t, ctx, tr, tmSpecs(t, 4000))
	if err := el.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	calls := []*call{tmReserve("a", 1000, 0, nil), tmCall(opList, "")}
	groupBefore := tr.group
	if err := tr.commit(ctx, calls); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit after resigning: %v, want ErrNotLeader", err)
	}
	if tr.group != groupBefore+1 {
		t.Fatalf("the group took %d attempts, want 1 (no retry once not leader)", tr.group-groupBefore)
	}
	for _, c := range calls {
		if got := tmAnswer(t, c); !errors.Is(got.err, ErrNotLeader) {
			t.Fatalf("%s answered %v, want ErrNotLeader", c.kind, got.err)
		}
	}
	resp, err := cli.Get(ctx, tr.s.cfg.resPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d reservations written without leadership", resp.Count)
	}
}

// A call sent as its term ended may never be taken: once the term has
// ended, a call not answered is answered ErrNotLeader at once (not after
// its context's deadline); one answered before is given its answer.
func TestAwaitAnswerAfterTermEnded(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	ended := make(chan struct{})
	close(ended)

	stranded := &call{done: make(chan result, 1)}
	t0 := time.Now()
	if r := awaitAnswer(ctx, stranded, ended); !errors.Is(r.err, ErrNotLeader) {
		t.Fatalf("unanswered call after the term ended: %+v, want ErrNotLeader", r)
	}
	if waited := time.Since(t0); waited > 10*time.Second {
		t.Fatalf("waited %s for a call the ended term never took", waited)
	}

	answered := &call{done: make(chan result, 1)}
	answered.done <- result{Seq: Seq{Term: 7, Group: 1}}
	if r := awaitAnswer(ctx, answered, ended); r.err != nil || r.Seq.Term != 7 {
		t.Fatalf("call answered before the term ended: %+v, want its answer", r)
	}

	running := make(chan struct{})
	late := &call{done: make(chan result, 1)}
	go func() { late.done <- result{Seq: Seq{Term: 9}} }()
	if r := awaitAnswer(ctx, late, running); r.err != nil || r.Seq.Term != 9 {
		t.Fatalf("call answered while its term runs: %+v, want its answer", r)
	}
}

// The time a term spends applying calls is counted (Stats.ApplyTime).
func TestTermCommitCountsApplyTime(t *testing.T) {
	ctx, tr, _ := tmLeadingWithTree(t)
	before := tr.s.Stats().ApplyTime
	if err := tr.commit(ctx, []*call{tmReserve("a", 1000, 0, nil), tmReserve("b", 1000, 0, nil)}); err != nil {
		t.Fatal(err)
	}
	if after := tr.s.Stats().ApplyTime; after <= before {
		t.Fatalf("ApplyTime %s after a commit of two reservations, was %s: not counted", after, before)
	}
}

// tmLeadingWithTree starts a term that leads on a fresh embedded etcd with
// a tree whose queue q is capped at 4000m, for tests that commit groups.
func tmLeadingWithTree(t *testing.T) (context.Context, *term, *clientv3.Client) {
	t.Helper()
	ev := newEnv(t, 0, 5)
	ctx := ctxT(t, 60*time.Second)
	cli := ev.etcdClient()
	t.Cleanup(func() { cli.Close() })
	tr, _ := tmLeading(t, ev, cli)
	tmCommitTree(t, ctx, tr, tmSpecs(t, 4000))
	return ctx, tr, cli
}
