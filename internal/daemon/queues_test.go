package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/internal/testenv"
)

// Queue tree validated queue by queue, on the real API server.

// sub is ev for a subtest: the same clients and namespace, failing t.
func (ev *env) sub(t *testing.T) *env {
	c := *ev
	c.t = t
	return &c
}

// startShard starts shard-0 on endpoints for the life of t and waits until
// it holds every partition.
func (ev *env) startShard(endpoints []string) {
	ev.t.Helper()
	ev.d, ev.http = startDaemon(ev.t, ev.cfg, "shard-0", endpoints, nil)
	testenv.Eventually(ev.t, 20*time.Second, func() bool { return len(ev.d.Shard.Owned()) >= 64 }, "the shard holds every partition")
}

// invalidMark returns a Queue's invalid-queue annotation ("" when none).
func (ev *env) invalidMark(name string) string {
	q, err := ev.vc.SchedulingV1beta1().Queues().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return q.Annotations[kube.InvalidQueueAnnotation]
}

// invalidEvent returns the message of an InvalidQueue Event on a Queue
// (cluster-scoped: its Events are in the default namespace).
func (ev *env) invalidEvent(name string) string {
	evs, err := ev.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return ""
	}
	for _, e := range evs.Items {
		if e.Reason == "InvalidQueue" && e.InvolvedObject.Kind == "Queue" {
			return e.Message
		}
	}
	return ""
}

// Issue cases 3, 10, 11: a Queue in a parent cycle (and one below it), one
// with an unknown parent, one with a negative capability and one with a
// quantity that does not fit (1e40 CPU) exist. A queue created afterwards
// still gets its PodGroup admitted and its pod bound, and so does one after
// a shard restart; every bad Queue carries an annotation and an Event
// naming its problem. Before queue-by-queue validation the first bad Queue
// froze the tree (nothing created afterwards was scheduled, and after a
// restart nothing at all), and the bad quantities were dropped silently.
func TestInvalidQueuesLeftOutValidOnesScheduled(t *testing.T) {
	ev := newNamespace(t)
	e := testenv.NewEtcd(t)
	ev.nodes("iq-node", 2, "8", "32Gi")
	ev.queue("iq-cyc-a", "iq-cyc-b", nil)
	ev.queue("iq-cyc-b", "iq-cyc-a", nil)
	ev.queue("iq-cyc-kid", "iq-cyc-a", nil)
	ev.queue("iq-orphan", "iq-ghost", nil)
	ev.queue("iq-neg", "", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")})
	ev.queue("iq-huge", "", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1e40")})
	problems := map[string][]string{
		"iq-cyc-a":   {"cycle", "iq-cyc-b"},
		"iq-cyc-b":   {"cycle", "iq-cyc-a"},
		"iq-cyc-kid": {"iq-cyc-a", "left out"},
		"iq-orphan":  {"iq-ghost", "does not exist"},
		"iq-neg":     {"negative", "cpu"},
		"iq-huge":    {"overflow", "cpu"},
	}

	outer := t
	t.Run("running shard", func(t *testing.T) {
		ev := ev.sub(t)
		ev.startShard(e.Endpoints)
		// Created while the shard runs, after the bad queues; deleted when
		// the whole test ends (the restarted shard uses it too).
		good := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "iq-good"}, Spec: schedv1beta1.QueueSpec{Weight: 1}}
		if _, err := ev.vc.SchedulingV1beta1().Queues().Create(context.Background(), good, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		vc := ev.vc
		outer.Cleanup(func() {
			_ = vc.SchedulingV1beta1().Queues().Delete(context.Background(), "iq-good", metav1.DeleteOptions{})
		})
		ev.podGroup("iq-job-1", "iq-good", 1)
		ev.pod("iq-job-1-0", "iq-job-1", "1", "1Gi", nil)
		testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("iq-job-1-0") != "" }, "the pod in the queue created after the bad ones is bound")
		for q, words := range problems {
			testenv.Eventually(ev.t, 30*time.Second, func() bool {
				mark, msg := ev.invalidMark(q), ev.invalidEvent(q)
				for _, w := range words {
					if !strings.Contains(mark, w) || !strings.Contains(msg, w) {
						return false
					}
				}
				return true
			}, "%s carries its problem (%v) in an annotation and an Event", q, words)
			t.Logf("%s: %s", q, ev.invalidMark(q))
		}
		if m := ev.invalidMark("iq-good"); m != "" {
			t.Errorf("the valid queue is marked invalid: %q", m)
		}
	})
	if t.Failed() {
		return
	}
	t.Run("restarted shard", func(t *testing.T) {
		ev := ev.sub(t)
		ev.startShard(e.Endpoints)
		ev.podGroup("iq-job-2", "iq-good", 1)
		ev.pod("iq-job-2-0", "iq-job-2", "1", "1Gi", nil)
		testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("iq-job-2-0") != "" }, "after a restart, a pod in a valid queue is bound")
		ev.podGroup("iq-job-3", api.DefaultQueue, 1)
		ev.pod("iq-job-3-0", "iq-job-3", "1", "1Gi", nil)
		testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("iq-job-3-0") != "" }, "after a restart, a pod in the default queue is bound")
		// Fixed, a queue leaves its mark behind.
		ev.queue("iq-good-parent", "", nil)
		ev.updateQueue("iq-orphan", func(q *schedv1beta1.Queue) { q.Spec.Parent = "iq-good-parent" })
		testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.invalidMark("iq-orphan") == "" }, "the fixed queue's mark is removed")
		ev.podGroup("iq-job-4", "iq-orphan", 1)
		ev.pod("iq-job-4-0", "iq-job-4", "1", "1Gi", nil)
		testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("iq-job-4-0") != "" }, "a pod in the fixed queue is bound")
	})
}

