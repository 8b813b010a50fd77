package cache

import (
	"sort"

	"github.com/shardsched/shardsched/api"
)

// Readers: copies of single tasks and jobs, and counts, under the read
// lock. Snapshots are in snapshot.go, job summaries in summary.go.

// Task returns a copy of a task as the scheduler sees it: an assumed task
// shows its assumed node and phase Bound.
func (c *Cache) Task(uid string) (api.Task, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.tasks[uid]
	if e == nil {
		return api.Task{}, false
	}
	return cloneTask(e.value()), true
}

// Job returns a copy of the job with this UID.
func (c *Cache) Job(uid string) (api.Job, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	j := c.jobs[uid]
	if j == nil {
		return api.Job{}, false
	}
	return cloneJob(*j), true
}

// JobByName returns a copy of the job currently known under namespace/name.
func (c *Cache) JobByName(namespace, name string) (api.Job, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	j := c.jobs[c.jobNames[objKey{namespace, name}]]
	if j == nil {
		return api.Job{}, false
	}
	return cloneJob(*j), true
}

// Stats counts what the cache holds.
type Stats struct {
	Nodes       int // known nodes, owned or not
	BookedNodes int // nodes with books
	Tasks       int // known tasks, any phase
	Pending     int // tasks waiting to be placed
	Jobs        int
	OutOfSync   int // owned nodes currently out of sync
	// OutOfSyncTotal counts transitions into out of sync since New.
	OutOfSyncTotal int64
}

// Stats returns the current counts.
func (c *Cache) Stats() Stats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return Stats{
		Nodes:          len(c.nodes),
		BookedNodes:    c.bookCount,
		Tasks:          len(c.tasks),
		Pending:        c.pendingCount,
		Jobs:           len(c.jobs),
		OutOfSync:      len(c.outOfSync),
		OutOfSyncTotal: c.outOfSyncTotal,
	}
}

// OutOfSync lists the owned nodes whose books are out of sync, sorted.
func (c *Cache) OutOfSync() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.outOfSync))
	for n := range c.outOfSync {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// OutOfSyncTotal counts the transitions of any node into out of sync since
// New (a metric: it never decreases).
func (c *Cache) OutOfSyncTotal() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.outOfSyncTotal
}
