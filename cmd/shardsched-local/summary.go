package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"
)

// summary prints the live view: queues, shards, pods/s, and the spans
// with -spans.
type summary struct {
	cs        kubernetes.Interface
	vc        volcano.Interface
	shards    []*shardProc
	spans     *spanReceiver // nil without -spans
	tty       bool
	lastBound int
	lastAt    time.Time
}

func isTTY() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (s *summary) print(ctx context.Context) {
	var b strings.Builder
	if s.tty {
		b.WriteString("\033[H\033[2J")
	}
	fmt.Fprintf(&b, "shardsched local cluster — %s\n\n", time.Now().Format("15:04:05"))
	qs, err := s.vc.SchedulingV1beta1().Queues().List(ctx, metav1.ListOptions{})
	if err == nil {
		sort.Slice(qs.Items, func(i, j int) bool { return qs.Items[i].Name < qs.Items[j].Name })
		fmt.Fprintf(&b, "%-18s %-10s %9s %9s %8s %8s %8s\n", "QUEUE", "PARENT", "CPU USED", "CPU CAP", "RUNNING", "INQUEUE", "PENDING")
		for _, q := range qs.Items {
			used := q.Status.Allocated[corev1.ResourceCPU]
			capStr := "-"
			if c, ok := q.Spec.Capability[corev1.ResourceCPU]; ok {
				capStr = c.String()
			}
			fmt.Fprintf(&b, "%-18s %-10s %9s %9s %8d %8d %8d\n", q.Name, q.Spec.Parent, used.String(), capStr, q.Status.Running, q.Status.Inqueue, q.Status.Pending)
		}
	}
	fmt.Fprintf(&b, "\n%-9s %-8s %-7s %6s %8s %8s %7s\n", "SHARD", "PID", "STATE", "KEYS", "BINDS", "MEMBERS", "LEADER")
	for _, p := range s.shards {
		state := "up"
		m := map[string]float64{}
		if !p.alive() {
			state = "down"
		} else {
			mctx, cancel := context.WithTimeout(ctx, time.Second)
			m = p.metrics(mctx)
			cancel()
		}
		leader := ""
		if m["coordinator_leader"] == 1 {
			leader = "yes"
		}
		fmt.Fprintf(&b, "%-9s %-8d %-7s %6.0f %8.0f %8.0f %7s\n", p.name, p.cmd.Process.Pid, state, m["owned_keys"], m["binds_total"], m["gossip_members"], leader)
	}
	pods, err := s.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err == nil {
		bound, pending := 0, 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			} else {
				pending++
			}
		}
		rate := 0.0
		if !s.lastAt.IsZero() {
			rate = float64(bound-s.lastBound) / time.Since(s.lastAt).Seconds()
		}
		s.lastBound, s.lastAt = bound, time.Now()
		fmt.Fprintf(&b, "\npods: %d bound, %d pending, %.0f binds/s\n", bound, pending, rate)
	}
	if s.spans != nil {
		s.spans.view().render(&b)
	}
	fmt.Print(b.String())
}
