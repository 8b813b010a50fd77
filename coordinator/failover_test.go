package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardsched/shardsched/api"
)

// Leader failover under load: 3 participants with a 2 s session, 4 shards
// reserving and confirming unique UIDs; the leader is stopped mid-stream.

const foTTL = 2 // participant session TTL, seconds

func foSpecs(t *testing.T) []api.QueueSpec {
	return []api.QueueSpec{
		{Name: "org", Capability: limit(t, 12000, 24*gi)},
		{Name: "team-a", Parent: "org", Capability: limit(t, 4000, 24*gi)},
		{Name: "team-b", Parent: "org"},
		{Name: "team-c", Parent: "org", Capability: limit(t, 12000, 6*gi)},
		{Name: "team-d", Parent: "org"},
	}
}

var foLeaves = []string{"team-a", "team-b", "team-c", "team-d"}

// foWorker is one shard streaming Reserve+Confirm. Its maps are written by
// its goroutine only and read after it stops.
type foWorker struct {
	name        string
	sh          *shard
	requested   map[string]api.Resource // every uid asked for, with its amount
	queue       map[string]string       // and its queue
	confirmed   map[string]Reservation  // told Confirmed and not released since
	released    map[string]bool         // told released (so absent)
	refused     map[string]bool         // told QuotaError (so absent)
	unknown     map[string]bool         // outcome unknown (an error with no answer)
	backlog     []string                // confirmed or unknown, oldest first: what to release when full
	problems    []string                // answers that break the contract
	nQuota      int
	lostAnswers int // releases whose first answer was lost at the stop
	st          *foStream

	mu          sync.Mutex           // guards the two maps below, read during the stream
	confirmedAt map[string]time.Time // when the Confirm answer arrived
	releaseSent map[string]time.Time // when the first Release was sent
}

type foStream struct {
	stop          atomic.Bool
	afterFailover atomic.Bool
	confirmed     atomic.Int64
	confirmedNew  atomic.Int64 // confirmations sent after the failover was observed
	stoppedAt     atomic.Int64 // unix nanos of the leader stop; 0 before
}

func (w *foWorker) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(w.name+": "+format, args...))
}

func (w *foWorker) run(st *foStream) {
	w.st = st
	for i := 0; !st.stop.Load(); i++ {
		uid := fmt.Sprintf("%s-%05d", w.name, i)
		queue := foLeaves[(i+len(w.name))%len(foLeaves)]
		amount := res(250*int64(1+i%4), gi/2*int64(1+i%3))
		w.requested[uid], w.queue[uid] = amount, queue
		job := JobRef{Namespace: "ns-" + w.name, Name: "job-" + uid, UID: uid}

		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		r, err := w.sh.c.Reserve(ctx, job, queue, amount)
		cancel()
		var qe *QuotaError
		switch {
		case err == nil:
			rv := r.Reservation
			if rv.Job.UID != uid || rv.Queue != queue || !rv.Amount.Equal(amount) || rv.State != Tentative ||
				rv.Lease != int64(w.sh.session.Lease()) || len(rv.Path) != 3 || rv.Path[1] != "org" {
				w.problem("reserve %s answered %+v", uid, rv)
			}
		case errors.As(err, &qe):
			w.refused[uid] = true
			w.nQuota++
			w.releaseOldest()
			continue
		case errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrSessionExpired):
			w.problem("reserve %s: %v", uid, err)
			continue
		default:
			w.unknown[uid] = true
			w.backlog = append(w.backlog, uid)
			continue
		}

		sentAfterFailover := st.afterFailover.Load()
		ctx, cancel = context.WithTimeout(context.Background(), 8*time.Second)
		c, err := w.sh.c.Confirm(ctx, uid)
		cancel()
		switch {
		case err == nil:
			if c.Reservation.State != Confirmed || c.Reservation.Lease != 0 || c.Reservation.Job.UID != uid {
				w.problem("confirm %s answered %+v", uid, c.Reservation)
			}
			w.confirmed[uid] = c.Reservation
			w.mu.Lock()
			w.confirmedAt[uid] = time.Now()
			w.mu.Unlock()
			w.backlog = append(w.backlog, uid)
			st.confirmed.Add(1)
			if sentAfterFailover {
				st.confirmedNew.Add(1)
			}
		case errors.Is(err, ErrNotFound):
			// The reservation was answered and its shard lives: it must not vanish.
			w.problem("confirm %s after a successful reserve: %v", uid, err)
		default:
			w.unknown[uid] = true
			w.backlog = append(w.backlog, uid)
		}
	}
}

