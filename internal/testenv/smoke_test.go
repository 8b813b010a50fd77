package testenv_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// cp is written once by TestMain before any test runs and only read after.
var cp testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &cp))
}

// TestSmokeBindThroughRealAPIServer creates a Node, a parent and a child
// Queue, a PodGroup and a Pod in that group, binds the pod through the
// pods/binding subresource and reads back its nodeName.
func TestSmokeBindThroughRealAPIServer(t *testing.T) {
	cfg := cp.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)
	vc := volcano.NewForConfigOrDie(cfg)

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != cluster.KubeVersion {
		t.Errorf("server version %q, want %q", v.GitVersion, cluster.KubeVersion)
	}

	fake, err := cluster.FakeNode("smoke-node", "64", "256Gi", nil)
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Create(ctx, fake, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	if got := node.Status.Allocatable.Cpu().String(); got != "64" {
		t.Errorf("node allocatable cpu %q, want 64", got)
	}

	parent := &schedv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-parent"},
		Spec: schedv1beta1.QueueSpec{Weight: 1, Capability: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi")}},
	}
	if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, parent, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create parent queue: %v", err)
	}
	child := &schedv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-child"},
		Spec:       schedv1beta1.QueueSpec{Weight: 1, Parent: "smoke-parent"},
	}
	if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, child, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create child queue: %v", err)
	}
	got, err := vc.SchedulingV1beta1().Queues().Get(ctx, "smoke-child", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Parent != "smoke-parent" {
		t.Errorf("child queue parent %q after round trip, want smoke-parent", got.Spec.Parent)
	}

	ns := "default"
	pg := &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-pg", Namespace: ns},
		Spec:       schedv1beta1.PodGroupSpec{MinMember: 1, Queue: "smoke-child"},
	}
	if _, err := vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create podgroup: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-pod", Namespace: ns,
			Annotations: map[string]string{"scheduling.k8s.io/group-name": "smoke-pg"}},
		Spec: corev1.PodSpec{
			SchedulerName: "shardsched",
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		},
	}
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if created.Spec.NodeName != "" {
		t.Fatalf("pod bound before binding: %q", created.Spec.NodeName)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns, UID: created.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "smoke-node"},
	}
	if err := cs.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	back, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Spec.NodeName != "smoke-node" {
		t.Fatalf("nodeName %q after bind, want smoke-node", back.Spec.NodeName)
	}
	// A second bind of the same pod must be refused by the API server.
	if err := cs.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err == nil {
		t.Fatalf("second bind of a bound pod succeeded")
	}
}

func TestEmbeddedEtcd(t *testing.T) {
	e := testenv.NewEtcd(t)
	if len(e.Endpoints) != 1 {
		t.Fatalf("endpoints %v", e.Endpoints)
	}
}
