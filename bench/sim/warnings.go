package sim

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
)

// warnCounter is a slog.Handler that counts the shards' records at Warn
// and above by message, then passes each record on to next when next takes
// its level: a run's notes say what the shards warned about even when their
// logs are discarded. (A list of reservations that failed at every shard's
// reconciliation in the 1M runs was seen only by logging.)
type warnCounter struct {
	next   slog.Handler
	counts *warnCounts // shared with the handlers derived by WithAttrs and WithGroup
}

// warnCounts is the count of warnings and errors by message.
type warnCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (h warnCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.counts.add(r.Message)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h warnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return warnCounter{next: h.next.WithAttrs(as), counts: h.counts}
}

func (h warnCounter) WithGroup(name string) slog.Handler {
	return warnCounter{next: h.next.WithGroup(name), counts: h.counts}
}

func (c *warnCounts) add(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[msg]++
}

// noteTop is how many messages note names.
const noteTop = 5

// note says how many warnings and errors the shards logged and names the
// most frequent messages with their counts; "" when there were none.
func (c *warnCounts) note() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) == 0 {
		return ""
	}
	var total int64
	for _, k := range c.n {
		total += k
	}
	msgs := slices.SortedFunc(maps.Keys(c.n), func(a, b string) int { return cmp.Or(cmp.Compare(c.n[b], c.n[a]), cmp.Compare(a, b)) })
	parts := make([]string, 0, noteTop)
	for _, m := range msgs[:min(len(msgs), noteTop)] {
		parts = append(parts, fmt.Sprintf("%d× %q", c.n[m], m))
	}
	more := ""
	if len(msgs) > noteTop {
		more = fmt.Sprintf(", and %d other messages", len(msgs)-noteTop)
	}
	return fmt.Sprintf("the shards logged %d warnings and errors: %s%s (-v prints them)", total, strings.Join(parts, ", "), more)
}
