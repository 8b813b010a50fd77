package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/shardsched/shardsched/internal/testenv"
)

// churnBackoff retries node writes that conflict with kwok's heartbeats and
// with the other churn goroutines.
var churnBackoff = wait.Backoff{Steps: 30, Duration: 2 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Cap: 100 * time.Millisecond}

// setNodeCPU sets a node's allocatable (and capacity) cpu through the status
// subresource, retrying on conflict.
func (ev *env) setNodeCPU(ctx context.Context, name, cpu string) error {
	q := resource.MustParse(cpu)
	return retry.RetryOnConflict(churnBackoff, func() error {
		n, err := ev.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Status.Allocatable == nil {
			n.Status.Allocatable = corev1.ResourceList{}
		}
		if n.Status.Capacity == nil {
			n.Status.Capacity = corev1.ResourceList{}
		}
		n.Status.Allocatable[corev1.ResourceCPU] = q
		n.Status.Capacity[corev1.ResourceCPU] = q
		_, err = ev.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// setNodeLabel adds (value != "") or removes (value == "") a node label,
// retrying on conflict.
func (ev *env) setNodeLabel(ctx context.Context, name, key, value string) error {
	return retry.RetryOnConflict(churnBackoff, func() error {
		n, err := ev.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if value == "" {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = value
		}
		_, err = ev.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// boundMilliCPU sums the cpu requests of the non-terminal pods bound to a
// node, in every namespace, as the API server reports them.
func (ev *env) boundMilliCPU(ctx context.Context, node string) (int64, int, error) {
	pods, err := ev.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, 0, err
	}
	var sum int64
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		n++
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
				sum += q.MilliValue()
			}
		}
	}
	return sum, n, nil
}

// nodeCPU is a node's allocatable cpu in millicores as the API server has it.
func (ev *env) nodeCPU(ctx context.Context, node string) (int64, error) {
	n, err := ev.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	q := n.Status.Allocatable[corev1.ResourceCPU]
	return q.MilliValue(), nil
}

// eventMessages lists the messages of a pod's events with reason.
func (ev *env) eventMessages(pod, reason string) []string {
	evs, err := ev.cs.CoreV1().Events(ev.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range evs.Items {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestNodeChurnWhileScheduling is failure F1 through the real daemon: nodes
// change (allocatable and labels) from several writers while pods are
// created and scheduled. Every pod is bound to a node that exists, no node
// is booked over the most it ever had, the daemon keeps serving afterwards,
// and -race sees no data race between the informer handlers, the cache, the
// scheduling loop and the bind workers.
func TestNodeChurnWhileScheduling(t *testing.T) {
	ev := newEnv(t)
	const (
		prefix  = "f1-node"
		nNodes  = 10
		nPods   = 40
		maxCPU  = 16 // the most any node ever has
		minCPU  = 8
		churnAt = 4 * time.Second // minimum duration of the churn
	)
	ev.nodes(prefix, nNodes, fmt.Sprint(minCPU), "32Gi")
	names := make([]string, nNodes)
	valid := map[string]bool{}
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		valid[names[i]] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var statusWrites, labelWrites, skippedShrinks atomic.Int64
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// Two allocatable writers, each over half of the nodes, alternating
	// 16 and 8 CPU; a node is shrunk to 8 only when what is bound fits.
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			high := true // the nodes start at 8: go up first
			for round := 0; !stopped(); round++ {
				for i := g; i < nNodes && !stopped(); i += 2 {
					cpu := maxCPU
					if !high {
						used, _, err := ev.boundMilliCPU(ctx, names[i])
						if err != nil {
							t.Errorf("list pods on %s: %v", names[i], err)
							return
						}
						if used > minCPU*1000 {
							skippedShrinks.Add(1)
							continue
						}
						cpu = minCPU
					}
					if err := ev.setNodeCPU(ctx, names[i], fmt.Sprint(cpu)); err != nil {
						if apierrors.IsConflict(err) {
							continue // still conflicting after the retries: try again next round
						}
						t.Errorf("update status of %s: %v", names[i], err)
						return
					}
					statusWrites.Add(1)
				}
				high = !high
			}
		}(g)
	}
	// One label writer over every node, adding and removing a label.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 0; !stopped(); round++ {
			for i := 0; i < nNodes && !stopped(); i++ {
				value := ""
				if (round+i)%2 == 0 {
					value = fmt.Sprintf("r%d", round)
				}
				if err := ev.setNodeLabel(ctx, names[i], "f1-churn", value); err != nil {
					if apierrors.IsConflict(err) {
						continue
					}
					t.Errorf("update labels of %s: %v", names[i], err)
					return
				}
				labelWrites.Add(1)
			}
		}
	}()

	// Pods arrive while the nodes churn.
	start := time.Now()
	for i := 0; i < nPods; i++ {
		name := fmt.Sprintf("f1-job-%d", i)
		ev.podGroup(name, "default", 1)
		ev.pod(name+"-0", name, "1", "256Mi", nil)
		time.Sleep(40 * time.Millisecond) // pacing, not an assertion
	}
	if d := time.Until(start.Add(churnAt)); d > 0 {
		time.Sleep(d) // let the churn run its minimum duration
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("churn: %d status writes, %d label writes, %d shrinks skipped because pods were bound",
		statusWrites.Load(), labelWrites.Load(), skippedShrinks.Load())
	if statusWrites.Load() < int64(nNodes) || labelWrites.Load() < int64(nNodes) {
		t.Fatalf("too little churn to test anything: %d status writes, %d label writes", statusWrites.Load(), labelWrites.Load())
	}
	// Settle: every node at its maximum, the label gone.
	for _, n := range names {
		if err := ev.setNodeCPU(ctx, n, fmt.Sprint(maxCPU)); err != nil {
			t.Fatalf("settle %s: %v", n, err)
		}
		if err := ev.setNodeLabel(ctx, n, "f1-churn", ""); err != nil {
			t.Fatalf("settle %s: %v", n, err)
		}
	}

	testenv.Eventually(ev.t, 90*time.Second, func() bool {
		for i := 0; i < nPods; i++ {
			if ev.nodeOf(fmt.Sprintf("f1-job-%d-0", i)) == "" {
				return false
			}
		}
		return true
	}, "all %d pods are bound", nPods)
	perNode := map[string]int{}
	for i := 0; i < nPods; i++ {
		pod := fmt.Sprintf("f1-job-%d-0", i)
		node := ev.nodeOf(pod)
		if !valid[node] {
			t.Errorf("pod %s bound to %q, which is not one of the test's nodes", pod, node)
			continue
		}
		if _, err := ev.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s bound to node %s that does not exist: %v", pod, node, err)
		}
		perNode[node]++
	}
	t.Logf("pods per node: %v", perNode)
	// No node ever had more than maxCPU, so none may hold more.
	for _, n := range names {
		used, count, err := ev.boundMilliCPU(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if used > maxCPU*1000 {
			t.Errorf("node %s is overbooked: %d pods, %dm cpu bound, never had more than %d cpu", n, count, used, maxCPU)
		}
	}
	// With every node back at its maximum, no book is out of sync.
	testenv.Eventually(ev.t, 20*time.Second, func() bool {
		for _, n := range ev.d.Cache.OutOfSync() {
			if valid[n] {
				return false
			}
		}
		return true
	}, "no churned node is out of sync")
	t.Logf("cache stats after churn: %+v", ev.d.Cache.Stats())

	// Still serving.
	ev.podGroup("f1-final", "default", 1)
	ev.pod("f1-final-0", "f1-final", "1", "256Mi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("f1-final-0") != "" }, "a pod created after the churn is bound")
	if n := ev.nodeOf("f1-final-0"); !valid[n] {
		t.Fatalf("the final pod went to %q, not one of the test's nodes", n)
	}
}
