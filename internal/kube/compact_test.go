package kube

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/shardsched/shardsched/api"
)

// fullPod is a pod as the API server sends it from a busy cluster: the
// fields the scheduler reads and the many it does not.
func fullPod(i int) *corev1.Pod {
	prio := int32(100)
	ctl := true
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	var env []corev1.EnvVar
	for k := 0; k < 20; k++ {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", k), Value: "some-configuration-value"})
	}
	c := corev1.Container{Name: "main", Image: "registry.example.com/team/trainer:v1.2.3", Command: []string{"python", "-m", "train"},
		Args: []string{"--epochs=10", "--batch=512"}, Env: env, Resources: corev1.ResourceRequirements{Requests: req, Limits: req},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "token", MountPath: "/var/run/secrets"}},
		Ports:        []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("trainer-%d", i), UID: types.UID(fmt.Sprint("uid-", i)),
			CreationTimestamp: metav1.Now(), ResourceVersion: "12345",
			Labels:          map[string]string{"app": "trainer", "job": "j1"},
			Annotations:     map[string]string{GroupNameAnnotation: "j1", QueueNameAnnotation: "q", "kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"trainer"},"spec":{"containers":[{"name":"main","image":"registry.example.com/team/trainer:v1.2.3"}]}}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j1", UID: "owner", Controller: &ctl}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c}, InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: req}}},
			NodeName: "node-7", SchedulerName: "volcano", Priority: &prio, PriorityClassName: "high",
			NodeSelector: map[string]string{"pool": "gpu"},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}},
				PodAntiAffinity: &corev1.PodAntiAffinity{}},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Overhead:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.7", PodIP: "10.1.2.3",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true, Image: c.Image, ImageID: "sha256:0123456789abcdef", ContainerID: "containerd://abcdef"}}},
	}
}

// A pod is stored as its task, converted once as it arrives: the same task
// TaskFromPod gives for the whole pod, under the pod's key, with nothing else
// of the pod kept; its "pods" map is the one every such task shares, and a
// task with more scalars has its own. The transform is idempotent, and a pod
// that cannot be converted is stored with the error naming it.
func TestStoredPodIsItsTask(t *testing.T) {
	in := newPodInterner()
	onePod := in.onePod
	transform := storeTransform(in)
	full := fullPod(1)
	want, err := TaskFromPod(full)
	if err != nil {
		t.Fatal(err)
	}
	o, err := transform(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	sp, ok := o.(*storedPod)
	if !ok {
		t.Fatalf("a pod is stored as %T", o)
	}
	if sp.err != nil || !reflect.DeepEqual(sp.task(), want) {
		t.Fatalf("stored task (err %v):\n%+v\nfrom the pod:\n%+v", sp.err, sp.task(), want)
	}
	if reflect.ValueOf(sp.task().Request.Scalars).Pointer() != reflect.ValueOf(onePod).Pointer() {
		t.Error("a task whose only scalar is one pod has a map of its own")
	}
	if key, err := cache.MetaNamespaceKeyFunc(sp); err != nil || key != "team-a/trainer-1" {
		t.Errorf("store key %q (%v), want team-a/trainer-1", key, err)
	}
	kept := podMeta{namespace: full.Namespace, name: full.Name, uid: full.UID, resourceVersion: full.ResourceVersion}
	if sp.podMeta != kept {
		t.Errorf("stored metadata %+v, want namespace, name, UID and resource version %+v", sp.podMeta, kept)
	}
	if m, err := meta.Accessor(sp); err != nil || m.GetResourceVersion() != "12345" || m.GetUID() != full.UID || m.GetLabels() != nil {
		t.Errorf("client-go reads the stored pod's metadata as %+v (%v)", m, err)
	}
	if again, err := transform(sp); err != nil || again != sp {
		t.Errorf("transformed twice: %v (%v), want the same stored pod", again, err)
	}

	gpu := fullPod(2)
	gpu.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
	o, err = transform(gpu)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.(*storedPod).task().Request.Scalars; len(got) != 2 || got["nvidia.com/gpu"] != 2 || got[api.Pods] != 1 {
		t.Errorf("a GPU pod's scalars: %v", got)
	}
	if len(onePod) != 1 || onePod[api.Pods] != 1 {
		t.Errorf("the shared map became %v", onePod)
	}

	bad := fullPod(3)
	bad.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("-1")
	o, err = transform(bad)
	if err != nil {
		t.Fatal(err)
	}
	if sp := o.(*storedPod); sp.err == nil || !strings.Contains(sp.err.Error(), "team-a/trainer-3") || sp.task().UID != "" || sp.uid != bad.UID {
		t.Errorf("a pod with a negative request stored as %+v, %v: want the error naming it and its UID", sp.task(), sp.err)
	}

	// Other objects only lose their managed fields.
	pc := &schedv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}, Value: 1000}
	o, err = transform(pc)
	if got, ok := o.(*schedv1.PriorityClass); err != nil || !ok || got.ManagedFields != nil || got.Name != "high" || got.Value != 1000 {
		t.Fatalf("priority class through the transform: %+v, %v", o, err)
	}
}

