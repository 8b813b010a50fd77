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
func (c *Cache) JobSummary(namespace, job string) JobSummary {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var s JobSummary
	g := c.groups[objKey{namespace, job}]
	if g == nil {
		return s
	}
	if m := g.summary.Load(); m != nil && m.gen == g.gen {
		return m.sum.clone()
	}
	for _, e := range g.tasks {
		phase, sh := e.phase(), e.shared()
		switch {
		case !g.member(e):
			s.Predecessors++
		case phase.Terminal():
			s.Done++
			if phase == api.TaskFailed {
				s.Failed++
			}
		case e.nodeName() != "":
			s.Bound++
			addRequest(&s.Allocated, sh.Request)
			s.notePriority(sh.Priority)
		default:
			s.Pending++
			s.notePriority(sh.Priority)
		}
	}
	g.summary.Store(&groupSummary{gen: g.gen, sum: s.clone()})
	return s
}

// notePriority raises s.Priority to p; the first live member sets it.
func (s *JobSummary) notePriority(p int32) {
	if s.Pending+s.Bound == 1 || p > s.Priority {
		s.Priority = p
	}
}

// clone copies s so callers never share the memo's scalar map.
func (s JobSummary) clone() JobSummary {
	if s.Allocated.Scalars != nil {
		s.Allocated = s.Allocated.Clone()
	}
	return s
}

// addRequest adds r (without "pods") into dst in place, saturating instead
// of overflowing; it allocates only for scalars.
func addRequest(dst *api.Resource, r api.Resource) {
	dst.MilliCPU = satAddValue(dst.MilliCPU, r.MilliCPU)
	dst.Memory = satAddValue(dst.Memory, r.Memory)
	for k, v := range r.Scalars {
		if k == api.Pods || v == 0 {
			continue
		}
		if dst.Scalars == nil {
			dst.Scalars = map[string]int64{}
		}
		dst.Scalars[k] = satAddValue(dst.Scalars[k], v)
	}
}

func satAddValue(a, b int64) int64 {
	v, _ := satAdd(a, b) // clamped to the int64 range
	return v
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
