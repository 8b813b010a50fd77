package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/shardsched/shardsched/wire"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Shard is one scheduler shard's membership and ownership. Create it with
// New, run it with Run. Holds, Use, Done, Owned and Members are safe for
// concurrent use.
type Shard struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger
	// gossipAddr is the advertised gossip address, fixed at start.
	gossipAddr string
	ml         *memberlist.Memberlist

	events chan struct{} // membership changed (coalesced)

	metaMu sync.Mutex // guards meta and peers
	meta   Meta
	peers  map[string]Meta // live members by name, copied from memberlist's events

	mu      sync.Mutex // guards m, queues, session, ring; lock order: mu before metaMu
	m       *Machine
	queues  []string
	session *concurrency.Session
	ring    Ring

	crashed atomic.Bool  // Crash was called: gossip is already shut down
	changes atomic.Int64 // ownership records acquired or released
	// acquiredRev is the highest revision at which this shard acquired an
	// ownership record: the claim store asks etcd for watch progress until
	// it has seen that far, so that the owner of a newly taken queue may
	// place its jobs in its next cycle instead of waiting for someone to
	// ask first (Claims.OwnerMayPlace).
	acquiredRev atomic.Int64

	results chan func() // action results, applied by the loop
	kick    chan struct{}
	// metaChanged wakes the one goroutine that re-gossips the metadata.
	metaChanged chan struct{}
	stopped     chan struct{}
	// life ends when Run returns (endLife), with stopped: it bounds the
	// record operations still in flight then (records.go, opContext).
	life    context.Context
	endLife context.CancelFunc
}

// New validates cfg, opens an etcd session, claims the shard name in etcd
// (a duplicate name is an error), and starts gossip. Run must follow.
func New(ctx context.Context, cli *clientv3.Client, cfg Config) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cli == nil {
		return nil, errors.New("shard: nil etcd client")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Shard{
		cfg: cfg, cli: cli, log: cfg.Logger.With("shard", cfg.Name),
		events: make(chan struct{}, 1), results: make(chan func(), 1024), kick: make(chan struct{}, 1), metaChanged: make(chan struct{}, 1),
		stopped: make(chan struct{}),
		meta:    Meta{ID: cfg.Name, API: cfg.APIAddr},
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	if b, err := json.Marshal(s.meta); err != nil || len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("shard metadata is %d bytes, over memberlist's limit of %d (shorten the API address %q)", len(b), memberlist.MetaMaxSize, cfg.APIAddr)
	}
	s.m = NewMachine(MachineConfig{RetryAfter: cfg.RetryAfter, LeaseMargin: time.Duration(cfg.SessionTTL) * time.Second / 3}, time.Now())

	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	sess, err := newSession(sctx, cli, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	if err := s.claimName(sctx, sess, 0); err != nil {
		sess.Close()
		return nil, err
	}
	if err := s.checkLayout(sctx, sess); err != nil {
		sess.Close()
		return nil, err
	}
	s.session = sess

	mlc, err := s.memberlistConfig()
	if err != nil {
		sess.Close()
		return nil, err
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("start gossip on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	s.ml = ml
	// Read once, now: memberlist rewrites its local node's fields when the
	// metadata changes (SetCapacity), so reading them later races.
	n := ml.LocalNode()
	s.gossipAddr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	return s, nil
}

// Name is the shard ID.
func (s *Shard) Name() string { return s.cfg.Name }

// Partitions is the number of node partitions this shard's ring hashes
// node names into (Config.Partitions, defaulted).
func (s *Shard) Partitions() int { return s.cfg.Partitions }

// NodePools returns the node pool pattern (Config.NodePools; nil: none).
func (s *Shard) NodePools() *regexp.Regexp { return s.cfg.NodePools }

// Run joins the seeds (retrying in the background until one answers), then
// drives ownership until ctx is cancelled. On return it has left the ring
// and released its records (a graceful stop).
func (s *Shard) Run(ctx context.Context) error {
	defer close(s.stopped)
	defer s.endLife()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.joinLoop(wctx)
	go s.gossipMeta(wctx)
	watchc := s.watchRecords(wctx)
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	s.signal()
	keepalive := s.keepalive(wctx)
	for {
		select {
		case <-ctx.Done():
			s.shutdown()
			return nil
		case <-s.events:
			s.onMembership()
		case <-s.kick:
			s.onMembership()
		case f := <-s.results:
			f()
		case ev, ok := <-watchc:
			if !ok {
				watchc = s.watchRecords(wctx)
				continue
			}
			s.onRecordEvent(ev)
		case until, ok := <-keepalive:
			if !ok {
				s.renewSession(wctx)
				keepalive = s.keepalive(wctx)
				continue
			}
			s.apply(func(m *Machine) []Action { return m.LeaseRenewed(until) })
		case now := <-tick.C:
			s.apply(func(m *Machine) []Action { return m.Tick(now) })
		}
	}
}

// SetQueues sets the queue names whose ownership is distributed.
func (s *Shard) SetQueues(names []string) {
	q := append([]string(nil), names...)
	sort.Strings(q)
	s.mu.Lock()
	s.queues = q
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Ring returns the ring as this shard sees it.
func (s *Shard) Ring() Ring {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring
}

// keys returns every key: the partitions and the queues.
func (s *Shard) keys() []string {
	out := make([]string, 0, s.cfg.Partitions+len(s.queues))
	for i := 0; i < s.cfg.Partitions; i++ {
		out = append(out, wire.PartitionKey(i))
	}
	for _, q := range s.queues {
		out = append(out, wire.QueueKey(q))
	}
	return out
}

func (s *Shard) onMembership() {
	var names []string
	for _, m := range s.Members() {
		names = append(names, m.ID)
	}
	ring := NewRing(names)
	s.mu.Lock()
	s.ring = ring
	desired := ring.Owned(s.cfg.Name, s.keys())
	acts := s.m.SetDesired(desired)
	s.mu.Unlock()
	s.execute(acts)
}

// apply runs one machine step under the lock and executes its actions.
func (s *Shard) apply(f func(m *Machine) []Action) {
	s.mu.Lock()
	acts := f(s.m)
	s.mu.Unlock()
	s.execute(acts)
}
