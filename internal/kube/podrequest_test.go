package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

func cpuList(cpu string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
}

func container(name, cpu string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: cpuList(cpu)}}
}

func sidecar(name, cpu string) corev1.Container {
	c := container(name, cpu)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// resizeStatus is a container's status as the kubelet writes it during an
// in-place resize: what it allocated and what it applied.
func resizeStatus(name, allocated, applied string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, AllocatedResources: cpuList(allocated),
		Resources: &corev1.ResourceRequirements{Requests: cpuList(applied)}}
}

// requestPods are pods whose request kube-scheduler counts otherwise than
// by summing their containers: sidecars, init containers, pod-level
// requests, overhead and in-place resizes, with the milli-CPU it counts.
func requestPods() []struct {
	name string
	pod  corev1.Pod
	want int64
} {
	pod := func(spec corev1.PodSpec, st corev1.PodStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}, Spec: spec, Status: st}
	}
	infeasible := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{resizeStatus("main", "2", "2"), resizeStatus("log", "1", "1")},
		Conditions: []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible}}}
	return []struct {
		name string
		pod  corev1.Pod
		want int64
	}{
		{"containers summed", pod(corev1.PodSpec{Containers: []corev1.Container{container("a", "1"), container("b", "500m")}}, corev1.PodStatus{}), 1500},
		{"an init container larger than the containers", pod(corev1.PodSpec{Containers: []corev1.Container{container("a", "1")},
			InitContainers: []corev1.Container{container("init", "3")}}, corev1.PodStatus{}), 3000},
		{"a sidecar runs beside the containers", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "2")},
			InitContainers: []corev1.Container{sidecar("proxy", "1")}}, corev1.PodStatus{}), 3000},
		{"an init container after a sidecar runs beside it", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "2")},
			InitContainers: []corev1.Container{sidecar("proxy", "1"), container("migrate", "2500m")}}, corev1.PodStatus{}), 3500},
		{"pod-level requests", pod(corev1.PodSpec{Containers: []corev1.Container{container("a", "1"), container("b", "1")},
			Resources: &corev1.ResourceRequirements{Requests: cpuList("4")}}, corev1.PodStatus{}), 4000},
		{"overhead", pod(corev1.PodSpec{Containers: []corev1.Container{container("a", "1")}, Overhead: cpuList("250m")}, corev1.PodStatus{}), 1250},
		{"a resize up not yet applied counts the new size", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "4")}},
			corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{resizeStatus("main", "2", "2")}}), 4000},
		{"a resize down not yet applied counts the old size", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "1")}},
			corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{resizeStatus("main", "1", "3")}}), 3000},
		{"an infeasible resize counts what runs", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "8"), container("log", "1")}}, infeasible), 3000},
		{"statuses that say what the spec asks", pod(corev1.PodSpec{Containers: []corev1.Container{container("main", "2")}},
			corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{resizeStatus("main", "2", "2")}}), 2000},
	}
}

// PodRequest counts what kube-scheduler counts, and so does the task the
// informers' transform stores (storeTransform).
func TestPodRequestCountsWhatKubeSchedulerCounts(t *testing.T) {
	store := storeTransform(newPodInterner())
	for _, c := range requestPods() {
		got, err := PodRequest(&c.pod)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.MilliCPU != c.want || got.Get("pods") != 1 {
			t.Errorf("%s: %d milli-CPU and %d pods, want %d and 1", c.name, got.MilliCPU, got.Get("pods"), c.want)
		}
		o, _ := store(c.pod.DeepCopy())
		if sp := o.(*storedPod); sp.err != nil || !sp.task().Request.Equal(got) {
			t.Errorf("%s: stored %s (%v), want %s", c.name, sp.task().Request, sp.err, got)
		}
	}
}

// A negative request is an error naming where it is, wherever it is.
func TestPodRequestNamesANegativeQuantity(t *testing.T) {
	base := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", "1")}}}
	for _, c := range []struct {
		want string
		edit func(p *corev1.Pod)
	}{
		{"container main", func(p *corev1.Pod) { p.Spec.Containers[0] = container("main", "-1") }},
		{"init container proxy", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{sidecar("proxy", "-1")} }},
		{"pod-level requests", func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{Requests: cpuList("-2")} }},
		{"overhead", func(p *corev1.Pod) { p.Spec.Overhead = cpuList("-1") }},
		{"container main allocated resources", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", AllocatedResources: cpuList("-1")}}
		}},
	} {
		p := base.DeepCopy()
		c.edit(p)
		_, err := PodRequest(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ns/p") {
			t.Errorf("%s: %v, want an error naming ns/p and %s", c.want, err, c.want)
		}
	}
}

// PodRequest answers what k8s.io/component-helpers answers reading the
// statuses, though it skips them for the pods that carry no resize's.
func TestPodRequestIsComponentHelpersReadingStatuses(t *testing.T) {
	pods := []*corev1.Pod{fullPod(1)}
	for _, c := range requestPods() {
		pods = append(pods, &c.pod)
	}
	// Sub-milli CPU and fractional memory are rounded up once, on the sum.
	odd := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "odd"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500u"), corev1.ResourceMemory: resource.MustParse("100m")}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500u"), corev1.ResourceMemory: resource.MustParse("100m")}}},
	}}}
	pods = append(pods, odd)
	for _, p := range pods {
		want, err := ResourceFromList(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true}))
		if err != nil {
			t.Fatal(err)
		}
		got, err := PodRequest(p)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want.With("pods", 1)) {
			t.Errorf("pod %s (%d init containers, %d statuses): %s, component-helpers %s", p.Name, len(p.Spec.InitContainers), len(p.Status.ContainerStatuses), got, want)
		}
	}
	if got, _ := PodRequest(odd); got.MilliCPU != 3 || got.Memory != 1 {
		t.Errorf("2 × 1500u CPU and 2 × 100m memory: %d milli-CPU and %d bytes, want 3 and 1", got.MilliCPU, got.Memory)
	}
}

// Counting a pod with pod-level requests and an overhead leaves the pod
// as it was, and counts the same every time (PodRequests adds the
// overhead into a quantity it takes from the pod).
func TestPodRequestLeavesThePodAlone(t *testing.T) {
	big := resource.MustParse("1.5Gi")
	big.Add(resource.MustParse("1e-9")) // held as an arbitrary-precision decimal
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{container("a", "1")},
		Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: big}},
		Overhead:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Mi")},
	}}
	before := p.DeepCopy()
	first, err := PodRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if again, err := PodRequest(p); err != nil || !again.Equal(first) {
			t.Fatalf("counted again: %s (%v), first %s", again, err, first)
		}
	}
	if q := p.Spec.Resources.Requests[corev1.ResourceMemory]; q.Cmp(before.Spec.Resources.Requests[corev1.ResourceMemory]) != 0 {
		t.Fatalf("the pod's pod-level memory became %s, was %s", q.String(), big.String())
	}
	if first.MilliCPU != 2250 {
		t.Errorf("%d milli-CPU, want the pod-level 2 CPU and the 250m overhead", first.MilliCPU)
	}
}
