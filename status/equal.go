package status

import (
	"slices"

	"github.com/shardsched/shardsched/api"
)

// The functions below name every field of the api status types; a test
// fails when a field is added there and not here.

func queueStatusEqual(a, b api.QueueStatus) bool {
	return a.Pending == b.Pending && a.Running == b.Running && a.Inqueue == b.Inqueue &&
		a.Allocated.Equal(b.Allocated)
}

func cloneQueueStatus(s api.QueueStatus) api.QueueStatus {
	s.Allocated = s.Allocated.Clone()
	return s
}

func jobStatusEqual(a, b api.JobStatus) bool {
	if a.Phase != b.Phase || a.Running != b.Running || a.Succeeded != b.Succeeded ||
		a.Failed != b.Failed || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i, ca := range a.Conditions {
		cb := b.Conditions[i]
		if ca.Type != cb.Type || ca.Status != cb.Status || ca.Reason != cb.Reason ||
			ca.Message != cb.Message || !ca.LastTransition.Equal(cb.LastTransition) {
			return false
		}
	}
	return true
}

// countsOnly reports whether a and b differ in their counts alone: the
// same phase and conditions.
func countsOnly(a, b api.JobStatus) bool {
	a.Running, a.Succeeded, a.Failed = b.Running, b.Succeeded, b.Failed
	return jobStatusEqual(a, b)
}

// queueStillBusy reports whether a Queue's new status may wait
// (Config.QueueCountsEvery): the queue was busy when last written and is
// busy still. Going idle or leaving idle is written at once.
func queueStillBusy(want, written api.QueueStatus) bool {
	return !queueIdle(want) && !queueIdle(written)
}

// queueIdle reports whether a queue has no job and nothing allocated: its
// status equals the zero one (queueStatusEqual names every field).
func queueIdle(s api.QueueStatus) bool { return queueStatusEqual(s, api.QueueStatus{}) }

func cloneJobStatus(s api.JobStatus) api.JobStatus {
	s.Conditions = slices.Clone(s.Conditions)
	return s
}
