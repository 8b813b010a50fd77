package shard

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

// The gossiped metadata never exceeds memberlist's limit: with every
// capacity figure at its largest and a long name and address, the nodes'
// allocatable goes first, then the capacity, then the address, and the ID
// always stays.
func TestMetaWithinLimit(t *testing.T) {
	full := Capacity{FreeMilliCPU: math.MaxInt64, FreeMemory: math.MaxInt64, LargestCPU: math.MaxInt64, LargestMemory: math.MaxInt64,
		Nodes: math.MaxInt32, FreeGPU: math.MaxInt64, LargestFreeGPU: math.MaxInt64,
		AllocMilliCPU: math.MaxInt64, AllocMemory: math.MaxInt64, AllocGPU: math.MaxInt64,
		LargestAllocCPU: math.MaxInt64, LargestAllocMem: math.MaxInt64, LargestAllocGPU: math.MaxInt64}
	decode := func(b []byte) Meta {
		t.Helper()
		var m Meta
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("metadata %q: %v", b, err)
		}
		return m
	}
	size := func(m Meta) int {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	noAlloc := full
	noAlloc.AllocMilliCPU, noAlloc.AllocMemory, noAlloc.AllocGPU, noAlloc.LargestAllocCPU, noAlloc.LargestAllocMem, noAlloc.LargestAllocGPU = 0, 0, 0, 0, 0, 0
	const limit, api = memberlist.MetaMaxSize, "10.0.0.1:8080"
	// Name lengths just over each stage's limit.
	overFull := limit - size(Meta{API: api, Capacity: full}) + 1
	overNoAlloc := limit - size(Meta{API: api, Capacity: noAlloc}) + 1
	overBare := limit - size(Meta{API: api}) + 1
	for _, tc := range []struct {
		name, api             string
		capacity, alloc, addr bool // what is kept
	}{
		{"shard-0", api, true, true, true},
		{strings.Repeat("s", overFull), api, true, false, true},
		{strings.Repeat("s", overNoAlloc), api, false, false, true},
		{strings.Repeat("s", overBare), api, false, false, false},
	} {
		b := metaWithin(Meta{ID: tc.name, API: tc.api, Capacity: full}, limit)
		if len(b) > limit {
			t.Fatalf("%d-byte name, %d-byte address: %d bytes of metadata", len(tc.name), len(tc.api), len(b))
		}
		m := decode(b)
		if m.ID != tc.name || (m.API == tc.api) != tc.addr || (m.Capacity.FreeMilliCPU != 0) != tc.capacity ||
			(m.Capacity.AllocMilliCPU != 0) != tc.alloc {
			t.Errorf("%d-byte name, %d-byte address: kept %+v, want capacity %v, allocatable %v, address %v",
				len(tc.name), len(tc.api), m, tc.capacity, tc.alloc, tc.addr)
		}
	}
}
