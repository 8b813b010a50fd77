package coordinator

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// A list of every reservation larger than a request may be (maxBody) is
// read whole: a large cluster's reconciliation lists them all. Cut at
// maxBody, its JSON could not be decoded and every list failed.
func TestListLargerThanARequestIsReadWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("reserves thousands of jobs in embedded etcd")
	}
	ev := newEnv(t, 0, 5)
	ev.cfg.MaxGroupOps = 1024
	ev.add()
	ev.leader(30 * time.Second)
	sh := ev.newShard("shard-0", 5)
	ctx := ctxT(t, 3*time.Minute)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "org"}, {Name: "team", Parent: "org"}}); err != nil {
		t.Fatal(err)
	}
	// Long names (a Kubernetes name may have 253 characters) make the
	// list pass maxBody with fewer reservations.
	long := strings.Repeat("x", 200)
	const n = 8000
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("%s-%05d", long, i)
			if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: name, UID: "uid-" + name}, "team", res(1, 0)); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := sh.c.List(ctx)
	if err != nil {
		t.Fatalf("list of %d reservations: %v", n, err)
	}
	if len(list.Reservations) != n {
		t.Fatalf("listed %d reservations, want %d", len(list.Reservations), n)
	}
	body, err := json.Marshal(list.Reservations)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) <= maxBody {
		t.Fatalf("the list's reservations take %d bytes of JSON, want more than maxBody (%d) for this test to mean anything", len(body), maxBody)
	}
	t.Logf("%d reservations listed, %.1f MiB of JSON", n, float64(len(body))/(1<<20))
}
