package ctl

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/internal/kube"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// world builds a World with a small vocabulary, for the pure logic only.
type world struct{ World }

func (w *world) queue(name, parent, cpu string) *schedv1beta1.Queue {
	q := schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedv1beta1.QueueSpec{Parent: parent, Weight: 1,
		DequeueStrategy: schedv1beta1.DequeueStrategyFIFO}}
	if cpu != "" {
		q.Spec.Capability = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	w.Queues = append(w.Queues, q)
	return &w.Queues[len(w.Queues)-1]
}

func (w *world) group(name, queue string, minMember int32, phase schedv1beta1.PodGroupPhase, age time.Duration) {
	w.Groups = append(w.Groups, schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-age))},
		Spec:       schedv1beta1.PodGroupSpec{Queue: queue, MinMember: minMember},
		Status:     schedv1beta1.PodGroupStatus{Phase: phase},
	})
}

func (w *world) pod(name, group, cpu, node string) {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute)),
			Annotations: map[string]string{kube.GroupNameAnnotation: group}},
		Spec: corev1.PodSpec{SchedulerName: "volcano", NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if node != "" {
		p.Status.Phase = corev1.PodRunning
	}
	w.Pods = append(w.Pods, p)
}

func (w *world) node(name, cpu string) {
	w.Nodes = append(w.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}}})
}

