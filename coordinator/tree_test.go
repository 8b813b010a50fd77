package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Queue tree changes in the ledger: applied at once to new admissions at
// every level, and in time proportional to what changed.

func trCPU(t *testing.T, milli int64) api.Limit { return lgLimit(t, map[string]int64{api.CPU: milli}) }

// A parent's capability lowered below current usage refuses new
// reservations in its children (and grandchildren) at once, naming the
// parent; nothing held is cancelled. Lowered further, below a child's own
// capability, the child is left out (as the shards' partial builder does):
// reservations there are refused, and the builder's reason names the
// parent; the child's reservations keep counting on the parent.
func TestLedgerLoweredParentCapabilityAppliesAtOnce(t *testing.T) {
	specs := func(parentCPU int64) []api.QueueSpec {
		return []api.QueueSpec{
			{Name: "parent", Capability: trCPU(t, parentCPU)},
			{Name: "capped", Parent: "parent", Capability: trCPU(t, 4000)},
			{Name: "mid", Parent: "parent"},
			{Name: "leaf", Parent: "mid"},
		}
	}
	l := lgLedger(t, specs(10000))
	for _, r := range []ReserveRequest{lgReq("u1", "capped", res(3000, 0)), lgReq("u2", "leaf", res(3000, 0))} {
		if _, _, err := l.Reserve(r); err != nil {
			t.Fatal(err)
		}
	}
	// 6000m held; parent lowered to 5000m (still above capped's 4000m).
	if _, err := l.SetTree(specs(5000)); err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 {
		t.Fatalf("%d reservations after the capability fell, want both kept", l.Len())
	}
	lgUsage(t, l, "parent", res(6000, 0))
	for _, q := range []string{"capped", "leaf"} {
		_, _, err := l.Reserve(lgReq("new-"+q, q, res(1, 0)))
		if qe := lgQuota(t, err); qe.Queue != "parent" || qe.Capability != 5000 || qe.Short != 1001 {
			t.Fatalf("reserve in %s: refusal %+v, want parent (capability 5000m) short by 1001m", q, qe)
		}
		if !strings.Contains(err.Error(), `"parent"`) {
			t.Errorf("refusal %q does not name the parent", err)
		}
	}

	// Lowered below capped's own 4000m: the shards leave capped out.
	tree, left := api.BuildTreePartial(specs(2000))
	why, ok := left["capped"]
	if !ok || !errors.Is(why, api.ErrCapability) || !strings.Contains(why.Error(), `"parent"`) {
		t.Fatalf("capped left out with %v, want ErrCapability naming parent", why)
	}
	if _, err := l.SetTree(tree.Specs()); err != nil {
		t.Fatal(err)
	}
	lgUsage(t, l, "parent", res(6000, 0))
	if r, _ := l.Get("u1"); !slices.Equal(r.Path, []string{"capped", "parent", api.RootQueue}) {
		t.Fatalf("u1 path %v after its queue was left out, want its old path", r.Path)
	}
	if _, _, err := l.Reserve(lgReq("new-capped", "capped", res(1, 0))); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "capped") {
		t.Fatalf("reserve in a left-out queue: %v, want ErrInvalid naming it", err)
	}
	_, _, err := l.Reserve(lgReq("new-leaf", "leaf", res(1, 0)))
	if qe := lgQuota(t, err); qe.Queue != "parent" || qe.Capability != 2000 {
		t.Fatalf("reserve in leaf: refusal %+v, want parent at 2000m", qe)
	}
	// Releasing capped's reservation takes it off the parent.
	if _, found := l.Release("u1"); !found {
		t.Fatal("u1 not found")
	}
	lgUsage(t, l, "parent", res(3000, 0))
	lgUsage(t, l, "capped", api.Resource{})
}

