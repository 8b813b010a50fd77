package coordinator

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// countingTransport counts the requests a client sends and, while broken
// is set, fails them without reaching any server.
type countingTransport struct {
	base   http.RoundTripper
	sent   atomic.Int64
	broken atomic.Bool
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.sent.Add(1)
	if t.broken.Load() {
		return nil, errors.New("test: the network is cut")
	}
	return t.base.RoundTrip(r)
}

// newLocalShard is a shard client whose process runs local, with its
// HTTP requests counted (and cut while the transport is broken).
func (ev *env) newLocalShard(name string, local *Server) (*shard, *countingTransport) {
	ev.t.Helper()
	sh := ev.newShardWith(name, 5, func(cc *ClientConfig) { cc.Local = local })
	tr := &countingTransport{base: sh.c.hc.Transport}
	if tr.base == nil {
		tr.base = http.DefaultTransport
	}
	sh.c.hc.Transport = tr
	return sh, tr
}

// A shard whose own process leads is answered in-process: every batched
// call and a chain in order succeed with the network cut, and what it is
// given back is its own (changing it changes nothing in the ledger).
func TestLocalLeaderAnswersInProcess(t *testing.T) {
	ev := newEnv(t, 1, 5)
	lead := ev.leader(10 * time.Second)
	sh, tr := ev.newLocalShard("shard-local", lead.s)
	ctx := ctxT(t, 30*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 4000, 64*gi)}}); err != nil {
		t.Fatal(err)
	}

	tr.broken.Store(true)
	before := tr.sent.Load()
	job := JobRef{Namespace: "ns", Name: "a", UID: "uid-a"}
	got, err := sh.c.Reserve(ctx, job, "q", res(1000, gi))
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if got.Reservation.Queue != "q" || !got.Reservation.Amount.Equal(res(1000, gi)) {
		t.Fatalf("reserve answered %+v", got.Reservation)
	}
	// The answer is the caller's to keep: changing it leaves the ledger.
	got.Reservation.Path[0] = "changed"
	for k := range got.Reservation.Amount.Scalars {
		got.Reservation.Amount.Scalars[k] = 99
	}
	if _, err := sh.c.Resize(ctx, "uid-a", nil, []api.Resource{res(2000, 2*gi)}); err != nil {
		t.Fatalf("resize: %v", err)
	}
	if _, err := sh.c.Confirm(ctx, "uid-a"); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	answers := sh.c.ReserveInOrder(ctx, []InOrder{
		{Job: JobRef{Namespace: "ns", Name: "b", UID: "uid-b"}, Queue: "q", Amount: res(1000, gi)},
		{Job: JobRef{Namespace: "ns", Name: "c", UID: "uid-c"}, Queue: "q", Amount: res(3000, gi)},
	}, true)
	if answers[0].Err != nil {
		t.Fatalf("chain: b: %v", answers[0].Err)
	}
	var qe *QuotaError
	if !errors.As(answers[1].Err, &qe) {
		t.Fatalf("chain: c (3 CPU on top of 3 of 4): %v, want a quota refusal", answers[1].Err)
	}
	if n := tr.sent.Load() - before; n != 0 {
		t.Fatalf("%d HTTP requests sent to a leader in this process, want none", n)
	}
	rel, err := sh.c.Release(ctx, "uid-b")
	if err != nil || !rel.Found {
		t.Fatalf("release: found %v, %v", rel.Found, err)
	}

	tr.broken.Store(false)
	list, err := sh.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Reservations) != 1 {
		t.Fatalf("reservations %+v, want uid-a alone", list.Reservations)
	}
	r := list.Reservations[0]
	if r.Job.UID != "uid-a" || r.State != Confirmed || !r.Amount.Equal(res(2000, 2*gi)) || r.Path[0] != "q" {
		t.Fatalf("uid-a stored as %+v, want confirmed, 2 CPU, on q", r)
	}
}

// When this process's participant stops leading, the calls the client
// still hands it are answered "not leader" and go to the new leader over
// HTTP: nothing is lost and nothing is answered twice.
func TestLocalLeaderGoneFallsBackToHTTP(t *testing.T) {
	ev := newEnv(t, 2, 5)
	lead := ev.leader(10 * time.Second)
	sh, tr := ev.newLocalShard("shard-local", lead.s)
	ctx := ctxT(t, 60*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 4000, 64*gi)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "a", UID: "uid-a"}, "q", res(1000, gi)); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.c.Confirm(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}

	lead.stop()
	next := ev.leader(20 * time.Second)
	if next == lead {
		t.Fatal("the stopped participant still leads")
	}
	before := tr.sent.Load()
	if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "b", UID: "uid-b"}, "q", res(3000, gi)); err != nil {
		t.Fatalf("reserve after the local leader stopped: %v", err)
	}
	if tr.sent.Load() == before {
		t.Fatal("no HTTP request reached the new leader")
	}
	// 3 of 4 CPU are held; one more CPU and a bit does not fit.
	_, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "c", UID: "uid-c"}, "q", res(1001, gi))
	var qe *QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("reserve over capability: %v, want a quota refusal from the new leader", err)
	}
}