// releaseOldest releases the oldest reservation this shard may hold, so the
// stream keeps flowing once the queues are full.
func (w *foWorker) releaseOldest() {
	if len(w.backlog) == 0 {
		return
	}
	uid := w.backlog[0]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	w.mu.Lock()
	if _, ok := w.releaseSent[uid]; !ok {
		w.releaseSent[uid] = time.Now()
	}
	w.mu.Unlock()
	sent := time.Now().UnixNano()
	r, err := w.sh.c.Release(ctx, uid)
	cancel()
	if err != nil {
		// Outcome unknown; it stays in the backlog to be retried.
		if _, ok := w.confirmed[uid]; ok {
			delete(w.confirmed, uid)
			w.unknown[uid] = true
		}
		return
	}
	w.backlog = w.backlog[1:]
	if _, ok := w.confirmed[uid]; ok && !r.Found {
		// Legitimate only when the release was in flight at the stop: the
		// old leader committed it and its answer was lost, so the retry on
		// the new leader found nothing. Anything else is a lost reservation.
		if at := w.st.stoppedAt.Load(); at == 0 || sent > at {
			w.problem("release of confirmed %s found nothing", uid)
		} else {
			w.lostAnswers++
		}
	}
	delete(w.confirmed, uid)
	delete(w.unknown, uid)
	w.released[uid] = true
}

func foLeaderKey(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) (key string, lease clientv3.LeaseID, addr string) {
	t.Helper()
	resp, err := cli.Get(ctx, prefix+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no election key: %v", err)
	}
	kv := resp.Kvs[0]
	return string(kv.Key), clientv3.LeaseID(kv.Lease), string(kv.Value)
}

