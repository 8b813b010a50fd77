package cache

import "sort"

// changeLog lists what changed (keys: job UIDs, group names), oldest first,
// each with the generation of its change, so that a snapshot can look only
// at what changed since its last refresh. It is complete for every
// generation after from: add drops its older half past a limit, and a
// snapshot older than what is left must look at everything. Called with the
// cache's lock held exclusively (add) or shared (since).
type changeLog[K any] struct {
	entries []logEntry[K]
	from    int64
}

type logEntry[K any] struct {
	gen int64
	key K
}

// add records that key changed at gen (no earlier than the last entry's),
// keeping at most limit entries (at least 2).
func (l *changeLog[K]) add(gen int64, key K, limit int) {
	l.entries = append(l.entries, logEntry[K]{gen: gen, key: key})
	if len(l.entries) > max(limit, 2) {
		drop := len(l.entries) / 2
		l.from = l.entries[drop-1].gen
		l.entries = append(l.entries[:0], l.entries[drop:]...)
	}
}

// since returns the entries of the changes after generation gen, and false
// when the log no longer goes back that far.
func (l *changeLog[K]) since(gen int64) ([]logEntry[K], bool) {
	if gen < l.from {
		return nil, false
	}
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].gen > gen })
	return l.entries[i:], true
}
