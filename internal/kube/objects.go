package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
)

// Annotations and labels shared with Volcano, so existing manifests work.
const (
	GroupNameAnnotation = "scheduling.k8s.io/group-name"
	QueueNameAnnotation = "scheduling.volcano.sh/queue-name"
	// TaskSpecAnnotation names the task of its job a pod belongs to, as
	// Volcano's job controller and Kubeflow's operators set it.
	TaskSpecAnnotation = "volcano.sh/task-spec"
	// ImplicitGroupLabel marks PodGroups this scheduler created for plain
	// workloads.
	ImplicitGroupLabel = "shardsched.io/implicit"
	// PreemptableAnnotation "false" on a PodGroup or a pod protects its
	// job from reclaim and preemption (Volcano's volcano.sh/preemptable).
	PreemptableAnnotation = "volcano.sh/preemptable"
)

// protected reports whether annotations say volcano.sh/preemptable "false".
func protected(annotations map[string]string) bool {
	return annotations[PreemptableAnnotation] == "false"
}

// NodeFromNode converts a Node. A malformed allocatable is an error naming it.
func NodeFromNode(n *corev1.Node) (api.Node, error) {
	alloc, err := ResourceFromList(n.Status.Allocatable)
	if err != nil {
		return api.Node{}, fmt.Errorf("node %s allocatable: %w", n.Name, err)
	}
	out := api.Node{Name: n.Name, UID: string(n.UID), Allocatable: alloc, Unschedulable: n.Spec.Unschedulable}
	if len(n.Labels) > 0 {
		out.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			out.Labels[k] = v
		}
	}
	for _, t := range n.Spec.Taints {
		out.Taints = append(out.Taints, api.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	return out, nil
}

// PodRequest is the pod's resource request as kube-scheduler counts it
// (k8s.io/component-helpers' PodRequests, which kube-scheduler uses): its
// containers' requests summed, with its sidecars (init containers that
// keep running, restartPolicy Always) among them, or what its largest init
// container needs beside the sidecars started before it if that is more;
// pod-level requests where the pod sets them; the pod overhead; and while
// an in-place resize is under way, the larger of what the spec asks and
// what the kubelet allocated or applied (only the latter two when the
// kubelet found the resize infeasible). Plus one "pods". A negative
// quantity is an error naming the container or field, and so is a sum
// too large to count.
func PodRequest(p *corev1.Pod) (api.Resource, error) {
	// check refuses a negative quantity in list; what names the list, and
	// is only built for the error (this runs at every pod event).
	check := func(list corev1.ResourceList, what func() string) error {
		for name, q := range list {
			if q.Sign() < 0 {
				return fmt.Errorf("pod %s/%s %s: %w: %s is %s", p.Namespace, p.Name, what(), api.ErrNegative, name, q.String())
			}
		}
		return nil
	}
	for _, c := range p.Spec.Containers {
		if err := check(c.Resources.Requests, func() string { return "container " + c.Name }); err != nil {
			return api.Resource{}, err
		}
	}
	for _, c := range p.Spec.InitContainers {
		if err := check(c.Resources.Requests, func() string { return "init container " + c.Name }); err != nil {
			return api.Resource{}, err
		}
	}
	if err := check(p.Spec.Overhead, func() string { return "overhead" }); err != nil {
		return api.Resource{}, err
	}
	if p.Spec.Resources != nil {
		if err := check(p.Spec.Resources.Requests, func() string { return "pod-level requests" }); err != nil {
			return api.Resource{}, err
		}
	}
	// The statuses are checked, and compared with what their specs ask, in
	// one pass: resizing once an allocated or applied request differs.
	resizing := false
	for _, g := range [...]struct {
		specs    []corev1.Container
		statuses []corev1.ContainerStatus
	}{{p.Spec.Containers, p.Status.ContainerStatuses}, {p.Spec.InitContainers, p.Status.InitContainerStatuses}} {
		for _, cs := range g.statuses {
			if err := check(cs.AllocatedResources, func() string { return "container " + cs.Name + " allocated resources" }); err != nil {
				return api.Resource{}, err
			}
			var applied corev1.ResourceList
			if cs.Resources != nil {
				applied = cs.Resources.Requests
				if err := check(applied, func() string { return "container " + cs.Name + " applied requests" }); err != nil {
					return api.Resource{}, err
				}
			}
			if !resizing && (cs.AllocatedResources != nil || applied != nil) {
				want := specRequests(g.specs, cs.Name)
				resizing = (cs.AllocatedResources != nil && !sameQuantities(cs.AllocatedResources, want)) ||
					(applied != nil && !sameQuantities(applied, want))
			}
		}
	}
	for _, c := range p.Status.Conditions {
		resizing = resizing || c.Type == corev1.PodResizePending
	}
	if p.Spec.Resources != nil && len(p.Spec.Resources.Requests) > 0 && len(p.Spec.Overhead) > 0 {
		// PodRequests adds the overhead into a pod-level quantity it took
		// from the pod, which for some quantities changes the pod's own:
		// it is given a copy (a pod handed in is the caller's, read-only).
		cp := *p
		cp.Spec.Resources = p.Spec.Resources.DeepCopy()
		p = &cp
	}
	// While every status says what its spec asks and no resize is pending,
	// the statuses add nothing, and reading them costs two more passes and
	// their allocations: most running pods (a kubelet reports every running
	// container's allocated and applied requests), converted at every event.
	sum, err := ResourceFromList(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: resizing}))
	if err != nil {
		return api.Resource{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return sum.With(api.Pods, 1), nil
}

// specRequests is what the container named asks in specs (nil when none
// is named so).
func specRequests(specs []corev1.Container, name string) corev1.ResourceList {
	for _, c := range specs {
		if c.Name == name {
			return c.Resources.Requests
		}
	}
	return nil
}

// sameQuantities reports whether a and b ask the same (a missing quantity
// is zero).
func sameQuantities(a, b corev1.ResourceList) bool {
	for name, q := range a {
		if w := b[name]; q.Cmp(w) != 0 {
			return false
		}
	}
	for name, w := range b {
		if _, ok := a[name]; !ok && !w.IsZero() {
			return false
		}
	}
	return true
}

// TaskFromPod converts a Pod.
func TaskFromPod(p *corev1.Pod) (api.Task, error) {
	req, err := PodRequest(p)
	if err != nil {
		return api.Task{}, err
	}
	t := api.Task{
		Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		Job:           p.Annotations[GroupNameAnnotation],
		Queue:         p.Annotations[QueueNameAnnotation],
		TaskSpec:      p.Annotations[TaskSpecAnnotation],
		Request:       req,
		NodeName:      p.Spec.NodeName,
		SchedulerName: p.Spec.SchedulerName,
		Created:       p.CreationTimestamp.Time,
		Protected:     protected(p.Annotations),
	}
	if t.Job == "" {
		t.Job, t.Implicit = ImplicitGroupName(p), true
	}
	if p.Spec.Priority != nil {
		t.Priority = *p.Spec.Priority
	}
	switch {
	case p.Status.Phase == corev1.PodSucceeded:
		t.Phase = api.TaskSucceeded
	case p.Status.Phase == corev1.PodFailed:
		t.Phase = api.TaskFailed
	case p.DeletionTimestamp != nil:
		// Being deleted: a bound pod still holds its node's resources; an
		// unbound one must not be placed (the API server refuses to bind a
		// terminating pod).
		t.Phase = api.TaskReleasing
	case p.Spec.NodeName == "":
		t.Phase = api.TaskPending
	case p.Status.Phase == corev1.PodRunning:
		t.Phase = api.TaskRunning
	default:
		t.Phase = api.TaskBound
	}
	if len(p.Spec.NodeSelector) > 0 {
		t.NodeSelector = make(map[string]string, len(p.Spec.NodeSelector))
		for k, v := range p.Spec.NodeSelector {
			t.NodeSelector[k] = v
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var st api.SelectorTerm
			for _, r := range term.MatchExpressions {
				st.MatchExpressions = append(st.MatchExpressions, api.SelectorRequirement{
					Key: r.Key, Operator: string(r.Operator), Values: append([]string(nil), r.Values...)})
			}
			t.Affinity = append(t.Affinity, st)
		}
	}
	for _, tol := range p.Spec.Tolerations {
		t.Tolerations = append(t.Tolerations, api.Toleration{Key: tol.Key, Operator: string(tol.Operator), Value: tol.Value, Effect: string(tol.Effect)})
	}
	return t, nil
}

// ImplicitGroupName names the implicit PodGroup of a pod that names none:
// one per owning workload (the controller owner: ReplicaSet, StatefulSet,
// Job, ...), else one per pod, as Volcano's podgroup controller names it:
// podgroup-<owner UID>. Where that controller runs too, both name the same
// object, so whichever creates it first, the pod has one PodGroup.
func ImplicitGroupName(p *corev1.Pod) string {
	uid := p.UID
	for _, ref := range p.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			uid = ref.UID
			break
		}
	}
	if uid == "" {
		// Not from the API server (every object there has a UID).
		return "podgroup-pod-" + p.Name
	}
	return "podgroup-" + string(uid)
}

