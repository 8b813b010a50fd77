package wire

import (
	"strings"
	"testing"
)

func TestPartitionInPutsAPoolInOnePartition(t *testing.T) {
	pools, err := CompileNodePools(`^(gpu-[a-z0-9]+)-`)
	if err != nil {
		t.Fatal(err)
	}
	const parts = 4096
	a := PartitionIn("gpu-a100-0001", parts, pools)
	for _, n := range []string{"gpu-a100-0002", "gpu-a100-zz", "gpu-a100-9999"} {
		if got := PartitionIn(n, parts, pools); got != a {
			t.Errorf("%s in partition %d, want the pool's %d", n, got, a)
		}
	}
	if p, ok := PoolOf("gpu-h100-7", pools); !ok || p != "gpu-h100" {
		t.Errorf("pool of gpu-h100-7: %q %v", p, ok)
	}
	// Outside any pool, or an empty submatch: by name, as without pools.
	for _, n := range []string{"node-00001", "cpu-a-1", "gpu--x"} {
		if got, want := PartitionIn(n, parts, pools), Partition(n, parts); got != want {
			t.Errorf("%s in partition %d, want %d (by name)", n, got, want)
		}
	}
	empty, err := CompileNodePools(`^x(y*)-`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := PartitionIn("x-1", parts, empty), Partition("x-1", parts); got != want {
		t.Errorf("an empty pool name pooled x-1: %d, want %d", got, want)
	}
	// The pool's partition is not its name's: a node called like the pool
	// is hashed by its own name.
	if _, ok := PoolOf("gpu-a100", pools); ok {
		t.Error("gpu-a100 (no '-' after the pool) named a pool")
	}
	if got := PartitionIn("gpu-a100-0001", parts, nil); got != Partition("gpu-a100-0001", parts) {
		t.Errorf("no pools: partition %d, want by name", got)
	}
}

func TestCompileNodePoolsRefusesWhatCannotNameAPool(t *testing.T) {
	if re, err := CompileNodePools(""); re != nil || err != nil {
		t.Fatalf("empty pattern: %v %v, want no pools", re, err)
	}
	for pattern, want := range map[string]string{
		`^gpu-`:      "no parenthesized submatch",
		`^(gpu-`:     "missing closing )",
		`^(?:gpu)-x`: "no parenthesized submatch",
	} {
		_, err := CompileNodePools(pattern)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), pattern) {
			t.Errorf("%q: %v, want an error naming the pattern and saying %q", pattern, err, want)
		}
	}
}
