package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/shardsched/shardsched/api"
)

// Recorder emits Kubernetes events: Scheduled and FailedScheduling on pods,
// Unschedulable on PodGroups, InvalidQueue on Queues. Safe for concurrent use; never blocks (the
// broadcaster queues and drops under pressure).
type Recorder struct {
	b   record.EventBroadcaster
	rec record.EventRecorder
}

// NewRecorder starts an event broadcaster writing through cs.
func NewRecorder(cs kubernetes.Interface, component string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return &Recorder{b: b, rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})}
}

// Shutdown stops the broadcaster.
func (r *Recorder) Shutdown() { r.b.Shutdown() }

func podRef(t *api.Task) runtime.Object {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: t.Namespace, Name: t.Name, UID: types.UID(t.UID)}
}

// Scheduled records a successful bind.
func (r *Recorder) Scheduled(t *api.Task, node string) {
	r.rec.Eventf(podRef(t), corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", t.Namespace, t.Name, node)
}

// FailedScheduling records why a pod could not be placed.
func (r *Recorder) FailedScheduling(t *api.Task, message string) {
	r.rec.Event(podRef(t), corev1.EventTypeWarning, "FailedScheduling", message)
}

// Unschedulable records why a PodGroup waits.
func (r *Recorder) Unschedulable(j *api.Job, message string) {
	ref := &corev1.ObjectReference{Kind: "PodGroup", APIVersion: "scheduling.volcano.sh/v1beta1", Namespace: j.Namespace, Name: j.Name, UID: types.UID(j.UID)}
	r.rec.Event(ref, corev1.EventTypeWarning, "Unschedulable", message)
}

// InvalidQueue records on a Queue (cluster-scoped: the Event lands in the
// default namespace) why it is left out of the queue tree.
func (r *Recorder) InvalidQueue(name, uid, message string) {
	ref := &corev1.ObjectReference{Kind: "Queue", APIVersion: "scheduling.volcano.sh/v1beta1", Name: name, UID: types.UID(uid)}
	r.rec.Event(ref, corev1.EventTypeWarning, "InvalidQueue", message)
}
