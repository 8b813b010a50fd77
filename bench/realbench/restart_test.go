package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pods created through roundRobinBinder by several creators are each bound
// to a node, the nodes taking them in turn (none more than one ahead of
// another), and without a node the create fails rather than sending an
// unbound pod.
func TestRoundRobinBinderSpreadsThePods(t *testing.T) {
	run := runSpec{namespace: "ns", schedName: "s", pods: 10}
	var mu sync.Mutex
	perNode := map[string]int{}
	record := func(_ context.Context, p *corev1.Pod) (*corev1.Pod, error) {
		mu.Lock()
		defer mu.Unlock()
		perNode[p.Spec.NodeName]++
		p = p.DeepCopy()
		p.UID = types.UID(p.Name)
		return p, nil
	}
	nodes := []string{"n-0", "n-1", "n-2"}
	if _, err := createPods(context.Background(), roundRobinBinder(record, nodes), 4, uniformPlan(10, 2, run), newBindWatch(), false); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range nodes {
		if c := perNode[n]; c < 3 || c > 4 {
			t.Errorf("node %s got %d pods, want 3 or 4 of 10 over 3 nodes: %v", n, c, perNode)
		}
		total += perNode[n]
	}
	if total != 10 || len(perNode) != len(nodes) {
		t.Errorf("pods per node %v: want the 10 pods on the 3 nodes", perNode)
	}
	if _, err := roundRobinBinder(record, nil)(context.Background(), &corev1.Pod{}); err == nil {
		t.Error("a pod was created with no node to bind it to")
	}
}

// validOptions are options that parse accepts (the flags' defaults).
func validOptions() options {
	return options{
		nodes: 1000, pods: 10000, creators: 32, groups: 100, timeout: time.Minute, restarts: 1,
		quiet: quietWait{below: 0.3, max: time.Minute}, idleWindow: 5 * time.Second, rate: 100, chaosShards: 4,
		fault: faultOptions{seeds: 1, stream: 12 * time.Second, timeout: 90 * time.Second, victim: victimAny},
		shape: uniformShape(),
	}
}

// Restart mode takes up to maxRestartPods pods with shardsched-proc-N
// systems only, and no workload; the modes that schedule the pods keep
// their bound. Each refusal names what is wrong.
func TestRestartModeOptions(t *testing.T) {
	for _, c := range []struct {
		name, modes, systems string
		nodes, pods          int
		workload             bool
		want                 string // "" when accepted
	}{
		{"1M cores", "restart", "shardsched-proc-1,shardsched-proc-3", 16000, 250000, false, ""},
		{"the bound", "restart", "shardsched-proc-1", 16000, maxRestartPods + 1, false, "-pods=300001"},
		{"stream beside it", "stream,restart", "shardsched-proc-1", 16000, 250000, false, "at most 200000 in stream and backlog"},
		{"in-process system", "restart", "shardsched-proc-1,shardsched-1", 1000, 1000, false, "system shardsched-1 is not a shardsched-proc-N"},
		{"the binder", "restart", "binder", 1000, 1000, false, "system binder is not"},
		{"over the fill", "restart", "shardsched-proc-1", 10, 577, false, "more than 90 %"},
		{"a workload", "restart", "shardsched-proc-1", 1000, 1000, true, "not with -workload"},
	} {
		o := validOptions()
		o.nodes, o.pods = c.nodes, c.pods
		err := o.parse(c.modes, c.systems)
		if err == nil {
			if c.workload {
				o.workload = &benchWorkload{}
			}
			err = checkRestartOptions(&o)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: accepted, want an error naming %q", c.name, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want it to name %q", c.name, err, c.want)
		}
	}
}

// -apiserver-request-timeout is 0 (kube-apiserver's default) or 1s..1h;
// anything else is refused naming the flag and its value.
func TestAPIServerRequestTimeoutOption(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string // "" when accepted
	}{
		{0, ""}, {time.Second, ""}, {10 * time.Minute, ""}, {time.Hour, ""},
		{500 * time.Millisecond, "-apiserver-request-timeout=500ms"},
		{-time.Second, "-apiserver-request-timeout=-1s"},
		{2 * time.Hour, "-apiserver-request-timeout=2h0m0s"},
	} {
		o := validOptions()
		o.apiRequestTimeout = c.d
		err := o.parse("stream", "binder")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.d, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", c.d, err, c.want)
		}
	}
}
