package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Etcd is an in-process etcd server.
type Etcd struct {
	Endpoints []string
	dir       string // removed on Close when owned
	e         *embed.Etcd
	cfg       *embed.Config
	// closing is set while this process stops etcd on purpose: its
	// listeners then fail with "use of closed network connection", which
	// etcd logs as errors; they are dropped (a clean Ctrl-C of make run
	// printed four).
	closing *atomic.Bool
}

// quietClose drops etcd's "serving failed" errors while it is being
// stopped on purpose; everything else passes.
type quietClose struct {
	zapcore.Core
	closing *atomic.Bool
}

func (q *quietClose) With(f []zapcore.Field) zapcore.Core {
	return &quietClose{Core: q.Core.With(f), closing: q.closing}
}

func (q *quietClose) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if q.closing.Load() && strings.Contains(e.Message, "serving from embedded etcd failed") {
		return ce
	}
	return q.Core.Check(e, ce)
}

// etcdLogger is etcd's own JSON logger on stderr at level, with quietClose.
func etcdLogger(level string, closing *atomic.Bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("etcd log level %q: %w", level, err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	return zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &quietClose{Core: c, closing: closing} }))
}

// EtcdOptions tunes the embedded etcd.
type EtcdOptions struct {
	// Dir is the data directory; empty means a new temporary one, removed on Close.
	Dir string
	// NoFsync trades durability for speed (tests that do not measure).
	NoFsync bool
	// LogLevel is etcd's log level (default "error"; tests use "fatal" to
	// keep shutdown noise out of their output).
	LogLevel string
	// MaxTxnOps is etcd's --max-txn-ops (0: etcd's default, 128).
	MaxTxnOps uint
	// CompactionRetention is etcd's --auto-compaction-retention in
	// periodic mode: history older than this is compacted away (0: never,
	// etcd's default). deploy/ runs 10m; anything that runs for long
	// (the local cluster, the simulator) needs it, or etcd's key index and
	// database grow with every write.
	CompactionRetention time.Duration
}

// StartEtcd starts an embedded single-member etcd on free loopback ports.
func StartEtcd(opts EtcdOptions) (*Etcd, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := startEtcdOnce(opts)
		if err == nil {
			return e, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startEtcdOnce(opts EtcdOptions) (*Etcd, error) {
	dir := opts.Dir
	owned := false
	if dir == "" {
		d, err := os.MkdirTemp("", "shardsched-etcd-")
		if err != nil {
			return nil, err
		}
		dir, owned = d, true
	}
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "coordinator"
	cfg.Dir = filepath.Join(dir, "data")
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cport))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pport))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	if opts.LogLevel != "" {
		cfg.LogLevel = opts.LogLevel
	}
	closing := new(atomic.Bool)
	lg, err := etcdLogger(cfg.LogLevel, closing)
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.UnsafeNoFsync = opts.NoFsync
	if opts.MaxTxnOps > 0 {
		cfg.MaxTxnOps = opts.MaxTxnOps
	}
	if opts.CompactionRetention > 0 {
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = opts.CompactionRetention.String()
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		if owned {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		closing.Store(true)
		e.Close()
		if owned {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	out := &Etcd{Endpoints: []string{cu.String()}, e: e, cfg: cfg, closing: closing}
	if owned {
		out.dir = dir
	}
	return out, nil
}

// Restart stops etcd and starts it again on the same ports and data, as an
// operator restarting the coordinator's etcd would (clients reconnect).
func (e *Etcd) Restart() error {
	if e == nil || e.e == nil {
		return fmt.Errorf("etcd is not running")
	}
	e.closing.Store(true)
	e.e.Close()
	<-e.e.Server.StopNotify()
	e.e = nil
	e.closing.Store(false)
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		var ne *embed.Etcd
		ne, err = embed.StartEtcd(e.cfg)
		if err == nil {
			select {
			case <-ne.Server.ReadyNotify():
				e.e = ne
				return nil
			case <-time.After(30 * time.Second):
				ne.Close()
				return fmt.Errorf("restarted etcd not ready after 30s")
			}
		}
		time.Sleep(200 * time.Millisecond) // the old listeners may linger a moment
	}
	return fmt.Errorf("restart etcd: %w", err)
}

// Settled is what Settle did: the database file's size before and after,
// in bytes, and how long etcd was busy with it.
type Settled struct {
	Before, After int64
	Took          time.Duration
}

// Settle runs an operator's maintenance on etcd: its history compacted to
// the current revision, then its database defragmented, so the file holds
// only the live keys and its pages beyond them are given back. bbolt never
// shrinks its file by itself: without this, a reading of the process's
// memory counts etcd's high-water mark (how much history the compactor
// last kept), not what it holds. Watchers behind the current revision
// get ErrCompacted, as after any compaction.
func (e *Etcd) Settle(ctx context.Context) (Settled, error) {
	if e == nil || e.e == nil {
		return Settled{}, fmt.Errorf("etcd is not running")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return Settled{}, err
	}
	defer cli.Close()
	start := time.Now()
	ep := e.Endpoints[0]
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return Settled{}, fmt.Errorf("etcd status: %w", err)
	}
	out := Settled{Before: st.DbSize}
	_, err = cli.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) { // already compacted there: nothing to do
		return out, fmt.Errorf("compact etcd at revision %d: %w", st.Header.Revision, err)
	}
	if _, err := cli.Defragment(ctx, ep); err != nil {
		return out, fmt.Errorf("defragment etcd: %w", err)
	}
	if st, err = cli.Status(ctx, ep); err != nil {
		return out, fmt.Errorf("etcd status: %w", err)
	}
	out.After, out.Took = st.DbSize, time.Since(start)
	return out, nil
}

// Close stops etcd and removes a temporary data directory.
func (e *Etcd) Close() {
	if e == nil || e.e == nil {
		return
	}
	e.closing.Store(true)
	e.e.Close()
	<-e.e.Server.StopNotify()
	e.e = nil
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}
