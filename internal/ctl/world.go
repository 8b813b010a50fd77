// Package ctl is the kubectl plugin's logic (cmd/kubectl-shardsched): it
// reads what a read-only user may read from the API server (Queues,
// PodGroups, pods, nodes, PriorityClasses, events) and explains, in plain
// words first and numbers second, why a job waits and how full each queue
// is. The explanations are computed from the objects, with the scheduler's
// own rules (api.AdmitAmount, the queue tree's validation, placement's
// filters over every node of the cluster); the verdict the scheduler wrote
// on the PodGroup is shown beside them, since the coordinator's ledger is
// not readable from the API server.
package ctl

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"
)

// World is what the plugin read from the API server: the cluster-wide
// objects an explanation needs. Tests build it by hand.
type World struct {
	Queues          []schedv1beta1.Queue
	Groups          []schedv1beta1.PodGroup
	Pods            []corev1.Pod
	Nodes           []corev1.Node
	PriorityClasses []schedulingv1.PriorityClass
	// Events are those of one namespace (the explained job's).
	Events []corev1.Event
}

// Client reads the World. Lists are paged (500 objects a page), as kubectl
// pages them, so a cluster of 100k pods is read without one huge response.
type Client struct {
	CS kubernetes.Interface
	VC volcano.Interface
}

// Queues lists every Queue.
func (c Client) Queues(ctx context.Context) ([]schedv1beta1.Queue, error) {
	l, err := c.VC.SchedulingV1beta1().Queues().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return l.Items, nil
}

// World reads everything an explanation of a job in namespace ns needs
// (with ns empty, no events).
func (c Client) World(ctx context.Context, ns string) (*World, error) {
	w := &World{}
	var err error
	if w.Queues, err = c.Queues(ctx); err != nil {
		return nil, err
	}
	groups, err := c.VC.SchedulingV1beta1().PodGroups("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list podgroups: %w", err)
	}
	w.Groups = groups.Items
	if err := eachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CS.CoreV1().Pods("").List(ctx, o)
	}, func(p *corev1.Pod) { w.Pods = append(w.Pods, *p) }); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	if err := eachItem(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return c.CS.CoreV1().Nodes().List(ctx, o)
	}, func(n *corev1.Node) { w.Nodes = append(w.Nodes, *n) }); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	pcs, err := c.CS.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list priorityclasses: %w", err)
	}
	w.PriorityClasses = pcs.Items
	if ns == metav1.NamespaceAll {
		return w, nil // events only for the namespace of a job explained
	}
	evs, err := c.CS.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list events in %s: %w", ns, err)
	}
	w.Events = evs.Items
	return w, nil
}

// eachItem lists page by page and hands every item of type T to add.
func eachItem[T any](ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), add func(*T)) error {
	return pager.New(list).EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		if v, ok := o.(any).(*T); ok {
			add(v)
		}
		return nil
	})
}
