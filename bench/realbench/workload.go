package main

// Pods of a run: either today's identical pods (1 CPU / 2Gi over -groups
// PodGroups of minMember 1) or the jobs of a declarative workload file
// (-workload, -tier, -seed), the same files bench/sim reads.
//
// Everything here is pure: it builds objects and checks numbers, and never
// talks to an API server.

import (
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/kube"
)

// gpuResource is the extended resource the workloads' GPUs are counted in.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// fakeNodePods is the pod capacity cluster.FakeNode gives every node.
const fakeNodePods = 256

// maxFillPercent is the share of the cluster's CPU, memory and GPUs a workload's
// pods may request: kwok pods never finish, so every pod holds its request
// until the run ends, and a fuller cluster would leave pods unplaceable by
// fragmentation rather than by the scheduler.
const maxFillPercent = 90

// nodeShape is what every kwok node has.
type nodeShape struct {
	cpu      int64 // cores
	memoryGi int64
	// gpus nvidia.com/gpu on the nodes whose index is a multiple of
	// gpuEvery (as bench/sim places them); none when either is 0.
	gpus     int64
	gpuEvery int
}

// uniformShape is the node of the runs without a workload.
func uniformShape() nodeShape { return nodeShape{cpu: 64, memoryGi: 256} }

func (s nodeShape) hasGPU(i int) bool { return s.gpus > 0 && s.gpuEvery > 0 && i%s.gpuEvery == 0 }

// gpuNodes is how many of n nodes have GPUs.
func (s nodeShape) gpuNodes(n int) int {
	if s.gpus <= 0 || s.gpuEvery <= 0 || n <= 0 {
		return 0
	}
	return (n-1)/s.gpuEvery + 1
}

// node returns the kwok node of index i, named prefix-i.
func (s nodeShape) node(prefix string, i int) (*corev1.Node, error) {
	var labels map[string]string
	if s.hasGPU(i) {
		labels = map[string]string{"accelerator": "gpu"}
	}
	n, err := cluster.FakeNode(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprint(s.cpu), fmt.Sprintf("%dGi", s.memoryGi), labels)
	if err != nil {
		return nil, err
	}
	if s.hasGPU(i) {
		q := *resource.NewQuantity(s.gpus, resource.DecimalSI)
		n.Status.Capacity[gpuResource] = q
		n.Status.Allocatable[gpuResource] = q.DeepCopy()
	}
	return n, nil
}

// nodes returns the n kwok nodes of the cluster.
func (s nodeShape) nodes(prefix string, n int) ([]*corev1.Node, error) {
	out := make([]*corev1.Node, n)
	for i := range out {
		node, err := s.node(prefix, i)
		if err != nil {
			return nil, err
		}
		out[i] = node
	}
	return out, nil
}

// String describes the shape for the report.
func (s nodeShape) String() string {
	out := fmt.Sprintf("%d CPU, %dGi", s.cpu, s.memoryGi)
	if s.gpus > 0 && s.gpuEvery > 0 {
		out += fmt.Sprintf(", %d %s on one node in %d", s.gpus, gpuResource, s.gpuEvery)
	}
	return out
}

// benchWorkload is a workload file's jobs for the whole invocation: every
// run creates the same jobs. It is not modified once built.
type benchWorkload struct {
	path     string
	w        *workload.Workload
	tierName string
	tier     workload.Tier
	seed     uint64
	jobs     []workload.JobSpec
	queues   []api.QueueSpec // for the real cluster's node count
}

// label names the workload and tier in run names ("churn/100k").
func (b *benchWorkload) label() string { return b.w.Name + "/" + b.tierName }

// newBenchWorkload takes the first jobs of w's generator for tier (seeded
// with seed) until they hold pods pods, and the workload's queue tree for a
// cluster of nodes nodes; it fails, naming the flags, if those pods do not
// fit the cluster (see checkFits).
func newBenchWorkload(path string, w *workload.Workload, tierName string, seed uint64, pods, nodes int) (*benchWorkload, error) {
	tier, err := w.Tier(tierName)
	if err != nil {
		return nil, fmt.Errorf("-tier: %w", err)
	}
	gt := tier
	if w.Burst {
		gt.Pods = pods // a burst generator stops after the tier's pods
	}
	jobs, err := takeJobs(workload.NewGenerator(w, gt, seed), pods)
	if err != nil {
		return nil, fmt.Errorf("-workload %s: %w", path, err)
	}
	qt := tier
	qt.Nodes = nodes // capabilities and shares of the real cluster, not the tier's
	b := &benchWorkload{path: path, w: w, tierName: tierName, tier: tier, seed: seed, jobs: jobs, queues: workload.QueueSpecs(w, qt)}
	if err := checkFits(jobs, b.shape(), nodes, b.queues); err != nil {
		return nil, err
	}
	return b, nil
}

