package kube

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	vfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/testenv"
)

func cpuPod(name, node, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

func cpuNode(name, cpu string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name)},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
}

// startedSource starts a Source on cs feeding sink, stopped at the test's
// end; ctx is for the test's calls to cs.
func startedSource(t *testing.T, cs *kfake.Clientset, sink Sink) (*Source, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	src := NewSource(cs, vfake.NewSimpleClientset(), sink, nil, nil)
	if err := src.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		src.Shutdown()
	})
	return src, ctx
}

// The pod store is the sink's only source of pod events: a relist (after
// the watch was down) deletes every pod it no longer lists, by UID, hands
// on every pod it lists, and tells the store synced; a pod that cannot be
// converted is reported and left out, the sink keeping what it had of it.
func TestPodStoreRelistDeletesThePodsItNoLongerLists(t *testing.T) {
	sink := &taskSink{}
	var bad []string
	s := newPodStore(sink, storeTransform(newPodInterner()), func(key string, err error) { bad = append(bad, key) })
	var relists []int
	s.relisted = func(pods int, _ time.Duration) { relists = append(relists, pods) }
	if cache.IsDone(s) {
		t.Fatal("synced before any list")
	}
	if err := s.Replace([]any{cpuPod("a", "n0", "1"), cpuPod("b", "n0", "1"), cpuPod("c", "", "1")}, "1"); err != nil {
		t.Fatal(err)
	}
	if !cache.IsDone(s) {
		t.Fatal("not synced after the first list")
	}
	if len(relists) != 0 {
		t.Fatalf("the first list told as a relist: %v", relists)
	}
	// The watch: c is bound, then made unconvertible (the sink keeps its
	// bound version), a new pod d comes.
	for _, p := range []*corev1.Pod{cpuPod("c", "n1", "1"), cpuPod("c", "n1", "-1"), cpuPod("d", "", "2")} {
		if err := s.Update(p); err != nil {
			t.Fatal(err)
		}
	}
	if c, ok := sink.task("uid-c"); !ok || c.NodeName != "n1" || c.Request.MilliCPU != 1000 {
		t.Fatalf("c in the sink: %+v (%v), want its last convertible version, on n1", c, ok)
	}
	if !slices.Equal(bad, []string{"ns/c"}) {
		t.Fatalf("reported as unconvertible: %v, want [ns/c]", bad)
	}
	// The watch goes down; meanwhile a and d are deleted and b changes.
	// The relist lists b and c (c in a watch-list's form: handed on as it
	// was streamed, the reflector's temporary store keeping its UID) and
	// nothing else.
	relist := []any{cpuPod("b", "n2", "3"), cpuPod("c", "n1", "4")}
	relist[1], _ = s.Transformer()(relist[1])
	seen := s.touchedNode("n7") // a rebuild's list of n7, read before the relist
	if err := s.Replace(relist, "9"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(relists, []int{2}) {
		t.Errorf("relists told: %v, want one of 2 pods", relists)
	}
	// The relist's deletes are of pods whose node is not known: a rebuild
	// of any node from a list read before it is not applied.
	if s.applyIfQuiet("n7", seen, func() {}) {
		t.Error("a rebuild from a list read before a relist was applied")
	}
	got := sink.tasks.deletes()
	slices.Sort(got)
	if !slices.Equal(got, []string{"uid-a", "uid-d"}) {
		t.Fatalf("deletes told after the relist: %v, want [uid-a uid-d]", got)
	}
	if b, ok := sink.task("uid-b"); !ok || b.NodeName != "n2" || b.Request.MilliCPU != 3000 {
		t.Errorf("b after the relist: %+v (%v)", b, ok)
	}
	if c, ok := sink.task("uid-c"); !ok || c.Request.MilliCPU != 4000 {
		t.Errorf("c after the relist: %+v (%v)", c, ok)
	}
	// A watch's delete is told by the deleted object's UID, also when
	// the pod's last state is unknown.
	if err := s.Delete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: cpuPod("b", "n2", "3")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(cpuPod("c", "n1", "4")); err != nil {
		t.Fatal(err)
	}
	if got := sink.tasks.deletes(); len(got) != 4 || got[2] != "uid-b" || got[3] != "uid-c" {
		t.Errorf("deletes told: %v, want uid-b and uid-c last", got)
	}
	if left := sink.tasks.keys(); len(left) != 0 {
		t.Errorf("the sink still has %v after every pod was deleted", left)
	}
	// What is not a pod is refused, not handed on.
	if err := s.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0"}}); err == nil {
		t.Error("a node added to the pod store was taken")
	}
}

