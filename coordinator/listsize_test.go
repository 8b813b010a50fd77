package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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

// A list names the queues it wants and gets only their reservations, from
// this version's leader and from an older one that ignores the names and
// lists every queue's (the client keeps the asked queues' then).
func TestListOfSomeQueues(t *testing.T) {
	ev := newEnv(t, 1, 5)
	lead := ev.leader(10 * time.Second)
	sh := ev.newShard("shard-0", 5)
	ctx := ctxT(t, 30*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "org"}, {Name: "a", Parent: "org"}, {Name: "b", Parent: "org"}, {Name: "c", Parent: "org"}}); err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{"a", "a", "b", "c", "c", "c"} {
		uid := fmt.Sprintf("%s-%d", q, i)
		if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: uid, UID: uid}, q, res(1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	uids := func(rs []Reservation) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Job.UID)
		}
		slices.Sort(out)
		return out
	}
	check := func(who string) {
		t.Helper()
		for _, c := range []struct {
			queues []string
			want   []string
		}{
			{nil, []string{"a-0", "a-1", "b-2", "c-3", "c-4", "c-5"}},
			{[]string{"a"}, []string{"a-0", "a-1"}},
			{[]string{"c", "b"}, []string{"b-2", "c-3", "c-4", "c-5"}},
			{[]string{"org"}, nil}, // a parent holds no job
			{[]string{"nowhere"}, nil},
		} {
			list, err := sh.c.List(ctx, c.queues...)
			if err != nil {
				t.Fatalf("%s, List(%v): %v", who, c.queues, err)
			}
			if got := uids(list.Reservations); !slices.Equal(got, c.want) {
				t.Errorf("%s, List(%v) = %v, want %v", who, c.queues, got, c.want)
			}
			if len(list.Specs) == 0 {
				t.Errorf("%s, List(%v) without the queue tree", who, c.queues)
			}
		}
	}
	check("this version's leader")

	// The leader itself answers with the named queues' only.
	current := lead.s.handler()
	rec := httptest.NewRecorder()
	current.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/reservations?queue=b&queue=a", nil))
	var rep reply
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("the leader's answer (%d): %v", rec.Code, err)
	}
	if got := uids(rep.Reservations); !slices.Equal(got, []string{"a-0", "a-1", "b-2"}) {
		t.Errorf("the leader answered queue=b&queue=a with %v, want a's and b's", got)
	}
	var mu sync.Mutex
	var queries []string
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		r.URL.RawQuery = "" // an older leader reads no queue names
		current.ServeHTTP(w, r)
	}))
	defer old.Close()
	sh.c.setLeader(old.URL)
	check("an older leader")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(queries, "queue=c&queue=b") {
		t.Errorf("queries the older leader got: %q, want the queues named (queue=c&queue=b)", queries)
	}
}
