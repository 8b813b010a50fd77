package cache

import (
	"cmp"
	"slices"
	"sort"

	"github.com/shardsched/shardsched/api"
)

// Snapshot is the cluster state one scheduling cycle works on: the books of
// the nodes the shard owns, the pending tasks, every task of the jobs that
// have pending tasks, and every job. It shares nothing mutable with the
// Cache, so the cycle reads it without any lock while events keep arriving.
//
// A Snapshot belongs to one cycle (one goroutine) and is not safe for
// concurrent use. Its zero value is ready for Cache.UpdateSnapshot, which
// refreshes it in place. Everything it returns points into the snapshot's
// own copies: treat them as read-only, because UpdateSnapshot keeps the
// copies of unchanged objects from one refresh to the next.
type Snapshot struct {
	owner      *Cache // the cache it was last refreshed from
	generation int64  // the cache's generation at the last refresh

	nodes  map[string]*api.NodeBooks
	list   []*api.NodeBooks // nodes sorted by name
	copied int              // nodes copied by the last refresh
	known  int              // nodes the cache knows, owned or not

	groupsGen int64
	groups    map[objKey]*snapGroup // only groups with pending tasks
	pending   []*api.Task           // sorted by namespace, name

	jobsGen  int64
	jobs     map[string]snapJob // by UID
	jobList  []*api.Job         // sorted by namespace, name
	jobNames map[objKey]*api.Job
}

type snapTask struct{ src, cp *api.Task } // the cache's view it was copied from, and the copy
type snapJob struct{ src, cp *api.Job }

type snapGroup struct {
	gen     int64
	tasks   []*api.Task // sorted by name
	pending []*api.Task
	srcs    map[string]snapTask // by UID
}

