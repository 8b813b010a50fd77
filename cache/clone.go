package cache

import (
	"maps"
	"slices"

	"github.com/shardsched/shardsched/api"
)

// Deep copies. api.Resource.Clone already copies its scalars; everything
// else with a map, slice or pointer is copied here so that nothing the cache
// keeps is shared with its callers or with a snapshot.

func cloneNode(n api.Node) api.Node {
	n.Allocatable = n.Allocatable.Clone()
	n.Labels = maps.Clone(n.Labels)
	n.Taints = slices.Clone(n.Taints)
	return n
}

func cloneBooks(b *api.NodeBooks) *api.NodeBooks {
	cp := *b
	cp.Node = cloneNode(b.Node)
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
