package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
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

// editPodGroup changes a PodGroup's spec in place; the shards write its
// status meanwhile, so a conflict is read again and retried.
func (ev *env) editPodGroup(name string, change func(*schedv1beta1.PodGroupSpec)) {
	ev.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&pg.Spec)
		_, err = ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Update(context.Background(), pg, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		ev.t.Fatal(err)
	}
}

// The shapes Spark's and KubeRay's operators give their PodGroups, on the
// real API server, in one queue of 10 CPU.
//
// Spark: minMember 1 and minResources = driver + 4 executors (5 CPU); the
// driver is created first, the executors once it runs. The reservation is
// made for minResources, so while only the driver is bound a rival job
// needing 6 CPU cannot take the executors' share; the executors then bind.
//
// Ray: an autoscaled cluster raises minMember and minResources in place
// (2 → 4 pods of 1 CPU): its new pods bind; raised to 8, beyond what the
// queue has left, the new pods wait and what runs keeps running; lowered
// to 2, it takes only what the queue has left (1 CPU: one more pod).
//
// The queue's 10 CPU is checked at every pod event throughout.
func TestSparkAndRayShapedPodGroups(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("shape-node", 2, "16", "64Gi")
	ev.lcQueue("shape-q", "root", "10")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 10000)
	bound := func(prefix string, n int) func() (bool, string) {
		return func() (bool, string) {
			c := ev.boundCount(prefix, n)
			return c == n, fmt.Sprintf("%d of %d %s pods bound", c, n, prefix)
		}
	}
	reason := func(name string) string {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
				return c.Reason + ": " + c.Message
			}
		}
		return ""
	}

	// Spark.
	ev.lcPodGroup("spark", "shape-q", 1, "5")
	ev.pod("spark-driver-0", "spark", "1", "1Gi", nil)
	ev.lcEventually("the Spark driver is bound", 30*time.Second, bound("spark-driver", 1))
	ev.lcPodGroup("rival", "shape-q", 1, "6")
	ev.lcEventually("a rival needing 6 CPU waits for the executors' share, saying why", 30*time.Second, func() (bool, string) {
		r := reason("rival")
		return strings.Contains(r, "shape-q"), "rival: " + r
	})
	for i := 0; i < 4; i++ {
		ev.pod(fmt.Sprintf("spark-exec-%d", i), "spark", "1", "1Gi", nil)
	}
	ev.lcEventually("the 4 executors are bound within the Spark reservation", 30*time.Second, bound("spark-exec", 4))
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "rival", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Ray.
	ev.lcPodGroup("ray", "shape-q", 2, "2")
	for i := 0; i < 2; i++ {
		ev.pod(fmt.Sprintf("ray-%d", i), "ray", "1", "1Gi", nil)
	}
	ev.lcEventually("the Ray head and first worker are bound", 30*time.Second, bound("ray", 2))
	grow := func(min int32, cpu string) {
		ev.editPodGroup("ray", func(s *schedv1beta1.PodGroupSpec) {
			s.MinMember = min
			rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
			s.MinResources = &rl
		})
	}
	grow(4, "4")
	for i := 2; i < 4; i++ {
		ev.pod(fmt.Sprintf("ray-%d", i), "ray", "1", "1Gi", nil)
	}
	ev.lcEventually("raised to 4 in place: 4 Ray pods bound", 30*time.Second, bound("ray", 4))
	grow(8, "8")
	for i := 4; i < 8; i++ {
		ev.pod(fmt.Sprintf("ray-%d", i), "ray", "1", "1Gi", nil)
	}
	ev.lcHold("raised to 8 with 1 CPU left: no new Ray pod bound, none of the 4 lost", 3*time.Second, func() (bool, string) {
		c := ev.boundCount("ray", 8)
		return c == 4, fmt.Sprintf("%d Ray pods bound", c)
	})
	grow(2, "2")
	ev.lcEventually("lowered to 2: one more Ray pod takes the last CPU", 30*time.Second, func() (bool, string) {
		c := ev.boundCount("ray", 8)
		return c == 5, fmt.Sprintf("%d Ray pods bound", c)
	})
	ev.lcHold("and no more", 2*time.Second, func() (bool, string) {
		c := ev.boundCount("ray", 8)
		return c == 5, fmt.Sprintf("%d Ray pods bound", c)
	})
}

