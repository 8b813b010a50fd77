package kube

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The informers' transform: what a shard keeps of each object it watches.

// lastApplied is kubectl's copy of the applied manifest, often the largest
// annotation of an object and never read here.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// compactCore is the built-in informers' transform: a pod is cut down to
// what the scheduler reads (compactPod), anything else loses its managed
// fields.
func compactCore(o any) (any, error) {
	if p, ok := o.(*corev1.Pod); ok {
		return compactPod(p), nil
	}
	return stripManagedFields(o)
}

// compactPod returns the part of p that TaskFromPod and PodRequest read,
// which is all the cache and the node truth ever read of a pod: its
// metadata (without managed fields or kubectl's last-applied copy), the
// scheduling fields of its spec, its containers' names, requests and
// restart policies, its pod-level requests, and its phase; and, only while
// an in-place resize makes them count (compactResize), its containers'
// allocated and applied requests and its resize condition. Every pod event
// of the cluster is decoded and kept by every shard: environment, volumes,
// probes, images and status conditions are most of a pod's bytes and none
// of them is read.
func compactPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = nil
	if _, ok := p.Annotations[lastApplied]; ok {
		out.Annotations = make(map[string]string, len(p.Annotations)-1)
		for k, v := range p.Annotations {
			if k != lastApplied {
				out.Annotations[k] = v
			}
		}
	}
	out.Spec = corev1.PodSpec{
		NodeName: p.Spec.NodeName, SchedulerName: p.Spec.SchedulerName, Priority: p.Spec.Priority,
		PriorityClassName: p.Spec.PriorityClassName, NodeSelector: p.Spec.NodeSelector,
		Tolerations: p.Spec.Tolerations, Overhead: p.Spec.Overhead,
		Containers: compactContainers(p.Spec.Containers), InitContainers: compactContainers(p.Spec.InitContainers),
	}
	if r := p.Spec.Resources; r != nil && len(r.Requests) > 0 {
		out.Spec.Resources = &corev1.ResourceRequirements{Requests: r.Requests}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
	}
	out.Status.Phase = p.Status.Phase
	compactResize(p, out)
	return out
}

// compactContainers keeps each container's name, requests and restart
// policy (an init container that keeps running is a sidecar, counted with
// the containers).
func compactContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests}, RestartPolicy: c.RestartPolicy}
	}
	return out
}

// compactResize copies into out what PodRequest reads of p's status for an
// in-place resize: the containers' allocated and applied requests and the
// PodResizePending condition. Most pods are not being resized, and their
// statuses say what their specs ask; then nothing is kept, since the
// request is the spec's either way. Kept whole (every container's) once
// one differs or the resize is infeasible: a container without a status
// then counts for nothing.
func compactResize(p, out *corev1.Pod) {
	var cond *corev1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodResizePending {
			cond = &p.Status.Conditions[i] // the first, as PodRequests reads it
			break
		}
	}
	infeasible := cond != nil && cond.Reason == corev1.PodReasonInfeasible
	if !infeasible && !statusDiffers(p.Spec.Containers, p.Status.ContainerStatuses) && !statusDiffers(p.Spec.InitContainers, p.Status.InitContainerStatuses) {
		return
	}
	out.Status.ContainerStatuses = compactStatuses(p.Status.ContainerStatuses)
	out.Status.InitContainerStatuses = compactStatuses(p.Status.InitContainerStatuses)
	if cond != nil {
		out.Status.Conditions = []corev1.PodCondition{{Type: cond.Type, Status: cond.Status, Reason: cond.Reason}}
	}
}

// statusDiffers reports whether a container's allocated or applied
// requests differ from what its spec asks (a missing quantity is zero).
func statusDiffers(specs []corev1.Container, statuses []corev1.ContainerStatus) bool {
	for _, st := range statuses {
		var want corev1.ResourceList
		for _, c := range specs {
			if c.Name == st.Name {
				want = c.Resources.Requests
				break
			}
		}
		if st.AllocatedResources != nil && !sameQuantities(st.AllocatedResources, want) {
			return true
		}
		if st.Resources != nil && st.Resources.Requests != nil && !sameQuantities(st.Resources.Requests, want) {
			return true
		}
	}
	return false
}

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

// compactStatuses keeps each status's name, allocated and applied requests.
func compactStatuses(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(ss) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, st := range ss {
		out[i] = corev1.ContainerStatus{Name: st.Name, AllocatedResources: st.AllocatedResources}
		if st.Resources != nil && st.Resources.Requests != nil {
			out[i].Resources = &corev1.ResourceRequirements{Requests: st.Resources.Requests}
		}
	}
	return out
}

// stripManagedFields drops what the scheduler never reads before an object
// is stored: managed fields are often the largest part of an object, and
// every event of every pod is decoded and kept.
func stripManagedFields(o any) (any, error) {
	if m, ok := o.(interface {
		SetManagedFields([]metav1.ManagedFieldsEntry)
	}); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}
