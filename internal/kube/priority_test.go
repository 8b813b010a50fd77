package kube

import (
	"context"
	"testing"
	"time"

	schedv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"

	"github.com/shardsched/shardsched/api"
)

// jobSink passes every job the Source hands it to a channel.
type jobSink struct {
	nopSink
	jobs chan api.Job
}

func (s jobSink) AddOrUpdateJob(j api.Job) { s.jobs <- j }

// A PodGroup's priorityClassName is resolved to the class's value; a name
// with no class takes the global default's value (0 without one); a class
// created or changed later re-converts the PodGroups that name it.
func TestSourceResolvesPodGroupPriorityClass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kfake.NewSimpleClientset(&schedv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000})
	pg := func(name, class string) *schedv1beta1.PodGroup {
		return &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec: schedv1beta1.PodGroupSpec{MinMember: 1, PriorityClassName: class}}
	}
	vc := vfake.NewSimpleClientset(pg("a", "high"), pg("b", "later"), pg("c", ""))
	sink := jobSink{jobs: make(chan api.Job, 64)}
	src := NewSource(cs, vc, sink, nil, nil)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		src.Shutdown()
	}()
	latest := map[string]api.Job{}
	// wait reads jobs until every wanted priority is seen.
	wait := func(what string, want map[string]int32) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			ok := true
			for name, p := range want {
				if j, seen := latest[name]; !seen || j.Priority != p {
					ok = false
				}
			}
			if ok {
				return
			}
			select {
			case j := <-sink.jobs:
				latest[j.Name] = j
			case <-deadline:
				t.Fatalf("%s: got %+v, want priorities %v", what, latest, want)
			}
		}
	}
	wait("start", map[string]int32{"a": 1000, "b": 0, "c": 0})
	if latest["a"].PriorityClass != "high" || latest["c"].PriorityClass != "" {
		t.Fatalf("classes not carried: %+v", latest)
	}
	// A global default applies to a name without a class, not to a
	// PodGroup that names none (its pods' priority orders it).
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "normal"}, Value: 50, GlobalDefault: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("a global default", map[string]int32{"a": 1000, "b": 50})
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "later"}, Value: 7}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the named class created", map[string]int32{"b": 7})
	if err := cs.SchedulingV1().PriorityClasses().Delete(ctx, "high", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("its class deleted", map[string]int32{"a": 50})
	if latest["c"].Priority != 0 {
		t.Fatalf("a PodGroup naming no class got priority %d", latest["c"].Priority)
	}
}
