package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

// env is a set of coordinator participants on one embedded etcd.
type env struct {
	t         *testing.T
	endpoints []string
	cfg       Config
	mu        sync.Mutex
	servers   []*participant
}

type participant struct {
	s      *Server
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func newEnv(t *testing.T, n int, ttl int) *env {
	t.Helper()
	e := testenv.NewEtcd(t)
	cfg := DefaultConfig()
	cfg.SessionTTL = ttl
	cfg.Prefix = "/test/coordinator"
	ev := &env{t: t, endpoints: e.Endpoints, cfg: cfg}
	for i := 0; i < n; i++ {
		ev.add()
	}
	t.Cleanup(ev.stopAll)
	return ev
}

func (ev *env) etcdClient() *clientv3.Client {
	ev.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ev.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		ev.t.Fatal(err)
	}
	return cli
}

// add starts one more participant.
func (ev *env) add() *participant {
	ev.t.Helper()
	cli := ev.etcdClient()
	cfg := ev.cfg
	ev.mu.Lock()
	cfg.Name = fmt.Sprintf("coord-%d", len(ev.servers))
	ev.mu.Unlock()
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := NewServer(cli, cfg)
	if err != nil {
		ev.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &participant{s: s, cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_ = s.Run(ctx)
	}()
	ev.mu.Lock()
	ev.servers = append(ev.servers, p)
	ev.mu.Unlock()
	return p
}

func (p *participant) stop() {
	p.cancel()
	<-p.done
	p.cli.Close()
}

func (ev *env) stopAll() {
	ev.mu.Lock()
	ss := ev.servers
	ev.servers = nil
	ev.mu.Unlock()
	for _, p := range ss {
		p.stop()
	}
}

// leader waits for a participant to lead and returns it.
func (ev *env) leader(timeout time.Duration) *participant {
	ev.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ev.mu.Lock()
		ss := append([]*participant(nil), ev.servers...)
		ev.mu.Unlock()
		for _, p := range ss {
			if p.s.IsLeader() {
				return p
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev.t.Fatalf("no coordinator leader after %s", timeout)
	return nil
}

// shard is a client with its own etcd session, as a shard process has.
type shard struct {
	cli     *clientv3.Client
	session *concurrency.Session
	c       *Client
}

func (ev *env) newShard(name string, ttl int) *shard {
	ev.t.Helper()
	return ev.newShardWith(name, ttl, nil)
}

// newShardWith is newShard with the client's config adjusted by tune.
func (ev *env) newShardWith(name string, ttl int, tune func(*ClientConfig)) *shard {
	ev.t.Helper()
	cli := ev.etcdClient()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		ev.t.Fatal(err)
	}
	cc := DefaultClientConfig()
	cc.Prefix = ev.cfg.Prefix
	cc.Shard = name
	cc.Lease = sess.Lease()
	// A request that times out on the client may still have been applied;
	// its retry then answers for the state it finds (existed / not found),
	// which a test replaying answers cannot tell apart from a wrong answer.
	// A long per-attempt timeout keeps loaded CI machines out of that case.
	cc.RequestTimeout = time.Minute
	if tune != nil {
		tune(&cc)
	}
	c, err := NewClient(cli, cc)
	if err != nil {
		ev.t.Fatal(err)
	}
	sh := &shard{cli: cli, session: sess, c: c}
	ev.t.Cleanup(func() {
		c.Close()
		sess.Close()
		cli.Close()
	})
	return sh
}

func res(cpu, mem int64) api.Resource { return api.NewResource(cpu, mem, nil) }

func limit(t testing.TB, cpu, mem int64) api.Limit {
	t.Helper()
	l, err := api.NewLimit(map[string]int64{api.CPU: cpu, api.Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const gi = int64(1) << 30

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