// Volcano creates root and default at start-up when they are missing; so
// does a shard. An operator's default (its own weight, no parent) is not
// overwritten.
func TestRootAndDefaultQueuesCreated(t *testing.T) {
	ev := newNamespace(t)
	ctx := context.Background()
	queues := ev.vc.SchedulingV1beta1().Queues()
	for _, n := range []string{api.RootQueue, api.DefaultQueue} {
		if err := queues.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		testenv.Eventually(ev.t, 30*time.Second, func() bool {
			_, err := queues.Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "%s is gone", n)
	}
	op := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: api.DefaultQueue, Labels: map[string]string{"owner": "operator"}},
		Spec: schedv1beta1.QueueSpec{Weight: 7}}
	created, err := queues.Create(ctx, op, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Leave a plain default behind for the tests after this one.
	t.Cleanup(func() { _ = queues.Delete(context.Background(), api.DefaultQueue, metav1.DeleteOptions{}) })
	ev.startShard(testenv.NewEtcd(t).Endpoints)
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		root, err := queues.Get(ctx, api.RootQueue, metav1.GetOptions{})
		return err == nil && root.Spec.Parent == "" && root.Spec.Weight == 1
	}, "the root Queue exists")
	def, err := queues.Get(ctx, api.DefaultQueue, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if def.UID != created.UID || def.Spec.Weight != 7 || def.Spec.Parent != "" || def.Labels["owner"] != "operator" {
		t.Fatalf("operator's default overwritten: %+v", def)
	}
	// Scheduling uses the operator's default as declared.
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		tr := ev.d.sched.Tree()
		if tr == nil {
			return false
		}
		s, ok := tr.Get(api.DefaultQueue)
		return ok && s.Weight == 7
	}, "the shard's tree has default with weight 7")

	// Without an operator's default, the shard creates it under root.
	if err := queues.Delete(ctx, api.DefaultQueue, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		_, err := queues.Get(ctx, api.DefaultQueue, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "default is gone")
	if err := kube.EnsureDefaultQueues(ctx, ev.vc); err != nil {
		t.Fatal(err)
	}
	def, err = queues.Get(ctx, api.DefaultQueue, metav1.GetOptions{})
	if err != nil || def.Spec.Parent != api.RootQueue || def.Spec.Weight != 1 || def.Spec.Reclaimable == nil || !*def.Spec.Reclaimable {
		t.Fatalf("default = %+v, %v; want under root, weight 1, reclaimable", def, err)
	}
}

// Queue status writes do not re-push the tree: across a burst of jobs whose
// status the shard writes on their Queues (each write an informer update),
// the tree goes to the coordinator only when a spec changes. Before, every
// Queue update pushed the whole tree, and the coordinator walked every
// reservation for each.
func TestQueueStatusWritesDoNotPushTree(t *testing.T) {
	ev := newEnv(t)
	ev.nodes("sw-node", 4, "8", "32Gi")
	ctx := context.Background()
	names := []string{"sw-q0", "sw-q1", "sw-q2"}
	for _, n := range names {
		ev.queue(n, "", nil)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		list, err := ev.d.Quota.List(ctx)
		if err != nil {
			return false
		}
		got := 0
		for _, s := range list.Specs {
			if slices.Contains(names, s.Name) {
				got++
			}
		}
		return got == len(names)
	}, "the coordinator has the three queues")
	// Let the start-up pushes settle.
	time.Sleep(time.Second)
	before := ev.d.QueueTreePushes()

	w, err := ev.vc.SchedulingV1beta1().Queues().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	updates := make(chan int, 1)
	go func() {
		n := 0
		defer func() { updates <- n }()
		for e := range w.ResultChan() {
			if q, ok := e.Object.(*schedv1beta1.Queue); ok && e.Type == watch.Modified && strings.HasPrefix(q.Name, "sw-") {
				n++
			}
		}
	}()

	const jobs = 30
	for i := 0; i < jobs; i++ {
		g := fmt.Sprintf("sw-job-%d", i)
		ev.podGroup(g, names[i%len(names)], 1)
		ev.pod(g+"-0", g, "100m", "128Mi", nil)
	}
	testenv.Eventually(ev.t, 60*time.Second, func() bool {
		for i := 0; i < jobs; i++ {
			if ev.nodeOf(fmt.Sprintf("sw-job-%d-0", i)) == "" {
				return false
			}
		}
		return true
	}, "every job's pod is bound")
	// Let the last status flushes land.
	time.Sleep(time.Second)
	w.Stop()
	n := <-updates
	pushes := ev.d.QueueTreePushes() - before
	t.Logf("%d Queue updates (status writes) during the burst, %d tree pushes", n, pushes)
	if n < len(names) {
		t.Fatalf("only %d Queue updates seen during the burst; the test proves nothing", n)
	}
	if pushes != 0 {
		t.Fatalf("%d tree pushes during a burst with no spec change (%d Queue status updates)", pushes, n)
	}

	// A spec change is pushed, once.
	ev.updateQueue("sw-q0", func(q *schedv1beta1.Queue) { q.Spec.Weight = 5 })
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		list, err := ev.d.Quota.List(ctx)
		if err != nil {
			return false
		}
		for _, s := range list.Specs {
			if s.Name == "sw-q0" {
				return s.Weight == 5
			}
		}
		return false
	}, "the weight change reaches the coordinator")
	time.Sleep(time.Second)
	if got := ev.d.QueueTreePushes() - before; got != 1 {
		t.Fatalf("%d pushes for one spec change, want 1", got)
	}
}
