package kube

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shardsched/shardsched/api"
)

// The informers' transform: what a shard keeps of each object it watches.

// storedPod is what a pod event becomes before its task is handed to the
// sink (podstore.go): the task converted from the pod as it arrived, and of
// the pod's metadata only what client-go reads (namespace and name for a
// store's key, the resource version, the UID a delete is told by). It is
// dropped once its task is handed on, a watch-list's pods' too (the pod
// reflector's temporary store keeps only their UIDs: listedPod): the sink
// keeps the tasks, and nothing else keeps pods. (A pod kept as a
// *corev1.Pod cut down to what TaskFromPod reads, beside its task in the
// cache, weighed 4.7 times what this and the cache's task do:
// BenchmarkPodMemory, a batch Job's pod.)
//
// Nor does it hold a whole task. A task's fields but five (its name, UID,
// node, phase and creation time) are those of its pod template: the pods of
// one job, or of one workload's implicit group, share them. So a stored pod
// keeps its own five and a pointer to the shape its job's pods share
// (podInterner.shape): 144 bytes a pod where a task of its own took 384.
type storedPod struct {
	podMeta
	// shape is the task without its per-pod fields (shared: read-only);
	// nil when err is set.
	shape    *api.Task
	nodeName string
	phase    api.TaskPhase
	created  time.Time
	// err is why the pod could not be converted: the handlers report it
	// and leave the cache as it was.
	err error
}

// task returns the pod's task, put together from its shape and its own
// fields; the zero task when the pod could not be converted. Its maps and
// slices are shared with other pods' tasks: read-only.
func (p *storedPod) task() api.Task {
	if p.shape == nil {
		return api.Task{}
	}
	t := *p.shape
	t.Name, t.UID, t.NodeName, t.Phase, t.Created = p.name, string(p.uid), p.nodeName, p.phase, p.created
	return t
}

// storeTransform is the built-in informers' transform: a pod becomes its
// storedPod, its common parts shared with other pods' (podInterner), a node
// becomes its storedNode, any other object
// loses its managed fields. It is idempotent (client-go may hand it what it
// already transformed).
func storeTransform(in *podInterner) func(any) (any, error) {
	return func(o any) (any, error) {
		var p *corev1.Pod
		switch o := o.(type) {
		case *storedPod, *storedNode:
			return o, nil // the watch-list's initial events come through twice
		case *corev1.Node:
			return storeNode(o), nil
		case *corev1.Pod:
			p = o
		default:
			return stripManagedFields(o)
		}
		sp := &storedPod{podMeta: podMeta{namespace: p.Namespace, name: p.Name, uid: p.UID, resourceVersion: p.ResourceVersion}}
		t, err := TaskFromPod(p)
		if err != nil {
			sp.err = err
			return sp, nil
		}
		sp.shape = in.task(&t)
		sp.namespace = sp.shape.Namespace
		sp.nodeName, sp.phase, sp.created = t.NodeName, t.Phase, t.Created
		return sp, nil
	}
}

// podMeta is the metadata a stored pod keeps: 64 bytes where a
// metav1.ObjectMeta, nearly all of it empty, took 232 for every pod of the
// cluster. It is the metav1.Object client-go reads (the store's key, the
// resource versions); a field it does not keep reads as empty and setting
// one does nothing, as metav1.Object allows for an object without it.
type podMeta struct {
	namespace, name string
	uid             types.UID
	resourceVersion string
}

var _ metav1.Object = (*podMeta)(nil)

func (m *podMeta) GetNamespace() string                        { return m.namespace }
func (m *podMeta) SetNamespace(namespace string)               { m.namespace = namespace }
func (m *podMeta) GetName() string                             { return m.name }
func (m *podMeta) SetName(name string)                         { m.name = name }
func (m *podMeta) GetUID() types.UID                           { return m.uid }
func (m *podMeta) SetUID(uid types.UID)                        { m.uid = uid }
func (m *podMeta) GetResourceVersion() string                  { return m.resourceVersion }
func (m *podMeta) SetResourceVersion(version string)           { m.resourceVersion = version }
func (*podMeta) GetGenerateName() string                       { return "" }
func (*podMeta) SetGenerateName(string)                        {}
func (*podMeta) GetGeneration() int64                          { return 0 }
func (*podMeta) SetGeneration(int64)                           {}
func (*podMeta) GetSelfLink() string                           { return "" }
func (*podMeta) SetSelfLink(string)                            {}
func (*podMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (*podMeta) SetCreationTimestamp(metav1.Time)              {}
func (*podMeta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (*podMeta) SetDeletionTimestamp(*metav1.Time)             {}
func (*podMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (*podMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (*podMeta) GetLabels() map[string]string                  { return nil }
func (*podMeta) SetLabels(map[string]string)                   {}
func (*podMeta) GetAnnotations() map[string]string             { return nil }
func (*podMeta) SetAnnotations(map[string]string)              {}
func (*podMeta) GetFinalizers() []string                       { return nil }
func (*podMeta) SetFinalizers([]string)                        {}
func (*podMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*podMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*podMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*podMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// storedNode is what the node informer's store holds of a node: the node as
// the scheduler sees it, converted once as it arrives (NodeFromNode), and
// of its metadata what the informer reads (no namespace: nodes have none).
// Every shard keeps every node, and a real node's object is mostly what the
// kubelet reports and no scheduler here reads (its images, up to fifty with
// every name they go by, conditions, addresses, system info and the
// annotations of its network and storage plugins); even cut down to what
// the conversion reads it kept its allocatable as quantities, a map of
// them with their string forms (BenchmarkNodeMemory).
//
// The node informer's store therefore holds no *corev1.Node: its generated
// lister must not be used (it asserts that type).
type storedNode struct {
	podMeta
	node api.Node
	// err is why the node could not be converted (node is then empty):
	// the handlers report it and leave the cache as it was.
	err error
}

func storeNode(n *corev1.Node) *storedNode {
	sn := &storedNode{podMeta: podMeta{name: n.Name, uid: n.UID, resourceVersion: n.ResourceVersion}}
	sn.node, sn.err = NodeFromNode(n)
	return sn
}

// stripManagedFields drops what the scheduler never reads before an object
// is stored: managed fields are often the largest part of an object, and
// every event of every pod is decoded and kept.
func stripManagedFields(o any) (any, error) {
	if m, ok := o.(interface {
		SetManagedFields([]metav1.ManagedFieldsEntry)
	}); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}
