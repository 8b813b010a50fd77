package cache

import "github.com/shardsched/shardsched/api"

// JobSummary counts a job's tasks as the cache sees them now (assumed tasks
// count as bound). Snapshots carry task lists only for jobs with pending
// tasks; this covers every job, for confirmation and status.
type JobSummary struct {
	Pending, Bound, Done int
	// Allocated is the request of the bound, non-terminal tasks (without
	// the "pods" scalar).
	Allocated api.Resource
}

// JobSummary returns the summary of namespace/job (zero if unknown).
func (c *Cache) JobSummary(namespace, job string) JobSummary {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var s JobSummary
	g := c.groups[objKey{namespace, job}]
	if g == nil {
		return s
	}
	for _, e := range g.tasks {
		t := e.view
		switch {
		case t.Phase.Terminal():
			s.Done++
		case t.NodeName != "":
			s.Bound++
			if a, err := s.Allocated.Add(t.Request.With(api.Pods, 0)); err == nil {
				s.Allocated = a
			}
		default:
			s.Pending++
		}
	}
	return s
}
