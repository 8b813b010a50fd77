package kube

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// BenchmarkQueueStatusWrite reports what one status write costs
// kube-apiserver in CPU, on a control plane of its own (the binaries from
// make controlplane; skipped without them outside CI): a Queue's by the writer's
// server-side apply and, for comparison, by a JSON merge patch (which would
// leave behind a resource gone from allocated), and a PodGroup's by the
// writer's merge patch. Every write is a change, as in a stream of pods.
func BenchmarkQueueStatusWrite(b *testing.B) {
	if _, err := cluster.FindBinaries(); err != nil {
		if testenv.InCI() {
			b.Fatalf("CI is set and the control plane is missing: %v", err)
		}
		b.Skipf("control plane not built: %v", err)
	}
	crds, err := deploy.CRDs()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cp, err := cluster.Start(ctx, cluster.Config{CRDs: crds})
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Stop()
	vc, err := volcano.NewForConfig(cp.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	pid := cp.PIDs()["kube-apiserver"]
	w := NewStatusWriter(vc, "shardsched")
	ctx = context.Background()
	for _, q := range []string{"bench-apply", "bench-merge"} {
		if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	pg, err := vc.SchedulingV1beta1().PodGroups("default").Create(ctx, &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: schedv1beta1.PodGroupSpec{MinMember: 1}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// queue is the i-th status of a queue: each differs from the last.
	queue := func(i int) api.QueueStatus {
		return api.QueueStatus{Running: int32(i), Allocated: api.Resource{MilliCPU: int64(1000 * (i + 1)), Memory: 1 << 30}}
	}
	for _, c := range []struct {
		name  string
		write func(i int) error
	}{
		{"queue-apply", func(i int) error { return w.WriteQueueStatus(ctx, "bench-apply", queue(i)) }},
		{"queue-merge", func(i int) error {
			body, err := queueStatusMerge(queue(i))
			if err != nil {
				return err
			}
			_, err = vc.SchedulingV1beta1().Queues().Patch(ctx, "bench-merge", types.MergePatchType, body, metav1.PatchOptions{FieldManager: "shardsched"}, "status")
			return err
		}},
		{"podgroup-merge", func(i int) error {
			return w.WritePodGroupStatus(ctx, "default", "bench", string(pg.UID), api.JobStatus{Phase: api.JobRunning, Running: int32(i)})
		}},
	} {
		// Testing runs a benchmark with b.N = 1 first: the writes go on
		// counting up from where the last run left off.
		next := 0
		b.Run(c.name, func(b *testing.B) {
			c0, err := procstat.CPUOf(pid)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				next++
				if err := c.write(next); err != nil {
					b.Fatal(err)
				}
			}
			c1, err := procstat.CPUOf(pid)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(c1-c0)/float64(time.Millisecond)/float64(b.N), "apiserver-ms/write")
		})
	}
}

// queueStatusMerge is a JSON merge patch of a Queue's status fields, the
// benchmark's comparison: a resource gone from allocated would stay.
func queueStatusMerge(st api.QueueStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{
		"allocated": allocatedList(st.Allocated),
		"pending":   st.Pending,
		"running":   st.Running,
		"inqueue":   st.Inqueue,
	}})
}