// movedQueues is what makes SetTree proportional to the change: a change of
// capabilities, weights or strategies moves nothing; moving a queue moves
// exactly its subtree; a new leaf is the only new path.
func TestMovedQueues(t *testing.T) {
	base := []api.QueueSpec{
		{Name: "a", Capability: trCPU(t, 8000)}, {Name: "a1", Parent: "a"}, {Name: "a2", Parent: "a"},
		{Name: "b"}, {Name: "b1", Parent: "b"}, {Name: "b1x", Parent: "b1"},
	}
	old := mustBuild(t, base)
	edit := func(f func([]api.QueueSpec) []api.QueueSpec) *api.Tree {
		return mustBuild(t, f(slices.Clone(base)))
	}
	tests := []struct {
		name string
		cur  *api.Tree
		want []string
	}{
		{"same tree", old, nil},
		{"capability, weight, strategy", edit(func(s []api.QueueSpec) []api.QueueSpec {
			s[0].Capability, s[3].Weight, s[4].DequeueStrategy = trCPU(t, 1000), 7, api.DequeueTraverse
			return s
		}), nil},
		{"subtree moved", edit(func(s []api.QueueSpec) []api.QueueSpec { s[4].Parent = "a"; return s }), []string{"b1", "b1x"}},
		{"leaf added", edit(func(s []api.QueueSpec) []api.QueueSpec { return append(s, api.QueueSpec{Name: "c"}) }), []string{"c"}},
		{"leaf removed", edit(func(s []api.QueueSpec) []api.QueueSpec { return s[:5] }), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for n := range movedQueues(old, tc.cur) {
				got = append(got, n)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("moved %v, want %v", got, tc.want)
			}
		})
	}
}

func mustBuild(t *testing.T, specs []api.QueueSpec) *api.Tree {
	t.Helper()
	tr, err := api.BuildTree(specs)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Random tree changes (moves, removals, re-additions, capability changes)
// interleaved with reservations and releases: the incrementally kept usage
// always equals the sum, recomputed from scratch, of every reservation along
// the path a naive model gives it (its queue's path when the queue exists,
// else the last path it had).
func TestLedgerSetTreeMatchesRecomputation(t *testing.T) {
	names := []string{"p0", "p1", "p2", "q0", "q1", "q2", "q3", "q4"}
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		randomSpecs := func() []api.QueueSpec {
			var specs []api.QueueSpec
			for i, n := range names {
				if rng.IntN(6) == 0 {
					continue // left out this time
				}
				parent := ""
				if i > 0 && rng.IntN(3) > 0 {
					parent = names[rng.IntN(i)] // an earlier name: no cycle
				}
				specs = append(specs, api.QueueSpec{Name: n, Parent: parent, Weight: int32(1 + rng.IntN(3))})
			}
			// Drop queues whose parent was skipped, as a shard would.
			tree, _ := api.BuildTreePartial(specs)
			return tree.Specs()
		}
		l := NewLedger(mustBuild(t, randomSpecs()))
		paths := map[string][]string{} // the model: uid → path
		for step := 0; step < 200; step++ {
			switch p := rng.IntN(10); {
			case p < 5:
				uid := fmt.Sprintf("u%d", rng.IntN(30))
				q := names[rng.IntN(len(names))]
				if _, ok := paths[uid]; ok {
					break
				}
				if r, _, err := l.Reserve(lgReq(uid, q, res(int64(1+rng.IntN(9))*100, 0))); err == nil {
					paths[uid] = r.Path
				}
			case p < 7:
				uid := fmt.Sprintf("u%d", rng.IntN(30))
				l.Release(uid)
				delete(paths, uid)
			default:
				tree, err := l.SetTree(randomSpecs())
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				for _, r := range l.Reservations() {
					if p, err := tree.Path(r.Queue); err == nil {
						paths[r.Job.UID] = p
					}
				}
			}
			want := map[string]api.Resource{}
			for _, r := range l.Reservations() {
				if !slices.Equal(r.Path, paths[r.Job.UID]) {
					t.Fatalf("seed %d step %d: %s path %v, model %v", seed, step, r.Job.UID, r.Path, paths[r.Job.UID])
				}
				for _, q := range paths[r.Job.UID] {
					want[q], _ = want[q].Add(r.Amount)
				}
			}
			for _, q := range append(slices.Clone(names), api.RootQueue, api.DefaultQueue) {
				if got := l.Usage(q); !got.Equal(want[q]) {
					t.Fatalf("seed %d step %d: usage(%s) = %v, recomputed %v", seed, step, q, got, want[q])
				}
			}
		}
	}
}