// decoded is p as an informer receives it: decoded from the wire, no string
// shared with any other pod.
func decoded(t testing.TB, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := out.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	return out
}

// admitted adds the tolerations the API server's admission gives every pod.
func admitted(p *corev1.Pod) *corev1.Pod {
	five := int64(300)
	p.Spec.Tolerations = append(p.Spec.Tolerations,
		corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &five},
		corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &five})
	return p
}

// storedAs is p as the transform stores it with in, after checking that
// the stored pod converted and puts together the task TaskFromPod gives.
func storedAs(t *testing.T, in *podInterner, p *corev1.Pod) *storedPod {
	t.Helper()
	want, err := TaskFromPod(p)
	if err != nil {
		t.Fatal(err)
	}
	o, err := storeTransform(in)(p)
	if err != nil {
		t.Fatal(err)
	}
	sp := o.(*storedPod)
	if got := sp.task(); sp.err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("stored task (err %v):\n%+v\nfrom the pod:\n%+v", sp.err, got, want)
	}
	return sp
}

// Stored pods share what they have in common (the strings the scheduler's
// tasks keep, equal toleration lists) and nothing that differs: each stored
// task stays equal to the one TaskFromPod gives for its pod.
func TestStoredPodsShareWhatTheyHaveInCommon(t *testing.T) {
	storeWith := func(in *podInterner, p *corev1.Pod) api.Task {
		t.Helper()
		sp := storedAs(t, in, p)
		if sp.namespace != p.Namespace || unsafe.StringData(sp.namespace) != unsafe.StringData(sp.task().Namespace) {
			t.Errorf("the stored pod's namespace %q is not its task's", sp.namespace)
		}
		return sp.task()
	}
	in := newPodInterner()
	store := func(p *corev1.Pod) api.Task { t.Helper(); return storeWith(in, p) }
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	a := store(decoded(t, admitted(fullPod(1))))
	b := store(decoded(t, admitted(fullPod(2))))
	for _, f := range []struct{ name, a, b string }{
		{"namespace", a.Namespace, b.Namespace}, {"job", a.Job, b.Job}, {"queue", a.Queue, b.Queue},
		{"node", a.NodeName, b.NodeName}, {"scheduler", a.SchedulerName, b.SchedulerName},
	} {
		if !same(f.a, f.b) {
			t.Errorf("two pods' %s %q kept twice", f.name, f.a)
		}
	}
	if same(a.Name, b.Name) || same(a.UID, b.UID) {
		t.Error("two pods share a name or a UID")
	}
	if len(a.Tolerations) != 3 || &a.Tolerations[0] != &b.Tolerations[0] {
		t.Errorf("two pods' equal tolerations kept twice: %v", a.Tolerations)
	}
	if cap(a.Tolerations) != len(a.Tolerations) {
		t.Errorf("a shared list has room for an append to write into: len %d cap %d", len(a.Tolerations), cap(a.Tolerations))
	}

	// A list that differs in one field is a list of its own; the strings it
	// has in common with the others are still shared.
	odd := admitted(fullPod(3))
	odd.Spec.Tolerations[2].Effect = corev1.TaintEffectNoSchedule
	c := store(decoded(t, odd))
	if &c.Tolerations[0] == &a.Tolerations[0] || c.Tolerations[2].Effect != "NoSchedule" || a.Tolerations[2].Effect != "NoExecute" {
		t.Errorf("a different list shared: %v and %v", c.Tolerations, a.Tolerations)
	}
	if !same(c.Tolerations[1].Key, a.Tolerations[1].Key) {
		t.Error("the same toleration key kept twice")
	}
	// Lists whose fields run together the same way are different lists
	// (the key cannot run one field into the next).
	two := fullPod(4)
	two.Spec.Tolerations = []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}, {Key: "b", Operator: corev1.TolerationOpExists}}
	d := store(decoded(t, two))
	one := fullPod(5)
	one.Spec.Tolerations = []corev1.Toleration{{Key: "aExistsb", Operator: corev1.TolerationOpExists}}
	e := store(decoded(t, one)) // storeWith compares it with the pod's
	if len(d.Tolerations) != 2 || len(e.Tolerations) != 1 {
		t.Errorf("tolerations %v and %v", d.Tolerations, e.Tolerations)
	}

	// A table at its bound starts over: it never holds more than its
	// bound, and what comes after is shared again (a pod whose strings came
	// as the table started over may have some kept apart from the next
	// one's, so the second and third of three equal pods are compared).
	small := newPodInterner()
	small.maxStrings, small.maxLists, small.maxShapes = 8, 2, 2
	for i := range 6 {
		p := fullPod(10 + i)
		p.Spec.Tolerations = []corev1.Toleration{{Key: fmt.Sprint("key-", i), Operator: corev1.TolerationOpExists}}
		p.Spec.NodeName = fmt.Sprint("node-", i)
		storeWith(small, decoded(t, p))
		x, y := storeWith(small, decoded(t, p)), storeWith(small, decoded(t, p))
		if &x.Tolerations[0] != &y.Tolerations[0] || !same(x.NodeName, y.NodeName) || !same(x.Tolerations[0].Key, y.Tolerations[0].Key) {
			t.Errorf("pod %d: two equal pods share nothing once the tables started over: %v, %v", i, x.Tolerations, y.Tolerations)
		}
		if len(small.strs) > 8 || len(small.tolerations) > 2 || len(small.shapes) > 2 {
			t.Fatalf("pod %d: the tables hold %d strings, %d lists and %d shapes, past their bounds", i, len(small.strs), len(small.tolerations), len(small.shapes))
		}
	}
}