// A live PodGroup moved to another queue (spec.queue edited): its
// reservation moves with it, at every level at once, when it fits there;
// until then it stays where it was, what runs keeps running, and the
// PodGroup says it is moving and what it waits for.
func TestPodGroupMovedToAnotherQueue(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("move-node", 1, "8", "32Gi")
	ev.lcQueue("move-a", "root", "4")
	ev.lcQueue("move-b", "root", "3")
	ev.lcPodGroup("fill", "move-b", 1, "")
	ev.pod("fill-0", "fill", "2", "1Gi", nil)
	pg := ev.lcPodGroup("mover", "move-a", 2, "")
	for i := 0; i < 2; i++ {
		ev.pod(fmt.Sprintf("mover-%d", i), "mover", "1", "1Gi", nil)
	}
	ev.lcEventually("both jobs bound", 30*time.Second, func() (bool, string) {
		f, m := ev.boundCount("fill", 1), ev.boundCount("mover", 2)
		return f == 1 && m == 2, fmt.Sprintf("fill %d, mover %d bound", f, m)
	})
	reservedIn := func() string {
		r, ok, err := lcReservation(ev.d, string(pg.UID))
		if err != nil || !ok {
			return fmt.Sprintf("no reservation (%v)", err)
		}
		return r.Queue
	}
	ev.editPodGroup("mover", func(s *schedv1beta1.PodGroupSpec) { s.Queue = "move-b" })
	ev.lcEventually("moved into a queue without room: it says so", 30*time.Second, func() (bool, string) {
		p, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "mover", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Status == corev1.ConditionTrue && strings.Contains(c.Message, `moving from queue "move-a"`) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", p.Status.Conditions)
	})
	if q := reservedIn(); q != "move-a" {
		t.Fatalf("the reservation of a move that does not fit is in %s, want move-a", q)
	}
	if n := ev.boundCount("mover", 2); n != 2 {
		t.Fatalf("%d of the moving job's pods still bound, want 2", n)
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "fill", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, "fill-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.lcEventually("room in move-b: the reservation moves there", 60*time.Second, func() (bool, string) {
		q := reservedIn()
		return q == "move-b", "reserved in " + q
	})
	ev.lcEventually("the moved job is Running, its waiting reason gone", 30*time.Second, func() (bool, string) {
		p, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "mover", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
				return false, fmt.Sprintf("phase %q, %s: %s", p.Status.Phase, c.Reason, c.Message)
			}
		}
		return p.Status.Phase == schedv1beta1.PodGroupRunning, fmt.Sprintf("phase %q", p.Status.Phase)
	})
}

// Beside Volcano's podgroup controller with the default
// --implicit-podgroups: a plain pod gets one PodGroup, not two, whoever
// makes it first. The controller's part is played as it does it: it
// creates podgroup-<owner UID> (the pod's UID for a bare pod) and writes
// the name into the pod's group annotation.
func TestImplicitPodGroupSharedWithVolcanosController(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("share-node", 1, "8", "32Gi")
	ev.lcQueue("share-q", "root", "8")
	// Every PodGroup ever created in the namespace, even one deleted soon
	// after.
	w, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	made := map[string]bool{}
	go func() {
		for e := range w.ResultChan() {
			if pg, ok := e.Object.(*schedv1beta1.PodGroup); ok && e.Type == watch.Added {
				mu.Lock()
				made[pg.Name] = true
				mu.Unlock()
			}
		}
	}()
	tpl := lcTemplate(nil, "share-q", "1", corev1.RestartPolicyAlways)
	for _, name := range []string{"plain-a", "plain-b"} {
		p := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
		p.Name, p.Namespace = name, ev.ns
		created, err := ev.cs.CoreV1().Pods(ev.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "plain-b" {
			continue // left to the shards alone
		}
		pgName := "podgroup-" + string(created.UID)
		pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: pgName, Namespace: ev.ns},
			Spec: schedv1beta1.PodGroupSpec{MinMember: 1, Queue: "share-q"}}
		if _, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, schedv1beta1.KubeGroupNameAnnotationKey, pgName)
		if _, err := ev.cs.CoreV1().Pods(ev.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	groups := func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(made), strings.Join(slices.Sorted(maps.Keys(made)), ",")
	}
	ev.lcEventually("both pods bound", 30*time.Second, func() (bool, string) {
		a, b := ev.nodeOf("plain-a") != "", ev.nodeOf("plain-b") != ""
		return a && b, fmt.Sprintf("plain-a bound %v, plain-b bound %v", a, b)
	})
	ev.lcHold("one PodGroup per pod was ever made", 3*time.Second, func() (bool, string) {
		n, names := groups()
		return n == 2, fmt.Sprintf("%d PodGroups: %s", n, names)
	})
}
