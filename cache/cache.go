package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Options configure a Cache. The zero value keeps books for every node and
// reports nothing.
type Options struct {
	// KeepsBooks reports which nodes this shard keeps books for; nil means all.
	// It is called with the Cache's lock held, so it must be fast, must not
	// block and must not call back into the Cache. It must answer the same
	// way until it is replaced with SetKeepsBooks: the cache asks it when a node
	// arrives and when SetKeepsBooks is called, not on every event.
	KeepsBooks func(node string) bool
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
	// Forget, SetKeepsBooks, Rebuild) holds it exclusively; every reader
	// (UpdateSnapshot, Task, Job, Stats, ...) holds it shared. It is the
	// only lock in the package. Nothing outside the package is called while
	// it is held, except owns.
	mu sync.RWMutex

	owns func(string) bool // nil: every node
	gen  int64             // last generation handed out; increases on every change

	nodes     map[string]*nodeEntry // every known node, owned or not, by name
	head      *bookEntry            // books of owned nodes, most recently changed first
	bookCount int                   // number of entries in the head list

	tasks     map[string]*taskEntry // every known task, by UID
	taskNames nameIndex             // namespace/name -> task
	byNode    map[string]entryList  // placement node -> its tasks, known node or not

	groups        map[objKey]*taskGroup // namespace/job -> its tasks
	pendingGroups map[objKey]*taskGroup // the groups with at least one pending task
	pendingCount  int                   // pending tasks in all groups
	groupsGen     int64                 // generation of the last change to any group

	jobs     map[string]*api.Job // by UID; each value is never mutated once stored
	jobNames map[objKey]string   // namespace/name -> UID
	jobsGen  int64               // generation of the last change to jobs
	// jobLog lists the jobs changed (added, updated, deleted), so that a
	// snapshot refreshes only those; trimmed to O(jobs) (logJob).
	jobLog changeLog[string]
	// groupLog lists the task groups touched (touchGroup), so that a
	// snapshot can tell the jobs whose tasks changed since its last
	// refresh (Snapshot.TasksChanged); trimmed to O(groups).
	groupLog changeLog[objKey]

	outOfSync      map[string]struct{} // owned nodes whose books are out of sync
	outOfSyncTotal int64               // transitions into out of sync, ever

	notes []note // OnOutOfSync calls to make once the lock is released

	// scalars interns the scalar maps of the stored tasks' requests
	// (storedTask): most pods ask for the same one or two scalars.
	scalars map[scalarKey]map[string]int64
	// shapes are the shared parts of the slim records, by job (slim.go).
	shapes map[objKey][]*shape

	// holdSync names the node Rebuild is working on: its out-of-sync state
	// is decided once, at the end, not at every intermediate step.
	holdSync string
}

type objKey struct{ namespace, name string }

// entryList is a set of tasks in no particular order: the tasks on one
// node (each task's nodeAt is its index there) or of one group (groupAt),
// so that a task leaves it by a swap with the last. Every pod of the
// cluster is on a node and in a group, in every shard: a slice costs ~10
// bytes a task where a set of pointers (a map) cost 25-60, the most for
// the small sets of a node's tasks.
type entryList []*taskEntry

// add appends e, storing its index in *at.
func (l *entryList) add(e *taskEntry, at *int32) {
	*at = int32(len(*l))
	*l = append(*l, e)
}

// remove takes out e, whose index is at(e), moving the last task into its
// place; a list left at under a quarter of its capacity is copied into a
// smaller one.
func (l *entryList) remove(e *taskEntry, at func(*taskEntry) *int32) {
	s := *l
	i, last := *at(e), len(s)-1
	if int(i) > last || s[i] != e {
		return // not in this list
	}
	if moved := s[last]; moved != e {
		s[i] = moved
		*at(moved) = i
	}
	s[last] = nil
	s = s[:last]
	if cap(s) > 16 && len(s) < cap(s)/4 {
		s = append(entryList(nil), s...)
	}
	*l = s
}

