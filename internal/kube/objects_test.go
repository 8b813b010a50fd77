package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

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

// Volcano's per-task gang fields reach the core: the pod's task-spec
// annotation and the PodGroup's minTaskMember (zero entries dropped,
// negative ones refused).
func TestTaskSpecAndMinTaskMember(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u",
		Annotations: map[string]string{TaskSpecAnnotation: "worker", GroupNameAnnotation: "pg"}}}
	task, err := TaskFromPod(p)
	if err != nil || task.TaskSpec != "worker" {
		t.Fatalf("task %+v err %v, want task spec worker", task, err)
	}
	pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "g"},
		Spec: schedv1beta1.PodGroupSpec{MinMember: 3, MinTaskMember: map[string]int32{"master": 1, "worker": 2, "idle": 0}}}
	j, err := JobFromPodGroup(pg)
	if err != nil || len(j.MinTaskMember) != 2 || j.MinTaskMember["master"] != 1 || j.MinTaskMember["worker"] != 2 {
		t.Fatalf("job %+v err %v, want minTaskMember master 1 worker 2", j.MinTaskMember, err)
	}
	pg.Spec.MinTaskMember["worker"] = -1
	if _, err := JobFromPodGroup(pg); err == nil || !strings.Contains(err.Error(), "worker") {
		t.Fatalf("negative minTaskMember: err %v, want one naming the task", err)
	}
}
