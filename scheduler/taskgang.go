package scheduler

import (
	"fmt"
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Per-task gangs: a PodGroup's minTaskMember says, per task (the pods'
// volcano.sh/task-spec), how many of that task's pods must run for the job
// to run (a PyTorchJob's master and its workers). It is all-or-nothing per
// task as well as for the group: the tasks still needed to reach each
// task's minimum go first, both in what admission sizes and in what
// placement tries, and a plan that leaves a task short places nothing.

// boundBySpec counts the job's bound, unfinished tasks per task spec (nil,
// without reading its tasks, when the job sets no minTaskMember).
func (s *Scheduler) boundBySpec(j *api.Job) map[string]int {
	if len(j.MinTaskMember) == 0 {
		return nil
	}
	return s.snap.BoundBySpec(j.Namespace, j.Name)
}

// gangOrder returns tasks with, first, the ones each task spec still needs
// to reach its minimum (specs by name, each spec's tasks in the order
// given), then the others in the order given. short names the first spec
// (by name) whose tasks here and bound cannot reach its minimum, with how
// many it lacks; "" when none is short.
func gangOrder(j *api.Job, tasks []*api.Task, bound map[string]int) (ordered []*api.Task, short string) {
	if len(j.MinTaskMember) == 0 {
		return tasks, ""
	}
	specs := make([]string, 0, len(j.MinTaskMember))
	for s := range j.MinTaskMember {
		specs = append(specs, s)
	}
	slices.Sort(specs)
	first := make(map[*api.Task]bool, len(tasks))
	for _, spec := range specs {
		need := int(j.MinTaskMember[spec]) - bound[spec]
		for _, t := range tasks {
			if need <= 0 {
				break
			}
			if t.TaskSpec == spec {
				first[t] = true
				ordered = append(ordered, t)
				need--
			}
		}
		if need > 0 && short == "" {
			short = fmt.Sprintf("task %q has %d pod(s) fewer than its minTaskMember %d", spec, need, j.MinTaskMember[spec])
		}
	}
	for _, t := range tasks {
		if !first[t] {
			ordered = append(ordered, t)
		}
	}
	return ordered, short
}

// taskGangMet reports whether the tasks assigned by a plan, with those
// already bound, reach every task spec's minimum.
func taskGangMet(j *api.Job, tasks []*api.Task, assigned map[string]string, bound map[string]int) bool {
	if len(j.MinTaskMember) == 0 {
		return true
	}
	got := map[string]int{}
	for _, t := range tasks {
		if _, ok := assigned[t.UID]; ok {
			got[t.TaskSpec]++
		}
	}
	for spec, n := range j.MinTaskMember {
		if got[spec]+bound[spec] < int(n) {
			return false
		}
	}
	return true
}
