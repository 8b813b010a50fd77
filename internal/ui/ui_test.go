package ui

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

func hist(count uint64, buckets map[float64]uint64) *dto.Histogram {
	h := &dto.Histogram{SampleCount: &count}
	for _, ub := range []float64{0.1, 1, 10, math.Inf(1)} {
		c := buckets[ub]
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &ub, CumulativeCount: &c})
	}
	return h
}

func TestLatencyFromBuckets(t *testing.T) {
	// 100 samples: 50 ≤ 0.1 s, 90 ≤ 1 s, 100 ≤ 10 s.
	l := LatencyFrom(hist(100, map[float64]uint64{0.1: 50, 1: 90, 10: 100, math.Inf(1): 100}))
	if l.Count != 100 || math.Abs(l.P50-0.1) > 1e-9 || math.Abs(l.P90-1) > 1e-9 || math.Abs(l.P99-9.1) > 1e-9 {
		t.Errorf("latency = %+v, want p50 0.1, p90 1, p99 9.1", l)
	}
	if l := LatencyFrom(nil); l.Count != 0 || l.P50 != -1 {
		t.Errorf("no histogram: %+v", l)
	}
	// Everything beyond the last finite bound: the bound, not +Inf.
	if l := LatencyFrom(hist(10, map[float64]uint64{math.Inf(1): 10})); l.P99 != 10 {
		t.Errorf("all in +Inf: p99 %v, want 10 (the last finite bound)", l.P99)
	}
}

func pg(name, phase string, age time.Duration, reason string) *schedv1beta1.PodGroup {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
		Status: schedv1beta1.PodGroupStatus{Phase: schedv1beta1.PodGroupPhase(phase)}}
	if reason != "" {
		p.Status.Conditions = []schedv1beta1.PodGroupCondition{{Type: schedv1beta1.PodGroupUnschedulableType, Status: corev1.ConditionTrue, Reason: reason, Message: "because"}}
	}
	return p
}

func TestWaitingJobsOldestFirstWithReasons(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	got, total := WaitingJobs([]*schedv1beta1.PodGroup{
		pg("running", "Running", time.Hour, ""), pg("young", "Pending", time.Minute, "QueueQuotaExceeded"),
		pg("old", "", time.Hour, ""), pg("inq", "Inqueue", 2*time.Minute, ""), pg("done", "Completed", time.Hour, ""),
	}, now)
	var names []string
	for _, j := range got {
		names = append(names, j.Job+":"+j.Phase+":"+j.Queue)
	}
	if total != 3 || strings.Join(names, " ") != "ns/old:Pending:default ns/inq:Inqueue:default ns/young:Pending:default" {
		t.Errorf("waiting = %v (total %d)", names, total)
	}
	if got[2].Reason != "QueueQuotaExceeded" || got[2].Message != "because" || got[2].Age != "1m0s" {
		t.Errorf("young = %+v", got[2])
	}
	many := make([]*schedv1beta1.PodGroup, MaxWaiting+7)
	for i := range many {
		many[i] = pg("j"+strings.Repeat("x", i%3), "Pending", time.Duration(i)*time.Second, "")
	}
	if got, total := WaitingJobs(many, now); len(got) != MaxWaiting || total != MaxWaiting+7 {
		t.Errorf("capped list: %d of %d", len(got), total)
	}
}

func TestHandlerServesPageAndOverview(t *testing.T) {
	srv := httptest.NewServer(Handler(func(*http.Request) (*Overview, error) {
		return &Overview{Shard: "shard-7", Latency: LatencyFrom(nil)}, nil
	}))
	defer srv.Close()
	for path, want := range map[string]string{"/ui/": "<title>shardsched</title>", "/ui/app.js": "api/overview", "/ui/style.css": ".bar", "/ui/api/overview": `"shard":"shard-7"`} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, body does not contain %q", path, resp.StatusCode, want)
		}
	}
	var o Overview
	resp, err := http.Get(srv.URL + "/ui/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || o.Latency.P99 != -1 {
		t.Errorf("overview: %+v, %v", o, err)
	}
}
