package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"

	"github.com/shardsched/shardsched/api"
)

// TestMain turns off the WatchList client feature for this package's
// informers: Volcano's fake clientset never sends the bookmark that ends a
// watch-list, so an informer on it would never sync. It must be set before
// client-go first reads its feature gates (once per process).
func TestMain(m *testing.M) {
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// An operator's default Queue is kept as it is; the missing root is created.
func TestEnsureDefaultQueuesCreatesOnlyMissing(t *testing.T) {
	ctx := context.Background()
	vc := vfake.NewSimpleClientset(&schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: api.DefaultQueue}, Spec: schedv1beta1.QueueSpec{Weight: 7}})
	if err := EnsureDefaultQueues(ctx, vc); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDefaultQueues(ctx, vc); err != nil {
		t.Fatalf("second call: %v", err)
	}
	def, err := vc.SchedulingV1beta1().Queues().Get(ctx, api.DefaultQueue, metav1.GetOptions{})
	if err != nil || def.Spec.Weight != 7 || def.Spec.Parent != "" {
		t.Fatalf("operator's default = %+v, %v; want weight 7 untouched", def, err)
	}
	root, err := vc.SchedulingV1beta1().Queues().Get(ctx, api.RootQueue, metav1.GetOptions{})
	if err != nil || root.Spec.Weight != 1 || root.Spec.Parent != "" {
		t.Fatalf("root = %+v, %v", root, err)
	}
	// Both missing: default is created under root, reclaimable.
	vc = vfake.NewSimpleClientset()
	if err := EnsureDefaultQueues(ctx, vc); err != nil {
		t.Fatal(err)
	}
	def, err = vc.SchedulingV1beta1().Queues().Get(ctx, api.DefaultQueue, metav1.GetOptions{})
	if err != nil || def.Spec.Parent != api.RootQueue || def.Spec.Weight != 1 || def.Spec.Reclaimable == nil || !*def.Spec.Reclaimable {
		t.Fatalf("default = %+v, %v; want under root, weight 1, reclaimable", def, err)
	}
}

// fakeObjects is the reporter's view of the Queue objects, read from the
// fake clientset (as the informer cache would show them).
type fakeObjects struct {
	t  *testing.T
	vc *vfake.Clientset
}

func (f fakeObjects) InvalidQueueMarks() map[string]string {
	out := map[string]string{}
	list, err := f.vc.SchedulingV1beta1().Queues().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, q := range list.Items {
		if v, ok := q.Annotations[InvalidQueueAnnotation]; ok {
			out[q.Name] = v
		}
	}
	return out
}

func (f fakeObjects) QueueUID(name string) string {
	q, err := f.vc.SchedulingV1beta1().Queues().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return string(q.UID)
}

func countPatches(vc *vfake.Clientset) int {
	n := 0
	for _, a := range vc.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// The reporter marks a left-out queue once (not again while its reason is
// the same), re-marks it when the reason changes, clears the mark when the
// queue is valid again, and writes only for the queues that are its own.
func TestQueueReporterMarksAndClears(t *testing.T) {
	ctx := context.Background()
	mk := func(name string) *schedv1beta1.Queue {
		return &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	}
	vc := vfake.NewSimpleClientset(mk("loop"), mk("other"), mk("fine"))
	r := NewQueueReporter(NewStatusWriter(vc, "test"), nil, fakeObjects{t, vc}, func(q string) bool { return q != "other" }, nil)
	mark := func(name string) string { return fakeObjects{t, vc}.InvalidQueueMarks()[name] }

	r.Report(map[string]error{"loop": errors.New("queue cycle: loop -> x -> loop"), "other": errors.New("not mine"), "": errors.New("empty name")})
	r.reconcile(ctx)
	if got := mark("loop"); !strings.Contains(got, "cycle") {
		t.Fatalf("loop's mark %q, want the cycle", got)
	}
	if got := mark("other"); got != "" {
		t.Fatalf("a queue of another shard marked %q", got)
	}
	before := countPatches(vc)
	r.reconcile(ctx)
	r.reconcile(ctx)
	if n := countPatches(vc) - before; n != 0 {
		t.Fatalf("%d patches for an unchanged reason, want 0", n)
	}
	r.Report(map[string]error{"loop": errors.New("unknown parent queue: loop names ghost")})
	r.reconcile(ctx)
	if got := mark("loop"); !strings.Contains(got, "ghost") {
		t.Fatalf("loop's mark %q after the reason changed, want ghost", got)
	}
	r.Report(nil)
	r.reconcile(ctx)
	objs := fakeObjects{t, vc}
	if got, ok := objs.InvalidQueueMarks()["loop"]; ok {
		t.Fatalf("loop still marked %q once valid", got)
	}
	if len(r.evented) != 0 {
		t.Fatalf("events remembered for valid queues: %v", r.evented)
	}
}

type nopSink struct{}

func (nopSink) AddOrUpdateNode(api.Node)            {}
func (nopSink) DeleteNode(string, string)           {}
func (nopSink) AddOrUpdateTask(api.Task)            {}
func (nopSink) DeleteTask(string)                   {}
func (nopSink) DeleteTasksExcept(func(string) bool) {}
func (nopSink) AddOrUpdateJob(api.Job)              {}
func (nopSink) DeleteJob(string)                    {}

type queueCall struct {
	specs []api.QueueSpec
	bad   map[string]error
}

// The Source calls onQueues after its first sync and then only when a spec
// or a conversion error changes: a status-only update calls nothing, and a
// Queue that cannot be converted is reported, not dropped.
func TestSourceReportsQueueChangesOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vc := vfake.NewSimpleClientset(&schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: schedv1beta1.QueueSpec{Weight: 1}})
	calls := make(chan queueCall, 16)
	src := NewSource(kfake.NewSimpleClientset(), vc, nopSink{}, func(specs []api.QueueSpec, bad map[string]error) {
		calls <- queueCall{specs, bad}
	}, nil)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel() // the informers stop with ctx; Shutdown waits for them
		src.Shutdown()
	}()
	next := func(what string) queueCall {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("no onQueues call after %s", what)
		}
		return queueCall{}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case c := <-calls:
			t.Fatalf("onQueues called after %s: %+v", what, c)
		case <-time.After(500 * time.Millisecond):
		}
	}
	if c := next("start"); len(c.specs) != 1 || c.specs[0].Name != "a" || len(c.bad) != 0 {
		t.Fatalf("first call %+v", c)
	}
	queues := vc.SchedulingV1beta1().Queues()
	q, err := queues.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status.Running = 3
	if _, err := queues.UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	quiet("a status-only update")
	q.Spec.Weight = 2
	if _, err := queues.Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := next("a weight change"); len(c.specs) != 1 || c.specs[0].Weight != 2 {
		t.Fatalf("after the weight change %+v", c)
	}
	neg := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "neg"},
		Spec: schedv1beta1.QueueSpec{Capability: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}}}
	if _, err := queues.Create(ctx, neg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := next("a bad Queue")
	if len(c.specs) != 1 || !errors.Is(c.bad["neg"], api.ErrNegative) {
		t.Fatalf("after a bad Queue %+v, want it in bad wrapping ErrNegative", c)
	}
	if err := queues.Delete(ctx, "neg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := next("the bad Queue's deletion"); len(c.bad) != 0 {
		t.Fatalf("after deleting the bad Queue %+v", c)
	}
	quiet("nothing")
}
