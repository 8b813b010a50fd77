package sim

import (
	"strings"
	"testing"
	"time"
)

// The progress line never prints a negative count: between samples the
// driver does not know how many pods are pending (-1) and says so.
func TestPendingText(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{-1, "not counted since the last sample"},
		{0, "0"},
		{1234, "1234"},
	} {
		if got := pendingText(c.n); got != c.want {
			t.Errorf("pendingText(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// The shard note names the shards with the fewest and the most binds, and
// lists the slowest shard of each listed step with what it spent; a run
// with more steps than listed says it lists only the first.
func TestShardNote(t *testing.T) {
	a := vcpuAccount{
		steps: 3,
		binds: map[string]int64{"shard-0": 500, "shard-1": 40, "shard-2": 900},
		slowSteps: []slowStep{
			{shard: "shard-2", cache: 250 * time.Millisecond, cycle: 2 * time.Second, binds: 800},
			{shard: "shard-1", cache: 100 * time.Millisecond, cycle: 900 * time.Millisecond, binds: 40},
			{shard: "shard-0", cycle: 50 * time.Millisecond},
		},
	}
	want := "binds made by each shard's cycles: fewest 40 (shard-1), median 500, most 900 (shard-2); the slowest shard of each step: " +
		"1. shard-2 2.25 s (0.25 s of it its cache taking events) for 800 binds; " +
		"2. shard-1 1.00 s (0.10 s of it its cache taking events) for 40 binds; " +
		"3. shard-0 0.05 s (0.00 s of it its cache taking events) for 0 binds"
	if got := a.shardNote(); got != want {
		t.Errorf("shardNote:\n got %s\nwant %s", got, want)
	}
	a.steps = 40
	if got := a.shardNote(); !strings.Contains(got, "the slowest shard of the first 3 steps: 1. shard-2") {
		t.Errorf("with 40 steps and 3 listed: %s", got)
	}
	if got := (&vcpuAccount{}).shardNote(); got != "" {
		t.Errorf("no cycles: %q, want nothing", got)
	}
}
