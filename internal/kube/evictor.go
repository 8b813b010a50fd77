package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/shardsched/shardsched/api"
)

// Evictor evicts pods through the Eviction API (so PodDisruptionBudgets
// are honoured; a refusal is returned and the scheduler tries again later)
// with a UID precondition, and records Preempted events on the pod and on
// PodGroups (scheduler.Evictor). Safe for concurrent use.
type Evictor struct {
	cs  kubernetes.Interface
	rec *Recorder
}

// NewEvictor returns an Evictor writing through cs and recording with rec.
func NewEvictor(cs kubernetes.Interface, rec *Recorder) *Evictor { return &Evictor{cs: cs, rec: rec} }

// Evict evicts one pod; a pod already gone, or replaced by another object
// of the same name, is not an error.
func (e *Evictor) Evict(ctx context.Context, t *api.Task, reason, message string) error {
	uid := types.UID(t.UID)
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	err := e.cs.PolicyV1().Evictions(t.Namespace).Evict(ctx, ev)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case err != nil:
		return err
	}
	e.rec.rec.Event(podRef(t), corev1.EventTypeWarning, reason, message)
	return nil
}

// Note records a normal event on a PodGroup.
func (e *Evictor) Note(j *api.Job, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "PodGroup", APIVersion: "scheduling.volcano.sh/v1beta1", Namespace: j.Namespace, Name: j.Name, UID: types.UID(j.UID)}
	e.rec.rec.Event(ref, corev1.EventTypeNormal, reason, message)
}