// JobFromPodGroup converts a PodGroup; an empty queue means the default queue.
func JobFromPodGroup(pg *schedv1beta1.PodGroup) (api.Job, error) {
	j := api.Job{
		Namespace: pg.Namespace, Name: pg.Name, UID: string(pg.UID),
		Queue: pg.Spec.Queue, MinMember: pg.Spec.MinMember,
		PriorityClass:   pg.Spec.PriorityClassName,
		Phase:           api.JobPhase(pg.Status.Phase),
		Created:         pg.CreationTimestamp.Time,
		Implicit:        pg.Labels[ImplicitGroupLabel] == "true",
		ResourceVersion: pg.ResourceVersion,
		Protected:       protected(pg.Annotations),
	}
	if j.Queue == "" {
		j.Queue = api.DefaultQueue
	}
	if j.Phase == "" {
		j.Phase = api.JobPending
	}
	if j.MinMember < 0 {
		return api.Job{}, fmt.Errorf("podgroup %s/%s: negative minMember %d", pg.Namespace, pg.Name, j.MinMember)
	}
	for task, n := range pg.Spec.MinTaskMember {
		if n < 0 {
			return api.Job{}, fmt.Errorf("podgroup %s/%s: negative minTaskMember %d for task %q", pg.Namespace, pg.Name, n, task)
		}
		if n == 0 {
			continue
		}
		if j.MinTaskMember == nil {
			j.MinTaskMember = map[string]int32{}
		}
		j.MinTaskMember[task] = n
	}
	if pg.Spec.MinResources != nil && len(*pg.Spec.MinResources) > 0 {
		r, err := ResourceFromList(*pg.Spec.MinResources)
		if err != nil {
			return api.Job{}, fmt.Errorf("podgroup %s/%s minResources: %w", pg.Namespace, pg.Name, err)
		}
		j.MinResources = &r
	}
	return j, nil
}
