package coordinator

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Retries wait between half the backoff and all of it, and differ from one
// draw to the next.
func TestJitteredBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for range 200 {
		d := jittered(100*time.Millisecond, rng.Int64N)
		if d <= 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("jittered(100ms) = %v, want in (50ms, 100ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays in 200 draws", len(seen))
	}
	if d := jittered(time.Nanosecond, rng.Int64N); d != time.Nanosecond {
		t.Errorf("jittered(1ns) = %v", d)
	}
}
