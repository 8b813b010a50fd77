package cache

import (
	"sort"

	"github.com/shardsched/shardsched/api"
)

// JobSummary counts the member tasks of a job as the cache sees them now
// (assumed tasks count as bound). Snapshots carry task lists only for jobs
// with pending tasks; this covers every job, for confirmation and status.
type JobSummary struct {
	Pending, Bound, Done int
	// Failed is the part of Done that failed (the rest succeeded).
	Failed int
	// Allocated is the request of the bound, non-terminal tasks (without
	// the "pods" scalar).
	Allocated api.Resource
	// Predecessors counts the tasks that name the job but were left,
	// releasing or finished, by a deleted PodGroup of the same name (see
	// "Job identity" in the package doc). They are in none of the figures
	// above; the releasing ones are still booked on their nodes.
	Predecessors int
	// Priority is the highest priority of the job's pending and bound
	// members (0 without any): a job whose PodGroup names no
	// PriorityClass is ordered by it.
	Priority int32
}

// JobSummary returns the summary of the job now known as namespace/job
// (zero if no task names it). Only its members are counted.
//
// Each group keeps its summary up to date task by task (count), so this
// is a copy, not a walk over the job's tasks: every change of a task in a
// stream of pods used to make the next cycle count the whole group again.
// A group whose sums saturated counts again when asked, memoized per
// generation.
func (c *Cache) JobSummary(namespace, job string) JobSummary {
	c.mu.RLock()
	defer c.mu.RUnlock()
	g := c.groups[objKey{namespace, job}]
	if g == nil {
		return JobSummary{}
	}
	if g.exact {
		return g.sum.clone()
	}
	if m := g.summary.Load(); m != nil && m.gen == g.gen {
		return m.sum.clone()
	}
	s, _, _ := g.countAll()
	g.summary.Store(&groupSummary{gen: g.gen, sum: s.clone()})
	return s
}

// countAll counts g's tasks from scratch: their summary, how many live
// members have its Priority, and whether the sums are exact (no request
// saturated or was negative), as count would have kept them.
func (g *taskGroup) countAll() (s JobSummary, top int, exact bool) {
	exact = true
	for _, e := range g.tasks {
		ok, _ := s.tally(&top, g.classify(e), +1)
		exact = exact && ok
	}
	return s, top, exact
}

// summaryClass is where a task counts in its group's summary.
type summaryClass uint8

const (
	classNone summaryClass = iota // in no group
	classPredecessor
	classSucceeded // Done, and not Failed
	classFailed
	classBound
	classPending
)

// groupedAs is what a group's summary counts for one task: taken before a
// change of the task's record (as bookedAs is for the books), so that what
// count added is what it takes out.
type groupedAs struct {
	class summaryClass
	req   api.Resource // bound members: their request, shared with the task (read only)
	prio  int32        // pending and bound members
}

// groupedAs is what e's group counts for e now.
func (e *taskEntry) groupedAs() groupedAs {
	if e.group == nil {
		return groupedAs{}
	}
	return e.group.classify(e)
}

// classify is where e, a task of g, counts in g's summary.
func (g *taskGroup) classify(e *taskEntry) groupedAs {
	phase, sh := e.phase(), e.shared()
	switch {
	case !g.member(e):
		return groupedAs{class: classPredecessor}
	case phase == api.TaskFailed:
		return groupedAs{class: classFailed}
	case phase.Terminal():
		return groupedAs{class: classSucceeded}
	case e.nodeName() != "":
		return groupedAs{class: classBound, req: sh.Request, prio: sh.Priority}
	}
	return groupedAs{class: classPending, prio: sh.Priority}
}

// count adds (sign +1) or takes out (−1) what a says to g's summary. A
// group whose sums stop being exact keeps counting from scratch on demand
// (JobSummary) until it is emptied; one whose highest priority loses its
// last live member but not its others counts again now.
func (g *taskGroup) count(a groupedAs, sign int) {
	if !g.exact {
		return
	}
	switch exact, stale := g.sum.tally(&g.top, a, sign); {
	case !exact:
		g.exact = false
	case stale:
		g.recount() // the highest priority left: which is it now?
	}
}

