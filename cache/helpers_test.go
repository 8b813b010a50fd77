package cache

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/shardsched/shardsched/api"
)

const gi = int64(1) << 30

// mkNode returns a node with cpu cores, memory GiB and a pod limit.
func mkNode(name string, cpu, memGi, pods int64) api.Node {
	return api.Node{
		Name:        name,
		UID:         name + "-uid",
		Allocatable: api.NewResource(cpu*1000, memGi*gi, map[string]int64{api.Pods: pods}),
		Labels:      map[string]string{"kubernetes.io/hostname": name},
	}
}

// mkTask returns a pending task requesting milli-CPU, memory GiB and one pod.
func mkTask(ns, name, job string, milli, memGi int64) api.Task {
	return api.Task{
		Namespace: ns, Name: name, UID: ns + "/" + name + "-uid", Job: job,
		Request: api.NewResource(milli, memGi*gi, map[string]int64{api.Pods: 1}),
		Phase:   api.TaskPending,
	}
}

func on(t api.Task, node string, phase api.TaskPhase) api.Task {
	t.NodeName, t.Phase = node, phase
	return t
}

func withAlloc(n api.Node, milli int64) api.Node {
	n.Allocatable = n.Allocatable.With(api.CPU, milli)
	return n
}

// booksOf returns a fresh snapshot's books of one node.
func booksOf(t *testing.T, c *Cache, name string) *api.NodeBooks {
	t.Helper()
	var s Snapshot
	c.UpdateSnapshot(&s)
	b, ok := s.Node(name)
	if !ok {
		t.Fatalf("node %s has no books", name)
	}
	return b
}

func wantUsed(t *testing.T, c *Cache, name string, used api.Resource, tasks int) {
	t.Helper()
	b := booksOf(t, c, name)
	if !b.Used.Equal(used) || b.Tasks != tasks {
		t.Fatalf("%s: used %v with %d tasks, want %v with %d", name, b.Used, b.Tasks, used, tasks)
	}
}

func req(milli, memGi, pods int64) api.Resource {
	return api.NewResource(milli, memGi*gi, map[string]int64{api.Pods: pods})
}

func mustVerify(t *testing.T, c *Cache) {
	t.Helper()
	if err := verify(c); err != nil {
		t.Fatal(err)
	}
}

// recorder collects OnOutOfSync calls.
type recorder struct {
	mu    sync.Mutex
	calls []note
}

func (r *recorder) record(node, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, note{node, reason})
}

func (r *recorder) get() []note {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]note(nil), r.calls...)
}

// sumSat adds r into acc with int64 saturation, independently of addInto.
func sumSat(acc map[string]int64, r api.Resource) {
	for _, d := range dimsOf(r) {
		v := r.Get(d)
		if v <= 0 {
			continue
		}
		if acc[d] > math.MaxInt64-v {
			acc[d] = math.MaxInt64
		} else {
			acc[d] += v
		}
	}
}

func dimsOf(r api.Resource) []string {
	out := []string{api.CPU, api.Memory}
	for k := range r.Scalars {
		out = append(out, k)
	}
	return out
}

func fromMap(m map[string]int64) api.Resource {
	r := api.Resource{}
	for d, v := range m {
		r = r.With(d, v)
	}
	return r
}

