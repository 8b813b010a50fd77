package sim

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// The counter counts warnings and errors by message, through loggers
// derived with attributes or groups as well, passes every record its next
// handler takes, and names the most frequent messages first.
func TestWarnCounter(t *testing.T) {
	var out bytes.Buffer
	counts := &warnCounts{}
	log := slog.New(warnCounter{next: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}), counts: counts})
	if n := counts.note(); n != "" {
		t.Errorf("nothing logged: %q, want no note", n)
	}
	shard := log.With("shard", "shard-1").WithGroup("g")
	for range 3 {
		shard.Warn("reconciliation: reservations not listed", "err", "unexpected EOF")
	}
	log.Error("bind failed")
	log.Info("cycle")
	log.Debug("detail")
	want := `the shards logged 4 warnings and errors: 3× "reconciliation: reservations not listed", 1× "bind failed" (-v prints them)`
	if got := counts.note(); got != want {
		t.Errorf("note:\n got %s\nwant %s", got, want)
	}
	if got := strings.Count(out.String(), "\n"); got != 4 || !strings.Contains(out.String(), "shard=shard-1") || strings.Contains(out.String(), "cycle") {
		t.Errorf("passed on:\n%s\nwant the 4 warnings and errors, with their attributes, and no info", out.String())
	}
	// Beyond noteTop messages, the rest are counted and said to exist.
	for i := range noteTop + 2 {
		log.Warn(fmt.Sprintf("other %d", i))
	}
	if got := counts.note(); !strings.HasPrefix(got, "the shards logged 11 warnings and errors: 3×") || !strings.Contains(got, "and 4 other messages") {
		t.Errorf("note with more messages than named: %s", got)
	}
}
