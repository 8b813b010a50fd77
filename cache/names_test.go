package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shardsched/shardsched/api"
)

// The name index answers like a map keyed by the name itself through any
// sequence of puts, renames and removals, also when names collide: with
// a hash of three values nearly every name shares its hash with others.
func TestNameIndexCollisions(t *testing.T) {
	for _, hash := range []func(string, string) uint64{
		func(_, name string) uint64 { return uint64(len(name) % 3) },
		func(string, string) uint64 { return 7 },
		nil, // the real hash
	} {
		x := newNameIndex()
		x.hash = hash
		want := map[objKey]*taskEntry{}
		rng := rand.New(rand.NewPCG(1, 2))
		entry := func() *taskEntry {
			key := objKey{fmt.Sprintf("ns%d", rng.IntN(2)), fmt.Sprintf("t%d", rng.IntN(40))}
			t := &api.Task{Namespace: key.namespace, Name: key.name}
			return &taskEntry{obj: t, record: record{full: t}}
		}
		var live []*taskEntry
		for step := 0; step < 5000; step++ {
			switch op := rng.IntN(4); {
			case op == 3 && len(live) > 0: // a task updated under its own name (put, no remove)
				x.put(live[rng.IntN(len(live))])
			case op == 0 || len(live) == 0: // a task under a name, replacing any other of that name
				e := entry()
				key := objKey{e.obj.Namespace, e.obj.Name}
				if old := want[key]; old != nil {
					x.remove(old)
					live = drop(live, old)
				}
				x.put(e)
				want[key] = e
				live = append(live, e)
			case op == 1: // a task renamed (its old name first, as setTaskLocked does)
				e := live[rng.IntN(len(live))]
				n := entry()
				nk := objKey{n.obj.Namespace, n.obj.Name}
				if other := want[nk]; other != nil && other != e {
					x.remove(other)
					live = drop(live, other)
					delete(want, nk)
				}
				x.remove(e)
				delete(want, objKey{e.obj.Namespace, e.obj.Name})
				e.obj, e.full = n.obj, n.full
				x.put(e)
				want[nk] = e
			default: // a task removed
				e := live[rng.IntN(len(live))]
				x.remove(e)
				delete(want, objKey{e.obj.Namespace, e.obj.Name})
				live = drop(live, e)
			}
			if x.len() != len(want) {
				t.Fatalf("step %d: index holds %d entries, want %d", step, x.len(), len(want))
			}
			for ns := 0; ns < 2; ns++ {
				for i := 0; i < 40; i++ {
					key := objKey{fmt.Sprintf("ns%d", ns), fmt.Sprintf("t%d", i)}
					if got := x.get(key.namespace, key.name); got != want[key] {
						t.Fatalf("step %d: get %v = %p, want %p", step, key, got, want[key])
					}
				}
			}
		}
	}
}

func drop(es []*taskEntry, e *taskEntry) []*taskEntry {
	for i, x := range es {
		if x == e {
			return append(es[:i], es[i+1:]...)
		}
	}
	return es
}

// The cache keeps its invariants, the name index's included, through
// re-created, renamed, updated and deleted tasks when every name has the
// same hash.
func TestCacheWithCollidingNames(t *testing.T) {
	c := New(Options{})
	c.lock()
	c.taskNames.hash = func(string, string) uint64 { return 1 }
	c.unlock()
	rng := rand.New(rand.NewPCG(3, 4))
	for step := 0; step < 3000; step++ {
		name, uid := fmt.Sprintf("t%d", rng.IntN(30)), fmt.Sprintf("u%d", rng.IntN(60))
		switch rng.IntN(4) {
		case 0:
			c.DeleteTask(uid)
		default: // a task added or updated, maybe under another UID's name
			tk := api.Task{Namespace: "ns", Name: name, UID: uid, Job: "j", Phase: api.TaskPending,
				Request: api.NewResource(1000, 1<<20, map[string]int64{api.Pods: 1})}
			switch rng.IntN(3) { // kept slim when placed or finished
			case 1:
				tk.NodeName, tk.Phase = "n1", api.TaskRunning
			case 2:
				tk.Phase = api.TaskSucceeded
			}
			c.AddOrUpdateTask(tk)
		}
		if err := verify(c); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}
