package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		q, err := ev.vc.SchedulingV1beta1().Queues().Get(ctx, "closed-q", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q.Status.State = state
		if _, err := ev.vc.SchedulingV1beta1().Queues().UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
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
