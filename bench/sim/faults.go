package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardsched/shardsched/bench/report"
)

// fault is one chaos fault, and the recovery from it.
type fault struct {
	at    time.Duration
	what  string
	done  bool
	event *report.ChaosEvent
	// recovery tracking
	wallAt               time.Time
	backlog              int
	ownersBack, thruBack bool
	admittedBefore       map[string]bool
}

// planFaults is the chaos scenario over a run ending at end: one shard
// killed at 30 % of the run, the coordinator leader's shard at 50 %, and
// etcd restarted at 70 %.
func planFaults(end time.Duration) []*fault {
	return []*fault{{at: end * 3 / 10, what: "kill -9 a shard"}, {at: end * 5 / 10, what: "kill -9 the coordinator leader's shard"}, {at: end * 7 / 10, what: "restart etcd"}}
}

// injectFaults injects the faults due at the current step, noting first
// the backlog and the jobs admitted before each.
func (d *driver) injectFaults(ctx context.Context) error {
	s, vt, run := d.s, d.vt, &d.run
	for _, f := range d.faults {
		if f.done || vt < f.at {
			continue
		}
		f.done = true
		sm := s.cl.sample(s.leaves, true)
		f.backlog = sm.pending
		// Admitted before the fault: every job holding a reservation.
		f.admittedBefore = map[string]bool{}
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		if res, err := s.anyQuota().List(lctx); err == nil {
			for _, r := range res.Reservations {
				f.admittedBefore[r.Job.UID] = true
			}
		} else {
			run.Notes = append(run.Notes, fmt.Sprintf("before %q the reservations could not be listed (%v); jobs running then stand in for them", f.what, err))
			f.admittedBefore = sm.runningJobs
		}
		lcancel()
		f.wallAt = time.Now()
		f.event = &report.ChaosEvent{At: vt.Seconds(), What: f.what, OwnersBackAfter: -1, ThroughputBackAfter: -1}
		if err := s.fault(f.what); err != nil {
			return fmt.Errorf("chaos %q: %w", f.what, err)
		}
		fmt.Fprintf(d.cfg.Progress, "sim: chaos at %s: %s\n", vt.Round(time.Second), f.what)
	}
	return nil
}

// fault injects one chaos fault.
func (s *sim) fault(what string) error {
	switch {
	case strings.Contains(what, "leader"):
		for _, p := range s.live() {
			if p.Coord.IsLeader() {
				s.kill(p)
				return nil
			}
		}
		return errors.New("no live shard leads the coordinator")
	case strings.Contains(what, "etcd"):
		return s.etcd.Restart()
	default:
		live := s.live()
		for _, p := range live {
			if !p.Coord.IsLeader() && len(live) > 1 {
				s.kill(p)
				return nil
			}
		}
		return errors.New("need at least two live shards to kill one that does not lead")
	}
}

// trackRecovery follows the recovery of the faults under way: when every
// key is owned again, and when the backlog is back near what it was
// before the fault.
func (d *driver) trackRecovery() {
	s := d.s
	for _, f := range d.faults {
		if !f.done || f.event == nil {
			continue
		}
		if !f.ownersBack && s.ownersComplete() {
			f.ownersBack = true
			f.event.OwnersBackAfter = time.Since(f.wallAt).Seconds()
		}
		if !f.thruBack {
			if pend := s.cl.pending(); pend <= max(f.backlog*3/2, f.backlog+50) && time.Since(f.wallAt) > 100*time.Millisecond {
				f.thruBack = true
				f.event.ThroughputBackAfter = time.Since(f.wallAt).Seconds()
			}
		}
	}
}

// chaosFigures, after a chaos run, fills its fault events and counts the
// admitted jobs lost (an invariant); sm is the run's last sample, with
// the jobs.
func (d *driver) chaosFigures(ctx context.Context, sm sample) error {
	if !d.cfg.Chaos {
		return nil
	}
	s, run := d.s, &d.run
	lost := 0
	res, err := s.anyQuota().List(ctx)
	if err != nil {
		return fmt.Errorf("list reservations after chaos: %w", err)
	}
	have := map[string]bool{}
	for _, r := range res.Reservations {
		have[r.Job.UID] = true
	}
	for _, f := range d.faults {
		if f.event != nil {
			run.Chaos.Events = append(run.Chaos.Events, *f.event)
		}
	}
	// Lost: admitted before some fault, still there at the end, not
	// all of its pods bound or finished, and no reservation left.
	seen := map[string]bool{}
	for _, f := range d.faults {
		for uid := range f.admittedBefore {
			if seen[uid] {
				continue
			}
			seen[uid] = true
			if exists, settled := s.cl.jobSettled(uid); exists && !settled && !have[uid] {
				lost++
				run.Notes = append(run.Notes, "admitted job lost (no reservation, pods unbound): "+uid)
			}
		}
	}
	for uid := range sm.runningJobs {
		if !have[uid] {
			run.Notes = append(run.Notes, "running job without a reservation: "+uid)
		}
	}
	run.Chaos.AdmittedJobsLost = lost
	run.Invariants["admitted_jobs_lost"] = int64(lost)
	return nil
}
