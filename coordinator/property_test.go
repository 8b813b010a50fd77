package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardsched/shardsched/api"
)

// record is one answered request, replayed in Seq order against the model.
type record struct {
	client  int
	kind    opKind
	uid     string
	queue   string
	amount  api.Resource
	specs   []api.QueueSpec
	seq     Seq
	ok      bool // no error
	existed bool
	found   bool
	quota   *QuotaError
	errKind string // "", "quota", "not_found", "invalid"
}

// model is a sequential reference: it keeps reservations in a plain map and
// recomputes every level's usage from scratch on each decision.
type model struct {
	parent map[string]string
	cap    map[string]map[string]int64 // queue → dim → bound (absent = unlimited)
	res    map[string]modelRes
}

type modelRes struct {
	queue     string
	amount    api.Resource
	confirmed bool
}

func newModel(specs []api.QueueSpec) *model {
	m := &model{res: map[string]modelRes{}}
	m.setTree(specs)
	return m
}

func (m *model) setTree(specs []api.QueueSpec) {
	m.parent = map[string]string{api.RootQueue: "", api.DefaultQueue: api.RootQueue}
	m.cap = map[string]map[string]int64{}
	for _, s := range specs {
		p := s.Parent
		if p == "" && s.Name != api.RootQueue {
			p = api.RootQueue
		}
		m.parent[s.Name] = p
		m.cap[s.Name] = s.Capability.Map()
	}
}

func (m *model) path(q string) []string {
	var out []string
	for cur := q; cur != ""; cur = m.parent[cur] {
		out = append(out, cur)
	}
	return out
}

func (m *model) usage(q string, dim string) int64 {
	var sum int64
	for _, r := range m.res {
		for _, p := range m.path(r.queue) {
			if p == q {
				sum += r.amount.Get(dim)
			}
		}
	}
	return sum
}

// reserve returns (existed, quota refusal). A reservation that exists is
// moved when another queue is named: its amount must fit on the levels of
// the new path that the old one does not share.
func (m *model) reserve(uid, queue string, amount api.Resource) (bool, *QuotaError) {
	r, ok := m.res[uid]
	if ok && r.queue == queue {
		return true, nil
	}
	skip := map[string]bool{}
	if ok {
		amount = r.amount
		for _, q := range m.path(r.queue) {
			skip[q] = true
		}
	}
	for _, q := range m.path(queue) {
		if skip[q] {
			continue
		}
		dims := make([]string, 0, len(m.cap[q]))
		for d := range m.cap[q] {
			dims = append(dims, d)
		}
		sort.Strings(dims)
		for _, d := range dims {
			u := m.usage(q, d)
			if u+amount.Get(d) > m.cap[q][d] {
				return ok, &QuotaError{Queue: q, Resource: d, Short: u + amount.Get(d) - m.cap[q][d]}
			}
		}
	}
	r.queue, r.amount = queue, amount
	m.res[uid] = r
	return ok, nil
}

