package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// One leadership term: what a participant does from the moment it wins the
// election (campaignAndLead, server.go) until its term ends. lead rebuilds
// the ledger from etcd, then takes calls from the channel that submit feeds
// and handles them in groups: apply runs each call against the ledger, and
// commit writes the group's etcd operations in Txns guarded by the election
// key, answering every call of the group only once its fate is known. The
// ledger and the revisions below belong to the goroutine that runs lead;
// the watch goroutine only sends calls into the same channel.

// term is the state of one leadership term, owned by the lead goroutine.
type term struct {
	s      *Server
	key    string
	rev    int64
	ledger *Ledger
	revs   map[string]int64 // uid → revision of our last write of its key
	group  int64
	// txnOps is the most operations one Txn carries: MaxGroupOps until
	// etcd refuses a Txn that large, then halved until it takes one.
	txnOps int
}

func (s *Server) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election) error {
	t := &term{s: s, key: el.Key(), rev: el.Rev(), txnOps: s.cfg.MaxGroupOps}
	loadRev, err := t.load(ctx)
	if err != nil {
		return err
	}
	calls := make(chan *call, 4096)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watchErr := make(chan error, 1)
	go t.watchExpiry(wctx, loadRev, calls, watchErr)

	ended := make(chan struct{})
	s.mu.Lock()
	s.calls, s.term, s.termEnded = calls, t.rev, ended
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.calls = nil
		s.mu.Unlock()
		close(ended)
		// Fail whatever is still queued; clients retry on the next leader.
		for {
			select {
			case c := <-calls:
				c.done <- result{err: ErrNotLeader}
			default:
				return
			}
		}
	}()

	for {
		var first *call
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sess.Done():
			return errors.New("session lost")
		case err := <-watchErr:
			return fmt.Errorf("reservation watch: %w", err)
		case first = <-calls:
		}
		batch := []*call{first}
		batch = t.fill(ctx, calls, batch)
		if err := t.commit(ctx, batch); err != nil {
			return err
		}
	}
}

// fill drains waiting calls into the batch up to the group size, waiting up
// to GroupDelay for more when configured.
func (t *term) fill(ctx context.Context, calls chan *call, batch []*call) []*call {
	// A group is one Txn: after etcd refused a Txn as too large, groups
	// shrink with the Txns, so that a group still commits whole or not at
	// all.
	limit := max(t.txnOps, 1)
	var timer <-chan time.Time
	if t.s.cfg.GroupDelay > 0 {
		timer = time.After(t.s.cfg.GroupDelay)
	}
	for len(batch) < limit {
		select {
		case c := <-calls:
			batch = append(batch, c)
			continue
		default:
		}
		if timer == nil {
			return batch
		}
		select {
		case c := <-calls:
			batch = append(batch, c)
		case <-timer:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// load rebuilds the ledger from etcd, guarded by leadership, and returns the
// revision it read at.
func (t *term) load(ctx context.Context) (int64, error) {
	cfg := t.s.cfg
	lctx, cancel := context.WithTimeout(ctx, cfg.CommitTimeout)
	defer cancel()
	resp, err := t.s.cli.Txn(lctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(clientv3.OpGet(cfg.treeKey()), clientv3.OpGet(cfg.resPrefix(), clientv3.WithPrefix())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("load ledger: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrNotLeader
	}
	var specs []api.QueueSpec
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if err := json.Unmarshal(kvs[0].Value, &specs); err != nil {
			return 0, fmt.Errorf("load queue tree: %w", err)
		}
	}
	// A stored tree was valid when written, but the rules may have grown
	// since: keep every queue still valid and say what is left out, rather
	// than refuse to lead (which would stop every admission).
	tree, left := api.BuildTreePartial(specs)
	if len(left) > 0 {
		names := make([]string, 0, len(left))
		for n := range left {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t.s.log.Warn("stored queue tree: queue left out", "queue", n, "err", left[n])
		}
	}
	t.ledger = NewLedger(tree)
	t.revs = map[string]int64{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var r Reservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.s.log.Error("skipping unreadable reservation", "key", string(kv.Key), "err", err)
			continue
		}
		t.ledger.Restore(r)
		t.revs[r.Job.UID] = kv.ModRevision
	}
	t.ledger.Settle()
	return resp.Header.Revision, nil
}

// watchExpiry turns deletions of reservation keys into opExpire calls; the
// loop ignores those that its own writes have superseded.
func (t *term) watchExpiry(ctx context.Context, fromRev int64, calls chan<- *call, errc chan<- error) {
	cfg := t.s.cfg
	wch := t.s.cli.Watch(clientv3.WithRequireLeader(ctx), cfg.resPrefix(), clientv3.WithPrefix(),
		clientv3.WithRev(fromRev+1), clientv3.WithFilterPut())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			errc <- err
			return
		}
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.DELETE {
				continue
			}
			uid := string(ev.Kv.Key[len(cfg.resPrefix()):])
			c := &call{kind: opExpire, uid: uid, delRev: ev.Kv.ModRevision, done: make(chan result, 1)}
			select {
			case calls <- c:
			case <-ctx.Done():
				return
			}
		}
	}
	if ctx.Err() == nil {
		errc <- errors.New("watch closed")
	}
}