// The pods of one template share one shape: whatever else differs between
// them (names, UIDs, nodes, phases, creation times), their stored pods
// point at the same task without those, and each puts its own task
// together equal to TaskFromPod's. A pod that differs in any other field
// of its task has a shape of its own; a shape table at its bound starts
// over and shares again.
func TestPodsOfOneTemplateShareAShape(t *testing.T) {
	in := newPodInterner()
	stored := func(p *corev1.Pod) *storedPod { t.Helper(); return storedAs(t, in, p) }
	a := stored(decoded(t, admitted(fullPod(1))))
	other := admitted(fullPod(2))
	other.Spec.NodeName, other.Status.Phase = "", corev1.PodPending
	other.CreationTimestamp = metav1.NewTime(other.CreationTimestamp.Add(time.Hour))
	b := stored(decoded(t, other))
	if a.shape != b.shape {
		t.Error("two pods of one template, differing only in their own fields, have a shape each")
	}
	if a.shape.Name != "" || a.shape.UID != "" || a.shape.NodeName != "" || a.shape.Phase != "" || !a.shape.Created.IsZero() {
		t.Errorf("a shape keeps a pod's own fields: %+v", a.shape)
	}
	gpu := admitted(fullPod(3))
	gpu.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	if c := stored(decoded(t, gpu)); c.shape == a.shape {
		t.Error("a pod asking for a GPU shares the shape of one that does not")
	}

	small := newPodInterner()
	small.maxShapes = 2
	for i := range 5 {
		p := admitted(fullPod(10 + i))
		p.Annotations[GroupNameAnnotation] = fmt.Sprint("job-", i)
		in = small
		stored(decoded(t, p))
		x, y := stored(decoded(t, p)), stored(decoded(t, p))
		if x.shape != y.shape {
			t.Errorf("job %d: two pods of one template have a shape each once the table started over", i)
		}
		if len(small.shapes) > 2 {
			t.Fatalf("job %d: the table holds %d shapes, past its bound of 2", i, len(small.shapes))
		}
	}
}

