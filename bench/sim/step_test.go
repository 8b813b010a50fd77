package sim

import "testing"

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
