package cache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// F1: informer handlers write while scheduling cycles refresh and read
// their own snapshots. Run under -race, any read of cache state without the
// lock, or any map or slice shared between the cache and a snapshot, is a
// reported race. At the end the books must equal a recomputation from the
// tasks, and every reader's incremental snapshot must equal a fresh one.
func TestConcurrentEventsAndSnapshots(t *testing.T) {
	const (
		nodes    = 40
		writerOp = 1000 // operations per writer goroutine
	)
	var c *Cache
	var oosCalls atomic.Int64
	c = New(Options{
		KeepsBooks: func(n string) bool { return n != "n-7" }, // one node is another shard's
		OnOutOfSync: func(node, reason string) {
			oosCalls.Add(1)
			_ = c.OutOfSync() // called without the lock: this would deadlock otherwise
		},
	})
	nodeName := func(i int) string { return fmt.Sprintf("n-%d", i%nodes) }
	for i := range nodes {
		c.AddOrUpdateNode(mkNode(nodeName(i), 16, 64, 30))
	}

	var writers sync.WaitGroup
	done := make(chan struct{})

	// Node updaters: allocatable and label changes, taints, occasional
	// delete and re-create under a new UID.
	for w := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := newRand(int64(100 + w))
			for i := range writerOp {
				n := mkNode(nodeName(r.intn(nodes)), int64(4+r.intn(16)), 64, 30)
				n.Labels["zone"] = fmt.Sprint("z", r.intn(3))
				n.Labels["rev"] = fmt.Sprint(i)
				if r.intn(5) == 0 {
					n.Taints = []api.Taint{{Key: "maintenance", Effect: api.TaintNoSchedule}}
				}
				if r.intn(50) == 0 {
					c.DeleteNode(n.Name, n.UID)
				}
				c.AddOrUpdateNode(n)
			}
		}()
	}
	// Task writers: add pending, bind, release, finish, delete; jobs too.
	for w := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := newRand(int64(200 + w))
			for i := range writerOp {
				name := fmt.Sprintf("w%d-t%d", w, r.intn(60))
				job := fmt.Sprintf("w%d-j%d", w, r.intn(5))
				tk := mkTask("ns", name, job, int64(100*(1+r.intn(20))), int64(1+r.intn(4)))
				tk.NodeSelector = map[string]string{"zone": fmt.Sprint("z", r.intn(3))}
				switch r.intn(7) {
				case 0, 1:
					c.AddOrUpdateTask(tk) // pending
				case 2, 3:
					c.AddOrUpdateTask(on(tk, nodeName(r.intn(nodes)), api.TaskRunning))
				case 4:
					c.AddOrUpdateTask(on(tk, nodeName(r.intn(nodes)), api.TaskReleasing))
				case 5:
					c.AddOrUpdateTask(on(tk, nodeName(r.intn(nodes)), api.TaskSucceeded))
				case 6:
					c.DeleteTask(tk.UID)
				}
				if i%10 == 0 {
					j := api.Job{Namespace: "ns", Name: job, UID: fmt.Sprintf("%s-%d", job, r.intn(2)), MinMember: 2}
					if r.intn(3) == 0 {
						c.DeleteJob(j.UID)
					} else {
						c.AddOrUpdateJob(j)
					}
				}
			}
		}()
	}
	// A binder: assumes pending tasks from its own snapshot, confirms or
	// forgets; occasionally the shard's ownership changes or a node is
	// rebuilt.
	writers.Add(1)
	go func() {
		defer writers.Done()
		r := newRand(300)
		var s Snapshot
		for i := range writerOp {
			c.UpdateSnapshot(&s)
			pend := s.PendingTasks()
			if len(pend) > 0 {
				tk := pend[r.intn(len(pend))]
				node := nodeName(r.intn(nodes))
				if c.Assume(tk.UID, node) == nil {
					switch r.intn(3) {
					case 0:
						c.Forget(tk.UID) // the bind failed
					case 1:
						c.AddOrUpdateTask(on(*tk, node, api.TaskBound)) // the informer confirms
					}
				}
			}
			if i%200 == 0 {
				k := 1 + r.intn(3)
				c.SetKeepsBooks(func(n string) bool { return len(n)%k != 0 || k == 1 })
			}
			if i%150 == 0 {
				n := mkNode(nodeName(r.intn(nodes)), 16, 64, 30)
				c.Rebuild(n, nil)
			}
		}
	}()

	// Readers: each with its own snapshot, reading everything in it.
	var readers sync.WaitGroup
	snaps := make([]*Snapshot, 3)
	var refreshes atomic.Int64
	for rd := range snaps {
		snaps[rd] = &Snapshot{}
		readers.Add(1)
		go func() {
			defer readers.Done()
			s := snaps[rd]
			for {
				select {
				case <-done:
					return
				default:
				}
				c.UpdateSnapshot(s)
				refreshes.Add(1)
				prev := ""
				for _, b := range s.Nodes() {
					if b.Node.Name <= prev {
						t.Errorf("snapshot nodes not sorted: %s after %s", b.Node.Name, prev)
						return
					}
					prev = b.Node.Name
					for k, v := range b.Node.Labels {
						_ = k < v // a string compare, as in the F1 panic
					}
					if err := b.Idle().Validate(); err != nil {
						t.Errorf("negative idle on %s: %v", b.Node.Name, err)
						return
					}
					_ = b.Used.String() + b.Releasing.String()
				}
				for _, tk := range s.PendingTasks() {
					_ = tk.NodeSelector["zone"]
					_ = s.TasksOfJob(tk.Namespace, tk.Job)
				}
				for _, j := range s.Jobs() {
					_ = j.Key()
				}
				_ = c.Stats()
				_ = c.OutOfSync()
				_, _ = c.Task("ns/w0-t1-uid")
				_, _ = c.JobByName("ns", "w0-j1")
			}
		}()
	}

	writers.Wait()
	close(done)
	readers.Wait()
	if t.Failed() {
		return
	}

	mustVerify(t, c)
	var fresh Snapshot
	c.UpdateSnapshot(&fresh)
	for i, s := range snaps {
		c.UpdateSnapshot(s)
		if d := snapshotDiff(s, &fresh); d != "" {
			t.Fatalf("reader %d: incremental snapshot differs from a fresh one:\n%s", i, d)
		}
	}
	st := c.Stats()
	if int64(st.OutOfSync) > st.OutOfSyncTotal || oosCalls.Load() != st.OutOfSyncTotal {
		t.Fatalf("out of sync: %d now, %d transitions, %d callbacks", st.OutOfSync, st.OutOfSyncTotal, oosCalls.Load())
	}
	t.Logf("stats %+v, %d snapshot refreshes, %d OnOutOfSync calls", st, refreshes.Load(), oosCalls.Load())
}
