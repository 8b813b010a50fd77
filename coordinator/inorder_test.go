package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// A chain asked for in one round trip has the outcome of asking one job
// after another: in a chain that stops, no job behind one refused for quota
// is tried (ErrBehind, nothing reserved for it), a job that can never fit
// holds nobody up, and without stop every job is tried.
func TestReserveInOrder(t *testing.T) {
	ev := newEnv(t, 1, 5)
	ev.leader(10 * time.Second)
	sh := ev.newShard("shard-a", 5)
	ctx := ctxT(t, 30*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 4000, 64*gi)}}); err != nil {
		t.Fatal(err)
	}
	chain := func(stop bool, jobs ...struct {
		uid string
		cpu int64
	}) []Answer {
		reqs := make([]InOrder, len(jobs))
		for i, j := range jobs {
			reqs[i] = InOrder{Job: JobRef{Namespace: "ns", Name: j.uid, UID: j.uid}, Queue: "q", Amount: res(j.cpu, gi)}
		}
		return sh.c.ReserveInOrder(ctx, reqs, stop)
	}
	type job = struct {
		uid string
		cpu int64
	}
	held := func() map[string]bool {
		r, err := sh.c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, rv := range r.Reservations {
			out[rv.Job.UID] = true
		}
		return out
	}
	admitted := func(a Answer) bool { return a.Err == nil }
	quota := func(a Answer) *QuotaError {
		var qe *QuotaError
		if errors.As(a.Err, &qe) {
			return qe
		}
		return nil
	}

	// a and b fit (3 of 4 CPU), c does not, d would but waits behind c.
	got := chain(true, job{"a", 2000}, job{"b", 1000}, job{"c", 3000}, job{"d", 1000})
	if !admitted(got[0]) || !admitted(got[1]) {
		t.Fatalf("a, b: %v, %v", got[0].Err, got[1].Err)
	}
	if qe := quota(got[2]); qe == nil || qe.Queue != "q" {
		t.Fatalf("c: want a quota refusal on q, got %v", got[2].Err)
	}
	if !errors.Is(got[3].Err, ErrBehind) {
		t.Fatalf("d: want ErrBehind, got %v (%+v)", got[3].Err, got[3].Result)
	}
	if h := held(); !h["a"] || !h["b"] || h["c"] || h["d"] {
		t.Fatalf("reservations held %v, want a and b only", h)
	}

	// A job above the capability can never fit: the one behind it is tried.
	got = chain(true, job{"never", 10000}, job{"x", 1000})
	if qe := quota(got[0]); qe == nil || qe.Asked <= qe.Capability {
		t.Fatalf("never: want a refusal above the capability, got %v", got[0].Err)
	}
	if !admitted(got[1]) {
		t.Fatalf("x behind a job that can never fit: %v", got[1].Err)
	}

	// q is full (4 of 4). With a released, y (3 CPU) does not fit: z
	// waits behind it in a chain that stops, and is admitted in one that
	// does not (dequeueStrategy traverse).
	if _, err := sh.c.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	got = chain(true, job{"y", 3000}, job{"z", 1000})
	if quota(got[0]) == nil || !errors.Is(got[1].Err, ErrBehind) {
		t.Fatalf("stop: y %v, z %v; want a refusal and ErrBehind", got[0].Err, got[1].Err)
	}
	got = chain(false, job{"y", 3000}, job{"z", 1000})
	if quota(got[0]) == nil || !admitted(got[1]) {
		t.Fatalf("no stop: y %v, z %v; want a refusal and z admitted", got[0].Err, got[1].Err)
	}
	if h := held(); !h["z"] || h["y"] || h["d"] {
		t.Fatalf("reservations held %v", h)
	}
}
