package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

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

// layoutPrefix is where every live shard records, under its session lease,
// how it maps nodes to partitions.
func (s *Shard) layoutPrefix() string { return s.cfg.EtcdPrefix + "/layout/" }

// layout is how this shard maps nodes to partitions: their number and the
// node pool pattern (wire.PartitionIn).
func (s *Shard) layout() string {
	pools := ""
	if s.cfg.NodePools != nil {
		pools = s.cfg.NodePools.String()
	}
	return "partitions=" + strconv.Itoa(s.cfg.Partitions) + " node-pools=" + strconv.Quote(pools)
}

// recordLayout records this shard's layout under sess's lease.
func (s *Shard) recordLayout(ctx context.Context, sess *concurrency.Session) error {
	if _, err := s.cli.Put(ctx, s.layoutPrefix()+s.cfg.Name, s.layout(), clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("record the node layout in etcd: %w", err)
	}
	return nil
}

// checkLayout records this shard's layout and refuses to go on when a live
// shard has recorded another. Two layouts map one node to two partitions,
// each fenced on its own key, so two shards would keep books for the node
// and bind onto it. Of shards starting at once with different layouts,
// at most the first to record and read goes on. A layout changes only
// once every shard of the old one has stopped (their records go with
// their sessions).
func (s *Shard) checkLayout(ctx context.Context, sess *concurrency.Session) error {
	if err := s.recordLayout(ctx, sess); err != nil {
		return err
	}
	resp, err := s.cli.Get(ctx, s.layoutPrefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read the shards' node layouts from etcd: %w", err)
	}
	mine := s.layout()
	for _, kv := range resp.Kvs {
		if v := string(kv.Value); v != mine {
			return fmt.Errorf("live shard %q maps nodes to partitions with %s, this shard with %s: every shard must run with the same --partitions and --node-pools (to change them, stop every shard first)",
				strings.TrimPrefix(string(kv.Key), s.layoutPrefix()), v, mine)
		}
	}
	return nil
}

// Lease is the etcd lease of the shard's current session (tentative quota
// reservations are bound to it).
func (s *Shard) Lease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session.Lease()
}

// leaseState returns the current session lease and whether keys may be
// used under it now. It takes s.mu, which guards the session and the
// machine; Claims calls it without holding Claims.mu (it never holds its
// own lock while taking s.mu).
func (s *Shard) leaseState() (clientv3.LeaseID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session.Lease(), s.m.LeaseFresh()
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
			if err := s.recordLayout(ctx, sess); err != nil {
				s.log.Error("cannot record the node layout after session loss", "err", err)
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
