package daemon

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/wire"
)

// Job lifecycle on the real API server: elastic jobs growing past their
// gang, Jobs whose pods finish, reservations leaked while no shard ran,
// jobs that can never fit, and a Queue's status across an owner change.
// Every assertion is computed from what the API server holds (pods bound,
// Job and Queue status), never from the scheduler's own books; the
// coordinator's list is read only to see a reservation leak and go.

// ---- helpers ----

// lcDaemon starts a shard process and returns it with its stop function
// (runDaemon).
func lcDaemon(t *testing.T, cfg *rest.Config, name string, endpoints, join []string, tune ...func(*Options)) (*Daemon, func()) {
	t.Helper()
	d, _, stop := runDaemon(t, cfg, name, endpoints, join, tune...)
	return d, stop
}

// lcPodCPU is the cpu a pod requests, in millicores (containers summed).
func lcPodCPU(p *corev1.Pod) int64 {
	var sum int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
			sum += q.MilliValue()
		}
	}
	return sum
}

// lcOccupies reports whether a pod counts against its queue: bound and not
// finished (a terminating pod still bound counts until it is gone).
func lcOccupies(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// lcPods are the pods of the test's namespace whose labels match selector
// ("" for all), as the API server has them now.
type lcPods struct {
	live, bound, pending int // live: not being deleted
	boundCPU             int64
	boundNames           []string
}

func (ev *env) lcList(selector string) (lcPods, error) {
	list, err := ev.cs.CoreV1().Pods(ev.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return lcPods{}, err
	}
	var out lcPods
	for i := range list.Items {
		p := &list.Items[i]
		if lcOccupies(p) {
			out.bound++
			out.boundCPU += lcPodCPU(p)
			out.boundNames = append(out.boundNames, p.Name)
		}
		if p.DeletionTimestamp != nil {
			continue
		}
		out.live++
		if p.Spec.NodeName == "" {
			out.pending++
		}
	}
	sort.Strings(out.boundNames)
	return out, nil
}

// lcUsage follows every pod event of a namespace and keeps the highest cpu
// its bound, unfinished pods ever held at once (the state after each event,
// in the API server's order): the quota rule checked at every change, not
// only at the polls.
type lcUsage struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	max     int64
	maxPods []string
	events  int
	err     error
}

func (ev *env) lcWatchUsage() *lcUsage {
	ev.t.Helper()
	u := &lcUsage{pods: map[string]*corev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pods := ev.cs.CoreV1().Pods(ev.ns)
	list := func() (string, error) {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		u.mu.Lock()
		clear(u.pods)
		for i := range l.Items {
			u.pods[string(l.Items[i].UID)] = &l.Items[i]
		}
		u.note()
		u.mu.Unlock()
		return l.ResourceVersion, nil
	}
	rv, err := list()
	if err != nil {
		cancel()
		ev.t.Fatal(err)
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err == nil {
				rv = u.follow(w, rv)
				w.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			// The watch ended or expired: start again from a fresh list.
			time.Sleep(100 * time.Millisecond)
			if nrv, err := list(); err == nil {
				rv = nrv
			}
		}
	}()
	ev.t.Cleanup(func() {
		cancel()
		<-done
	})
	return u
}

// follow applies a watch's events until it ends and returns the last
// resourceVersion seen.
func (u *lcUsage) follow(w watch.Interface, rv string) string {
	for e := range w.ResultChan() {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			if st, ok := e.Object.(*metav1.Status); ok && st.Code == 410 {
				return rv // expired: relist
			}
			continue
		}
		rv = p.ResourceVersion
		if e.Type == watch.Bookmark {
			continue
		}
		u.mu.Lock()
		if e.Type == watch.Deleted {
			delete(u.pods, string(p.UID))
		} else {
			u.pods[string(p.UID)] = p
		}
		u.note()
		u.mu.Unlock()
	}
	return rv
}

// note records the current cpu if it is the highest yet. u.mu is held.
func (u *lcUsage) note() {
	u.events++
	var sum int64
	var names []string
	for _, p := range u.pods {
		if lcOccupies(p) {
			sum += lcPodCPU(p)
			names = append(names, p.Name+"@"+p.Spec.NodeName)
		}
	}
	if sum > u.max {
		sort.Strings(names)
		u.max, u.maxPods = sum, names
	}
}

