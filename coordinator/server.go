package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/shardsched/shardsched/api"
)

// Errors of the serving side.
var (
	ErrNotLeader      = errors.New("not the coordinator leader")
	ErrUnavailable    = errors.New("coordinator unavailable")
	ErrSessionExpired = errors.New("shard session lease expired")
)

// Config configures a Server. Use DefaultConfig and override.
type Config struct {
	// Prefix is the etcd key prefix of the coordinator's state.
	Prefix string
	// Name identifies this participant in logs.
	Name string
	// ListenAddr is the HTTP listen address ("127.0.0.1:0" picks a port).
	ListenAddr string
	// AdvertiseAddr is the address clients use to reach this server; empty
	// means the listener's address.
	AdvertiseAddr string
	// SessionTTL is the leader's etcd session TTL in seconds: a leader that
	// stops without resigning is replaced within about this time.
	SessionTTL int
	// MaxGroupOps bounds the etcd operations in one commit (etcd refuses a
	// Txn of more than 128 by default).
	MaxGroupOps int
	// GroupDelay is how long the leader waits for more requests before it
	// commits a group that is not full. 0 commits as soon as no request is
	// waiting; requests that arrive during a commit form the next group.
	GroupDelay time.Duration
	// CommitTimeout bounds one group commit.
	CommitTimeout time.Duration
	Logger        *slog.Logger
	// Tracer provides the leader-side spans, joined to the shards' spans by
	// W3C trace context; nil means no tracing.
	Tracer trace.TracerProvider
}

// DefaultConfig returns the defaults: prefix /shardsched/coordinator, a 10 s
// session, groups of up to 128 operations committed as soon as the queue is
// empty.
func DefaultConfig() Config {
	return Config{
		Prefix:        "/shardsched/coordinator",
		ListenAddr:    "127.0.0.1:0",
		SessionTTL:    10,
		MaxGroupOps:   128,
		CommitTimeout: 5 * time.Second,
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Prefix == "" || c.Prefix[0] != '/':
		return fmt.Errorf("coordinator prefix %q: must start with /", c.Prefix)
	case c.SessionTTL < 1 || c.SessionTTL > 3600:
		return fmt.Errorf("coordinator session TTL %d s: must be between 1 and 3600", c.SessionTTL)
	case c.MaxGroupOps < 1 || c.MaxGroupOps > 128:
		return fmt.Errorf("coordinator max group ops %d: must be between 1 and 128", c.MaxGroupOps)
	case c.GroupDelay < 0 || c.GroupDelay > time.Second:
		return fmt.Errorf("coordinator group delay %s: must be between 0 and 1s", c.GroupDelay)
	case c.CommitTimeout <= 0:
		return fmt.Errorf("coordinator commit timeout %s: must be positive", c.CommitTimeout)
	}
	return nil
}

func (c Config) electionPrefix() string { return c.Prefix + "/election" }
func (c Config) treeKey() string        { return c.Prefix + "/tree" }
func (c Config) resPrefix() string      { return c.Prefix + "/res/" }

// Seq orders the operations a leader applied: by term (the revision of the
// leader's election key, increasing across leaders), then group, then
// position in the group. Tests replay answers in Seq order against a model.
type Seq struct {
	Term  int64 `json:"term"`
	Group int64 `json:"group"`
	Index int   `json:"index"`
}

// Less orders sequence numbers.
func (s Seq) Less(o Seq) bool {
	if s.Term != o.Term {
		return s.Term < o.Term
	}
	if s.Group != o.Group {
		return s.Group < o.Group
	}
	return s.Index < o.Index
}

// serverStats are cumulative counters of the leader loop.
type serverStats struct {
	groups, calls, txns, commitNanos, applyNanos atomic.Int64
}

// Stats is a snapshot of a server's counters since it started.
type Stats struct {
	Groups, Calls, Txns   int64
	CommitTime, ApplyTime time.Duration
}

