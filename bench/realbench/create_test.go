package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// twoJobs is a plan of two jobs of four pods, a-0..a-3 and b-0..b-3.
func twoJobs(run runSpec) podPlan {
	var p podPlan
	for _, job := range []string{"a", "b"} {
		var unit []*corev1.Pod
		for i := range 4 {
			unit = append(unit, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", job, i), Namespace: run.namespace}})
		}
		p.units, p.pods = append(p.units, unit), p.pods+len(unit)
	}
	return p
}

// gatedCreate is a create call that gives a pod its name as UID and, for
// job a, waits until all four of a's creates are in flight (or a second
// has passed: then the create fails).
func gatedCreate() func(context.Context, *corev1.Pod) (*corev1.Pod, error) {
	var mu sync.Mutex
	inFlight := 0
	all := make(chan struct{})
	return func(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
		p = p.DeepCopy()
		p.UID = types.UID(p.Name)
		if p.Name[0] == 'a' {
			mu.Lock()
			inFlight++
			if inFlight == 4 {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(time.Second):
				return nil, fmt.Errorf("%s: job a's pods were not created side by side", p.Name)
			}
		}
		return p, nil
	}
}

// Four creators make a job's four pods side by side (each create of job a
// waits for the other three), and every pod of a job is told when the
// latest of its job's create calls was made; with -serial-job-pods a
// creator makes them one after the other, which the gate refuses.
func TestCreatePodsMakesAJobsPodsSideBySide(t *testing.T) {
	run := runSpec{namespace: "bench"}
	w := newBindWatch()
	if _, err := createPods(context.Background(), gatedCreate(), 4, twoJobs(run), w, false); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a", "b"} {
		var latest time.Time
		for i := range 4 {
			uid := types.UID(fmt.Sprintf("%s-%d", job, i))
			if w.created[uid].After(latest) {
				latest = w.created[uid]
			}
		}
		for i := range 4 {
			uid := types.UID(fmt.Sprintf("%s-%d", job, i))
			if got := w.lastOfJob[uid]; !got.Equal(latest) {
				t.Errorf("%s: its job's last create call at %v, want the latest of the job's, %v", uid, got, latest)
			}
		}
	}
	if _, err := createPods(context.Background(), gatedCreate(), 4, twoJobs(run), newBindWatch(), true); err == nil {
		t.Error("serial: job a's pods were created side by side")
	}
}

// A create that fails for the server (a lost connection, 503) is made
// again; one whose earlier attempt landed unanswered (AlreadyExists on a
// retry) is read back; one refused for itself (422), or AlreadyExists on
// the first attempt, is not retried; and the retries end.
func TestCreateRetrying(t *testing.T) {
	b := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}}
	gr := schema.GroupResource{Resource: "pods"}
	lost := errors.New("http2: client connection lost")
	// script answers the creates in turn, then the last answer for ever.
	script := func(answers ...error) (func(context.Context) (*corev1.Pod, error), *int) {
		n := 0
		return func(context.Context) (*corev1.Pod, error) {
			err := answers[min(n, len(answers)-1)]
			n++
			if err != nil {
				return nil, err
			}
			return pod, nil
		}, &n
	}
	gets := 0
	get := func(context.Context) (*corev1.Pod, error) { gets++; return pod, nil }
	for _, c := range []struct {
		name    string
		answers []error
		creates int
		gets    int
		wantErr bool
	}{
		{"a lost connection, then created", []error{lost, nil}, 2, 0, false},
		{"a 503, then landed unanswered", []error{apierrors.NewServiceUnavailable("busy"), apierrors.NewAlreadyExists(gr, "p")}, 2, 1, false},
		{"a 429, then created", []error{apierrors.NewTooManyRequests("slow down", 1), nil}, 2, 0, false},
		{"refused for itself", []error{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil)}, 1, 0, true},
		{"already there before any retry", []error{apierrors.NewAlreadyExists(gr, "p")}, 1, 0, true},
		{"never answered", []error{lost}, 4, 0, true},
	} {
		gets = 0
		create, n := script(c.answers...)
		got, err := createRetrying(context.Background(), b, create, get)
		if *n != c.creates || gets != c.gets || (err != nil) != c.wantErr {
			t.Errorf("%s: %d creates, %d gets, err %v; want %d, %d, an error %v", c.name, *n, gets, err, c.creates, c.gets, c.wantErr)
		}
		if err == nil && got.UID != pod.UID {
			t.Errorf("%s: got %v, want the pod", c.name, got)
		}
	}
	// The run's end stops the retries at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	create, _ := script(lost)
	if _, err := createRetrying(ctx, b, create, get); !errors.Is(err, context.Canceled) {
		t.Errorf("after the run's end: %v, want context.Canceled", err)
	}
}
