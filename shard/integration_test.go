package shard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

func TestConvergeAfterStart(t *testing.T) {
	tc := newTestCluster(t)
	mon := tc.monitor()
	first := tc.start("shard-0")
	start := time.Now()
	for i := 1; i < 4; i++ {
		tc.start("shard-"+string(rune('0'+i)), first.s.GossipAddr())
	}
	tc.waitConverged(5 * time.Second)
	t.Logf("4 shards: every key has exactly one holder %s after start", time.Since(start).Round(time.Millisecond))
	mon.finish(t)
	// The etcd records agree with what the shards hold.
	cli := tc.etcd()
	defer cli.Close()
	resp, err := cli.Get(context.Background(), tc.prefix+"/own/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Count) != len(tc.allKeys()) {
		t.Fatalf("%d ownership records in etcd, want %d", resp.Count, len(tc.allKeys()))
	}
}

func TestCrashSurvivorsTakeOver(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	for _, n := range []string{"shard-1", "shard-2", "shard-3"} {
		tc.start(n, first.s.GossipAddr())
	}
	tc.waitConverged(5 * time.Second)
	victim := "shard-2"
	lost := len(tc.running()[victim].s.Owned())
	mon := tc.monitor()
	tc.crash(victim)
	took := tc.waitConverged(15 * time.Second)
	t.Logf("crash of %s (%d keys): survivors hold all keys after %s (session TTL %d s, gossip probe 200 ms)",
		victim, lost, took.Round(time.Millisecond), testTTL)
	mon.finish(t)
}

func TestJoinMovesAboutOneNth(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	tc.start("shard-1", first.s.GossipAddr())
	tc.start("shard-2", first.s.GossipAddr())
	tc.waitConverged(5 * time.Second)
	before := tc.holders()
	mon := tc.monitor()
	tc.start("shard-3", first.s.GossipAddr())
	took := tc.waitConverged(10 * time.Second)
	after := tc.holders()
	moved := 0
	for _, k := range tc.allKeys() {
		if before[k][0] != after[k][0] {
			moved++
			if after[k][0] != "shard-3" {
				t.Errorf("key %s moved from %s to %s, not to the new shard", k, before[k][0], after[k][0])
			}
		}
	}
	n := len(tc.allKeys())
	ideal := float64(n) / 4
	t.Logf("join: %d of %d keys moved (ideal %.1f, ratio %.2f), converged %s after join",
		moved, n, ideal, float64(moved)/ideal, took.Round(time.Millisecond))
	if r := float64(moved) / ideal; r < 0.5 || r > 1.5 {
		t.Errorf("moved/ideal = %.2f, want about 1", r)
	}
	mon.finish(t)
}

