package cache

import "github.com/shardsched/shardsched/api"

// Tasks: the task events, and what the cache derives from each task: its
// view, its placement, its group and what the books hold for it.

// AddOrUpdateTask records a task (a deep copy), keyed by UID; a task with an
// empty UID is ignored. An update that changes NodeName or Phase moves its
// request between node books; a terminal task uses nothing; a Releasing task
// stays in Used and also counts in Releasing. A task bound to a node that is
// not known yet is booked when the node arrives. If the task's
// namespace/name is held by another UID, that older task is gone from the
// API server (names are unique among live objects) and is forgotten.
// For a task assumed by Assume, an update bound to the assumed node confirms
// it, one bound elsewhere moves it, and one not yet bound keeps the
// assumption. Called concurrently by informer handlers.
func (c *Cache) AddOrUpdateTask(t api.Task) {
	if t.UID == "" {
		return
	}
	c.lock()
	defer c.unlock()
	c.setTaskLocked(t)
}

func (c *Cache) setTaskLocked(t api.Task) {
	if other := c.taskNames.get(t.Namespace, t.Name); other != nil && other.uid != t.UID {
		c.removeTaskLocked(other.uid)
	}
	e := c.tasks[t.UID]
	if e == nil {
		e = &taskEntry{record: record{uid: t.UID}}
		c.tasks[t.UID] = e
	} else if !named(e, t.Namespace, t.Name) {
		c.taskNames.remove(e) // under its old name
	}
	was, grouped, on := e.bookedAs(), e.groupedAs(), e.assumedOn()
	if on != "" && (t.Phase.Terminal() || t.NodeName != "") {
		// Confirmed (bound to the assumed node), moved (bound elsewhere) or
		// finished: from now on the event is the truth.
		on = ""
	}
	var sl *slimTask
	if on == "" && slimmable(&t) {
		sl = c.slimOf(&t) // before dropSlim: a shape both share is kept
	}
	c.dropSlim(e)
	if sl != nil {
		e.obj, e.full, e.slim = nil, nil, sl
	} else {
		obj := c.storedTask(t)
		e.obj, e.full = &obj, &obj // placeLocked applies any assumption
	}
	c.taskNames.put(e)
	c.placeLocked(e, was, grouped, on)
}

// DeleteTask forgets the task with this UID (a task re-created under the same
// name has another UID and is not touched). Called concurrently.
func (c *Cache) DeleteTask(uid string) {
	c.lock()
	defer c.unlock()
	c.removeTaskLocked(uid)
}

// DeleteTasksExcept forgets every task whose UID keep reports false: a
// relist of every pod calls it to forget those it no longer lists. keep
// is called with the cache's lock held and must not call back into the
// Cache.
func (c *Cache) DeleteTasksExcept(keep func(uid string) bool) {
	c.lock()
	defer c.unlock()
	var gone []string
	for uid := range c.tasks {
		if !keep(uid) {
			gone = append(gone, uid)
		}
	}
	for _, uid := range gone {
		c.removeTaskLocked(uid)
	}
}

func (c *Cache) removeTaskLocked(uid string) {
	e := c.tasks[uid]
	if e == nil {
		return
	}
	if e.booked {
		be := c.nodes[e.node].books
		c.unbook(be, e, e.bookedAs())
		c.nodeChanged(be)
	}
	c.setPlacement(e, "")
	c.leaveGroup(e, e.groupedAs())
	c.taskNames.remove(e)
	c.dropSlim(e)
	delete(c.tasks, uid)
}

// placeLocked recomputes everything derived from a task's obj and
// assumption (on: the node it is assumed on, "" for none): its view,
// placement, pending state, group and booking. was is what the books
// counted for it before its record changed (bookedAs), grouped what its
// group's summary counted (groupedAs).
func (c *Cache) placeLocked(e *taskEntry, was bookedAs, grouped groupedAs, on string) {
	e.assumed = on != ""
	if e.slim == nil {
		view := e.obj
		if e.assumed {
			v := *e.obj // shares obj's maps, which are never mutated
			v.NodeName, v.Phase = on, api.TaskBound
			view = &v
		}
		e.full = view
	}
	phase, node := e.phase(), ""
	if !phase.Terminal() {
		node = e.nodeName()
	}
	c.setPlacement(e, node)
	c.leaveGroup(e, grouped)
	pending := node == "" && !e.assumed && (phase == api.TaskPending || phase == "")
	c.joinGroup(e, objKey{e.namespace(), e.shared().Job}, pending)
	c.rebook(e, was)
}