// UpdateSnapshot refreshes s to the cache's current state, incrementally:
// only the books whose Generation is newer than the snapshot's are copied
// (deep copies), the books of nodes deleted or no longer owned are removed,
// and only the task groups and jobs that changed are copied again. It holds
// the cache's lock shared, so events wait only for the copying of what
// changed. A nil s is ignored; a Snapshot last refreshed from another Cache
// is rebuilt from scratch.
func (c *Cache) UpdateSnapshot(s *Snapshot) {
	if s == nil {
		return
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s.owner != c || s.generation > c.gen || s.nodes == nil {
		*s = Snapshot{
			owner:    c,
			nodes:    map[string]*api.NodeBooks{},
			groups:   map[objKey]*snapGroup{},
			jobs:     map[string]snapJob{},
			jobNames: map[objKey]*api.Job{},
			jobsGen:  -1,
		}
		s.groupsGen = -1
	}
	s.updateNodes(c)
	s.known = len(c.nodes)
	s.updateGroups(c)
	s.updateJobs(c)
	s.generation = c.gen
}

func (s *Snapshot) updateNodes(c *Cache) {
	var changed []*api.NodeBooks
	structural := false
	// The list is ordered by generation, newest first: stop at the first
	// entry the snapshot already has.
	for be := c.head; be != nil && be.b.Generation > s.generation; be = be.next {
		cp := cloneBooks(&be.b)
		name := cp.Node.Name
		if _, ok := s.nodes[name]; !ok {
			structural = true
		}
		s.nodes[name] = cp
		changed = append(changed, cp)
	}
	// Every node with books is now in s.nodes; more entries means some were
	// deleted or are no longer owned.
	if len(s.nodes) > c.bookCount {
		for name := range s.nodes {
			if ne := c.nodes[name]; ne == nil || ne.books == nil {
				delete(s.nodes, name)
				structural = true
			}
		}
	}
	s.copied = len(changed)
	if structural {
		s.list = s.list[:0]
		for _, b := range s.nodes {
			s.list = append(s.list, b)
		}
		slices.SortFunc(s.list, func(a, b *api.NodeBooks) int { return cmp.Compare(a.Node.Name, b.Node.Name) })
		return
	}
	for _, cp := range changed {
		name := cp.Node.Name
		i := sort.Search(len(s.list), func(i int) bool { return s.list[i].Node.Name >= name })
		if i < len(s.list) && s.list[i].Node.Name == name {
			s.list[i] = cp
		}
	}
}

func (s *Snapshot) updateGroups(c *Cache) {
	if s.groupsGen == c.groupsGen {
		return
	}
	changed := false
	for key, g := range c.pendingGroups {
		old := s.groups[key]
		if old != nil && old.gen == g.gen {
			continue
		}
		s.groups[key] = copyGroup(g, old)
		changed = true
	}
	for key := range s.groups {
		if _, ok := c.pendingGroups[key]; !ok {
			delete(s.groups, key)
			changed = true
		}
	}
	s.groupsGen = c.groupsGen
	if !changed {
		return
	}
	s.pending = s.pending[:0]
	for _, g := range s.groups {
		s.pending = append(s.pending, g.pending...)
	}
	slices.SortFunc(s.pending, compareTasks)
}

// copyGroup deep-copies the member tasks of a group (a predecessor's tasks
// are left out: see taskGroup.member), reusing the copies in old of the
// tasks that did not change since.
func copyGroup(g *taskGroup, old *snapGroup) *snapGroup {
	ng := &snapGroup{
		gen:   g.gen,
		tasks: make([]*api.Task, 0, len(g.tasks)),
		srcs:  make(map[string]snapTask, len(g.tasks)),
	}
	for uid, e := range g.tasks {
		if !g.member(e) {
			continue
		}
		var cp *api.Task
		if old != nil {
			if st, ok := old.srcs[uid]; ok && st.src == e.view {
				cp = st.cp
			}
		}
		if cp == nil {
			t := cloneTask(*e.view)
			cp = &t
		}
		ng.srcs[uid] = snapTask{src: e.view, cp: cp}
		ng.tasks = append(ng.tasks, cp)
		if e.pending {
			ng.pending = append(ng.pending, cp)
		}
	}
	slices.SortFunc(ng.tasks, compareTasks)
	return ng
}

func compareTasks(a, b *api.Task) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

func (s *Snapshot) updateJobs(c *Cache) {
	if s.jobsGen == c.jobsGen {
		return
	}
	jobs := make(map[string]snapJob, len(c.jobs))
	for uid, j := range c.jobs {
		if old, ok := s.jobs[uid]; ok && old.src == j {
			jobs[uid] = old
			continue
		}
		cp := cloneJob(*j)
		jobs[uid] = snapJob{src: j, cp: &cp}
	}
	s.jobs = jobs
	s.jobList = s.jobList[:0]
	clear(s.jobNames)
	for _, j := range jobs {
		s.jobList = append(s.jobList, j.cp)
		s.jobNames[objKey{j.cp.Namespace, j.cp.Name}] = j.cp
	}
	slices.SortFunc(s.jobList, func(a, b *api.Job) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	s.jobsGen = c.jobsGen
}

// Nodes returns the books of the owned nodes, sorted by name. The slice is
// the caller's (it may reorder it); the books are the snapshot's: read-only.
func (s *Snapshot) Nodes() []*api.NodeBooks {
	if s == nil {
		return nil
	}
	return cloneOrNil(s.list)
}

// Book adds a task the cycle just assumed onto node (Cache.Assume, which
// booked it in the cache) to the snapshot's copy of that node's books, so
// the rest of the cycle plans with it: without this, every job placed in
// one cycle sees the node as it was and bin-packing sends them all to the
// same one. The copy is the snapshot's own, and Assume changed the node's
// generation, so the next UpdateSnapshot replaces it with the cache's.
func (s *Snapshot) Book(node string, req api.Resource) {
	if s == nil {
		return
	}
	if b, ok := s.nodes[node]; ok {
		addInto(&b.Used, sanitize(req), +1)
		b.Tasks++
	}
}

// Node returns the books of one owned node.
func (s *Snapshot) Node(name string) (*api.NodeBooks, bool) {
	if s == nil {
		return nil, false
	}
	b, ok := s.nodes[name]
	return b, ok
}

// NumNodes returns the number of owned nodes in the snapshot.
func (s *Snapshot) NumNodes() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}

// KnownNodes returns the number of nodes the cache knows of, owned by this
// shard or not: every node of the cluster.
func (s *Snapshot) KnownNodes() int {
	if s == nil {
		return 0
	}
	return s.known
}

// Generation returns the cache generation the snapshot reflects.
func (s *Snapshot) Generation() int64 {
	if s == nil {
		return 0
	}
	return s.generation
}

// NodesCopied returns how many node books the last UpdateSnapshot copied.
func (s *Snapshot) NodesCopied() int {
	if s == nil {
		return 0
	}
	return s.copied
}

// PendingTasks returns the tasks waiting to be placed (not bound, not
// assumed, phase Pending), sorted by namespace and name. A pending task is
// always a member of the job it names. Read-only.
func (s *Snapshot) PendingTasks() []*api.Task {
	if s == nil {
		return nil
	}
	return cloneOrNil(s.pending)
}

// TasksOfJob returns every member task (any phase; assumed ones show their
// node and phase Bound) of the job now known as namespace/job, sorted by
// name, for a job that has pending tasks; nil for a job with none, which a
// cycle has nothing to place for. The releasing or finished tasks a
// deleted PodGroup of the same name left behind are not members (see "Job
// identity" in the package doc). Tasks without a job are grouped under job
// "". Read-only.
func (s *Snapshot) TasksOfJob(namespace, job string) []*api.Task {
	if s == nil {
		return nil
	}
	g := s.groups[objKey{namespace, job}]
	if g == nil {
		return nil
	}
	return cloneOrNil(g.tasks)
}

// Jobs returns every known job, sorted by namespace and name. Read-only.
func (s *Snapshot) Jobs() []*api.Job {
	if s == nil {
		return nil
	}
	return cloneOrNil(s.jobList)
}

// JobByName returns the job known under namespace/name. Read-only.
func (s *Snapshot) JobByName(namespace, name string) (*api.Job, bool) {
	if s == nil {
		return nil, false
	}
	j, ok := s.jobNames[objKey{namespace, name}]
	return j, ok
}

// cloneOrNil returns a copy of a slice of pointers, nil when it is empty.
func cloneOrNil[T any](s []*T) []*T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}
