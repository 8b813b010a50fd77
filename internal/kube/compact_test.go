package kube

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fullPod is a pod as the API server sends it from a busy cluster: the
// fields the scheduler reads and the many it does not.
func fullPod(i int) *corev1.Pod {
	prio := int32(100)
	ctl := true
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	var env []corev1.EnvVar
	for k := 0; k < 20; k++ {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", k), Value: "some-configuration-value"})
	}
	c := corev1.Container{Name: "main", Image: "registry.example.com/team/trainer:v1.2.3", Command: []string{"python", "-m", "train"},
		Args: []string{"--epochs=10", "--batch=512"}, Env: env, Resources: corev1.ResourceRequirements{Requests: req, Limits: req},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "token", MountPath: "/var/run/secrets"}},
		Ports:        []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("trainer-%d", i), UID: types.UID(fmt.Sprint("uid-", i)),
			CreationTimestamp: metav1.Now(), ResourceVersion: "12345",
			Labels:          map[string]string{"app": "trainer", "job": "j1"},
			Annotations:     map[string]string{GroupNameAnnotation: "j1", QueueNameAnnotation: "q", lastApplied: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"trainer"},"spec":{"containers":[{"name":"main","image":"registry.example.com/team/trainer:v1.2.3"}]}}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j1", UID: "owner", Controller: &ctl}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c}, InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: req}}},
			NodeName: "node-7", SchedulerName: "volcano", Priority: &prio, PriorityClassName: "high",
			NodeSelector: map[string]string{"pool": "gpu"},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}},
				PodAntiAffinity: &corev1.PodAntiAffinity{}},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Overhead:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.7", PodIP: "10.1.2.3",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true, Image: c.Image, ImageID: "sha256:0123456789abcdef", ContainerID: "containerd://abcdef"}}},
	}
}

// What the scheduler reads of a pod is the same before and after the
// transform; what it does not read is gone.
func TestCompactPodKeepsWhatIsRead(t *testing.T) {
	full := fullPod(1)
	small := compactPod(full.DeepCopy())
	want, err := TaskFromPod(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := TaskFromPod(small)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("task from the compact pod:\n%+v\nfrom the full pod:\n%+v", got, want)
	}
	if ImplicitGroupName(small) != ImplicitGroupName(full) {
		t.Fatal("the implicit group name changed")
	}
	c := small.Spec.Containers[0]
	switch {
	case c.Env != nil || c.Image != "" || c.VolumeMounts != nil || c.Resources.Limits != nil:
		t.Errorf("container keeps unread fields: %+v", c)
	case small.Spec.Volumes != nil || small.Status.Conditions != nil || small.Status.ContainerStatuses != nil || small.Status.PodIP != "":
		t.Error("pod keeps volumes or status beyond its phase")
	case small.ManagedFields != nil:
		t.Error("managed fields kept")
	case small.Annotations[lastApplied] != "" || small.Annotations[GroupNameAnnotation] != "j1":
		t.Errorf("annotations %v: want the group's kept and kubectl's last-applied copy gone", small.Annotations)
	case small.Spec.Affinity.PodAntiAffinity != nil:
		t.Error("pod anti-affinity kept (not read)")
	}
	// Other objects only lose their managed fields.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	o, err := compactCore(n)
	if err != nil || o.(*corev1.Node).ManagedFields != nil || o.(*corev1.Node).Name != "n" {
		t.Fatalf("node through the transform: %+v, %v", o, err)
	}
}

// BenchmarkPodMemory reports the heap a stored pod takes, as decoded and
// after compactPod (bytes/pod).
func BenchmarkPodMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		f    func(*corev1.Pod) *corev1.Pod
	}{
		{"full", func(p *corev1.Pod) *corev1.Pod { return p }},
		{"compact", compactPod},
	} {
		b.Run(c.name, func(b *testing.B) {
			const n = 2000
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				keep := make([]*corev1.Pod, n)
				for i := range keep {
					keep[i] = c.f(fullPod(i))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/pod")
				runtime.KeepAlive(keep)
			}
		})
	}
}