func (c *Cache) setPlacement(e *taskEntry, node string) {
	if node == e.node {
		return
	}
	if e.node != "" {
		if l, ok := c.byNode[e.node]; ok {
			l.remove(e, nodeAt)
			if len(l) == 0 {
				delete(c.byNode, e.node)
			} else {
				c.byNode[e.node] = l
			}
		}
	}
	if node != "" {
		l := c.byNode[node]
		l.add(e, &e.nodeAt)
		c.byNode[node] = l
	}
	e.node = node
}

// rebook makes the books hold what the task's placement says, touching only
// the nodes whose books change; was is what they counted for it before
// (bookedAs, taken before its record or placement changed).
func (c *Cache) rebook(e *taskEntry, was bookedAs) {
	var target *bookEntry
	if e.node != "" {
		if ne := c.nodes[e.node]; ne != nil {
			target = ne.books
		}
	}
	rel, req := e.phase() == api.TaskReleasing, e.request()
	if target != nil && e.booked && was.node == e.node && was.rel == rel && was.req.Equal(req) {
		return
	}
	if target == nil && !e.booked {
		return
	}
	var old *bookEntry
	if e.booked {
		old = c.nodes[was.node].books
		c.unbook(old, e, was)
	}
	if target != nil {
		c.book(target, e, req, rel)
		c.nodeChanged(target)
	}
	if old != nil && old != target {
		c.nodeChanged(old)
	}
}

func (c *Cache) book(be *bookEntry, e *taskEntry, req api.Resource, rel bool) {
	if !addInto(&be.b.Used, req, +1) {
		be.exact = false
	}
	if rel && !addInto(&be.b.Releasing, req, +1) {
		be.exact = false
	}
	be.b.Tasks++
	e.booked = true
}

// unbook takes out of be what it counted for e (was).
func (c *Cache) unbook(be *bookEntry, e *taskEntry, was bookedAs) {
	if be.exact {
		if !addInto(&be.b.Used, was.req, -1) {
			be.exact = false
		}
		if was.rel && !addInto(&be.b.Releasing, was.req, -1) {
			be.exact = false
		}
	}
	be.b.Tasks--
	e.booked = false
}

// leaveGroup takes e out of its group, whose summary counted it as
// grouped (groupedAs, taken before e's record changed).
func (c *Cache) leaveGroup(e *taskEntry, grouped groupedAs) {
	g := e.group
	if g == nil {
		return
	}
	g.tasks.remove(e, groupAt)
	g.count(grouped, -1)
	if e.pending {
		g.pending--
		c.pendingCount--
	}
	c.touchGroup(g)
	if g.pending == 0 {
		delete(c.pendingGroups, g.key)
	}
	if len(g.tasks) == 0 {
		delete(c.groups, g.key)
	}
	e.group, e.pending = nil, false
}

func (c *Cache) joinGroup(e *taskEntry, key objKey, pending bool) {
	g := c.groups[key]
	if g == nil {
		g = &taskGroup{key: key, cutoff: cutoffOf(c.jobs[c.jobNames[key]]), exact: true}
		c.groups[key] = g
	}
	g.tasks.add(e, &e.groupAt)
	e.group, e.pending = g, pending
	g.count(g.classify(e), +1)
	if pending {
		g.pending++
		c.pendingCount++
		c.pendingGroups[key] = g
	}
	c.touchGroup(g)
}

func (c *Cache) touchGroup(g *taskGroup) {
	g.gen = c.next()
	c.groupsGen = g.gen
	c.groupLog.add(g.gen, g.key, max(2*len(c.groups), 1024))
}
