package cache

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
)

// Slim records. Nearly every task a shard's cache knows is placed or
// finished (at 1M cores with 8 shards, 270,000 of 280,000 in each shard's
// cache), and nearly all of those are on nodes of other shards: a cycle
// never places them, and what the cache reads of them is their phase,
// node, request and a few fields their job shares. A stored api.Task is
// 288 bytes; the fields that tell one pod of a job from another (name, UID,
// node, creation time) are a quarter of that. So a task that is neither
// pending nor assumed keeps only those fields, and shares the rest with
// the other tasks of its job of the same shape (the same request, task
// spec, priority, constraints and phase: one shape per task spec and
// phase, as a rule; the phase is in the shape because nearly all of a
// job's placed pods are in one, Running, and 16 bytes fewer make the slim
// record 64 bytes, a size class of Go's allocator).
// Nothing is lost: the full task is put together again, equal to the one
// stored before, whenever a reader asks for it (Task, JobTasks, a
// snapshot's TasksOfJob).

// slimTask is what the cache keeps of a task that is placed or finished
// and not assumed. Never mutated once stored: an event stores a new one.
type slimTask struct {
	shape    *shape
	name     string
	nodeName string
	created  time.Time
}

// shape is an api.Task without the per-task fields (Name, UID, NodeName,
// Created), shared by the slim records of the tasks equal to it in
// every other field. t is never mutated once stored.
type shape struct {
	t    api.Task
	req  api.Resource // sanitize(t.Request)
	refs int
}

// maxShapes bounds the shapes kept for one job: a job whose pods differ in
// more ways than that keeps full records for the rest. A job's placed
// pods are in a few phases at a time (bound, running, finished), so this
// is about five task specs' worth.
const maxShapes = 16

// slimmable reports whether the stored form of t, not assumed, would be
// kept slim: it is placed or finished, not waiting to be placed.
func slimmable(t *api.Task) bool {
	return t.NodeName != "" || (t.Phase != api.TaskPending && t.Phase != "")
}

// slimOf returns the slim record of t (as received, not yet copied), or
// nil when its job already has maxShapes shapes and none fits it.
func (c *Cache) slimOf(t *api.Task) *slimTask {
	key := objKey{t.Namespace, t.Job}
	list := c.shapes[key]
	var sh *shape
	for _, s := range list {
		if sameShape(&s.t, t) {
			sh = s
			break
		}
	}
	if sh == nil {
		if len(list) >= maxShapes {
			return nil
		}
		st := c.storedTask(*t)
		st.Name, st.UID, st.NodeName, st.Created = "", "", "", time.Time{}
		sh = &shape{t: st, req: sanitize(st.Request)}
		c.shapes[key] = append(list, sh)
	}
	sh.refs++
	return &slimTask{shape: sh, name: t.Name, nodeName: t.NodeName, created: t.Created}
}

// dropSlim lets go of e's slim record, if it has one, and of its shape
// once no record uses it.
func (c *Cache) dropSlim(e *taskEntry) {
	sl := e.slim
	if sl == nil {
		return
	}
	e.slim = nil
	sh := sl.shape
	sh.refs--
	if sh.refs > 0 {
		return
	}
	key := objKey{sh.t.Namespace, sh.t.Job}
	list := slices.DeleteFunc(c.shapes[key], func(s *shape) bool { return s == sh })
	if len(list) == 0 {
		delete(c.shapes, key)
		return
	}
	c.shapes[key] = list
}

// sameShape reports whether t (as received) is s in every field but the
// per-task ones, as storedTask would store it: nil and empty maps and
// slices differ, as copies keep them apart; a request's scalars are
// compared by content, as storedTask shares equal ones.
func sameShape(s, t *api.Task) bool {
	return s.Namespace == t.Namespace && s.Job == t.Job && s.Implicit == t.Implicit &&
		s.Queue == t.Queue && s.TaskSpec == t.TaskSpec && s.Phase == t.Phase &&
		s.Request.MilliCPU == t.Request.MilliCPU && s.Request.Memory == t.Request.Memory &&
		maps.Equal(s.Request.Scalars, t.Request.Scalars) &&
		s.Priority == t.Priority && s.SchedulerName == t.SchedulerName && s.Protected == t.Protected &&
		(s.NodeSelector == nil) == (t.NodeSelector == nil) && maps.Equal(s.NodeSelector, t.NodeSelector) &&
		(s.Tolerations == nil) == (t.Tolerations == nil) && slices.Equal(s.Tolerations, t.Tolerations) &&
		((s.Affinity == nil && t.Affinity == nil) || reflect.DeepEqual(s.Affinity, t.Affinity))
}

// record is a task as readers see it: in full (a pending task's stored
// copy, or an assumed task's view with its node and phase Bound) or slim.
// A taskEntry holds one (exactly one of full and slim set once stored),
// and a snapshot's groups copy it: neither is mutated once stored, so the
// copies are read without the cache's lock.
type record struct {
	uid  string
	full *api.Task
	slim *slimTask
}

func (r record) namespace() string {
	if r.slim != nil {
		return r.slim.shape.t.Namespace
	}
	return r.full.Namespace
}

func (r record) name() string {
	if r.slim != nil {
		return r.slim.name
	}
	return r.full.Name
}

func (r record) phase() api.TaskPhase {
	if r.slim != nil {
		return r.slim.shape.t.Phase
	}
	return r.full.Phase
}

func (r record) nodeName() string {
	if r.slim != nil {
		return r.slim.nodeName
	}
	return r.full.NodeName
}

func (r record) created() time.Time {
	if r.slim != nil {
		return r.slim.created
	}
	return r.full.Created
}

// shared returns the task's fields that its slim record shares with its
// shape (Request, Priority, TaskSpec, Protected, ...); the per-task fields
// of the result must not be read.
func (r record) shared() *api.Task {
	if r.slim != nil {
		return &r.slim.shape.t
	}
	return r.full
}

// request is the task's sanitized request (sanitize), as booked.
func (r record) request() api.Resource {
	if r.slim != nil {
		return r.slim.shape.req
	}
	return sanitize(r.full.Request)
}

// value returns the task (its maps and slices shared with the cache:
// read-only).
func (r record) value() api.Task {
	if r.slim == nil {
		return *r.full
	}
	return r.slim.task(r.uid)
}

// task returns the task, put together again if it is slim (read-only).
func (r record) task() *api.Task {
	if r.slim == nil {
		return r.full
	}
	t := r.slim.task(r.uid)
	return &t
}

// task puts the full task together again.
func (sl *slimTask) task(uid string) api.Task {
	t := sl.shape.t
	t.Name, t.UID, t.NodeName, t.Created = sl.name, uid, sl.nodeName, sl.created
	return t
}
