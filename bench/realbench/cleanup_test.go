package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
	podGVK  = corev1.SchemeGroupVersion.WithKind("Pod")
)

// errStreamReset is what a client sees when the API server resets the
// HTTP/2 stream of a call that takes too long.
var errStreamReset = errors.New("stream error: stream ID 1003; INTERNAL_ERROR; received from peer")

// testDeleteConfig is defaultDeleteConfig with waits short enough for a
// unit test; log collects what clearPods tells.
func testDeleteConfig(log *strings.Builder) deleteConfig {
	cfg := defaultDeleteConfig()
	cfg.batch, cfg.backoff, cfg.poll, cfg.stall, cfg.maxWait = 64, time.Millisecond, time.Millisecond, 20*time.Millisecond, time.Second
	cfg.log = log
	return cfg
}

// fakeCluster is a fake clientset holding n pods in namespace "bench" and
// 3 in "other", whose pod lists honour Limit and Continue as the API
// server does (the fake's own ignore them).
func fakeCluster(t *testing.T, n int) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset()
	for ns, count := range map[string]int{"bench": n, "other": 3} {
		for i := range count {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: ns}}
			if err := cs.Tracker().Add(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		la := a.(k8stesting.ListActionImpl)
		l, err := pagedList(cs, la.GetNamespace(), la.ListOptions)
		return true, l, err
	})
	return cs
}

// pagedList is the page of ns's pods that opts asks for, in name order;
// Continue is the last name of the page.
func pagedList(cs *fake.Clientset, ns string, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := cs.Tracker().List(podsGVR, podGVK, ns)
	if err != nil {
		return nil, err
	}
	l := obj.(*corev1.PodList)
	slices.SortFunc(l.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	l.Items = slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.Name <= opts.Continue })
	if opts.Limit > 0 && int64(len(l.Items)) > opts.Limit {
		rest := int64(len(l.Items)) - opts.Limit
		l.Items = l.Items[:opts.Limit]
		l.Continue, l.RemainingItemCount = l.Items[len(l.Items)-1].Name, &rest
	}
	return l, nil
}

// podsIn is the number of pods the fake holds in ns.
func podsIn(t *testing.T, cs *fake.Clientset, ns string) int {
	t.Helper()
	obj, err := cs.Tracker().List(podsGVR, podGVK, ns)
	if err != nil {
		t.Fatal(err)
	}
	return len(obj.(*corev1.PodList).Items)
}

// countVerb counts the actions of verb on pods that the fake received.
func countVerb(cs *fake.Clientset, verb string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource() == podsGVR {
			n++
		}
	}
	return n
}

// failDeleteCollection makes every DeleteCollection of pods fail with err.
func failDeleteCollection(cs *fake.Clientset, err error) {
	cs.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
}

