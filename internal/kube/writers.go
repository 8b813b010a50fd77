package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/status"
	"github.com/shardsched/shardsched/wire"
)

// Binder binds pods through the pods/binding subresource. Safe for
// concurrent use.
type Binder struct {
	cs kubernetes.Interface
}

// NewBinder returns a binder using cs.
func NewBinder(cs kubernetes.Interface) *Binder { return &Binder{cs: cs} }

// Bind binds one pod, identified by UID as well as name (a re-created pod
// with the same name is not bound by mistake). A pod found already bound to
// node (an earlier call whose answer was lost did it) is success. An error
// after which the pod may be bound, or be bound later (a timeout, a broken
// connection, a server error), wraps wire.ErrBindUnknown; an answer that
// refuses the bind (the pod is gone, bound elsewhere, forbidden, throttled
// before being served) does not.
func (b *Binder) Bind(ctx context.Context, t *api.Task, node string) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Name, UID: types.UID(t.UID)},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := b.cs.CoreV1().Pods(t.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err):
		// "already assigned": by an earlier call of ours, or not.
		p, gerr := b.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		switch {
		case gerr == nil && string(p.UID) == t.UID && p.Spec.NodeName == node:
			return nil
		case gerr == nil || apierrors.IsNotFound(gerr):
			return err
		}
		return fmt.Errorf("%w: %w (and reading the pod back: %v)", wire.ErrBindUnknown, err, gerr)
	case bindRefused(err):
		return err
	}
	return fmt.Errorf("%w: %w", wire.ErrBindUnknown, err)
}

// bindRefused reports whether err is an answer of the API server saying
// the bind was not, and will not be, carried out.
func bindRefused(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false // no answer: a timeout or a broken connection
	}
	switch st.Status().Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusConflict, http.StatusGone, http.StatusUnprocessableEntity,
		http.StatusTooManyRequests:
		return true
	}
	// 500 and the server's own timeouts (504) may have written the binding.
	return false
}

// StatusWriter writes Queue and PodGroup status with server-side apply
// under one field manager, owning only the fields it sets.
type StatusWriter struct {
	vc           volcano.Interface
	fieldManager string
}

// NewStatusWriter returns a writer applying as fieldManager.
func NewStatusWriter(vc volcano.Interface, fieldManager string) *StatusWriter {
	return &StatusWriter{vc: vc, fieldManager: fieldManager}
}

func resourceList(r api.Resource) map[string]string {
	out := map[string]string{}
	for _, d := range r.Dims() {
		v := r.Get(d)
		switch d {
		case api.CPU:
			out[d] = resource.NewMilliQuantity(v, resource.DecimalSI).String()
		case api.Memory:
			out[d] = resource.NewQuantity(v, resource.BinarySI).String()
		default:
			out[d] = resource.NewQuantity(v, resource.DecimalSI).String()
		}
	}
	return out
}

// allocatedList is a Queue's status.allocated: never an empty object, which
// server-side apply sends as null and the CRD's schema refuses (so an
// emptied queue kept its last non-empty figures): nothing allocated is
// written as zero CPU and memory.
func allocatedList(r api.Resource) map[string]string {
	out := resourceList(r)
	if len(out) == 0 {
		out[api.CPU], out[api.Memory] = "0", "0"
	}
	return out
}

func (w *StatusWriter) opts() metav1.PatchOptions {
	force := true
	return metav1.PatchOptions{FieldManager: w.fieldManager, Force: &force}
}

func wrapConflict(err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %v", status.ErrConflict, err)
	}
	return err
}

// WriteQueueStatus applies a Queue's status subresource.
func (w *StatusWriter) WriteQueueStatus(ctx context.Context, queue string, st api.QueueStatus) error {
	body := map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1",
		"kind":       "Queue",
		"metadata":   map[string]any{"name": queue},
		"status": map[string]any{
			"allocated": allocatedList(st.Allocated),
			"pending":   st.Pending,
			"running":   st.Running,
			"inqueue":   st.Inqueue,
		},
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = w.vc.SchedulingV1beta1().Queues().Patch(ctx, queue, types.ApplyPatchType, b, w.opts(), "status")
	if apierrors.IsNotFound(err) {
		// A queue with no object (root or default when nobody declared
		// them) has nowhere to show status; retrying would not help.
		return nil
	}
	return wrapConflict(err)
}