func TestGossipIsolationNeverDoubleHolds(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	tc.start("shard-1", first.s.GossipAddr())
	iso := tc.start("shard-2", first.s.GossipAddr())
	tc.waitConverged(5 * time.Second)
	mon := tc.monitor()
	isoKeys := iso.s.Owned()
	iso.tr.blocked.Store(true)
	// Long enough for every side to declare the other dead and try to take
	// its keys: the records fence them. The isolated shard still has its
	// etcd session, so it keeps its keys; the others could not take them.
	// Watched for the whole window (at least 3 s, and until each side has
	// seen the other leave), failing at the first sample where one of those
	// keys is held by anyone but the isolated shard, or not by it.
	blockedAt := time.Now()
	split := func() bool {
		for name, r := range tc.running() {
			want := 2 // shard-0 and shard-1 see each other
			if name == iso.s.Name() {
				want = 1
			}
			if len(r.s.Members()) != want {
				return false
			}
		}
		return true
	}
	for time.Since(blockedAt) < 3*time.Second || !split() {
		if time.Since(blockedAt) > 15*time.Second {
			t.Fatalf("the sides of the gossip partition have not seen each other leave after 15s")
		}
		// No other shard may hold one of its keys at any sample. The
		// isolated shard itself may stop using a key for a moment (a
		// keepalive late on a loaded machine makes it step back before its
		// lease could expire): that is safe, and checked below to end.
		h := tc.holders()
		for _, k := range isoKeys {
			for _, who := range h[k] {
				if who != iso.s.Name() {
					t.Fatalf("%s into the gossip partition: %s held by %v, want the isolated %s alone (its records fence the others out)",
						time.Since(blockedAt).Round(time.Millisecond), k, h[k], iso.s.Name())
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		h := tc.holders()
		for _, k := range isoKeys {
			if len(h[k]) != 1 || h[k][0] != iso.s.Name() {
				return false
			}
		}
		return true
	}, "the isolated %s holds all its keys alone (its records fence the others out)", iso.s.Name())
	// A record the isolated shard loses (here: replaced by an operator with
	// another holder's record in one Txn) is no longer used by it, and it
	// cannot take the key back while that record exists.
	cli := tc.etcd()
	defer cli.Close()
	victim := isoKeys[0]
	recKey := tc.prefix + "/own/" + victim
	// One Put replaces the record (no window in which the key is free).
	if _, err := cli.Put(context.Background(), recKey, `{"shard":"operator","lease":0}`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, func() bool { return !iso.s.Holds(victim) },
		"the isolated shard stops using %s, whose record was taken", victim)
	// It keeps wanting the key and retrying (RetryAfter 200 ms): watched for
	// a second, failing at the first use or hold.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if iso.s.Use(victim) {
			t.Fatalf("isolated shard started a use of %s, whose record another holder has", victim)
		}
		if iso.s.Holds(victim) {
			t.Fatalf("isolated shard took %s back while another holder's record exists", victim)
		}
	}
	// Hand the key back to the shards.
	if _, err := cli.Delete(context.Background(), recKey); err != nil {
		t.Fatal(err)
	}
	iso.tr.blocked.Store(false)
	took := tc.waitConverged(15 * time.Second)
	t.Logf("after the partition heals: converged in %s", took.Round(time.Millisecond))
	mon.finish(t)
}

func TestHandoffWaitsForInflightUse(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	tc.waitConverged(5 * time.Second)
	// shard-0 holds everything; find a key the next shard will win.
	ring := NewRing([]string{"shard-0", "shard-1"})
	var key string
	for _, k := range tc.allKeys() {
		if o, _ := ring.Owner(k); o == "shard-1" {
			key = k
			break
		}
	}
	if !first.s.Use(key) {
		t.Fatalf("shard-0 cannot use %s", key)
	}
	tc.start("shard-1", first.s.GossipAddr())
	// The handoff starts once shard-0's ring gives the key to shard-1 (the
	// same step sets the key draining).
	testenv.Eventually(t, 5*time.Second, func() bool {
		o, _ := first.s.Ring().Owner(key)
		return o == "shard-1"
	}, "shard-0 sees shard-1 win %s", key)
	// While the use is in flight the key must not move: watched for the
	// whole window (shard-1 retries its acquire every 200 ms meanwhile),
	// failing at the first new use or holder.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if first.s.Use(key) {
			t.Fatalf("a new use of %s started while it is being handed off", key)
		}
		if h := tc.holders()[key]; len(h) != 0 {
			t.Fatalf("%s held by %v while shard-0 still has a use in flight (draining)", key, h)
		}
	}
	first.s.Done(key)
	tc.waitConverged(5 * time.Second)
}