// shape is the workload's node.
func (b *benchWorkload) shape() nodeShape {
	n := b.w.Node
	return nodeShape{cpu: n.CPU, memoryGi: n.MemoryGi, gpus: n.GPUs, gpuEvery: n.GPUEvery}
}

// takeJobs takes g's jobs in order until they hold pods pods; the last one
// is cut to fit, as the generator cuts a burst's last job.
func takeJobs(g *workload.Generator, pods int) ([]workload.JobSpec, error) {
	var out []workload.JobSpec
	n := 0
	for n < pods {
		j, ok := g.Next(time.Duration(math.MaxInt64))
		if !ok {
			return nil, fmt.Errorf("the generator ran out of jobs after %d of %d pods", n, pods)
		}
		j.Size = min(j.Size, pods-n)
		out = append(out, j)
		n += j.Size
	}
	return out, nil
}

// jobRequest is what one pod of j requests, as the scheduler counts it.
func jobRequest(j workload.JobSpec) api.Resource {
	scal := map[string]int64{api.Pods: 1}
	if j.GPU > 0 {
		scal[string(gpuResource)] = j.GPU
	}
	return api.NewResource(j.CPU, j.Memory, scal)
}

// checkFits reports, naming the flags, jobs that the cluster of nodes
// nodes of shape s cannot hold at once: kwok pods never finish, so every
// pod of a run holds its request until the run ends. The pods may request
// at most maxFillPercent % of the cluster's CPU, memory and GPUs, no more
// pods than the nodes accept, and no more CPU below a queue than its
// capability (shardsched would leave the rest pending for the whole run).
func checkFits(jobs []workload.JobSpec, s nodeShape, nodes int, queues []api.QueueSpec) error {
	total := api.Resource{}
	byQueue := map[string]api.Resource{}
	pods := 0
	for _, j := range jobs {
		r, err := jobRequest(j).ScaleChecked(int64(j.Size))
		if err != nil {
			return fmt.Errorf("job %d: %w", j.Seq, err)
		}
		if total, err = total.Add(r); err != nil {
			return fmt.Errorf("the pods' total request: %w", err)
		}
		q := byQueue[j.Queue]
		if byQueue[j.Queue], err = q.Add(r); err != nil {
			return fmt.Errorf("queue %s's total request: %w", j.Queue, err)
		}
		pods += j.Size
	}
	where := fmt.Sprintf("-nodes=%d × %s", nodes, s)
	if int64(pods) > int64(nodes)*fakeNodePods {
		return fmt.Errorf("-pods=%d: more than the %d pods %d nodes accept (%d each): lower -pods or raise -nodes", pods, int64(nodes)*fakeNodePods, nodes, fakeNodePods)
	}
	for _, d := range []struct {
		dim  string
		have int64
		unit string
	}{
		{api.CPU, int64(nodes) * s.cpu * 1000, "CPU"},
		{api.Memory, int64(nodes) * s.memoryGi << 30, "memory"},
		{string(gpuResource), int64(s.gpuNodes(nodes)) * s.gpus, string(gpuResource)},
	} {
		want := total.Get(d.dim)
		if want == 0 {
			continue
		}
		if d.have == 0 {
			return fmt.Errorf("-pods=%d: the workload's pods request %s %s but the nodes have none (%s)", pods, api.FormatQuantity(d.dim, want), d.unit, where)
		}
		if want > d.have/100*maxFillPercent+d.have%100*maxFillPercent/100 {
			return fmt.Errorf("-pods=%d: the workload's pods request %s %s, more than %d %% of the cluster's %s %s (%s; kwok pods never finish, so they must all fit at once): lower -pods or raise -nodes",
				pods, api.FormatQuantity(d.dim, want), d.unit, maxFillPercent, api.FormatQuantity(d.dim, d.have), d.unit, where)
		}
	}
	// CPU below each queue with a CPU capability.
	parent := make(map[string]string, len(queues))
	for _, q := range queues {
		parent[q.Name] = q.Parent
	}
	below := map[string]int64{}
	for leaf, r := range byQueue {
		// Walk to the root; a tree of len(queues) queues is at most that deep.
		for q, depth := leaf, 0; q != "" && depth <= len(queues); q, depth = parent[q], depth+1 {
			below[q] += r.MilliCPU
		}
	}
	for _, q := range queues {
		limit, ok := q.Capability.Get(api.CPU)
		if ok && below[q.Name] > limit {
			return fmt.Errorf("-pods=%d: the jobs in queue %s and below request %s CPU, more than its capability of %s (%s): shardsched would leave the rest pending; lower -pods",
				pods, q.Name, api.FormatQuantity(api.CPU, below[q.Name]), api.FormatQuantity(api.CPU, limit), where)
		}
	}
	return nil
}