// TestPropertyLedgerMatchesSequentialModel runs random Reserve / Confirm /
// Release / capability edits from 8 concurrent shard clients while the
// leader is made to change, then replays every answer in the order the
// leaders applied them against the sequential model: each answer must be
// the model's, no admission may take a level over its capability, and the
// final ledger (as served and as stored in etcd) must equal the model.
func TestPropertyLedgerMatchesSequentialModel(t *testing.T) {
	const (
		clients      = 8
		opsPerClient = 250
		minTerms     = 3
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	ev := newEnv(t, 2, 3)
	ev.leader(10 * time.Second)
	ctx := ctxT(t, 3*time.Minute)

	capsA := []int64{6000, 10000, 16000}
	capsA1 := []int64{3000, 6000}
	capsB := []int64{4000, 8000}
	mkSpecs := func(a, a1, b int64) []api.QueueSpec {
		return []api.QueueSpec{
			{Name: "a", Capability: limit(t, a, 64*gi)},
			{Name: "a1", Parent: "a", Capability: limit(t, a1, 64*gi)},
			{Name: "a2", Parent: "a"},
			{Name: "b", Capability: limit(t, b, 32*gi)},
			{Name: "b1", Parent: "b"},
			{Name: "b2", Parent: "b"},
		}
	}
	initial := mkSpecs(capsA[1], capsA1[1], capsB[1])
	admin := ev.newShard("admin", 5)
	if _, err := admin.c.SetQueues(ctx, initial); err != nil {
		t.Fatal(err)
	}
	leaves := []string{"a1", "a2", "b1", "b2"}

	var mu sync.Mutex
	var records []record
	var wg sync.WaitGroup
	for ci := 0; ci < clients; ci++ {
		// Leaders resign every 100 ms: on a loaded machine a term can end
		// before it answers much, so the clients ride over more of them
		// than a shard's default 8 attempts (this test checks the answers,
		// not availability).
		sh := ev.newShardWith(fmt.Sprintf("shard-%d", ci), 10, func(cc *ClientConfig) { cc.MaxAttempts = 40 })
		rng := rand.New(rand.NewPCG(seed, uint64(ci)))
		wg.Add(1)
		go func(ci int) {
			defer wg.Done()
			for i := 0; i < opsPerClient; i++ {
				uid := fmt.Sprintf("c%d-j%d", ci, rng.IntN(12))
				rec := record{client: ci, uid: uid}
				var r Result
				var err error
				switch p := rng.IntN(100); {
				case p < 50:
					rec.kind = opReserve
					rec.queue = leaves[rng.IntN(len(leaves))]
					rec.amount = res(int64(500*(1+rng.IntN(6))), int64(1+rng.IntN(4))*gi)
					r, err = sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: uid, UID: uid}, rec.queue, rec.amount)
				case p < 70:
					rec.kind = opConfirm
					r, err = sh.c.Confirm(ctx, uid)
				case p < 95:
					rec.kind = opRelease
					r, err = sh.c.Release(ctx, uid)
				default:
					rec.kind = opSetTree
					rec.specs = mkSpecs(capsA[rng.IntN(len(capsA))], capsA1[rng.IntN(len(capsA1))], capsB[rng.IntN(len(capsB))])
					r, err = sh.c.SetQueues(ctx, rec.specs)
				}
				rec.seq, rec.existed, rec.found = r.Seq, r.Existed, r.Found
				var qe *QuotaError
				switch {
				case err == nil:
					rec.ok = true
				case errors.As(err, &qe):
					rec.errKind, rec.quota = "quota", qe
				case errors.Is(err, ErrNotFound):
					rec.errKind = "not_found"
				default:
					t.Errorf("client %d op %d (%v %s): unexpected error: %v", ci, i, rec.kind, uid, err)
					return
				}
				mu.Lock()
				records = append(records, rec)
				mu.Unlock()
			}
		}(ci)
	}
	// Leader changes while the clients run.
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	changes := 0
	for running := true; running; {
		select {
		case <-clientsDone:
			running = false
		case <-time.After(100 * time.Millisecond):
			ev.leader(10 * time.Second).s.Resign()
			changes++
		}
	}
	if t.Failed() {
		return
	}

	// Replay in the order the leaders applied the operations.
	sort.Slice(records, func(i, j int) bool { return records[i].seq.Less(records[j].seq) })
	for i := 1; i < len(records); i++ {
		if !records[i-1].seq.Less(records[i].seq) {
			t.Fatalf("two answers share sequence %+v", records[i].seq)
		}
	}
	m := newModel(initial)
	terms := map[int64]bool{}
	for _, rec := range records {
		terms[rec.seq.Term] = true
		switch rec.kind {
		case opReserve:
			before, had := m.res[rec.uid]
			existed, qe := m.reserve(rec.uid, rec.queue, rec.amount)
			switch {
			case qe != nil:
				if rec.quota == nil || rec.quota.Queue != qe.Queue || rec.quota.Resource != qe.Resource || rec.quota.Short != qe.Short {
					t.Fatalf("seq %+v reserve %s on %s %s: model refuses (%s short of %s by %d), system said ok=%v quota=%+v",
						rec.seq, rec.uid, rec.queue, rec.amount, qe.Queue, qe.Resource, qe.Short, rec.ok, rec.quota)
				}
			default:
				if !rec.ok || rec.existed != existed {
					t.Fatalf("seq %+v reserve %s on %s %s: model admits (existed=%v), system said ok=%v existed=%v quota=%+v",
						rec.seq, rec.uid, rec.queue, rec.amount, existed, rec.ok, rec.existed, rec.quota)
				}
				// The invariant, on the model's state after the admission
				// or move: every level of the path within its capability
				// (for a move, every level it was not on before: one it
				// stays on keeps its usage, even over a lowered capability).
				if !had || before.queue != rec.queue {
					kept := map[string]bool{}
					if had {
						for _, q := range m.path(before.queue) {
							kept[q] = true
						}
					}
					for _, q := range m.path(rec.queue) {
						if kept[q] {
							continue
						}
						for d, c := range m.cap[q] {
							if u := m.usage(q, d); u > c {
								t.Fatalf("seq %+v: admission took %s to %s=%d over capability %d", rec.seq, q, d, u, c)
							}
						}
					}
				}
			}
		case opConfirm:
			r, ok := m.res[rec.uid]
			if ok != rec.ok || (!ok && rec.errKind != "not_found") {
				t.Fatalf("seq %+v confirm %s: model has=%v, system ok=%v err=%s", rec.seq, rec.uid, ok, rec.ok, rec.errKind)
			}
			if ok {
				r.confirmed = true
				m.res[rec.uid] = r
			}
		case opRelease:
			_, ok := m.res[rec.uid]
			if !rec.ok || rec.found != ok {
				t.Fatalf("seq %+v release %s: model found=%v, system ok=%v found=%v", rec.seq, rec.uid, ok, rec.ok, rec.found)
			}
			delete(m.res, rec.uid)
		case opSetTree:
			if !rec.ok {
				t.Fatalf("seq %+v set tree refused: %s", rec.seq, rec.errKind)
			}
			m.setTree(rec.specs)
		}
	}
	if len(terms) < minTerms {
		t.Errorf("answers came from %d leader term(s) (%d leader changes); want at least %d", len(terms), changes, minTerms)
	}
	t.Logf("%d operations over %d leader terms replayed against the model", len(records), len(terms))

	// The ledger as served equals the model.
	list, err := admin.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	compareLedger(t, "served ledger", list.Reservations, m)
	// And so does what is durable in etcd.
	cli := ev.etcdClient()
	defer cli.Close()
	stored := storedReservations(ctx, t, cli, ev.cfg)
	compareLedger(t, "etcd", stored, m)
}

