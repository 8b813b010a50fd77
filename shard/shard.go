package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/shardsched/shardsched/wire"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// record is the value of an ownership record.
type record struct {
	Shard string `json:"shard"`
	Lease int64  `json:"lease"`
}

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

	results chan func() // action results, applied by the loop
	kick    chan struct{}
	// metaChanged wakes the one goroutine that re-gossips the metadata.
	metaChanged chan struct{}
	stopped     chan struct{}
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

// newSession grants a lease within ctx's deadline (an unreachable etcd is a
// prompt error, not a hang) and keeps it alive until the session is closed.
func newSession(ctx context.Context, cli *clientv3.Client, ttl int) (*concurrency.Session, error) {
	lease, err := cli.Grant(ctx, int64(ttl))
	if err != nil {
		return nil, fmt.Errorf("etcd unreachable (endpoints %v): %w", cli.Endpoints(), err)
	}
	return concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithContext(context.WithoutCancel(ctx)))
}

func (s *Shard) memberKey(name string) string { return s.cfg.EtcdPrefix + "/members/" + name }
func (s *Shard) ownPrefix() string            { return s.cfg.EtcdPrefix + "/own/" }

// claimName creates the member record under the session lease; another
// live shard with the same name makes this fail. prev, when not 0, is this
// shard's previous lease: a record still held by it (an etcd restart gives
// old leases a fresh TTL, so it can outlive the session we lost) is taken
// over rather than reported as a duplicate.
func (s *Shard) claimName(ctx context.Context, sess *concurrency.Session, prev clientv3.LeaseID) error {
	key := s.memberKey(s.cfg.Name)
	put := clientv3.OpPut(key, strconv.FormatInt(int64(sess.Lease()), 16), clientv3.WithLease(sess.Lease()))
	var orElse []clientv3.Op
	if prev != 0 {
		// One Txn: free, or still held by our previous lease.
		orElse = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", strconv.FormatInt(int64(prev), 16))},
			[]clientv3.Op{put}, nil)}
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).
		Else(orElse...).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd unreachable (endpoints %v): %w", s.cli.Endpoints(), err)
	}
	ok := resp.Succeeded
	if !ok && prev != 0 && len(resp.Responses) == 1 {
		ok = resp.Responses[0].GetResponseTxn().GetSucceeded()
		if ok {
			// The old lease's records (ownership) would block acquires
			// until it expires: revoke it now.
			_, _ = s.cli.Revoke(ctx, prev)
		}
	}
	if !ok {
		return fmt.Errorf("duplicate shard name %q: another live shard holds %s", s.cfg.Name, key)
	}
	return nil
}

func (s *Shard) memberlistConfig() (*memberlist.Config, error) {
	var c *memberlist.Config
	if s.cfg.GossipProfile == "local" {
		c = memberlist.DefaultLocalConfig()
	} else {
		c = memberlist.DefaultLANConfig()
	}
	c.Name = s.cfg.Name
	c.BindAddr, c.BindPort = s.cfg.BindAddr, s.cfg.BindPort
	c.AdvertiseAddr, c.AdvertisePort = s.cfg.AdvertiseAddr, s.cfg.AdvertisePort
	if c.AdvertisePort == 0 {
		// 0 means the bind port (memberlist would advertise port 0 with
		// an advertise address set; with bind port 0 it picks the port).
		c.AdvertisePort = c.BindPort
	}
	c.Delegate = (*delegate)(s)
	c.Events = (*events)(s)
	c.LogOutput = slogWriter{s.log}
	if s.cfg.Transport != nil {
		c.Transport = s.cfg.Transport
	}
	if s.cfg.GossipTweak != nil {
		defer s.cfg.GossipTweak(c)
	}
	if s.cfg.GossipKeyFile != "" {
		key, err := loadGossipKey(s.cfg.GossipKeyFile)
		if err != nil {
			return nil, err
		}
		kr, err := memberlist.NewKeyring(nil, key)
		if err != nil {
			return nil, fmt.Errorf("gossip key: %w", err)
		}
		c.Keyring = kr
		c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	}
	return c, nil
}

// GossipAddr is the address other shards can join.
func (s *Shard) GossipAddr() string { return s.gossipAddr }

// Lease is the etcd lease of the shard's current session (tentative quota
// reservations are bound to it).
func (s *Shard) Lease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session.Lease()
}

// Name is the shard ID.
func (s *Shard) Name() string { return s.cfg.Name }

// Partitions is the number of node partitions this shard's ring hashes
// node names into (Config.Partitions, defaulted).
func (s *Shard) Partitions() int { return s.cfg.Partitions }

