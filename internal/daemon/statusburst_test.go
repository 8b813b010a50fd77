package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/internal/testenv"
)

// TestPodBurstStatusWritesCoalesced is failure F3 through the real daemon:
// a burst of 20,000 pod creations against 10 queues. Queue status has one
// writer (the owner shard), coalesced per queue: no write conflicts, the
// pending status entries stay O(queues + podgroups), and the writes stay
// within (duration / interval) × objects + objects.
func TestPodBurstStatusWritesCoalesced(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 20,000 pods")
	}
	const (
		queues    = 10
		groupsPer = 10
		pods      = 20000
	)
	ev := newEnv(t)
	ev.nodes("f3-node", 100, "64", "256Gi")
	ctx := context.Background()
	for q := 0; q < queues; q++ {
		ev.queue(fmt.Sprintf("f3-q%d", q), "", nil)
	}
	for q := 0; q < queues; q++ {
		for g := 0; g < groupsPer; g++ {
			ev.podGroup(fmt.Sprintf("f3-q%d-g%d", q, g), fmt.Sprintf("f3-q%d", q), 1)
		}
	}
	before := ev.d.Status.Stats()
	start := time.Now()
	var created atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < pods; i += 32 {
				group := fmt.Sprintf("f3-q%d-g%d", i%queues, (i/queues)%groupsPer)
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f3-%d", i), Namespace: ev.ns,
						Annotations: map[string]string{"scheduling.k8s.io/group-name": group}},
					Spec: corev1.PodSpec{SchedulerName: schedName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
				}
				if _, err := ev.cs.CoreV1().Pods(ev.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				created.Add(1)
			}
		}(w)
	}
	// Sample the batcher while the burst runs.
	var maxPending int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if p := ev.d.Status.Stats().Pending; p > maxPending {
					maxPending = p
				}
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("create pod: %v", err)
	default:
	}
	testenv.Eventually(ev.t, 5*time.Minute, func() bool {
		return ev.d.sched.Stats().Binds >= pods
	}, "every pod is bound")
	testenv.Eventually(ev.t, time.Minute, func() bool {
		for q := 0; q < queues; q++ {
			qq, err := ev.vc.SchedulingV1beta1().Queues().Get(ctx, fmt.Sprintf("f3-q%d", q), metav1.GetOptions{})
			if err != nil {
				return false
			}
			cpu := qq.Status.Allocated[corev1.ResourceCPU]
			if cpu.MilliValue() != int64(pods/queues)*100 {
				return false
			}
		}
		return true
	}, "queue status shows every pod's CPU allocated")
	close(stop)
	<-sampled
	elapsed := time.Since(start)
	st := ev.d.Status.Stats()
	writes := st.Writes - before.Writes
	// The objects with status: this test's queues and PodGroups, plus any
	// left by earlier tests on the shared control plane (the batcher tracks
	// them all); pending entries can never exceed them.
	objects := max(queues+queues*groupsPer, st.Objects)
	interval := 200 * time.Millisecond // the test daemon's flush interval
	bound := uint64(elapsed/interval+1)*uint64(objects) + uint64(objects)
	t.Logf("%d pods in %s (%.0f pods/s): %d status writes (bound %d), %d coalesced, max pending %d (objects %d), conflicts %d",
		pods, elapsed.Round(time.Millisecond), float64(pods)/elapsed.Seconds(), writes, bound, st.Coalesced-before.Coalesced, maxPending, objects, st.Conflicts)
	if st.Conflicts != 0 {
		t.Errorf("%d status conflicts, want 0", st.Conflicts)
	}
	if maxPending > objects {
		t.Errorf("pending status entries reached %d, more than the %d objects", maxPending, objects)
	}
	if writes > bound {
		t.Errorf("%d status writes, more than the bound %d", writes, bound)
	}
}
