package cache

import (
	"maps"
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Deep copies. api.Resource.Clone already copies its scalars; everything
// else with a map, slice or pointer is copied here so that nothing the cache
// keeps is shared with its callers or with a snapshot, but for a node's
// object: the cache copies it once, as it arrives, and then replaces it,
// never changes it, so its books and every snapshot share it.

func cloneNode(n api.Node) api.Node {
	n.Allocatable = n.Allocatable.Clone()
	n.Labels = maps.Clone(n.Labels)
	n.Taints = slices.Clone(n.Taints)
	return n
}

// cloneBooks copies a node's books for a snapshot: the counts are the
// copy's own (a snapshot's Book changes them in place), the node object is
// shared (never changed; a snapshot's own copy of every node's labels and
// allocatable was ~8 MB of a shard's live heap at 16,000 nodes).
func cloneBooks(b *api.NodeBooks) *api.NodeBooks {
	cp := *b
	cp.Used = b.Used.Clone()
	cp.Releasing = b.Releasing.Clone()
	return &cp
}

func cloneTask(t api.Task) api.Task {
	t.Request = t.Request.Clone()
	t.NodeSelector = maps.Clone(t.NodeSelector)
	t.Tolerations = slices.Clone(t.Tolerations)
	if t.Affinity != nil {
		terms := make([]api.SelectorTerm, len(t.Affinity))
		for i, term := range t.Affinity {
			if term.MatchExpressions != nil {
				reqs := make([]api.SelectorRequirement, len(term.MatchExpressions))
				for j, r := range term.MatchExpressions {
					r.Values = slices.Clone(r.Values)
					reqs[j] = r
				}
				term.MatchExpressions = reqs
			}
			terms[i] = term
		}
		t.Affinity = terms
	}
	return t
}

// scalarKey is the content of a scalars map of one or two entries, sorted
// by name.
type scalarKey struct {
	k1, k2 string
	v1, v2 int64
}

// maxInterned bounds the interned scalar maps, whatever the pods ask for.
const maxInterned = 4096

// storedTask is the copy of t the cache keeps. It is a deep copy, except
// that its request's scalars map (a map of its own per task was a third of
// the cache's memory: nearly every pod asks for "pods" 1, and perhaps a
// device) is shared with every other stored task asking for the same
// scalars. The stored copy is never mutated, and readers get copies.
func (c *Cache) storedTask(t api.Task) api.Task {
	req := t.Request
	t.Request = api.Resource{}
	t = cloneTask(t)
	t.Request = api.Resource{MilliCPU: req.MilliCPU, Memory: req.Memory, Scalars: c.internScalars(req.Scalars)}
	return t
}

// internScalars returns the interned copy of m (a copy of its own when m
// has more than two entries or the table is full); nil for an empty m.
func (c *Cache) internScalars(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	if len(m) > 2 {
		return maps.Clone(m)
	}
	var k scalarKey
	n := 0
	for name, v := range m {
		if n == 0 {
			k.k1, k.v1 = name, v
		} else {
			k.k2, k.v2 = name, v
		}
		n++
	}
	if n == 2 && k.k2 < k.k1 {
		k.k1, k.k2, k.v1, k.v2 = k.k2, k.k1, k.v2, k.v1
	}
	if s, ok := c.scalars[k]; ok {
		return s
	}
	s := maps.Clone(m)
	if len(c.scalars) < maxInterned {
		c.scalars[k] = s
	}
	return s
}

func cloneJob(j api.Job) api.Job {
	if j.MinResources != nil {
		r := j.MinResources.Clone()
		j.MinResources = &r
	}
	return j
}

// nodeEqual reports whether two node objects are the same for the cache, so
// that an informer resync does not bump a node's generation.
func nodeEqual(a, b api.Node) bool {
	return a.Name == b.Name && a.UID == b.UID && a.Unschedulable == b.Unschedulable &&
		a.Allocatable.Equal(b.Allocatable) && maps.Equal(a.Labels, b.Labels) &&
		slices.Equal(a.Taints, b.Taints)
}