// foWatchCrash checks that a crashed leader's election key and lease stay
// for the first second after the crash: they must go by lease expiry, not
// by a resign or a revoke. A lease renewed every TTL/3 still has at least
// 2·TTL/3 (1.33 s) left when its keepalives stop.
func foWatchCrash(cli *clientv3.Client, key string, lease clientv3.LeaseID, stopped time.Time) <-chan string {
	out := make(chan string, 1)
	go func() {
		defer close(out)
		for time.Since(stopped) < time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			g, err := cli.Get(ctx, key)
			var ttl *clientv3.LeaseTimeToLiveResponse
			if err == nil {
				ttl, err = cli.TimeToLive(ctx, lease)
			}
			cancel()
			if err != nil {
				continue
			}
			// TTL is whole seconds left (0 while under a second); -1 is
			// a lease that no longer exists.
			if len(g.Kvs) == 0 || ttl.TTL == -1 {
				out <- fmt.Sprintf("%s after the crash the old leader's election key present=%v, lease %x TTL %d: "+
					"the term was ended on purpose (resign/revoke), not by lease expiry",
					time.Since(stopped).Round(time.Millisecond), len(g.Kvs) == 1, lease, ttl.TTL)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return out
}

func runFailover(t *testing.T, how string, stopLeader func(p *participant)) {
	ev := newEnv(t, 3, foTTL)
	old := ev.leader(15 * time.Second)
	etcd := ev.etcdClient()
	defer etcd.Close()
	admin := ev.newShard("admin", 10)
	ctx := ctxT(t, 3*time.Minute)
	if _, err := admin.c.SetQueues(ctx, foSpecs(t)); err != nil {
		t.Fatal(err)
	}

	st := &foStream{}
	workers := make([]*foWorker, 4)
	var wg sync.WaitGroup
	for i := range workers {
		w := &foWorker{
			name: fmt.Sprintf("shard-%d", i), sh: ev.newShard(fmt.Sprintf("shard-%d", i), 10),
			requested: map[string]api.Resource{}, queue: map[string]string{}, confirmed: map[string]Reservation{},
			released: map[string]bool{}, refused: map[string]bool{}, unknown: map[string]bool{},
			confirmedAt: map[string]time.Time{}, releaseSent: map[string]time.Time{},
		}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(st)
		}()
	}
	stopped := false
	stopStream := func() {
		if !stopped {
			stopped = true
			st.stop.Store(true)
			wg.Wait()
		}
	}
	defer stopStream()

	// Let the stream run before the stop.
	streamStart := time.Now()
	for st.confirmed.Load() < 30 || time.Since(streamStart) < 1500*time.Millisecond {
		if time.Since(streamStart) > 30*time.Second {
			t.Fatalf("only %d confirmations in 30 s before the stop", st.confirmed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	oldKey, oldLease, oldAddr := foLeaderKey(ctx, t, etcd, ev.cfg.Prefix)
	if oldAddr != old.s.Addr() {
		t.Fatalf("election names %s, leader is %s", oldAddr, old.s.Addr())
	}
	before := st.confirmed.Load()

	stopAt := time.Now()
	st.stoppedAt.Store(stopAt.UnixNano())
	stopLeader(old)
	var crashCheck <-chan string
	if how != "resign" {
		crashCheck = foWatchCrash(etcd, oldKey, oldLease, stopAt)
	}

	// Poll List with short timeouts until a different participant answers.
	pcfg := DefaultClientConfig()
	pcfg.Prefix, pcfg.Shard = ev.cfg.Prefix, "probe"
	pcfg.MaxAttempts, pcfg.Backoff, pcfg.MaxBackoff, pcfg.RequestTimeout = 1, time.Millisecond, time.Millisecond, 250*time.Millisecond
	probe, err := NewClient(etcd, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	var failover time.Duration
	var newAddr string
	var first Result // the new leader's first answer
	for {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		l, err := probe.List(pctx)
		cancel()
		if err == nil {
			probe.mu.Lock()
			addr := probe.leader
			probe.mu.Unlock()
			if addr != oldAddr {
				failover, newAddr, first = time.Since(stopAt), addr, l
				break
			}
		}
		if time.Since(stopAt) > 20*time.Second {
			t.Fatalf("no new leader answered within 20 s of the %s (last error %v)", how, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	answeredAt := time.Now()
	st.afterFailover.Store(true)

	// The new leader's first answer already holds every reservation
	// confirmed before the stop that nobody asked to release before that
	// answer, exactly as confirmed, and respects every capability.
	firstRes := map[string]Reservation{}
	for _, r := range first.Reservations {
		if _, dup := firstRes[r.Job.UID]; dup {
			t.Errorf("new leader lists %s twice", r.Job.UID)
		}
		firstRes[r.Job.UID] = r
	}
	carried := 0
	for _, w := range workers {
		w.mu.Lock()
		for uid, at := range w.confirmedAt {
			if !at.Before(stopAt) {
				continue
			}
			if rs, ok := w.releaseSent[uid]; ok && rs.Before(answeredAt) {
				continue
			}
			carried++
			if r, ok := firstRes[uid]; !ok || r.State != Confirmed {
				t.Errorf("%s, confirmed before the %s, is %+v (present %v) in the new leader's first answer", uid, how, r, ok)
			}
		}
		w.mu.Unlock()
	}
	foCapacity(t, "new leader's first answer", first)
	t.Logf("failover after %s: a new leader answered %s after the stop (session TTL %d s); %d confirmations before the stop, %d of them held and checked in its first answer",
		how, failover.Round(time.Millisecond), foTTL, before, carried)
	if bound := foTTL*time.Second + time.Second; failover > bound {
		t.Errorf("failover after %s took %s, want ≤ TTL + 1 s = %s", how, failover.Round(time.Millisecond), bound)
	}
	var newLeader *participant
	ev.mu.Lock()
	for _, p := range ev.servers {
		if p.s.Addr() == newAddr {
			newLeader = p
		}
	}
	ev.mu.Unlock()
	if newLeader == nil || newLeader == old {
		t.Fatalf("the answer came from %s, not from another participant", newAddr)
	}
	// The stopped participant stops leading (a commit in flight may hold
	// its loop for up to CommitTimeout).
	for old.s.IsLeader() {
		if time.Since(stopAt) > ev.cfg.CommitTimeout+2*time.Second {
			t.Errorf("the stopped participant still leads %s after the %s", time.Since(stopAt).Round(time.Millisecond), how)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if crashCheck != nil {
		if msg, ok := <-crashCheck; ok {
			t.Errorf("%s did not simulate a crash: %s", how, msg)
		}
	}

	// The new leader takes writes: keep streaming until some confirmations
	// sent after the failover came back.
	deadline := time.Now().Add(30 * time.Second)
	for st.confirmedNew.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d confirmations from the new leader in 30 s", st.confirmedNew.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopStream()

	foCheck(ctx, t, ev, admin, etcd, workers)
	if !newLeader.s.IsLeader() {
		t.Logf("note: leadership moved again after the failover")
	}
}

// foCheck verifies the ledger after the stream against what clients were
// told, etcd, and the capabilities.
func foCheck(ctx context.Context, t *testing.T, ev *env, admin *shard, etcd *clientv3.Client, workers []*foWorker) {
	t.Helper()
	list, err := admin.c.List(ctx)
	if err != nil {
		t.Fatalf("final list: %v", err)
	}
	listed := map[string]Reservation{}
	for _, r := range list.Reservations {
		if _, dup := listed[r.Job.UID]; dup {
			t.Errorf("uid %s listed twice", r.Job.UID)
		}
		listed[r.Job.UID] = r
	}
	stored := sdStored(ctx, t, etcd, ev.cfg.Prefix)

	var confirmed, released, refused, unknown, quota, problems, lost int
	requested := map[string]*foWorker{}
	for _, w := range workers {
		for _, p := range w.problems {
			t.Error(p)
		}
		problems += len(w.problems)
		for uid := range w.requested {
			requested[uid] = w
		}
		for uid, want := range w.confirmed {
			confirmed++
			got, ok := listed[uid]
			if !ok {
				t.Errorf("confirmed %s (%s) missing from List", uid, w.name)
				continue
			}
			if got.State != Confirmed || got.Queue != want.Queue || !got.Amount.Equal(want.Amount) || got.Shard != w.name {
				t.Errorf("confirmed %s listed as %+v, was told %+v", uid, got, want)
			}
			s, ok := stored[uid]
			if !ok {
				t.Errorf("confirmed %s missing from etcd", uid)
			} else if s.R.State != Confirmed || s.Lease != 0 {
				t.Errorf("confirmed %s stored as %s on lease %x", uid, s.R.State, s.Lease)
			}
		}
		for uid := range w.released {
			released++
			if _, ok := listed[uid]; ok {
				t.Errorf("released %s still listed", uid)
			}
			if _, ok := stored[uid]; ok {
				t.Errorf("released %s still in etcd", uid)
			}
		}
		for uid := range w.refused {
			refused++
			if _, ok := listed[uid]; ok {
				t.Errorf("refused %s listed", uid)
			}
		}
		unknown += len(w.unknown)
		quota += w.nQuota
		lost += w.lostAnswers
	}
	for uid, r := range listed {
		w, ok := requested[uid]
		if !ok {
			t.Errorf("listed %s was never requested: %+v", uid, r)
		} else if r.Queue != w.queue[uid] || !r.Amount.Equal(w.requested[uid]) || r.Shard != w.name {
			t.Errorf("listed %+v, requested by %s on %s for %v", r, w.name, w.queue[uid], w.requested[uid])
		}
		s, ok := stored[uid]
		if !ok {
			t.Errorf("listed %s not in etcd", uid)
		} else if s.R.State != r.State {
			t.Errorf("%s listed %s, stored %s", uid, r.State, s.R.State)
		}
	}
	for uid := range stored {
		if _, ok := listed[uid]; !ok {
			t.Errorf("%s in etcd but not listed", uid)
		}
	}

	sum := foCapacity(t, "after the stream", list)
	t.Logf("after the stream: %d listed, %d confirmed held, %d released (%d of them answered only by the retry), %d refused (%d quota answers), %d with unknown outcome; org holds %v of %v",
		len(listed), confirmed, released, lost, refused, quota, unknown, sum["org"], foSpecs(t)[0].Capability)
	if confirmed == 0 {
		t.Errorf("no confirmed reservation left to check")
	}
}

// foCapacity checks that Σ amounts along each reservation's path stay within
// every capability that is set, and that the paths are the tree's; it
// returns the sums.
func foCapacity(t *testing.T, when string, list Result) map[string]api.Resource {
	t.Helper()
	tree, err := api.BuildTree(list.Specs)
	if err != nil {
		t.Fatalf("%s: listed tree: %v", when, err)
	}
	sum := map[string]api.Resource{}
	for _, r := range list.Reservations {
		want, err := tree.JobPath(r.Queue)
		if err != nil || fmt.Sprint(want) != fmt.Sprint(r.Path) {
			t.Errorf("%s: %s path %v, tree says %v (%v)", when, r.Job.UID, r.Path, want, err)
		}
		for _, q := range r.Path {
			sum[q], _ = sum[q].Add(r.Amount)
		}
	}
	capped := 0
	for _, spec := range list.Specs {
		for _, d := range spec.Capability.Dims() {
			c, _ := spec.Capability.Get(d)
			if u := sum[spec.Name].Get(d); u > c {
				t.Errorf("%s: queue %s holds %s=%s, above its capability %s", when, spec.Name, d, api.FormatQuantity(d, u), api.FormatQuantity(d, c))
			}
			capped++
		}
	}
	if capped < 6 {
		t.Fatalf("%s: listed tree lost its capabilities: %+v", when, list.Specs)
	}
	return sum
}

func TestLeaderFailoverResign(t *testing.T) {
	runFailover(t, "resign", func(p *participant) { p.s.Resign() })
}

// TestLeaderFailoverCrash stops the leader with Abandon: it stops keeping
// its session alive and does not revoke it, as a crashed process would.
func TestLeaderFailoverCrash(t *testing.T) {
	runFailover(t, "abandon", func(p *participant) { p.s.Abandon() })
}

// TestLeaderFailoverCrashHard crashes the leader from outside: its HTTP
// server stops answering and its connection to etcd is cut, so nothing can
// resign or revoke; the lease must expire on its own. The connection is
// closed before the client: Client.Close ends the session's keep-alives
// before it closes its connection, and the leader, seeing its session end,
// resigns (as it should when it is still running), which could get
// through in between and end the term on purpose.
func TestLeaderFailoverCrashHard(t *testing.T) {
	runFailover(t, "hard crash", func(p *participant) {
		_ = p.s.hs.Close()
		_ = p.cli.ActiveConnection().Close()
		_ = p.cli.Close()
	})
}
