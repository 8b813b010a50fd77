package shard

import (
	"context"
	"encoding/json"
	"sync"
	"time"

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

func (s *Shard) ownPrefix() string { return s.cfg.EtcdPrefix + "/own/" }

// claimPrefix is where the claim records live (Claims).
func (s *Shard) claimPrefix() string { return s.cfg.EtcdPrefix + "/claims/" }

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

// OwnedFor is Owned restricted to the keys held for at least d.
func (s *Shard) OwnedFor(d time.Duration) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.HeldFor(d)
}

// heldEpoch returns the create revision of this shard's ownership record
// of key, if the key is usable now. It takes s.mu, which guards the
// machine; Claims calls it without holding Claims.mu (it never holds its
// own lock while taking s.mu).
func (s *Shard) heldEpoch(key string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Epoch(key)
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

// UseUntil starts a use of key as Use does and also returns the time by
// which it must end (Machine.UseDeadline): a bind under the key is given no
// later deadline, so none completes after the record could be taken.
func (s *Shard) UseUntil(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m.Use(key); !ok {
		return time.Time{}, false
	}
	return s.m.UseDeadline(), true
}

// Done ends a use started by Use.
func (s *Shard) Done(key string) { s.apply(func(m *Machine) []Action { return m.Done(key) }) }

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

// opContext bounds one record operation by d and by the shard's run: an
// acquire or release still in flight when Run returns is abandoned (a
// graceful stop revoked the lease, which deletes every record of ours; a
// crash leaves them to expire with it).
func (s *Shard) opContext(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.life, d)
}

func (s *Shard) acquire(sess *concurrency.Session, key string) func() {
	ctx, cancel := s.opContext(5 * time.Second)
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
	for cur := s.acquiredRev.Load(); rev > cur && !s.acquiredRev.CompareAndSwap(cur, rev); cur = s.acquiredRev.Load() {
	}
	return func() { s.apply(func(m *Machine) []Action { return m.Acquired(key, rev) }) }
}

func (s *Shard) release(sess *concurrency.Session, key string) func() {
	ctx, cancel := s.opContext(5 * time.Second)
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

// QueueUse is a shard's ownership of queues, by queue name: Use reports
// whether the shard holds the queue's record and keeps it from being
// released until Done (status.Fence, for writes of a Queue's status).
type QueueUse struct{ Shard *Shard }

// Use is Shard.Use of the queue's key.
func (q QueueUse) Use(queue string) bool { return q.Shard.Use(wire.QueueKey(queue)) }

// Done is Shard.Done of the queue's key.
func (q QueueUse) Done(queue string) { q.Shard.Done(wire.QueueKey(queue)) }
