package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// The seed scenario of F5: two children of test-root each ask for all of
// test-root's capability; only one may hold it at a time.
func TestSeedScenarioParentCapacity(t *testing.T) {
	ev := newEnv(t, 2, 5)
	ev.leader(10 * time.Second)
	sh := ev.newShard("shard-a", 5)
	ctx := ctxT(t, 30*time.Second)

	specs := []api.QueueSpec{
		{Name: "test-root", Capability: limit(t, 2000, 4*gi)},
		{Name: "test-sub-0", Parent: "test-root"},
		{Name: "test-sub-1", Parent: "test-root"},
	}
	if _, err := sh.c.SetQueues(ctx, specs); err != nil {
		t.Fatal(err)
	}
	job1 := JobRef{Namespace: "ns", Name: "job-1", UID: "uid-1"}
	job2 := JobRef{Namespace: "ns", Name: "job-2", UID: "uid-2"}
	r1, err := sh.c.Reserve(ctx, job1, "test-sub-0", res(2000, 4*gi))
	if err != nil {
		t.Fatalf("job-1 refused: %v", err)
	}
	if r1.Reservation.State != Tentative || r1.Existed {
		t.Fatalf("job-1 reservation %+v, want a new tentative one", r1)
	}
	_, err = sh.c.Reserve(ctx, job2, "test-sub-1", res(2000, 4*gi))
	var qe *QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("job-2: got %v, want a QuotaError", err)
	}
	if qe.Queue != "test-root" || qe.Resource != api.CPU || qe.Short != 2000 {
		t.Fatalf("job-2 refusal %+v, want test-root short of cpu by 2000m", qe)
	}
	if got := err.Error(); !strings.Contains(got, "test-root") {
		t.Fatalf("refusal %q does not name test-root", got)
	}
	// A retry of job-1 returns the same reservation, not a second one.
	again, err := sh.c.Reserve(ctx, job1, "test-sub-0", res(2000, 4*gi))
	if err != nil || !again.Existed {
		t.Fatalf("retried reserve: %+v %v, want the existing reservation", again, err)
	}
	// Same name, new UID: a different job, refused for lack of quota.
	if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "job-1", UID: "uid-1b"}, "test-sub-0", res(2000, 4*gi)); !errors.As(err, &qe) {
		t.Fatalf("same name with a new UID: got %v, want a QuotaError", err)
	}
	rel, err := sh.c.Release(ctx, "uid-1")
	if err != nil || !rel.Found {
		t.Fatalf("release job-1: %+v %v", rel, err)
	}
	r2, err := sh.c.Reserve(ctx, job2, "test-sub-1", res(2000, 4*gi))
	if err != nil {
		t.Fatalf("job-2 after job-1 released: %v", err)
	}
	if r2.Reservation.Queue != "test-sub-1" || len(r2.Reservation.Path) != 3 || r2.Reservation.Path[1] != "test-root" {
		t.Fatalf("job-2 reservation %+v", r2.Reservation)
	}
}
