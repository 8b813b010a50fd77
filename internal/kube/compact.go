package kube

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/api"
)

// The informers' transform: what a shard keeps of each object it watches.

// storedPod is what the pod informer's store holds of a pod: the task
// converted from the pod as it arrived, and of the pod's metadata only what
// the informer itself reads (namespace and name for the store's key, the
// resource version that tells an update from a resync, the UID a delete is
// told by). Every shard keeps every pod of the cluster, and the scheduler
// reads nothing of a pod but its task: a pod kept as a *corev1.Pod cut down
// to what TaskFromPod reads, beside its task in the cache, weighed 4.7 times
// what this and the cache's task do (BenchmarkPodMemory, a batch Job's pod).
//
// The pod informer's store therefore holds no *corev1.Pod: its generated
// lister must not be used (it asserts that type), nor client-go's
// watch-list consistency check (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR, a
// setting for client-go's own CI), which asserts runtime.Object.
type storedPod struct {
	metav1.ObjectMeta
	task api.Task
	// err is why the pod could not be converted (task is then empty): the
	// handlers report it and leave the cache as it was.
	err error
}

// storeTransform is the built-in informers' transform: a pod becomes its
// storedPod, a node is cut down to what NodeFromNode reads (compactNode),
// any other object loses its managed fields. It is idempotent
// (client-go may hand it what it already transformed). onePod is shared by
// every task whose only scalar is one "pods", most of them: a map per task
// was a seventh of what a shard kept per pod. Tasks are read-only once
// converted (the cache shares their maps too, cache.sanitize).
func storeTransform(onePod map[string]int64) func(any) (any, error) {
	return func(o any) (any, error) {
		var p *corev1.Pod
		switch o := o.(type) {
		case *storedPod:
			return o, nil // the watch-list's initial events come through twice
		case *corev1.Node:
			return compactNode(o), nil
		case *corev1.Pod:
			p = o
		default:
			return stripManagedFields(o)
		}
		sp := &storedPod{ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}}
		sp.task, sp.err = TaskFromPod(p)
		if s := sp.task.Request.Scalars; len(s) == 1 && s[api.Pods] == 1 {
			sp.task.Request.Scalars = onePod
		}
		return sp, nil
	}
}

// compactNode returns the part of n that NodeFromNode reads: its name, UID,
// resource version and labels, whether it is cordoned, its taints and its
// allocatable resources. Every shard keeps every node, and a real node's
// object is mostly what the kubelet reports and no scheduler here reads:
// its images (up to fifty, with every name they go by), conditions,
// addresses, system info and the annotations of its network and storage
// plugins.
func compactNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status:     corev1.NodeStatus{Allocatable: n.Status.Allocatable},
	}
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
