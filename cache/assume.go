package cache

import (
	"errors"
	"fmt"
)

// Errors returned by Assume; test them with errors.Is.
var (
	ErrUnknownTask = errors.New("unknown task")
	ErrNotPending  = errors.New("task is not pending")
	ErrUnknownNode = errors.New("unknown node")
	ErrNotOwned    = errors.New("node not owned by this shard")
	ErrOutOfSync   = errors.New("node out of sync")
	ErrDoesNotFit  = errors.New("task does not fit the node's idle resources")
)

// Assume books a pending task onto a node before its bind call returns
// (optimistic binding). It fails, changing nothing, if the task is unknown,
// not pending (already bound, assumed, terminal or releasing), the node is
// unknown, not owned by this shard or out of sync, or the task's request
// does not fit the node's idle resources (including its pod count).
//
// Until an event shows the task bound, the task is booked on the node and
// readers see it there with phase Bound. Forget undoes the assumption after
// a failed bind; an event that shows the task bound to the same node
// confirms it (it is not counted twice), one bound to another node moves it.
func (c *Cache) Assume(taskUID, node string) error {
	c.lock()
	defer c.unlock()
	e := c.tasks[taskUID]
	if e == nil {
		return fmt.Errorf("assume %q: %w", taskUID, ErrUnknownTask)
	}
	if !e.pending {
		why := "phase " + string(e.phase())
		if n := e.nodeName(); n != "" {
			why = "bound to " + n
		}
		if e.assumed {
			why = "already assumed on " + e.assumedOn()
		}
		return fmt.Errorf("assume %s/%s: %w (%s)", e.namespace(), e.name(), ErrNotPending, why)
	}
	ne := c.nodes[node]
	switch {
	case ne == nil:
		return fmt.Errorf("assume %s/%s on %q: %w", e.namespace(), e.name(), node, ErrUnknownNode)
	case ne.books == nil:
		return fmt.Errorf("assume %s/%s on %q: %w", e.namespace(), e.name(), node, ErrNotOwned)
	case ne.books.b.OutOfSync:
		return fmt.Errorf("assume %s/%s on %q: %w", e.namespace(), e.name(), node, ErrOutOfSync)
	}
	be := ne.books
	used := be.b.Used.Clone()
	if !addInto(&used, e.request(), +1) {
		return fmt.Errorf("assume %s/%s on %q: %w (request overflows)", e.namespace(), e.name(), node, ErrDoesNotFit)
	}
	if why := overflowReason(used, be.b.Node.Allocatable, be.b.Tasks+1); why != "" {
		return fmt.Errorf("assume %s/%s on %q: %w (%s)", e.namespace(), e.name(), node, ErrDoesNotFit, why)
	}
	c.placeLocked(e, e.bookedAs(), e.groupedAs(), node)
	return nil
}

// Forget undoes an assumption after a failed bind: the task is unbooked and
// pending again. It does nothing if the task is not assumed (unknown, never
// assumed, or already confirmed by an event).
func (c *Cache) Forget(taskUID string) {
	c.lock()
	defer c.unlock()
	e := c.tasks[taskUID]
	if e == nil || !e.assumed {
		return
	}
	c.placeLocked(e, e.bookedAs(), e.groupedAs(), "")
}

// Assumed returns the node a task is assumed on, if it is assumed and not
// yet confirmed.
func (c *Cache) Assumed(taskUID string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.tasks[taskUID]; e != nil && e.assumed {
		return e.assumedOn(), true
	}
	return "", false
}
