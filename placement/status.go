package placement

import "strconv"

// Code is the outcome of one filter on one node.
type Code int

// Filter outcomes, as in kube-scheduler's framework.
const (
	// Success: the node passes this filter.
	Success Code = iota
	// Unschedulable: the node does not fit now but might once something
	// changes on it (resources are freed, the books are rebuilt).
	Unschedulable
	// UnschedulableAndUnresolvable: the node cannot take the task whatever
	// happens to the tasks on it (labels, taints, cordon).
	UnschedulableAndUnresolvable
)

// String returns the code's name.
func (c Code) String() string {
	switch c {
	case Success:
		return "Success"
	case Unschedulable:
		return "Unschedulable"
	case UnschedulableAndUnresolvable:
		return "UnschedulableAndUnresolvable"
	default:
		return "Code(" + strconv.Itoa(int(c)) + ")"
	}
}

// Status is a filter's verdict. The zero Status is Success. Reason is a
// short, human-readable phrase in kube-scheduler's style ("Insufficient
// cpu"); nodes are counted per Reason, so it must not carry per-node detail
// such as the node's name.
type Status struct {
	Code   Code
	Reason string
}

// IsSuccess reports whether the node passed.
func (s Status) IsSuccess() bool { return s.Code == Success }

func reject(reason string) Status { return Status{Code: Unschedulable, Reason: reason} }

func rejectForGood(reason string) Status {
	return Status{Code: UnschedulableAndUnresolvable, Reason: reason}
}
