package cache

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Options configure a Cache. The zero value keeps books for every node and
// reports nothing.
type Options struct {
	// Owns reports which nodes this shard keeps books for; nil means all.
	// It is called with the Cache's lock held, so it must be fast, must not
	// block and must not call back into the Cache. It must answer the same
	// way until it is replaced with SetOwns: the cache asks it when a node
	// arrives and when SetOwns is called, not on every event.
	Owns func(node string) bool
	// OnOutOfSync is called when a node goes out of sync (its books would
	// exceed its allocatable; failure F2), with a reason naming each
	// dimension and the amounts. It is called without the Cache's lock held,
	// from the goroutine whose call caused it, once per transition into out
	// of sync; it may call back into the Cache (Rebuild, for instance). It
	// should not block for long: it delays that caller.
	OnOutOfSync func(node string, reason string)
}

// Cache holds the cluster state one shard needs. All its methods are safe for
// concurrent use; the zero value is usable and behaves like New(Options{}).
type Cache struct {
	onOutOfSync func(node, reason string) // set by New, never changed

	// mu guards every field below it. Every writer (event handlers, Assume,
	// Forget, SetOwns, Rebuild) holds it exclusively; every reader
	// (UpdateSnapshot, Task, Job, Stats, ...) holds it shared. It is the
	// only lock in the package. Nothing outside the package is called while
	// it is held, except owns.
	mu sync.RWMutex

	owns func(string) bool // nil: every node
	gen  int64             // last generation handed out; increases on every change

	nodes     map[string]*nodeEntry // every known node, owned or not, by name
	head      *bookEntry            // books of owned nodes, most recently changed first
	bookCount int                   // number of entries in the head list

	tasks     map[string]*taskEntry            // every known task, by UID
	taskNames map[objKey]string                // namespace/name -> UID
	byNode    map[string]map[string]*taskEntry // placement node -> UID -> task, known node or not

	groups        map[objKey]*taskGroup // namespace/job -> its tasks
	pendingGroups map[objKey]*taskGroup // the groups with at least one pending task
	pendingCount  int                   // pending tasks in all groups
	groupsGen     int64                 // generation of the last change to any group

	jobs     map[string]*api.Job // by UID; each value is never mutated once stored
	jobNames map[objKey]string   // namespace/name -> UID
	jobsGen  int64               // generation of the last change to jobs

	outOfSync      map[string]struct{} // owned nodes whose books are out of sync
	outOfSyncTotal int64               // transitions into out of sync, ever

	notes []note // OnOutOfSync calls to make once the lock is released

	// holdSync names the node Rebuild is working on: its out-of-sync state
	// is decided once, at the end, not at every intermediate step.
	holdSync string
}

type objKey struct{ namespace, name string }

type note struct{ node, reason string }

// nodeEntry is one known node. books is nil unless the shard owns the node.
type nodeEntry struct {
	node  api.Node // deep copy; replaced, never mutated
	books *bookEntry
}

// bookEntry is the books of one owned node, in the cache's generation list.
type bookEntry struct {
	b api.NodeBooks
	// exact is false when in-place arithmetic saturated; every change then
	// recomputes the books from the node's tasks.
	exact      bool
	prev, next *bookEntry
}

// taskEntry is one known task.
type taskEntry struct {
	uid  string
	obj  *api.Task    // as last reported by an event (deep copy); replaced, never mutated
	view *api.Task    // obj with an assumption applied; what readers see; never mutated
	req  api.Resource // sanitized obj.Request; never mutated

	assumed string // node Assume booked it on, until confirmed or forgotten
	node    string // placement: the node it holds resources on, "" if none
	pending bool   // waiting to be placed
	group   *taskGroup

	// What the books currently hold for this task: bookedOn is "" unless
	// the task is counted in the books of that (owned, known) node.
	bookedOn  string
	bookedReq api.Resource
	bookedRel bool
}

// taskGroup is the tasks that name one job (namespace/job name), the unit a
// snapshot copies. Not all of them are members of the job now known under
// that name: see member.
type taskGroup struct {
	key     objKey
	tasks   map[string]*taskEntry
	pending int
	gen     int64
	// cutoff is cutoffOf the job now known under key; a change of it is a
	// change of the group (new gen), because membership depends on it.
	cutoff time.Time
	// summary memoizes JobSummary for generation gen; readers holding the
	// read lock may fill it concurrently (each stores an equal value).
	summary atomic.Pointer[groupSummary]
}

