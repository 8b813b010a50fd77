package placement

import (
	"slices"
	"strconv"

	"github.com/shardsched/shardsched/api"
)

// NodeSelector rejects nodes that lack any of the task's nodeSelector
// labels with the exact value.
type NodeSelector struct{}

// Name implements Filter.
func (NodeSelector) Name() string { return "NodeSelector" }

// Filter implements Filter.
func (NodeSelector) Filter(t *api.Task, n *NodeView) Status {
	if n == nil || n.Books == nil {
		return rejectForGood(ReasonNoNode)
	}
	if t == nil {
		return Status{}
	}
	labels := n.Books.Node.Labels
	for k, want := range t.NodeSelector {
		if got, ok := labels[k]; !ok || got != want {
			return rejectForGood(ReasonNodeSelector)
		}
	}
	return Status{}
}

// RequiredAffinity rejects nodes that match none of the task's required
// node-affinity terms. Terms are ORed, the requirements of one term are
// ANDed, and a term with no requirements matches no node, as in Kubernetes.
// A task with no terms has no constraint.
type RequiredAffinity struct{}

// Name implements Filter.
func (RequiredAffinity) Name() string { return "RequiredAffinity" }

// Filter implements Filter.
func (RequiredAffinity) Filter(t *api.Task, n *NodeView) Status {
	if n == nil || n.Books == nil {
		return rejectForGood(ReasonNoNode)
	}
	if t == nil || len(t.Affinity) == 0 {
		return Status{}
	}
	labels := n.Books.Node.Labels
	for i := range t.Affinity {
		if MatchTerm(&t.Affinity[i], labels) {
			return Status{}
		}
	}
	return rejectForGood(ReasonNodeSelector)
}

// MatchTerm reports whether a node with these labels satisfies every
// requirement of term. An empty term matches nothing.
func MatchTerm(term *api.SelectorTerm, labels map[string]string) bool {
	if term == nil || len(term.MatchExpressions) == 0 {
		return false
	}
	for i := range term.MatchExpressions {
		if !MatchRequirement(&term.MatchExpressions[i], labels) {
			return false
		}
	}
	return true
}

// MatchRequirement reports whether a node with these labels satisfies r,
// with Kubernetes' semantics:
//
//   - In: the label is present and its value is one of Values.
//   - NotIn: the label is absent, or its value is none of Values.
//   - Exists / DoesNotExist: the label is present / absent.
//   - Gt / Lt: the label is present, Values holds exactly one element, both
//     parse as base-10 int64, and label > value / label < value.
//
// Malformed numbers and unknown operators never match.
func MatchRequirement(r *api.SelectorRequirement, labels map[string]string) bool {
	if r == nil {
		return false
	}
	val, has := labels[r.Key]
	switch r.Operator {
	case api.SelectorIn:
		return has && slices.Contains(r.Values, val)
	case api.SelectorNotIn:
		return !has || !slices.Contains(r.Values, val)
	case api.SelectorExists:
		return has
	case api.SelectorDoesNotExist:
		return !has
	case api.SelectorGt, api.SelectorLt:
		if !has || len(r.Values) != 1 {
			return false
		}
		got, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return false
		}
		bound, err := strconv.ParseInt(r.Values[0], 10, 64)
		if err != nil {
			return false
		}
		if r.Operator == api.SelectorGt {
			return got > bound
		}
		return got < bound
	default:
		return false
	}
}