// InvalidQueueAnnotation is set on a Queue object that is left out of the
// queue tree (a cycle, an unknown parent, a bad quantity, a capability
// above an ancestor's...); its value says why, and it is removed once the
// queue is valid again. Volcano's QueueStatus (volcano.sh/apis v1.14) has no
// conditions, and its only other status field that could say so, state, is
// owned by Volcano's controller; so the reason is an annotation, beside a
// Warning Event (Recorder.InvalidQueue).
const InvalidQueueAnnotation = "shardsched.io/invalid-queue"

// maxInvalidMessage bounds the annotation's text.
const maxInvalidMessage = 1024

// MarkQueueInvalid sets InvalidQueueAnnotation on Queue name to message, by
// a JSON merge patch of that one annotation with the object's UID as a
// precondition: it never creates a Queue, never touches another field, and
// never writes to a re-created Queue of the same name. A missing object or a
// UID mismatch is not an error.
func (w *StatusWriter) MarkQueueInvalid(ctx context.Context, name, uid, message string) error {
	return w.patchQueueAnnotation(ctx, name, uid, InvalidQueueText(message))
}

// ClearQueueInvalid removes InvalidQueueAnnotation from Queue name, as
// MarkQueueInvalid sets it.
func (w *StatusWriter) ClearQueueInvalid(ctx context.Context, name, uid string) error {
	return w.patchQueueAnnotation(ctx, name, uid, nil)
}

// InvalidQueueText is the annotation text MarkQueueInvalid writes for
// message.
func InvalidQueueText(message string) string {
	if len(message) > maxInvalidMessage {
		return strings.ToValidUTF8(message[:maxInvalidMessage-3], "") + "..."
	}
	return message
}

func (w *StatusWriter) patchQueueAnnotation(ctx context.Context, name, uid string, value any) error {
	meta := map[string]any{"annotations": map[string]any{InvalidQueueAnnotation: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = w.vc.SchedulingV1beta1().Queues().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: w.fieldManager})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// WritePodGroupStatus writes a PodGroup's status. Volcano's PodGroup CRD
// has no status subresource, and a server-side apply to a PodGroup deleted
// meanwhile would re-create it, so this is a JSON merge patch of the status
// fields only, with the UID as a precondition (a re-created PodGroup with the
// same name is never written to: F4). Only the owner shard writes it.
func (w *StatusWriter) WritePodGroupStatus(ctx context.Context, namespace, name, uid string, st api.JobStatus) error {
	conds := make([]map[string]any, 0, len(st.Conditions))
	for _, c := range st.Conditions {
		ts := c.LastTransition
		if ts.IsZero() {
			ts = time.Now()
		}
		conds = append(conds, map[string]any{
			"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastTransitionTime": ts.UTC().Format(time.RFC3339),
		})
	}
	body := map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status": map[string]any{
			"phase":      string(st.Phase),
			"running":    st.Running,
			"succeeded":  st.Succeeded,
			"failed":     st.Failed,
			"conditions": conds,
		},
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = w.vc.SchedulingV1beta1().PodGroups(namespace).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: w.fieldManager})
	return wrapConflict(err)
}

// Groups creates and deletes implicit PodGroups. Safe for concurrent use.
type Groups struct {
	vc volcano.Interface
}

// NewGroups returns a Groups using vc.
func NewGroups(vc volcano.Interface) *Groups { return &Groups{vc: vc} }

// CreatePodGroup creates an implicit PodGroup; one that already exists is
// not an error.
func (g *Groups) CreatePodGroup(ctx context.Context, namespace, name, queue string, minMember int32) error {
	pg := &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{ImplicitGroupLabel: "true"}},
		Spec:       schedv1beta1.PodGroupSpec{MinMember: minMember, Queue: queue},
	}
	_, err := g.vc.SchedulingV1beta1().PodGroups(namespace).Create(ctx, pg, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// DeletePodGroup deletes a PodGroup only if it is still the object with this
// UID and resourceVersion (F4: a delayed delete never removes a re-created
// PodGroup of the same name). A precondition failure or a missing object is
// not an error.
func (g *Groups) DeletePodGroup(ctx context.Context, namespace, name, uid, resourceVersion string) error {
	u := types.UID(uid)
	pre := metav1.Preconditions{UID: &u}
	if resourceVersion != "" {
		pre.ResourceVersion = &resourceVersion
	}
	err := g.vc.SchedulingV1beta1().PodGroups(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &pre})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
