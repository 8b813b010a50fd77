package shard

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/shardsched/shardsched/wire"
)

// Config configures a Shard. Start from DefaultConfig.
type Config struct {
	// Name is the shard ID, unique in the cluster (in a StatefulSet, the pod name).
	Name string
	// BindAddr and BindPort are where gossip listens (port 0 picks one).
	BindAddr string
	BindPort int
	// AdvertiseAddr/Port are what other shards dial; empty/0 means the bind address.
	AdvertiseAddr string
	AdvertisePort int
	// Join lists seed addresses ("host:port"); in a StatefulSet the stable
	// DNS names of the shard pods behind the headless Service.
	Join []string
	// GossipKeyFile holds the gossip encryption key (16, 24 or 32 bytes, raw
	// or base64); empty means gossip is not encrypted.
	GossipKeyFile string
	// APIAddr is this shard's API address, published in its metadata.
	APIAddr string
	// Partitions is the number of node partitions P.
	Partitions int
	// NodePools, when set, puts every node of a pool in one partition
	// (wire.PartitionIn, wire.CompileNodePools); like Partitions it must
	// be the same on every shard. The shard itself never maps nodes: the
	// assembly gives it to the cache and the scheduler.
	NodePools *regexp.Regexp
	// EtcdPrefix is the prefix of ownership and member records.
	EtcdPrefix string
	// SessionTTL is the etcd session TTL in seconds: a dead shard's keys
	// are free this long after its last keepalive.
	SessionTTL int
	// RetryAfter is the retry delay of a refused acquire.
	RetryAfter time.Duration
	// RejoinInterval is how often the seeds are joined again after the
	// first join, which heals gossip partitions.
	RejoinInterval time.Duration
	// Tick is the period of the ownership clock.
	Tick time.Duration
	// StartTimeout bounds start-up (etcd session, name claim).
	StartTimeout time.Duration
	// GossipProfile is "lan" (memberlist's LAN defaults) or "local"
	// (loopback: fast failure detection, for tests and `make run`).
	GossipProfile string
	// Transport replaces memberlist's network transport (tests).
	Transport memberlist.Transport
	// GossipTweak, if set, adjusts the memberlist configuration last
	// (tests shorten failure detection with it).
	GossipTweak func(*memberlist.Config)
	Logger      *slog.Logger
}

// DefaultConfig returns production defaults: wire.DefaultPartitions partitions,
// a 10 s session, LAN gossip on port 7946.
func DefaultConfig() Config {
	return Config{
		BindAddr:       "0.0.0.0",
		BindPort:       7946,
		Partitions:     wire.DefaultPartitions,
		EtcdPrefix:     "/shardsched/shards",
		SessionTTL:     10,
		RetryAfter:     time.Second,
		Tick:           100 * time.Millisecond,
		RejoinInterval: 10 * time.Second,
		StartTimeout:   10 * time.Second,
		GossipProfile:  "lan",
	}
}

// maxNameLen keeps names within etcd keys and memberlist metadata.
const maxNameLen = 128

// Validate reports the first bad field, naming it.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("shard name is empty (set it, or run in a pod so it defaults to the pod name)")
	case len(c.Name) > maxNameLen || strings.ContainsAny(c.Name, "/ \t\n"):
		return fmt.Errorf("shard name %q: at most %d characters, no '/' or spaces", c.Name, maxNameLen)
	case c.BindPort < 0 || c.BindPort > 65535:
		return fmt.Errorf("gossip bind port %d: must be 0..65535", c.BindPort)
	case c.AdvertisePort < 0 || c.AdvertisePort > 65535:
		return fmt.Errorf("gossip advertise port %d: must be 0..65535", c.AdvertisePort)
	case c.Partitions < 1 || c.Partitions > 1<<20:
		return fmt.Errorf("partitions %d: must be between 1 and %d", c.Partitions, 1<<20)
	case c.EtcdPrefix == "" || c.EtcdPrefix[0] != '/':
		return fmt.Errorf("etcd prefix %q: must start with /", c.EtcdPrefix)
	case c.SessionTTL < 1 || c.SessionTTL > 3600:
		return fmt.Errorf("session TTL %d s: must be between 1 and 3600", c.SessionTTL)
	case c.RetryAfter <= 0 || c.Tick <= 0 || c.StartTimeout <= 0 || c.RejoinInterval <= 0:
		return errors.New("retry delay, tick, rejoin interval and start timeout must be positive")
	case c.GossipProfile != "lan" && c.GossipProfile != "local":
		return fmt.Errorf("gossip profile %q: must be lan or local", c.GossipProfile)
	}
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("gossip bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("gossip advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	for _, j := range c.Join {
		if err := validateJoinAddr(j); err != nil {
			return err
		}
	}
	return nil
}

func validateJoinAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("join address %q: want host:port: %v", addr, err)
	}
	if host == "" {
		return fmt.Errorf("join address %q: empty host", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("join address %q: port %q is not 1..65535", addr, port)
	}
	return nil
}

// loadGossipKey reads a 16, 24 or 32 byte key, raw or base64.
func loadGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip key file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if dec, err := base64.StdEncoding.DecodeString(s); err == nil && validKeyLen(len(dec)) {
		return dec, nil
	}
	if validKeyLen(len(s)) {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("gossip key file %s: key must be 16, 24 or 32 bytes (raw or base64), got %d bytes", path, len(s))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