// orderSink records, in order, the tasks it is handed, beside the marks
// a test puts in.
type orderSink struct {
	nopSink
	mu  sync.Mutex
	log []string
	got chan string
}

func (s *orderSink) AddOrUpdateTask(t api.Task) {
	s.mark(t.Name + "@" + t.NodeName)
	select {
	case s.got <- t.Name + "@" + t.NodeName:
	default:
	}
}

func (s *orderSink) mark(m string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, m)
}

func (s *orderSink) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// NodeState reads a node's pods from the API server (nothing is kept per
// node here) and hands them to apply before any pod event that came in
// meanwhile reaches the sink: a rebuild replaces what the cache knows of
// the node, and an event taken between the read and the rebuild would be
// undone by it.
func TestNodeStateTakesNoPodEventBeforeItsRebuild(t *testing.T) {
	cs := kfake.NewSimpleClientset(cpuNode("n0", "64"), cpuPod("a", "n0", "1"), cpuPod("b", "", "1"), cpuPod("c", "n1", "1"))
	sink := &orderSink{got: make(chan string, 16)}
	src, ctx := startedSource(t, cs, sink)
	for len(sink.got) > 0 {
		<-sink.got // the initial list's
	}
	var listed []string
	ok := src.NodeState("n0", func(n api.Node, tasks []api.Task) {
		for _, task := range tasks {
			listed = append(listed, task.Name)
		}
		// b is bound to n0 now: its event must wait for the rebuild.
		if _, err := cs.CoreV1().Pods("ns").Update(ctx, cpuPod("b", "n0", "1"), metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
		select {
		case m := <-sink.got:
			t.Errorf("the sink was handed %s during the rebuild", m)
		case <-time.After(300 * time.Millisecond):
		}
		sink.mark("rebuilt " + n.Name)
	})
	if !ok || !slices.Equal(listed, []string{"a"}) {
		t.Fatalf("NodeState(n0) = %v with tasks %v, want true with [a] (c is on n1, b on none)", ok, listed)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return slices.Contains(sink.seen(), "b@n0") }, "b's bind never reached the sink")
	seen := sink.seen()
	if i, j := slices.Index(seen, "rebuilt n0"), slices.Index(seen, "b@n0"); i < 0 || j < i {
		t.Errorf("the sink's order %v: b's bind must come after the rebuild", seen)
	}
}

// BenchmarkSourceHeapPerPod reports what a Source and its sink (a cache
// keeping each pod's task) retain per pod once they have synced a cluster
// of b.N pods, the fake API server's own copies left out.
func BenchmarkSourceHeapPerPod(b *testing.B) {
	n := max(b.N, 1000)
	objs := make([]k8sruntime.Object, 0, n)
	for i := range n {
		objs = append(objs, numberedPod(i, fmt.Sprint(1000+i)))
	}
	cs := kfake.NewSimpleClientset(objs...)
	sink := &taskSink{}
	before := liveHeap()
	ctx, cancel := context.WithCancel(context.Background())
	src := NewSource(cs, vfake.NewSimpleClientset(), sink, nil, nil)
	b.ResetTimer()
	if err := src.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	after := liveHeap()
	b.ReportMetric(float64(int64(after)-int64(before))/float64(n), "B/pod")
	runtime.KeepAlive(src)
	runtime.KeepAlive(cs)
	cancel()
	src.Shutdown()
}

// A rebuild is applied only from a list no pod event of the node has
// overtaken: when one reached the sink while the node's pods were listed,
// NodeState lists them again (the pod watch never waits for a list), and
// gives up for now when they keep changing.
func TestNodeStateListsAgainWhenTheNodesPodsChangedMeanwhile(t *testing.T) {
	cs := kfake.NewSimpleClientset(cpuNode("n0", "64"), cpuPod("a", "n0", "1"), cpuPod("b", "", "1"), cpuPod("c", "", "1"))
	sink := &taskSink{}
	src, ctx := startedSource(t, cs, sink)
	list := src.listNode
	// bind binds a pod to n0 and waits until the sink has the event.
	bind := func(name string) {
		if _, err := cs.CoreV1().Pods("ns").Update(ctx, cpuPod(name, "n0", "1"), metav1.UpdateOptions{}); err != nil {
			t.Error(err)
			return
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			p, _ := sink.task("uid-" + name)
			return p.NodeName == "n0"
		}, "%s's bind never reached the sink", name)
	}
	lists := 0
	src.listNode = func(n string) ([]api.Task, error) {
		tasks, err := list(n)
		if lists++; lists == 1 {
			bind("b") // after the list was read, before it is applied
		}
		return tasks, err
	}
	var names []string
	ok := src.NodeState("n0", func(_ api.Node, tasks []api.Task) {
		for _, task := range tasks {
			names = append(names, task.Name)
		}
	})
	slices.Sort(names)
	if !ok || lists != 2 || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("NodeState(n0) = %v after %d lists, applied with %v: want true after 2 lists, with [a b]", ok, lists, names)
	}

	// Its pods change during every list: no rebuild this time.
	lists = 0
	src.listNode = func(n string) ([]api.Task, error) {
		tasks, err := list(n)
		lists++
		p := cpuPod("c", "n0", fmt.Sprint(lists+1))
		if _, err := cs.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			c, _ := sink.task("uid-c")
			return c.Request.MilliCPU == int64(lists+1)*1000
		}, "c's update never reached the sink")
		return tasks, err
	}
	if src.NodeState("n0", func(api.Node, []api.Task) { t.Error("a rebuild applied from a list its node's pods overtook") }) || lists != rebuildTries {
		t.Errorf("NodeState(n0) with its pods changing during every list: %d lists, want false after %d", lists, rebuildTries)
	}
}

