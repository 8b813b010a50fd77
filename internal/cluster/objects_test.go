package cluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A kwok node is made from what it is given, and a size that is not a
// quantity, or is negative, is an error that names the node and the size
// instead of a panic.
func TestFakeNodeSizes(t *testing.T) {
	n, err := FakeNode("n1", "64", "256Gi", map[string]string{"zone": "a"})
	if err != nil {
		t.Fatal(err)
	}
	alloc := n.Status.Allocatable
	if cpu := alloc[corev1.ResourceCPU]; cpu.MilliValue() != 64000 {
		t.Errorf("cpu %s, want 64", cpu.String())
	}
	if mem := alloc[corev1.ResourceMemory]; mem.Value() != 256<<30 {
		t.Errorf("memory %s, want 256Gi", mem.String())
	}
	if pods := alloc[corev1.ResourcePods]; pods.Value() != 256 {
		t.Errorf("pods %s, want 256", pods.String())
	}
	if n.Labels["zone"] != "a" || n.Labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("labels %v", n.Labels)
	}
	for _, c := range []struct{ cpu, mem, want string }{
		{"sixty-four", "256Gi", `cpu "sixty-four"`},
		{"-1", "256Gi", `cpu "-1"`},
		{"64", "lots", `memory "lots"`},
		{"64", "-2Gi", `memory "-2Gi"`},
	} {
		_, err := FakeNode("n2", c.cpu, c.mem, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "n2") {
			t.Errorf("FakeNode(cpu %q, memory %q): %v, want an error naming n2 and %s", c.cpu, c.mem, err, c.want)
		}
	}
}
