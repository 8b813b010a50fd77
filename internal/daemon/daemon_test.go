package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
)

// cp is set once by TestMain and only read afterwards.
var cp testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Kwok: true, ControllerManager: true}, &cp))
}

const schedName = "shardsched"

type env struct {
	t   *testing.T
	cfg *rest.Config
	cs  kubernetes.Interface
	vc  volcano.Interface
	ns  string
	d   *Daemon
	// http is the daemon's /metrics, /healthz, /readyz address.
	http string
	// asUser, when set, is the user the kubectl plugin impersonates.
	asUser string
}

// newEnv starts one shard process (coordinator, shard, scheduler) on a
// fresh embedded etcd against the package's control plane.
func newEnv(t *testing.T) *env {
	ev := newNamespace(t)
	e := testenv.NewEtcd(t)
	ev.d, ev.http = startDaemon(t, ev.cfg, "shard-0", e.Endpoints, nil)
	testenv.Eventually(ev.t, 20*time.Second, func() bool { return len(ev.d.Shard.Owned()) >= 64 }, "the shard holds every partition")
	return ev
}

// newNamespace creates the test's namespace (deleted when it ends) and the
// clients, without starting a daemon.
func newNamespace(t *testing.T) *env {
	cfg := cp.Require(t)
	ns := strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	ev := &env{t: t, cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg), vc: volcano.NewForConfigOrDie(cfg), ns: ns}
	if _, err := ev.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ev.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ev
}

// startDaemon runs one shard process named name on etcd endpoints, joining
// the gossip seeds in join, until the test ends; it returns the daemon and
// its /metrics address.
func startDaemon(t *testing.T, cfg *rest.Config, name string, endpoints, join []string) (*Daemon, string) {
	t.Helper()
	d, httpAddr, _ := runDaemon(t, cfg, name, endpoints, join)
	return d, httpAddr
}

// runDaemon starts a shard process as startDaemon does and also returns a
// stop function (idempotent, run anyway when the test ends), so that a test
// can take a shard down while it goes on.
func runDaemon(t *testing.T, cfg *rest.Config, name string, endpoints, join []string, tune ...func(*Options)) (*Daemon, string, func()) {
	t.Helper()
	opts := testOptions(cfg, name, endpoints, join)
	for _, f := range tune {
		f(&opts)
	}
	rctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *Daemon, 1)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, opts, func(d *Daemon) { readyc <- d }) }()
	var d *Daemon
	select {
	case d = <-readyc:
	case err := <-done:
		cancel()
		t.Fatalf("daemon %s: %v", name, err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("daemon %s not ready after 60s", name)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon %s stopped with %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return d, d.HTTPAddr(), stop
}

// testOptions are the options of a test's shard process: small partitions
// and ticks, its HTTP endpoints on a port the system chooses (a port found
// free beforehand may be taken by then).
func testOptions(cfg *rest.Config, name string, endpoints, join []string) Options {
	opts := Options{Name: name, REST: cfg, EtcdEndpoints: endpoints, HTTPAddr: "127.0.0.1:0"}
	opts.Shard = shard.DefaultConfig()
	opts.Shard.BindAddr, opts.Shard.BindPort = "127.0.0.1", 0
	opts.Shard.Join = join
	opts.Shard.Partitions = 64
	opts.Shard.GossipProfile = "local"
	opts.Shard.SessionTTL = 5
	opts.Shard.Tick = 20 * time.Millisecond
	opts.Coordinator = coordinator.DefaultConfig()
	opts.Coordinator.SessionTTL = 5
	opts.Scheduler = scheduler.DefaultConfig()
	opts.Scheduler.SchedulerName = schedName
	opts.Scheduler.Partitions = 64
	opts.Scheduler.BindBackoff = 200 * time.Millisecond
	opts.Status = status.DefaultConfig()
	opts.Status.Interval = 200 * time.Millisecond
	if testing.Verbose() {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return opts
}

func (ev *env) nodes(prefix string, n int, cpu, mem string) {
	ev.t.Helper()
	ctx := context.Background()
	if err := cluster.CreateFakeNodes(ctx, ev.cs, prefix, n, cpu, mem, time.Minute); err != nil {
		ev.t.Fatal(err)
	}
	ev.t.Cleanup(func() {
		for i := 0; i < n; i++ {
			_ = ev.cs.CoreV1().Nodes().Delete(context.Background(), fmt.Sprintf("%s-%d", prefix, i), metav1.DeleteOptions{})
		}
	})
}

func (ev *env) queue(name, parent string, capability corev1.ResourceList) {
	ev.t.Helper()
	q := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: parent, Capability: capability}}
	if _, err := ev.vc.SchedulingV1beta1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
	ev.t.Cleanup(func() {
		_ = ev.vc.SchedulingV1beta1().Queues().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (ev *env) podGroup(name, queue string, minMember int32) {
	ev.t.Helper()
	pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns}, Spec: schedv1beta1.PodGroupSpec{MinMember: minMember, Queue: queue}}
	if _, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
}

func (ev *env) pod(name, group, cpu, mem string, selector map[string]string) {
	ev.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ev.ns, Annotations: map[string]string{"scheduling.k8s.io/group-name": group}},
		Spec: corev1.PodSpec{
			SchedulerName: schedName,
			NodeSelector:  selector,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}},
		},
	}
	if _, err := ev.cs.CoreV1().Pods(ev.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
}

