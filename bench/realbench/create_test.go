package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
