package cache

import "github.com/shardsched/shardsched/api"

// Nodes: the node events, SetKeepsBooks and Rebuild, and the upkeep of the books
// of the owned nodes (created, dropped, recomputed, checked for F2).

// AddOrUpdateNode records a node (a deep copy). An update whose content is
// unchanged (an informer resync) changes nothing. A node with an empty name
// is ignored. Called concurrently by informer handlers.
func (c *Cache) AddOrUpdateNode(n api.Node) {
	if n.Name == "" {
		return
	}
	c.lock()
	defer c.unlock()
	c.setNodeLocked(n)
}

func (c *Cache) setNodeLocked(n api.Node) {
	ne := c.nodes[n.Name]
	if ne != nil && nodeEqual(ne.node, n) {
		return
	}
	if ne == nil {
		ne = &nodeEntry{}
		c.nodes[n.Name] = ne
	}
	ne.node = cloneNode(n)
	switch {
	case ne.books != nil:
		ne.books.b.Node = ne.node
		c.nodeChanged(ne.books)
	case c.keepsBooksLocked(n.Name):
		c.createBooks(ne)
	}
}

// DeleteNode forgets a node, only if uid is the UID of the cached node: a
// delayed delete of a node that was re-created under the same name is
// ignored (F4). Tasks bound to the node stay known and are booked again if
// the node comes back. Called concurrently by informer handlers.
func (c *Cache) DeleteNode(name, uid string) {
	c.lock()
	defer c.unlock()
	ne := c.nodes[name]
	if ne == nil || ne.node.UID != uid {
		return
	}
	if ne.books != nil {
		c.dropBooks(ne)
	}
	delete(c.nodes, name)
}

// SetKeepsBooks changes which nodes the shard keeps books for (nil: all) and
// rebuilds the books for the new set: books of nodes no longer owned are
// dropped (their tasks stay known by UID), books of newly owned nodes are
// computed from the tasks already known.
func (c *Cache) SetKeepsBooks(owns func(node string) bool) {
	c.lock()
	defer c.unlock()
	c.owns = owns
	for name, ne := range c.nodes {
		want := c.keepsBooksLocked(name)
		switch {
		case want && ne.books == nil:
			c.createBooks(ne)
		case !want && ne.books != nil:
			c.dropBooks(ne)
		}
	}
}

// Rebuild replaces everything known about one node with the API server's
// state: the node object, and the tasks bound to it. Cached tasks placed on
// the node by an event but absent from tasks are forgotten (their delete was
// missed or is late; a late delete is then ignored by UID); tasks the shard
// itself assumed onto the node stay booked until their bind is confirmed or
// forgotten. Entries of tasks that are not bound to node.Name are ignored.
// The books are then recomputed from scratch and checked once: the node
// recovers if they fit, and stays out of sync (without a new OnOutOfSync
// call) if they still do not.
func (c *Cache) Rebuild(node api.Node, tasks []api.Task) {
	if node.Name == "" {
		return
	}
	c.lock()
	defer c.unlock()
	c.holdSync = node.Name
	c.setNodeLocked(node)
	listed := make(map[string]struct{}, len(tasks))
	for i := range tasks {
		if tasks[i].UID != "" && tasks[i].NodeName == node.Name {
			listed[tasks[i].UID] = struct{}{}
		}
	}
	var stale []string
	for _, e := range c.byNode[node.Name] {
		if _, ok := listed[e.uid]; !ok && !e.assumed {
			stale = append(stale, e.uid)
		}
	}
	for _, uid := range stale {
		c.removeTaskLocked(uid)
	}
	for i := range tasks {
		if _, ok := listed[tasks[i].UID]; ok {
			c.setTaskLocked(tasks[i])
		}
	}
	c.holdSync = ""
	if ne := c.nodes[node.Name]; ne != nil && ne.books != nil {
		ne.books.exact = false
		c.nodeChanged(ne.books)
	}
}

// createBooks starts keeping books for a known node and books every task
// already placed on it.
func (c *Cache) createBooks(ne *nodeEntry) {
	name := ne.node.Name
	be := &bookEntry{b: api.NodeBooks{Node: ne.node}}
	ne.books = be
	c.pushFront(be)
	c.bookCount++
	for _, e := range c.byNode[name] {
		e.booked = true
	}
	c.nodeChanged(be) // not exact yet: recomputes
}

// dropBooks stops keeping books for a node; its tasks stay known.
func (c *Cache) dropBooks(ne *nodeEntry) {
	name := ne.node.Name
	for _, e := range c.byNode[name] {
		e.booked = false
	}
	delete(c.outOfSync, name)
	c.unlink(ne.books)
	c.bookCount--
	ne.books = nil
	c.next() // a removal is a change snapshots must see
}

// nodeChanged is called after any change to a node's books or node object:
// it recomputes inexact books, decides whether the node is out of sync
// (queueing the OnOutOfSync call on a transition) and gives the books a new
// generation.
func (c *Cache) nodeChanged(be *bookEntry) {
	if !be.exact {
		c.recompute(be)
	}
	name := be.b.Node.Name
	reason := ""
	if name != c.holdSync {
		reason = overflowReason(be.b.Used, be.b.Node.Allocatable, be.b.Tasks)
	}
	switch {
	case name == c.holdSync:
		// decided when Rebuild finishes
	case reason != "" && !be.b.OutOfSync:
		be.b.OutOfSync = true
		c.outOfSync[name] = struct{}{}
		c.outOfSyncTotal++
		c.notes = append(c.notes, note{node: name, reason: reason})
	case reason == "" && be.b.OutOfSync:
		be.b.OutOfSync = false
		delete(c.outOfSync, name)
	}
	be.b.Generation = c.next()
	c.moveToFront(be)
}

// recompute sets a node's books from the tasks booked on it.
func (c *Cache) recompute(be *bookEntry) {
	name := be.b.Node.Name
	used, rel := api.Resource{}, api.Resource{}
	exact, n := true, 0
	for _, e := range c.byNode[name] {
		if !e.booked {
			continue
		}
		n++
		req := e.request()
		if !addInto(&used, req, +1) {
			exact = false
		}
		if e.phase() == api.TaskReleasing && !addInto(&rel, req, +1) {
			exact = false
		}
	}
	be.b.Used, be.b.Releasing, be.b.Tasks, be.exact = used, rel, n, exact
}
