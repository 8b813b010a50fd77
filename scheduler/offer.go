package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// The owner's side of a hand-off: offering a job that does not fit here
// to another shard (handoff.go has the records' lifecycle and the
// claimer's side).

// offer hands a job that does not fit here to the live shard whose
// gossiped capacity has room for the gang (the sum of its requests within
// the shard's free resources, its largest task within the shard's largest
// free node) and the most free CPU (ties: the smaller name), its free
// room taken as gossiped less the gangs this shard offered it that are
// not claimed yet (promised), skipping shards that refused it lately. It
// reports whether it chose a shard: the job is then another shard's to
// place in this pass, and the offer is made at the pass's end
// (sendOffers).
func (s *Scheduler) offer(j *api.Job, gang []*api.Task) bool {
	return s.offerTo(j, gang, false)
}

// offerToHold hands a starving gang that fits on no shard's free room,
// and would not fit on this shard's nodes even were they empty, to the
// live shard whose nodes could hold it when empty (allocFits) and that
// has the most of it free now (GPUs for a gang that asks for GPUs, else
// CPU), skipping shards that refused it lately (for holdRefusedFor: a
// shard refuses while its own holds use its budget, or for MaxHold after
// its hold for that gang ran out). That shard claims it only if it can
// hold nodes for it (takeOffers). Without this such a gang waits until
// some shard happens to have room for it all at once, which on a busy
// cluster of many shards may be never: measured, a gang of 16 GPU nodes'
// worth against 8 shards of about 20 GPU nodes each waited 883 s.
func (s *Scheduler) offerToHold(j *api.Job, gang []*api.Task) bool {
	return s.offerTo(j, gang, true)
}

// holdRefusedFor is how long a shard that refused a gang offered to hold
// is not offered it again.
func (c *Config) holdRefusedFor() time.Duration { return 6 * c.RefusedFor }

func (s *Scheduler) offerTo(j *api.Job, gang []*api.Task, toHold bool) bool {
	if !s.handoffOn() || s.jobBinds(j.UID) > 0 {
		return false
	}
	sum, largest, ok := gangNeeds(gang)
	if !ok {
		return false
	}
	fits, free := capacityFits, func(c wire.Capacity) int64 { return c.FreeMilliCPU }
	refusedFor := s.cfg.RefusedFor
	var promised map[string]api.Resource
	if !toHold {
		promised = s.promised()
	}
	if toHold {
		fits, refusedFor = allocFits, s.cfg.holdRefusedFor()
		if sum.Get(gpuResource) > 0 {
			free = func(c wire.Capacity) int64 { return c.FreeGPU }
		}
	}
	me := s.deps.Peers.Name()
	now := s.cfg.Now()
	var best *wire.Meta
	for _, m := range s.deps.Peers.Members() {
		// m is a copy: the room promised is taken off this choice only.
		m.Capacity = withoutPromised(m.Capacity, promised[m.ID])
		if m.ID == me || !fits(m.Capacity, sum, largest) {
			continue
		}
		if at, ok := s.ho.refused[j.UID][m.ID]; ok && now.Sub(at) < refusedFor {
			continue
		}
		if best == nil || free(m.Capacity) > free(best.Capacity) ||
			(free(m.Capacity) == free(best.Capacity) && m.ID < best.ID) {
			best = &m
		}
	}
	if best == nil {
		return false
	}
	o := sentOffer{to: best.ID, at: now}
	if !toHold {
		// A gang offered to hold nodes for does not fit the target's
		// free room by definition: it takes none of it now.
		o.need = sum
	}
	call := &offerCall{job: j, to: *best, gang: len(gang), sum: sum, toHold: toHold}
	call.prev, call.hadPrev = s.ho.offers[j.UID]
	// Counted as made until its call says otherwise (sendOffers), so that
	// the offers chosen after it in this pass count its room as promised.
	s.ho.offers[j.UID] = o
	s.ho.sending = append(s.ho.sending, call)
	return true
}

// offerCall is one offer chosen by offerTo and made by sendOffers.
type offerCall struct {
	job     *api.Job
	to      wire.Meta
	gang    int
	sum     api.Resource
	toHold  bool
	prev    sentOffer // the job's offer record before this one, if hadPrev
	hadPrev bool
	err     error
}

// sendOffers makes the offers chosen since the last call, side by side
// (AdmitParallelism), as admit makes its reservations: each is one etcd
// transaction, and a shard whose queues outgrow its nodes offers hundreds
// of jobs in a burst (made one after another inside placement, they were
// the largest part of its cycle: see docs/benchmarks.md, forty-seventh
// session). An offer that was not made is taken back from the records;
// the job is placed, offered or told why it waits in the next cycle. Loop
// only; placeAdmitted calls it once its pass is over.
func (s *Scheduler) sendOffers(ctx context.Context) {
	calls := s.ho.sending
	s.ho.sending = nil
	parallel(calls, s.cfg.AdmitParallelism, func(c *offerCall) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, c.err = s.deps.Claims.Offer(cctx, c.job.UID, c.job.Queue, c.to.ID)
		cancel()
	})
	for _, c := range calls {
		j := c.job
		if c.err != nil {
			if c.hadPrev {
				s.ho.offers[j.UID] = c.prev
			} else {
				delete(s.ho.offers, j.UID)
			}
			if !errors.Is(c.err, wire.ErrNotQueueOwner) {
				// A record exists, or the outcome is unknown: in both
				// cases the store now holds the job back from this shard
				// until it knows.
				s.log.Warn("offer failed", "job", j.Key(), "to", c.to.ID, "err", c.err)
			}
			continue
		}
		s.stats.offers.Add(1)
		msg := "job offered to another shard"
		if c.toHold {
			s.stats.holdOffers.Add(1)
			msg = "starving gang offered to a shard that can hold nodes for it"
		}
		s.log.Info(msg, "job", j.Key(), "to", c.to.ID, "gang", c.gang, "gang cpu", c.sum.MilliCPU, "gang gpu", c.sum.Get(gpuResource),
			"their free cpu", c.to.Capacity.FreeMilliCPU, "their free gpu", c.to.Capacity.FreeGPU)
	}
}

// promised sums, by target shard, the gangs this shard has offered that
// are not claimed yet. A target's gossiped room does not show them until
// it places them, so without this an owner offered every job of a burst to
// the one shard with the most room, which could take only a few: measured,
// 116 of 520 offers refused in a 100k burst with 8 shards, 3,238 pods/s.
func (s *Scheduler) promised() map[string]api.Resource {
	out := map[string]api.Resource{}
	now := s.cfg.Now()
	for _, o := range s.ho.offers {
		// An offer unclaimed after OfferTimeout is withdrawn; one this
		// shard stopped following (its job gone, or no longer admitted
		// here) waits for a prune: neither holds room any longer.
		if o.claimed || now.Sub(o.at) >= s.cfg.OfferTimeout {
			continue
		}
		r := out[o.to]
		r.MilliCPU += o.need.MilliCPU
		r.Memory += o.need.Memory
		if g := o.need.Get(gpuResource); g > 0 {
			r = r.With(gpuResource, r.Get(gpuResource)+g)
		}
		out[o.to] = r
	}
	return out
}

// withoutPromised is c less what was offered to its shard and not yet
// claimed (promised): the free room only; no node's largest free room is
// known to shrink.
func withoutPromised(c wire.Capacity, r api.Resource) wire.Capacity {
	c.FreeMilliCPU -= r.MilliCPU
	c.FreeMemory -= r.Memory
	c.FreeGPU -= r.Get(gpuResource)
	return c
}