func explain(t *testing.T, w *world, kind, name string) *Explanation {
	t.Helper()
	e, err := Explain(&w.World, ExplainOptions{Kind: kind, Namespace: "ns", Name: name, SchedulerName: "volcano", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteExplanation(&buf, e); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	return e
}

func wantIn(t *testing.T, what, got string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(got, s) {
			t.Errorf("%s %q does not say %q", what, got, s)
		}
	}
}

func TestExplainQueueShortNamesLevelAndHolder(t *testing.T) {
	w := &world{}
	w.queue("research", "root", "10")
	w.queue("nlp", "research", "")
	w.queue("cv", "research", "")
	w.node("n1", "32")
	w.group("big", "cv", 6, schedv1beta1.PodGroupRunning, time.Hour)
	w.group("small", "nlp", 1, schedv1beta1.PodGroupRunning, time.Hour)
	for _, p := range []string{"big-0", "big-1", "big-2", "big-3", "big-4", "big-5"} {
		w.pod(p, "big", "1", "n1")
	}
	w.pod("small-0", "small", "2", "n1")
	w.group("train", "nlp", 3, schedv1beta1.PodGroupPending, time.Minute)
	w.Groups[len(w.Groups)-1].Status.Conditions = []schedv1beta1.PodGroupCondition{{Type: schedv1beta1.PodGroupUnschedulableType,
		Status: corev1.ConditionTrue, Reason: "QueueFull", Message: `queue "research" is short of cpu`}}
	for _, p := range []string{"train-0", "train-1", "train-2"} {
		w.pod(p, "train", "1", "")
	}
	e := explain(t, w, "podgroup", "train")
	// research holds 8 of 10; train asks 3: short by 1 at research, not at nlp.
	wantIn(t, "summary", e.Summary, `queue "research" is short of cpu by 1`, "ns/big")
	if len(e.Path) != 3 || e.Path[0].Queue != "nlp" || len(e.Path[0].Short) != 0 || e.Path[1].Short["cpu"] != "1" {
		t.Errorf("path = %+v, want nlp (not short), research short of cpu by 1, root", e.Path)
	}
	if e.Path[1].Held["cpu"] != "8" || e.Ask["cpu"] != "3" {
		t.Errorf("research held %v, ask %v; want 8 and 3", e.Path[1].Held, e.Ask)
	}
	if e.HoldersOf != "research" || len(e.Holders) != 2 || e.Holders[0].Job != "ns/big" || e.Holders[0].Amount["cpu"] != "6" {
		t.Errorf("holders of %s = %+v, want ns/big (6) first", e.HoldersOf, e.Holders)
	}
	if e.Scheduler == nil || e.Scheduler.Reason != "QueueFull" {
		t.Errorf("the scheduler's condition is not shown: %+v", e.Scheduler)
	}
	// The same job asked about through one of its pods.
	if p := explain(t, w, "pod", "train-1"); p.PodGroup != "ns/train" || p.Summary != e.Summary {
		t.Errorf("explain pod train-1 = %s %q, want the PodGroup's verdict", p.PodGroup, p.Summary)
	}
}

// A job for which quota is being taken back says so, with whom it waits
// for, rather than a shortage its held quota no longer has.
func TestExplainJobWaitingForVictims(t *testing.T) {
	w := &world{}
	w.queue("p", "root", "2")
	w.queue("a", "p", "")
	w.queue("b", "p", "")
	w.node("n1", "32")
	w.group("borrow", "b", 1, schedv1beta1.PodGroupRunning, time.Hour)
	w.pod("borrow-0", "borrow", "2", "n1")
	w.group("lend", "a", 1, schedv1beta1.PodGroupPending, time.Minute)
	w.Groups[len(w.Groups)-1].Status.Conditions = []schedv1beta1.PodGroupCondition{{Type: schedv1beta1.PodGroupUnschedulableType,
		Status: corev1.ConditionTrue, Reason: "Reclaiming", Message: `quota held for it in queue "a"; waiting for 1 victim(s) to go (reclaim): ns/borrow in queue b`}}
	w.pod("lend-0", "lend", "1", "")
	e := explain(t, w, "podgroup", "lend")
	wantIn(t, "summary", e.Summary, "quota is being taken back for it", "ns/borrow in queue b")
}

func TestExplainWaitsBehindOlderJobInFifoQueue(t *testing.T) {
	for _, strategy := range []schedv1beta1.DequeueStrategy{schedv1beta1.DequeueStrategyFIFO, schedv1beta1.DequeueStrategyTraverse} {
		t.Run(string(strategy), func(t *testing.T) {
			w := &world{}
			w.queue("q", "root", "4").Spec.DequeueStrategy = strategy
			w.node("n1", "32")
			w.group("run", "q", 1, schedv1beta1.PodGroupRunning, time.Hour)
			w.pod("run-0", "run", "2", "n1")
			w.group("old", "q", 1, schedv1beta1.PodGroupPending, 10*time.Minute)
			w.pod("old-0", "old", "3", "")
			w.group("young", "q", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("young-0", "young", "1", "")
			e := explain(t, w, "podgroup", "young")
			if e.Ahead != 1 || len(e.AheadJobs) != 1 || e.AheadJobs[0].Job != "ns/old" || e.AheadJobs[0].Amount["cpu"] != "3" {
				t.Errorf("ahead = %d %+v, want ns/old asking 3", e.Ahead, e.AheadJobs)
			}
			if strategy == schedv1beta1.DequeueStrategyFIFO {
				wantIn(t, "summary", e.Summary, `fifo queue "q" behind 1 job`, "ns/old")
			} else if strings.Contains(e.Summary, "behind") {
				t.Errorf("in a traverse queue a waiting job does not hold the next: %q", e.Summary)
			}
			// The older job is the one short of quota: 2 held + 3 > 4.
			if o := explain(t, w, "podgroup", "old"); o.Ahead != 0 || !strings.Contains(o.Summary, "short of cpu by 1") {
				t.Errorf("old: ahead %d, summary %q", o.Ahead, o.Summary)
			}
		})
	}
}

func TestExplainPlacementCountsEveryNode(t *testing.T) {
	w := &world{}
	w.queue("q", "root", "")
	w.node("n1", "8")
	w.node("n2", "8")
	w.node("n3", "8")
	w.Nodes[2].Spec.Unschedulable = true
	w.group("other", "q", 1, schedv1beta1.PodGroupRunning, time.Hour)
	w.pod("other-0", "other", "4", "n1")
	w.group("gang", "q", 2, schedv1beta1.PodGroupInqueue, time.Minute)
	w.pod("gang-0", "gang", "6", "")
	w.pod("gang-1", "gang", "6", "")
	e := explain(t, w, "podgroup", "gang")
	p := e.Placement
	if p == nil || p.Fits || p.Nodes != 3 || p.Needed != 2 || p.Placed != 1 {
		t.Fatalf("placement = %+v, want 3 nodes counted, 2 needed, 1 placed, no fit", p)
	}
	wantIn(t, "placement", p.Message, "0/3 nodes are available", "2 Insufficient cpu", "1 node(s) were unschedulable")
	wantIn(t, "summary", e.Summary, "admitted (Inqueue)", "no room on any node")
	// Room freed: the gang fits, and the verdict says so.
	w.Pods[0].Status.Phase = corev1.PodSucceeded
	if e := explain(t, w, "podgroup", "gang"); e.Placement == nil || !e.Placement.Fits || !strings.Contains(e.Summary, "room for its 2 pending pod(s)") {
		t.Errorf("after the other job finished: %+v %q", e.Placement, e.Summary)
	}
}

func TestExplainPlainVerdicts(t *testing.T) {
	base := func() *world {
		w := &world{}
		w.queue("q", "root", "4")
		w.node("n1", "8")
		return w
	}
	for _, tc := range []struct {
		name       string
		setup      func(w *world)
		kind, obj  string
		wantPieces []string
	}{
		{"never fits", func(w *world) {
			w.group("huge", "q", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("huge-0", "huge", "5", "")
		}, "podgroup", "huge", []string{"can never be admitted", "5 of cpu", `capability 4 of queue "q"`}},
		{"pods missing", func(w *world) {
			w.group("g", "q", 3, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("g-0", "g", "1", "")
		}, "podgroup", "g", []string{"waiting for its pods: 1 of minMember 3"}},
		{"unknown queue", func(w *world) {
			w.group("g", "nope", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("g-0", "g", "1", "")
		}, "podgroup", "g", []string{`queue "nope" does not exist`}},
		{"queue left out", func(w *world) {
			w.queue("bad", "q", "-1")
			w.group("g", "bad", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("g-0", "g", "1", "")
		}, "podgroup", "g", []string{`queue "bad" is left out`, "negative"}},
		{"closed queue", func(w *world) {
			w.Queues[0].Status.State = schedv1beta1.QueueStateClosed
			w.group("g", "q", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("g-0", "g", "1", "")
		}, "podgroup", "g", []string{`queue "q" is closed`}},
		{"another scheduler's pod", func(w *world) {
			w.pod("p", "g", "1", "")
			w.Pods[0].Spec.SchedulerName = "default-scheduler"
		}, "pod", "p", []string{`names scheduler "default-scheduler", not "volcano"`}},
		{"bound pod", func(w *world) {
			w.group("g", "q", 1, schedv1beta1.PodGroupRunning, time.Minute)
			w.pod("p", "g", "1", "n1")
		}, "pod", "p", []string{"bound to node n1", "Running"}},
		{"no podgroup yet", func(w *world) {
			w.pod("p", "", "1", "")
			w.Pods[0].Annotations = nil
		}, "pod", "p", []string{"no PodGroup ns/podgroup-uid-p exists yet"}},
		{"room everywhere", func(w *world) {
			w.group("g", "q", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.pod("g-0", "g", "1", "")
		}, "podgroup", "g", []string{"should be admitted on the scheduler's next pass"}},
		{"priority class first", func(w *world) {
			w.PriorityClasses = []schedulingv1.PriorityClass{{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}}
			w.group("run", "q", 1, schedv1beta1.PodGroupRunning, time.Hour)
			w.pod("run-0", "run", "3", "n1")
			w.group("old", "q", 1, schedv1beta1.PodGroupPending, time.Hour)
			w.pod("old-0", "old", "1", "")
			w.group("urgent", "q", 1, schedv1beta1.PodGroupPending, time.Minute)
			w.Groups[len(w.Groups)-1].Spec.PriorityClassName = "high"
			w.pod("urgent-0", "urgent", "2", "")
		}, "podgroup", "old", []string{`fifo queue "q" behind 1 job`, "ns/urgent first"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := base()
			tc.setup(w)
			e := explain(t, w, tc.kind, tc.obj)
			wantIn(t, "summary", e.Summary, tc.wantPieces...)
		})
	}
	if _, err := Explain(&base().World, ExplainOptions{Kind: "pod", Namespace: "ns", Name: "missing", SchedulerName: "volcano"}); err == nil ||
		!strings.Contains(err.Error(), "pod ns/missing not found") {
		t.Errorf("a missing pod: err = %v", err)
	}
	if _, err := Explain(&base().World, ExplainOptions{Kind: "node", Namespace: "ns", Name: "x"}); err == nil {
		t.Error("explaining a node did not fail")
	}
}

func TestQueueTreeShowsTreeAndLeftOutQueues(t *testing.T) {
	w := &world{}
	w.queue("research", "root", "8")
	nlp := w.queue("nlp", "research", "4")
	nlp.Status = schedv1beta1.QueueStatus{Allocated: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}, Running: 2, Pending: 1}
	w.queue("a", "b", "")
	w.queue("b", "a", "")
	w.queue("neg", "root", "-2")
	rows := QueueTree(w.Queues)
	var got []string
	for _, r := range rows {
		got = append(got, strings.Repeat(">", r.Depth)+r.Name)
	}
	if want := "root >default >research >>nlp a b neg"; strings.Join(got, " ") != want {
		t.Errorf("rows = %s, want %s", strings.Join(got, " "), want)
	}
	for _, r := range rows {
		switch r.Name {
		case "a", "b":
			wantIn(t, r.Name+" left out", r.LeftOut, "cycle")
		case "neg":
			wantIn(t, "neg left out", r.LeftOut, "negative")
		case "nlp":
			if r.Allocated["cpu"] != "3" || r.Capability["cpu"] != "4" || r.Running != 2 || r.Pending != 1 || r.LeftOut != "" {
				t.Errorf("nlp row = %+v", r)
			}
		}
	}
	var buf bytes.Buffer
	if err := WriteQueues(&buf, rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	wantIn(t, "table", buf.String(), "    nlp", "[#######...] 3/4", "LEFT OUT")
}

func TestTopBusiestQueuesAndSlowestJobs(t *testing.T) {
	w := &world{}
	full := w.queue("full", "root", "4")
	full.Status = schedv1beta1.QueueStatus{Allocated: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}, Running: 1}
	half := w.queue("half", "root", "8")
	half.Status = schedv1beta1.QueueStatus{Allocated: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}, Running: 2}
	w.queue("idle", "root", "8")
	w.group("fast", "half", 1, schedv1beta1.PodGroupRunning, time.Hour)
	w.group("slow", "full", 1, schedv1beta1.PodGroupRunning, time.Hour)
	w.group("stuck", "half", 1, schedv1beta1.PodGroupPending, time.Hour)
	bound := func(name, group string, created, scheduled time.Duration) {
		w.pod(name, group, "1", "n1")
		p := &w.Pods[len(w.Pods)-1]
		p.CreationTimestamp = metav1.NewTime(t0.Add(-created))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-scheduled))}}
	}
	bound("fast-0", "fast", 10*time.Minute, 10*time.Minute-time.Second)
	bound("slow-0", "slow", 20*time.Minute, 10*time.Minute)
	bound("slow-1", "slow", 20*time.Minute, 19*time.Minute)
	bound("old-0", "fast", 3*time.Hour, 2*time.Hour) // bound outside the window
	w.pod("stuck-0", "stuck", "1", "")
	w.Pods[len(w.Pods)-1].CreationTimestamp = metav1.NewTime(t0.Add(-5 * time.Minute))
	top := MakeTop(&w.World, t0, 10, time.Hour)
	var qs []string
	for _, q := range top.Queues {
		qs = append(qs, q.Queue)
	}
	if strings.Join(qs, " ") != "full half" {
		t.Errorf("busiest queues %v, want full (100%%) then half (50%%), idle left out", qs)
	}
	if len(top.Slowest) != 2 || top.Slowest[0].Job != "ns/slow" || top.Slowest[0].Wait != "10m0s" || top.Slowest[0].Pods != 2 || top.Slowest[1].Wait != "1s" {
		t.Errorf("slowest = %+v", top.Slowest)
	}
	if len(top.Waiting) != 1 || top.Waiting[0].Job != "ns/stuck" || top.Waiting[0].Wait != "5m0s" || top.Waiting[0].Queue != "half" {
		t.Errorf("waiting = %+v", top.Waiting)
	}
	var buf bytes.Buffer
	if err := WriteTop(&buf, top); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	wantIn(t, "top", buf.String(), "100%", "ns/slow", "ns/stuck")
}

// BenchmarkQueueTree1000 is the queue view of a 1,000-queue tree (10
// parents × 99 leaves), as the plugin's queues command and the web UI
// build it on every refresh.
func BenchmarkQueueTree1000(b *testing.B) {
	w := &world{}
	for p := range 10 {
		parent := fmt.Sprintf("p%d", p)
		w.queue(parent, "root", "1000")
		for l := range 99 {
			w.queue(fmt.Sprintf("%s-l%d", parent, l), parent, "10")
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if rows := QueueTree(w.Queues); len(rows) != 1002 {
			b.Fatalf("%d rows", len(rows))
		}
	}
}
