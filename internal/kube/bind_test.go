package kube

import (
	"context"
	"errors"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// A bind's error says whether the pod may have been bound: only an answer
// refusing it is definite; a pod found already on the node is success.
func TestBindOutcome(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name     string
		bindErr  error
		onNode   string // the pod's nodeName as read back
		wantNil  bool
		wantDoub bool
	}{
		{name: "bound", bindErr: nil, wantNil: true},
		{name: "deadline", bindErr: context.DeadlineExceeded, wantDoub: true},
		{name: "connection reset", bindErr: &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, wantDoub: true},
		{name: "server timeout", bindErr: apierrors.NewServerTimeout(pods, "create", 1), wantDoub: true},
		{name: "internal error", bindErr: apierrors.NewInternalError(errors.New("etcd")), wantDoub: true},
		{name: "already on this node", bindErr: apierrors.NewConflict(pods, "p", errors.New("already assigned")), onNode: "n1", wantNil: true},
		{name: "already on another node", bindErr: apierrors.NewConflict(pods, "p", errors.New("already assigned")), onNode: "n2"},
		{name: "pod gone", bindErr: apierrors.NewNotFound(pods, "p")},
		{name: "throttled", bindErr: apierrors.NewTooManyRequests("slow down", 1)},
		{name: "forbidden", bindErr: apierrors.NewForbidden(pods, "p", errors.New("no"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}, Spec: corev1.PodSpec{NodeName: c.onNode}}
			cs := fake.NewClientset(pod)
			cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				return true, nil, c.bindErr
			})
			err := NewBinder(cs).Bind(context.Background(), &api.Task{UID: "u1", Namespace: "ns", Name: "p"}, "n1")
			switch {
			case c.wantNil && err != nil:
				t.Fatalf("err %v, want success", err)
			case !c.wantNil && err == nil:
				t.Fatal("success, want an error")
			case err != nil && errors.Is(err, wire.ErrBindUnknown) != c.wantDoub:
				t.Fatalf("err %v: unknown outcome %v, want %v", err, errors.Is(err, wire.ErrBindUnknown), c.wantDoub)
			}
		})
	}
}
