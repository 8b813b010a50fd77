package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// MainCheckingLeaks runs the tests and then fails the package if
// goroutines whose stack contains any of marks are still alive after a
// grace period (connections and workers close asynchronously). It exits.
func MainCheckingLeaks(m *testing.M, marks ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := LeakedGoroutines(5*time.Second, marks...); leaked != "" {
			fmt.Println("FAIL: leaked goroutines:\n" + leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakedGoroutines returns the stacks of the goroutines that mention any of
// marks (the test's own are left out), waiting up to grace for them to end.
func LeakedGoroutines(grace time.Duration, marks ...string) string {
	deadline := time.Now().Add(grace)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "testenv.LeakedGoroutines") || strings.Contains(g, "testing.(*M).Run") {
				continue
			}
			for _, m := range marks {
				if strings.Contains(g, m) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