type groupSummary struct {
	gen int64
	sum JobSummary
}

// New returns an empty Cache.
func New(opts Options) *Cache {
	c := &Cache{onOutOfSync: opts.OnOutOfSync, owns: opts.Owns}
	c.init()
	return c
}

// init makes the maps; called with mu held exclusively (or before sharing).
func (c *Cache) init() {
	if c.nodes != nil {
		return
	}
	c.nodes = map[string]*nodeEntry{}
	c.tasks = map[string]*taskEntry{}
	c.taskNames = map[objKey]string{}
	c.byNode = map[string]map[string]*taskEntry{}
	c.groups = map[objKey]*taskGroup{}
	c.pendingGroups = map[objKey]*taskGroup{}
	c.jobs = map[string]*api.Job{}
	c.jobNames = map[objKey]string{}
	c.outOfSync = map[string]struct{}{}
}

func (c *Cache) lock() {
	c.mu.Lock()
	c.init()
}

// unlock releases mu, then makes the OnOutOfSync calls queued under it, in
// the calling goroutine.
func (c *Cache) unlock() {
	notes := c.notes
	c.notes = nil
	c.mu.Unlock()
	if c.onOutOfSync == nil {
		return
	}
	for _, n := range notes {
		c.onOutOfSync(n.node, n.reason)
	}
}

func (c *Cache) next() int64 {
	c.gen++
	return c.gen
}

func (c *Cache) ownsLocked(node string) bool {
	return c.owns == nil || c.owns(node)
}

// ---- nodes ----

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
	case c.ownsLocked(n.Name):
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