// A stored tree that the current rules reject in part (here: a queue with
// an unknown dequeue strategy and one below it, written by hand) does not
// stop a coordinator from leading: the valid queues are served and admit.
func TestLoadLeadsOnPartlyInvalidStoredTree(t *testing.T) {
	ev := newEnv(t, 0, 5)
	ctx := ctxT(t, 60*time.Second)
	stored := []api.QueueSpec{
		{Name: "good", Capability: trCPU(t, 4000)},
		{Name: "odd", DequeueStrategy: "lifo"},
		{Name: "odd-kid", Parent: "odd"},
	}
	b, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	cli := ev.etcdClient()
	defer cli.Close()
	if _, err := cli.Put(ctx, ev.cfg.treeKey(), string(b)); err != nil {
		t.Fatal(err)
	}
	ev.add()
	ev.leader(20 * time.Second)
	sh := ev.newShard("s", 10)
	list, err := sh.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list.Specs {
		got = append(got, s.Name)
	}
	if want := []string{api.DefaultQueue, "good", api.RootQueue}; !slices.Equal(got, want) {
		t.Fatalf("served queues %v, want %v", got, want)
	}
	if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "j", UID: "u1"}, "good", res(1000, 0)); err != nil {
		t.Fatalf("reserve in a valid queue of the stored tree: %v", err)
	}
	_, err = sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "k", UID: "u2"}, "good", res(3500, 0))
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Queue != "good" {
		t.Fatalf("over good's capability: %v, want a QuotaError at good", err)
	}
	_, err = sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "o", UID: "u3"}, "odd-kid", res(1, 0))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("reserve below a left-out queue: %v, want ErrInvalid", err)
	}
}

// SetTree cost at 10,000 reservations: a capability change does no
// per-reservation work; a move touches only the moved queue's reservations
// (found in one pass). Compare the sub-benchmarks as ratios.
func BenchmarkLedgerSetTree(b *testing.B) {
	const leaves, perLeaf = 100, 100
	specs := func(capCPU int64, movedParent string) []api.QueueSpec {
		l, _ := api.NewLimit(map[string]int64{api.CPU: capCPU})
		out := []api.QueueSpec{{Name: "org-a", Capability: l}, {Name: "org-b"}}
		for i := 0; i < leaves; i++ {
			parent := "org-a"
			if i == 0 {
				parent = movedParent
			}
			out = append(out, api.QueueSpec{Name: fmt.Sprintf("leaf-%d", i), Parent: parent})
		}
		return out
	}
	setup := func(b *testing.B) *Ledger {
		tree, err := api.BuildTree(specs(1<<40, "org-a"))
		if err != nil {
			b.Fatal(err)
		}
		l := NewLedger(tree)
		for i := 0; i < leaves*perLeaf; i++ {
			if _, _, err := l.Reserve(lgReq(fmt.Sprintf("u%d", i), fmt.Sprintf("leaf-%d", i%leaves), res(10, 0))); err != nil {
				b.Fatal(err)
			}
		}
		return l
	}
	b.Run("capability", func(b *testing.B) {
		l := setup(b)
		a, c := specs(1<<40, "org-a"), specs(1<<41, "org-a")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next := a
			if i%2 == 0 {
				next = c
			}
			if _, err := l.SetTree(next); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("move-one-leaf", func(b *testing.B) {
		l := setup(b)
		a, c := specs(1<<40, "org-a"), specs(1<<40, "org-b")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next := a
			if i%2 == 0 {
				next = c
			}
			if _, err := l.SetTree(next); err != nil {
				b.Fatal(err)
			}
		}
	})
}
