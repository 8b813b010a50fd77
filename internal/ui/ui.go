// Package ui is the web UI every shard serves on its HTTP port, read-only:
// the queue tree with usage against capability and deserved, the jobs
// waiting with their reasons, the shard ring, and this shard's binds and
// submit→bind latency. The page and its script are embedded in the binary
// (no CDN: clusters are often air-gapped) and poll one JSON document,
// /ui/api/overview, built by the daemon from its informer caches and its
// own counters.
package ui

import (
	"cmp"
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/internal/ctl"
)

//go:embed assets
var assets embed.FS

// Overview is the document the page renders.
type Overview struct {
	Shard   string    `json:"shard"`
	Version string    `json:"version"`
	Now     time.Time `json:"now"`
	// Shards are the members of the gossip ring as this shard sees them,
	// with what the ring gives each.
	Shards []ShardView `json:"shards"`
	// Queues is the queue tree (ctl.QueueTree): spec and status as the
	// owning shards wrote it, left-out queues last with their reason.
	Queues []ctl.QueueRow `json:"queues"`
	// Waiting are the PodGroups not running yet (at most MaxWaiting,
	// oldest first); WaitingTotal counts them all.
	Waiting      []WaitingJob `json:"waiting"`
	WaitingTotal int          `json:"waitingTotal"`
	// This shard's counters.
	Binds            int64   `json:"binds"`
	BindFailures     int64   `json:"bindFailures"`
	OwnershipChanges int64   `json:"ownershipChanges"`
	Latency          Latency `json:"latency"`
	// Evictions is what this shard evicted recently: nothing yet, since
	// preemption and reclaim are not built.
	Evictions []string `json:"evictions"`
}

// ShardView is one member of the ring.
type ShardView struct {
	Name       string `json:"name"`
	Self       bool   `json:"self"`
	Leader     bool   `json:"leader"`
	Partitions int    `json:"partitions"`
	Queues     int    `json:"queues"`
}

// WaitingJob is a PodGroup that is not running, with why, as the scheduler
// wrote it on the PodGroup.
type WaitingJob struct {
	Job     string `json:"job"`
	Queue   string `json:"queue"`
	Phase   string `json:"phase"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Age     string `json:"age"`
}

// Latency is submit→bind on this shard since it started, estimated from
// its histogram's buckets as Prometheus's histogram_quantile does.
type Latency struct {
	Count uint64 `json:"count"`
	// Seconds, or -1 when nothing was bound yet.
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// MaxWaiting bounds the waiting jobs listed (the page stays usable with
// tens of thousands pending).
const MaxWaiting = 500

// WaitingJobs lists the PodGroups in Pending or Inqueue (or with no phase
// yet), oldest first, with their Unschedulable condition.
func WaitingJobs(pgs []*schedv1beta1.PodGroup, now time.Time) ([]WaitingJob, int) {
	var w []*schedv1beta1.PodGroup
	for _, pg := range pgs {
		switch pg.Status.Phase {
		case "", schedv1beta1.PodGroupPending, schedv1beta1.PodGroupInqueue:
			w = append(w, pg)
		}
	}
	slices.SortFunc(w, func(a, b *schedv1beta1.PodGroup) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	out := make([]WaitingJob, 0, min(len(w), MaxWaiting))
	for _, pg := range w[:min(len(w), MaxWaiting)] {
		j := WaitingJob{Job: pg.Namespace + "/" + pg.Name, Queue: pg.Spec.Queue, Phase: string(pg.Status.Phase),
			Age: now.Sub(pg.CreationTimestamp.Time).Truncate(time.Second).String()}
		if j.Queue == "" {
			j.Queue = "default"
		}
		if j.Phase == "" {
			j.Phase = string(schedv1beta1.PodGroupPending)
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
				j.Reason, j.Message = c.Reason, c.Message
			}
		}
		out = append(out, j)
	}
	return out, len(w)
}

// LatencyFrom estimates quantiles from a Prometheus histogram.
func LatencyFrom(h *dto.Histogram) Latency {
	l := Latency{P50: -1, P90: -1, P99: -1}
	if h == nil || h.GetSampleCount() == 0 {
		return l
	}
	l.Count = h.GetSampleCount()
	q := func(p float64) float64 {
		rank := p * float64(l.Count)
		var prevBound float64
		var prevCount uint64
		for _, b := range h.GetBucket() {
			c := b.GetCumulativeCount()
			if float64(c) >= rank {
				ub := b.GetUpperBound()
				if math.IsInf(ub, 1) {
					return prevBound
				}
				if c == prevCount {
					return ub
				}
				return prevBound + (ub-prevBound)*(rank-float64(prevCount))/float64(c-prevCount)
			}
			prevBound, prevCount = b.GetUpperBound(), c
		}
		return prevBound
	}
	l.P50, l.P90, l.P99 = q(0.5), q(0.9), q(0.99)
	return l
}

// Handler serves the page under /ui/ and the overview at /ui/api/overview,
// built by overview for each request.
func Handler(overview func(*http.Request) (*Overview, error)) http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(assets, "assets")
	if err == nil {
		mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	}
	mux.HandleFunc("GET /ui/api/overview", func(w http.ResponseWriter, r *http.Request) {
		o, err := overview(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(o)
	})
	return mux
}
