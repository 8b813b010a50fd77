package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/cache"
)

func cpuLimit(t *testing.T, milli int64) api.Limit {
	t.Helper()
	l, err := api.NewLimit(map[string]int64{api.CPU: milli})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newCappedCluster is a 4-node cluster under root → team (3 CPU) → dev
// (no capability of its own) and ops (2 CPU), with a shard's cache
// subscribed and a binder that holds every partition.
func newCappedCluster(t *testing.T) (*Cluster, *cache.Cache, *Binder) {
	t.Helper()
	w := loadChurn(t)
	w.Node.GPUPool = "" // these tests bind to node-00000 (pools: pools_test.go)
	tree, err := api.BuildTree([]api.QueueSpec{
		{Name: "team", Capability: cpuLimit(t, 3000)},
		{Name: "dev", Parent: "team"},
		{Name: "ops", Parent: "team", Capability: cpuLimit(t, 2000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(w, 4, tree)
	if err != nil {
		t.Fatal(err)
	}
	ca := cache.New(cache.Options{})
	c.Subscribe(ca)
	return c, ca, &Binder{c: c, shard: "s", othersHold: func(string) bool { return false }}
}

// podsOf returns the job's pods that are not bound, sorted by name.
func podsOf(c *Cluster, group string) []api.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []api.Task
	if j := c.jobs[group]; j != nil {
		for _, p := range j.pods {
			if p.t.NodeName == "" && !p.t.Phase.Terminal() {
				out = append(out, p.t)
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func bindAll(t *testing.T, b *Binder, tasks []api.Task) {
	t.Helper()
	for i := range tasks {
		if err := b.Bind(context.Background(), &tasks[i], fmt.Sprintf("node-%05d", i%4)); err != nil {
			t.Fatal(err)
		}
	}
}

// A Deployment of 6 × 1 CPU bound whole through the bind port under a
// 3-CPU parent (what a scheduler does when it reserves only the implicit
// group's one pod and never grows the reservation): the 4th, 5th and 6th
// binds each leave "team" (an ancestor: "dev" sets no capability) above
// its capability, and a recount from the pods finds it over at a sample.
// When the pods end, the recount finds nothing.
func TestQuotaOverrunDeploymentBeyondCapability(t *testing.T) {
	c, _, b := newCappedCluster(t)
	c.Submit(workload.JobSpec{Seq: 1, Queue: "dev", Kind: workload.KindDeployment, Implicit: true, Size: 6, CPU: 1000, Memory: 1 << 30, Lifetime: time.Minute}, schedulerName)
	pods := podsOf(c, "shardsched-replicaset-job-1")
	if len(pods) != 6 {
		t.Fatalf("%d pods, want 6", len(pods))
	}
	bindAll(t, b, pods)
	st := c.Stats()
	if st.Binds != 6 || st.QuotaOverruns != 3 {
		t.Fatalf("binds %d, overruns %d; want 6 binds, 3 overruns (binds 4 to 6 under a 3-CPU parent)", st.Binds, st.QuotaOverruns)
	}
	first, byKind := c.Overruns()
	if len(first) == 0 {
		t.Fatal("no overrun kept for the notes")
	}
	o := first[0]
	if o.Queue != "team" || o.Resource != api.CPU || o.Used != 4000 || o.Cap != 3000 || o.Pod != "bench/job-1-3" || !strings.HasPrefix(o.Kind, workload.KindDeployment) {
		t.Errorf("first overrun %+v, want team cpu 4000 > 3000 binding bench/job-1-3 (deployment)", o)
	}
	if !strings.Contains(o.String(), "queue team cpu 4 > capability 3") {
		t.Errorf("overrun renders as %q", o.String())
	}
	if byKind["deployment, implicit group"] != 3 {
		t.Errorf("overrunning binds by kind %v, want deployment 3", byKind)
	}
	if n := c.CheckQuota(); n != 1 {
		t.Errorf("sample found %d queues over, want 1 (team)", n)
	}
	c.advance(2*time.Minute, time.Hour)
	if n := c.CheckQuota(); n != 0 {
		t.Errorf("after the pods ended, %d queues over, want 0", n)
	}
	if st := c.Stats(); st.QuotaOverrunSamples != 1 || st.QuotaBooksMismatch != 0 {
		t.Errorf("sampled overruns %d, books mismatches %d; want 1, 0", st.QuotaOverrunSamples, st.QuotaBooksMismatch)
	}
}

// An elastic job (minMember 2 of 8, minResources cpu 1m) bound whole under
// a 2-CPU leaf: its PodGroup says what admission would reserve, and every
// bind past the leaf's capability counts at the leaf and (from the 4th
// CPU) at its parent too.
func TestQuotaOverrunElasticBeyondCapability(t *testing.T) {
	c, ca, b := newCappedCluster(t)
	c.Submit(workload.JobSpec{Seq: 2, Queue: "ops", Kind: workload.KindElastic, Size: 8, MinMember: 2, MinMilliCPU: 1, CPU: 1000, Memory: 1 << 30, Lifetime: time.Minute}, schedulerName)
	var snap cache.Snapshot
	ca.UpdateSnapshot(&snap)
	jobs := snap.Jobs()
	if len(jobs) != 1 || jobs[0].MinMember != 2 || jobs[0].MinResources == nil || jobs[0].MinResources.MilliCPU != 1 || jobs[0].Implicit {
		t.Fatalf("the shard's cache sees %+v, want one explicit PodGroup with minMember 2 and minResources cpu 1m", jobs)
	}
	bindAll(t, b, podsOf(c, "job-2"))
	// ops (2 CPU) is over from the 3rd bind: 6 binds; team (3 CPU) from
	// the 4th: 5 binds.
	if st := c.Stats(); st.QuotaOverruns != 11 {
		t.Errorf("overruns %d, want 11 (6 at ops, 5 at team)", st.QuotaOverruns)
	}
	if n := c.CheckQuota(); n != 2 {
		t.Errorf("sample found %d queues over, want 2 (ops and team)", n)
	}
}

// Binds that respect capability count nothing: a batch Job (parallelism 3,
// completions 6) under the 3-CPU parent binds its first wave, which ends;
// the Job controller creates the next pods in the same PodGroup only after
// ControllerDelay (so a cycle sees the group with nothing pending between
// waves), and they bind into the room the first wave left.
func TestQuotaWithinCapabilityCountsNothing(t *testing.T) {
	c, ca, b := newCappedCluster(t)
	c.Submit(workload.JobSpec{Seq: 3, Queue: "dev", Kind: workload.KindBatch, Size: 6, Parallelism: 3, MinMember: 3, CPU: 1000, Memory: 1 << 30, Lifetime: 10 * time.Second}, schedulerName)
	wave := podsOf(c, "job-3")
	if len(wave) != 3 {
		t.Fatalf("first wave %d pods, want 3 (the parallelism)", len(wave))
	}
	bindAll(t, b, wave)
	if n := c.CheckQuota(); n != 0 {
		t.Fatalf("%d queues over at 3 CPU under 3", n)
	}
	c.advance(10*time.Second, time.Hour)
	if got := podsOf(c, "job-3"); len(got) != 0 {
		t.Fatalf("%d pods created with the first wave's end, want none before the controller's delay", len(got))
	}
	c.advance(10*time.Second+ControllerDelay, time.Hour)
	next := podsOf(c, "job-3")
	if len(next) != 3 || next[0].Job != "job-3" || next[0].Name != "job-3-3" {
		t.Fatalf("second wave %+v, want job-3-3..5 in PodGroup job-3", next)
	}
	var snap cache.Snapshot
	ca.UpdateSnapshot(&snap)
	if got := len(snap.PendingTasks()); got != 3 {
		t.Errorf("the shard's cache has %d pending tasks, want the second wave's 3", got)
	}
	bindAll(t, b, next)
	if n := c.CheckQuota(); n != 0 {
		t.Errorf("%d queues over", n)
	}
	c.advance(30*time.Second, time.Hour)
	st := c.Stats()
	if st.QuotaOverruns != 0 || st.QuotaOverrunSamples != 0 || st.QuotaBooksMismatch != 0 {
		t.Errorf("overruns %d, sampled %d, books mismatches %d; want 0", st.QuotaOverruns, st.QuotaOverrunSamples, st.QuotaBooksMismatch)
	}
	if st.Submitted != 6 || st.Completed != 6 {
		t.Errorf("submitted %d, completed %d; want 6 and 6 (the completions)", st.Submitted, st.Completed)
	}
	if c.jobs["job-3"].doneAt.IsZero() {
		t.Error("the batch Job is not done after 6 completions")
	}
}

// A Deployment's pods name no PodGroup: it exists once a shard creates it
// through the Groups port (once), outlives the pods, and goes only with a
// delete whose UID and resourceVersion match.
func TestImplicitGroupLifecycle(t *testing.T) {
	c, ca, b := newCappedCluster(t)
	g := &Groups{c: c}
	c.Submit(workload.JobSpec{Seq: 4, Queue: "dev", Kind: workload.KindDeployment, Implicit: true, Size: 2, CPU: 1000, Memory: 1 << 30, Lifetime: 10 * time.Second}, schedulerName)
	const name = "shardsched-replicaset-job-4"
	pods := podsOf(c, name)
	if len(pods) != 2 || !pods[0].Implicit || pods[0].Queue != "dev" || pods[0].Job != name {
		t.Fatalf("pods %+v, want 2 implicit pods of %s asking for queue dev", pods, name)
	}
	var snap cache.Snapshot
	ca.UpdateSnapshot(&snap)
	if len(snap.Jobs()) != 0 {
		t.Fatalf("a PodGroup exists before any shard created it: %+v", snap.Jobs())
	}
	ctx := context.Background()
	for range 2 {
		if err := g.CreatePodGroup(ctx, "bench", name, "dev", 1); err != nil {
			t.Fatal(err)
		}
	}
	ca.UpdateSnapshot(&snap)
	jobs := snap.Jobs()
	if len(jobs) != 1 || !jobs[0].Implicit || jobs[0].MinMember != 1 || jobs[0].Queue != "dev" {
		t.Fatalf("after two creates the cache has %+v, want one implicit group in dev", jobs)
	}
	pg := *jobs[0]
	// A status write changes the resourceVersion: a delete with the old
	// one fails its precondition, like one with another UID.
	if err := (&StatusWriter{c: c, shard: "s"}).WritePodGroupStatus(ctx, "bench", name, pg.UID, api.JobStatus{Phase: api.JobRunning}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{pg.UID, pg.ResourceVersion}, {"pg-other", ""}} {
		if err := g.DeletePodGroup(ctx, "bench", name, bad[0], bad[1]); err != nil {
			t.Fatal(err)
		}
	}
	ca.UpdateSnapshot(&snap)
	if len(snap.Jobs()) != 1 {
		t.Fatal("a delete with a failed precondition removed the group")
	}
	bindAll(t, b, pods)
	c.advance(11*time.Second, 5*time.Second)
	c.advance(17*time.Second, 5*time.Second)
	if len(c.jobs) != 0 || len(c.pods) != 0 || len(c.groups) != 1 {
		t.Fatalf("after the TTL: %d workloads, %d pods, %d groups; want 0, 0 and the implicit group", len(c.jobs), len(c.pods), len(c.groups))
	}
	ca.UpdateSnapshot(&snap)
	cur := snap.Jobs()[0]
	if err := g.DeletePodGroup(ctx, "bench", name, cur.UID, cur.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	ca.UpdateSnapshot(&snap)
	st := c.Stats()
	if len(snap.Jobs()) != 0 || st.GroupsCreated != 1 || st.GroupsDeleted != 1 || st.GroupsDeletedUnderPods != 0 {
		t.Errorf("jobs %d, stats %+v; want the group gone, 1 created, 1 deleted, none under pods", len(snap.Jobs()), st)
	}
	// Deleting a group whose pods still wait is counted.
	c.Submit(workload.JobSpec{Seq: 5, Queue: "dev", Kind: workload.KindDeployment, Implicit: true, Size: 1, CPU: 1000, Lifetime: time.Minute}, schedulerName)
	_ = g.CreatePodGroup(ctx, "bench", "shardsched-replicaset-job-5", "dev", 1)
	uid := c.groupUIDs["shardsched-replicaset-job-5"]
	_ = g.DeletePodGroup(ctx, "bench", "shardsched-replicaset-job-5", uid, "")
	if st := c.Stats(); st.GroupsDeletedUnderPods != 1 {
		t.Errorf("groups deleted under pods %d, want 1", st.GroupsDeletedUnderPods)
	}
}
