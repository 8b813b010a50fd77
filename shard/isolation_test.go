package shard

import (
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/bench/faults"
	"github.com/shardsched/shardsched/internal/testenv"
)

// A shard cut off from etcd (its connection stalled by a proxy, its gossip
// dropped) while it keeps running: every use it starts of a key carries a
// deadline (the bind's, UseUntil) that has passed before another shard
// acquires that key. So no bind of the cut-off shard can complete once
// another shard may place on the same nodes, whatever the binds' call
// timeout. The other shard's acquisition time is read from its own view
// after it holds the key, which is no earlier than the record's creation.
func TestEtcdIsolatedShardUsesEndBeforeItsKeysMove(t *testing.T) {
	tc := newTestCluster(t)
	px, err := faults.Listen(strings.TrimPrefix(tc.endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })

	// shard-0's etcd client dials the proxy.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + px.Addr()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	iso := tc.startOn("shard-0", cli, func(*Config) {})
	other := tc.start("shard-1", iso.s.GossipAddr())
	tc.waitConverged(15 * time.Second)
	isoKeys := iso.s.Owned()
	if len(isoKeys) == 0 {
		t.Fatal("shard-0 holds nothing to lose")
	}

	// Watch: the latest deadline shard-0 gave a use of each key, and when
	// shard-1 first held it.
	var mu sync.Mutex
	lastDeadline := map[string]time.Time{}
	takenAt := map[string]time.Time{}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, k := range isoKeys {
				if d, ok := iso.s.UseUntil(k); ok {
					iso.s.Done(k)
					mu.Lock()
					if d.After(lastDeadline[k]) {
						lastDeadline[k] = d
					}
					mu.Unlock()
				}
				if other.s.Holds(k) {
					mu.Lock()
					if _, seen := takenAt[k]; !seen {
						takenAt[k] = time.Now()
					}
					mu.Unlock()
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// Cut shard-0 off: etcd stalls (its keepalives stop arriving), gossip
	// drops (shard-1 sees it dead and wants its keys).
	px.Stall()
	iso.tr.blocked.Store(true)
	testenv.Eventually(t, time.Duration(6*testTTL)*time.Second, func() bool {
		// Recorded here too: the watcher polls, and the last key can be
		// taken between its rounds and seen here first.
		mu.Lock()
		defer mu.Unlock()
		all := true
		for _, k := range isoKeys {
			if !other.s.Holds(k) {
				all = false
				continue
			}
			if _, seen := takenAt[k]; !seen {
				takenAt[k] = time.Now()
			}
		}
		return all
	}, "shard-1 holds every key of the cut-off shard-0")
	close(stop)
	<-watched

	mu.Lock()
	for _, k := range isoKeys {
		taken, ok := takenAt[k]
		if !ok {
			t.Errorf("%s: shard-1's acquisition was not seen", k)
			continue
		}
		if d := lastDeadline[k]; !d.Before(taken) {
			t.Errorf("%s: shard-0 gave a use the deadline %s, after shard-1 held the key at %s",
				k, d.Format(time.StampMilli), taken.Format(time.StampMilli))
		}
	}
	mu.Unlock()
	// The cut-off shard goes as a killed one would; the proxy heals for
	// the rest of the clean-up.
	tc.crash("shard-0")
	px.Resume()
}