func compareLedger(t *testing.T, what string, got []Reservation, m *model) {
	t.Helper()
	if len(got) != len(m.res) {
		t.Fatalf("%s has %d reservations, model %d", what, len(got), len(m.res))
	}
	for _, r := range got {
		want, ok := m.res[r.Job.UID]
		if !ok {
			t.Fatalf("%s has %s, model does not", what, r.Job.UID)
		}
		if r.Queue != want.queue || !r.Amount.Equal(want.amount) || (r.State == Confirmed) != want.confirmed {
			t.Fatalf("%s: %s is %s %s %s, model %s %s confirmed=%v", what, r.Job.UID, r.Queue, r.Amount, r.State, want.queue, want.amount, want.confirmed)
		}
	}
}

func storedReservations(ctx context.Context, t *testing.T, cli *clientv3.Client, cfg Config) []Reservation {
	t.Helper()
	resp, err := cli.Get(ctx, cfg.resPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []Reservation
	for _, kv := range resp.Kvs {
		var r Reservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("stored reservation %s: %v", kv.Key, err)
		}
		if (r.State == Tentative) != (kv.Lease != 0) {
			t.Fatalf("stored reservation %s is %s with lease %x", kv.Key, r.State, kv.Lease)
		}
		out = append(out, r)
	}
	return out
}
