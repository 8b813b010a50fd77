package scheduler

import (
	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
)

// The quota rule, as the scheduler keeps it: at every moment, for every
// queue and each of its ancestors, the requests of the bound, unfinished
// pods of its subtree ≤ its capability. The coordinator checks every level
// of each reservation; the scheduler makes every bound pod covered by its
// job's reservation:
//
//   - admission reserves max(minResources, the requests of the bound tasks
//     and of the first minMember pending ones) — what the pods ask counts,
//     not only what the PodGroup claims;
//   - a task is bound only while the job's reservation covers it: the
//     requests of the job's bound tasks (assumed ones and binds in flight
//     included) plus the tasks placed now ≤ the reservation;
//   - before tasks beyond that are placed, the shard placing the job asks
//     the coordinator to grow the reservation, one absolute target per
//     pending task (Resize), checked at every level like a new reservation;
//   - when tasks finish, the reservation shrinks to what is still bound
//     (and, while the gang is not whole, what admission asked).
//
// These functions are the pure part of that: no I/O, no locks.

// taskQuota is what one task counts against its queue.
func taskQuota(t *api.Task) api.Resource { return t.Quota() }

// jobUse is what a job's bound, unfinished member tasks count against its
// queue (binds in flight included: the cache counts assumed tasks as bound).
func jobUse(sum cache.JobSummary) api.Resource {
	return sum.Allocated.With(api.Pods, int64(sum.Bound))
}

// admitAmount is what a job reserves to be admitted (api.AdmitAmount), with
// pending sorted as jobTasks sorts them.
func admitAmount(j *api.Job, pending []*api.Task, sum cache.JobSummary) (api.Resource, bool) {
	return api.AdmitAmount(j, pending, jobUse(sum))
}

// maxTargets bounds the targets of one resize (a Deployment of thousands of
// replicas grows in several cycles).
const maxTargets = 256

// resizeTargets are the absolute amounts a job's reservation should take,
// in order, for the coordinator to apply while they fit: first the floor
// (what its bound tasks use, its minResources, and while the gang is not
// whole what admission asked), then the floor grown by each pending task in turn, as
// long as the growth beyond the floor fits in room (what this shard's nodes
// have free: quota is not held for pods that have nowhere to go). pending
// is in placement order (jobTasks). The floor is never zero for a job with
// a task.
func resizeTargets(j *api.Job, pending []*api.Task, sum cache.JobSummary, room api.Resource) []api.Resource {
	use := jobUse(sum)
	floor := use
	if j.MinResources != nil {
		// What the PodGroup claims stays held while the job lives (Spark's
		// driver runs first; its executors come later, into this).
		floor = floor.Max(*j.MinResources)
	}
	if sum.Bound < max(int(j.MinMember), 1) {
		if a, ok := admitAmount(j, pending, sum); ok {
			floor = floor.Max(a)
		}
	}
	targets := []api.Resource{floor}
	// Most often the floor already covers every pending task (a gang whose
	// minMember is its size): then it covers every prefix too (requests
	// are not negative) and the loop below would add nothing.
	if all, ok := api.QuotaSum(use, pending); ok && all.LessEqual(floor) {
		return targets
	}
	acc := use
	for _, t := range pending {
		if len(targets) >= maxTargets {
			break
		}
		acc, _ = acc.Add(taskQuota(t))
		next := acc.Max(floor)
		if next.Equal(targets[len(targets)-1]) {
			continue // within the floor
		}
		if !lessClamped(next, floor).With(api.Pods, 0).LessEqual(room) {
			break
		}
		targets = append(targets, next)
	}
	return targets
}

// covered returns how many of tasks, taken in order, the reservation
// amount covers on top of what the job's bound tasks use.
func covered(amount, use api.Resource, tasks []*api.Task) int {
	if all, ok := api.QuotaSum(use, tasks); ok && all.LessEqual(amount) {
		return len(tasks) // the common case, in one sum
	}
	acc := use
	for i, t := range tasks {
		next, err := acc.Add(taskQuota(t))
		if err != nil || !next.LessEqual(amount) {
			return i
		}
		acc = next
	}
	return len(tasks)
}

// neverFits reports the first level of path (leaf first) whose capability
// is below amount in some dimension: a job asking for amount cannot be
// admitted there even with the queue empty.
func neverFits(tree *api.Tree, path []string, amount api.Resource) (queue, dim string, asked, capv int64, ok bool) {
	if tree == nil {
		return "", "", 0, 0, false
	}
	for _, q := range path {
		spec, found := tree.Get(q)
		if !found {
			continue
		}
		if d, over, bad := spec.Capability.Excess(amount); bad {
			return q, d, amount.Get(d), amount.Get(d) - over, true
		}
	}
	return "", "", 0, 0, false
}

// lessClamped is a − b with each dimension floored at zero.
func lessClamped(a, b api.Resource) api.Resource {
	out := api.Resource{}
	for _, d := range a.Dims() {
		if v := a.Get(d) - b.Get(d); v > 0 {
			out = out.With(d, v)
		}
	}
	return out
}
