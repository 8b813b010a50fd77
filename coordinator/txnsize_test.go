package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardsched/shardsched/api"
)

// A leader allowed groups larger than etcd takes in one Txn (the test's
// etcd keeps the default --max-txn-ops of 128) halves its Txns until etcd
// takes them: every reservation is granted and stored, none is lost to
// the refusal, and the refused Txn counts among the Txns sent.
func TestTxnTooLargeForEtcdIsSplit(t *testing.T) {
	ev := newEnv(t, 0, 5)
	ev.cfg.MaxGroupOps = 1024
	ev.cfg.GroupDelay = 300 * time.Millisecond // let one group gather every call
	p := ev.add()
	ev.leader(30 * time.Second)
	sh := ev.newShard("shard-0", 5)
	ctx := ctxT(t, 90*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "org"}, {Name: "team", Parent: "org"}}); err != nil {
		t.Fatal(err)
	}
	before := p.s.Stats()
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := fmt.Sprintf("uid-%d", i)
			if _, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: uid, UID: uid}, "team", res(1, 0)); err != nil {
				errs <- fmt.Errorf("%s: %w", uid, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every reservation is in etcd (the truth), not only in the ledger.
	cli := ev.etcdClient()
	defer cli.Close()
	resp, err := cli.Get(context.Background(), ev.cfg.resPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != n {
		t.Fatalf("%d reservations stored, want %d", resp.Count, n)
	}
	st := p.s.Stats()
	groups, txns := st.Groups-before.Groups, st.Txns-before.Txns
	// A refused Txn counts among those sent, so more Txns than groups
	// means etcd refused one as too large and the leader went on with
	// smaller ones (had no group been larger than etcd's limit, this
	// would fail rather than pass for nothing).
	if txns <= groups {
		t.Fatalf("%d Txns for %d groups: etcd never refused a Txn as too large", txns, groups)
	}
}

func TestMaxGroupOpsValidated(t *testing.T) {
	for _, v := range []int{0, -1, maxGroupOps + 1} {
		cfg := DefaultConfig()
		cfg.MaxGroupOps = v
		if err := cfg.Validate(); err == nil {
			t.Errorf("MaxGroupOps %d accepted", v)
		}
	}
	cfg := DefaultConfig()
	cfg.MaxGroupOps = maxGroupOps
	if err := cfg.Validate(); err != nil {
		t.Errorf("MaxGroupOps %d refused: %v", maxGroupOps, err)
	}
}
