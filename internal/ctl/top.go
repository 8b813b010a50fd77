package ctl

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/kube"
)

// Top is the busiest queues and the slowest jobs.
type Top struct {
	// Queues are the leaf queues by CPU allocated against capability
	// (those without a CPU capability by CPU allocated), fullest first.
	Queues []TopQueue `json:"queues"`
	// Slowest are the jobs whose pods took longest from creation to bound
	// (the slowest pod of each job), among those bound within Window.
	Slowest []TopJob `json:"slowest"`
	// Waiting are the jobs whose oldest unbound pod has waited longest.
	Waiting []TopJob `json:"waiting"`
	Window  string   `json:"window"`
}

// TopQueue is one queue's CPU use.
type TopQueue struct {
	Queue     string  `json:"queue"`
	Allocated string  `json:"allocated"`
	Capacity  string  `json:"capability,omitempty"`
	Used      float64 `json:"usedFraction,omitempty"`
	Running   int32   `json:"running"`
	Pending   int32   `json:"pending"`
}

// TopJob is one job's wait.
type TopJob struct {
	Job   string `json:"job"`
	Queue string `json:"queue,omitempty"`
	Wait  string `json:"wait"`
	Pods  int    `json:"pods"`
	wait  time.Duration
}

// MakeTop computes Top from w as of now: n rows per list, jobs bound
// within window.
func MakeTop(w *World, now time.Time, n int, window time.Duration) *Top {
	t := &Top{Window: window.String()}
	for _, r := range QueueTree(w.Queues) {
		if r.LeftOut != "" || r.Name == api.RootQueue {
			continue
		}
		q := TopQueue{Queue: r.Name, Allocated: "0", Running: r.Running, Pending: r.Pending}
		if v, ok := r.Allocated[api.CPU]; ok {
			q.Allocated = v
		}
		if r.capped {
			q.Capacity = r.Capability[api.CPU]
			if r.cpuCap > 0 {
				q.Used = float64(r.cpuUsed) / float64(r.cpuCap)
			}
		}
		if r.cpuUsed > 0 || r.Pending > 0 {
			t.Queues = append(t.Queues, q)
		}
	}
	used := map[string]int64{}
	for _, r := range QueueTree(w.Queues) {
		used[r.Name] = r.cpuUsed
	}
	slices.SortFunc(t.Queues, func(a, b TopQueue) int {
		return cmp.Or(cmp.Compare(b.Used, a.Used), cmp.Compare(used[b.Queue], used[a.Queue]), strings.Compare(a.Queue, b.Queue))
	})
	t.Queues = t.Queues[:min(len(t.Queues), n)]

	queueOf := map[string]string{}
	for _, g := range w.Groups {
		q := g.Spec.Queue
		if q == "" {
			q = api.DefaultQueue
		}
		queueOf[g.Namespace+"/"+g.Name] = q
	}
	bound, waiting := map[string]*TopJob{}, map[string]*TopJob{}
	for i := range w.Pods {
		p := &w.Pods[i]
		group := p.Annotations[kube.GroupNameAnnotation]
		if group == "" {
			group = kube.ImplicitGroupName(p)
		}
		key := p.Namespace + "/" + group
		created := p.CreationTimestamp.Time
		if p.Spec.NodeName == "" {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			addWait(waiting, key, queueOf[key], now.Sub(created))
			continue
		}
		at := scheduledAt(p)
		if at.IsZero() || now.Sub(at) > window {
			continue
		}
		addWait(bound, key, queueOf[key], at.Sub(created))
	}
	t.Slowest, t.Waiting = slowest(bound, n), slowest(waiting, n)
	return t
}

func addWait(m map[string]*TopJob, key, queue string, d time.Duration) {
	j := m[key]
	if j == nil {
		j = &TopJob{Job: key, Queue: queue}
		m[key] = j
	}
	j.Pods++
	j.wait = max(j.wait, d)
}

func slowest(m map[string]*TopJob, n int) []TopJob {
	out := make([]TopJob, 0, len(m))
	for _, j := range m {
		j.Wait = j.wait.Round(time.Millisecond).String()
		out = append(out, *j)
	}
	slices.SortFunc(out, func(a, b TopJob) int { return cmp.Or(cmp.Compare(b.wait, a.wait), strings.Compare(a.Job, b.Job)) })
	return out[:min(len(out), n)]
}

// scheduledAt is when the pod was bound: its PodScheduled condition, which
// the API server sets at the binding.
func scheduledAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// WriteTop prints t as three short tables.
func WriteTop(w io.Writer, t *Top) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUSIEST QUEUES\tCPU ALLOCATED\tCAPABILITY\tUSED\tRUNNING\tPENDING")
	for _, q := range t.Queues {
		c, u := "∞", "-"
		if q.Capacity != "" {
			c, u = q.Capacity, fmt.Sprintf("%.0f%%", 100*q.Used)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", q.Queue, q.Allocated, c, u, q.Running, q.Pending)
	}
	fmt.Fprintf(tw, "\nSLOWEST JOBS (bound within %s)\tQUEUE\tCREATED→BOUND\tPODS\t\t\n", t.Window)
	for _, j := range t.Slowest {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t\t\n", j.Job, j.Queue, j.Wait, j.Pods)
	}
	fmt.Fprintln(tw, "\nWAITING LONGEST\tQUEUE\tWAITING\tPODS\t\t")
	for _, j := range t.Waiting {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t\t\n", j.Job, j.Queue, j.Wait, j.Pods)
	}
	return tw.Flush()
}
