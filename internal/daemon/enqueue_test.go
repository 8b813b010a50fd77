package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Volcano's job controller (and Kubeflow's training-operator with its
// Volcano gang scheduler) creates a PodGroup with minMember and
// minResources, waits until the scheduler moves it to Inqueue, and only
// then creates the pods. This test plays that client against the real API
// server: the group must become Inqueue with no pod in existence, its pods
// then bind together and the group is Running; a group whose minResources
// exceed its queue's capability never becomes Inqueue and says why.
func TestEnqueueHandshakeLikeVolcanosJobController(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("enq-node", 2, "8", "32Gi")
	ev.lcQueue("enq-q", "root", "6")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 6000)

	phase := func(name string) (schedv1beta1.PodGroupPhase, []schedv1beta1.PodGroupCondition) {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", nil
		}
		return pg.Status.Phase, pg.Status.Conditions
	}

	// The controller's side: the PodGroup first, sized by minResources.
	ev.lcPodGroup("vcjob", "enq-q", 3, "3")
	start := time.Now()
	ev.lcEventually("the PodGroup is Inqueue before any pod exists", 30*time.Second, func() (bool, string) {
		p, _ := phase("vcjob")
		return p == schedv1beta1.PodGroupInqueue, fmt.Sprintf("phase %q", p)
	})
	t.Logf("Inqueue %s after the PodGroup was created", time.Since(start).Round(time.Millisecond))
	// Now it creates the pods, one by one.
	for i := 0; i < 3; i++ {
		ev.pod(fmt.Sprintf("vcjob-%d", i), "vcjob", "1", "1Gi", nil)
	}
	ev.lcEventually("the gang's 3 pods are bound", 30*time.Second, func() (bool, string) {
		n := 0
		for i := 0; i < 3; i++ {
			if ev.nodeOf(fmt.Sprintf("vcjob-%d", i)) != "" {
				n++
			}
		}
		return n == 3, fmt.Sprintf("%d of 3 bound", n)
	})
	ev.lcEventually("the PodGroup is Running", 30*time.Second, func() (bool, string) {
		p, _ := phase("vcjob")
		return p == schedv1beta1.PodGroupRunning, fmt.Sprintf("phase %q", p)
	})

	// Too large for its queue even empty: never Inqueue (so such a
	// controller creates no pod), with the reason on the PodGroup.
	ev.lcPodGroup("toobig", "enq-q", 2, "8")
	var msg string
	ev.lcEventually("the oversized PodGroup is Unschedulable, naming the queue", 30*time.Second, func() (bool, string) {
		p, conds := phase("toobig")
		for _, c := range conds {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "enq-q") {
				msg = c.Message
				return p != schedv1beta1.PodGroupInqueue, fmt.Sprintf("phase %q", p)
			}
		}
		return false, fmt.Sprintf("phase %q conditions %+v", p, conds)
	})
	t.Logf("oversized: %s", msg)
	ev.lcHold("the oversized PodGroup stays out of Inqueue", 2*time.Second, func() (bool, string) {
		p, _ := phase("toobig")
		return p != schedv1beta1.PodGroupInqueue, fmt.Sprintf("phase %q", p)
	})
}

// Volcano's queue controller owns Queue.status.state: a Closed (or
// Closing) queue admits no new job, says so on the job, and admits again
// once Open.
func TestClosedQueueAdmitsNothingNew(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("closed-node", 1, "8", "32Gi")
	ev.lcQueue("closed-q", "root", "8")
	setState := func(state schedv1beta1.QueueState) {
		t.Helper()
		// As Volcano's queue controller would; the shards write the
		// status's other fields meanwhile, so a conflict is retried.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			q, err := ev.vc.SchedulingV1beta1().Queues().Get(ctx, "closed-q", metav1.GetOptions{})
			if err != nil {
				return err
			}
			q.Status.State = state
			_, err = ev.vc.SchedulingV1beta1().Queues().UpdateStatus(ctx, q, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setState(schedv1beta1.QueueStateClosed)
	ev.lcPodGroup("late", "closed-q", 1, "")
	ev.pod("late-0", "late", "1", "1Gi", nil)
	ev.lcEventually("the job in the closed queue says why it waits", 30*time.Second, func() (bool, string) {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range pg.Status.Conditions {
			if c.Reason == "QueueClosed" && strings.Contains(c.Message, "closed-q") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", pg.Status)
	})
	ev.lcHold("nothing is bound in the closed queue", 2*time.Second, func() (bool, string) {
		n := ev.nodeOf("late-0")
		return n == "", "late-0 on " + n
	})
	setState(schedv1beta1.QueueStateOpen)
	ev.lcEventually("the job is bound once the queue is open", 30*time.Second, func() (bool, string) {
		return ev.nodeOf("late-0") != "", "unbound"
	})
}

// A PyTorchJob as Kubeflow's training-operator hands it to Volcano's gang
// scheduler: a PodGroup with minMember 3, minTaskMember master 1 and
// worker 2, and minResources; pods annotated with their task. The workers
// come first and there is room for three pods only: the gang placed is
// the master and two workers, never three workers.
func TestPerTaskGangLikeAPyTorchJob(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("torch-node", 1, "3", "32Gi")
	ev.lcQueue("torch-q", "root", "16")
	minRes := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	if _, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(ctx, &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "torch", Namespace: ev.ns},
		Spec: schedv1beta1.PodGroupSpec{MinMember: 3, Queue: "torch-q", MinResources: &minRes,
			MinTaskMember: map[string]int32{"master": 1, "worker": 2}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taskPod := func(name, task string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns, Annotations: map[string]string{
				"scheduling.k8s.io/group-name": "torch", "volcano.sh/task-spec": task}},
			Spec: corev1.PodSpec{SchedulerName: schedName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
		}
		if _, err := ev.cs.CoreV1().Pods(ev.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		taskPod(fmt.Sprintf("torch-worker-%d", i), "worker")
	}
	ev.lcHold("no worker is bound while the master's pod is missing", 2*time.Second, func() (bool, string) {
		n := ev.boundCount("torch-worker", 3)
		return n == 0, fmt.Sprintf("%d workers bound", n)
	})
	taskPod("torch-master-0", "master")
	ev.lcEventually("the master and two workers are bound", 30*time.Second, func() (bool, string) {
		m, w := ev.nodeOf("torch-master-0") != "", ev.boundCount("torch-worker", 3)
		return m && w == 2, fmt.Sprintf("master bound %v, %d workers bound", m, w)
	})
}