// tally adds (sign +1) or takes out (−1) what a says to s, whose live
// members at its Priority number *top. exact is false if a's request did
// not add up exactly; stale if the last live member at s.Priority left
// while others stay, so that s.Priority must be counted again.
func (s *JobSummary) tally(top *int, a groupedAs, sign int) (exact, stale bool) {
	exact = true
	switch a.class {
	case classPredecessor:
		s.Predecessors += sign
	case classSucceeded:
		s.Done += sign
	case classFailed:
		s.Done += sign
		s.Failed += sign
	case classBound:
		s.Bound += sign
		exact = addAllocated(&s.Allocated, a.req, sign)
		stale = s.notePriority(top, a.prio, sign)
	case classPending:
		s.Pending += sign
		stale = s.notePriority(top, a.prio, sign)
	}
	return exact, stale
}

// notePriority keeps s.Priority the highest priority of the live members
// (0 without any) and *top how many have it, as a live member with
// priority p joins (sign +1) or leaves (−1); it reports a leave that
// leaves no live member at s.Priority while others stay.
func (s *JobSummary) notePriority(top *int, p int32, sign int) (stale bool) {
	live := s.Pending + s.Bound
	switch {
	case sign > 0 && (live == 1 || p > s.Priority):
		s.Priority, *top = p, 1
	case sign > 0 && p == s.Priority:
		*top++
	case sign < 0 && live == 0:
		s.Priority, *top = 0, 0
	case sign < 0 && p == s.Priority:
		*top--
		return *top == 0
	}
	return false
}

// recount sets g's summary from its tasks (after its membership rule
// changed, or its highest priority's last live member left).
func (g *taskGroup) recount() {
	g.sum, g.top, g.exact = g.countAll()
}

// addAllocated adds (sign +1) or takes out (−1) r, without the "pods"
// scalar, into dst in place, saturating instead of overflowing and
// dropping scalars that come to zero. It reports whether the sum is exact:
// false if a value of r is negative (left out, as the books leave it) or
// a sum saturated, and a summary kept task by task is then counted again
// from its tasks when asked.
func addAllocated(dst *api.Resource, r api.Resource, sign int) bool {
	ok := true
	add := func(cur, v int64) int64 {
		if v < 0 {
			ok = false
			return cur
		}
		if sign < 0 {
			v = -v
		}
		s, exact := satAdd(cur, v)
		ok = ok && exact && s >= 0
		return s
	}
	dst.MilliCPU = add(dst.MilliCPU, r.MilliCPU)
	dst.Memory = add(dst.Memory, r.Memory)
	for k, v := range r.Scalars {
		if k == api.Pods || v == 0 {
			continue
		}
		s := add(dst.Scalars[k], v)
		if s == 0 {
			delete(dst.Scalars, k)
			continue
		}
		if dst.Scalars == nil {
			dst.Scalars = map[string]int64{}
		}
		dst.Scalars[k] = s
	}
	if len(dst.Scalars) == 0 {
		dst.Scalars = nil
	}
	return ok
}

// clone copies s so callers never share the memo's scalar map.
func (s JobSummary) clone() JobSummary {
	if s.Allocated.Scalars != nil {
		s.Allocated = s.Allocated.Clone()
	}
	return s
}

// JobTasks returns shallow copies (their maps and slices shared with the
// cache and other tasks: read-only) of every member task of the job now known as
// namespace/job, in any phase (assumed ones with their node), sorted by
// name; the tasks a deleted PodGroup of the same name left behind are not
// members. It reads the live cache under its lock, for the rare callers
// that need a job's bound tasks (evictions); a cycle uses its snapshot.
func (c *Cache) JobTasks(namespace, job string) []api.Task {
	c.mu.RLock()
	defer c.mu.RUnlock()
	g := c.groups[objKey{namespace, job}]
	if g == nil {
		return nil
	}
	out := make([]api.Task, 0, len(g.tasks))
	for _, e := range g.tasks {
		if g.member(e) {
			out = append(out, e.value())
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}
