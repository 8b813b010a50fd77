package cache

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// benchCache returns a cache with n nodes (10 labels, a taint, 4 running
// tasks each), as a shard owning a 10,000-node slice of a cluster would.
func benchCache(n int) *Cache {
	c := New(Options{})
	for i := range n {
		node := mkNode(fmt.Sprintf("node-%05d", i), 64, 256, 110)
		for k := range 9 {
			node.Labels[fmt.Sprintf("label-%d.example.com/key", k)] = fmt.Sprintf("value-%d", i%(k+2))
		}
		node.Taints = []api.Taint{{Key: "dedicated", Value: "batch", Effect: api.TaintNoSchedule}}
		node.Allocatable = node.Allocatable.With("nvidia.com/gpu", 8)
		c.AddOrUpdateNode(node)
		for k := range 4 {
			c.AddOrUpdateTask(on(mkTask("ns", fmt.Sprintf("t-%d-%d", i, k), "j", 1000, 2), node.Name, api.TaskRunning))
		}
	}
	return c
}

// snapshotOf returns benchCache(n) and a snapshot refreshed from it.
func snapshotOf(n int) (*Cache, *Snapshot) {
	c := benchCache(n)
	s := &Snapshot{}
	c.UpdateSnapshot(s)
	return c, s
}

// touch changes the books of 1% of the nodes (100 distinct nodes for
// n = 10,000): a task lands on each.
func touch(c *Cache, n, round int) {
	for k := range n / 100 {
		i := (round*7919 + k*101) % n
		tk := on(mkTask("bench", fmt.Sprintf("r%d-%d", round, k), "j", 500, 1), fmt.Sprintf("node-%05d", i), api.TaskRunning)
		c.AddOrUpdateTask(tk)
	}
}

// BenchmarkUpdateSnapshot compares refreshing a cycle's snapshot
// incrementally (1% of 10,000 nodes changed since the last cycle) with
// copying every node, as a scheduler that clones the cluster each cycle
// does. Compare the two as a ratio in one run; there is no assertion.
func BenchmarkUpdateSnapshot(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"incremental-1pct", "full-copy"} {
		b.Run(mode, func(b *testing.B) {
			c, s := snapshotOf(n)
			copied := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				touch(c, n, i+1)
				if mode == "full-copy" {
					*s = Snapshot{}
				}
				b.StartTimer()
				c.UpdateSnapshot(s)
				copied += s.NodesCopied()
			}
			b.ReportMetric(float64(copied)/float64(b.N), "nodes-copied/op")
			if s.NumNodes() != n {
				b.Fatalf("%d nodes in the snapshot", s.NumNodes())
			}
		})
	}
}

// BenchmarkUpdateSnapshotJobs refreshes a snapshot of 5,000 jobs with 8
// pending tasks each, after 1 % of them changed: one more pending task and
// a new version of the PodGroup each. No assertion; compare runs (or
// commits) as ratios.
func BenchmarkUpdateSnapshotJobs(b *testing.B) {
	const jobs, per = 5000, 8
	c := New(Options{})
	for i := range jobs {
		name := fmt.Sprintf("job-%05d", i)
		c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: name, UID: name + "-uid", MinMember: per, Queue: "q"})
		for k := range per {
			c.AddOrUpdateTask(mkTask("ns", fmt.Sprintf("%s-%d", name, k), name, 1000, 1))
		}
	}
	s := refreshAfter(b, c, func(i int) {
		for k := range jobs / 100 {
			name := fmt.Sprintf("job-%05d", (i*7919+k*101)%jobs)
			c.AddOrUpdateTask(mkTask("ns", fmt.Sprintf("%s-more-%d", name, i), name, 1000, 1))
			c.AddOrUpdateJob(api.Job{Namespace: "ns", Name: name, UID: name + "-uid", MinMember: per + 1, Queue: "q", ResourceVersion: fmt.Sprint(i)})
		}
	})
	if len(s.Jobs()) != jobs {
		b.Fatalf("%d jobs in the snapshot", len(s.Jobs()))
	}
}

// BenchmarkUpdateSnapshotJobChanges is a refresh after a churning cycle's
// worth of PodGroup events among 20,000 jobs and no task event: 50 jobs'
// status updated, 10 jobs submitted and 10 gone.
func BenchmarkUpdateSnapshotJobChanges(b *testing.B) {
	const jobs = 20000
	c := New(Options{})
	job := func(i, rv int) api.Job {
		name := fmt.Sprintf("job-%07d", i)
		return api.Job{Namespace: "ns", Name: name, UID: name + "-uid", MinMember: 8, Queue: "q", ResourceVersion: fmt.Sprint(rv)}
	}
	for i := range jobs {
		c.AddOrUpdateJob(job(i, 0))
	}
	next := jobs
	s := refreshAfter(b, c, func(i int) {
		for k := range 50 {
			c.AddOrUpdateJob(job(next-jobs+(i*7919+k*101)%jobs, i+1))
		}
		for range 10 {
			c.DeleteJob(job(next-jobs, 0).UID)
			c.AddOrUpdateJob(job(next, 0))
			next++
		}
	})
	if len(s.Jobs()) != jobs {
		b.Fatalf("%d jobs in the snapshot", len(s.Jobs()))
	}
}

