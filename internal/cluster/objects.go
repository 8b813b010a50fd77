package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or updates) the CRDs in the given YAML manifests and
// waits until the API server serves every one of them.
func InstallCRDs(ctx context.Context, cfg *rest.Config, manifests [][]byte, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	type served struct{ gv, plural string }
	var want []served
	for _, m := range manifests {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("decode CRD manifest: %w", err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if obj.GetKind() != "CustomResourceDefinition" {
				return fmt.Errorf("manifest %q is a %s, not a CustomResourceDefinition", obj.GetName(), obj.GetKind())
			}
			_, err := dyn.Resource(crdGVR).Create(ctx, &obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				cur, gerr := dyn.Resource(crdGVR).Get(ctx, obj.GetName(), metav1.GetOptions{})
				if gerr != nil {
					return gerr
				}
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = dyn.Resource(crdGVR).Update(ctx, &obj, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
			}
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "plural")
			versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
			for _, v := range versions {
				vm, ok := v.(map[string]interface{})
				if !ok {
					continue
				}
				if name, ok := vm["name"].(string); ok {
					if servedFlag, _ := vm["served"].(bool); servedFlag {
						want = append(want, served{group + "/" + name, plural})
					}
				}
			}
		}
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for _, w := range want {
		for {
			list, err := disc.ServerResourcesForGroupVersion(w.gv)
			found := false
			if err == nil {
				for _, r := range list.APIResources {
					if r.Name == w.plural {
						found = true
					}
				}
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s in %s not served after %s", w.plural, w.gv, timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// FakeNode returns a Node that kwok manages: Ready once kwok initializes it.
// cpu and memory are quantities ("64", "256Gi"); one that does not parse,
// or is negative, is an error naming it.
func FakeNode(name string, cpu, memory string, labels map[string]string) (*corev1.Node, error) {
	cpuQ, err := resource.ParseQuantity(cpu)
	if err != nil || cpuQ.Sign() < 0 {
		return nil, fmt.Errorf("node %s: cpu %q is not a quantity of zero or more", name, cpu)
	}
	memQ, err := resource.ParseQuantity(memory)
	if err != nil || memQ.Sign() < 0 {
		return nil, fmt.Errorf("node %s: memory %q is not a quantity of zero or more", name, memory)
	}
	l := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range labels {
		l[k] = v
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    cpuQ,
		corev1.ResourceMemory: memQ,
		corev1.ResourcePods:   *resource.NewQuantity(256, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc.DeepCopy()},
	}, nil
}

// CreateFakeNodes creates n kwok nodes named prefix-0 … prefix-(n-1) with 8
// concurrent writers, and waits until every one of them is Ready.
func CreateFakeNodes(ctx context.Context, cs kubernetes.Interface, prefix string, n int, cpu, memory string, timeout time.Duration) error {
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		node, err := FakeNode(fmt.Sprintf("%s-%d", prefix, i), cpu, memory, nil)
		if err != nil {
			return err
		}
		nodes[i] = node
	}
	return CreateNodes(ctx, cs, nodes, timeout)
}

// CreateNodes creates the given nodes (kwok nodes, see FakeNode, with
// distinct names) with 8 concurrent writers, and waits until every one of
// them is Ready. A node that already exists is left as it is.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, nodes []*corev1.Node, timeout time.Duration) error {
	n := len(nodes)
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for _, node := range nodes {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			return fmt.Errorf("create fake node: %w", err)
		}
	}
	mine := make(map[string]bool, n)
	for _, node := range nodes {
		mine[node.Name] = true
	}
	deadline := time.Now().Add(timeout)
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, node := range list.Items {
			if !mine[node.Name] {
				continue
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d fake nodes Ready after %s (is kwok running?)", ready, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