// Run joins the seeds (retrying in the background until one answers), then
// drives ownership until ctx is cancelled. On return it has left the ring
// and released its records (a graceful stop).
func (s *Shard) Run(ctx context.Context) error {
	defer close(s.stopped)
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

// joinLoop joins the seeds, retrying with backoff until one answers, and
// then re-joins them every RejoinInterval: memberlist forgets members it
// declared dead, so without this a healed network partition would stay
// split.
func (s *Shard) joinLoop(ctx context.Context) {
	if len(s.cfg.Join) == 0 {
		return
	}
	backoff := 200 * time.Millisecond
	joined := false
	for {
		n, err := s.ml.Join(s.cfg.Join)
		wait := s.cfg.RejoinInterval
		switch {
		case err == nil && n > 0:
			if !joined {
				s.log.Info("joined", "seeds", s.cfg.Join, "contacted", n)
			}
			joined = true
		default:
			s.log.Warn("join failed; retrying", "seeds", s.cfg.Join, "err", err)
			wait = backoff
			backoff = min(2*backoff, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
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

// SetCapacity updates the capacity summary gossiped to the other shards.
func (s *Shard) SetCapacity(c Capacity) {
	s.metaMu.Lock()
	s.meta.Capacity = c
	s.metaMu.Unlock()
	select {
	case s.metaChanged <- struct{}{}:
	default: // an update is already due; it will read the latest
	}
}

// gossipMeta pushes metadata changes one at a time (concurrent UpdateNode
// calls could publish an older capacity under a newer incarnation).
func (s *Shard) gossipMeta(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.metaChanged:
			_ = s.ml.UpdateNode(time.Second)
		}
	}
}

// Members returns the metadata of every live member, sorted by ID.
func (s *Shard) Members() []Meta {
	s.metaMu.Lock()
	out := make([]Meta, 0, len(s.peers))
	for _, m := range s.peers {
		out = append(out, m)
	}
	s.metaMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// notePeer records a member's metadata. memberlist calls its event
// delegate with its own lock held, so the node's fields are read there, not
// later (memberlist rewrites them in place on updates).
func (s *Shard) notePeer(n *memberlist.Node, alive bool) {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if s.peers == nil {
		s.peers = map[string]Meta{}
	}
	if !alive {
		delete(s.peers, n.Name)
		return
	}
	var m Meta
	if err := json.Unmarshal(n.Meta, &m); err != nil {
		m = Meta{}
	}
	m.ID = n.Name // the ring is built from member names
	s.peers[n.Name] = m
}

// Holds reports whether the shard may use key now (a local check; the
// record in etcd backs it).
func (s *Shard) Holds(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Holds(key)
}

// Owned returns the keys held now, sorted.
func (s *Shard) Owned() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Held()
}

// Use starts one use of key (a bind onto a node of a partition, an
// admission for a queue); it fails if the key is not held. Every successful
// Use must be followed by Done; a key being handed off is released only
// after its last use ends.
func (s *Shard) Use(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m.Use(key)
	return ok
}

// Done ends a use started by Use.
func (s *Shard) Done(key string) { s.apply(func(m *Machine) []Action { return m.Done(key) }) }

// Ring returns the ring as this shard sees it.
func (s *Shard) Ring() Ring {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring
}

func (s *Shard) signal() {
	select {
	case s.events <- struct{}{}:
	default:
	}
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

// execute carries out actions in the background; each reports back through
// s.results so the machine is only touched by the loop or under mu.
func (s *Shard) execute(acts []Action) {
	if len(acts) == 0 {
		return
	}
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	go func() {
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		for _, a := range acts {
			sem <- struct{}{}
			wg.Add(1)
			go func(a Action) {
				defer wg.Done()
				defer func() { <-sem }()
				var f func()
				if a.Kind == Acquire {
					f = s.acquire(sess, a.Key)
				} else {
					f = s.release(sess, a.Key)
				}
				select {
				case s.results <- f:
				case <-s.stopped:
				}
			}(a)
		}
		wg.Wait()
	}()
}

func (s *Shard) acquire(sess *concurrency.Session, key string) func() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k := s.ownPrefix() + key
	val, _ := json.Marshal(record{Shard: s.cfg.Name, Lease: int64(sess.Lease())})
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(val), clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return func() { s.apply(func(m *Machine) []Action { return m.AcquireRefused(key) }) }
	}
	rev := resp.Header.Revision
	if resp.Succeeded {
		s.changes.Add(1)
	}
	if !resp.Succeeded {
		// The record exists. If it is ours under this lease (an earlier
		// acquire whose answer was lost), we hold it.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && kvs[0].Lease == int64(sess.Lease()) {
			rev = kvs[0].CreateRevision
		} else {
			return func() { s.apply(func(m *Machine) []Action { return m.AcquireRefused(key) }) }
		}
	}
	return func() { s.apply(func(m *Machine) []Action { return m.Acquired(key, rev) }) }
}

func (s *Shard) release(sess *concurrency.Session, key string) func() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k := s.ownPrefix() + key
	// Delete only our own record (same lease).
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(k), "=", sess.Lease())).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return func() { s.apply(func(m *Machine) []Action { return m.ReleaseFailed(key) }) }
	}
	s.changes.Add(1)
	return func() { s.apply(func(m *Machine) []Action { return m.Released(key) }) }
}

// OwnershipChanges counts the ownership records this shard has acquired or
// released since it started.
func (s *Shard) OwnershipChanges() int64 { return s.changes.Load() }

