package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/wire"
)

// Two shards on one etcd and API server. The shard that owns the job's
// queue holds one node too small for any task of the gang; the other
// shard's nodes have room. The owner admits the gang, offers it, the other
// shard claims it in etcd and binds every pod onto its own nodes; the claim
// record names it while the job runs, the owner confirms the reservation,
// no pod is bound twice, and the record is deleted once the job is gone.
func TestGangHandedToShardWithRoom(t *testing.T) {
	start := time.Now()
	ev := newNamespace(t)
	e := testenv.NewEtcd(t)
	d0, http0 := startDaemon(t, ev.cfg, "shard-0", e.Endpoints, nil)
	d1, http1 := startDaemon(t, ev.cfg, "shard-1", e.Endpoints, []string{d0.Shard.GossipAddr()})
	daemons := []*Daemon{d0, d1}
	addrs := map[*Daemon]string{d0: http0, d1: http1}
	queueKey := wire.QueueKey("default")
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		n0, n1 := 0, 0
		for i := 0; i < 64; i++ {
			k := wire.PartitionKey(i)
			h0, h1 := d0.Shard.Holds(k), d1.Shard.Holds(k)
			if h0 == h1 {
				return false
			}
			if h0 {
				n0++
			} else {
				n1++
			}
		}
		return n0 > 0 && n1 > 0 && d0.Shard.Holds(queueKey) != d1.Shard.Holds(queueKey)
	}, "the two shards split the partitions and one holds queue default")
	owner, other := d0, d1
	if d1.Shard.Holds(queueKey) {
		owner, other = d1, d0
	}
	t.Logf("shards converged after %s: %s owns queue default, %s is the other", time.Since(start).Round(time.Millisecond), owner.opts.Name, other.opts.Name)
	// Ownership must not move during the test (a move would test fencing,
	// not the hand-off): gossip has settled on two members.
	for _, d := range daemons {
		if n := len(d.Shard.Members()); n != 2 {
			t.Fatalf("%s sees %d members, want 2", d.opts.Name, n)
		}
	}

	// Node names whose partition each shard holds.
	pick := func(d *Daemon, prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n && i < 1000; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if d.Shard.Holds(wire.PartitionKey(wire.Partition(name, 64))) {
				out = append(out, name)
			}
		}
		if len(out) < n {
			t.Fatalf("found %d of %d node names in %s's partitions", len(out), n, d.opts.Name)
		}
		return out
	}
	small := pick(owner, "ho-small", 1)
	roomy := pick(other, "ho-roomy", 2)
	ctx := context.Background()
	ev.noForeignNodes(append(slices.Clone(small), roomy...))
	ev.namedNodes(small, "2", "8Gi")
	ev.namedNodes(roomy, "8", "32Gi")
	for _, d := range daemons {
		want := 1
		if d == other {
			want = 2
		}
		testenv.Eventually(ev.t, 20*time.Second, func() bool {
			return d.Cache.Stats().BookedNodes == want
		}, "%s's cache has its %d node(s)", d.opts.Name, want)
	}

	// A gang of 3 tasks of 3 CPU: none fits on the owner's 2-CPU node; the
	// other shard's two 8-CPU nodes hold 2 each.
	ev.podGroup("wide", "default", 3)
	for i := 0; i < 3; i++ {
		ev.pod(fmt.Sprintf("wide-%d", i), "wide", "3", "1Gi", nil)
	}
	pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "wide", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(pg.UID)
	submitted := time.Now()
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("wide", 3) == 3 }, "all 3 gang pods are bound")
	t.Logf("gang bound %s after submission", time.Since(submitted).Round(time.Millisecond))
	nodes := map[string]string{}
	for i := 0; i < 3; i++ {
		pod := fmt.Sprintf("wide-%d", i)
		nodes[pod] = ev.nodeOf(pod)
		if !slices.Contains(roomy, nodes[pod]) {
			t.Fatalf("%s bound to %s, want one of the other shard's nodes %v", pod, nodes[pod], roomy)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	claimKey := shard.DefaultConfig().EtcdPrefix + "/claims/" + uid
	readClaim := func() (shard.Claim, bool) {
		resp, err := cli.Get(ctx, claimKey)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return shard.Claim{}, false
		}
		var c shard.Claim
		if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
			t.Fatal(err)
		}
		c.Lease = resp.Kvs[0].Lease
		return c, true
	}
	c, ok := readClaim()
	if !ok || c.State != shard.Claimed || c.To != other.opts.Name || c.From != owner.opts.Name || c.Lease != int64(other.Shard.Lease()) {
		t.Fatalf("claim record while the job runs: %+v (present %v), want claimed by %s from %s under %s's lease", c, ok, other.opts.Name, owner.opts.Name, other.opts.Name)
	}

	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		res, err := owner.Quota.List(ctx)
		if err != nil {
			return false
		}
		for _, r := range res.Reservations {
			if r.Job.UID == uid {
				return r.State == coordinator.Confirmed && r.Amount.MilliCPU == 3*3000
			}
		}
		return false
	}, "the owner confirmed the gang's reservation")
	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "wide", metav1.GetOptions{})
		return err == nil && pg.Status.Phase == schedv1beta1.PodGroupRunning
	}, "the PodGroup is Running")

	// No pod bound twice: the other shard made exactly 3 binds, the owner
	// none, nothing failed, and every pod is still where it was bound.
	so, st := owner.sched.Stats(), other.sched.Stats()
	if so.Binds != 0 || st.Binds != 3 || so.BindFailures != 0 || st.BindFailures != 0 {
		t.Fatalf("binds: owner %d (failed %d), other %d (failed %d); want 0 and 3, none failed", so.Binds, so.BindFailures, st.Binds, st.BindFailures)
	}
	for pod, n := range nodes {
		if now := ev.nodeOf(pod); now != n {
			t.Fatalf("%s moved from %s to %s", pod, n, now)
		}
	}
	mo, mt := scrapeAt(t, addrs[owner]), scrapeAt(t, addrs[other])
	if mo["shardsched_handoff_offers_total"] < 1 || mt["shardsched_handoff_claims_total"] < 1 ||
		mt["shardsched_handoff_offers_total"] != 0 || mo["shardsched_handoff_claims_total"] != 0 {
		t.Fatalf("hand-off metrics: owner offers %v claims %v, other offers %v claims %v; want the owner to offer and the other to claim",
			mo["shardsched_handoff_offers_total"], mo["shardsched_handoff_claims_total"], mt["shardsched_handoff_offers_total"], mt["shardsched_handoff_claims_total"])
	}

	// The job ends: its record goes.
	zero := int64(0)
	for i := 0; i < 3; i++ {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, fmt.Sprintf("wide-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Delete(ctx, "wide", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		_, ok := readClaim()
		return !ok
	}, "the claim record is deleted with the job")

	// A pod that fits on no node: the owner's FailedScheduling message
	// counts every node of the cluster (its own, and the other shard's,
	// which did not report room for it), not only the owner's one node; and
	// the plugin, counting from the API server, says the same of the nodes.
	ev.podGroup("huge", "default", 1)
	ev.pod("huge-0", "huge", "20", "1Gi", nil)
	want := "0/3 nodes are available: 2 node(s) placed by other shards, none of which reported room for it, 1 Insufficient cpu."
	testenv.Eventually(ev.t, 30*time.Second, func() bool {
		return slices.Contains(ev.eventMessages("huge-0", "FailedScheduling"), want)
	}, "the FailedScheduling message counts the 3 nodes of the cluster")
	out, err := ev.kubectl("explain", "pod", "huge-0")
	if err != nil || !strings.Contains(out, "0/3 nodes are available: 3 Insufficient cpu.") {
		t.Errorf("kubectl shardsched explain pod huge-0: err %v\n%s", err, out)
	}
	t.Logf("whole scenario: %s", time.Since(start).Round(time.Millisecond))
}

// noForeignNodes waits until the only nodes left are among want (earlier
// tests' nodes are deleted in their cleanup); a foreign node with room
// would let the owner place the gang itself.
func (ev *env) noForeignNodes(want []string) {
	ev.t.Helper()
	testenv.Eventually(ev.t, 15*time.Second, func() bool {
		list, err := ev.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, n := range list.Items {
			if !slices.Contains(want, n.Name) {
				return false
			}
		}
		return true
	}, "no node of an earlier test is left")
}

// namedNodes creates kwok nodes with the given names, deleted when the test ends.
func (ev *env) namedNodes(names []string, cpu, mem string) {
	ev.t.Helper()
	for _, name := range names {
		node, err := cluster.FakeNode(name, cpu, mem, nil)
		if err != nil {
			ev.t.Fatal(err)
		}
		if _, err := ev.cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			ev.t.Fatal(err)
		}
		ev.t.Cleanup(func() {
			_ = ev.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
}