// BenchmarkHeapPerPlacedTask reports the heap a cache holds per placed
// task (B/task): 50,000 running tasks, 1,000 jobs of 50 pods each, on
// 5,000 nodes the shard owns none of ("others") or all of ("owned": the
// tasks booked), the pods' names, UIDs and node names allocated by the
// caller (as a decoded pod's are); the nodes' own books are counted too.
// Run with -benchtime=1x.
func BenchmarkHeapPerPlacedTask(b *testing.B) {
	const jobs, per, nodes = 1000, 50, 5000
	tasks := make([]api.Task, 0, jobs*per)
	for j := range jobs {
		for k := range per {
			t := on(mkTask("ns", fmt.Sprintf("job-%d-pod-%d", j, k), fmt.Sprintf("job-%d", j), 1000, 2), fmt.Sprintf("node-%d", (j*per+k)%nodes), api.TaskRunning)
			t.Queue, t.SchedulerName = "q", "shardsched"
			tasks = append(tasks, t)
		}
	}
	nodeList := make([]api.Node, nodes)
	for i := range nodeList {
		nodeList[i] = mkNode(fmt.Sprintf("node-%d", i), 64, 256, 110)
	}
	for _, owned := range []bool{false, true} {
		name := map[bool]string{false: "others", true: "owned"}[owned]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				before := liveHeap()
				c := New(Options{KeepsBooks: func(string) bool { return owned }})
				for _, n := range nodeList {
					c.AddOrUpdateNode(n)
				}
				for _, t := range tasks {
					c.AddOrUpdateTask(t)
				}
				after := liveHeap()
				b.ReportMetric(float64(after-before)/float64(len(tasks)), "B/task")
				runtime.KeepAlive(c)
			}
		})
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSnapshotFree is a cycle's refresh and its free room (Free) on
// a shard of 1,000 nodes after 1 % of them changed, kept node by node
// ("incremental") or summed again from every node ("summed", as each
// cycle where a job could grow did before the snapshot kept it). Compare
// the two as a ratio in one run; there is no assertion.
func BenchmarkSnapshotFree(b *testing.B) {
	const n = 1000
	for _, mode := range []string{"incremental", "summed"} {
		b.Run(mode, func(b *testing.B) {
			c, s := snapshotOf(n)
			s.Free()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if i%1000 == 999 {
					// A fresh cluster before the nodes fill up (each round
					// adds 10 pods).
					c, s = snapshotOf(n)
					s.Free()
				}
				touch(c, n, i+1)
				b.StartTimer()
				c.UpdateSnapshot(s)
				if mode == "summed" {
					s.freeOK = false
				}
				if s.Free().MilliCPU <= 0 {
					b.Fatal("no free CPU")
				}
			}
		})
	}
}

// BenchmarkUpdateSnapshotGroupsGrow is a stream of pods arriving one by
// one into PodGroups: 100 groups of 100 running tasks each, and before
// every refresh one new pending task in each of 20 of them, as a 100 ms
// cycle sees at ~200 pods/s. Compare builds as ratios in one run.
func BenchmarkUpdateSnapshotGroupsGrow(b *testing.B) {
	c := New(Options{})
	for i := range 100 {
		c.AddOrUpdateNode(mkNode(fmt.Sprintf("node-%03d", i), 64, 256, 110))
	}
	for g := range 100 {
		for k := range 100 {
			c.AddOrUpdateTask(on(mkTask("ns", fmt.Sprintf("g%03d-%05d", g, k), fmt.Sprintf("job-%03d", g), 100, 1), fmt.Sprintf("node-%03d", k), api.TaskRunning))
		}
	}
	s := refreshAfter(b, c, func(i int) {
		for k := range 20 {
			g := (i*20 + k) % 100
			c.AddOrUpdateTask(mkTask("ns", fmt.Sprintf("g%03d-p%06d", g, i), fmt.Sprintf("job-%03d", g), 100, 1))
		}
	})
	if len(s.PendingOfJob("ns", "job-000")) == 0 {
		b.Fatal("no pending task seen in job-000")
	}
}

// refreshAfter takes a snapshot of c, then times b.N refreshes of it, each
// after change(i) (not timed) changed the cache; it returns the snapshot.
func refreshAfter(b *testing.B, c *Cache, change func(i int)) *Snapshot {
	var s Snapshot
	c.UpdateSnapshot(&s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		change(i)
		b.StartTimer()
		c.UpdateSnapshot(&s)
	}
	return &s
}