// verify checks the cache's internal invariants and recomputes every
// node's books from the tasks, independently of the incremental code.
func verify(c *Cache) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var errs []error
	fail := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }

	type want struct {
		used, rel map[string]int64
		n         int
	}
	wants := map[string]*want{}
	pending := 0
	shapeRefs := map[*shape]int{}
	for uid, e := range c.tasks {
		if (e.slim == nil) == (e.obj == nil) || (e.obj == nil) != (e.full == nil) {
			fail("task %s: kept both in full and slim, or neither", uid)
			continue
		}
		view := e.value()
		obj := view
		if e.obj != nil {
			obj = *e.obj
		}
		if e.slim != nil {
			shapeRefs[e.slim.shape]++
			if e.assumed || !slimmable(&view) {
				fail("task %s: slim, but assumed (%v) or pending", uid, e.assumed)
			}
		}
		if e.uid != uid || view.UID != uid || obj.UID != uid {
			fail("task %s: uid mismatch", uid)
		}
		if c.taskNames.get(view.Namespace, view.Name) != e {
			fail("task %s: name index", uid)
		}
		node := ""
		if !view.Phase.Terminal() {
			node = view.NodeName
		}
		if e.assumed && (e.slim != nil || view.NodeName == "" || view.Phase != api.TaskBound || e.assumedOn() != view.NodeName || obj.NodeName != "") {
			fail("task %s: assumed view", uid)
		}
		if e.node != node {
			fail("task %s: placement %q, want %q", uid, e.node, node)
		}
		if node != "" && !c.byNode[node].has(e, e.nodeAt) {
			fail("task %s: not indexed on %s", uid, node)
		}
		isPending := node == "" && !e.assumed && (view.Phase == api.TaskPending || view.Phase == "")
		if e.pending != isPending {
			fail("task %s: pending %v, want %v", uid, e.pending, isPending)
		}
		if isPending {
			pending++
		}
		if e.group == nil || !e.group.tasks.has(e, e.groupAt) || e.group.key != (objKey{view.Namespace, view.Job}) {
			fail("task %s: group", uid)
		}
		owned := false
		if ne := c.nodes[node]; node != "" && ne != nil && ne.books != nil {
			owned = true
		}
		if owned {
			if b := e.bookedAs(); !e.booked || b.node != node || !b.req.Equal(sanitize(obj.Request)) || b.rel != (view.Phase == api.TaskReleasing) {
				fail("task %s: booked %+v (%v), want on %q", uid, b, e.booked, node)
			}
			w := wants[node]
			if w == nil {
				w = &want{used: map[string]int64{}, rel: map[string]int64{}}
				wants[node] = w
			}
			w.n++
			sumSat(w.used, obj.Request)
			if view.Phase == api.TaskReleasing {
				sumSat(w.rel, obj.Request)
			}
		} else if e.booked {
			fail("task %s: booked on %q, which has no books", uid, e.node)
		}
	}
	for key, list := range c.shapes {
		if len(list) == 0 || len(list) > maxShapes {
			fail("job %v: %d shapes", key, len(list))
		}
		for _, sh := range list {
			if sh.refs != shapeRefs[sh] || sh.refs <= 0 {
				fail("job %v: a shape counts %d records, %d use it", key, sh.refs, shapeRefs[sh])
			}
			if (objKey{sh.t.Namespace, sh.t.Job}) != key {
				fail("job %v: holds a shape of %s/%s", key, sh.t.Namespace, sh.t.Job)
			}
			delete(shapeRefs, sh)
		}
	}
	if len(shapeRefs) > 0 {
		fail("%d shapes in use are not listed under their job", len(shapeRefs))
	}
	if n := c.taskNames.len(); n != len(c.tasks) {
		fail("name index holds %d entries for %d tasks", n, len(c.tasks))
	}
	for node, m := range c.byNode {
		for i, e := range m {
			if c.tasks[e.uid] != e || e.node != node || int(e.nodeAt) != i {
				fail("byNode %s/%s stale", node, e.uid)
			}
		}
	}
	if pending != c.pendingCount {
		fail("pendingCount %d, want %d", c.pendingCount, pending)
	}
	for key, g := range c.groups {
		p := 0
		for i, e := range g.tasks {
			if e.group != g || int(e.groupAt) != i {
				fail("group %v: task %s listed at %d, its own index %d", key, e.uid, i, e.groupAt)
			}
			if e.pending {
				p++
			}
		}
		if len(g.tasks) == 0 || p != g.pending || (p > 0) != (c.pendingGroups[key] == g) {
			fail("group %v: %d tasks, pending %d (counted %d)", key, len(g.tasks), g.pending, p)
		}
		if want := cutoffOf(c.jobs[c.jobNames[key]]); !g.cutoff.Equal(want) {
			fail("group %v: cutoff %v, want %v", key, g.cutoff, want)
		}
	}
	for key := range c.pendingGroups {
		if c.groups[key] == nil {
			fail("pending group %v unknown", key)
		}
	}

	books, oos := 0, 0
	for name, ne := range c.nodes {
		if ne.node.Name != name {
			fail("node %s: name", name)
		}
		if (ne.books != nil) != c.keepsBooksLocked(name) {
			fail("node %s: books %v, owned %v", name, ne.books != nil, c.keepsBooksLocked(name))
		}
		if ne.books == nil {
			continue
		}
		books++
		b := &ne.books.b
		w := wants[name]
		if w == nil {
			w = &want{used: map[string]int64{}, rel: map[string]int64{}}
		}
		if !b.Used.Equal(fromMap(w.used)) || !b.Releasing.Equal(fromMap(w.rel)) || b.Tasks != w.n {
			fail("node %s: used %v rel %v tasks %d, recomputed %v rel %v tasks %d",
				name, b.Used, b.Releasing, b.Tasks, fromMap(w.used), fromMap(w.rel), w.n)
		}
		if !reflect.DeepEqual(b.Node, ne.node) {
			fail("node %s: books' node differs", name)
		}
		bad := overflowReason(b.Used, b.Node.Allocatable, b.Tasks) != ""
		if b.OutOfSync != bad {
			fail("node %s: OutOfSync %v, want %v", name, b.OutOfSync, bad)
		}
		if _, in := c.outOfSync[name]; in != b.OutOfSync {
			fail("node %s: out-of-sync set", name)
		}
		if b.OutOfSync {
			oos++
		}
		if idle := b.Idle(); idle.Validate() != nil {
			fail("node %s: negative idle %v", name, idle)
		}
	}
	if books != c.bookCount || oos != len(c.outOfSync) {
		fail("bookCount %d (have %d), outOfSync %d (have %d)", c.bookCount, books, len(c.outOfSync), oos)
	}
	n, last := 0, int64(math.MaxInt64)
	for be := c.head; be != nil; be = be.next {
		n++
		if be.b.Generation >= last || be.b.Generation > c.gen {
			fail("generation list out of order at %s", be.b.Node.Name)
		}
		last = be.b.Generation
		if ne := c.nodes[be.b.Node.Name]; ne == nil || ne.books != be {
			fail("generation list holds stale %s", be.b.Node.Name)
		}
		if be.next != nil && be.next.prev != be {
			fail("generation list links at %s", be.b.Node.Name)
		}
	}
	if n != c.bookCount {
		fail("generation list has %d entries, want %d", n, c.bookCount)
	}
	for key, uid := range c.jobNames {
		if j := c.jobs[uid]; j == nil || (objKey{j.Namespace, j.Name}) != key {
			fail("job name %v stale", key)
		}
	}
	if len(c.jobNames) != len(c.jobs) {
		fail("%d job names for %d jobs", len(c.jobNames), len(c.jobs))
	}
	return errors.Join(errs...)
}