// check fails the test if the bound cpu ever went above limit (millicores).
func (u *lcUsage) check(t *testing.T, limit int64) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.max > limit {
		t.Errorf("quota rule broken: %dm cpu bound at once (limit %dm), pods %v", u.max, limit, u.maxPods)
	}
	t.Logf("usage watch: %d pod states seen, at most %dm cpu bound at once (limit %dm)", u.events, u.max, limit)
}

// lcEventually polls cond until it is true, and fails after timeout with
// the state cond last described.
func (ev *env) lcEventually(what string, timeout time.Duration, cond func() (bool, string)) {
	ev.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			ev.t.Fatalf("timed out after %s waiting until %s; last state: %s", timeout, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lcHold polls cond for d and fails at the first poll where it is false.
func (ev *env) lcHold(what string, d time.Duration, cond func() (bool, string)) {
	ev.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ok, state := cond(); !ok {
			ev.t.Fatalf("not held for %s: %s (%s)", d, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lcQueue creates a Queue capped at cpu (cluster-scoped; deleted at the end).
func (ev *env) lcQueue(name, parent, cpu string) {
	ev.t.Helper()
	ev.queue(name, parent, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)})
}

// lcPodGroup creates a PodGroup with minMember and, if minCPU != "",
// minResources cpu.
func (ev *env) lcPodGroup(name, queue string, minMember int32, minCPU string) *schedv1beta1.PodGroup {
	ev.t.Helper()
	pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns},
		Spec: schedv1beta1.PodGroupSpec{MinMember: minMember, Queue: queue}}
	if minCPU != "" {
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(minCPU)}
		pg.Spec.MinResources = &rl
	}
	out, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(context.Background(), pg, metav1.CreateOptions{})
	if err != nil {
		ev.t.Fatal(err)
	}
	return out
}

// lcTemplate is a pod template of one container asking cpu, for the test
// scheduler, naming queue through the Volcano annotation.
func lcTemplate(labels map[string]string, queue, cpu string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	zero := int64(0)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{kube.QueueNameAnnotation: queue}},
		Spec: corev1.PodSpec{SchedulerName: schedName, TerminationGracePeriodSeconds: &zero, RestartPolicy: restart,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
	}
}

// lcReservation returns the coordinator's reservation of a job, if any.
func lcReservation(d *Daemon, uid string) (coordinator.Reservation, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := d.Quota.List(ctx)
	if err != nil {
		return coordinator.Reservation{}, false, err
	}
	for _, r := range res.Reservations {
		if r.Job.UID == uid {
			return r, true, nil
		}
	}
	return coordinator.Reservation{}, false, nil
}

// ---- 1. elastic jobs beyond their gang ----