// A shape's key tells apart any two tasks that differ in a field a shape
// keeps, and no two that differ only in a pod's own fields. Every field of
// api.Task is in one of the two lists: a field added to it must be given
// to the key (or named a pod's own) before this passes.
func TestShapeKeyTellsEveryKeptFieldApart(t *testing.T) {
	base := func() api.Task {
		return api.Task{Namespace: "ns", Name: "p-0", UID: "u-0", Job: "job", Queue: "q", TaskSpec: "worker",
			Request:  api.Resource{MilliCPU: 1000, Memory: 1 << 30, Scalars: map[string]int64{api.Pods: 1, "gpu": 2}},
			NodeName: "n-0", Phase: api.TaskBound, NodeSelector: map[string]string{"pool": "a"},
			Affinity:    []api.SelectorTerm{{MatchExpressions: []api.SelectorRequirement{{Key: "zone", Operator: api.SelectorIn, Values: []string{"x", "y"}}}}},
			Tolerations: []api.Toleration{{Key: "k", Operator: "Exists", Effect: "NoSchedule"}},
			Priority:    5, SchedulerName: "s", Created: time.Unix(100, 0)}
	}
	key := func(t api.Task) string { return string(appendShapeKey(nil, &t)) }
	own := map[string]func(*api.Task){
		"Name":     func(t *api.Task) { t.Name = "p-1" },
		"UID":      func(t *api.Task) { t.UID = "u-1" },
		"NodeName": func(t *api.Task) { t.NodeName = "" },
		"Phase":    func(t *api.Task) { t.Phase = api.TaskPending },
		"Created":  func(t *api.Task) { t.Created = time.Unix(200, 0) },
	}
	kept := map[string][]func(*api.Task){
		"Namespace": {func(t *api.Task) { t.Namespace = "ns2" }},
		"Job":       {func(t *api.Task) { t.Job = "jobq" }, func(t *api.Task) { t.Job, t.Queue = "jo", "bq" }},
		"Implicit":  {func(t *api.Task) { t.Implicit = true }},
		"Queue":     {func(t *api.Task) { t.Queue = "q2" }},
		"TaskSpec":  {func(t *api.Task) { t.TaskSpec = "ps" }},
		"Request": {func(t *api.Task) { t.Request.MilliCPU++ }, func(t *api.Task) { t.Request.Memory++ },
			func(t *api.Task) { t.Request.Scalars = map[string]int64{api.Pods: 1, "gpu": 3} },
			func(t *api.Task) { t.Request.Scalars = map[string]int64{api.Pods: 1, "gpv": 2} },
			func(t *api.Task) { t.Request.Scalars = nil }},
		"NodeSelector": {func(t *api.Task) { t.NodeSelector = map[string]string{"pool": "b"} },
			func(t *api.Task) { t.NodeSelector = map[string]string{"poo": "la"} },
			func(t *api.Task) { t.NodeSelector = map[string]string{} }},
		"Affinity": {func(t *api.Task) { t.Affinity[0].MatchExpressions[0].Values = []string{"x"} },
			func(t *api.Task) { t.Affinity[0].MatchExpressions[0].Operator = api.SelectorNotIn },
			func(t *api.Task) { t.Affinity = append(t.Affinity, api.SelectorTerm{}) },
			func(t *api.Task) { t.Affinity = []api.SelectorTerm{} }},
		"Tolerations": {func(t *api.Task) {
			t.Tolerations = []api.Toleration{{Key: "k", Operator: "Exists", Effect: "NoExecute"}}
		},
			func(t *api.Task) { t.Tolerations = nil }},
		"Priority":      {func(t *api.Task) { t.Priority = -5 }},
		"SchedulerName": {func(t *api.Task) { t.SchedulerName = "" }},
		"Protected":     {func(t *api.Task) { t.Protected = true }},
	}
	typ := reflect.TypeOf(api.Task{})
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if _, ok := own[name]; !ok && kept[name] == nil {
			t.Errorf("api.Task.%s is neither a pod's own field nor in a shape's key", name)
		}
	}
	want := key(base())
	for name, f := range own {
		x := base()
		f(&x)
		if key(x) != want {
			t.Errorf("a different %s (a pod's own) changes the shape's key", name)
		}
	}
	for name, fs := range kept {
		for i, f := range fs {
			x := base()
			f(&x)
			if key(x) == want {
				t.Errorf("%s, change %d: the shape's key is the same", name, i)
			}
		}
	}
	// A nil map or slice and an empty one are different shapes (a deep
	// comparison tells them apart, and so does the cache's).
	for name, f := range map[string]func(t *api.Task, empty bool){
		"Scalars":      func(t *api.Task, e bool) { t.Request.Scalars = map[bool]map[string]int64{true: {}}[e] },
		"NodeSelector": func(t *api.Task, e bool) { t.NodeSelector = map[bool]map[string]string{true: {}}[e] },
		"Affinity":     func(t *api.Task, e bool) { t.Affinity = map[bool][]api.SelectorTerm{true: {}}[e] },
		"a term": func(t *api.Task, e bool) {
			t.Affinity = []api.SelectorTerm{{MatchExpressions: map[bool][]api.SelectorRequirement{true: {}}[e]}}
		},
		"Values": func(t *api.Task, e bool) {
			t.Affinity[0].MatchExpressions[0].Values = map[bool][]string{true: {}}[e]
		},
		"Tolerations": func(t *api.Task, e bool) { t.Tolerations = map[bool][]api.Toleration{true: {}}[e] },
	} {
		x, y := base(), base()
		f(&x, false)
		f(&y, true)
		if key(x) == key(y) {
			t.Errorf("%s: nil and empty have the same shape's key", name)
		}
	}
}