// Stats returns the leader-loop counters: groups committed, calls answered,
// etcd Txns, and time spent committing and applying.
func (s *Server) Stats() Stats {
	return Stats{
		Groups: s.stats.groups.Load(), Calls: s.stats.calls.Load(), Txns: s.stats.txns.Load(),
		CommitTime: time.Duration(s.stats.commitNanos.Load()), ApplyTime: time.Duration(s.stats.applyNanos.Load()),
	}
}

type opKind int

// String names the operation in span names.
func (k opKind) String() string {
	switch k {
	case opReserve:
		return "reserve"
	case opConfirm:
		return "confirm"
	case opRelease:
		return "release"
	case opSetTree:
		return "set-queues"
	case opList:
		return "list"
	case opExpire:
		return "expire"
	case opResize:
		return "resize"
	case opEvicting:
		return "evicting"
	}
	return "unknown"
}

const (
	opReserve opKind = iota
	opConfirm
	opRelease
	opSetTree
	opList
	opExpire // internal: a reservation key was deleted by lease expiry
	opResize
	opEvicting // the reservations marked for eviction
)

// call is one request to the leader's loop.
type call struct {
	kind    opKind
	reserve ReserveRequest
	resize  ResizeRequest
	uid     string
	specs   []api.QueueSpec
	delRev  int64
	done    chan result // buffered, 1
}

type result struct {
	Reservation  *Reservation    `json:"reservation,omitempty"`
	Existed      bool            `json:"existed,omitempty"`
	Found        bool            `json:"found,omitempty"`
	Reservations []Reservation   `json:"reservations,omitempty"`
	Specs        []api.QueueSpec `json:"specs,omitempty"`
	// Granted and Refused answer a resize: how many targets were applied,
	// and why the next one was not.
	Granted int         `json:"granted,omitempty"`
	Refused *QuotaError `json:"refused,omitempty"`
	// Victims answer a Reserve whose reservation is nominated: the
	// reservations marked to give quota back to it.
	Victims []Reservation `json:"victims,omitempty"`
	Seq     Seq           `json:"seq"`
	err     error
}

// Server is one coordinator participant: it campaigns for leadership, leads
// while elected, and serves the HTTP API (followers answer ErrNotLeader with
// the leader's address).
type Server struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger
	ln  net.Listener
	hs  *http.Server

	stats serverStats

	mu    sync.Mutex // guards the fields below
	calls chan *call // the current term's request channel; nil when not leading
	// termEnded is closed when the current term stops taking calls.
	termEnded chan struct{}
	term      int64
	session   *concurrency.Session
	stopped   bool
}

