package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/internal/testenv"
)

// outOfSync reports whether the daemon's cache has node's books out of sync.
func (ev *env) outOfSync(node string) bool {
	return slices.Contains(ev.d.Cache.OutOfSync(), node)
}

// TestAllocatableShrinkMarksNodeOutOfSync is failure F2 through the real
// daemon: a node's allocatable shrinks below what is bound on it. The node
// is marked out of sync and counted (nothing panics), it takes no new pod
// while out of sync, other nodes keep scheduling, and once its allocatable
// is back it recovers and takes pods again.
func TestAllocatableShrinkMarksNodeOutOfSync(t *testing.T) {
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("f2-a", 1, "4", "16Gi")
	ev.nodes("f2-b", 1, "4", "16Gi")
	const a, b = "f2-a-0", "f2-b-0"
	onA := map[string]string{"kubernetes.io/hostname": a}

	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("f2-job-%d", i)
		ev.podGroup(name, "default", 1)
		ev.pod(name+"-0", name, "1", "1Gi", onA)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for i := 0; i < 3; i++ {
			if ev.nodeOf(fmt.Sprintf("f2-job-%d-0", i)) != a {
				return false
			}
		}
		return true
	}, "3 pods are bound to %s", a)
	// The cache must have seen the bindings before the shrink for the test
	// to be about books going negative: it books 3 CPU on f2-a.
	testenv.Eventually(ev.t, 10*time.Second, func() bool {
		sum := ev.d.Cache.JobSummary(ev.ns, "f2-job-0").Bound + ev.d.Cache.JobSummary(ev.ns, "f2-job-1").Bound + ev.d.Cache.JobSummary(ev.ns, "f2-job-2").Bound
		return sum == 3
	}, "the cache knows the 3 bound pods")
	if ev.outOfSync(a) {
		t.Fatalf("%s out of sync before its allocatable shrank", a)
	}
	total0 := ev.d.Cache.OutOfSyncTotal()

	// Shrink f2-a below what is bound on it.
	if err := ev.setNodeCPU(ctx, a, "1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	seen := false
	for !seen {
		if ev.outOfSync(a) {
			seen = true
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never seen out of sync after its allocatable shrank to 1 cpu with 3 bound (OutOfSyncTotal %d → %d, stats %+v)",
				a, total0, ev.d.Cache.OutOfSyncTotal(), ev.d.Cache.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := ev.d.Cache.OutOfSyncTotal(); got <= total0 {
		t.Errorf("OutOfSyncTotal %d, was %d before the shrink: the transition was not counted", got, total0)
	}
	if st := ev.d.Cache.Stats(); st.OutOfSyncTotal <= total0 {
		t.Errorf("Stats().OutOfSyncTotal %d, was %d before the shrink", st.OutOfSyncTotal, total0)
	}

	// A pod that may only go to f2-a waits; its FailedScheduling event says
	// why.
	ev.podGroup("f2-sel", "default", 1)
	ev.pod("f2-sel-0", "f2-sel", "1", "1Gi", onA)
	// A pod that may go anywhere goes to f2-b.
	ev.podGroup("f2-free", "default", 1)
	ev.pod("f2-free-0", "f2-free", "1", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("f2-free-0") != "" }, "the unconstrained pod is bound")
	if n := ev.nodeOf("f2-free-0"); n != b {
		t.Fatalf("the unconstrained pod went to %q, want %s (%s is out of sync)", n, b, a)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		for _, m := range ev.eventMessages("f2-sel-0", "FailedScheduling") {
			if strings.Contains(m, "out of sync") {
				t.Logf("event: %s", m)
				return true
			}
		}
		return false
	}, "a FailedScheduling event for f2-sel-0 names the out-of-sync node")
	// Hold for a while: as long as f2-a's allocatable is 1 cpu (the daemon
	// rebuilds it from the API server, which still says 1 cpu and 3 pods),
	// it stays out of sync and f2-sel-0 stays unbound.
	hold := time.Now().Add(2 * time.Second)
	for time.Now().Before(hold) {
		if n := ev.nodeOf("f2-sel-0"); n != "" {
			t.Fatalf("f2-sel-0 bound to %s while %s has 1 cpu and 3 pods", n, a)
		}
		if !ev.outOfSync(a) {
			t.Fatalf("%s left out of sync while the API server still says 1 cpu with 3 pods bound", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if used, count, err := ev.boundMilliCPU(ctx, a); err != nil || count != 3 || used != 3000 {
		t.Fatalf("%s holds %d pods, %dm cpu (err %v); want the 3 original pods", a, count, used, err)
	}

	// Restore f2-a: 3 of 4 cpu used, so it recovers and f2-sel-0 fits.
	if err := ev.setNodeCPU(ctx, a, "4"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 20*time.Second, func() bool { return !ev.outOfSync(a) }, "%s is back in sync", a)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("f2-sel-0") != "" }, "f2-sel-0 is bound once %s has room", a)
	if n := ev.nodeOf("f2-sel-0"); n != a {
		t.Fatalf("f2-sel-0 bound to %q, want %s", n, a)
	}
	if cpu, err := ev.nodeCPU(ctx, a); err != nil || cpu != 4000 {
		t.Fatalf("%s allocatable cpu %dm (err %v), want 4000m", a, cpu, err)
	}
	if used, count, err := ev.boundMilliCPU(ctx, a); err != nil || used > 4000 {
		t.Fatalf("%s holds %d pods, %dm cpu over its 4 cpu (err %v)", a, count, used, err)
	}
	if ev.outOfSync(a) {
		t.Fatalf("%s out of sync again with 4 of 4 cpu used", a)
	}
}
