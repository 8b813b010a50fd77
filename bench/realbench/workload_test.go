package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/internal/kube"
)

func loadTestWorkload(t *testing.T, name string) *workload.Workload {
	t.Helper()
	w, err := workload.Load("../workloads/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The pods and PodGroups of a job are what shardsched reads as one gang of
// the job's size in the job's queue, each pod requesting the job's
// resources; a job's pods form one creation unit, in job order.
func TestJobsPlanAsShardschedReadsIt(t *testing.T) {
	jobs := []workload.JobSpec{
		{Seq: 0, Queue: "q0-0", Size: 1, CPU: 2000, Memory: 8 << 30},
		{Seq: 1, Queue: "q3-7", Size: 4, CPU: 6000, Memory: 24 << 30, GPU: 1},
		{Seq: 2, Queue: "q1-2", Size: 3, CPU: 1000, Memory: 4 << 30},
	}
	run := runSpec{namespace: "bench-1-stream-x", schedName: "bench-stream-x"}
	plan, err := jobsPlan(jobs, run)
	if err != nil {
		t.Fatal(err)
	}
	if plan.pods != 8 || len(plan.groups) != 3 || len(plan.units) != 3 {
		t.Fatalf("plan: %d pods, %d groups, %d units; want 8, 3, 3", plan.pods, len(plan.groups), len(plan.units))
	}
	names := map[string]bool{}
	for i, j := range jobs {
		job, err := kube.JobFromPodGroup(plan.groups[i])
		if err != nil {
			t.Fatal(err)
		}
		if job.Namespace != run.namespace || job.Queue != j.Queue || int(job.MinMember) != j.Size {
			t.Errorf("job %d: PodGroup read as %s/%s queue %s minMember %d; want %s, queue %s, minMember %d",
				j.Seq, job.Namespace, job.Name, job.Queue, job.MinMember, run.namespace, j.Queue, j.Size)
		}
		if len(plan.units[i]) != j.Size {
			t.Fatalf("job %d: unit of %d pods, want %d", j.Seq, len(plan.units[i]), j.Size)
		}
		for _, p := range plan.units[i] {
			if names[p.Name] {
				t.Errorf("pod name %s used twice", p.Name)
			}
			names[p.Name] = true
			task, err := kube.TaskFromPod(p)
			if err != nil {
				t.Fatal(err)
			}
			if task.Job != job.Name || task.Implicit || task.Queue != j.Queue || task.SchedulerName != run.schedName || task.Namespace != run.namespace {
				t.Errorf("pod %s read as job %q (implicit %v) queue %q scheduler %q namespace %q", p.Name, task.Job, task.Implicit, task.Queue, task.SchedulerName, task.Namespace)
			}
			if want := jobRequest(j); !task.Request.Equal(want) {
				t.Errorf("pod %s requests %s, want %s", p.Name, task.Request, want)
			}
			// The API server rejects an extended resource whose limit is
			// not set equal to its request.
			c := p.Spec.Containers[0]
			if j.GPU > 0 {
				if l, r := c.Resources.Limits[gpuResource], c.Resources.Requests[gpuResource]; l.Cmp(r) != 0 || l.Value() != j.GPU {
					t.Errorf("pod %s: GPU limit %s, request %s; want both %d", p.Name, l.String(), r.String(), j.GPU)
				}
			} else if len(c.Resources.Limits) != 0 {
				t.Errorf("pod %s: limits %v, want none", p.Name, c.Resources.Limits)
			}
		}
	}
	// Pods do not share request maps: mutating one leaves the others alone.
	plan.units[1][0].Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = quantity(api.CPU, 1)
	if got := plan.units[1][1].Spec.Containers[0].Resources.Requests.Cpu().MilliValue(); got != 6000 {
		t.Errorf("a sibling's CPU request changed to %dm", got)
	}
	if _, err := jobsPlan(nil, run); err == nil {
		t.Error("jobsPlan(nil): no error")
	}
	if _, err := jobsPlan([]workload.JobSpec{{Queue: "q", Size: 0}}, run); err == nil {
		t.Error("a job of size 0: no error")
	}
}

// Without a workload the pods are those realbench always made: 1 CPU /
// 2Gi, pod i in PodGroup job-(i mod groups) of minMember 1 in the default
// queue, one pod per creation unit.
func TestUniformPlan(t *testing.T) {
	run := runSpec{namespace: "ns", schedName: "s"}
	plan := uniformPlan(10, 3, run)
	if plan.pods != 10 || len(plan.units) != 10 || len(plan.groups) != 3 {
		t.Fatalf("plan: %d pods, %d units, %d groups", plan.pods, len(plan.units), len(plan.groups))
	}
	for g, pg := range plan.groups {
		if pg.Name != fmt.Sprintf("job-%d", g) || pg.Spec.MinMember != 1 || pg.Spec.Queue != api.DefaultQueue {
			t.Errorf("group %d: %s minMember %d queue %s", g, pg.Name, pg.Spec.MinMember, pg.Spec.Queue)
		}
	}
	for i, u := range plan.units {
		if len(u) != 1 {
			t.Fatalf("unit %d has %d pods", i, len(u))
		}
		task, err := kube.TaskFromPod(u[0])
		if err != nil {
			t.Fatal(err)
		}
		want := api.NewResource(1000, 2<<30, map[string]int64{api.Pods: 1})
		if u[0].Name != fmt.Sprintf("p-%d", i) || task.Job != fmt.Sprintf("job-%d", i%3) || task.Queue != "" || !task.Request.Equal(want) {
			t.Errorf("pod %d: %s in job %s queue %q requests %s", i, u[0].Name, task.Job, task.Queue, task.Request)
		}
	}
}

// takeJobs yields the generator's jobs in order, exactly pods pods in all,
// only the last job cut; the same seed gives the same jobs.
func TestTakeJobs(t *testing.T) {
	w := loadTestWorkload(t, "churn")
	tier, err := w.Tier("100k")
	if err != nil {
		t.Fatal(err)
	}
	for _, pods := range []int{1, 7, 1000, 10000} {
		jobs, err := takeJobs(workload.NewGenerator(w, tier, 1), pods)
		if err != nil {
			t.Fatal(err)
		}
		ref := workload.NewGenerator(w, tier, 1)
		sum := 0
		for i, j := range jobs {
			r, _ := ref.Next(1 << 62)
			if i == len(jobs)-1 {
				if j.Size < 1 || j.Size > r.Size {
					t.Errorf("pods=%d: last job has size %d, the generator's %d", pods, j.Size, r.Size)
				}
				r.Size = j.Size
			}
			if j != r {
				t.Errorf("pods=%d: job %d is %+v, the generator's %+v", pods, i, j, r)
			}
			sum += j.Size
		}
		if sum != pods {
			t.Errorf("pods=%d: jobs hold %d pods", pods, sum)
		}
	}
	a, _ := takeJobs(workload.NewGenerator(w, tier, 1), 500)
	b, _ := takeJobs(workload.NewGenerator(w, tier, 2), 500)
	if fmt.Sprint(a) == fmt.Sprint(b) {
		t.Error("seeds 1 and 2 gave the same jobs")
	}
}

// The documented example fits, and its queue tree is the workload's, with
// capabilities and shares for the real -nodes, as shardsched reads the
// Queue objects back.
func TestBenchWorkloadDocExample(t *testing.T) {
	w := loadTestWorkload(t, "churn")
	b, err := newBenchWorkload("churn.yaml", w, "100k", 1, 10000, 1000)
	if err != nil {
		t.Fatalf("the doc comment's example does not fit: %v", err)
	}
	if len(b.jobs) < 100 {
		t.Errorf("%d jobs for 10,000 pods", len(b.jobs))
	}
	for _, n := range workloadNotes(options{nodes: 1000, pods: 10000, shape: b.shape(), workload: b}) {
		t.Log(n)
	}
	qs := queueObjects(b.queues)
	if len(qs) != len(b.queues) || len(qs) != 5+50 {
		t.Fatalf("%d Queue objects for %d specs, want 55", len(qs), len(b.queues))
	}
	byName := map[string]api.QueueSpec{}
	for i, q := range qs {
		got, err := kube.QueueSpecFromVolcano(q)
		if err != nil {
			t.Fatal(err)
		}
		want := b.queues[i]
		if got.Name != want.Name || got.Parent != want.Parent || got.Weight != want.Weight ||
			got.Capability.String() != want.Capability.String() || !got.Deserved.Equal(want.Deserved) || !got.Guarantee.Equal(want.Guarantee) {
			t.Errorf("queue %s read back as %+v, want %+v", q.Name, got, want)
		}
		byName[got.Name] = got
	}
	if _, err := api.BuildTree(func() (s []api.QueueSpec) {
		for _, q := range byName {
			s = append(s, q)
		}
		return s
	}()); err != nil {
		t.Errorf("the Queues do not form a tree: %v", err)
	}
	// The file's fraction (20 %) of 1,000 nodes × 64 CPU, not of the
	// tier's 1,600 nodes.
	if c, ok := byName["p0"].Capability.Get(api.CPU); !ok || c != 12800*1000 {
		t.Errorf("p0 capability %dm CPU, want 12800 CPU (20 %% of 64,000)", c)
	}
	var deserved int64
	for _, l := range w.Leaves() {
		if byName[l.Name].Parent != l.Parent {
			t.Errorf("leaf %s under %s, want %s", l.Name, byName[l.Name].Parent, l.Parent)
		}
		deserved += byName[l.Name].Deserved.MilliCPU
	}
	if deserved > 64000*1000 || deserved < 64000*1000-int64(len(w.Leaves())) {
		t.Errorf("leaves deserve %dm CPU in all, want the cluster's 64000 CPU", deserved)
	}

	// A burst tier smaller than -pods still yields -pods pods.
	bw := loadTestWorkload(t, "burst")
	bb, err := newBenchWorkload("burst.yaml", bw, "10k", 1, 3000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, j := range bb.jobs {
		sum += j.Size
	}
	if sum != 3000 {
		t.Errorf("burst: %d pods, want 3000", sum)
	}
}

func TestCheckFits(t *testing.T) {
	shape := nodeShape{cpu: 64, memoryGi: 256, gpus: 8, gpuEvery: 10}
	job := func(queue string, size int, cpu, gpu int64) workload.JobSpec {
		return workload.JobSpec{Queue: queue, Size: size, CPU: cpu * 1000, Memory: cpu << 30, GPU: gpu}
	}
	queues := []api.QueueSpec{
		{Name: "p0", Capability: mustLimit(t, 400*1000)},
		{Name: "q0", Parent: "p0"},
		{Name: "p1"},
		{Name: "q1", Parent: "p1"},
	}
	for _, tc := range []struct {
		name  string
		jobs  []workload.JobSpec
		nodes int
		want  string // in the error; "" = fits
	}{
		// 10 nodes: 640 CPU, 90 % = 576; one GPU node: 8 GPUs, 90 % = 7.
		{"90 % of the CPU", []workload.JobSpec{job("q1", 72, 8, 0)}, 10, ""},
		{"above 90 % of the CPU", []workload.JobSpec{job("q1", 72, 8, 0), job("q1", 1, 1, 0)}, 10, "-pods=73: the workload's pods request 577 CPU, more than 90 % of the cluster's 640 CPU"},
		{"7 of 8 GPUs", []workload.JobSpec{job("q1", 7, 1, 1)}, 10, ""},
		{"8 of 8 GPUs", []workload.JobSpec{job("q1", 8, 1, 1)}, 10, "nvidia.com/gpu, more than 90 %"},
		{"GPUs on GPU-less nodes", []workload.JobSpec{job("q1", 1, 1, 1)}, 0, "request 1 nvidia.com/gpu but the nodes have none"},
		{"a queue's capability", []workload.JobSpec{job("q0", 50, 8, 0), job("q0", 1, 1, 0)}, 100, "queue p0 and below request 401 CPU, more than its capability of 400"},
		{"up to a queue's capability", []workload.JobSpec{job("q0", 50, 8, 0), job("q1", 1, 1, 0)}, 100, ""},
		{"more pods than nodes take", []workload.JobSpec{{Queue: "q1", Size: 257, CPU: 100, Memory: 1 << 20}}, 1, "more than the 256 pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := shape
			if tc.nodes == 0 {
				s, tc.nodes = nodeShape{cpu: 64, memoryGi: 256}, 10
			}
			err := checkFits(tc.jobs, s, tc.nodes, queues)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

func mustLimit(t *testing.T, milliCPU int64) api.Limit {
	t.Helper()
	l, err := api.NewLimit(map[string]int64{api.CPU: milliCPU})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The flags fail fast, naming the flag, before any control plane starts.
func TestLoadWorkloadFlags(t *testing.T) {
	churn := "../workloads/churn.yaml"
	for _, tc := range []struct {
		name, path, tier string
		modes            []string
		nodes, pods      int
		want             string
	}{
		{"none", "", "", []string{modeStream}, 1000, 10000, ""},
		{"doc example", churn, "100k", []string{modeStream, modeBacklog}, 1000, 10000, ""},
		{"tier alone", "", "100k", []string{modeStream}, 1000, 10000, "-tier=100k: needs -workload"},
		{"workload alone", churn, "", []string{modeStream}, 1000, 10000, "needs -tier"},
		{"unknown tier", churn, "2M", []string{modeStream}, 1000, 10000, "-tier: workload churn has no tier \"2M\""},
		{"chaos", churn, "100k", []string{modeStream, modeChaos}, 1000, 10000, "-modes chaos"},
		{"missing file", "../workloads/nope.yaml", "100k", []string{modeStream}, 1000, 10000, "-workload"},
		{"too many pods", churn, "100k", []string{modeStream}, 100, 10000, "-pods=10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{nodes: tc.nodes, pods: tc.pods, modes: tc.modes}
			err := o.loadWorkload(tc.path, tc.tier, 1)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			case err != nil:
				return
			}
			if (tc.path != "") != (o.workload != nil) {
				t.Errorf("workload set: %v", o.workload != nil)
			}
			if tc.path == "" && o.shape != uniformShape() {
				t.Errorf("shape without a workload: %v", o.shape)
			}
		})
	}
}

// GPUs sit on every gpuEvery-th node from node 0, as in bench/sim, and
// shardsched reads the node's allocatable as the shape says.
func TestNodeShape(t *testing.T) {
	s := nodeShape{cpu: 64, memoryGi: 256, gpus: 8, gpuEvery: 10}
	for _, n := range []int{1, 9, 10, 11, 1000, 1001} {
		want := 0
		nodes, err := s.nodes("bench-node", n)
		if err != nil {
			t.Fatal(err)
		}
		for i, node := range nodes {
			got, err := kube.NodeFromNode(node)
			if err != nil {
				t.Fatal(err)
			}
			gpus := int64(0)
			if i%10 == 0 {
				gpus, want = 8, want+1
			}
			wantAlloc := api.NewResource(64000, 256<<30, map[string]int64{api.Pods: fakeNodePods, string(gpuResource): gpus})
			if got.Name != fmt.Sprintf("bench-node-%d", i) || !got.Allocatable.Equal(wantAlloc) {
				t.Fatalf("node %d: %s with %s, want %s", i, got.Name, got.Allocatable, wantAlloc)
			}
		}
		if g := s.gpuNodes(n); g != want {
			t.Errorf("gpuNodes(%d) = %d, want %d", n, g, want)
		}
	}
	if g := uniformShape().gpuNodes(1000); g != 0 {
		t.Errorf("uniform nodes: %d with GPUs", g)
	}
}

// The binder's placer goes round-robin from node 1 (as the binder always
// did), skips nodes a request no longer fits, and never hands out more than
// a node's allocatable, also from concurrent workers.
func TestRRPlacer(t *testing.T) {
	s := nodeShape{cpu: 4, memoryGi: 16, gpus: 1, gpuEvery: 3}
	var nodes []corev1.Node
	made, err := s.nodes("n", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range made {
		nodes = append(nodes, *n)
	}
	p, err := newRRPlacer(nodes)
	if err != nil {
		t.Fatal(err)
	}
	cpu := func(c int64) api.Resource { return api.NewResource(c*1000, c<<30, map[string]int64{api.Pods: 1}) }
	var got []string
	for _, req := range []api.Resource{cpu(2), cpu(2), cpu(1), cpu(3), cpu(2), cpu(2), cpu(1)} {
		n, ok := p.place(req)
		if !ok {
			n = "none"
		}
		got = append(got, n)
	}
	// n-1 2/4, n-2 2/4, n-0 1/4, n-0 4/4 (n-1, n-2 lack 3), n-1 4/4, n-2 4/4, none.
	if want := "n-1 n-2 n-0 n-0 n-1 n-2 none"; strings.Join(got, " ") != want {
		t.Errorf("placements %q, want %q", strings.Join(got, " "), want)
	}
	p, _ = newRRPlacer(nodes)
	if n, ok := p.place(api.NewResource(1000, 0, map[string]int64{string(gpuResource): 1})); !ok || n != "n-0" {
		t.Errorf("a GPU pod went to %q (%v), want n-0, the only GPU node", n, ok)
	}

	p, _ = newRRPlacer(nodes)
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := map[string]int64{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if n, ok := p.place(cpu(1)); ok {
					mu.Lock()
					placed[n]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := int64(0)
	for n, c := range placed {
		if c > 4 {
			t.Errorf("%s got %d 1-CPU pods, has 4 CPU", n, c)
		}
		total += c
	}
	if total != 12 {
		t.Errorf("%d pods placed on 12 CPU", total)
	}
}
