package sim

import (
	"strings"
	"testing"
	"time"
)

func TestReserveWatchNote(t *testing.T) {
	var w reserveWatch
	if w.note() != "" {
		t.Fatal("a note without any reservation")
	}
	for i := 1; i <= 100; i++ {
		w.Reserve(time.Duration(i) * time.Millisecond)
	}
	n := w.note()
	for _, want := range []string{": 100,", "p50 50.0 ms", "p99 99.0 ms", "max 100.0 ms"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
}
