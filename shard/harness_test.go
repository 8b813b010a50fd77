package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/wire"
)

// Test timing: gossip failure detection ≈ 3 × 200 ms probes, sessions of 2 s.
const (
	testTTL        = 2
	testPartitions = 64
)

// dropTransport wraps memberlist's network transport; while blocked it
// drops every packet and stream in both directions (a gossip partition),
// and it counts the bytes it sends.
type dropTransport struct {
	inner   *memberlist.NetTransport
	blocked atomic.Bool
	sent    atomic.Int64
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
}

func newDropTransport(t *testing.T) *dropTransport {
	t.Helper()
	inner, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	d := &dropTransport{inner: inner, packets: make(chan *memberlist.Packet, 256), streams: make(chan net.Conn, 16), done: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-inner.PacketCh():
				if !d.blocked.Load() {
					select {
					case d.packets <- p:
					case <-d.done:
						return
					}
				}
			case <-d.done:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case c := <-inner.StreamCh():
				if d.blocked.Load() {
					c.Close()
					continue
				}
				select {
				case d.streams <- &countingConn{Conn: c, n: &d.sent}:
				case <-d.done:
					c.Close()
					return
				}
			case <-d.done:
				return
			}
		}
	}()
	return d
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (d *dropTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return d.inner.FinalAdvertiseAddr(ip, port)
}

func (d *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if d.blocked.Load() {
		return time.Now(), nil
	}
	d.sent.Add(int64(len(b)))
	return d.inner.WriteTo(b, addr)
}

func (d *dropTransport) PacketCh() <-chan *memberlist.Packet { return d.packets }

func (d *dropTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.blocked.Load() {
		return nil, errors.New("gossip blocked by test")
	}
	c, err := d.inner.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &d.sent}, nil
}

func (d *dropTransport) StreamCh() <-chan net.Conn { return d.streams }

// Shutdown stops forwarding and shuts the inner transport down, draining
// its channels meanwhile: its listeners block on delivering a packet or a
// stream until someone reads it, and it waits for them.
func (d *dropTransport) Shutdown() error {
	select {
	case <-d.done:
	default:
		close(d.done)
	}
	res := make(chan error, 1)
	go func() { res <- d.inner.Shutdown() }()
	for {
		select {
		case err := <-res:
			return err
		case <-d.inner.PacketCh():
		case c := <-d.inner.StreamCh():
			c.Close()
		}
	}
}

// testCluster runs shards in this process on one embedded etcd.
type testCluster struct {
	t         *testing.T
	endpoints []string
	prefix    string
	mu        sync.Mutex
	shards    map[string]*running
	queues    []string
}

type running struct {
	s      *Shard
	cli    *clientv3.Client
	tr     *dropTransport
	cancel context.CancelFunc
	done   chan struct{}
}

func newTestCluster(t *testing.T) *testCluster {
	e := testenv.NewEtcd(t)
	tc := &testCluster{t: t, endpoints: e.Endpoints, prefix: "/test/shards", shards: map[string]*running{},
		queues: []string{"q-a", "q-b", "q-c", "q-d", "q-e", "q-f"}}
	t.Cleanup(tc.stopAll)
	return tc
}

func (tc *testCluster) etcd() *clientv3.Client {
	tc.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: tc.endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tc.t.Fatal(err)
	}
	return cli
}

func (tc *testCluster) config(name string) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.BindAddr, cfg.BindPort = "127.0.0.1", 0
	cfg.Partitions = testPartitions
	cfg.EtcdPrefix = tc.prefix
	cfg.SessionTTL = testTTL
	cfg.RetryAfter = 200 * time.Millisecond
	cfg.Tick = 20 * time.Millisecond
	cfg.RejoinInterval = time.Second
	cfg.StartTimeout = 3 * time.Second
	cfg.GossipProfile = "local"
	cfg.GossipTweak = func(c *memberlist.Config) {
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.GossipInterval = 50 * time.Millisecond
		c.SuspicionMult = 2
		c.PushPullInterval = 2 * time.Second
	}
	return cfg
}

// start creates and runs a shard that joins the given seeds.
func (tc *testCluster) start(name string, join ...string) *running {
	tc.t.Helper()
	return tc.startWith(name, func(cfg *Config) { cfg.Join = join })
}

// startWith creates and runs a shard whose config edit adjusts; its
// gossip goes through a dropTransport (r.tr).
func (tc *testCluster) startWith(name string, edit func(*Config)) *running {
	tc.t.Helper()
	return tc.startOn(name, tc.etcd(), edit)
}

