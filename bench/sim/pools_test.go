package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/wire"
)

// gpuGangWorkload is one gang of 32 one-GPU pods on a cluster whose 4 GPU
// nodes hold 32 GPUs in all: it fits only on all four at once.
const gpuGangWorkload = `name: gpu-gang
tiers:
  10k: {nodes: 20, pods: 32, minutes: 10}
node: {cpu: 64, memoryGi: 256, gpus: 8, gpuEvery: 5, gpuPool: "POOL"}
queues: {parents: 1, leavesPerParent: 1, weights: [1], parentCapabilityFraction: 1}
jobs:
  - {weight: 1, size: 32}
pod:
  cpu: [{value: 1, weight: 1}]
  memoryGiPerCPU: 1
  gpuJobFraction: 1
lifetime: {meanSeconds: 36000, jitter: 0}
burst: true
`

func loadGPUGang(t *testing.T, pool string) *workload.Workload {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(gpuGangWorkload, "POOL", pool)), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := workload.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A gang that needs every GPU node of the cluster fits with 4 shards only
// because the GPU nodes are one pool, owned whole by one shard: without
// the pool the ring spreads them over several shards (checked first, from
// the ring the four shards form), and a gang is placed within one shard's
// nodes.
func TestGPUPoolIsOwnedWholeSoAGangAsLargeFits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts shards and etcd")
	}
	names := []string{"shard-0", "shard-1", "shard-2", "shard-3"}
	ring := shard.NewRing(names)
	owners := func(w *workload.Workload) map[string]bool {
		t.Helper()
		tier, err := w.Tier("10k")
		if err != nil {
			t.Fatal(err)
		}
		tree, err := api.BuildTree(workload.QueueSpecs(w, tier))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := NewCluster(w, tier.Nodes, tree)
		if err != nil {
			t.Fatal(err)
		}
		pools, err := gpuPools(w)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		gpus := 0
		for _, name := range cl.nodeList {
			if cl.nodes[name].n.Allocatable.Scalars["nvidia.com/gpu"] == 0 {
				continue
			}
			gpus++
			owner, ok := ring.Owner(wire.PartitionKey(wire.PartitionIn(name, wire.DefaultPartitions, pools)))
			if !ok {
				t.Fatalf("%s: no owner", name)
			}
			out[owner] = true
		}
		if gpus != 4 {
			t.Fatalf("%d GPU nodes, want 4", gpus)
		}
		return out
	}
	if o := owners(loadGPUGang(t, "")); len(o) < 2 {
		t.Fatalf("without a pool the GPU nodes are all owned by %v: the test proves nothing", o)
	}
	w := loadGPUGang(t, "gpu")
	if o := owners(w); len(o) != 1 {
		t.Fatalf("with the pool the GPU nodes are owned by %v, want one shard", o)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Workload: w, Tier: "10k", Shards: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pods != 32 || r.Unbound != 0 {
		t.Errorf("%d pods bound, %d pending: want the gang of 32 bound; notes: %v", r.Pods, r.Unbound, r.Notes)
	}
	if r.Failed() {
		t.Errorf("invariants broken: %v", r.Invariants)
	}
}
