package cache

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/shardsched/shardsched/api"
)

// Snapshot is the cluster state one scheduling cycle works on: the books of
// the nodes the shard owns, the pending tasks, every task of the jobs that
// have pending tasks, and every job. It shares nothing mutable with the
// Cache, so the cycle reads it without any lock while events keep arriving:
// the books are its own copies, and the tasks and jobs are the cache's
// stored ones, which the cache never mutates (an event or an assumption
// replaces them): full records of pending and assumed tasks, slim ones of
// the others, which TasksOfJob puts together for this snapshot alone.
//
// A Snapshot belongs to one cycle (one goroutine) and is not safe for
// concurrent use. Its zero value is ready for Cache.UpdateSnapshot, which
// refreshes it in place. Everything it returns is read-only: the books
// are kept from one refresh to the next while unchanged, and the pending
// tasks and the jobs (their maps included) are shared with the cache and
// with every other snapshot of it.
type Snapshot struct {
	owner      *Cache // the cache it was last refreshed from
	generation int64  // the cache's generation at the last refresh

	nodes  map[string]*api.NodeBooks
	list   []*api.NodeBooks // nodes sorted by name
	copied int              // nodes copied by the last refresh
	known  int              // nodes the cache knows, owned or not
	// alloc is the sum of the nodes' allocatable when allocOK; a refresh
	// that adds or removes a node or changes one's allocatable clears
	// allocOK, and Allocatable sums again.
	alloc   api.Resource
	allocOK bool
	// freeCPU, freeMem and freeSc are what the schedulable, in-sync nodes
	// have free (Free) when freeOK: a refresh takes out each changed
	// node's old part and adds its new one, and so does Book; a refresh
	// that adds or removes a node clears freeOK, and Free sums again.
	freeCPU, freeMem int64
	freeSc           map[string]int64
	freeOK           bool

	groupsGen int64
	groups    map[objKey]*snapGroup // only groups with pending tasks
	pending   []*api.Task           // sorted by namespace, name
	spare     []*api.Task           // the previous pending list's array, reused

	jobsGen  int64
	jobs     map[string]*api.Job // by UID
	jobList  []*api.Job          // sorted by namespace, name
	jobNames map[objKey]*api.Job
	// byQueue is jobList split by queue (each list in its order; no
	// empty list), kept as jobList is.
	byQueue map[string][]*api.Job

	// booked are the books Book changed in place since the last refresh.
	booked map[*api.NodeBooks]struct{}

	// touched are the jobs whose group of tasks the cache touched between
	// the refresh before the last one and the last (TasksChanged); all of
	// them may have when touchedAll.
	touched    map[*api.Job]struct{}
	touchedAll bool
	// jobsChanged are the UIDs of the jobs the last refresh added,
	// replaced or removed (JobUnchanged); all of them may have been when
	// jobsAll.
	jobsChanged map[string]struct{}
	jobsAll     bool
}

type snapGroup struct {
	gen     int64
	members []record    // in no order (TasksOfJob sorts its tasks)
	pending []*api.Task // the pending members
	tasks   []*api.Task // every member, put together on the first TasksOfJob; nil until then
}