func nodeAt(e *taskEntry) *int32  { return &e.nodeAt }
func groupAt(e *taskEntry) *int32 { return &e.groupAt }

type note struct{ node, reason string }

// nodeEntry is one known node. books is nil unless the shard keeps books for the node (it holds the node's partition).
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

// taskEntry is one known task. Its size is a size class of Go's
// allocator (80 bytes): every pod of the cluster has one in every shard.
type taskEntry struct {
	// record is the task as readers see it: in full (full is obj with an
	// assumption applied; slim nil) while it is pending or assumed, what
	// cycles place; slim (obj and full nil) once placed or finished and
	// not assumed (see slim.go).
	record
	obj *api.Task // as last reported by an event (deep copy); replaced, never mutated

	node  string // placement: the node it holds resources on, "" if none
	group *taskGroup

	// assumed is set while Assume's booking waits for its bind to be
	// confirmed: full is then obj on the assumed node, phase Bound
	// (assumedOn).
	assumed bool
	pending bool // waiting to be placed
	// booked is set while the books of node (owned and known) count the
	// task: its request in Used, and in Releasing too if its phase is
	// Releasing. What they count is read from the task itself, so every
	// change of its record or placement takes what was booked first
	// (bookedAs) and rebook compares. Most tasks a shard knows are on
	// other shards' nodes; a booking of its own (node, request, phase) was
	// 48 bytes more a booked task.
	booked bool
	// nodeAt and groupAt are the task's indexes in its node's list
	// (byNode) and its group's (see entryList).
	nodeAt, groupAt int32
}

// assumedOn is the node e is assumed on, "" if none.
func (e *taskEntry) assumedOn() string {
	if !e.assumed {
		return ""
	}
	return e.full.NodeName
}

// bookedAs is what the books count for a task (bookedAs of an entry):
// node is "" if they count nothing.
type bookedAs struct {
	node string
	req  api.Resource
	rel  bool // counted in Releasing too
}

// bookedAs returns what the books count for e now; taken before a change
// of its record or placement, for rebook.
func (e *taskEntry) bookedAs() bookedAs {
	if !e.booked {
		return bookedAs{}
	}
	return bookedAs{node: e.node, req: e.request(), rel: e.phase() == api.TaskReleasing}
}

// taskGroup is the tasks that name one job (namespace/job name), the unit a
// snapshot copies. Not all of them are members of the job now known under
// that name: see member.
type taskGroup struct {
	key     objKey
	tasks   entryList
	pending int
	gen     int64
	// cutoff is cutoffOf the job now known under key; a change of it is a
	// change of the group (new gen), because membership depends on it.
	cutoff time.Time
	// sum is the summary of the group's tasks kept up to date task by
	// task (count) while exact; top is how many live members have its
	// Priority. A group whose sums stopped being exact is counted again
	// when asked, and summary memoizes that count for generation gen;
	// readers holding the read lock may fill it concurrently (each stores
	// an equal value).
	sum     JobSummary
	top     int
	exact   bool
	summary atomic.Pointer[groupSummary]
}

type groupSummary struct {
	gen int64
	sum JobSummary
}

// New returns an empty Cache.
func New(opts Options) *Cache {
	c := &Cache{onOutOfSync: opts.OnOutOfSync, owns: opts.KeepsBooks}
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
	c.taskNames = newNameIndex()
	c.byNode = map[string]entryList{}
	c.groups = map[objKey]*taskGroup{}
	c.pendingGroups = map[objKey]*taskGroup{}
	c.jobs = map[string]*api.Job{}
	c.jobNames = map[objKey]string{}
	c.outOfSync = map[string]struct{}{}
	c.scalars = map[scalarKey]map[string]int64{}
	c.shapes = map[objKey][]*shape{}
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

func (c *Cache) keepsBooksLocked(node string) bool {
	return c.owns == nil || c.owns(node)
}
