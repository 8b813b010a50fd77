package cache

import (
	"time"

	"github.com/shardsched/shardsched/api"
)

// Job identity: which of the tasks that name a job are members of the job
// now known under that name (see "Job identity" in doc.go).

// cutoffOf is the time before which a task that is gone (releasing or
// terminal) belonged to a predecessor of j: j's creation time, or zero
// (every task is a member) when there is no job, its creation time is
// unknown, or it is an implicit group (created after its own pods).
func cutoffOf(j *api.Job) time.Time {
	if j == nil || j.Implicit {
		return time.Time{}
	}
	return j.Created
}

// predecessor reports whether a task that names the group belonged to an
// earlier job of the same name rather than to the one whose cutoff is
// given: it is releasing or terminal, and was created before the cutoff.
// A live task (pending, assumed, bound, running) is always a member.
func predecessor(phase api.TaskPhase, created, cutoff time.Time) bool {
	if cutoff.IsZero() || created.IsZero() {
		return false
	}
	return (phase == api.TaskReleasing || phase.Terminal()) && created.Before(cutoff)
}

// member reports whether a task of the group is a member of the job now
// known under the group's key.
func (g *taskGroup) member(e *taskEntry) bool {
	return !predecessor(e.phase(), e.created(), g.cutoff)
}

// setCutoff recomputes the cutoff of the group under key after the job
// known under key changed, touching the group only if it moved: a status
// update of the same PodGroup changes nothing here.
func (c *Cache) setCutoff(key objKey) {
	g := c.groups[key]
	if g == nil {
		return
	}
	cut := cutoffOf(c.jobs[c.jobNames[key]])
	if cut.Equal(g.cutoff) {
		return
	}
	g.cutoff = cut
	g.recount() // membership moved
	c.touchGroup(g)
}
