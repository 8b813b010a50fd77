package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	// ErrUnauthenticated: the call did not carry the shared token.
	ErrUnauthenticated = errors.New("coordinator call not authenticated")
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
	// Token, when set, is the secret every call must carry
	// ("Authorization: Bearer <token>"); any other call is refused 401
	// before it is read. Empty accepts every caller (tests, loopback).
	Token string
	// SessionTTL is the leader's etcd session TTL in seconds: a leader that
	// stops without resigning is replaced within about this time.
	SessionTTL int
	// MaxGroupOps bounds the calls in one group and the etcd operations in
	// one Txn, 1..4096. etcd refuses a Txn of more than its --max-txn-ops
	// (128 by default): above that, raise it (and --max-request-bytes for
	// groups of a few thousand) on the etcd the coordinator writes to; the
	// deploy files keep the defaults. A leader whose Txn etcd refuses as
	// too large halves its groups and Txns until etcd takes them, for the
	// rest of its term, and says so in its log: a value too high costs
	// throughput, not reservations.
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
	case c.MaxGroupOps < 1 || c.MaxGroupOps > maxGroupOps:
		return fmt.Errorf("coordinator max group ops %d: must be between 1 and %d", c.MaxGroupOps, maxGroupOps)
	case c.GroupDelay < 0 || c.GroupDelay > time.Second:
		return fmt.Errorf("coordinator group delay %s: must be between 0 and 1s", c.GroupDelay)
	case c.CommitTimeout <= 0:
		return fmt.Errorf("coordinator commit timeout %s: must be positive", c.CommitTimeout)
	}
	return nil
}

// maxGroupOps is the largest MaxGroupOps accepted.
const maxGroupOps = 4096

func (c Config) electionPrefix() string { return c.Prefix + "/election" }
func (c Config) treeKey() string        { return c.Prefix + "/tree" }
func (c Config) resPrefix() string      { return c.Prefix + "/res/" }

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
	// queues limits a list to the reservations in these leaf queues
	// (none: every queue).
	queues []string
	delRev int64
	done   chan result // buffered, 1
	// behind is the reserve of the same batch this one waits behind
	// (batchItem.Behind); blocks is set when this reserve is applied: it
	// was not admitted, not nominated and could fit some day, or it was
	// itself behind one that blocked. Both are read and written only by
	// the term's loop once the call is submitted.
	behind *call
	blocks bool
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
// the leader's address). One leadership term is in term.go.
//
// Call contract:
//   - NewServer binds the listener and starts nothing. Run must then be
//     called at most once, and the goroutine that calls it is kept until
//     ctx is cancelled: Run serves HTTP on a goroutine of its own and
//     campaigns and leads in the calling one, which alone owns each term's
//     ledger. A term that ends, or a campaign that fails, is followed by a
//     new campaign 100 ms later; etcd errors never end Run. Run returns nil
//     once ctx is done, after stepping down (resigning the election, bounded
//     by 1 s) and shutting down HTTP (requests in flight get up to 2 s).
//   - Addr, IsLeader and Stats may be called from any goroutine, before,
//     during or after Run; they do no I/O and wait at most for a short
//     internal lock.
//   - Resign may be called from any goroutine. It closes the current etcd
//     session, which revokes its lease, so it blocks on etcd for up to
//     Config.SessionTTL seconds. It ends the current term (or campaign), not
//     the Server: Run campaigns again, and may win again.
//   - Abandon is for tests that simulate a crash; any goroutine, no etcd
//     I/O. The session is no longer kept alive (its lease expires after the
//     TTL), the current term ends when the session does, and the Server
//     never campaigns again; Run keeps answering HTTP as a follower until
//     ctx is cancelled.
//   - HTTP requests are handled on net/http's goroutines. Each hands its
//     calls to the leading term and blocks until they are answered (after
//     the commit of the group holding them succeeds or fails, or with
//     ErrNotLeader when the term ends first) or the request's context ends.
//     A follower queues nothing: it answers ErrNotLeader after one etcd
//     read of the leader's address.
//
// The caller owns the etcd client: the Server never closes it, and it must
// stay open until Run returns. The Server never answers a call it applied
// before the group holding it is committed or has failed (read-only calls
// included: their group is an empty Txn that checks leadership), and never
// writes the queue tree or a reservation without the compare on its own
// election key.
type Server struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger
	ln  net.Listener
	hs  *http.Server

	stats serverStats
	// tracer makes the leader-side spans; nil when cfg.Tracer is the no-op
	// provider (tracing off), so a call builds no span attributes.
	tracer trace.Tracer

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
	s.tracer = tracerOf(cfg.Tracer)
	s.hs = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// tracerOf is the coordinator's tracer from tp, or nil when tp is the no-op
// provider (tracing off): callers then start no span and build no span
// attributes (noSpan).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	return tp.Tracer("shardsched/coordinator")
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
	return awaitAnswer(ctx, c, ended)
}

// awaitAnswer waits for c's answer. A term answers every call it took
// before it ends; one sent as the term ended (the send and the end were
// both ready) may never be taken, so once the term has ended a call not
// answered yet was not applied, and is answered ErrNotLeader (the client
// asks the next leader) instead of waiting for its context.
func awaitAnswer(ctx context.Context, c *call, ended <-chan struct{}) result {
	select {
	case r := <-c.done:
		return r
	case <-ended:
		select {
		case r := <-c.done:
			return r
		default:
			return result{err: ErrNotLeader}
		}
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
		out[i] = awaitAnswer(ctx, c, ended)
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
