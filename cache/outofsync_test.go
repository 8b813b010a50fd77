package cache

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// F2: books that would go negative mark the node out of sync, call
// OnOutOfSync with a reason, count it, and recover on the next consistent
// event; nothing panics and idle never goes negative.
func TestOutOfSync(t *testing.T) {
	gpuNode := func() api.Node {
		n := mkNode("n1", 8, 32, 110)
		n.Allocatable = n.Allocatable.With("nvidia.com/gpu", 1)
		return n
	}
	gpuTask := func(name string) api.Task {
		tk := on(mkTask("ns", name, "j", 100, 1), "n1", api.TaskRunning)
		tk.Request = tk.Request.With("nvidia.com/gpu", 1)
		return tk
	}
	noPods := func(name string) api.Task {
		tk := on(mkTask("ns", name, "j", 100, 1), "n1", api.TaskRunning)
		tk.Request = api.NewResource(100, gi, nil)
		return tk
	}
	for _, tc := range []struct {
		name    string
		node    api.Node
		setup   []api.Task                        // bound before the break
		breaks  func(c *Cache)                    // the event that overflows
		reason  []string                          // must appear in the reason
		recover func(c *Cache, node api.Node) int // returns the expected task count after
	}{
		{
			name:  "allocatable shrinks under bound tasks",
			node:  mkNode("n1", 4, 16, 110),
			setup: []api.Task{on(mkTask("ns", "a", "j", 1500, 1), "n1", api.TaskRunning), on(mkTask("ns", "b", "j", 1500, 1), "n1", api.TaskRunning)},
			breaks: func(c *Cache) {
				c.AddOrUpdateNode(withAlloc(mkNode("n1", 4, 16, 110), 2000))
			},
			reason: []string{"cpu", "used 3", "allocatable 2"},
			recover: func(c *Cache, n api.Node) int {
				c.AddOrUpdateNode(n) // allocatable restored
				return 2
			},
		},
		{
			name:  "pod bound by another scheduler",
			node:  mkNode("n1", 2, 16, 110),
			setup: []api.Task{on(mkTask("ns", "a", "j", 1500, 1), "n1", api.TaskRunning)},
			breaks: func(c *Cache) {
				other := mkTask("other", "x", "", 1000, 1)
				other.SchedulerName = "default-scheduler"
				c.AddOrUpdateTask(other)
				c.AddOrUpdateTask(on(other, "n1", api.TaskBound))
			},
			reason: []string{"cpu: used 2500m > allocatable 2"},
			recover: func(c *Cache, _ api.Node) int {
				c.DeleteTask("ns/a-uid")
				return 1
			},
		},
		{
			name:  "pod bound by nodeName while still Pending",
			node:  mkNode("n1", 2, 16, 110),
			setup: []api.Task{on(mkTask("ns", "a", "j", 1500, 1), "n1", api.TaskRunning)},
			breaks: func(c *Cache) {
				c.AddOrUpdateTask(on(mkTask("ns", "byname", "", 1000, 1), "n1", api.TaskPending))
			},
			reason: []string{"cpu"},
			recover: func(c *Cache, _ api.Node) int {
				c.AddOrUpdateTask(on(mkTask("ns", "byname", "", 1000, 1), "n1", api.TaskFailed))
				return 1
			},
		},
		{
			name:   "scalar over its allocatable",
			node:   gpuNode(),
			setup:  []api.Task{gpuTask("g1")},
			breaks: func(c *Cache) { c.AddOrUpdateTask(gpuTask("g2")) },
			reason: []string{"nvidia.com/gpu: used 2 > allocatable 1"},
			recover: func(c *Cache, _ api.Node) int {
				c.AddOrUpdateTask(on(gpuTask("g2"), "n1", api.TaskSucceeded))
				return 1
			},
		},
		{
			name:   "scalar the node does not have",
			node:   mkNode("n1", 8, 32, 110),
			breaks: func(c *Cache) { c.AddOrUpdateTask(gpuTask("g1")) },
			reason: []string{"nvidia.com/gpu: used 1 > allocatable 0"},
			recover: func(c *Cache, _ api.Node) int {
				c.DeleteTask("ns/g1-uid")
				return 0
			},
		},
		{
			name:   "more pods than the pods scalar",
			node:   mkNode("n1", 8, 32, 2),
			setup:  []api.Task{on(mkTask("ns", "a", "j", 100, 1), "n1", api.TaskRunning), on(mkTask("ns", "b", "j", 100, 1), "n1", api.TaskRunning)},
			breaks: func(c *Cache) { c.AddOrUpdateTask(on(mkTask("ns", "c", "j", 100, 1), "n1", api.TaskRunning)) },
			reason: []string{"pods: used 3 > allocatable 2"},
			recover: func(c *Cache, _ api.Node) int {
				c.DeleteTask("ns/b-uid")
				return 2
			},
		},
		{
			name:   "more pods than the pods scalar, requests without pods",
			node:   mkNode("n1", 8, 32, 2),
			setup:  []api.Task{noPods("a"), noPods("b")},
			breaks: func(c *Cache) { c.AddOrUpdateTask(noPods("c")) },
			reason: []string{"pods: 3 tasks > allocatable 2"},
			recover: func(c *Cache, n api.Node) int {
				n.Allocatable = n.Allocatable.With(api.Pods, 3)
				c.AddOrUpdateNode(n)
				return 3
			},
		},
		{
			name:  "rebuilt from the API server",
			node:  mkNode("n1", 4, 16, 110),
			setup: []api.Task{on(mkTask("ns", "a", "j", 1500, 1), "n1", api.TaskRunning), on(mkTask("ns", "b", "j", 1500, 1), "n1", api.TaskRunning)},
			breaks: func(c *Cache) {
				c.AddOrUpdateNode(withAlloc(mkNode("n1", 4, 16, 110), 2000))
			},
			reason: []string{"cpu"},
			recover: func(c *Cache, n api.Node) int {
				// The API server says: allocatable is 2 cores and only "a"
				// is still on the node ("b"'s delete was missed).
				c.Rebuild(withAlloc(n, 2000), []api.Task{on(mkTask("ns", "a", "j", 1500, 1), "n1", api.TaskRunning)})
				if _, ok := c.Task("ns/b-uid"); ok {
					panic("Rebuild kept a task the API server does not have")
				}
				return 1
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			c := New(Options{OnOutOfSync: rec.record})
			c.AddOrUpdateNode(tc.node)
			for _, tk := range tc.setup {
				c.AddOrUpdateTask(tk)
			}
			if len(c.OutOfSync()) != 0 || len(rec.get()) != 0 {
				t.Fatal("out of sync before the break")
			}
			var s Snapshot
			c.UpdateSnapshot(&s)

			tc.breaks(c)

			if got := c.OutOfSync(); len(got) != 1 || got[0] != "n1" {
				t.Fatalf("OutOfSync() = %v", got)
			}
			if c.OutOfSyncTotal() != 1 || c.Stats().OutOfSync != 1 {
				t.Fatalf("counter %d, stats %+v", c.OutOfSyncTotal(), c.Stats())
			}
			calls := rec.get()
			if len(calls) != 1 || calls[0].node != "n1" {
				t.Fatalf("OnOutOfSync calls %v", calls)
			}
			for _, want := range tc.reason {
				if !strings.Contains(calls[0].reason, want) {
					t.Errorf("reason %q lacks %q", calls[0].reason, want)
				}
			}
			c.UpdateSnapshot(&s)
			b, _ := s.Node("n1")
			if !b.OutOfSync {
				t.Fatal("snapshot does not show the node out of sync")
			}
			if err := b.Idle().Validate(); err != nil {
				t.Fatalf("negative idle: %v", err)
			}
			mustVerify(t, c)

			// Placement must skip it.
			p := mkTask("ns", "probe", "j", 1, 0)
			c.AddOrUpdateTask(p)
			if err := c.Assume(p.UID, "n1"); !errors.Is(err, ErrOutOfSync) {
				t.Fatalf("assume on an out-of-sync node: %v", err)
			}
			c.DeleteTask(p.UID)
			if c.OutOfSyncTotal() != 1 || len(rec.get()) != 1 {
				t.Fatal("events while out of sync counted again")
			}

			wantTasks := tc.recover(c, tc.node)

			if got := c.OutOfSync(); len(got) != 0 {
				t.Fatalf("not recovered: %v", got)
			}
			c.UpdateSnapshot(&s)
			b, _ = s.Node("n1")
			if b.OutOfSync || b.Tasks != wantTasks || !b.Used.LessEqual(b.Node.Allocatable) {
				t.Fatalf("after recovery: %+v", b)
			}
			if c.OutOfSyncTotal() != 1 || c.Stats().OutOfSync != 0 {
				t.Fatalf("counter %d after recovery, stats %+v", c.OutOfSyncTotal(), c.Stats())
			}
			mustVerify(t, c)
		})
	}
}

