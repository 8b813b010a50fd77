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
	if !Sizable(j, len(pending), bound) {
		return Resource{}, false
	}
	gang := max(int(j.MinMember), 1)
	amount, _ = QuotaSum(use, pending[:max(0, min(len(pending), gang-bound))])
	if j.SizedByMinResources() {
		amount = amount.Max(*j.MinResources)
	}
	return amount, true
}

// Sizable reports whether AdmitAmount can size j with pending tasks
// waiting and bound tasks running: it sets minResources, or at least
// minMember of its tasks exist. A scheduler counts without building the
// pending list to skip the jobs it cannot size yet.
func Sizable(j *Job, pending, bound int) bool {
	return j.SizedByMinResources() || pending+bound >= max(int(j.MinMember), 1)
}

// QuotaSum is use plus the quota of every task (Task.Quota): the requests
// summed, and one pod per task, whatever "pods" a request carries. It is
// what folding Add over the tasks' Quota gives, with one map allocation in
// all instead of one per task. ok is false if a dimension overflows int64
// (the amount is then meaningless).
func QuotaSum(use Resource, tasks []*Task) (Resource, bool) {
	cpu, mem, ok := use.MilliCPU, use.Memory, true
	var extra map[string]int64
	for _, t := range tasks {
		var o1, o2 bool
		cpu, o1 = addExact(cpu, t.Request.MilliCPU)
		mem, o2 = addExact(mem, t.Request.Memory)
		ok = ok && o1 && o2
		for k, v := range t.Request.Scalars {
			if k == Pods {
				continue
			}
			if extra == nil {
				extra = map[string]int64{}
			}
			s, o := addExact(extra[k], v)
			extra[k], ok = s, ok && o
		}
	}
	pods, o := addExact(use.Get(Pods), int64(len(tasks)))
	ok = ok && o
	out := Resource{MilliCPU: cpu, Memory: mem, Scalars: make(map[string]int64, len(use.Scalars)+len(extra)+1)}
	for k, v := range use.Scalars {
		out.Scalars[k] = v
	}
	for k, v := range extra {
		s, o := addExact(out.Scalars[k], v)
		ok = ok && o
		out.Scalars[k] = s
	}
	out.Scalars[Pods] = pods
	for k, v := range out.Scalars {
		if v == 0 {
			delete(out.Scalars, k)
		}
	}
	if len(out.Scalars) == 0 {
		out.Scalars = nil
	}
	return out, ok
}