// pending is one applied call awaiting its group's commit.
type pending struct {
	c   *call
	res result
}

// apply runs one call against the ledger and returns the etcd ops it needs,
// with the writes of what the call changed as a side effect (victims marked
// or unmarked).
func (t *term) apply(c *call) (result, []clientv3.Op, error) {
	if c.kind == opReserve && c.behind != nil && c.behind.blocks {
		c.blocks = true
		return result{err: &wrapped{ErrBehind, "not tried: job " + c.behind.reserve.Job.String() + " ahead of it was not admitted"}}, nil, nil
	}
	res, ops, err := t.applyOne(c)
	if c.kind == opReserve {
		c.blocks = err != nil || wire.HoldsUpQueue(res.err)
	}
	for _, uid := range t.ledger.takeDirty() {
		r, ok := t.ledger.Get(uid)
		if !ok {
			ops = append(ops, clientv3.OpDelete(t.s.cfg.resPrefix()+uid))
			continue
		}
		op, perr := t.putReservation(r)
		if perr != nil {
			t.s.log.Error("reservation not written", "job", r.Job.String(), "err", perr)
			continue
		}
		ops = append(ops, op)
	}
	return res, ops, err
}

func (t *term) applyOne(c *call) (result, []clientv3.Op, error) {
	cfg := t.s.cfg
	switch c.kind {
	case opReserve:
		before, had := t.ledger.Get(c.reserve.Job.UID)
		r, existed, err := t.ledger.Reserve(c.reserve)
		if err != nil {
			return result{err: err}, nil, nil
		}
		res := result{Reservation: &r, Existed: existed}
		if r.State == Nominated {
			res.Victims = t.ledger.Victims(r.Job.UID)
			if !existed {
				t.s.log.Info("quota taken back", "job", r.Job.String(), "queue", r.Queue, "victims", describePlan(res.Victims))
			}
		}
		if existed && had && before.Lease == r.Lease && before.Queue == r.Queue && before.State == r.State {
			return res, nil, nil
		}
		// New, moved to another queue or to the asker's lease: (re)write
		// it under its lease.
		op, err := t.putReservation(r)
		if err != nil {
			if !existed {
				t.ledger.Release(r.Job.UID)
			}
			return result{err: err}, nil, nil
		}
		return res, []clientv3.Op{op}, nil
	case opResize:
		before, _ := t.ledger.Get(c.resize.UID)
		r, granted, refused, err := t.ledger.Resize(c.resize)
		if err != nil {
			if r.Job.UID == "" || before.Amount.Equal(r.Amount) {
				return result{err: err}, nil, nil
			}
			// Refused part way (an overflow), after the bound's raise or
			// earlier targets changed it: what the ledger holds is written.
			op, perr := t.putReservation(r)
			if perr != nil {
				return result{err: errors.Join(err, perr)}, nil, nil
			}
			return result{err: err}, []clientv3.Op{op}, nil
		}
		res := result{Reservation: &r, Granted: granted, Refused: refused}
		if before.Amount.Equal(r.Amount) {
			return res, nil, nil
		}
		op, err := t.putReservation(r)
		if err != nil {
			return result{err: err}, nil, nil
		}
		return res, []clientv3.Op{op}, nil
	case opConfirm:
		before, ok := t.ledger.Get(c.uid)
		r, err := t.ledger.Confirm(c.uid)
		if err != nil {
			return result{err: err}, nil, nil
		}
		res := result{Reservation: &r}
		if ok && before.State == Confirmed {
			return res, nil, nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return result{err: err}, nil, nil
		}
		return res, []clientv3.Op{clientv3.OpPut(cfg.resPrefix()+r.Job.UID, string(b))}, nil
	case opRelease:
		r, found := t.ledger.Release(c.uid)
		res := result{Found: found}
		if !found {
			return res, nil, nil
		}
		res.Reservation = &r
		return res, []clientv3.Op{clientv3.OpDelete(cfg.resPrefix() + c.uid)}, nil
	case opSetTree:
		tree, err := t.ledger.SetTree(c.specs)
		if err != nil {
			return result{err: err}, nil, nil
		}
		specs := tree.Specs()
		b, err := json.Marshal(specs)
		if err != nil {
			return result{err: err}, nil, nil
		}
		return result{Specs: specs}, []clientv3.Op{clientv3.OpPut(cfg.treeKey(), string(b))}, nil
	case opList:
		return result{Reservations: t.ledger.ReservationsIn(c.queues), Specs: t.ledger.Tree().Specs()}, nil, nil
	case opEvicting:
		return result{Reservations: t.ledger.Evicting()}, nil, nil
	case opExpire:
		if rev, ok := t.revs[c.uid]; ok && rev < c.delRev {
			if r, found := t.ledger.Release(c.uid); found {
				t.s.log.Info("tentative reservation expired with its shard's lease", "job", r.Job.String(), "queue", r.Queue)
			}
			delete(t.revs, c.uid)
		}
		return result{}, nil, nil
	}
	return result{err: fmt.Errorf("%w: unknown operation", ErrInvalid)}, nil, nil
}

