package shard

import (
	"context"
	"strings"
	"testing"

	"github.com/shardsched/shardsched/wire"
)

// Two shards that map nodes to partitions differently would each fence a
// node on its own key: a shard whose --partitions or --node-pools differ
// from a live shard's refuses to start, naming both; once every shard of
// the old layout has stopped, the new one starts.
func TestShardRefusesAnotherNodeLayout(t *testing.T) {
	tc := newTestCluster(t)
	first := tc.start("shard-0")
	pools, err := wire.CompileNodePools(`^(gpu)-[0-9]+$`)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(*Config){
		func(c *Config) { c.NodePools = pools },
		func(c *Config) { c.Partitions = testPartitions + 1 },
	} {
		cfg := tc.config("shard-1")
		cfg.Join = []string{first.s.GossipAddr()}
		edit(&cfg)
		cli := tc.etcd()
		s, err := New(context.Background(), cli, cfg)
		if err == nil {
			s.Crash()
			_ = s.ml.Shutdown()
			cli.Close()
			t.Fatal("a shard with another node layout started beside shard-0")
		}
		cli.Close()
		if !strings.Contains(err.Error(), `"shard-0"`) || !strings.Contains(err.Error(), "--node-pools") {
			t.Fatalf("refusal %q does not name the live shard and the flags", err)
		}
	}
	// The same layout starts beside it.
	tc.start("shard-2", first.s.GossipAddr())
	// With every shard of the old layout gone, a new layout starts.
	tc.stopAll()
	tc.startWith("shard-3", func(c *Config) { c.NodePools = pools })
}