// The intended loop: OnOutOfSync asks the API server and calls Rebuild. The
// callback runs without the lock (it can call back in), and a Rebuild that
// leaves the node still inconsistent does not call it again.
func TestOutOfSyncCallbackRebuilds(t *testing.T) {
	apiServer := map[string]api.Node{"n1": mkNode("n1", 4, 16, 110)}
	var c *Cache
	var calls atomic.Int32
	c = New(Options{OnOutOfSync: func(node, reason string) {
		if calls.Add(1) > 5 {
			t.Error("callback loop")
			return
		}
		_ = c.OutOfSync() // would deadlock if the lock were held
		c.Rebuild(apiServer[node], []api.Task{on(mkTask("ns", "a", "j", 3000, 1), "n1", api.TaskRunning)})
	}})
	c.AddOrUpdateNode(mkNode("n1", 4, 16, 110))
	c.AddOrUpdateTask(on(mkTask("ns", "a", "j", 3000, 1), "n1", api.TaskRunning))

	// A stale node event shrinks allocatable; the API server still says 4.
	c.AddOrUpdateNode(withAlloc(mkNode("n1", 4, 16, 110), 1000))
	if len(c.OutOfSync()) != 0 || calls.Load() != 1 {
		t.Fatalf("not rebuilt by the callback: %v, %d calls", c.OutOfSync(), calls.Load())
	}
	wantUsed(t, c, "n1", req(3000, 1, 1), 1)

	// The API server really shrank it: Rebuild cannot fix it; one call, the
	// node stays out of sync until an event makes it consistent.
	apiServer["n1"] = withAlloc(mkNode("n1", 4, 16, 110), 1000)
	c.AddOrUpdateNode(withAlloc(mkNode("n1", 4, 16, 110), 1000))
	if got := c.OutOfSync(); len(got) != 1 || calls.Load() != 2 || c.OutOfSyncTotal() != 2 {
		t.Fatalf("out of sync %v, %d calls, total %d", got, calls.Load(), c.OutOfSyncTotal())
	}
	c.DeleteTask("ns/a-uid")
	if len(c.OutOfSync()) != 0 {
		t.Fatal("not recovered after the task left")
	}
	mustVerify(t, c)
}

