package daemon

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/shardsched/shardsched/internal/testenv"
)

// A pod's native sidecar (an init container with restartPolicy Always)
// runs beside its containers, so it takes room on the node as kube-scheduler
// and the kubelet count it; and an in-place resize (the pods/resize
// subresource) changes what a bound pod takes once the kubelet applies it.
// On the real API server: a node of 4 CPU holds a pod of 2 CPU with a
// 1-CPU sidecar, so a pod of 1.5 CPU does not fit beside it; the first
// pod's container resized down to 1 CPU still holds 2 until its status
// says the kubelet applied the change, and then the second pod fits.
func TestSidecarAndInPlaceResizeTakeRoom(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("sidecar", 1, "4", "16Gi")
	node := map[string]string{"kubernetes.io/hostname": "sidecar-0"}
	ctx := context.Background()
	always := corev1.ContainerRestartPolicyAlways
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q), corev1.ResourceMemory: resource.MustParse("1Gi")}}
	}
	ev.podGroup("mesh", "default", 1)
	meshed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mesh-0", Namespace: ev.ns, Annotations: map[string]string{"scheduling.k8s.io/group-name": "mesh"}},
		Spec: corev1.PodSpec{
			SchedulerName: schedName, NodeSelector: node,
			InitContainers: []corev1.Container{{Name: "proxy", Image: "busybox", RestartPolicy: &always, Resources: cpu("1")}},
			Containers:     []corev1.Container{{Name: "app", Image: "busybox", Resources: cpu("2")}},
		},
	}
	if _, err := ev.cs.CoreV1().Pods(ev.ns).Create(ctx, meshed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return ev.nodeOf("mesh-0") == "sidecar-0" }, "the pod with a sidecar is bound")
	testenv.Eventually(t, 10*time.Second, func() bool { return ev.reservedCPU(ctx, "mesh") == 3000 }, "the job's reservation holds the sidecar's CPU too (3 CPU)")

	ev.podGroup("late", "default", 1)
	ev.pod("late-0", "late", "1500m", "1Gi", node)
	ev.unboundFor(3*time.Second, "late-0", "a 1.5-CPU pod bound beside 3 CPU of a 4-CPU node")

	// As the kubelet does (kwok does not): the running containers' status
	// says what was allocated and applied, which the API server requires
	// before it takes a resize.
	kubelet := func(app string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := ev.cs.CoreV1().Pods(ev.ns).Get(ctx, "mesh-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
			req := func(q string) *corev1.ResourceRequirements { r := cpu(q); return &r }
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "busybox", Ready: true, State: running,
				AllocatedResources: req(app).Requests, Resources: req(app)}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", Image: "busybox", Ready: true, State: running,
				AllocatedResources: req("1").Requests, Resources: req("1")}}
			_, err = ev.cs.CoreV1().Pods(ev.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("status as the kubelet writes it: %v", err)
		}
	}
	kubelet("2")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := ev.cs.CoreV1().Pods(ev.ns).Get(ctx, "mesh-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Containers[0].Resources = cpu("1")
		_, err = ev.cs.CoreV1().Pods(ev.ns).UpdateResize(ctx, "mesh-0", p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("resize: %v", err)
	}
	// Asked, not yet applied: the container still holds its 2 CPU.
	ev.unboundFor(3*time.Second, "late-0", "the 1.5-CPU pod bound before the resize down was applied")
	kubelet("1")
	testenv.Eventually(t, 30*time.Second, func() bool { return ev.nodeOf("late-0") == "sidecar-0" }, "the 1.5-CPU pod binds once the first is down to 2 CPU")
	testenv.Eventually(t, 10*time.Second, func() bool { return ev.reservedCPU(ctx, "mesh") == 2000 }, "the job's reservation follows its pod down to 2 CPU")
}

// unboundFor fails the test if pod is bound within d (what fails says
// what went wrong and the node).
func (ev *env) unboundFor(d time.Duration, pod, what string) {
	ev.t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n := ev.nodeOf(pod); n != "" {
			ev.t.Fatalf("%s: bound to %s", what, n)
		}
	}
}

// reservedCPU is the milli-CPU of the reservation of the job of this
// test's namespace named job (-1: none).
func (ev *env) reservedCPU(ctx context.Context, job string) int64 {
	res, err := ev.d.Quota.List(ctx)
	if err != nil {
		return -1
	}
	for _, r := range res.Reservations {
		if r.Job.Name == job && r.Job.Namespace == ev.ns {
			return r.Amount.MilliCPU
		}
	}
	return -1
}
