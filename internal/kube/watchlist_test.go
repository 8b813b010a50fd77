package kube

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/shardsched/shardsched/internal/testenv"
)

// scriptedWatch is a watch whose events a test sends, as an API server
// would stream a watch-list: the pods, then the bookmark that ends the
// initial events.
type scriptedWatch struct {
	events chan watch.Event
	stop   chan struct{}
	once   sync.Once
}

func newScriptedWatch() *scriptedWatch {
	return &scriptedWatch{events: make(chan watch.Event), stop: make(chan struct{})}
}

func (w *scriptedWatch) ResultChan() <-chan watch.Event { return w.events }
func (w *scriptedWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }

// send delivers e, and reports false if the reader stopped the watch first.
func (w *scriptedWatch) send(e watch.Event) bool {
	select {
	case w.events <- e:
		return true
	case <-w.stop:
		return false
	}
}

func (w *scriptedWatch) add(p *corev1.Pod) bool {
	return w.send(watch.Event{Type: watch.Added, Object: p})
}

// endInitialEvents sends the bookmark that ends a watch-list's initial
// events, at resource version rv.
func (w *scriptedWatch) endInitialEvents(rv string) bool {
	return w.send(watch.Event{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: rv, Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}})
}

// expire ends the watch as an API server does when the reader fell too far
// behind: the reflector lists every pod again.
func (w *scriptedWatch) expire() bool {
	return w.send(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus})
}

// scriptedPods is a ListerWatcher with watch-list semantics whose every
// watch is the next one a test hands it.
func scriptedPods(watches <-chan *scriptedWatch) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
			return nil, fmt.Errorf("scripted pods: a list, where a watch-list was expected")
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			select {
			case w := <-watches:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

// runPodReflector runs a pod reflector over store on watches until the
// test (or benchmark) ends, with watch-lists (which TestMain turns off for
// the package's fake clientsets).
func runPodReflector(tb testing.TB, store *podStore, watches <-chan *scriptedWatch) {
	tb.Helper()
	clientfeaturestesting.SetFeatureDuringTest(tb, clientfeatures.WatchListClient, true)
	ctx, cancel := context.WithCancel(context.Background())
	r := cache.NewReflectorWithOptions(scriptedPods(watches), &corev1.Pod{}, store, cache.ReflectorOptions{Name: "pods"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.RunWithContext(ctx)
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
}

// watchedTwice runs a pod store on sink under a reflector whose first two
// watch-lists are the ones returned, for the test to send.
func watchedTwice(tb testing.TB, sink Sink) (store *podStore, first, second *scriptedWatch) {
	tb.Helper()
	store = newPodStore(sink, storeTransform(newPodInterner()), func(string, error) {})
	watches := make(chan *scriptedWatch, 2)
	first, second = newScriptedWatch(), newScriptedWatch()
	watches <- first
	watches <- second
	runPodReflector(tb, store, watches)
	return store, first, second
}

// numberedPod is the i-th pod of a bench's cluster, at resource version rv.
func numberedPod(i int, rv string) *corev1.Pod {
	p := cpuPod(fmt.Sprintf("pod-%06d", i), fmt.Sprintf("node-%03d", i%500), "1")
	p.UID = types.UID(fmt.Sprintf("%08d-1111-2222-3333-444444444444", i))
	p.ResourceVersion = rv
	p.Labels = map[string]string{"app": "bench"}
	return p
}

// heapSink is a taskSink that measures the live heap when it is told
// which tasks a list keeps (the list's end, its pods all received).
type heapSink struct {
	taskSink
	heaps chan uint64
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func (s *heapSink) DeleteTasksExcept(keep func(string) bool) {
	s.heaps <- liveHeap()
	s.taskSink.DeleteTasksExcept(keep)
}

// BenchmarkPodRelistHeap reports how much a relist of b.N pods (a
// watch-list's, the API server having ended the watch) adds to the live
// heap at its end, when every pod has come and none is yet forgotten:
// what a shard needs beyond what it keeps. The pods are made as they are
// sent, so that only what the reflector and the store keep of them stays.
func BenchmarkPodRelistHeap(b *testing.B) {
	n := max(b.N, 1000)
	sink := &heapSink{heaps: make(chan uint64, 2)}
	store, first, second := watchedTwice(b, sink)
	stream := func(w *scriptedWatch, rv string) {
		for i := range n {
			if !w.add(numberedPod(i, rv)) {
				b.Fatal("the reflector stopped the watch-list")
			}
		}
		if !w.endInitialEvents(rv) {
			b.Fatal("the reflector stopped the watch-list before its end")
		}
	}
	stream(first, "1")
	<-sink.heaps
	<-store.Done()
	synced := liveHeap()
	b.ResetTimer()
	if !first.expire() {
		b.Fatal("the reflector stopped the watch")
	}
	stream(second, "2")
	relisted := <-sink.heaps
	b.StopTimer()
	b.ReportMetric(float64(int64(relisted)-int64(synced))/float64(n), "relist-B/pod")
	b.ReportMetric(float64(synced)/float64(n), "synced-B/pod")
}

// A watch-list's pods reach the sink as they come, before the list ends;
// its end forgets what it did not list, and a relist is the same.
func TestPodStoreHandsAWatchListsPodsOnAsTheyCome(t *testing.T) {
	sink := &taskSink{}
	store, first, second := watchedTwice(t, sink)

	send := func(ok bool) {
		t.Helper()
		if !ok {
			t.Fatal("the reflector stopped the watch")
		}
	}
	send(first.add(cpuPod("a", "n0", "1")))
	send(first.add(cpuPod("b", "", "1")))
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, a := sink.task("uid-a")
		_, b := sink.task("uid-b")
		return a && b
	}, "a watch-list's pods did not reach the sink before its end")
	if cache.IsDone(store) {
		t.Fatal("synced before the watch-list's end")
	}
	send(first.endInitialEvents("5"))
	select {
	case <-store.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("not synced after the watch-list's end")
	}

	// The watch expires; the relist changes a and leaves b out.
	send(first.expire())
	send(second.add(cpuPod("a", "n1", "2")))
	testenv.Eventually(t, 30*time.Second, func() bool {
		a, _ := sink.task("uid-a")
		return a.NodeName == "n1"
	}, "a relist's pod did not reach the sink before its end")
	if _, ok := sink.task("uid-b"); !ok {
		t.Fatal("b forgotten before the relist's end")
	}
	send(second.endInitialEvents("9"))
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, ok := sink.task("uid-b")
		return !ok
	}, "b, not relisted, is still in the sink")
	if a, ok := sink.task("uid-a"); !ok || a.NodeName != "n1" || a.Request.MilliCPU != 2000 {
		t.Errorf("a after the relist: %+v (%v)", a, ok)
	}
}