// SetOwns changes which nodes the shard keeps books for (nil: all) and
// rebuilds the books for the new set: books of nodes no longer owned are
// dropped (their tasks stay known by UID), books of newly owned nodes are
// computed from the tasks already known.
func (c *Cache) SetOwns(owns func(node string) bool) {
	c.lock()
	defer c.unlock()
	c.owns = owns
	for name, ne := range c.nodes {
		want := c.ownsLocked(name)
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
	for uid, e := range c.byNode[node.Name] {
		if _, ok := listed[uid]; !ok && e.assumed == "" {
			stale = append(stale, uid)
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
		e.bookedOn, e.bookedReq, e.bookedRel = name, e.req, e.view.Phase == api.TaskReleasing
	}
	c.nodeChanged(be) // not exact yet: recomputes
}

// dropBooks stops keeping books for a node; its tasks stay known.
func (c *Cache) dropBooks(ne *nodeEntry) {
	name := ne.node.Name
	for _, e := range c.byNode[name] {
		if e.bookedOn == name {
			e.bookedOn, e.bookedReq, e.bookedRel = "", api.Resource{}, false
		}
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
		if e.bookedOn != name {
			continue
		}
		n++
		if !addInto(&used, e.bookedReq, +1) {
			exact = false
		}
		if e.bookedRel && !addInto(&rel, e.bookedReq, +1) {
			exact = false
		}
	}
	be.b.Used, be.b.Releasing, be.b.Tasks, be.exact = used, rel, n, exact
}

// ---- generation list ----

func (c *Cache) pushFront(be *bookEntry) {
	be.prev, be.next = nil, c.head
	if c.head != nil {
		c.head.prev = be
	}
	c.head = be
}

func (c *Cache) unlink(be *bookEntry) {
	if be.prev != nil {
		be.prev.next = be.next
	} else if c.head == be {
		c.head = be.next
	}
	if be.next != nil {
		be.next.prev = be.prev
	}
	be.prev, be.next = nil, nil
}

func (c *Cache) moveToFront(be *bookEntry) {
	if c.head == be {
		return
	}
	c.unlink(be)
	c.pushFront(be)
}

// ---- tasks ----

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
	key := objKey{t.Namespace, t.Name}
	if other, ok := c.taskNames[key]; ok && other != t.UID {
		c.removeTaskLocked(other)
	}
	e := c.tasks[t.UID]
	if e == nil {
		e = &taskEntry{uid: t.UID}
		c.tasks[t.UID] = e
	} else if old := (objKey{e.obj.Namespace, e.obj.Name}); old != key && c.taskNames[old] == t.UID {
		delete(c.taskNames, old)
	}
	c.taskNames[key] = t.UID
	obj := cloneTask(t)
	if e.assumed != "" && (obj.Phase.Terminal() || obj.NodeName != "") {
		// Confirmed (bound to the assumed node), moved (bound elsewhere) or
		// finished: from now on the event is the truth.
		e.assumed = ""
	}
	e.obj = &obj
	e.req = sanitize(obj.Request)
	c.placeLocked(e)
}

// DeleteTask forgets the task with this UID (a task re-created under the same
// name has another UID and is not touched). Called concurrently.
func (c *Cache) DeleteTask(uid string) {
	c.lock()
	defer c.unlock()
	c.removeTaskLocked(uid)
}

func (c *Cache) removeTaskLocked(uid string) {
	e := c.tasks[uid]
	if e == nil {
		return
	}
	if e.bookedOn != "" {
		be := c.nodes[e.bookedOn].books
		c.unbook(be, e)
		c.nodeChanged(be)
	}
	c.setPlacement(e, "")
	c.leaveGroup(e)
	if key := (objKey{e.obj.Namespace, e.obj.Name}); c.taskNames[key] == uid {
		delete(c.taskNames, key)
	}
	delete(c.tasks, uid)
}

// placeLocked recomputes everything derived from a task's obj and
// assumption: its view, placement, pending state, group and booking.
func (c *Cache) placeLocked(e *taskEntry) {
	view := e.obj
	if e.assumed != "" {
		v := *e.obj // shares obj's maps, which are never mutated
		v.NodeName, v.Phase = e.assumed, api.TaskBound
		view = &v
	}
	e.view = view
	node := ""
	if !view.Phase.Terminal() {
		node = view.NodeName
	}
	c.setPlacement(e, node)
	c.leaveGroup(e)
	pending := node == "" && e.assumed == "" && (view.Phase == api.TaskPending || view.Phase == "")
	c.joinGroup(e, objKey{view.Namespace, view.Job}, pending)
	c.rebook(e)
}

func (c *Cache) setPlacement(e *taskEntry, node string) {
	if node == e.node {
		return
	}
	if e.node != "" {
		if m := c.byNode[e.node]; m != nil {
			delete(m, e.uid)
			if len(m) == 0 {
				delete(c.byNode, e.node)
			}
		}
	}
	if node != "" {
		m := c.byNode[node]
		if m == nil {
			m = map[string]*taskEntry{}
			c.byNode[node] = m
		}
		m[e.uid] = e
	}
	e.node = node
}

// rebook makes the books hold what the task's placement says, touching only
// the nodes whose books change.
func (c *Cache) rebook(e *taskEntry) {
	var target *bookEntry
	if e.node != "" {
		if ne := c.nodes[e.node]; ne != nil {
			target = ne.books
		}
	}
	rel := e.view.Phase == api.TaskReleasing
	if target != nil && e.bookedOn == e.node && e.bookedRel == rel && e.bookedReq.Equal(e.req) {
		return
	}
	if target == nil && e.bookedOn == "" {
		return
	}
	var old *bookEntry
	if e.bookedOn != "" {
		old = c.nodes[e.bookedOn].books
		c.unbook(old, e)
	}
	if target != nil {
		c.book(target, e, rel)
		c.nodeChanged(target)
	}
	if old != nil && old != target {
		c.nodeChanged(old)
	}
}

func (c *Cache) book(be *bookEntry, e *taskEntry, rel bool) {
	if !addInto(&be.b.Used, e.req, +1) {
		be.exact = false
	}
	if rel && !addInto(&be.b.Releasing, e.req, +1) {
		be.exact = false
	}
	be.b.Tasks++
	e.bookedOn, e.bookedReq, e.bookedRel = be.b.Node.Name, e.req, rel
}

func (c *Cache) unbook(be *bookEntry, e *taskEntry) {
	if be.exact {
		if !addInto(&be.b.Used, e.bookedReq, -1) {
			be.exact = false
		}
		if e.bookedRel && !addInto(&be.b.Releasing, e.bookedReq, -1) {
			be.exact = false
		}
	}
	be.b.Tasks--
	e.bookedOn, e.bookedReq, e.bookedRel = "", api.Resource{}, false
}

func (c *Cache) leaveGroup(e *taskEntry) {
	g := e.group
	if g == nil {
		return
	}
	delete(g.tasks, e.uid)
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
		g = &taskGroup{key: key, tasks: map[string]*taskEntry{}, cutoff: cutoffOf(c.jobs[c.jobNames[key]])}
		c.groups[key] = g
	}
	g.tasks[e.uid] = e
	e.group, e.pending = g, pending
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
}