// queueObjects turns the workload's queue tree into Volcano Queues, as
// shardsched reads them back (kube.QueueSpecFromVolcano).
func queueObjects(specs []api.QueueSpec) []*schedv1beta1.Queue {
	out := make([]*schedv1beta1.Queue, 0, len(specs))
	for _, s := range specs {
		q := &schedv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: s.Name},
			Spec: schedv1beta1.QueueSpec{Parent: s.Parent, Weight: max(s.Weight, 1)}}
		if dims := s.Capability.Map(); len(dims) > 0 {
			q.Spec.Capability = corev1.ResourceList{}
			for d, v := range dims {
				q.Spec.Capability[corev1.ResourceName(d)] = quantity(d, v)
			}
		}
		q.Spec.Deserved = resourceList(s.Deserved)
		q.Spec.Guarantee.Resource = resourceList(s.Guarantee)
		out = append(out, q)
	}
	return out
}

func resourceList(r api.Resource) corev1.ResourceList {
	dims := r.Dims()
	if len(dims) == 0 {
		return nil
	}
	out := make(corev1.ResourceList, len(dims))
	for _, d := range dims {
		out[corev1.ResourceName(d)] = quantity(d, r.Get(d))
	}
	return out
}

// quantity is v in dim's units (milli-CPU, bytes, whole units) as a
// Kubernetes quantity.
func quantity(dim string, v int64) resource.Quantity {
	switch dim {
	case api.CPU:
		return *resource.NewMilliQuantity(v, resource.DecimalSI)
	case api.Memory:
		return *resource.NewQuantity(v, resource.BinarySI)
	default:
		return *resource.NewQuantity(v, resource.DecimalSI)
	}
}

// podPlan is what one run creates: its PodGroups, before the clock starts,
// then its pods in units, each created in order by one creator.
type podPlan struct {
	groups []*schedv1beta1.PodGroup
	units  [][]*corev1.Pod
	pods   int
}

// uniformPlan is the run without a workload: pods identical pods of 1 CPU
// / 2Gi, pod i in PodGroup job-(i mod groups) of minMember 1 in the default
// queue, each pod a unit of its own.
func uniformPlan(pods, groups int, run runSpec) podPlan {
	p := podPlan{pods: pods}
	for g := 0; g < groups; g++ {
		p.groups = append(p.groups, &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", g), Namespace: run.namespace},
			Spec: schedv1beta1.PodGroupSpec{MinMember: 1, Queue: api.DefaultQueue}})
	}
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	for i := 0; i < pods; i++ {
		p.units = append(p.units, []*corev1.Pod{newPod(fmt.Sprintf("p-%d", i), fmt.Sprintf("job-%d", i%groups), "", req, nil, run)})
	}
	return p
}

// jobsPlan is the run of a workload: each job a PodGroup named job-<seq>
// (minMember = its size, in its leaf queue) and a unit of size pods
// requesting the job's CPU, memory and GPUs.
func jobsPlan(jobs []workload.JobSpec, run runSpec) (podPlan, error) {
	var p podPlan
	for _, j := range jobs {
		if j.Size < 1 || j.Size > math.MaxInt32 {
			return podPlan{}, fmt.Errorf("job %d: size %d", j.Seq, j.Size)
		}
		if j.CPU < 0 || j.Memory < 0 || j.GPU < 0 {
			return podPlan{}, fmt.Errorf("job %d: negative request (cpu %dm, memory %d, gpu %d)", j.Seq, j.CPU, j.Memory, j.GPU)
		}
		name := fmt.Sprintf("job-%d", j.Seq)
		p.groups = append(p.groups, &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.namespace},
			Spec: schedv1beta1.PodGroupSpec{MinMember: int32(j.Size), Queue: j.Queue}})
		req := corev1.ResourceList{
			corev1.ResourceCPU:    quantity(api.CPU, j.CPU),
			corev1.ResourceMemory: quantity(api.Memory, j.Memory),
		}
		var lim corev1.ResourceList
		if j.GPU > 0 {
			// Extended resources are not overcommitted: the limit must be
			// set and equal the request.
			req[gpuResource] = quantity(string(gpuResource), j.GPU)
			lim = corev1.ResourceList{gpuResource: quantity(string(gpuResource), j.GPU)}
		}
		unit := make([]*corev1.Pod, j.Size)
		for i := range unit {
			unit[i] = newPod(fmt.Sprintf("%s-%d", name, i), name, j.Queue, req, lim, run)
		}
		p.units = append(p.units, unit)
		p.pods += j.Size
	}
	if len(p.units) == 0 {
		return podPlan{}, errors.New("no jobs")
	}
	return p, nil
}

// newPod is one pod of group (and queue, when not empty) asking for run's
// scheduler.
func newPod(name, group, queue string, req, lim corev1.ResourceList, run runSpec) *corev1.Pod {
	ann := map[string]string{kube.GroupNameAnnotation: group}
	if queue != "" {
		ann[kube.QueueNameAnnotation] = queue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.namespace, Annotations: ann},
		Spec: corev1.PodSpec{SchedulerName: run.schedName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: req.DeepCopy(), Limits: lim.DeepCopy()}}}},
	}
}