// watchRecords streams ownership record deletions (with the previous
// value) from now on.
func (s *Shard) watchRecords(ctx context.Context) clientv3.WatchChan {
	return s.cli.Watch(clientv3.WithRequireLeader(ctx), s.ownPrefix(), clientv3.WithPrefix(), clientv3.WithPrevKV())
}

func (s *Shard) onRecordEvent(resp clientv3.WatchResponse) {
	if resp.Err() != nil {
		s.log.Warn("ownership watch error", "err", resp.Err())
		return
	}
	for _, ev := range resp.Events {
		key := string(ev.Kv.Key[len(s.ownPrefix()):])
		if ev.Type == mvccpb.PUT {
			// A record of ours overwritten with someone else's (nothing of
			// ours ever does that): the key is lost.
			var r record
			if ev.IsModify() && ev.PrevKv != nil && json.Unmarshal(ev.PrevKv.Value, &r) == nil && r.Shard == s.cfg.Name {
				var cur record
				if json.Unmarshal(ev.Kv.Value, &cur) != nil || cur.Shard != s.cfg.Name || cur.Lease != r.Lease {
					s.log.Warn("ownership record taken over", "key", key)
					s.apply(func(m *Machine) []Action { return m.Lost(key) })
				}
			}
			continue
		}
		ours := false
		if ev.PrevKv != nil {
			var r record
			if json.Unmarshal(ev.PrevKv.Value, &r) == nil && r.Shard == s.cfg.Name {
				ours = true
			}
		}
		if ours {
			s.apply(func(m *Machine) []Action {
				// The machine ignores a delete it caused itself (releasing)
				// or that changes nothing (absent); only log real losses.
				if st, _ := m.State(key); st == Held || st == Draining {
					s.log.Warn("ownership record lost", "key", key)
				}
				return m.Lost(key)
			})
		} else {
			s.apply(func(m *Machine) []Action { return m.RecordDeleted(key) })
		}
	}
}

// keepalive reports how long the session lease is known alive, from the
// lease's keepalive responses; the channel closes when the lease is lost.
func (s *Shard) keepalive(ctx context.Context) <-chan time.Time {
	s.mu.Lock()
	lease := s.session.Lease()
	s.mu.Unlock()
	out := make(chan time.Time, 1)
	ch, err := s.cli.KeepAlive(ctx, lease)
	if err != nil {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for resp := range ch {
			until := time.Now().Add(time.Duration(resp.TTL) * time.Second)
			select {
			case out <- until:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// renewSession replaces a lost session; the records of the old lease are
// gone (or going), and the watch reports them lost.
func (s *Shard) renewSession(ctx context.Context) {
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
		sess, err := newSession(gctx, s.cli, s.cfg.SessionTTL)
		cancel()
		if err == nil {
			s.mu.Lock()
			prev := s.session.Lease()
			s.mu.Unlock()
			if err := s.claimName(ctx, sess, prev); err != nil {
				s.log.Error("cannot reclaim shard name after session loss", "err", err)
			}
			s.mu.Lock()
			s.session = sess
			s.mu.Unlock()
			s.log.Warn("etcd session replaced")
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// shutdown leaves the ring, releases every record and closes the session.
func (s *Shard) shutdown() {
	if s.crashed.Load() {
		return
	}
	_ = s.ml.Leave(2 * time.Second)
	_ = s.ml.Shutdown()
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Revoking the lease deletes every record of ours at once.
	_, _ = s.cli.Revoke(ctx, sess.Lease())
	_ = sess.Close()
}

// Crash stops the shard as a crash would, for tests: gossip stops without a
// goodbye and the lease is no longer kept alive but not revoked.
func (s *Shard) Crash() {
	s.crashed.Store(true)
	_ = s.ml.Shutdown()
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	sess.Orphan()
}

// delegate implements memberlist.Delegate: the node metadata.
type delegate Shard

func (d *delegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	b, err := json.Marshal(d.meta)
	if err != nil || len(b) > limit {
		// Never exceed the limit: fall back to the ID alone.
		b, _ = json.Marshal(Meta{ID: d.meta.ID})
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// events implements memberlist.EventDelegate: any change re-runs the ring.
type events Shard

func (e *events) NotifyJoin(n *memberlist.Node) {
	(*Shard)(e).notePeer(n, true)
	(*Shard)(e).signal()
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	(*Shard)(e).notePeer(n, false)
	(*Shard)(e).signal()
}

func (e *events) NotifyUpdate(n *memberlist.Node) { (*Shard)(e).notePeer(n, true) }

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Debug(string(p))
	return len(p), nil
}

// QueueUse is a shard's ownership of queues, by queue name: Use reports
// whether the shard holds the queue's record and keeps it from being
// released until Done (status.Fence, for writes of a Queue's status).
type QueueUse struct{ Shard *Shard }

// Use is Shard.Use of the queue's key.
func (q QueueUse) Use(queue string) bool { return q.Shard.Use(wire.QueueKey(queue)) }

// Done is Shard.Done of the queue's key.
func (q QueueUse) Done(queue string) { q.Shard.Done(wire.QueueKey(queue)) }