// Rebuild keeps the shard's own in-flight assumptions and forgets tasks the
// API server no longer has on the node.
func TestRebuildKeepsAssumed(t *testing.T) {
	c := New(Options{})
	n := mkNode("n1", 8, 32, 110)
	c.AddOrUpdateNode(n)
	c.AddOrUpdateTask(on(mkTask("ns", "gone", "j", 1000, 1), "n1", api.TaskRunning))
	c.AddOrUpdateTask(on(mkTask("ns", "stays", "j", 1000, 1), "n1", api.TaskRunning))
	inflight := mkTask("ns", "inflight", "j", 2000, 1)
	c.AddOrUpdateTask(inflight)
	if err := c.Assume(inflight.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	c.Rebuild(n, []api.Task{
		on(mkTask("ns", "stays", "j", 1500, 1), "n1", api.TaskRunning), // the API server's newer request
		on(mkTask("ns", "new", "j", 500, 1), "n1", api.TaskBound),      // an add the informer had not delivered
	})
	wantUsed(t, c, "n1", req(4000, 3, 3), 3)
	if _, ok := c.Task("ns/gone-uid"); ok {
		t.Fatal("task missing from the API server kept")
	}
	if _, ok := c.Assumed(inflight.UID); !ok {
		t.Fatal("in-flight assumption dropped")
	}
	mustVerify(t, c)
}
