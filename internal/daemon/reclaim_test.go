package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/wire"
)

// Quota taken back on the real API server: borrowed quota reclaimed by the
// queue that lent it, a queue that is not reclaimable and a guarantee left
// alone, and a gang of lower priority preempted whole. Every assertion is
// computed from the pods the API server holds; the quota rule is checked
// at every pod event (lcWatchUsage), evicted pods counting until gone.

// rcQueue creates a Queue under parent with a cpu capability (when cap is
// not ""), a deserved and a guarantee cpu (when not ""), reclaimable or not.
func (ev *env) rcQueue(name, parent, capCPU, deserved, guarantee string, reclaimable bool) {
	ev.t.Helper()
	spec := schedv1beta1.QueueSpec{Weight: 1, Parent: parent, Reclaimable: &reclaimable}
	if capCPU != "" {
		spec.Capability = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(capCPU)}
	}
	if deserved != "" {
		spec.Deserved = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(deserved)}
	}
	if guarantee != "" {
		spec.Guarantee.Resource = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(guarantee)}
	}
	q := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if _, err := ev.vc.SchedulingV1beta1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
	ev.t.Cleanup(func() {
		_ = ev.vc.SchedulingV1beta1().Queues().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// rcDeployment creates a Deployment of n pods of cpu each in queue (an
// elastic job: one implicit PodGroup of minMember 1).
func (ev *env) rcDeployment(name, queue string, n int32, cpu string) {
	ev.t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: lcTemplate(labels, queue, cpu, corev1.RestartPolicyAlways)},
	}
	if _, err := ev.cs.AppsV1().Deployments(ev.ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
}

// rcPriorityClasses creates PriorityClasses (deleted when the test ends).
func (ev *env) rcPriorityClasses(classes map[string]int32) {
	ev.t.Helper()
	for name, v := range classes {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := ev.cs.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
			ev.t.Fatal(err)
		}
		ev.t.Cleanup(func() {
			_ = ev.cs.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
}

// rcBound counts the bound pods among PREFIX0-0 .. PREFIX(n-1)-0 (one-pod
// jobs).
func (ev *env) rcBound(prefix string, n int) int {
	bound := 0
	for i := 0; i < n; i++ {
		if ev.nodeOf(fmt.Sprintf("%s%d-0", prefix, i)) != "" {
			bound++
		}
	}
	return bound
}

// rcEvents are the events of the test's namespace with reason.
func (ev *env) rcEvents(reason string) []corev1.Event {
	list, err := ev.cs.CoreV1().Events(ev.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// twoShards starts two shard processes on one etcd, waits until they
// share the partitions, and returns them with their stop functions.
func (ev *env) twoShards() ([]*Daemon, []func()) {
	ev.t.Helper()
	e := testenv.NewEtcd(ev.t)
	d0, _, stop0 := runDaemon(ev.t, ev.cfg, "shard-0", e.Endpoints, nil)
	d1, _, stop1 := runDaemon(ev.t, ev.cfg, "shard-1", e.Endpoints, []string{d0.Shard.GossipAddr()})
	ev.d = d0
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		return len(d0.Shard.Owned()) > 0 && len(d1.Shard.Owned()) > 0 && len(d0.Shard.Owned())+len(d1.Shard.Owned()) >= 64
	}, "both shards hold partitions")
	return []*Daemon{d0, d1}, []func(){stop0, stop1}
}

// rcBorrowed sets up the case under queue names prefix-p (capped
// at 8 CPU), prefix-a and prefix-b (each deserving 4) on two 8-CPU nodes:
// B (a Deployment of 8 × 1 CPU, app=borrower) borrows all 8 while A is
// idle. The returned watch checks the quota rule at every pod event.
func (ev *env) rcBorrowed(prefix string) *lcUsage {
	ev.t.Helper()
	ev.nodes(prefix+"-node", 2, "8", "32Gi")
	ev.rcQueue(prefix+"-p", "root", "8", "", "", true)
	ev.rcQueue(prefix+"-a", prefix+"-p", "", "4", "", true)
	ev.rcQueue(prefix+"-b", prefix+"-p", "", "4", "", true)
	usage := ev.lcWatchUsage()
	ev.rcDeployment("borrower", prefix+"-b", 8, "1")
	ev.lcEventually("B borrows all 8 CPU", 60*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=borrower")
		return err == nil && p.bound == 8, fmt.Sprintf("%+v %v", p, err)
	})
	return usage
}

// rcFourJobs submits four one-pod jobs of 1 CPU, a0..a3, in queue.
func (ev *env) rcFourJobs(queue string) {
	ev.t.Helper()
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("a%d", i)
		ev.lcPodGroup(name, queue, 1, "")
		ev.pod(name+"-0", name, "1", "1Gi", nil)
	}
}

// The case: a parent capped at 8 CPU with two reclaimable children
// that each deserve 4; B (a Deployment of 8 × 1 CPU, an elastic job)
// borrows all 8 while A is idle; A then submits four 1-CPU jobs. A's jobs
// are bound within 30 s, B keeps 4, and the quota rule holds at every pod
// event. Two shard processes: the victim's queue owner may be either.
func TestReclaimBorrowedQuotaGivenBack(t *testing.T) {
	ev := newNamespace(t)
	ds, _ := ev.twoShards()
	ctx := context.Background()
	usage := ev.rcBorrowed("rc")
	defer usage.check(t, 8000) // every pod of the namespace is under rc-p
	start := time.Now()
	ev.rcFourJobs("rc-a")
	ev.lcEventually("A's four jobs are bound", 30*time.Second, func() (bool, string) {
		n := ev.rcBound("a", 4)
		pg, _ := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "a0", metav1.GetOptions{})
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		list, _ := ds[0].Quota.List(lctx)
		return n == 4, fmt.Sprintf("%d of A's pods bound; a0: %+v; reservations %+v; specs %+v", n, pg.Status, list.Reservations, list.Specs)
	})
	t.Logf("A's 4 CPU back after %s", time.Since(start).Round(time.Millisecond))
	p, err := ev.lcList("app=borrower")
	if err != nil {
		t.Fatal(err)
	}
	if p.bound != 4 {
		t.Errorf("B holds %d pods after the reclaim, want its deserved 4", p.bound)
	}
	// B's controller made new pods for the evicted ones: they wait (B is
	// at its share, so it takes nothing back from A), and nothing loops.
	ev.lcHold("B stays at 4 and A at 4", 3*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=borrower")
		n := ev.rcBound("a", 4)
		return err == nil && p.bound == 4 && n == 4, fmt.Sprintf("B %+v, A %d", p, n)
	})
	// Visible to users: Preempted events on the evicted pods naming the
	// job that took the quota, and the evictions counted by reason.
	evs := ev.rcEvents("Preempted")
	named := 0
	for _, e := range evs {
		if e.InvolvedObject.Kind == "Pod" && strings.Contains(e.Message, "rc-a") && strings.Contains(e.Message, "reclaimed by job") {
			named++
		}
	}
	if named < 4 {
		t.Errorf("%d Preempted events on pods naming queue rc-a, want ≥ 4: %v", named, evs)
	}
	var evicted float64
	for _, d := range ds {
		evicted += scrapeAt(t, d.HTTPAddr())[`shardsched_evictions_total{reason="reclaim"}`]
	}
	if evicted < 4 {
		t.Errorf("shardsched_evictions_total{reason=\"reclaim\"} = %v over both shards, want ≥ 4", evicted)
	}
	_ = ctx
}