// updateQueue changes a Queue's spec; the shards write its status and
// annotations meanwhile, so a conflict is read again and retried.
func (ev *env) updateQueue(name string, change func(*schedv1beta1.Queue)) {
	ev.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		q, err := ev.vc.SchedulingV1beta1().Queues().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(q)
		_, err = ev.vc.SchedulingV1beta1().Queues().Update(context.Background(), q, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		ev.t.Fatal(err)
	}
}

func (ev *env) nodeOf(pod string) string {
	p, err := ev.cs.CoreV1().Pods(ev.ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Spec.NodeName
}

func (ev *env) boundCount(prefix string, n int) int {
	c := 0
	for i := 0; i < n; i++ {
		if ev.nodeOf(fmt.Sprintf("%s-%d", prefix, i)) != "" {
			c++
		}
	}
	return c
}

// TestSeedScenarioParentCapacity is failure F5 through real Queue and
// PodGroup objects: two children of test-root each ask for all of its
// capability; the second waits, its PodGroup naming test-root, until the
// first ends.
func TestSeedScenarioParentCapacity(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("f5-node", 4, "8", "32Gi")
	ev.queue("test-root", "", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")})
	ev.queue("test-sub-0", "test-root", nil)
	ev.queue("test-sub-1", "test-root", nil)
	ev.podGroup("job-1", "test-sub-0", 1)
	ev.pod("job-1-0", "job-1", "2", "4Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("job-1-0") != "" }, "job-1's pod is bound")

	ev.podGroup("job-2", "test-sub-1", 1)
	ev.pod("job-2-0", "job-2", "2", "4Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(context.Background(), "job-2", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range pg.Status.Conditions {
			if strings.Contains(c.Message, "test-root") {
				return true
			}
		}
		return false
	}, "job-2's PodGroup says test-root is full")
	if n := ev.nodeOf("job-2-0"); n != "" {
		t.Fatalf("job-2 bound to %s while test-root is full", n)
	}
	// The parent queue's status rolls up its children: job-1's 2 CPU are
	// allocated on test-root, job-1 runs and job-2 waits below it.
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		q, err := ev.vc.SchedulingV1beta1().Queues().Get(context.Background(), "test-root", metav1.GetOptions{})
		if err != nil {
			return false
		}
		cpu := q.Status.Allocated[corev1.ResourceCPU]
		return cpu.MilliValue() == 2000 && q.Status.Running == 1 && q.Status.Pending == 1
	}, "test-root's status shows its children's jobs")
	// job-1 ends: its pod and PodGroup go away.
	ctx := context.Background()
	zero := int64(0)
	if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, "job-1-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "job-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("job-2-0") != "" }, "job-2 is bound after job-1 ended")
}

