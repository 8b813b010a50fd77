package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// biState is the observable state of the coordinator: reservations and the
// tree, as List returns them, in a comparable form.
func biState(ctx context.Context, t *testing.T, c *Client) string {
	t.Helper()
	r, err := c.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	b, err := json.Marshal(struct {
		Res   []Reservation
		Specs []api.QueueSpec
	}{r.Reservations, r.Specs})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func biSpecs(ctx context.Context, t *testing.T, c *Client) string {
	t.Helper()
	r, err := c.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	b, _ := json.Marshal(r.Specs)
	return string(b)
}

func TestBadInputThroughClient(t *testing.T) {
	ev := newEnv(t, 2, 5)
	ev.leader(10 * time.Second)
	sh := ev.newShard("shard-bad", 5)
	ctx := ctxT(t, 60*time.Second)

	specs := []api.QueueSpec{
		{Name: "org", Capability: limit(t, 4000, 8*gi)},
		{Name: "team-a", Parent: "org"},
		{Name: "team-b", Parent: "org"},
	}
	if _, err := sh.c.SetQueues(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// Something in the ledger, so "unchanged" is not trivially true.
	if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "held", UID: "uid-held"}, "team-a", res(1000, gi)); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.c.Confirm(ctx, "uid-held"); err != nil {
		t.Fatal(err)
	}

	job := func(uid string) JobRef { return JobRef{Namespace: "ns", Name: "bad-" + uid, UID: uid} }
	cases := []struct {
		name   string
		job    JobRef
		queue  string
		amount api.Resource
		words  []string
	}{
		{"unknown queue", job("u-unknown"), "no-such-queue", res(500, gi), []string{`"no-such-queue"`, "unknown queue"}},
		{"non-leaf queue", job("u-parent"), "org", res(500, gi), []string{`"org"`, "leaf", "team-a", "team-b"}},
		{"root queue", job("u-root"), api.RootQueue, res(500, gi), []string{`"root"`, "leaf"}},
		{"negative cpu", job("u-neg"), "team-a", res(-500, gi), []string{"negative", "cpu"}},
		{"negative scalar", job("u-neg-gpu"), "team-a", api.NewResource(500, gi, map[string]int64{"nvidia.com/gpu": -1}), []string{"negative", "nvidia.com/gpu"}},
		{"zero amount", job("u-zero"), "team-a", api.Resource{}, []string{"empty amount", "u-zero"}},
		{"empty uid", JobRef{Namespace: "ns", Name: "nameless"}, "team-a", res(500, gi), []string{"empty UID", "ns/nameless"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := biState(ctx, t, sh.c)
			_, err := sh.c.Reserve(ctx, tc.job, tc.queue, tc.amount)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("reserve: got %v, want an error wrapping ErrInvalid", err)
			}
			var qe *QuotaError
			if errors.As(err, &qe) {
				t.Fatalf("bad input reported as a quota refusal: %v", err)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err, w)
				}
			}
			if after := biState(ctx, t, sh.c); after != before {
				t.Fatalf("state changed by a refused request:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	t.Run("queue cycle", func(t *testing.T) {
		before := biState(ctx, t, sh.c)
		treeBefore := biSpecs(ctx, t, sh.c)
		cyc := append(append([]api.QueueSpec(nil), specs...),
			api.QueueSpec{Name: "cyc-a", Parent: "cyc-b"},
			api.QueueSpec{Name: "cyc-b", Parent: "cyc-a"},
		)
		_, err := sh.c.SetQueues(ctx, cyc)
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetQueues with a cycle: got %v, want ErrInvalid", err)
		}
		for _, w := range []string{"cycle", "cyc-a", "cyc-b"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("message %q does not contain %q", err, w)
			}
		}
		if after := biSpecs(ctx, t, sh.c); after != treeBefore {
			t.Fatalf("tree changed by a refused SetQueues:\nbefore %s\nafter  %s", treeBefore, after)
		}
		if after := biState(ctx, t, sh.c); after != before {
			t.Fatalf("state changed by a refused SetQueues:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("unknown parent", func(t *testing.T) {
		before := biState(ctx, t, sh.c)
		_, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "orphan", Parent: "ghost"}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "orphan") || !strings.Contains(err.Error(), "ghost") {
			t.Fatalf("SetQueues with an unknown parent: got %v, want ErrInvalid naming orphan and ghost", err)
		}
		if after := biState(ctx, t, sh.c); after != before {
			t.Fatalf("state changed by a refused SetQueues:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("confirm unknown uid", func(t *testing.T) {
		before := biState(ctx, t, sh.c)
		_, err := sh.c.Confirm(ctx, "uid-never-reserved")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("confirm of an unknown uid: got %v, want ErrNotFound", err)
		}
		if !strings.Contains(err.Error(), "uid-never-reserved") {
			t.Errorf("message %q does not name the uid", err)
		}
		if after := biState(ctx, t, sh.c); after != before {
			t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("release unknown uid", func(t *testing.T) {
		before := biState(ctx, t, sh.c)
		r, err := sh.c.Release(ctx, "uid-never-reserved")
		if err != nil {
			t.Fatalf("release of an unknown uid: %v, want no error", err)
		}
		if r.Found {
			t.Fatalf("release of an unknown uid: Found = true (%+v)", r)
		}
		if after := biState(ctx, t, sh.c); after != before {
			t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("malformed body", func(t *testing.T) {
		before := biState(ctx, t, sh.c)
		addr, err := sh.c.leaderAddr(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := sh.c.once(ctx, "POST", addr+"/v1/reserve", []byte(`{"job": 7`))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("malformed body: %+v %v, want ErrInvalid", out, err)
		}
		if after := biState(ctx, t, sh.c); after != before {
			t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}

func TestLoweredCapabilityKeepsReservationsBlocksNew(t *testing.T) {
	ev := newEnv(t, 2, 5)
	ev.leader(10 * time.Second)
	sh := ev.newShard("shard-low", 5)
	ctx := ctxT(t, 60*time.Second)

	specs := func(cpu int64) []api.QueueSpec {
		return []api.QueueSpec{
			{Name: "org", Capability: limit(t, cpu, 16*gi)},
			{Name: "team-a", Parent: "org"},
			{Name: "team-b", Parent: "org"},
		}
	}
	if _, err := sh.c.SetQueues(ctx, specs(4000)); err != nil {
		t.Fatal(err)
	}
	j1 := JobRef{Namespace: "ns", Name: "j1", UID: "low-1"}
	j2 := JobRef{Namespace: "ns", Name: "j2", UID: "low-2"}
	j3 := JobRef{Namespace: "ns", Name: "j3", UID: "low-3"}
	if _, err := sh.c.Reserve(ctx, j1, "team-a", res(2000, gi)); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.c.Confirm(ctx, j1.UID); err != nil {
		t.Fatal(err)
	}
	// j2 stays tentative: lowering must not cancel those either.
	if _, err := sh.c.Reserve(ctx, j2, "team-b", res(2000, gi)); err != nil {
		t.Fatal(err)
	}

	set, err := sh.c.SetQueues(ctx, specs(3000))
	if err != nil {
		t.Fatalf("lowering org to 3 cpu below its 4 cpu usage: %v", err)
	}
	var orgCap int64
	for _, s := range set.Specs {
		if s.Name == "org" {
			orgCap, _ = s.Capability.Get(api.CPU)
		}
	}
	if orgCap != 3000 {
		t.Fatalf("org capability after SetQueues = %dm, want 3000m (specs %+v)", orgCap, set.Specs)
	}
	l, err := sh.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]State{}
	for _, r := range l.Reservations {
		got[r.Job.UID] = r.State
	}
	if len(got) != 2 || got[j1.UID] != Confirmed || got[j2.UID] != Tentative {
		t.Fatalf("after lowering the capability: %v, want low-1 Confirmed and low-2 Tentative", got)
	}

	// Even a small new job is refused while usage is above the capability.
	_, err = sh.c.Reserve(ctx, j3, "team-a", res(500, gi))
	var qe *QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("j3 while org is over its lowered capability: got %v, want a QuotaError", err)
	}
	want := QuotaError{Queue: "org", Resource: api.CPU, Reserved: 4000, Asked: 500, Capability: 3000, Short: 1500}
	if *qe != want {
		t.Fatalf("refusal %+v, want %+v", *qe, want)
	}

	// Releasing j1 brings usage to 2000m, under the lowered 3000m. A job that
	// would fit the old 4000m but not the new bound is still refused; one that
	// fits the new bound is admitted.
	if r, err := sh.c.Release(ctx, j1.UID); err != nil || !r.Found {
		t.Fatalf("release j1: %+v %v", r, err)
	}
	_, err = sh.c.Reserve(ctx, j3, "team-a", res(1500, gi))
	if !errors.As(err, &qe) || qe.Queue != "org" || qe.Short != 500 || qe.Capability != 3000 {
		t.Fatalf("j3 of 1500m with 2000m held under 3000m: got %v, want org short by 500m", err)
	}
	r3, err := sh.c.Reserve(ctx, j3, "team-a", res(1000, gi))
	if err != nil {
		t.Fatalf("j3 of 1000m once usage (2000m) is under the lowered capability: %v", err)
	}
	if r3.Existed || r3.Reservation.Job.UID != j3.UID {
		t.Fatalf("j3 reservation %+v", r3)
	}
	j4 := JobRef{Namespace: "ns", Name: "j4", UID: "low-4"}
	if _, err := sh.c.Reserve(ctx, j4, "team-b", res(1, 0)); !errors.As(err, &qe) || qe.Queue != "org" || qe.Short != 1 {
		t.Fatalf("j4 with org full at its lowered capability: got %v, want org short by 1m", err)
	}
}
