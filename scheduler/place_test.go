package scheduler

import (
	"strings"
	"testing"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
)

// A gang that asks more than the free room of all the shard's schedulable
// nodes together is not scanned for (shortOfRoom): it is not placed, and
// its pods are told what placement would have said of the nodes (short of
// cpu, or cordoned). A pod that tolerates the cordon still goes to a
// cordoned node, whose room that sum leaves out.
func TestGangBeyondTheShardsFreeRoom(t *testing.T) {
	r, events := newRigNoting(t, "shard-o")
	r.node("n1", 4)
	r.node("n2", 4)
	r.c.AddOrUpdateNode(api.Node{Name: "cordoned", UID: "cordoned", Unschedulable: true,
		Allocatable: api.NewResource(16000, 64*gi, map[string]int64{api.Pods: 110})})
	r.gang("big", 3, 3) // 9 CPU against 8 free on the schedulable nodes
	r.cycles(t, 2)
	if b := r.binder.Binds(); len(b) != 0 {
		t.Fatalf("binds %v of a gang asking more than the schedulable nodes have free", b)
	}
	if msg := events.failure("big-0"); !strings.Contains(msg, "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) were unschedulable") {
		t.Fatalf("the gang's pod was told %q, want the two schedulable nodes short of cpu", msg)
	}

	r.gangOf("tolerant", 1, 10, 1)
	r.c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: "tolerant-0", UID: "tolerant-0", Job: "tolerant",
		Request: api.NewResource(10000, gi, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano",
		Tolerations: []api.Toleration{{Key: placement.UnschedulableTaintKey, Operator: "Exists", Effect: api.TaintNoSchedule}}})
	r.cycles(t, 2)
	if b := r.binder.Binds(); b["tolerant-0"] != "cordoned" {
		t.Fatalf("binds %v, want tolerant-0 (10 CPU, more than the 8 free on the schedulable nodes; it tolerates the cordon) on the cordoned node", b)
	}
}