// A gang of 8 that fits only when 8 nodes are free stays entirely unbound
// until then, then binds all 8.
func TestGangAllOrNothing(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("gang-a", 4, "8", "32Gi")
	ev.podGroup("gang", "default", 8)
	for i := 0; i < 8; i++ {
		ev.pod(fmt.Sprintf("gang-%d", i), "gang", "6", "8Gi", nil)
	}
	// With 4 nodes of 8 CPU only 4 tasks of 6 CPU fit: none may bind.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n := ev.boundCount("gang", 8); n != 0 {
			t.Fatalf("%d of 8 gang pods bound with room for only 4", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ev.nodes("gang-b", 4, "8", "32Gi")
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("gang", 8) == 8 }, "all 8 gang pods are bound")
	// In a quiet cluster every bind gets its Scheduled event, naming the
	// node the pod is bound to (events are dropped only when the writer
	// falls a thousand behind: README, Decisions).
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("gang-%d", i)
		node := ev.nodeOf(name)
		testenv.Eventually(ev.t, 10*time.Second, func() bool {
			return slices.ContainsFunc(ev.eventMessages(name, "Scheduled"), func(m string) bool { return strings.HasSuffix(m, " to "+node) })
		}, "%s's Scheduled event names its node %s", name, node)
	}
	// Once the gang is bound its reservation is confirmed (durable without
	// the shard's session).
	pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(context.Background(), "gang", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 10*time.Second, func() bool {
		res, err := ev.d.Quota.List(context.Background())
		if err != nil {
			return false
		}
		for _, r := range res.Reservations {
			if r.Job.UID == string(pg.UID) {
				return r.State == coordinator.Confirmed && r.Amount.MilliCPU == 8*6000
			}
		}
		return false
	}, "the gang's reservation is confirmed")
	testenv.Eventually(ev.t, 10*time.Second, func() bool {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(context.Background(), "gang", metav1.GetOptions{})
		return err == nil && pg.Status.Phase == schedv1beta1.PodGroupRunning
	}, "the PodGroup is Running")
}

// A pod with an unsatisfiable nodeSelector gets a FailedScheduling event
// with the reason.
func TestFailedSchedulingEvent(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("sel-node", 2, "8", "32Gi")
	ev.podGroup("lonely", "default", 1)
	ev.pod("lonely-0", "lonely", "1", "1Gi", map[string]string{"disktype": "nvme-that-does-not-exist"})
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for _, m := range ev.eventMessages("lonely-0", "FailedScheduling") {
			if strings.Contains(m, "node") {
				t.Logf("event: %s", m)
				return true
			}
		}
		return false
	}, "a FailedScheduling event with a reason")
	if n := ev.nodeOf("lonely-0"); n != "" {
		t.Fatalf("pod with an unsatisfiable selector bound to %s", n)
	}
}

// TestScaleLoopImplicitPodGroups is failure F4: a Deployment-like workload
// (plain pods, no group annotation) scaled 1 → 0 → 1 many times: every new
// pod is scheduled; none stays Pending because its implicit PodGroup was
// deleted by a stale delete.
func TestScaleLoopImplicitPodGroups(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("f4-node", 2, "8", "32Gi")
	ctx := context.Background()
	one := int32(1)
	labels := map[string]string{"app": "f4"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "f4", Namespace: ev.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{SchedulerName: schedName, TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
			},
		},
	}
	if _, err := ev.cs.AppsV1().Deployments(ev.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) {
		t.Helper()
		for {
			d, err := ev.cs.AppsV1().Deployments(ev.ns).Get(ctx, "f4", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d.Spec.Replicas = &n
			if _, err = ev.cs.AppsV1().Deployments(ev.ns).Update(ctx, d, metav1.UpdateOptions{}); err == nil {
				return
			}
		}
	}
	pods := func() (total, bound int) {
		list, err := ev.cs.CoreV1().Pods(ev.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=f4"})
		if err != nil {
			return -1, -1
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			total++
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return total, bound
	}
	const rounds = 50
	deleted := 0
	start := time.Now()
	for i := 0; i < rounds; i++ {
		testenv.Eventually(ev.t, 30*time.Second, func() bool {
			total, bound := pods()
			return total == 1 && bound == 1
		}, "round %d: the new pod is bound", i)
		scale(0)
		testenv.Eventually(ev.t, 30*time.Second, func() bool {
			total, _ := pods()
			return total == 0
		}, "round %d: scaled to 0", i)
		if i%10 == 0 {
			// Let the empty implicit PodGroup be deleted, so the next pod
			// needs a new one (a different UID under the same name).
			testenv.Eventually(ev.t, 30*time.Second, func() bool {
				list, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).List(ctx, metav1.ListOptions{})
				return err == nil && len(list.Items) == 0
			}, "round %d: the empty implicit PodGroup is deleted", i)
			deleted++
		}
		scale(1)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		total, bound := pods()
		return total == 1 && bound == 1
	}, "the last pod is bound")
	t.Logf("%d scale rounds 1→0→1 in %s (implicit PodGroup deleted and re-created %d times); every new pod bound",
		rounds, time.Since(start).Round(time.Millisecond), deleted)
}