// putReservation is the write of one reservation: a tentative or nominated
// one under its shard's lease, a confirmed one without.
func (t *term) putReservation(r Reservation) (clientv3.Op, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return clientv3.Op{}, err
	}
	var opts []clientv3.OpOption
	if (r.State == Tentative || r.State == Nominated) && r.Lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(r.Lease)))
	}
	return clientv3.OpPut(t.s.cfg.resPrefix()+r.Job.UID, string(b), opts...), nil
}

// writeLease is the lease a call would write its reservation under, when
// that could fail for a dead lease (0 otherwise).
func (t *term) writeLease(c *call) int64 {
	switch c.kind {
	case opReserve:
		r, ok := t.ledger.Get(c.reserve.Job.UID)
		if !ok || r.State == Nominated || (r.State == Tentative && c.reserve.Lease != 0 && r.Lease != c.reserve.Lease) {
			return c.reserve.Lease
		}
	case opResize:
		if r, ok := t.ledger.Get(c.resize.UID); ok && r.State == Tentative {
			return r.Lease
		}
	}
	return 0
}

// pendingRev marks, in term.revs, a key written by the group being
// committed: a deletion seen meanwhile (the lease expiry of the key's
// earlier version) must not release what this group writes.
const pendingRev = math.MaxInt64

// commit applies a batch in order and commits its writes in one guarded
// Txn, splitting at MaxGroupOps. Callers are answered only after the commit.
// On an ambiguous failure the ledger is rebuilt from etcd and the batch is
// re-applied (safe: every operation is idempotent by UID); calls whose shard
// lease is gone fail with ErrSessionExpired.
func (t *term) commit(ctx context.Context, batch []*call) error {
	const maxAttempts = 3
	dead := map[int64]bool{}
	for attempt := 1; ; attempt++ {
		t.group++
		// Sized for one key written per call, as most calls write.
		ps := make([]pending, 0, len(batch))
		ops := make([]clientv3.Op, 0, len(batch))
		puts := make([]string, 0, len(batch)) // uids written, to record their revision
		a0 := time.Now()
		for i, c := range batch {
			if l := t.writeLease(c); l != 0 && dead[l] {
				c.blocks = true
				ps = append(ps, pending{c: c, res: result{err: fmt.Errorf("%w: lease %x", ErrSessionExpired, l)}})
				continue
			}
			res, cops, _ := t.apply(c)
			res.Seq = Seq{Term: t.rev, Group: t.group, Index: i}
			ps = append(ps, pending{c: c, res: res})
			ops = append(ops, cops...)
			for _, op := range cops {
				if op.IsPut() {
					uid := string(op.KeyBytes()[len(t.s.cfg.resPrefix()):])
					puts = append(puts, uid)
					t.revs[uid] = pendingRev
				}
			}
		}
		t.s.stats.applyNanos.Add(int64(time.Since(a0)))
		t0 := time.Now()
		rev, err := t.txn(ctx, dedupeOps(ops))
		t.s.stats.commitNanos.Add(int64(time.Since(t0)))
		if err == nil {
			t.s.stats.groups.Add(1)
			t.s.stats.calls.Add(int64(len(ps)))
			for _, uid := range puts {
				t.revs[uid] = rev
			}
			for _, p := range ps {
				p.c.done <- p.res
			}
			return nil
		}
		if errors.Is(err, ErrNotLeader) || attempt >= maxAttempts {
			for _, p := range ps {
				if errors.Is(err, ErrNotLeader) {
					p.c.done <- result{err: ErrNotLeader}
				} else {
					p.c.done <- result{err: fmt.Errorf("%w: %v", ErrUnavailable, err)}
				}
			}
			return err
		}
		t.s.log.Warn("group commit failed; rebuilding ledger and re-applying", "err", err, "attempt", attempt)
		// Rebuild first: which lease a call writes under is read from
		// the ledger as stored, not as this failed attempt left it.
		if _, lerr := t.load(ctx); lerr != nil {
			for _, p := range ps {
				p.c.done <- result{err: fmt.Errorf("%w: %v", ErrUnavailable, lerr)}
			}
			return lerr
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.findDeadLeases(ctx, batch, dead)
		}
	}
}