// NewServer validates cfg and listens; Run campaigns and serves.
func NewServer(cli *clientv3.Client, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cli == nil {
		return nil, errors.New("coordinator: nil etcd client")
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("coordinator listen %s: %w", cfg.ListenAddr, err)
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = "http://" + ln.Addr().String()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	s := &Server{cfg: cfg, cli: cli, log: cfg.Logger.With("component", "coordinator", "name", cfg.Name), ln: ln}
	s.hs = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Addr is the advertised address.
func (s *Server) Addr() string { return s.cfg.AdvertiseAddr }

// IsLeader reports whether this server currently leads.
func (s *Server) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls != nil
}

// Run serves HTTP and campaigns until ctx is cancelled. A term that ends
// (session lost, compare failed, etcd error) is followed by a new campaign.
func (s *Server) Run(ctx context.Context) error {
	httpErr := make(chan error, 1)
	go func() { httpErr <- s.hs.Serve(s.ln) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.hs.Shutdown(shutdownCtx)
		<-httpErr
	}()
	for ctx.Err() == nil {
		err := s.campaignAndLead(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("coordinator term ended", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Abandon simulates a crash for tests: this server stops leading and stops
// keeping its session alive without revoking it, so the lease expires on its
// own after the TTL.
func (s *Server) Abandon() {
	s.mu.Lock()
	sess := s.session
	s.stopped = true
	s.mu.Unlock()
	if sess != nil {
		sess.Orphan()
	}
}

func (s *Server) isAbandoned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// Resign ends the current term gracefully (closing the session, which
// revokes its lease) so another participant takes over at once.
func (s *Server) Resign() {
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	if sess != nil {
		_ = sess.Close()
	}
}

func (s *Server) campaignAndLead(ctx context.Context) error {
	s.mu.Lock()
	abandoned := s.stopped
	s.mu.Unlock()
	if abandoned {
		<-ctx.Done()
		return ctx.Err()
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(s.cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("new session: %w", err)
	}
	defer func() {
		if !s.isAbandoned() {
			_ = sess.Close()
		}
	}()
	s.mu.Lock()
	s.session = sess
	s.mu.Unlock()
	el := concurrency.NewElection(sess, s.cfg.electionPrefix())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := el.Campaign(cctx, s.cfg.AdvertiseAddr); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	s.log.Info("elected coordinator leader", "addr", s.cfg.AdvertiseAddr, "term", el.Rev())
	err = s.lead(cctx, sess, el)
	if s.isAbandoned() {
		// A simulated crash: the election key and the lease are left to expire.
		return err
	}
	// Step down: resign if the session is still alive so the next leader
	// need not wait for the TTL.
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	_ = el.Resign(rctx)
	rcancel()
	return err
}

// term is the state of one leadership term, owned by the lead goroutine.
type term struct {
	s      *Server
	key    string
	rev    int64
	ledger *Ledger
	revs   map[string]int64 // uid → revision of our last write of its key
	group  int64
}

func (s *Server) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election) error {
	t := &term{s: s, key: el.Key(), rev: el.Rev()}
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
	limit := t.s.cfg.MaxGroupOps
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
	res, ops, err := t.applyOne(c)
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
			return result{err: err}, nil, nil
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
		return result{Reservations: t.ledger.Reservations(), Specs: t.ledger.Tree().Specs()}, nil, nil
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
		var ps []pending
		var ops []clientv3.Op
		var puts []string // uids written, to record their revision
		for i, c := range batch {
			if l := t.writeLease(c); l != 0 && dead[l] {
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
		n := min(len(ops), t.s.cfg.MaxGroupOps)
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

// submit hands a call to the leader loop of this server, if it leads.
func (s *Server) submit(ctx context.Context, c *call) result {
	s.mu.Lock()
	calls, ended := s.calls, s.termEnded
	s.mu.Unlock()
	if calls == nil {
		return result{err: ErrNotLeader}
	}
	c.done = make(chan result, 1)
	select {
	case calls <- c:
	case <-ended:
		return result{err: ErrNotLeader}
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
	select {
	case r := <-c.done:
		return r
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
}

// submitMany hands calls to the leader loop in order and waits for all.
func (s *Server) submitMany(ctx context.Context, calls []*call) []result {
	out := make([]result, len(calls))
	s.mu.Lock()
	ch, ended := s.calls, s.termEnded
	s.mu.Unlock()
	for i, c := range calls {
		c.done = make(chan result, 1)
		if ch == nil {
			out[i] = result{err: ErrNotLeader}
			continue
		}
		select {
		case ch <- c:
			continue
		case <-ended:
			out[i] = result{err: ErrNotLeader}
		case <-ctx.Done():
			out[i] = result{err: ctx.Err()}
		}
		calls[i] = nil
	}
	for i, c := range calls {
		if c == nil || out[i].err != nil {
			continue
		}
		select {
		case out[i] = <-c.done:
		case <-ctx.Done():
			out[i] = result{err: ctx.Err()}
		}
	}
	return out
}

// leaderAddr returns the current leader's address from etcd.
func leaderAddr(ctx context.Context, cli *clientv3.Client, prefix string) (string, error) {
	resp, err := cli.Get(ctx, prefix+"/election/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("%w: no coordinator leader elected", ErrUnavailable)
	}
	return string(resp.Kvs[0].Value), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
