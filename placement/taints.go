package placement

import "github.com/shardsched/shardsched/api"

// Taints rejects nodes with a NoSchedule or NoExecute taint that none of
// the task's tolerations tolerates. PreferNoSchedule taints (and effects
// this package does not know) are left to scoring: filtering ignores them.
// The reason names the first untolerated taint in the node's order, as
// kube-scheduler does: node(s) had untolerated taint {key: value}.
type Taints struct{}

// Name implements Filter.
func (Taints) Name() string { return "Taints" }

// Filter implements Filter.
func (Taints) Filter(t *api.Task, n *NodeView) Status {
	if n == nil || n.Books == nil {
		return rejectForGood(ReasonNoNode)
	}
	taints := n.Books.Node.Taints
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != api.TaintNoSchedule && taint.Effect != api.TaintNoExecute {
			continue
		}
		if t != nil && tolerated(t.Tolerations, taint) {
			continue
		}
		return rejectForGood("node(s) had untolerated taint {" + taint.Key + ": " + taint.Value + "}")
	}
	return Status{}
}

func tolerated(tols []api.Toleration, taint *api.Taint) bool {
	for i := range tols {
		if Tolerates(&tols[i], taint) {
			return true
		}
	}
	return false
}

// Tolerates reports whether tol tolerates taint, with Kubernetes'
// semantics: an empty Effect matches every effect; an empty Key matches
// every key (with operator Exists it tolerates everything); operator Exists
// ignores the value; operator Equal, or an empty operator, needs equal
// values. An unknown operator tolerates nothing.
func Tolerates(tol *api.Toleration, taint *api.Taint) bool {
	if tol == nil || taint == nil {
		return false
	}
	if tol.Effect != "" && tol.Effect != taint.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != taint.Key {
		return false
	}
	switch tol.Operator {
	case api.TolerationExists:
		return true
	case api.TolerationEqual, "":
		return tol.Value == taint.Value
	default:
		return false
	}
}