// UpdateSnapshot refreshes s to the cache's current state, incrementally:
// only the books whose Generation is newer than the snapshot's are copied
// (deep copies), the books of nodes deleted or no longer owned are removed,
// and only the task groups and jobs that changed are listed again. It holds
// the cache's lock shared, so events wait only for what changed. A nil s is ignored; a Snapshot last refreshed from another Cache
// is rebuilt from scratch.
func (c *Cache) UpdateSnapshot(s *Snapshot) {
	if s == nil {
		return
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	fresh := s.owner != c || s.generation > c.gen || s.nodes == nil
	if fresh {
		*s = Snapshot{
			owner:    c,
			nodes:    map[string]*api.NodeBooks{},
			groups:   map[objKey]*snapGroup{},
			jobs:     map[string]*api.Job{},
			jobNames: map[objKey]*api.Job{},
			byQueue:  map[string][]*api.Job{},
			jobsGen:  -1,
		}
		s.groupsGen = -1
	}
	clear(s.booked) // each was changed in the cache too (Assume): a refresh copies it again
	s.updateNodes(c)
	s.known = len(c.nodes)
	s.updateGroups(c)
	s.updateJobs(c)
	s.updateTouched(c, fresh)
	s.generation = c.gen
}

// updateTouched lists the jobs whose groups the cache touched since the
// last refresh (s.generation, not yet moved on), by the job each group's
// name now names; every job may have changed when the snapshot is new or
// the cache's log no longer goes back that far.
func (s *Snapshot) updateTouched(c *Cache, fresh bool) {
	clear(s.touched)
	changes, ok := c.groupLog.since(s.generation)
	s.touchedAll = fresh || !ok
	if s.touchedAll {
		return
	}
	for _, ch := range changes {
		j := s.jobNames[ch.key]
		if j == nil {
			continue
		}
		if s.touched == nil {
			s.touched = map[*api.Job]struct{}{}
		}
		s.touched[j] = struct{}{}
	}
}

func (s *Snapshot) updateNodes(c *Cache) {
	var changed []*api.NodeBooks
	structural := false
	// The list is ordered by generation, newest first: stop at the first
	// entry the snapshot already has.
	for be := c.head; be != nil && be.b.Generation > s.generation; be = be.next {
		cp := cloneBooks(&be.b)
		name := cp.Node.Name
		if old, ok := s.nodes[name]; !ok {
			structural = true
		} else {
			if s.allocOK && !old.Node.Allocatable.Equal(cp.Node.Allocatable) {
				s.allocOK = false
			}
			if s.freeOK {
				s.addFree(old, -1)
				s.addFree(cp, +1)
			}
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
		s.allocOK, s.freeOK = false, false
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
	// The pending list stays sorted: the pending tasks of the groups that
	// changed or went are taken out, and the changed groups' pending tasks,
	// sorted, are merged back in. Sorting the whole list at every refresh
	// was most of a refresh's time with thousands of pending pods.
	gone := map[*api.Task]bool{}
	var added []*api.Task
	for key, g := range c.pendingGroups {
		old := s.groups[key]
		if old != nil && old.gen == g.gen {
			continue
		}
		if old != nil {
			for _, t := range old.pending {
				gone[t] = true
			}
		}
		ng := groupView(g)
		s.groups[key] = ng
		added = append(added, ng.pending...)
	}
	for key, old := range s.groups {
		if _, ok := c.pendingGroups[key]; !ok {
			for _, t := range old.pending {
				gone[t] = true
			}
			delete(s.groups, key)
		}
	}
	s.groupsGen = c.groupsGen
	if len(gone) == 0 && len(added) == 0 {
		return
	}
	kept := s.pending[:0] // PendingTasks hands out copies of the list
	for _, t := range s.pending {
		if !gone[t] {
			kept = append(kept, t)
		}
	}
	slices.SortFunc(added, compareTasks)
	merged := mergeTasks(s.spare[:0], kept, added)
	// Neither array keeps pointers to tasks gone beyond its length: the
	// spare one holds what is also in merged.
	clear(s.pending[len(kept):])
	clear(merged[len(merged):cap(merged)])
	s.pending, s.spare = merged, kept[:0]
}

// mergeTasks appends to out the merge of two lists sorted by compareTasks.
// b is the short one: each of its tasks finds its place in a by binary
// search.
func mergeTasks(out, a, b []*api.Task) []*api.Task {
	out = slices.Grow(out, len(a)+len(b))
	for _, t := range b {
		i, _ := slices.BinarySearchFunc(a, t, compareTasks)
		out = append(append(out, a[:i]...), t)
		a = a[i:]
	}
	return append(out, a...)
}

// groupView lists the member tasks of a group (a predecessor's tasks are
// left out: see taskGroup.member). The records are the cache's own,
// shared, not copied: a view is never mutated once stored (an event or an
// assumption replaces it), so the snapshot's stays as it was.
func groupView(g *taskGroup) *snapGroup {
	ng := &snapGroup{gen: g.gen, members: make([]record, 0, len(g.tasks))}
	for _, e := range g.tasks {
		if !g.member(e) {
			continue
		}
		ng.members = append(ng.members, e.record)
		if e.pending {
			ng.pending = append(ng.pending, e.full)
		}
	}
	// The members stay in the list's order: what a cycle reads of them
	// (counts, flags) does not depend on it, and sorting every changed
	// group at every refresh was 3 % of a shard's CPU with pods arriving
	// one by one into groups of a hundred. TasksOfJob sorts its copy.
	return ng
}

func compareTasks(a, b *api.Task) int {
	return compareKeys(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
}

// compareKeys orders by namespace, name, then UID, comparing each field
// once and only while the ones before it are equal (cycles sort every job
// they work on; refreshes merge pending tasks).
func compareKeys(ns1, name1, uid1, ns2, name2, uid2 string) int {
	if c := strings.Compare(ns1, ns2); c != 0 {
		return c
	}
	if c := strings.Compare(name1, name2); c != 0 {
		return c
	}
	return strings.Compare(uid1, uid2)
}

func (s *Snapshot) updateJobs(c *Cache) {
	clear(s.jobsChanged)
	s.jobsAll = false
	if s.jobsGen == c.jobsGen {
		return
	}
	// The jobs are the cache's, shared: a stored job is never mutated
	// (an event replaces it). When the cache's log of changed jobs goes
	// back to this snapshot's last refresh and names few enough of them,
	// only those are looked at, each put into or taken out of the sorted
	// list where it belongs; otherwise every job is compared, and the list
	// sorted again if jobs came or went.
	if changes, ok := c.jobLog.since(s.jobsGen); ok { // a new snapshot's -1 is before any log
		if len(changes) <= max(len(s.jobList)/8, 64) {
			for _, ch := range changes {
				s.refreshJob(c, ch.key)
				if s.jobsChanged == nil {
					s.jobsChanged = map[string]struct{}{}
				}
				s.jobsChanged[ch.key] = struct{}{}
			}
			s.jobsGen = c.jobsGen
			return
		}
	}
	s.jobsAll = true
	structural := false
	for uid, j := range c.jobs {
		old, ok := s.jobs[uid]
		if old == j {
			continue
		}
		s.jobs[uid] = j
		if !ok || old.Namespace != j.Namespace || old.Name != j.Name {
			structural = true
			continue
		}
		if i, found := slices.BinarySearchFunc(s.jobList, j, JobOrder); found && old.Queue == j.Queue {
			s.jobList[i] = j
			s.queueReplace(old, j)
		} else {
			structural = true
		}
		s.jobNames[objKey{j.Namespace, j.Name}] = j
	}
	for uid := range s.jobs {
		if _, ok := c.jobs[uid]; !ok {
			delete(s.jobs, uid)
			structural = true
		}
	}
	s.jobsGen = c.jobsGen
	if !structural {
		return
	}
	s.jobList = s.jobList[:0]
	clear(s.jobNames)
	for _, j := range s.jobs {
		s.jobList = append(s.jobList, j)
		s.jobNames[objKey{j.Namespace, j.Name}] = j
	}
	slices.SortFunc(s.jobList, JobOrder)
	clear(s.byQueue)
	for _, j := range s.jobList {
		s.byQueue[j.Queue] = append(s.byQueue[j.Queue], j)
	}
}

// refreshJob brings the snapshot's copy of one job (by UID) to the cache's:
// added, replaced or removed, in jobs, jobList and jobNames.
func (s *Snapshot) refreshJob(c *Cache, uid string) {
	j := c.jobs[uid]
	old := s.jobs[uid]
	if old == j {
		return
	}
	if old != nil && j != nil && old.Namespace == j.Namespace && old.Name == j.Name {
		if i, found := slices.BinarySearchFunc(s.jobList, old, JobOrder); found {
			s.jobList[i] = j
		}
		if old.Queue == j.Queue {
			s.queueReplace(old, j)
		} else {
			s.queueRemove(old)
			s.queueInsert(j)
		}
		s.jobs[uid] = j
		s.jobNames[objKey{j.Namespace, j.Name}] = j
		return
	}
	if old != nil {
		if i, found := slices.BinarySearchFunc(s.jobList, old, JobOrder); found {
			s.jobList = slices.Delete(s.jobList, i, i+1)
		}
		s.queueRemove(old)
		if key := (objKey{old.Namespace, old.Name}); s.jobNames[key] == old {
			delete(s.jobNames, key)
		}
		delete(s.jobs, uid)
	}
	if j != nil {
		i, _ := slices.BinarySearchFunc(s.jobList, j, JobOrder)
		s.jobList = slices.Insert(s.jobList, i, j)
		s.queueInsert(j)
		s.jobs[uid] = j
		s.jobNames[objKey{j.Namespace, j.Name}] = j
	}
}

// queueReplace puts j where old was in their queue's list (the same
// queue, namespace, name and UID).
func (s *Snapshot) queueReplace(old, j *api.Job) {
	if i, found := slices.BinarySearchFunc(s.byQueue[j.Queue], old, JobOrder); found {
		s.byQueue[j.Queue][i] = j
	}
}

// queueRemove takes old out of its queue's list, and the list out when it
// is left empty.
func (s *Snapshot) queueRemove(old *api.Job) {
	l := s.byQueue[old.Queue]
	if i, found := slices.BinarySearchFunc(l, old, JobOrder); found {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(s.byQueue, old.Queue)
	} else {
		s.byQueue[old.Queue] = l
	}
}

// queueInsert puts j into its queue's list, in order.
func (s *Snapshot) queueInsert(j *api.Job) {
	l := s.byQueue[j.Queue]
	i, _ := slices.BinarySearchFunc(l, j, JobOrder)
	s.byQueue[j.Queue] = slices.Insert(l, i, j)
}

// JobOrder orders jobs as a snapshot lists them (Snapshot.Jobs): by
// namespace, name, then UID.
func JobOrder(a, b *api.Job) int {
	return compareKeys(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
}

// Nodes returns the books of the owned nodes, sorted by name. The slice is
// the caller's (it may reorder it); the books are the snapshot's: read-only.
func (s *Snapshot) Nodes() []*api.NodeBooks {
	if s == nil {
		return nil
	}
	return cloneOrNil(s.list)
}

// Allocatable is the sum of the owned nodes' allocatable (the nodes of
// Nodes), summed again only after a refresh that added or removed a node
// or changed one's allocatable: most refreshes change only what is used.
// ok is false when a dimension of the sum overflows int64.
func (s *Snapshot) Allocatable() (api.Resource, bool) {
	if s == nil {
		return api.Resource{}, true
	}
	if !s.allocOK {
		total, ok := api.Resource{}, true
		for _, b := range s.list {
			var err error
			if total, err = total.Add(b.Node.Allocatable); err != nil {
				ok = false
				break
			}
		}
		if !ok {
			return api.Resource{}, false // summed again next time
		}
		s.alloc, s.allocOK = total, true
	}
	return s.alloc, true
}

// Book adds a task the cycle just assumed onto node (Cache.Assume, which
// booked it in the cache) to the snapshot's copy of that node's books, so
// the rest of the cycle plans with it: without this, every job placed in
// one cycle sees the node as it was and bin-packing sends them all to the
// same one. The copy is the snapshot's own, and Assume changed the node's
// generation, so the next UpdateSnapshot replaces it with the cache's.
//
// These are the only books a Snapshot changes in place (Booked tells
// them). Otherwise a node's books keep their pointer from one refresh to
// the next exactly while they are unchanged (a change is a new copy), so
// a reader may keep what it derived from a node's books by that pointer,
// and read again the books Booked names.
func (s *Snapshot) Book(node string, req api.Resource) {
	if s == nil {
		return
	}
	b, ok := s.nodes[node]
	if !ok {
		return
	}
	if s.freeOK {
		s.addFree(b, -1)
	}
	addInto(&b.Used, sanitize(req), +1)
	b.Tasks++
	if s.freeOK {
		s.addFree(b, +1)
	}
	if s.booked == nil {
		s.booked = map[*api.NodeBooks]struct{}{}
	}
	s.booked[b] = struct{}{}
}

// Booked reports whether Book changed b, books of this snapshot, in place
// since the last refresh.
func (s *Snapshot) Booked(b *api.NodeBooks) bool {
	if s == nil {
		return false
	}
	_, ok := s.booked[b]
	return ok
}

// Free is what the owned nodes that are schedulable and in sync have free
// (allocatable less used, at least 0 on each node), without the pod
// count. It is kept node by node across refreshes and Book, and summed
// again from every node only after a refresh that added or removed nodes:
// a cycle where a job may grow asks for it, and summing a thousand nodes
// every such cycle was 4 % of a streaming shard's CPU.
func (s *Snapshot) Free() api.Resource {
	if s == nil {
		return api.Resource{}
	}
	if !s.freeOK {
		s.freeCPU, s.freeMem, s.freeSc = 0, 0, nil
		for _, b := range s.list {
			s.addFree(b, +1)
		}
		s.freeOK = true
	}
	return api.NewResource(s.freeCPU, s.freeMem, s.freeSc)
}

// addFree adds (sign +1) or takes out (sign -1) what node b has free to
// the snapshot's sum.
func (s *Snapshot) addFree(b *api.NodeBooks, sign int64) {
	if b.OutOfSync || b.Node.Unschedulable {
		return
	}
	a, u := &b.Node.Allocatable, &b.Used
	s.freeCPU += sign * max(a.MilliCPU-u.MilliCPU, 0)
	s.freeMem += sign * max(a.Memory-u.Memory, 0)
	for k, v := range a.Scalars {
		if f := v - u.Scalars[k]; f > 0 && k != api.Pods {
			if s.freeSc == nil {
				s.freeSc = map[string]int64{}
			}
			if s.freeSc[k] += sign * f; s.freeSc[k] == 0 {
				delete(s.freeSc, k)
			}
		}
	}
}