// fullNode is a node as a kubelet reports it on a real cluster.
func fullNode(i int) *corev1.Node {
	var images []corev1.ContainerImage
	for k := range 50 {
		images = append(images, corev1.ContainerImage{SizeBytes: 1 << 28, Names: []string{
			fmt.Sprintf("registry.example.com/team/image-%d@sha256:%064d", k, k), fmt.Sprintf("registry.example.com/team/image-%d:v1.2.%d", k, k)}})
	}
	var conds []corev1.NodeCondition
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		conds = append(conds, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"})
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceEphemeralStorage: resource.MustParse("500Gi")}
	name := fmt.Sprintf("node-%d", i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprint("node-uid-", i)), ResourceVersion: "777",
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"topology.kubernetes.io/zone": "zone-a", "node.kubernetes.io/instance-type": "gpu-8x"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.NodeSpec{PodCIDR: "10.1.0.0/24", ProviderID: "aws:///zone-a/i-0123456789abcdef0", Unschedulable: i%2 == 0,
			Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: conds, Images: images,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo:  corev1.NodeSystemInfo{MachineID: "abcdef", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12", ContainerRuntimeVersion: "containerd://1.7.0", KubeletVersion: "v1.36.3"}},
	}
}

// A node is stored as its api.Node, converted once as it arrives: the same
// node NodeFromNode gives for the whole object, under the node's key, with
// nothing else of it kept. The transform is idempotent, and a node that
// cannot be converted is stored with the error naming it.
func TestStoredNodeIsItsNode(t *testing.T) {
	transform := storeTransform(newPodInterner())
	for i := range 2 { // cordoned and not
		full := fullNode(i)
		want, err := NodeFromNode(full)
		if err != nil {
			t.Fatal(err)
		}
		o, err := transform(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		sn, ok := o.(*storedNode)
		if !ok {
			t.Fatalf("a node is stored as %T", o)
		}
		if sn.err != nil || !reflect.DeepEqual(sn.node, want) {
			t.Fatalf("stored node (%v):\n%+v\nfrom the whole node:\n%+v", sn.err, sn.node, want)
		}
		if key, err := cache.MetaNamespaceKeyFunc(sn); err != nil || key != full.Name {
			t.Errorf("store key %q (%v), want %s", key, err, full.Name)
		}
		if kept := (podMeta{name: full.Name, uid: full.UID, resourceVersion: full.ResourceVersion}); sn.podMeta != kept {
			t.Errorf("stored metadata %+v, want name, UID and resource version %+v", sn.podMeta, kept)
		}
		if again, err := transform(sn); err != nil || again != sn {
			t.Errorf("a stored node transformed again: %+v (%v)", again, err)
		}
	}
	bad := fullNode(2)
	bad.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("-1")
	o, err := transform(bad)
	if err != nil {
		t.Fatal(err)
	}
	if sn := o.(*storedNode); sn.err == nil || !strings.Contains(sn.err.Error(), bad.Name) || sn.name != bad.Name {
		t.Errorf("a node with a negative allocatable stored as %+v, %v: want the error naming it", sn.node, sn.err)
	}
}

// reportRetained reports, as unit, the heap that n objects made by build
// (kept until measured) retain each.
func reportRetained(b *testing.B, n int, unit string, build func(i int) any) {
	b.Helper()
	for b.Loop() {
		before := liveHeap()
		keep := make([]any, n)
		for i := range keep {
			keep[i] = build(i)
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/float64(n), unit)
		runtime.KeepAlive(keep)
	}
}

// BenchmarkNodeMemory reports the heap a stored node takes (bytes/node):
// whole but for its managed fields (what was stored before the transform
// cut nodes down), and as the transform stores it.
func BenchmarkNodeMemory(b *testing.B) {
	const n = 500
	raw := make([][]byte, n)
	for i := range raw {
		var err error
		if raw[i], err = fullNode(i).Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	store := storeTransform(newPodInterner())
	for _, c := range []struct {
		name string
		f    func(*corev1.Node) any
	}{
		{"whole", func(n *corev1.Node) any { o, _ := stripManagedFields(n); return o }},
		{"stored", func(n *corev1.Node) any { o, _ := store(n); return o }},
	} {
		b.Run(c.name, func(b *testing.B) {
			reportRetained(b, n, "bytes/node", func(i int) any {
				nd := &corev1.Node{}
				if err := nd.Unmarshal(raw[i]); err != nil {
					b.Fatal(err)
				}
				return c.f(nd)
			})
		})
	}
}

// BenchmarkPodMemory reports the heap a shard holds per pod (bytes/pod):
// the informer's record and the task the cache keeps, for a pod of a batch
// Job as the API server admitted it (admitted) decoded as the informer
// decodes it (no string shared between pods),
// stored whole ("decoded", what an informer without a transform holds) and
// as storeTransform stores it.
func BenchmarkPodMemory(b *testing.B) {
	const n = 5000
	raw := make([][]byte, n)
	for i := range raw {
		p := admitted(fullPod(i))
		job := fmt.Sprint("job-", i/8)
		p.GenerateName = job + "-"
		p.Labels = map[string]string{"batch.kubernetes.io/controller-uid": "c0ffee-" + job, "batch.kubernetes.io/job-name": job,
			"controller-uid": "c0ffee-" + job, "job-name": job}
		p.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
		var err error
		if raw[i], err = p.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	var store func(any) (any, error)
	for _, c := range []struct {
		name string
		f    func(*corev1.Pod) (any, api.Task, error)
	}{
		{"decoded", func(p *corev1.Pod) (any, api.Task, error) {
			t, err := TaskFromPod(p)
			return p, t, err
		}},
		{"stored", func(p *corev1.Pod) (any, api.Task, error) {
			o, _ := store(p)
			sp := o.(*storedPod)
			return sp, sp.task(), sp.err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			type held struct {
				informer any
				cache    api.Task
			}
			reportRetained(b, n, "bytes/pod", func(i int) any {
				if i == 0 {
					// A table of its own for every run: it is counted.
					store = storeTransform(newPodInterner())
				}
				p := &corev1.Pod{}
				if err := p.Unmarshal(raw[i]); err != nil {
					b.Fatal(err)
				}
				o, t, err := c.f(p)
				if err != nil {
					b.Fatal(err)
				}
				return &held{o, t}
			})
		})
	}
}