// A relist is timed from the request of the list that ended in it (the
// pods' ListerWatcher marks it), so that the warning can say when a list
// took longer than the API server keeps watch history; the first list is
// not a relist, and a relist whose request was never marked is told as 0.
func TestPodStoreTimesEachRelistFromItsRequest(t *testing.T) {
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	s := newPodStore(&taskSink{}, storeTransform(newPodInterner()), func(string, error) {})
	s.now = func() time.Time { return at }
	type relist struct {
		pods int
		took time.Duration
	}
	var got []relist
	s.relisted = func(pods int, took time.Duration) { got = append(got, relist{pods, took}) }

	if err := s.Replace([]any{cpuPod("a", "n0", "1")}, "1"); err != nil { // unmarked first list
		t.Fatal(err)
	}
	if err := s.Replace([]any{cpuPod("a", "n0", "1")}, "2"); err != nil { // unmarked relist
		t.Fatal(err)
	}
	s.listing()
	at = at.Add(6 * time.Minute)
	if err := s.Replace([]any{cpuPod("a", "n0", "1"), cpuPod("b", "n0", "1")}, "3"); err != nil {
		t.Fatal(err)
	}
	at = at.Add(time.Minute)
	s.listing() // a list retried: timed from the retry
	at = at.Add(20 * time.Second)
	if err := s.Replace([]any{cpuPod("b", "n0", "1")}, "4"); err != nil {
		t.Fatal(err)
	}
	want := []relist{{1, 0}, {2, 6 * time.Minute}, {1, 20 * time.Second}}
	if !slices.Equal(got, want) {
		t.Fatalf("relists told %v, want %v", got, want)
	}
}

// The warning's hint names the API server's watch history and
// --request-timeout only for a list longer than that history.
func TestRelistHintNamesTheWatchHistoryOnlyForALongList(t *testing.T) {
	for _, c := range []struct {
		took time.Duration
		long bool
	}{{0, false}, {20 * time.Second, false}, {75 * time.Second, false}, {76 * time.Second, true}, {6 * time.Minute, true}} {
		h := relistHint(c.took)
		if got := strings.Contains(h, "--request-timeout"); got != c.long {
			t.Errorf("relistHint(%v) = %q: names --request-timeout %v, want %v", c.took, h, got, c.long)
		}
	}
}

// The pods' ListerWatcher marks the request of a list (its first page, not
// the pages that follow) and of a watch-list, not of a watch that resumes.
func TestPodListWatchMarksEachListsRequest(t *testing.T) {
	marks := 0
	lw := podListWatch(kfake.NewSimpleClientset(), func() { marks++ })
	ctx := context.Background()
	yes := true
	for _, c := range []struct {
		name string
		do   func() error
		want int
	}{
		{"a list's first page", func() error {
			_, err := lw.(cache.ListerWithContext).ListWithContext(ctx, metav1.ListOptions{Limit: 500})
			return err
		}, 1},
		{"a page after it", func() error {
			_, err := lw.(cache.ListerWithContext).ListWithContext(ctx, metav1.ListOptions{Limit: 500, Continue: "next"})
			return err
		}, 0},
		{"a watch-list", func() error {
			w, err := lw.(cache.WatcherWithContext).WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true})
			if err == nil {
				w.Stop()
			}
			return err
		}, 1},
		{"a watch that resumes", func() error {
			w, err := lw.(cache.WatcherWithContext).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true})
			if err == nil {
				w.Stop()
			}
			return err
		}, 0},
	} {
		marks = 0
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if marks != c.want {
			t.Errorf("%s: marked %d times, want %d", c.name, marks, c.want)
		}
	}
}
