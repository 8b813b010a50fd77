package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
)

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

func (s *Shard) signal() {
	select {
	case s.events <- struct{}{}:
	default:
	}
}

// delegate implements memberlist.Delegate: the node metadata.
type delegate Shard

func (d *delegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	return metaWithin(d.meta, limit)
}

// metaWithin encodes m in at most limit bytes, leaving out what matters
// least first: the nodes' allocatable (used only to hand starving gangs
// over), then the capacity, then the API address. New checks at start-up
// that the ID and API address fit with an empty capacity.
func metaWithin(m Meta, limit int) []byte {
	noAlloc := m
	noAlloc.Capacity.AllocMilliCPU, noAlloc.Capacity.AllocMemory, noAlloc.Capacity.AllocGPU = 0, 0, 0
	noAlloc.Capacity.LargestAllocCPU, noAlloc.Capacity.LargestAllocMem, noAlloc.Capacity.LargestAllocGPU = 0, 0, 0
	for _, try := range []Meta{m, noAlloc, {ID: m.ID, API: m.API}} {
		if b, err := json.Marshal(try); err == nil && len(b) <= limit {
			return b
		}
	}
	b, _ := json.Marshal(Meta{ID: m.ID})
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