func TestBadInputAtStartup(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	cli := tc.etcd()
	defer cli.Close()

	long := strings.Repeat("x", 600)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("too-short"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"malformed join address", func(c *Config) { c.Join = []string{"no-port"} }, "join address"},
		{"join port out of range", func(c *Config) { c.Join = []string{"127.0.0.1:99999"} }, "not 1..65535"},
		{"duplicate shard name", func(c *Config) { c.Name = "shard-0" }, "duplicate shard name"},
		{"metadata over the limit", func(c *Config) { c.APIAddr = "http://" + long }, "metadata"},
		{"bad gossip key", func(c *Config) { c.GossipKeyFile = keyFile }, "16, 24 or 32 bytes"},
		{"partitions out of range", func(c *Config) { c.Partitions = 0 }, "partitions"},
		{"empty name", func(c *Config) { c.Name = "" }, "shard name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := tc.config("shard-x")
			cfg.Join = []string{first.s.GossipAddr()}
			c.edit(&cfg)
			s, err := New(context.Background(), cli, cfg)
			if err == nil {
				s.ml.Shutdown()
				t.Fatalf("New succeeded, want an error mentioning %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
	t.Run("no etcd reachable", func(t *testing.T) {
		dead, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		cfg := tc.config("shard-y")
		cfg.StartTimeout = time.Second
		start := time.Now()
		_, err = New(context.Background(), dead, cfg)
		if err == nil || !strings.Contains(err.Error(), "etcd unreachable") {
			t.Fatalf("New with no etcd: %v, want an etcd unreachable error", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("New took %s to fail", time.Since(start))
		}
	})
}

func TestEncryptedGossip(t *testing.T) {
	tc := newTestCluster(t)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string, join ...string) *running {
		return tc.startWith(name, func(cfg *Config) { cfg.GossipKeyFile, cfg.Join = keyFile, join })
	}
	a := start("enc-0")
	start("enc-1", a.s.GossipAddr())
	tc.waitConverged(5 * time.Second)
	if n := len(a.s.Members()); n != 2 {
		t.Fatalf("%d members with encrypted gossip, want 2", n)
	}
}

// TestGossipBandwidth8Shards measures gossip bytes sent per shard per second
// with 8 shards on memberlist's LAN defaults (the production profile). It
// asserts only that gossip flows and stays far below a megabit; the figure
// is logged for the record.
func TestGossipBandwidth8Shards(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for several seconds")
	}
	tc := newTestCluster(t)
	var rs []*running
	for i := 0; i < 8; i++ {
		rs = append(rs, tc.startWith("bw-"+string(rune('0'+i)), func(cfg *Config) {
			cfg.GossipProfile, cfg.GossipTweak = "lan", nil
			if len(rs) > 0 {
				cfg.Join = []string{rs[0].s.GossipAddr()}
			}
		}))
	}
	tc.waitConverged(15 * time.Second)
	before := make([]int64, len(rs))
	for i, r := range rs {
		before[i] = r.tr.sent.Load()
	}
	const window = 4 * time.Second
	time.Sleep(window)
	var total float64
	lo, hi := 1e18, 0.0
	for i, r := range rs {
		bps := float64(r.tr.sent.Load()-before[i]) / window.Seconds()
		total += bps
		lo, hi = min(lo, bps), max(hi, bps)
	}
	avg := total / float64(len(rs))
	t.Logf("gossip at 8 shards (memberlist LAN profile): %.0f bytes/s per shard on average (min %.0f, max %.0f)", avg, lo, hi)
	if avg <= 0 || avg > 125000 {
		t.Fatalf("gossip %.0f bytes/s per shard: want > 0 and < 1 Mbit/s", avg)
	}
}

// A shard whose session was replaced takes its name record back from its
// own previous lease (an etcd restart revives old leases for a TTL), but
// never from another live shard's.
func TestReclaimNameFromOwnPreviousLease(t *testing.T) {
	tc := newTestCluster(t)
	cli := tc.etcd()
	defer cli.Close()
	ctx := context.Background()
	s := &Shard{cfg: tc.config("shard-x"), cli: cli}
	sess := func() *concurrency.Session {
		se, err := newSession(ctx, cli, 30)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = se.Close() })
		return se
	}
	old, other, renewed := sess(), sess(), sess()
	if err := s.claimName(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.claimName(ctx, renewed, other.Lease()); err == nil || !strings.Contains(err.Error(), "duplicate shard name") {
		t.Fatalf("claim over a record of another lease: %v, want a duplicate-name error", err)
	}
	if err := s.claimName(ctx, renewed, old.Lease()); err != nil {
		t.Fatalf("claim over our own previous lease's record: %v", err)
	}
	resp, err := cli.Get(ctx, s.memberKey("shard-x"))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != renewed.Lease() {
		t.Fatalf("record after the takeover: %v %v, want it under the new lease", resp, err)
	}
}
