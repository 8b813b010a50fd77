package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	kfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/consistencydetector"
	vfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

// slowSink counts the tasks and nodes it is handed, taking a while over
// each task (as a cache under load does).
type slowSink struct {
	nopSink
	tasks, nodes atomic.Int64
}

func (s *slowSink) AddOrUpdateTask(api.Task) {
	time.Sleep(2 * time.Millisecond)
	s.tasks.Add(1)
}

func (s *slowSink) AddOrUpdateNode(api.Node) { s.nodes.Add(1) }

// Start returns only once the sink has been handed every object of the
// initial lists, not when the informers' stores hold them: a scheduler
// started on a cache short of the pods already bound would place over
// them. (The stores fill in microseconds here; the sink takes 2 ms a pod.)
func TestSourceStartWaitsForTheSinkToHaveTheInitialList(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const nodes, pods = 20, 200
	var objs []runtime.Object
	for i := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), UID: types.UID(fmt.Sprintf("node-%d", i))},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourcePods: resource.MustParse("110")}}})
	}
	for i := range pods {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("pod-%d", i))},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("n%d", i%nodes), Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}})
	}
	sink := &slowSink{}
	src := NewSource(kfake.NewSimpleClientset(objs...), vfake.NewSimpleClientset(), sink, nil, nil)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		src.Shutdown()
	}()
	if got := sink.tasks.Load(); got != pods {
		t.Errorf("Start returned with %d of the %d pods handed to the sink", got, pods)
	}
	if got := sink.nodes.Load(); got != nodes {
		t.Errorf("Start returned with %d of the %d nodes handed to the sink", got, nodes)
	}
}

// blockingSink holds every task until release is closed.
type blockingSink struct {
	nopSink
	release chan struct{}
}

func (s *blockingSink) AddOrUpdateTask(api.Task) { <-s.release }

// While a handler has not been given its initial list, Pending names its
// informer and Start waits; stopped then, Start returns at once with an
// error naming what it waited for and wrapping the context's.
func TestSourceStartTellsWhatItWaitsForAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pod-1"},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c"}}}}
	sink := &blockingSink{release: make(chan struct{})}
	src := NewSource(kfake.NewSimpleClientset(pod), vfake.NewSimpleClientset(), sink, nil, nil)
	want := []string{"nodes", "pods", "priorityclasses", "podgroups", "queues"}
	if got := src.Pending(); !slices.Equal(got, want) {
		t.Fatalf("Pending before Start = %v, want %v", got, want)
	}
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx) }()
	// The other informers sync; the pods' handler is held by the sink.
	testenv.Eventually(t, 30*time.Second, func() bool { return slices.Equal(src.Pending(), []string{"pods"}) },
		"Pending is only pods while the sink holds the pod (last %v)", src.Pending())
	select {
	case err := <-done:
		t.Fatalf("Start returned (%v) while the pods' handler was held", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "pods") {
			t.Errorf("Start stopped with %v, want an error naming the pods informer and wrapping context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30 s of its context's end")
	}
	close(sink.release)
	src.Shutdown()
}

// handed keeps what a sink is handed, by key, and what deletes told.
type handed[V any] struct {
	mu      sync.Mutex
	m       map[string]V
	deleted []string
}

func (h *handed[V]) put(key string, v V) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]V{}
	}
	h.m[key] = v
}

func (h *handed[V]) remove(key, told string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, key)
	h.deleted = append(h.deleted, told)
}

func (h *handed[V]) get(key string) (V, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[key]
	return v, ok
}

func (h *handed[V]) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.m))
}

func (h *handed[V]) deletes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deleted)
}

// deleted deletes an object with del, waits until h no longer holds it
// (under key) and checks that the deletes told so far are told.
func deleted[V any](t *testing.T, h *handed[V], key string, told []string, del func() error) {
	t.Helper()
	if err := del(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, ok := h.get(key)
		return !ok
	}, "the deleted %s is still in the sink", key)
	if got := h.deletes(); !slices.Equal(got, told) {
		t.Errorf("deletes told by %v, want %v", got, told)
	}
}

// taskSink keeps the tasks and nodes it is handed, by UID and name, and the
// UIDs deletes were told by.
type taskSink struct {
	nopSink
	tasks handed[api.Task]
	nodes handed[api.Node]
}

func (s *taskSink) AddOrUpdateTask(t api.Task) { s.tasks.put(t.UID, t) }
func (s *taskSink) DeleteTask(uid string)      { s.tasks.remove(uid, uid) }
func (s *taskSink) DeleteTasksExcept(keep func(string) bool) {
	for _, uid := range s.tasks.keys() {
		if !keep(uid) {
			s.tasks.remove(uid, uid)
		}
	}
}
func (s *taskSink) task(uid string) (api.Task, bool)  { return s.tasks.get(uid) }
func (s *taskSink) AddOrUpdateNode(n api.Node)        { s.nodes.put(n.Name, n) }
func (s *taskSink) DeleteNode(name, uid string)       { s.nodes.remove(name, uid) }
func (s *taskSink) node(name string) (api.Node, bool) { return s.nodes.get(name) }

