package testenv

import (
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond until it returns true and fails the test with
// t.Fatalf if it has not within timeout. The failure reads
// "timed out after <timeout> waiting until <message>", the message being
// format and args as for fmt.Sprintf, so it should say what was awaited
// ("the claim store is loaded").
//
// cond runs on the calling goroutine, first at once and then at intervals
// growing from 1ms to 50ms, so short waits stay short and long ones do not
// hammer an API server. Like t.Fatalf, Eventually must be called from the
// goroutine running the test.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	const maxInterval = 50 * time.Millisecond
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}
