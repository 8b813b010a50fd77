package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
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