// ---- job identity (see "Job identity" in doc.go) ----

// cutoffOf is the time before which a task that is gone (releasing or
// terminal) belonged to a predecessor of j: j's creation time, or zero
// (every task is a member) when there is no job, its creation time is
// unknown, or it is an implicit group (created after its own pods).
func cutoffOf(j *api.Job) time.Time {
	if j == nil || j.Implicit {
		return time.Time{}
	}
	return j.Created
}

// predecessor reports whether a task that names the group belonged to an
// earlier job of the same name rather than to the one whose cutoff is
// given: it is releasing or terminal, and was created before the cutoff.
// A live task (pending, assumed, bound, running) is always a member.
func predecessor(t *api.Task, cutoff time.Time) bool {
	if cutoff.IsZero() || t.Created.IsZero() {
		return false
	}
	return (t.Phase == api.TaskReleasing || t.Phase.Terminal()) && t.Created.Before(cutoff)
}

// member reports whether a task of the group is a member of the job now
// known under the group's key.
func (g *taskGroup) member(e *taskEntry) bool {
	return !predecessor(e.view, g.cutoff)
}

// setCutoff recomputes the cutoff of the group under key after the job
// known under key changed, touching the group only if it moved: a status
// update of the same PodGroup changes nothing here.
func (c *Cache) setCutoff(key objKey) {
	g := c.groups[key]
	if g == nil {
		return
	}
	cut := cutoffOf(c.jobs[c.jobNames[key]])
	if cut.Equal(g.cutoff) {
		return
	}
	g.cutoff = cut
	c.touchGroup(g)
}

// ---- jobs ----

// AddOrUpdateJob records a job (a deep copy), keyed by UID; a job with an
// empty UID is ignored. If its namespace/name is held by another UID (the
// PodGroup was deleted and re-created), the older job is forgotten, and the
// tasks its predecessor left releasing or finished stop being members of
// the name (see "Job identity" in the package doc). Called concurrently by
// informer handlers.
func (c *Cache) AddOrUpdateJob(j api.Job) {
	if j.UID == "" {
		return
	}
	c.lock()
	defer c.unlock()
	key := objKey{j.Namespace, j.Name}
	if other, ok := c.jobNames[key]; ok && other != j.UID {
		delete(c.jobs, other)
	}
	moved := false // the same UID under another name: not possible in Kubernetes, handled anyway
	var oldKey objKey
	if old := c.jobs[j.UID]; old != nil {
		if oldKey = (objKey{old.Namespace, old.Name}); oldKey != key && c.jobNames[oldKey] == j.UID {
			delete(c.jobNames, oldKey)
			moved = true
		}
	}
	cp := cloneJob(j)
	c.jobs[j.UID] = &cp
	c.jobNames[key] = j.UID
	c.jobsGen = c.next()
	c.setCutoff(key)
	if moved {
		c.setCutoff(oldKey)
	}
}

// DeleteJob forgets the job with this UID; a job re-created under the same
// name has another UID and stays (F4). Called concurrently.
func (c *Cache) DeleteJob(uid string) {
	c.lock()
	defer c.unlock()
	j := c.jobs[uid]
	if j == nil {
		return
	}
	key := objKey{j.Namespace, j.Name}
	if c.jobNames[key] == uid {
		delete(c.jobNames, key)
	}
	delete(c.jobs, uid)
	c.jobsGen = c.next()
	c.setCutoff(key)
}

// ---- readers ----

// Task returns a copy of a task as the scheduler sees it: an assumed task
// shows its assumed node and phase Bound.
func (c *Cache) Task(uid string) (api.Task, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.tasks[uid]
	if e == nil {
		return api.Task{}, false
	}
	return cloneTask(*e.view), true
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
	Nodes      int // known nodes, owned or not
	OwnedNodes int // nodes with books
	Tasks      int // known tasks, any phase
	Pending    int // tasks waiting to be placed
	Jobs       int
	OutOfSync  int // owned nodes currently out of sync
	// OutOfSyncTotal counts transitions into out of sync since New.
	OutOfSyncTotal int64
}

// Stats returns the current counts.
func (c *Cache) Stats() Stats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return Stats{
		Nodes:          len(c.nodes),
		OwnedNodes:     c.bookCount,
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