// snapshotDiff compares two snapshots' visible content.
func snapshotDiff(a, b *Snapshot) string {
	var diffs []string
	an, bn := a.Nodes(), b.Nodes()
	if len(an) != len(bn) {
		diffs = append(diffs, fmt.Sprintf("%d nodes vs %d", len(an), len(bn)))
	} else {
		for i := range an {
			if !reflect.DeepEqual(an[i], bn[i]) {
				diffs = append(diffs, fmt.Sprintf("node %s: %+v vs %+v", an[i].Node.Name, *an[i], *bn[i]))
			}
		}
	}
	if a.Generation() != b.Generation() {
		diffs = append(diffs, "generation")
	}
	if ap, bp := a.PendingTasks(), b.PendingTasks(); !reflect.DeepEqual(ap, bp) {
		diffs = append(diffs, fmt.Sprintf("pending tasks: %v vs %v", taskNames(ap), taskNames(bp)))
	}
	if !reflect.DeepEqual(a.Jobs(), b.Jobs()) {
		diffs = append(diffs, "jobs")
	}
	for _, j := range b.Jobs() {
		if got, _ := a.JobByName(j.Namespace, j.Name); !reflect.DeepEqual(got, j) {
			diffs = append(diffs, fmt.Sprintf("job by name %s/%s", j.Namespace, j.Name))
		}
	}
	for _, j := range a.Jobs() {
		if _, ok := b.JobByName(j.Namespace, j.Name); !ok {
			diffs = append(diffs, fmt.Sprintf("job by name %s/%s: stale", j.Namespace, j.Name))
		}
	}
	keys := map[objKey]bool{}
	for k := range a.groups {
		keys[k] = true
	}
	for k := range b.groups {
		keys[k] = true
	}
	for k := range keys {
		if !reflect.DeepEqual(a.TasksOfJob(k.namespace, k.name), b.TasksOfJob(k.namespace, k.name)) {
			diffs = append(diffs, fmt.Sprintf("tasks of job %v", k))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n")
}

func taskNames(ts []*api.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%s(%s,%s,%q)", t.Name, t.UID, t.Phase, t.NodeName))
	}
	return out
}

// has reports whether e is in the list l at index at.
func (l entryList) has(e *taskEntry, at int32) bool {
	return at >= 0 && int(at) < len(l) && l[at] == e
}
