package api

import "time"

// Taint effects and toleration operators, as in Kubernetes.
const (
	TaintNoSchedule       = "NoSchedule"
	TaintPreferNoSchedule = "PreferNoSchedule"
	TaintNoExecute        = "NoExecute"

	TolerationExists = "Exists"
	TolerationEqual  = "Equal"
)

// Taint repels tasks that do not tolerate it.
type Taint struct {
	Key, Value, Effect string
}

// Toleration lets a task onto nodes with matching taints. An empty Key with
// operator Exists tolerates everything; an empty Effect matches all effects.
type Toleration struct {
	Key, Operator, Value, Effect string
}

// Node selector operators, as in Kubernetes' required node affinity.
const (
	SelectorIn           = "In"
	SelectorNotIn        = "NotIn"
	SelectorExists       = "Exists"
	SelectorDoesNotExist = "DoesNotExist"
	SelectorGt           = "Gt"
	SelectorLt           = "Lt"
)

// SelectorRequirement is one node-label requirement.
type SelectorRequirement struct {
	Key, Operator string
	Values        []string
}

// SelectorTerm is satisfied when all its requirements are (AND).
type SelectorTerm struct {
	MatchExpressions []SelectorRequirement
}

// Node is a node as the scheduler sees it.
type Node struct {
	Name string
	UID  string
	// Allocatable includes the pod count as the scalar "pods".
	Allocatable   Resource
	Labels        map[string]string
	Taints        []Taint
	Unschedulable bool
}

// TaskPhase is the lifecycle phase of a task (a pod).
type TaskPhase string

// Task phases.
const (
	TaskPending   TaskPhase = "Pending"   // not bound
	TaskBound     TaskPhase = "Bound"     // bound (nodeName set), not yet running
	TaskRunning   TaskPhase = "Running"   //
	TaskSucceeded TaskPhase = "Succeeded" // terminal: frees its node's resources
	TaskFailed    TaskPhase = "Failed"    // terminal
	TaskReleasing TaskPhase = "Releasing" // being deleted, still holds resources
)

// Terminal reports whether a task in this phase no longer holds resources.
func (p TaskPhase) Terminal() bool { return p == TaskSucceeded || p == TaskFailed }

// Task is one pod of a job.
type Task struct {
	Namespace, Name, UID string
	// Job is the name of the task's PodGroup in the same namespace: from
	// the group annotation, or the implicit group of its workload.
	Job string
	// Implicit is set when the pod names no group: the scheduler creates
	// (and later deletes) the implicit PodGroup Job in Queue.
	Implicit bool
	// Queue is the queue the pod asks for (annotation), for implicit groups.
	Queue string
	// TaskSpec names the task of its job the pod belongs to (Volcano's
	// volcano.sh/task-spec annotation), for the job's MinTaskMember.
	TaskSpec string
	// Request is the sum of the containers' requests (init containers:
	// the max rule), with "pods" = 1.
	Request       Resource
	NodeName      string
	Phase         TaskPhase
	NodeSelector  map[string]string
	Affinity      []SelectorTerm // required node affinity: any term (OR)
	Tolerations   []Toleration
	Priority      int32
	SchedulerName string
	Created       time.Time
	// Protected: the pod says volcano.sh/preemptable "false"; its job is
	// never a victim of reclaim or preemption.
	Protected bool
}

// Key is the task's namespace/name.
func (t *Task) Key() string { return t.Namespace + "/" + t.Name }

// JobPhase is the phase of a job (a PodGroup).
type JobPhase string

// Job phases, as in Volcano's PodGroup.
const (
	JobPending   JobPhase = "Pending"
	JobInqueue   JobPhase = "Inqueue"
	JobRunning   JobPhase = "Running"
	JobCompleted JobPhase = "Completed"
	JobUnknown   JobPhase = "Unknown"
)

// Job is a gang of tasks (a PodGroup).
type Job struct {
	Namespace, Name, UID string
	Queue                string
	MinMember            int32
	// MinResources, when set, is what admission reserves; otherwise the
	// sum of the first MinMember tasks' requests.
	MinResources *Resource
	// MinTaskMember is, per task (TaskSpec), how many of its pods must run
	// for the job to run: a gang within the gang. Never mutated once set.
	MinTaskMember map[string]int32
	// PriorityClass is the PodGroup's priorityClassName. When it is set,
	// Priority is that class's value (the cluster's global default
	// class's, or 0, when no such class exists); when it is empty the job
	// takes the priority of its highest member pod (the scheduler reads it
	// from the cache), as a plain workload's pods carry theirs.
	PriorityClass string
	Priority      int32
	Phase         JobPhase
	Created       time.Time
	// Implicit marks a PodGroup the scheduler created for a plain workload.
	Implicit bool
	// ResourceVersion is the PodGroup's, for delete preconditions (F4).
	ResourceVersion string
	// Protected: the PodGroup says volcano.sh/preemptable "false"; the
	// job is never a victim of reclaim or preemption.
	Protected bool
}

// Key is the job's namespace/name.
func (j *Job) Key() string { return j.Namespace + "/" + j.Name }

// SizedByMinResources reports whether the job sets minResources (non-zero):
// its reservation is at least that, and it can be sized before its tasks
// exist.
func (j *Job) SizedByMinResources() bool { return j.MinResources != nil && !j.MinResources.IsZero() }

// NodeBooks are the books of one node: what is used by bound tasks, what
// is releasing (bound tasks being deleted), and what is idle.
type NodeBooks struct {
	Node      Node
	Used      Resource // bound, non-terminal tasks (including releasing ones)
	Releasing Resource // part of Used held by tasks being deleted
	Tasks     int
	// OutOfSync is set when the books would go negative (allocatable
	// shrank under bound tasks, a pod bound by another scheduler): the node
	// is skipped by placement until it is rebuilt.
	OutOfSync bool
	// Generation increases on every change of this node's books.
	Generation int64
}

// Idle returns Allocatable − Used, never negative (a dimension short is 0).
func (b *NodeBooks) Idle() Resource {
	idle, err := b.Node.Allocatable.Sub(b.Used)
	if err != nil {
		out := Resource{}
		for _, d := range unionDims(idle, Resource{}) {
			if v := idle.Get(d); v > 0 {
				out = out.With(d, v)
			}
		}
		return out
	}
	return idle
}

// IdleOf is one dimension of Idle, without building a Resource:
// allocatable − used, 0 when short or when the subtraction overflows
// (where Idle zeroes every dimension; the two differ only on books that
// overflow).
func (b *NodeBooks) IdleOf(dim string) int64 {
	if v, ok := subExact(b.Node.Allocatable.Get(dim), b.Used.Get(dim)); ok {
		return v
	}
	return 0
}

// QueueStatus is what the owner shard writes into a Queue's status.
type QueueStatus struct {
	Allocated Resource
	Pending   int32
	Running   int32
	Inqueue   int32
}

// JobCondition is a PodGroup condition written by the scheduler.
type JobCondition struct {
	Type, Status, Reason, Message string
	LastTransition                time.Time
}

// JobStatus is what the owner shard writes into a PodGroup's status.
type JobStatus struct {
	Phase      JobPhase
	Running    int32
	Succeeded  int32
	Failed     int32
	Conditions []JobCondition
}
