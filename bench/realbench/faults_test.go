package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/internal/kube"
)

func testPod(name, node string, milli int64, ann map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milli, resource.DecimalSI)}}}}},
	}
}

func testNode(name string, milli int64) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milli, resource.DecimalSI)}}}
}

// A node is over when its bound pods ask more than it has; finished pods
// and pending ones do not count, and a pod on a node that does not exist
// is reported.
func TestOverAllocated(t *testing.T) {
	nodes := []corev1.Node{testNode("n1", 4000), testNode("n2", 4000)}
	fits := []corev1.Pod{testPod("a", "n1", 2000, nil), testPod("b", "n1", 2000, nil), testPod("c", "", 4000, nil)}
	if got := overAllocated(fits, nodes); len(got) != 0 {
		t.Fatalf("a full node reported over: %v", got)
	}
	done := testPod("d", "n1", 2000, nil)
	done.Status.Phase = corev1.PodSucceeded
	if got := overAllocated(append(fits, done), nodes); len(got) != 0 {
		t.Fatalf("a finished pod counted: %v", got)
	}
	over := append(fits, testPod("e", "n1", 1, nil), testPod("f", "gone", 1, nil))
	got := overAllocated(over, nodes)
	if len(got) != 2 || len(got["n1"]) != 3 || len(got["gone"]) != 1 {
		t.Fatalf("over: %v, want n1 with its 3 pods and the missing node", got)
	}
}

// A queue's use is what its bound pods ask: a gang's pods count in their
// group's queue, a single pod in the queue it names; pending pods do not.
func TestQueueUse(t *testing.T) {
	g := map[string]string{kube.GroupNameAnnotation: "gang-0"}
	s := map[string]string{kube.QueueNameAnnotation: "singles"}
	pods := []corev1.Pod{
		testPod("g0", "n1", 1000, g), testPod("g1", "n2", 1000, g), testPod("g2", "", 1000, g),
		testPod("s0", "n1", 500, s),
	}
	use := queueUse(pods, map[string]string{"gang-0": "gangs"})
	if use["gangs"] != 2000 || use["singles"] != 500 {
		t.Fatalf("use %v, want gangs 2000m and singles 500m", use)
	}
}

// A gang with some but not all of its pods bound is reported; a whole one
// and one not bound at all are not.
func TestPartlyBound(t *testing.T) {
	ann := func(g string) map[string]string { return map[string]string{kube.GroupNameAnnotation: g} }
	pods := []corev1.Pod{
		testPod("w0", "n1", 1, ann("whole")), testPod("w1", "n2", 1, ann("whole")),
		testPod("p0", "n1", 1, ann("part")), testPod("p1", "", 1, ann("part")),
		testPod("n0", "", 1, ann("none")), testPod("n1", "", 1, ann("none")),
		testPod("single", "n1", 1, nil),
	}
	got := partlyBound(pods, 2)
	if len(got) != 1 || len(got["part"]) != 1 {
		t.Fatalf("partly bound %v, want only gang part with 1 pod", got)
	}
}

func TestPickScenarios(t *testing.T) {
	all, err := pickScenarios(nil)
	if err != nil || len(all) != len(scenarioNames()) {
		t.Fatalf("all: %d scenarios, %v", len(all), err)
	}
	if _, err := pickScenarios([]string{"sigstop", "nonsense"}); err == nil || !strings.Contains(err.Error(), `"nonsense"`) {
		t.Fatalf("an unknown scenario: %v, want an error naming it", err)
	}
}

// -fault-victim: leader always picks the leader, other never does and
// reaches every other shard, any picks both.
func TestPickVictim(t *testing.T) {
	const n, leader = 3, 1
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[string]map[int]int{}
	for _, mode := range []string{victimAny, victimLeader, victimOther} {
		seen[mode] = map[int]int{}
		for range 300 {
			v := pickVictim(rng, mode, n, leader)
			if v < 0 || v >= n {
				t.Fatalf("%s: victim %d out of 0..%d", mode, v, n-1)
			}
			seen[mode][v]++
		}
	}
	if len(seen[victimLeader]) != 1 || seen[victimLeader][leader] != 300 {
		t.Errorf("leader: victims %v, want only %d", seen[victimLeader], leader)
	}
	if seen[victimOther][leader] != 0 || len(seen[victimOther]) != n-1 {
		t.Errorf("other: victims %v, want every shard but %d", seen[victimOther], leader)
	}
	if len(seen[victimAny]) != n || seen[victimAny][leader] < 150 {
		t.Errorf("any: victims %v, want every shard, the leader at least half the time", seen[victimAny])
	}
}