func TestDeletePodsByDeleteCollection(t *testing.T) {
	cs := fakeCluster(t, 300)
	// The fake does not implement DeleteCollection: do as the server does.
	cs.PrependReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := cs.Tracker().List(podsGVR, podGVK, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range obj.(*corev1.PodList).Items {
			if err := cs.Tracker().Delete(podsGVR, p.Namespace, p.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	var log strings.Builder
	if err := clearPods(context.Background(), cs, "bench", testDeleteConfig(&log)); err != nil {
		t.Fatalf("clearPods: %v", err)
	}
	if n := podsIn(t, cs, "bench"); n != 0 {
		t.Errorf("%d pods left in bench", n)
	}
	if n := countVerb(cs, "delete"); n != 0 || log.Len() != 0 {
		t.Errorf("DeleteCollection succeeded, yet %d single deletes were made and the log says %q", n, log.String())
	}
}

func TestDeletePodsWhenDeleteCollectionFails(t *testing.T) {
	for _, failure := range []error{errStreamReset, apierrors.NewTimeoutError("request did not complete within 1m0s", 0), context.DeadlineExceeded} {
		t.Run(failure.Error(), func(t *testing.T) {
			cs := fakeCluster(t, 1000)
			failDeleteCollection(cs, failure)
			var log strings.Builder
			if err := clearPods(context.Background(), cs, "bench", testDeleteConfig(&log)); err != nil {
				t.Fatalf("clearPods: %v", err)
			}
			if n := podsIn(t, cs, "bench"); n != 0 {
				t.Errorf("%d of 1000 pods left in bench", n)
			}
			if n := podsIn(t, cs, "other"); n != 3 {
				t.Errorf("%d pods left in namespace other, want its 3 untouched", n)
			}
			if n := countVerb(cs, "delete-collection"); n != 1 {
				t.Errorf("DeleteCollection tried %d times, want once", n)
			}
			if n := countVerb(cs, "delete"); n != 1000 {
				t.Errorf("%d single deletes, want one per pod (1000)", n)
			}
			if !strings.Contains(log.String(), "page by page") {
				t.Errorf("the fallback is not told: log %q", log.String())
			}
		})
	}
}

func TestDeletePodsRetriesFailedDeletes(t *testing.T) {
	cs := fakeCluster(t, 500)
	failDeleteCollection(cs, errStreamReset)
	var mu sync.Mutex
	tries := map[string]int{}
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		var i int
		if _, err := fmt.Sscanf(name, "pod-%d", &i); err != nil {
			return true, nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		tries[name]++
		if i%7 == 0 && tries[name] == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is slow")
		}
		return false, nil, nil // the fake deletes it
	})
	var log strings.Builder
	if err := clearPods(context.Background(), cs, "bench", testDeleteConfig(&log)); err != nil {
		t.Fatalf("clearPods: %v", err)
	}
	if n := podsIn(t, cs, "bench"); n != 0 {
		t.Errorf("%d of 500 pods left in bench", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 500 {
		name, want := fmt.Sprintf("pod-%05d", i), 1
		if i%7 == 0 {
			want = 2
		}
		if tries[name] != want {
			t.Errorf("%s: deleted %d times, want %d", name, tries[name], want)
		}
	}
}

func TestDeletePodsGivesUpNamingWhatIsLeft(t *testing.T) {
	cs := fakeCluster(t, 100)
	failDeleteCollection(cs, errStreamReset)
	stuck := apierrors.NewInternalError(errors.New("stuck"))
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if name := a.(k8stesting.DeleteAction).GetName(); name == "pod-00042" || name == "pod-00077" {
			return true, nil, stuck
		}
		return false, nil, nil
	})
	var log strings.Builder
	cfg := testDeleteConfig(&log)
	cfg.rounds = 3
	err := clearPods(context.Background(), cs, "bench", cfg)
	if err == nil || !strings.Contains(err.Error(), "pods left in namespace bench after 3 rounds of deletes: 2 ") || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("clearPods = %v, want an error naming the 2 pods left and the last failure", err)
	}
	if n := podsIn(t, cs, "bench"); n != 2 {
		t.Errorf("%d pods left in bench, want the 2 stuck ones", n)
	}
	if n := strings.Count(log.String(), "deleting them again"); n != 2 {
		t.Errorf("told %d new rounds, want 2:\n%s", n, log.String())
	}
}

func TestDeletePodsStopsWithContext(t *testing.T) {
	cs := fakeCluster(t, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cs.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // the run is interrupted while the pods are deleted
		return true, nil, context.Canceled
	})
	var log strings.Builder
	done := make(chan error, 1)
	go func() { done <- clearPods(ctx, cs, "bench", testDeleteConfig(&log)) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("clearPods = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("clearPods did not return after its context ended")
	}
	if n := countVerb(cs, "delete"); n != 0 {
		t.Errorf("%d single deletes after the context ended", n)
	}
}

func TestPodDeleterShrinksOnFailureAndGrowsBack(t *testing.T) {
	cs := fakeCluster(t, 10)
	var log strings.Builder
	d := newPodDeleter(cs, "bench", testDeleteConfig(&log)) // pages of 64, 16 deletes in flight
	for _, want := range [][2]int{{32, 8}, {16, 4}, {8, 2}, {4, 1}, {2, 1}, {1, 1}, {1, 1}} {
		if err := d.backOff(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		if d.batch != want[0] || d.workers != want[1] {
			t.Fatalf("after a failed try: page %d, %d deletes in flight; want %d, %d", d.batch, d.workers, want[0], want[1])
		}
	}
	for _, want := range [][2]int{{2, 2}, {4, 4}, {8, 8}, {16, 16}, {32, 16}, {64, 16}, {64, 16}} {
		if err := d.deletePage(context.Background(), []string{"pod-00001"}); err != nil { // deleted, then gone
			t.Fatal(err)
		}
		if d.batch != want[0] || d.workers != want[1] {
			t.Fatalf("after a page deleted at once: page %d, %d deletes in flight; want %d, %d", d.batch, d.workers, want[0], want[1])
		}
	}
}
