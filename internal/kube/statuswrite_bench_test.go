package kube

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
)

// BenchmarkQueueStatusWrite reports what one status write costs
// kube-apiserver in CPU, on a control plane of its own (the binaries from
// make controlplane; skipped without them): a Queue's by the writer's
// server-side apply and, for comparison, by a JSON merge patch (which would
// leave behind a resource gone from allocated), and a PodGroup's by the
// writer's merge patch. Every write is a change, as in a stream of pods.
func BenchmarkQueueStatusWrite(b *testing.B) {
	if _, err := cluster.FindBinaries(); err != nil {
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
	for _, m := range []struct {
		name  string
		write func(ctx context.Context, q string, st api.QueueStatus) error
	}{
		{"apply", w.WriteQueueStatus},
		{"merge", func(ctx context.Context, q string, st api.QueueStatus) error {
			b, err := queueStatusMerge(st)
			if err != nil {
				return err
			}
			_, err = vc.SchedulingV1beta1().Queues().Patch(ctx, q, types.MergePatchType, b, metav1.PatchOptions{FieldManager: "shardsched"}, "status")
			return err
		}},
	} {
		b.Run("queue-"+m.name, func(b *testing.B) {
			ctx := context.Background()
			q := "bench-" + m.name
			if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
			st := api.QueueStatus{Allocated: api.Resource{MilliCPU: 1000, Memory: 1 << 30}}
			if err := m.write(ctx, q, st); err != nil {
				b.Fatal(err)
			}
			c0, err := procstat.CPUOf(pid)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st.Running = int32(i + 1)
				st.Allocated.MilliCPU = int64(1000 * (i + 2))
				if err := m.write(ctx, q, st); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c1, err := procstat.CPUOf(pid)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(c1-c0)/float64(time.Millisecond)/float64(b.N), "apiserver-ms/write")
		})
	}
	b.Run("podgroup-merge", func(b *testing.B) {
		ctx := context.Background()
		pg, err := vc.SchedulingV1beta1().PodGroups("default").Create(ctx, &schedv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: schedv1beta1.PodGroupSpec{MinMember: 1}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			pg, err = vc.SchedulingV1beta1().PodGroups("default").Get(ctx, "bench", metav1.GetOptions{})
		}
		if err != nil {
			b.Fatal(err)
		}
		st := api.JobStatus{Phase: api.JobRunning}
		c0, err := procstat.CPUOf(pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			st.Running = int32(i + 1)
			if err := w.WritePodGroupStatus(ctx, "default", "bench", string(pg.UID), st); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c1, err := procstat.CPUOf(pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(c1-c0)/float64(time.Millisecond)/float64(b.N), "apiserver-ms/write")
	})
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
