package testenv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsched/shardsched/internal/testenv"
)

func TestEventuallyReturnsOnceCondHolds(t *testing.T) {
	calls := 0
	testenv.Eventually(t, 10*time.Second, func() bool {
		calls++
		return calls == 3
	}, "the third call")
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3 (Eventually returns at the first true)", calls)
	}
}

// fatalTB records Fatalf and stops the caller as t.Fatalf does (here by a
// panic that the test recovers).
type fatalTB struct {
	testing.TB
	msg string
}

type fatalStop struct{}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalStop{})
}

func TestEventuallyFailsAfterTimeout(t *testing.T) {
	tb := &fatalTB{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatalStop); !ok {
					panic(r)
				}
			}
		}()
		testenv.Eventually(tb, 30*time.Millisecond, func() bool { return false }, "job %d is %s", 7, "bound")
		t.Fatal("Eventually returned although cond never held")
	}()
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("failed after %s, before the 30ms timeout", took)
	}
	if want := "timed out after 30ms waiting until job 7 is bound"; tb.msg != want {
		t.Errorf("failure message %q, want %q", tb.msg, want)
	}
}