// A queue that is not reclaimable keeps what it borrowed, and a guarantee
// is kept for its queue while the queue is idle.
func TestReclaimLeavesNonReclaimableAndGuarantee(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("rc-nr-node", 2, "8", "32Gi")
	ev.rcQueue("rc-nr-p", "root", "8", "", "", true)
	ev.rcQueue("rc-nr-a", "rc-nr-p", "", "4", "", true)
	ev.rcQueue("rc-nr-b", "rc-nr-p", "", "2", "", false)
	ev.rcQueue("rc-nr-g", "rc-nr-p", "", "2", "2", true)
	usage := ev.lcWatchUsage()
	defer usage.check(t, 8000)
	// B asks for 8: 2 stay held for g's guarantee, though g is idle.
	ev.rcDeployment("keeper", "rc-nr-b", 8, "1")
	ev.lcEventually("B borrows all but g's guarantee", 60*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=keeper")
		return err == nil && p.bound == 6, fmt.Sprintf("%+v %v", p, err)
	})
	ev.lcHold("g's guarantee stays free", 2*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=keeper")
		return err == nil && p.bound == 6, fmt.Sprintf("%+v %v", p, err)
	})
	// A, below its share, asks: B is not reclaimable, so A waits and B
	// keeps its 6.
	ev.lcPodGroup("wants", "rc-nr-a", 1, "")
	ev.pod("wants-0", "wants", "1", "1Gi", nil)
	ev.lcHold("B keeps what it borrowed", 5*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=keeper")
		return err == nil && p.bound == 6 && ev.nodeOf("wants-0") == "", fmt.Sprintf("%+v %v; wants-0 on %q", p, err, ev.nodeOf("wants-0"))
	})
	// g's jobs get their guarantee at once.
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("g%d", i)
		ev.lcPodGroup(name, "rc-nr-g", 1, "")
		ev.pod(name+"-0", name, "1", "1Gi", nil)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("g0-0") != "" && ev.nodeOf("g1-0") != "" }, "g's two jobs are bound")
	if p, _ := ev.lcList("app=keeper"); p.bound != 6 {
		t.Errorf("B holds %d pods, want 6 (nothing taken from a queue that is not reclaimable)", p.bound)
	}
}

