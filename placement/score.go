package placement

import (
	"math/bits"
	"strings"

	"github.com/shardsched/shardsched/api"
)

// MaxScore is the highest score a Scorer gives; the lowest is 0. PlaceGang
// clamps any score outside 0..MaxScore into it.
const MaxScore int64 = 100

// Scorer is one ranking step: how good is node n for task t? It is called
// only for nodes that passed every filter, with n.Free as it is before t is
// placed.
//
// Contract: as for Filter — called concurrently, must not block, do I/O,
// keep state, modify t or n, or panic; should not allocate. It returns
// 0..MaxScore, higher is better.
type Scorer interface {
	// Name identifies the step in configs and traces.
	Name() string
	// Score ranks the node for the task, 0..MaxScore.
	Score(t *api.Task, n *NodeView) int64
}

var (
	_ Scorer = BinPack{}
	_ Scorer = Spread{}
	_ Scorer = SpareDevices{}
)

// BinPack prefers the node that is most allocated once the task is placed:
// the score is the dominant share after placing (the highest fraction used,
// over cpu, memory and every scalar the task asks for) scaled to
// 0..MaxScore. Packing keeps whole nodes free for large gangs, which is
// what batch workloads want.
type BinPack struct{}

// Name implements Scorer.
func (BinPack) Name() string { return "BinPack" }

// Score implements Scorer.
func (BinPack) Score(t *api.Task, n *NodeView) int64 { return dominantShareAfter(t, n) }

// Spread prefers the emptiest node: MaxScore minus BinPack's score, so the
// node whose dominant share after placing is lowest wins.
type Spread struct{}

// Name implements Scorer.
func (Spread) Name() string { return "Spread" }

// Score implements Scorer.
func (Spread) Score(t *api.Task, n *NodeView) int64 { return MaxScore - dominantShareAfter(t, n) }

// SpareDevices keeps devices for the tasks that need them: a node with a
// device (an extended resource such as nvidia.com/gpu: a name with a
// domain other than kubernetes.io) that the task does not ask for scores
// 0, any other node MaxScore. Built-in resources (cpu, memory, pods,
// ephemeral-storage, hugepages-*) are not devices: every real node has
// some. DefaultConfig weighs it 2 beside BinPack or Spread (whose scores
// stop at MaxScore), so among the nodes a task's placement looks at (a
// sample on a large shard), one without devices always wins: CPU-only
// pods would otherwise fill the GPU nodes' CPU and memory, and a GPU gang
// would wait with the GPUs idle.
type SpareDevices struct{}

// Name implements Scorer.
func (SpareDevices) Name() string { return "SpareDevices" }

// Score implements Scorer.
func (SpareDevices) Score(t *api.Task, n *NodeView) int64 {
	if n == nil || n.Books == nil || !n.hasDevices() {
		return MaxScore // most nodes: known once per placement
	}
	if t == nil {
		return 0
	}
	if _, others := n.podsAndOthers(t); !others {
		return 0 // a device node, and the task asks for no device
	}
	for d, v := range n.Books.Node.Allocatable.Scalars {
		if v > 0 && isDevice(d) && t.Request.Scalars[d] <= 0 {
			return 0
		}
	}
	return MaxScore
}

// isDevice reports whether a resource name is an extended resource, as
// Kubernetes defines one: a name with a domain, outside kubernetes.io
// (and not a quota's "requests." form).
func isDevice(name string) bool {
	domain, _, ok := strings.Cut(name, "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io") && !strings.HasPrefix(name, "requests.")
}

// dominantShareAfter returns, in 0..MaxScore, the largest fraction of a
// dimension of the node's allocatable that would be in use once t is placed
// on n. CPU and memory always count; other scalars count when t asks for
// them. Dimensions the node has none of are skipped.
func dominantShareAfter(t *api.Task, n *NodeView) int64 {
	if n == nil || n.Books == nil {
		return 0
	}
	alloc := &n.Books.Node.Allocatable
	var req *api.Resource
	if t != nil {
		req = &t.Request
	} else {
		req = &api.Resource{}
	}
	best := max(
		shareAfter(alloc.MilliCPU, n.freeCPU(), req.MilliCPU),
		shareAfter(alloc.Memory, n.freeMemory(), req.Memory),
	)
	pods, others := n.podsAndOthers(t)
	if pods > 0 {
		best = max(best, shareAfter(n.allocScalar(api.Pods), n.freeScalar(api.Pods), pods))
	}
	if !others {
		return best // the common case: no map iteration
	}
	for d, v := range req.Scalars {
		if v > 0 && d != api.Pods {
			best = max(best, shareAfter(n.allocScalar(d), n.freeScalar(d), v))
		}
	}
	return best
}

// shareAfter returns floor(MaxScore × used/alloc) where used is what is in
// use of one dimension after placing req: alloc − (free − req), clamped to
// 0..alloc. It is exact for every int64 input and never overflows.
func shareAfter(alloc, free, req int64) int64 {
	if alloc <= 0 {
		return 0
	}
	free = min(max(free, 0), alloc)
	left := free - max(req, 0) // both ≥ 0: no overflow
	if left < 0 {
		left = 0
	}
	used := alloc - left // 0..alloc
	hi, lo := bits.Mul64(uint64(used), uint64(MaxScore))
	q, _ := bits.Div64(hi, lo, uint64(alloc)) // hi < alloc since used ≤ alloc
	return int64(q)
}