// A Deployment of 6 × 1 CPU pods (no PodGroup: an implicit one per
// ReplicaSet, minMember 1) in a queue capped at 3 CPU: exactly 3 pods are
// bound and stay so while 3 stay Pending; deleting 2 bound pods lets 2
// others take the freed quota; scaled to 2 and back to 5, 3 are bound
// again. At no pod event do the bound pods ask for more than 3 CPU.
func TestLifecycleElasticDeploymentCappedByQueue(t *testing.T) {
	start := time.Now()
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("lc-el-node", 2, "8", "32Gi")
	ev.lcQueue("lc-elastic", "root", "3")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 3000) // also when a step fails
	six := int32(6)
	labels := map[string]string{"app": "lc-elastic"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "elastic", Namespace: ev.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &six, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: lcTemplate(labels, "lc-elastic", "1", corev1.RestartPolicyAlways)},
	}
	if _, err := ev.cs.AppsV1().Deployments(ev.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) {
		t.Helper()
		// The Deployment controller writes the object too: a conflict is
		// read again and retried, as kubectl scale does.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := ev.cs.AppsV1().Deployments(ev.ns).GetScale(ctx, "elastic", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Spec.Replicas = n
			_, err = ev.cs.AppsV1().Deployments(ev.ns).UpdateScale(ctx, "elastic", s, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sel := "app=lc-elastic"
	state := func() lcPods {
		p, err := ev.lcList(sel)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ev.lcEventually("3 of the 6 pods are bound and 3 are pending", 45*time.Second, func() (bool, string) {
		p := state()
		return p.live == 6 && p.bound == 3 && p.pending == 3, fmt.Sprintf("%+v", p)
	})
	first := state()
	t.Logf("6 replicas: bound %v after %s", first.boundNames, time.Since(start).Round(time.Millisecond))
	ev.lcHold("exactly 3 bound (3 CPU) and 3 pending", 4*time.Second, func() (bool, string) {
		p := state()
		return p.bound == 3 && p.boundCPU == 3000 && p.pending == 3 && slices.Equal(p.boundNames, first.boundNames), fmt.Sprintf("%+v", p)
	})

	// Two bound pods go: the quota they held is taken by two others.
	zero := int64(0)
	gone := first.boundNames[:2]
	for _, n := range gone {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	ev.lcEventually("two other pods take the freed quota", 30*time.Second, func() (bool, string) {
		p := state()
		for _, n := range gone {
			if slices.Contains(p.boundNames, n) {
				return false, fmt.Sprintf("%+v", p)
			}
		}
		return p.live == 6 && p.bound == 3 && p.pending == 3, fmt.Sprintf("%+v", p)
	})
	t.Logf("after deleting %v: bound %v", gone, state().boundNames)

	// Down to 2, then up to 5: the third CPU freed by the scale-down is used
	// again, and no more.
	scale(2)
	ev.lcEventually("scaled to 2: both bound, none pending", 30*time.Second, func() (bool, string) {
		p := state()
		return p.live == 2 && p.bound == 2 && p.pending == 0, fmt.Sprintf("%+v", p)
	})
	scale(5)
	ev.lcEventually("scaled to 5: 3 bound, 2 pending", 30*time.Second, func() (bool, string) {
		p := state()
		return p.live == 5 && p.bound == 3 && p.pending == 2, fmt.Sprintf("%+v", p)
	})
	ev.lcHold("3 bound and 2 pending after scaling to 5", 3*time.Second, func() (bool, string) {
		p := state()
		return p.bound == 3 && p.pending == 2, fmt.Sprintf("%+v", p)
	})
	t.Logf("whole scenario: %s", time.Since(start).Round(time.Millisecond))
}

// A Volcano PodGroup with minMember 1 and minResources of 1m CPU, with 6
// pods of 1 CPU in a queue capped at 3 CPU: admission reserves little, but
// the job grows only as far as the queue allows: 3 pods bound, never more.
func TestLifecycleElasticPodGroupCappedByQueue(t *testing.T) {
	start := time.Now()
	ev := newEnv(t)
	ev.nodes("lc-epg-node", 2, "8", "32Gi")
	ev.lcQueue("lc-elastic-pg", "root", "3")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 3000) // also when a step fails
	ev.lcPodGroup("elastic", "lc-elastic-pg", 1, "1m")
	for i := 0; i < 6; i++ {
		ev.pod(fmt.Sprintf("elastic-%d", i), "elastic", "1", "1Gi", nil)
	}
	state := func() lcPods {
		p, err := ev.lcList("")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ev.lcEventually("3 of the 6 pods are bound", 45*time.Second, func() (bool, string) {
		p := state()
		return p.bound == 3 && p.pending == 3, fmt.Sprintf("%+v", p)
	})
	t.Logf("bound %v after %s", state().boundNames, time.Since(start).Round(time.Millisecond))
	ev.lcHold("exactly 3 bound and 3 pending", 4*time.Second, func() (bool, string) {
		p := state()
		return p.bound == 3 && p.boundCPU == 3000 && p.pending == 3, fmt.Sprintf("%+v", p)
	})
}

// ---- 2. a batch Job whose pods finish ----

// A batch/v1 Job (parallelism 5, completions 10, 1 CPU pods; kwok completes
// pods owned by a Job) in a queue capped at 5 CPU: it reaches 10
// completions (pods that finish give their quota to the next ones; a group
// Completed between waves is admitted again), never with more than 5 CPU
// bound at once; once it ended, a job asking for the queue's whole 5 CPU is
// bound, and the Queue's status shows nothing allocated.
func TestLifecycleBatchJobCompletes(t *testing.T) {
	start := time.Now()
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("lc-job-node", 2, "8", "32Gi")
	ev.lcQueue("lc-batch", "root", "5")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 5000) // also when a step fails
	par, comp := int32(5), int32(10)
	labels := map[string]string{"app": "lc-batch"}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ev.ns},
		Spec: batchv1.JobSpec{Parallelism: &par, Completions: &comp,
			Template: lcTemplate(labels, "lc-batch", "1", corev1.RestartPolicyNever)},
	}
	if _, err := ev.cs.BatchV1().Jobs(ev.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	last := ""
	deadline := time.Now().Add(90 * time.Second)
	for {
		j, err := ev.cs.BatchV1().Jobs(ev.ns).Get(ctx, "batch", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ev.lcList("app=lc-batch")
		if err != nil {
			t.Fatal(err)
		}
		last = fmt.Sprintf("succeeded %d active %d failed %d; pods %+v", j.Status.Succeeded, j.Status.Active, j.Status.Failed, p)
		if j.Status.Succeeded >= comp {
			if j.Status.Succeeded != comp || j.Status.Failed != 0 {
				t.Fatalf("job ended with %s", last)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job did not reach %d completions in 90s: %s", comp, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("Job complete after %s: %s", time.Since(start).Round(time.Millisecond), last)
	// The finished Job holds none of the queue: a job asking for all of it
	// is bound.
	ev.lcPodGroup("after", "lc-batch", 1, "")
	ev.pod("after-0", "after", "5", "1Gi", nil)
	ev.lcEventually("a 5 CPU job in the queue is bound after the Job ended", 30*time.Second, func() (bool, string) {
		n := ev.nodeOf("after-0")
		return n != "", fmt.Sprintf("after-0 on %q", n)
	})
	zero := int64(0)
	if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, "after-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing of the queue is bound any more: its status says so.
	t.Run("QueueStatusEmptied", func(t *testing.T) {
		var qst schedv1beta1.QueueStatus
		deadline := time.Now().Add(20 * time.Second)
		for {
			q, err := ev.vc.SchedulingV1beta1().Queues().Get(ctx, "lc-batch", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			qst = q.Status
			cpu := qst.Allocated[corev1.ResourceCPU]
			if cpu.IsZero() && qst.Running == 0 && qst.Pending == 0 && qst.Inqueue == 0 {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Diagnosis: the status the pods imply, written the way the shards
		// write it.
		werr := kube.NewStatusWriter(ev.vc, "shardsched").WriteQueueStatus(ctx, "lc-batch", api.QueueStatus{})
		msg := fmt.Sprintf("20s after the Job ended (no pod of queue lc-batch bound), its status still says allocated %v running %d pending %d inqueue %d; "+
			"writing the empty status now gives: %v", qst.Allocated, qst.Running, qst.Pending, qst.Inqueue, werr)
		t.Fatal(msg)
	})
}

// ---- 3. a reservation leaked while no shard ran ----

// A gang is admitted and Running (its reservation confirmed), the only
// shard stops, the PodGroup and its pods are deleted while none runs, and
// a shard starts again: its reconciliation releases the reservation with no
// job within 30 s, and a job asking for the queue's whole capability is
// bound (it is not bound while the leaked reservation is held).
func TestLifecycleLeakedReservationReleased(t *testing.T) {
	start := time.Now()
	ev := newNamespace(t)
	ctx := context.Background()
	e := testenv.NewEtcd(t)
	d0, stop0 := lcDaemon(t, ev.cfg, "shard-0", e.Endpoints, nil)
	testenv.Eventually(ev.t, 20*time.Second, func() bool { return len(d0.Shard.Owned()) >= 64 }, "shard-0 holds every partition")
	ev.nodes("lc-leak-node", 2, "8", "32Gi")
	ev.lcQueue("lc-leak", "root", "4")
	pg := ev.lcPodGroup("leak", "lc-leak", 2, "")
	uid := string(pg.UID)
	for i := 0; i < 2; i++ {
		ev.pod(fmt.Sprintf("leak-%d", i), "leak", "2", "1Gi", nil)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("leak", 2) == 2 }, "the gang is bound")
	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		r, ok, err := lcReservation(d0, uid)
		return err == nil && ok && r.State == coordinator.Confirmed && r.Amount.MilliCPU == 4000
	}, "its reservation is confirmed for 4 CPU")
	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "leak", metav1.GetOptions{})
		return err == nil && pg.Status.Phase == schedv1beta1.PodGroupRunning
	}, "the PodGroup is Running")

	// No shard runs while the job goes away.
	stop0()
	zero := int64(0)
	for i := 0; i < 2; i++ {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, fmt.Sprintf("leak-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "leak", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 20*time.Second, func() bool {
		p, err := ev.lcList("")
		_, gerr := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "leak", metav1.GetOptions{})
		return err == nil && p.live == 0 && p.bound == 0 && apierrors.IsNotFound(gerr)
	}, "the job's pods and PodGroup are gone")

	d1, _ := lcDaemon(t, ev.cfg, "shard-1", e.Endpoints, nil)
	restarted := time.Now()
	testenv.Eventually(ev.t, 20*time.Second, func() bool {
		return len(d1.Shard.Owned()) >= 64 && d1.Shard.Holds(wire.QueueKey("lc-leak"))
	}, "shard-1 holds every partition and queue lc-leak")
	// The leak is real: the new coordinator leader rebuilt it from etcd.
	if r, ok, err := lcReservation(d1, uid); err != nil || !ok {
		t.Fatalf("the leaked reservation is not in the ledger after the restart (found %v, err %v): nothing to test", ok, err)
	} else {
		t.Logf("after the restart the ledger still holds %s for the deleted job (%s)", r.Amount.String(), r.State)
	}
	usage := ev.lcWatchUsage()
	defer usage.check(t, 4000) // also when a step fails
	ev.lcPodGroup("full", "lc-leak", 1, "")
	ev.pod("full-0", "full", "4", "1Gi", nil)

	var released, bound time.Duration
	deadline := restarted.Add(30 * time.Second)
	for released == 0 || bound == 0 {
		// The pod first, the ledger second: a pod seen bound and then the
		// reservation seen held were both true at the second look.
		n := ev.nodeOf("full-0")
		_, held, err := lcReservation(d1, uid)
		if err != nil {
			t.Fatal(err)
		}
		if n != "" && bound == 0 {
			bound = time.Since(restarted)
			if held {
				// Then the queue's 4 CPU are reserved twice over.
				t.Fatalf("full-0 bound to %s while the leaked 4 CPU reservation is still held", n)
			}
		}
		if !held && released == 0 {
			released = time.Since(restarted)
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the restart: leaked reservation released after %v (0: not), full-0 bound after %v (0: not)", released, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("leaked reservation released %s and the 4 CPU job bound %s after the restart; whole scenario %s",
		released.Round(time.Millisecond), bound.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if st := d1.sched.Stats(); st.Orphans < 1 {
		t.Errorf("the released reservation is not counted as an orphan: %+v", st)
	}
}

// ---- 4. a job that can never fit ----

// A gang of 2 × 3 CPU in a queue capped at 4 CPU (dequeueStrategy fifo)
// can never be admitted there; it is created first, yet a 1 CPU job behind
// it in the same queue is bound, and the gang's PodGroup says
// Unschedulable, naming the queue and its capability. The gang's pods stay
// unbound.
func TestLifecycleNeverFitDoesNotBlockQueue(t *testing.T) {
	start := time.Now()
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("lc-nf-node", 2, "8", "32Gi")
	// fifo explicitly: the CRD defaults dequeueStrategy to traverse, where
	// later jobs pass a waiting one anyway.
	fifo := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "lc-never"}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: "root",
		DequeueStrategy: schedv1beta1.DequeueStrategyFIFO, Capability: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
	if _, err := ev.vc.SchedulingV1beta1().Queues().Create(ctx, fifo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ev.vc.SchedulingV1beta1().Queues().Delete(context.Background(), "lc-never", metav1.DeleteOptions{})
	})
	usage := ev.lcWatchUsage()
	defer usage.check(t, 4000) // also when a step fails
	big := ev.lcPodGroup("big", "lc-never", 2, "")
	ev.pod("big-0", "big", "3", "1Gi", nil)
	ev.pod("big-1", "big", "3", "1Gi", nil)
	// The small job comes once the scheduler has judged the whole gang (it
	// marks it Unschedulable), so that it comes behind it in the queue.
	ev.lcEventually("the gang is judged", 30*time.Second, func() (bool, string) {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", pg.Status)
	})
	// Pacing, not an assertion: creation timestamps have a resolution of a
	// second, and jobs of one queue go oldest first; the small job must be
	// younger than the gang, not tied with it.
	time.Sleep(time.Until(big.CreationTimestamp.Add(1100 * time.Millisecond)))
	ev.lcPodGroup("small", "lc-never", 1, "")
	ev.pod("small-0", "small", "1", "1Gi", nil)

	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("small-0") != "" }, "the small job behind the gang is bound")
	t.Logf("small-0 bound after %s", time.Since(start).Round(time.Millisecond))
	capRe := regexp.MustCompile(`(^|[^0-9.])4([^0-9.m]|$)`)
	var cond schedv1beta1.PodGroupCondition
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue &&
				strings.Contains(c.Message, "lc-never") && capRe.MatchString(c.Message) {
				cond = c
				return true
			}
		}
		return false
	}, "the gang's PodGroup is Unschedulable naming lc-never and its capability")
	t.Logf("condition: reason %s: %s", cond.Reason, cond.Message)
	if cond.Reason != "QueueCapabilityTooSmall" {
		t.Errorf("condition reason %q, want QueueCapabilityTooSmall", cond.Reason)
	}
	ev.lcHold("the gang stays unbound", 2*time.Second, func() (bool, string) {
		a, b := ev.nodeOf("big-0"), ev.nodeOf("big-1")
		return a == "" && b == "", fmt.Sprintf("big-0 on %q, big-1 on %q", a, b)
	})
}