// Within a queue at its limit, a gang of higher priority (PriorityClass
// on the PodGroup) preempts a gang of lower priority; the victim has no
// pods beyond its gang, so it is evicted whole, never left half-running.
func TestPreemptLowerPriorityGangWhole(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("rc-pr-node", 1, "8", "32Gi")
	ev.rcPriorityClasses(map[string]int32{"rc-low": 10, "rc-high": 1000})
	ev.lcQueue("rc-pr-q", "root", "4")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 4000)
	gang := func(name, class string, n int) {
		pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns},
			Spec: schedv1beta1.PodGroupSpec{MinMember: int32(n), Queue: "rc-pr-q", PriorityClassName: class}}
		if _, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			ev.pod(fmt.Sprintf("%s-%d", name, i), name, "1", "1Gi", nil)
		}
	}
	gang("low", "rc-low", 3)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("low", 3) == 3 }, "the low gang is bound")
	gang("high", "rc-high", 2)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("high", 2) == 2 }, "the high gang is bound")
	// Whole: every pod of the low gang is gone (none left running alone).
	ev.lcEventually("the low gang is evicted whole", 30*time.Second, func() (bool, string) {
		list, err := ev.cs.CoreV1().Pods(ev.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "low-") {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d low pods left", left)
	})
	found := false
	for _, e := range ev.rcEvents("Preempted") {
		if strings.Contains(e.Message, "preempted by job") && strings.Contains(e.Message, "/high") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Preempted event naming the high job: %v", ev.rcEvents("Preempted"))
	}
}

// A shard killed in the middle of a plan: the borrow-then-reclaim case
// with two shard processes, and the shard that owns the lending queue's
// victims (rc-k-b) stopped as soon as A's first job waits for its victims.
// The other shard takes its queues and finishes the plan (or, if the dead
// shard had asked for it, the plan is undone with its lease and asked for
// again): A's four jobs are bound, B ends at its deserved 4, and the quota
// rule holds at every pod event throughout.
func TestReclaimShardKilledMidPlan(t *testing.T) {
	ev := newNamespace(t)
	ctx := context.Background()
	ds, stops := ev.twoShards()
	usage := ev.rcBorrowed("rc-k")
	defer usage.check(t, 8000)
	ev.rcFourJobs("rc-k-a")
	ev.lcEventually("an A job waits for its victims", 30*time.Second, func() (bool, string) {
		for i := 0; i < 4; i++ {
			pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, fmt.Sprintf("a%d", i), metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, c := range pg.Status.Conditions {
				if c.Reason == "Reclaiming" {
					return true, ""
				}
			}
		}
		return false, "no Reclaiming condition yet"
	})
	victimOwner := 1
	if ds[0].Shard.Holds(wire.QueueKey("rc-k-b")) {
		victimOwner = 0
	}
	stops[victimOwner]()
	t.Logf("stopped shard-%d, the owner of rc-k-b, mid-plan", victimOwner)
	ev.lcEventually("A's four jobs are bound", 90*time.Second, func() (bool, string) {
		n := ev.rcBound("a", 4)
		return n == 4, fmt.Sprintf("%d of A's pods bound", n)
	})
	ev.lcEventually("B is back to its deserved 4", 30*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=borrower")
		return err == nil && p.bound == 4, fmt.Sprintf("%+v %v", p, err)
	})
	ev.lcHold("A keeps 4 and B 4", 3*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=borrower")
		n := ev.rcBound("a", 4)
		return err == nil && p.bound == 4 && n == 4, fmt.Sprintf("B %+v, A %d", p, n)
	})
}

// Node-level room: a gang admitted within its quota (the queue has room)
// that cannot be placed because a Deployment of lower priority fills the
// only node evicts just enough of its pods, and is bound.
func TestNodePreemptionMakesRoom(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("rc-n-node", 1, "4", "32Gi")
	ev.rcPriorityClasses(map[string]int32{"rc-n-low": 10, "rc-n-high": 1000})
	ev.lcQueue("rc-n-q", "root", "100")
	labels := map[string]string{"app": "filler"}
	four := int32(4)
	tmpl := lcTemplate(labels, "rc-n-q", "1", corev1.RestartPolicyAlways)
	tmpl.Spec.PriorityClassName = "rc-n-low"
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: ev.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &four, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
	if _, err := ev.cs.AppsV1().Deployments(ev.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.lcEventually("the filler takes the node", 60*time.Second, func() (bool, string) {
		p, err := ev.lcList("app=filler")
		return err == nil && p.bound == 4, fmt.Sprintf("%+v %v", p, err)
	})
	pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "urgent", Namespace: ev.ns},
		Spec: schedv1beta1.PodGroupSpec{MinMember: 2, Queue: "rc-n-q", PriorityClassName: "rc-n-high"}}
	if _, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.pod("urgent-0", "urgent", "1", "1Gi", nil)
	ev.pod("urgent-1", "urgent", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 60*time.Second, func() bool { return ev.boundCount("urgent", 2) == 2 }, "the urgent gang is bound")
	p, err := ev.lcList("app=filler")
	if err != nil {
		t.Fatal(err)
	}
	if p.bound != 2 {
		t.Errorf("the filler holds %d pods, want 2 (only what the gang needed evicted)", p.bound)
	}
	found := false
	for _, e := range ev.rcEvents("Preempted") {
		if e.InvolvedObject.Kind == "Pod" && strings.Contains(e.Message, "/urgent") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Preempted event naming the urgent job")
	}
}
