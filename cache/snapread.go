package cache

import (
	"slices"

	"github.com/shardsched/shardsched/api"
)

// The Snapshot's readers: what a cycle asks of it once it is refreshed.

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

// NumPending is len(PendingTasks()), without the copy.
func (s *Snapshot) NumPending() int {
	if s == nil {
		return 0
	}
	return len(s.pending)
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
	if g.tasks == nil && len(g.members) > 0 {
		g.tasks = make([]*api.Task, len(g.members))
		for i, m := range g.members {
			g.tasks[i] = m.task()
		}
		slices.SortFunc(g.tasks, compareTasks)
	}
	return cloneOrNil(g.tasks)
}

// PendingOfJob returns the pending member tasks of the job now known as
// namespace/job, in no particular order: TasksOfJob's pending ones,
// without putting the others together. Read-only.
func (s *Snapshot) PendingOfJob(namespace, job string) []*api.Task {
	if s == nil {
		return nil
	}
	if g := s.groups[objKey{namespace, job}]; g != nil {
		return cloneOrNil(g.pending)
	}
	return nil
}

// BoundBySpec counts the bound (assumed included), unfinished member tasks
// of a job with pending tasks by task spec (TaskSpec); nil for a job
// without pending tasks, as TasksOfJob.
func (s *Snapshot) BoundBySpec(namespace, job string) map[string]int {
	if s == nil {
		return nil
	}
	g := s.groups[objKey{namespace, job}]
	if g == nil {
		return nil
	}
	out := map[string]int{}
	for _, m := range g.members {
		if m.nodeName() != "" && !m.phase().Terminal() {
			out[m.shared().TaskSpec]++
		}
	}
	return out
}

// AnyProtected reports whether a member task of a job with pending tasks
// is protected (Task.Protected); false for a job without pending tasks.
func (s *Snapshot) AnyProtected(namespace, job string) bool {
	if s == nil {
		return false
	}
	g := s.groups[objKey{namespace, job}]
	if g == nil {
		return false
	}
	for _, m := range g.members {
		if m.shared().Protected {
			return true
		}
	}
	return false
}

// Jobs returns every known job, sorted by namespace and name. Read-only.
func (s *Snapshot) Jobs() []*api.Job {
	if s == nil {
		return nil
	}
	return cloneOrNil(s.jobList)
}

// Queues calls yield with each queue that has jobs and those jobs, in the
// order Jobs gives them, queues in no order, without going over the other
// queues' jobs. The lists are the snapshot's own, valid until its next
// refresh: a caller that keeps or changes one copies it.
func (s *Snapshot) Queues(yield func(queue string, jobs []*api.Job) bool) {
	if s == nil {
		return
	}
	for q, js := range s.byQueue {
		if !yield(q, js) {
			return
		}
	}
}

// EachNode calls yield with the index and books of each owned node, in
// the order Nodes gives them, without copying the list. The books are
// read-only, and keep their pointer while unchanged (see Book).
func (s *Snapshot) EachNode(yield func(i int, b *api.NodeBooks) bool) {
	if s == nil {
		return
	}
	for i, b := range s.list {
		if !yield(i, b) {
			return
		}
	}
}

// InOrder sorts js, jobs of this snapshot (as Jobs and JobByUID return
// them, each once), in the snapshot's order (JobOrder), in place, and
// returns it. When js is more than a small part of the snapshot's jobs,
// one walk of the snapshot's list replaces the sort's string compares
// (cycles order every job they work on, often most of the cluster's).
func (s *Snapshot) InOrder(js []*api.Job) []*api.Job {
	if s == nil || len(js)*16 < len(s.jobList) {
		slices.SortFunc(js, JobOrder)
		return js
	}
	in := make(map[*api.Job]struct{}, len(js))
	for _, j := range js {
		in[j] = struct{}{}
	}
	out := js[:0]
	for _, j := range s.jobList {
		if _, ok := in[j]; ok {
			out = append(out, j)
		}
	}
	return out
}

// JobByUID returns the job of that UID. Read-only.
func (s *Snapshot) JobByUID(uid string) (*api.Job, bool) {
	if s == nil {
		return nil, false
	}
	j, ok := s.jobs[uid]
	return j, ok
}

// TasksChanged reports whether the tasks of j, a job of the last refresh,
// may have changed between the refresh before it and the last one: its
// group of tasks was touched (a task of its name came, went, changed phase
// or node, was assumed or forgotten, or the job's cutoff moved), or the
// snapshot cannot tell (it is new, or the cache's log no longer went back
// to the refresh before). False means that what the cache's JobSummary
// and the snapshot's pending tasks said of j's tasks just after the refresh
// before still holds at the last one. A job replaced by the last refresh
// (its PodGroup changed) is a new pointer: callers that compare pointers
// see that for themselves.
func (s *Snapshot) TasksChanged(j *api.Job) bool {
	if s == nil || s.touchedAll {
		return true
	}
	_, ok := s.touched[j]
	return ok
}

// JobUnchanged reports whether the last refresh left the job of this UID
// as it was: not added, replaced or removed (false when the snapshot
// cannot tell: it is new, or the refresh compared every job). A caller
// holding the job the refresh before gave for uid knows, when true, that
// it is still the snapshot's, without looking it up.
func (s *Snapshot) JobUnchanged(uid string) bool {
	if s == nil || s.jobsAll {
		return false
	}
	_, changed := s.jobsChanged[uid]
	return !changed
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
