package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/api"
)

// A pod being deleted is releasing whether or not it was bound: an unbound
// one must never be offered to placement (the API server refuses to bind a
// terminating pod, and a re-created PodGroup would take it as its member).
func TestTaskFromPodDeletingIsReleasing(t *testing.T) {
	now := metav1.Now()
	for _, node := range []string{"", "n1"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", DeletionTimestamp: &now},
			Spec:       corev1.PodSpec{NodeName: node, SchedulerName: "volcano"},
		}
		task, err := TaskFromPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if task.Phase != api.TaskReleasing {
			t.Errorf("deleting pod on node %q: phase %s, want %s", node, task.Phase, api.TaskReleasing)
		}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}, Spec: corev1.PodSpec{SchedulerName: "volcano"}}
	if task, _ := TaskFromPod(p); task.Phase != api.TaskPending {
		t.Errorf("unbound pod: phase %s, want %s", task.Phase, api.TaskPending)
	}
}
