package api

import "sort"

// Quota is what one task counts against its queue and every ancestor: its
// request, as one pod.
func (t *Task) Quota() Resource { return t.Request.With(Pods, 1) }

// SortPending orders a job's pending tasks as they are sized and placed:
// highest priority first, then oldest, then by name.
func SortPending(pending []*Task) {
	sort.SliceStable(pending, func(a, b int) bool {
		if pending[a].Priority != pending[b].Priority {
			return pending[a].Priority > pending[b].Priority
		}
		if !pending[a].Created.Equal(pending[b].Created) {
			return pending[a].Created.Before(pending[b].Created)
		}
		return pending[a].Name < pending[b].Name
	})
}

// AdmitAmount is what a job reserves on its queue and every ancestor to be
// admitted: max(minResources, use plus the quota of its first
// minMember−bound pending tasks), where use is what its bound, unfinished
// tasks count (their requests, and their number as "pods") and pending is
// in SortPending's order. A job that sets minResources is sized by it
// before its pods exist (Volcano's enqueue: its job controller and
// Kubeflow's operators create pods only once the PodGroup is Inqueue);
// without minResources, ok is false while fewer than minMember tasks exist
// (the gang cannot be sized yet).
func AdmitAmount(j *Job, pending []*Task, use Resource) (amount Resource, ok bool) {
	bound := int(use.Get(Pods))
	min := max(int(j.MinMember), 1)
	hasMin := j.MinResources != nil && !j.MinResources.IsZero()
	if len(pending)+bound < min && !hasMin {
		return Resource{}, false
	}
	amount = use
	for i := 0; i < len(pending) && i < min-bound; i++ {
		amount, _ = amount.Add(pending[i].Quota())
	}
	if hasMin {
		amount = amount.Max(*j.MinResources)
	}
	return amount, true
}