func (ev *env) scrape() map[string]float64 { return scrapeAt(ev.t, ev.http) }

// scrapeAt reads the shardsched_ series of the /metrics endpoint at addr.
func scrapeAt(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	_, body := get(t, addr, "/metrics")
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], "shardsched_") {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

// The metrics endpoint serves the documented series, and they move.
func TestMetricsExistAndMove(t *testing.T) {
	ev := newEnv(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + ev.http + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	before := ev.scrape()
	for _, name := range []string{"shardsched_owned_keys", "shardsched_gossip_members", "shardsched_coordinator_leader",
		"shardsched_nodes_out_of_sync", "shardsched_status_writes_total", "shardsched_status_conflicts_total",
		"shardsched_binds_total", "shardsched_admissions_total", "shardsched_cycles_total",
		"shardsched_submit_to_bind_seconds_count", "shardsched_reservation_seconds_count", "shardsched_resize_seconds_count"} {
		if _, ok := before[name]; !ok {
			t.Errorf("series %s missing from /metrics", name)
		}
	}
	if before["shardsched_coordinator_leader"] != 1 || before["shardsched_owned_keys"] < 64 {
		t.Errorf("single shard: leader=%v owned=%v", before["shardsched_coordinator_leader"], before["shardsched_owned_keys"])
	}
	// The start-up's steps are exported in the order they ran, each
	// ending no earlier than the one before.
	want := []string{"clients", "parts", "serving", "default-queues", "informers", "scheduling"}
	steps := ev.d.Startup()
	if len(steps) != len(want) {
		t.Fatalf("start-up steps %+v, want %v", steps, want)
	}
	prev := 0.0
	for i, st := range steps {
		end, ok := before[`shardsched_startup_step_end_seconds{step="`+st.Name+`"}`]
		switch {
		case st.Name != want[i]:
			t.Errorf("step %d is %q, want %q", i, st.Name, want[i])
		case !ok:
			t.Errorf("step %s not exported", st.Name)
		case end < prev || st.Took < 0 || math.Abs(end-st.End.Seconds()) > 1e-6:
			t.Errorf("step %s ends at %v s (exported %v s), took %v, after a step ending at %v s", st.Name, st.End.Seconds(), end, st.Took, prev)
		}
		prev = end
	}
	ev.nodes("m-node", 1, "8", "32Gi")
	ev.podGroup("m", "default", 1)
	ev.pod("m-0", "m", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		now := ev.scrape()
		return now["shardsched_binds_total"] > before["shardsched_binds_total"] &&
			now["shardsched_admissions_total"] > before["shardsched_admissions_total"] &&
			now["shardsched_status_writes_total"] > before["shardsched_status_writes_total"] &&
			now["shardsched_submit_to_bind_seconds_count"] > before["shardsched_submit_to_bind_seconds_count"] &&
			now["shardsched_reservation_seconds_count"] > before["shardsched_reservation_seconds_count"]
	}, "binds_total and admissions_total move")
	// A second pod of the same PodGroup (minMember 1) grows its job's
	// reservation: one resize, seen by the shard, before it is bound.
	grown := ev.scrape()
	ev.pod("m-1", "m", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		now := ev.scrape()
		return now["shardsched_binds_total"] > grown["shardsched_binds_total"] &&
			now["shardsched_resize_seconds_count"] > grown["shardsched_resize_seconds_count"]
	}, "the second pod bound after a resize of its job's reservation")
	// Queue gauges: the bound CPU shows on the leaf and, rolled up, on the
	// root (both owned by the only shard).
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		now := ev.scrape()
		return now[`shardsched_queue_allocated{queue="default",resource="cpu"}`] >= 1 &&
			now[`shardsched_queue_allocated{queue="root",resource="cpu"}`] >= 1 &&
			now[`shardsched_queue_jobs{queue="root",state="running"}`] >= 1
	}, "queue allocated gauges show the bound pod on default and root")
}
