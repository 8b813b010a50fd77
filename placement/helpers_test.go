package placement

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardsched/shardsched/api"
)

const (
	gpu = "nvidia.com/gpu"
	gi  = int64(1) << 30
)

// nodeOpt adjusts a test node.
type nodeOpt func(*api.NodeBooks)

// mkNode returns books for a node with cpu cores, memory GiB and pods
// allocatable, nothing used.
func mkNode(name string, cores, memGi, pods int64, opts ...nodeOpt) *api.NodeBooks {
	b := &api.NodeBooks{Node: api.Node{
		Name:        name,
		UID:         "uid-" + name,
		Allocatable: api.NewResource(cores*1000, memGi*gi, map[string]int64{api.Pods: pods}),
	}}
	for _, o := range opts {
		o(b)
	}
	return b
}

func withUsed(milliCPU, memGi, pods int64) nodeOpt {
	return func(b *api.NodeBooks) {
		b.Used = api.NewResource(milliCPU, memGi*gi, map[string]int64{api.Pods: pods})
		b.Tasks = int(pods)
	}
}

func withGPU(n int64) nodeOpt {
	return func(b *api.NodeBooks) { b.Node.Allocatable = b.Node.Allocatable.With(gpu, n) }
}

func withScalar(name string, v int64) nodeOpt {
	return func(b *api.NodeBooks) { b.Node.Allocatable = b.Node.Allocatable.With(name, v) }
}

func withLabels(kv ...string) nodeOpt {
	return func(b *api.NodeBooks) {
		if b.Node.Labels == nil {
			b.Node.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			b.Node.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withTaint(key, value, effect string) nodeOpt {
	return func(b *api.NodeBooks) {
		b.Node.Taints = append(b.Node.Taints, api.Taint{Key: key, Value: value, Effect: effect})
	}
}

func cordoned(b *api.NodeBooks)       { b.Node.Unschedulable = true }
func outOfSync(b *api.NodeBooks)      { b.OutOfSync = true }
func view(b *api.NodeBooks) *NodeView { return &NodeView{Books: b, Free: b.Idle()} }

// mkTask returns a task asking for milli-CPU, memory GiB and one pod.
func mkTask(uid string, milliCPU, memGi int64) *api.Task {
	return &api.Task{
		Namespace: "ns", Name: "t-" + uid, UID: uid, Job: "job",
		Request: api.NewResource(milliCPU, memGi*gi, map[string]int64{api.Pods: 1}),
		Phase:   api.TaskPending,
	}
}

func gang(prefix string, n int, milliCPU, memGi int64) []*api.Task {
	out := make([]*api.Task, n)
	for i := range out {
		out[i] = mkTask(fmt.Sprintf("%s-%d", prefix, i), milliCPU, memGi)
	}
	return out
}

func mustConfig(t testing.TB, strategy string) Config {
	t.Helper()
	c, err := DefaultConfig(strategy)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b9)) }

// --- deep copies for no-mutation checks: keep nil-ness of every map and slice.

func copyResource(r api.Resource) api.Resource {
	out := r
	if r.Scalars != nil {
		out.Scalars = maps.Clone(r.Scalars)
	}
	return out
}

func copyBooks(b *api.NodeBooks) *api.NodeBooks {
	if b == nil {
		return nil
	}
	c := *b
	c.Node.Allocatable = copyResource(b.Node.Allocatable)
	c.Used = copyResource(b.Used)
	c.Releasing = copyResource(b.Releasing)
	if b.Node.Labels != nil {
		c.Node.Labels = maps.Clone(b.Node.Labels)
	}
	if b.Node.Taints != nil {
		c.Node.Taints = slices.Clone(b.Node.Taints)
	}
	return &c
}

func copyTask(t *api.Task) *api.Task {
	if t == nil {
		return nil
	}
	c := *t
	c.Request = copyResource(t.Request)
	if t.NodeSelector != nil {
		c.NodeSelector = maps.Clone(t.NodeSelector)
	}
	if t.Tolerations != nil {
		c.Tolerations = slices.Clone(t.Tolerations)
	}
	if t.Affinity != nil {
		c.Affinity = make([]api.SelectorTerm, len(t.Affinity))
		for i, term := range t.Affinity {
			if term.MatchExpressions != nil {
				c.Affinity[i].MatchExpressions = make([]api.SelectorRequirement, len(term.MatchExpressions))
				for j, r := range term.MatchExpressions {
					c.Affinity[i].MatchExpressions[j] = r
					if r.Values != nil {
						c.Affinity[i].MatchExpressions[j].Values = slices.Clone(r.Values)
					}
				}
			}
		}
	}
	return &c
}

// distinctNodes returns how many different nodes the assignments use.
func distinctNodes(a map[string]string) int {
	set := map[string]bool{}
	for _, n := range a {
		set[n] = true
	}
	return len(set)
}