// txn commits ops in Txns of at most MaxGroupOps, each guarded by the
// leader's election key, and returns the revision of the last one.
func (t *term) txn(ctx context.Context, ops []clientv3.Op) (int64, error) {
	var rev int64
	for len(ops) > 0 || rev == 0 {
		n := min(len(ops), max(t.txnOps, 1))
		// Not derived from the term's context: a commit that is in flight
		// when the term ends must still get a definite answer (committed
		// under our leadership, or refused by the compare), so no caller
		// is told "unavailable" for a write that landed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.s.cfg.CommitTimeout)
		resp, err := t.s.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
			Then(ops[:n]...).
			Commit()
		cancel()
		t.s.stats.txns.Add(1)
		if err != nil && tooLarge(err) && n > 1 {
			// Refused whole, before anything was applied: send it in
			// smaller Txns from now on.
			t.txnOps = n / 2
			t.s.log.Warn("etcd refused a Txn this large; committing in smaller ones (raise etcd's --max-txn-ops and --max-request-bytes to MaxGroupOps, or lower MaxGroupOps)",
				"ops", n, "now", t.txnOps, "err", err)
			continue
		}
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, ErrNotLeader
		}
		rev = resp.Header.Revision
		ops = ops[n:]
	}
	return rev, nil
}

// tooLarge reports whether etcd, or the gRPC client before it, refused a
// Txn for its number of operations or its size (a message over the
// client's send limit fails as ResourceExhausted, which etcd's "too many
// requests" shares: halving is harmless then).
func tooLarge(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrGRPCTooManyOps) ||
		errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) ||
		status.Code(err) == codes.ResourceExhausted
}

// dedupeOps keeps only the last operation on each key (etcd refuses a Txn
// that names a key twice); the group is atomic, so only its final state
// matters. Order is otherwise preserved.
func dedupeOps(ops []clientv3.Op) []clientv3.Op {
	last := make(map[string]int, len(ops))
	for i, op := range ops {
		last[string(op.KeyBytes())] = i
	}
	if len(last) == len(ops) {
		return ops
	}
	out := make([]clientv3.Op, 0, len(last))
	for i, op := range ops {
		if last[string(op.KeyBytes())] == i {
			out = append(out, op)
		}
	}
	return out
}

func (t *term) findDeadLeases(ctx context.Context, batch []*call, dead map[int64]bool) {
	seen := map[int64]bool{}
	for _, c := range batch {
		l := t.writeLease(c)
		if l == 0 || seen[l] {
			continue
		}
		seen[l] = true
		cctx, cancel := context.WithTimeout(ctx, t.s.cfg.CommitTimeout)
		resp, err := t.s.cli.TimeToLive(cctx, clientv3.LeaseID(l))
		cancel()
		if err == nil && resp.TTL <= 0 {
			dead[l] = true
		}
	}
}