// The pods are converted to tasks (storeTransform), and what the sink and
// NodeState are given from them follows the pods: an update is handed on,
// a pod that cannot be converted is left out until it is fixed, a delete
// is told by the pod's UID, and a node's state holds the tasks bound to it.
func TestSourceFollowsPodsThroughStoredTasks(t *testing.T) {
	pod := func(name, node, cpu, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: rv},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	}
	cs := kfake.NewSimpleClientset(cpuNode("n0", "64"), cpuNode("n1", "-64"), pod("bound", "n0", "1", "1"), pod("pending", "", "2", "1"), pod("bad", "", "-1", "1"))
	sink := &taskSink{}
	src, ctx := startedSource(t, cs, sink)
	// n0's state, and none for a node the API server does not have.
	onNode := func() []string {
		if src.NodeState("gone", func(n api.Node, _ []api.Task) { t.Fatalf("state told for an unknown node: %+v", n) }) {
			t.Fatal("NodeState of an unknown node returned true")
		}
		var n api.Node
		var tasks []api.Task
		ok := src.NodeState("n0", func(nn api.Node, tt []api.Task) { n, tasks = nn, tt })
		if !ok || n.Name != "n0" {
			t.Fatalf("node n0's state: %+v (%v)", n, ok)
		}
		var names []string
		for _, task := range tasks {
			names = append(names, task.Name)
		}
		slices.Sort(names)
		return names
	}
	if b, ok := sink.task("uid-bound"); !ok || b.NodeName != "n0" || b.Request.MilliCPU != 1000 || b.Request.Get(api.Pods) != 1 {
		t.Fatalf("bound pod's task %+v (handed %v)", b, ok)
	}
	if _, ok := sink.task("uid-bad"); ok {
		t.Fatal("a pod with a negative request was handed to the sink")
	}
	if n, ok := sink.node("n0"); !ok || n.UID != "node-n0" || n.Allocatable.MilliCPU != 64000 {
		t.Fatalf("node n0 handed as %+v (%v)", n, ok)
	}
	if n, ok := sink.node("n1"); ok {
		t.Fatalf("a node with a negative allocatable was handed to the sink: %+v", n)
	}
	if got := onNode(); !slices.Equal(got, []string{"bound"}) {
		t.Fatalf("tasks on n0: %v, want [bound]", got)
	}

	pods := cs.CoreV1().Pods("ns")
	if _, err := pods.Update(ctx, pod("pending", "n0", "2", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Update(ctx, pod("bad", "", "3", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		p, _ := sink.task("uid-pending")
		f, _ := sink.task("uid-bad")
		return p.NodeName == "n0" && f.Request.MilliCPU == 3000
	}, "the binding of one pod and the fix of another were not handed to the sink")
	if got := onNode(); !slices.Equal(got, []string{"bound", "pending"}) {
		t.Fatalf("tasks on n0 after the bind: %v, want [bound pending]", got)
	}

	deleted(t, &sink.tasks, "uid-bound", []string{"uid-bound"}, func() error { return pods.Delete(ctx, "bound", metav1.DeleteOptions{}) })
	if got := onNode(); !slices.Equal(got, []string{"pending"}) {
		t.Errorf("tasks on n0 after the delete: %v, want [pending]", got)
	}
	// A node's delete is told by its UID, and its state is gone.
	deleted(t, &sink.nodes, "n0", []string{"node-n0"}, func() error { return cs.CoreV1().Nodes().Delete(ctx, "n0", metav1.DeleteOptions{}) })
	if src.NodeState("n0", func(n api.Node, _ []api.Task) { t.Errorf("a deleted node's state told: %+v", n) }) {
		t.Error("NodeState of a deleted node returned true")
	}
}

// watchListClient is a fake clientset that says it supports watch-lists
// (client-go's fakes say they do not), as a real API server's client does.
type watchListClient struct{ *kfake.Clientset }

func (watchListClient) IsWatchListSemanticsUnSupported() bool { return false }

// With client-go's watch-list consistency check switched on
// (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR), which would run every pod through
// the pod store's transform a second time and then panic on what it keeps,
// Start fails at once naming the variable and the ways out. Informers that
// list first, or a client-go with watch-lists off, never run the check, so
// Start goes on. (The package's TestMain turns watch-lists off.)
func TestSourceStartRefusesClientGosWatchListCheck(t *testing.T) {
	defer consistencydetector.SetDataConsistencyDetectionForWatchListEnabledForTest(true)()
	start := func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		src := NewSource(cs, vfake.NewSimpleClientset(), nopSink{}, nil, nil)
		err := src.Start(ctx)
		cancel() // the informers run until their context ends
		src.Shutdown()
		return err
	}

	// client-go's watch-lists off: Start lists and returns.
	if err := start(watchListClient{kfake.NewSimpleClientset()}); err != nil {
		t.Fatalf("Start with the check on and client-go's watch-lists off = %v, want nil", err)
	}

	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, true)
	err := start(watchListClient{kfake.NewSimpleClientset()})
	if !errors.Is(err, errWatchListDetector) || !strings.Contains(err.Error(), "KUBE_WATCHLIST_INCONSISTENCY_DETECTOR") || !strings.Contains(err.Error(), "--informer-list-first") {
		t.Fatalf("Start with the check on and watch-lists = %v, want an error naming KUBE_WATCHLIST_INCONSISTENCY_DETECTOR and --informer-list-first", err)
	}
	// Listing first, Start goes on to wait for the informers (Volcano's
	// fake never ends a watch-list, so it waits until its context ends).
	if err := start(ListFirst(watchListClient{kfake.NewSimpleClientset()})); errors.Is(err, errWatchListDetector) {
		t.Fatalf("Start with the check on and the informers listing first = %v, want it not refused", err)
	}
}
