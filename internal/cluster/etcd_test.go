package cluster

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Stopping etcd on purpose makes its listeners fail; those errors are
// dropped then, and only then; any other error still shows.
func TestQuietCloseDropsOnlyServingErrorsWhileClosing(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	closing := new(atomic.Bool)
	lg := zap.New(&quietClose{Core: core, closing: closing}).With(zap.String("member", "coordinator"))
	serving := "setting up serving from embedded etcd failed."
	lg.Error(serving)
	closing.Store(true)
	lg.Error(serving, zap.String("error", "accept tcp: use of closed network connection"))
	lg.Error("failed to save snapshot")
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	if len(got) != 2 || got[0] != serving || got[1] != "failed to save snapshot" {
		t.Errorf("logged %q; want the serving error before closing and the other error during it", got)
	}
}

// With CompactionRetention set, etcd compacts its history by itself: a read
// at the first revision is refused as compacted once the retention has
// passed. Without it (the other etcd here), the same read still succeeds.
func TestEtcdCompactsItsHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(retention time.Duration) *clientv3.Client {
		e, err := StartEtcd(EtcdOptions{NoFsync: true, LogLevel: "fatal", CompactionRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	compacting, keeping := start(time.Second), start(0)
	var first [2]int64
	for i, cli := range []*clientv3.Client{compacting, keeping} {
		for n := 0; n < 20; n++ {
			resp, err := cli.Put(ctx, "k", strconv.Itoa(n))
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				first[i] = resp.Header.Revision
			}
		}
	}
	// Writes go on while we wait: etcd's periodic compactor compacts only
	// at revisions it recorded, one every tenth of the retention.
	for {
		if _, err := compacting.Put(ctx, "tick", "x"); err != nil {
			t.Fatal(err)
		}
		_, err := compacting.Get(ctx, "k", clientv3.WithRev(first[0]))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatalf("read at revision %d: %v", first[0], err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("history at revision %d never compacted with a retention of 1s", first[0])
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := keeping.Get(ctx, "k", clientv3.WithRev(first[1])); err != nil {
		t.Errorf("etcd without a retention: read at revision %d: %v", first[1], err)
	}
}

// Settle compacts the history to the current revision and defragments:
// a database that held many overwritten and deleted values shrinks, the
// old revisions are gone, and every live key keeps its latest value.
func TestEtcdSettleGivesBackWhatHistoryHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := StartEtcd(EtcdOptions{NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	big := string(make([]byte, 16<<10))
	var first int64
	for n := 0; n < 400; n++ {
		key := "k" + strconv.Itoa(n%20)
		resp, err := cli.Put(ctx, key, big+strconv.Itoa(n))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			first = resp.Header.Revision
		}
		if n%20 == 19 && n < 380 {
			if _, err := cli.Delete(ctx, "k", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := e.Settle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 400 values of 16 KiB were written, 20 are live: the file must fall
	// to well under half.
	if got.Before <= 0 || got.After <= 0 || got.After*2 > got.Before {
		t.Errorf("database %d bytes before, %d after settling; want it at most half", got.Before, got.After)
	}
	if _, err := cli.Get(ctx, "k0", clientv3.WithRev(first)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read at revision %d after settling: %v; want ErrCompacted", first, err)
	}
	resp, err := cli.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 20 {
		t.Fatalf("%d live keys after settling; want 20", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		n, _ := strconv.Atoi(string(kv.Value[len(big):]))
		if n < 380 {
			t.Errorf("%s holds write %d after settling; want its last (≥ 380)", kv.Key, n)
		}
	}
	// Settling twice with no write between is not an error (the revision
	// is already compacted).
	if _, err := e.Settle(ctx); err != nil {
		t.Errorf("second settle: %v", err)
	}
}