// ---- 5. one writer of a Queue's status across an owner change ----

// lcQueueTruth computes what a Queue's status should say from the pods and
// PodGroups of the namespace: the cpu of bound unfinished pods, and the
// number of PodGroups with at least minMember of them.
func (ev *env) lcQueueTruth() (cpu int64, running int32, err error) {
	ctx := context.Background()
	pods, err := ev.cs.CoreV1().Pods(ev.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	pgs, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	boundOf := map[string]int32{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if lcOccupies(p) {
			cpu += lcPodCPU(p)
			boundOf[p.Annotations[kube.GroupNameAnnotation]]++
		}
	}
	for _, pg := range pgs.Items {
		if boundOf[pg.Name] >= max(pg.Spec.MinMember, 1) {
			running++
		}
	}
	return cpu, running, nil
}

// Case 7 (two writers of one Queue status across an ownership change).
// Two shards whose status batchers flush only when the test says; the one
// owning queue lc-tw has a value for it pending (never written) when a
// third shard joins whose name wins the queue. The jobs then change; the
// new owner writes what the pods say; then the old owner flushes: its
// stale pending value must not land (the fence drops it), and the Queue's
// status stays what the pods say.
func TestLifecycleQueueStatusAcrossOwnerChange(t *testing.T) {
	start := time.Now()
	ev := newNamespace(t)
	ctx := context.Background()
	e := testenv.NewEtcd(t)
	manual := func(o *Options) { o.Status.Interval, o.Status.MaxPending = time.Hour, 1<<20 }
	d0, _ := lcDaemon(t, ev.cfg, "shard-0", e.Endpoints, nil, manual)
	d1, _ := lcDaemon(t, ev.cfg, "shard-1", e.Endpoints, []string{d0.Shard.GossipAddr()}, manual)
	const q = "lc-tw"
	key := wire.QueueKey(q)
	// The third member's name is chosen so that it owns the queue once it
	// joins.
	oldName, _ := shard.NewRing([]string{"shard-0", "shard-1"}).Owner(key)
	newName := ""
	for i := 2; i < 1000 && newName == ""; i++ {
		n := fmt.Sprintf("shard-%d", i)
		if o, _ := shard.NewRing([]string{"shard-0", "shard-1", n}).Owner(key); o == n {
			newName = n
		}
	}
	if newName == "" {
		t.Fatal("no member name wins the queue")
	}
	oldOwner := map[string]*Daemon{"shard-0": d0, "shard-1": d1}[oldName]
	ev.nodes("lc-tw-node", 2, "8", "32Gi")
	ev.queue(q, "root", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for i := 0; i < 64; i++ {
			k := wire.PartitionKey(i)
			if d0.Shard.Holds(k) == d1.Shard.Holds(k) {
				return false
			}
		}
		return oldOwner.Shard.Holds(key)
	}, "%s holds queue %s and the partitions are split", oldName, q)
	statusIs := func(cpu int64, running int32) (bool, string) {
		qq, err := ev.vc.SchedulingV1beta1().Queues().Get(ctx, q, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := qq.Status.Allocated[corev1.ResourceCPU]
		return got.MilliValue() == cpu && qq.Status.Running == running,
			fmt.Sprintf("status allocated cpu %dm running %d, want %dm and %d", got.MilliValue(), qq.Status.Running, cpu, running)
	}
	flushOld := func() {
		t.Helper()
		if err := oldOwner.Status.Flush(ctx); err != nil {
			t.Logf("old owner's flush: %v", err)
		}
	}
	// tw-0 runs and the old owner writes that.
	ev.lcPodGroup("tw-0", q, 1, "")
	ev.pod("tw-0-0", "tw-0", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("tw-0-0") != "" }, "tw-0 is bound")
	ev.lcEventually("the old owner writes tw-0's queue status", 30*time.Second, func() (bool, string) {
		flushOld()
		return statusIs(1000, 1)
	})
	// tw-1 runs: the old owner has that pending, unwritten, when the queue
	// moves.
	ev.lcPodGroup("tw-1", q, 1, "")
	ev.pod("tw-1-0", "tw-1", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("tw-1-0") != "" }, "tw-1 is bound")
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return oldOwner.Status.Stats().Pending > 0 }, "the old owner has the new status pending")
	// Pacing, not an assertion: queue status is recomputed every 200 ms.
	time.Sleep(time.Second)
	fencedBefore := oldOwner.Status.Stats().Fenced
	t.Logf("old owner %s before the move: %+v", oldName, oldOwner.Status.Stats())

	d2, _ := lcDaemon(t, ev.cfg, newName, e.Endpoints, []string{d0.Shard.GossipAddr()})
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		return d2.Shard.Holds(key) && !oldOwner.Shard.Holds(key)
	}, "queue %s moves from %s to %s", q, oldName, newName)
	moved := time.Now()
	// The jobs change after the move: tw-0 ends, tw-2 (2 CPU) starts.
	zero := int64(0)
	if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, "tw-0-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "tw-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.lcPodGroup("tw-2", q, 1, "")
	ev.pod("tw-2-0", "tw-2", "2", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("tw-2-0") != "" }, "tw-2 is bound")
	var cpu int64
	var running int32
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		c, r, err := ev.lcQueueTruth()
		if err != nil {
			return false
		}
		cpu, running = c, r
		ok, _ := statusIs(c, r)
		return ok
	}, "the Queue's status says what the pods say")
	if cpu != 3000 || running != 2 {
		t.Fatalf("after the change the pods say %dm cpu and %d running jobs, want 3000m and 2", cpu, running)
	}
	t.Logf("status right %s after the move", time.Since(moved).Round(time.Millisecond))
	// The old owner's pending value (2000m, 2 running) would land now.
	flushOld()
	ev.lcHold("the Queue's status stays what the pods say", 3*time.Second, func() (bool, string) {
		return statusIs(cpu, running)
	})
	if n := oldOwner.Status.Stats().Fenced - fencedBefore; n == 0 {
		t.Errorf("the old owner fenced nothing: its pending value for %s was not dropped", q)
	}
	for _, d := range []*Daemon{d0, d1, d2} {
		t.Logf("%s status stats: %+v", d.opts.Name, d.Status.Stats())
	}
	t.Logf("old owner %s fenced %d value(s) after losing the queue; whole scenario %s",
		oldName, oldOwner.Status.Stats().Fenced-fencedBefore, time.Since(start).Round(time.Millisecond))
}
