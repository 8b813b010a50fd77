package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// gangWatch follows the pods of a namespace in the API server's order and
// remembers, per job (the pod's group-name annotation), how many of its
// pods had been created when its first pod was bound.
type gangWatch struct {
	mu        sync.Mutex
	created   map[string]map[string]bool // job -> pod names seen
	firstBind map[string]int             // job -> pods created at its first bind
	err       error
}

func (ev *env) watchGangs() (*gangWatch, func()) {
	ev.t.Helper()
	g := &gangWatch{created: map[string]map[string]bool{}, firstBind: map[string]int{}}
	w, err := ev.cs.CoreV1().Pods(ev.ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		ev.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if e.Type == watch.Error {
				g.mu.Lock()
				g.err = fmt.Errorf("pod watch: %v", e.Object)
				g.mu.Unlock()
				return
			}
			p, ok := e.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			job := p.Annotations[schedv1beta1.KubeGroupNameAnnotationKey]
			g.mu.Lock()
			if g.created[job] == nil {
				g.created[job] = map[string]bool{}
			}
			g.created[job][p.Name] = true
			if _, seen := g.firstBind[job]; !seen && p.Spec.NodeName != "" {
				g.firstBind[job] = len(g.created[job])
			}
			g.mu.Unlock()
		}
	}()
	return g, func() { w.Stop(); <-done }
}

// podsCreatedAtFirstBind returns how many of job's pods existed when the
// first of them was bound, and whether one was bound.
func (g *gangWatch) podsCreatedAtFirstBind(job string) (int, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.firstBind[job]
	return n, ok, g.err
}

// Kubeflow's training-operator v1.8.1, built from the module proxy, run
// with its Volcano gang scheduler against the real API server: a
// PyTorchJob (1 master + 2 workers) gets its PodGroup Inqueue, the
// operator creates the pods only then, and they are bound as one gang
// (no pod bound before all three exist); a PyTorchJob too large for its
// queue's capability never gets its PodGroup Inqueue, so the operator
// creates no pod, and the PodGroup says why.
func TestTrainingOperatorPyTorchJobs(t *testing.T) {
	bins, err := cluster.FindTrainingOperator()
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ev := newEnv(t)
	ctx := context.Background()
	crds, err := bins.CRDManifests("pytorchjobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.InstallCRDs(ctx, ev.cfg, crds, time.Minute); err != nil {
		t.Fatal(err)
	}
	op, err := cluster.StartTrainingOperator(ctx, ev.cfg, cluster.TrainingOperatorConfig{
		Kubeconfig: cp.Kubeconfig, Dir: t.TempDir(), Namespace: ev.ns, Schemes: []string{"pytorchjob"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Stop)
	defer func() {
		if t.Failed() {
			t.Logf("training-operator log:\n%s", op.Log(6000))
		}
	}()
	ev.nodes("pt-node", 2, "8", "32Gi")
	ev.lcQueue("pt-q", "root", "6")
	usage := ev.lcWatchUsage()
	defer usage.check(t, 6000)
	gangs, stop := ev.watchGangs()
	defer stop()
	dyn := dynamic.NewForConfigOrDie(ev.cfg)
	jobs := dyn.Resource(cluster.PyTorchJobs).Namespace(ev.ns)
	phase := func(name string) (schedv1beta1.PodGroupPhase, []schedv1beta1.PodGroupCondition) {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", nil
		}
		return pg.Status.Phase, pg.Status.Conditions
	}
	alive := func() {
		t.Helper()
		if err := op.Check(); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := jobs.Create(ctx, cluster.PyTorchJob(ev.ns, "mnist", "pt-q", schedName, 2, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"mnist-master-0", "mnist-worker-0", "mnist-worker-1"}
	ev.lcEventually("the PyTorchJob's 3 pods are created and bound", 90*time.Second, func() (bool, string) {
		alive()
		bound := 0
		for _, n := range names {
			if ev.nodeOf(n) != "" {
				bound++
			}
		}
		p, _ := phase("mnist")
		return bound == len(names), fmt.Sprintf("%d of %d bound; PodGroup phase %q", bound, len(names), p)
	})
	n, ok, err := gangs.podsCreatedAtFirstBind("mnist")
	if err != nil || !ok || n != len(names) {
		t.Fatalf("the gang was bound piecemeal: %d of its pods existed when the first was bound (seen %v, %v)", n, ok, err)
	}
	pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "mnist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 3 || pg.Spec.Queue != "pt-q" {
		t.Fatalf("the operator's PodGroup is not what this test expects: %+v", pg.Spec)
	}
	ev.lcEventually("the PodGroup is Running", 30*time.Second, func() (bool, string) {
		p, _ := phase("mnist")
		return p == schedv1beta1.PodGroupRunning, fmt.Sprintf("phase %q", p)
	})
	ev.lcEventually("the operator reports the PyTorchJob Running", 60*time.Second, func() (bool, string) {
		alive()
		j, err := jobs.Get(ctx, "mnist", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(j.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Running" && m["status"] == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", conds)
	})

	// 1 master + 7 workers of 1 CPU: 8 CPU, more than the queue's 6 even
	// when empty.
	if _, err := jobs.Create(ctx, cluster.PyTorchJob(ev.ns, "huge", "pt-q", schedName, 7, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	ev.lcEventually("the oversized PyTorchJob's PodGroup is Unschedulable, naming its queue", 60*time.Second, func() (bool, string) {
		alive()
		p, conds := phase("huge")
		for _, c := range conds {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "pt-q") {
				msg = c.Reason + ": " + c.Message
				return p != schedv1beta1.PodGroupInqueue, fmt.Sprintf("phase %q", p)
			}
		}
		return false, fmt.Sprintf("phase %q conditions %+v", p, conds)
	})
	t.Logf("oversized PyTorchJob: %s", msg)
	ev.lcHold("the operator creates no pod for it and nothing of it is bound", 3*time.Second, func() (bool, string) {
		pods, err := ev.lcList("training.kubeflow.org/job-name=huge")
		if err != nil {
			return false, err.Error()
		}
		return pods.live == 0 && pods.bound == 0, fmt.Sprintf("%d pods, %d bound", pods.live, pods.bound)
	})
	// The first job's gang is untouched.
	for _, n := range names {
		if ev.nodeOf(n) == "" {
			t.Fatalf("%s lost its node", n)
		}
	}
}