// startOn is startWith over the given etcd client (closed with the shard).
func (tc *testCluster) startOn(name string, cli *clientv3.Client, edit func(*Config)) *running {
	tc.t.Helper()
	cfg := tc.config(name)
	edit(&cfg)
	tr := newDropTransport(tc.t)
	cfg.Transport = tr
	s, err := New(context.Background(), cli, cfg)
	if err != nil {
		tr.Shutdown()
		cli.Close()
		tc.t.Fatalf("start %s: %v", name, err)
	}
	s.SetQueues(tc.queues)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, cli: cli, tr: tr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = s.Run(ctx)
	}()
	tc.mu.Lock()
	tc.shards[name] = r
	tc.mu.Unlock()
	return r
}

// crash stops a shard without a goodbye: gossip dies, the lease is left to expire.
func (tc *testCluster) crash(name string) {
	tc.mu.Lock()
	r := tc.shards[name]
	delete(tc.shards, name)
	tc.mu.Unlock()
	r.s.Crash()
	r.cancel()
	<-r.done
	r.cli.Close()
}

func (tc *testCluster) stopAll() {
	tc.mu.Lock()
	rs := tc.shards
	tc.shards = map[string]*running{}
	tc.mu.Unlock()
	for _, r := range rs {
		r.cancel()
	}
	for _, r := range rs {
		<-r.done
		r.cli.Close()
	}
}

func (tc *testCluster) running() map[string]*running {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	out := make(map[string]*running, len(tc.shards))
	for k, v := range tc.shards {
		out[k] = v
	}
	return out
}

// allKeys is every key the shards distribute.
func (tc *testCluster) allKeys() []string {
	var out []string
	for i := 0; i < testPartitions; i++ {
		out = append(out, wire.PartitionKey(i))
	}
	for _, q := range tc.queues {
		out = append(out, wire.QueueKey(q))
	}
	sort.Strings(out)
	return out
}

// holders samples which running shards hold each key now.
func (tc *testCluster) holders() map[string][]string {
	out := map[string][]string{}
	for name, r := range tc.running() {
		for _, k := range r.s.Owned() {
			out[k] = append(out[k], name)
		}
	}
	return out
}

// converged reports whether every key has exactly one holder among the
// running shards and that holder is the ring owner among them.
func (tc *testCluster) converged() (bool, string) {
	rs := tc.running()
	var names []string
	for n := range rs {
		names = append(names, n)
	}
	ring := NewRing(names)
	h := tc.holders()
	for _, k := range tc.allKeys() {
		owner, _ := ring.Owner(k)
		if len(h[k]) != 1 || h[k][0] != owner {
			return false, fmt.Sprintf("key %s held by %v, ring owner %s", k, h[k], owner)
		}
	}
	return true, ""
}

func (tc *testCluster) waitConverged(timeout time.Duration) time.Duration {
	tc.t.Helper()
	start := time.Now()
	var why string
	for time.Since(start) < timeout {
		var ok bool
		if ok, why = tc.converged(); ok {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc.t.Fatalf("not converged after %s: %s", timeout, why)
	return 0
}

// monitor samples every shard's held keys every few milliseconds and
// watches etcd: it fails the test if two shards hold one key at a sample,
// or if an ownership record is ever overwritten instead of created.
type monitor struct {
	stop    chan struct{}
	done    chan struct{}
	samples atomic.Int64
	mu      sync.Mutex
	errs    []string
}

func (tc *testCluster) monitor() *monitor {
	m := &monitor{stop: make(chan struct{}), done: make(chan struct{})}
	cli := tc.etcd()
	ctx, cancel := context.WithCancel(context.Background())
	wch := cli.Watch(ctx, tc.prefix+"/own/", clientv3.WithPrefix())
	go func() {
		defer close(m.done)
		defer cli.Close()
		defer cancel()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case resp := <-wch:
				for _, ev := range resp.Events {
					if ev.IsModify() && !strings.Contains(string(ev.Kv.Value), `"operator"`) {
						m.fail(fmt.Sprintf("ownership record %s overwritten (version %d)", ev.Kv.Key, ev.Kv.Version))
					}
				}
			case <-tick.C:
				m.samples.Add(1)
				for k, hs := range tc.holders() {
					if len(hs) > 1 {
						m.fail(fmt.Sprintf("key %s held by %v at once", k, hs))
					}
				}
			}
		}
	}()
	return m
}

func (m *monitor) fail(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 10 {
		m.errs = append(m.errs, s)
	}
}

func (m *monitor) finish(t *testing.T) {
	t.Helper()
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.errs {
		t.Error(e)
	}
	t.Logf("monitor: %d samples", m.samples.Load())
}
