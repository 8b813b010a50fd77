package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// Peers is the gossip view of the shards (*shard.Shard): this shard's
// name, every live member's metadata (capacity summaries included), and
// the capacity summary this shard publishes. Safe for concurrent use;
// SetCapacity must not block.
type Peers interface {
	Name() string
	Members() []wire.Meta
	SetCapacity(c wire.Capacity)
}

// Claims is the store of claim records (*shard.Claims), through which a job
// that does not fit on its queue owner's partitions is handed to another
// shard. Safe for concurrent use. Lookups never block; Offer, Claim, Drop
// and Delete block for one etcd transaction. See shard.Claims for the
// transactions.
type Claims interface {
	Lookup(uid string) (wire.Claim, bool)
	List() []wire.Claim
	// OwnerMayPlace: this shard holds the queue's record and knows of no
	// claim record for the job (with a view at least as new as its
	// acquisition of the queue's record).
	OwnerMayPlace(uid, queue string) bool
	// Holds: the job is claimed by this shard under its current lease.
	Holds(uid string) bool
	Use(uid string) bool
	Done(uid string)
	Offer(ctx context.Context, uid, queue, to string) (wire.Claim, error)
	Claim(ctx context.Context, uid string, rev int64) (wire.Claim, error)
	Drop(ctx context.Context, uid string, rev int64) error
	Delete(ctx context.Context, uid string) error
}

// role is what this shard does with one job in a cycle.
type role int

const (
	// notMine: neither the queue owner's admission nor a claim is here.
	notMine role = iota
	// asOwner: this shard admitted the job, holds its queue, and no claim
	// record exists: it places the job, and offers it when it does not fit.
	asOwner
	// asClaimer: this shard holds the job's claim record: it places the job.
	asClaimer
	// placedElsewhere: this shard admitted the job but does not place it
	// (a claim record exists, or the queue is no longer held): it only
	// confirms the reservation once the gang is bound.
	placedElsewhere
)

// handoff is the loop-only state of offers and claims, and of the
// capacity gossiped.
type handoff struct {
	offers map[string]sentOffer // job UID → the offer this shard made
	// sending are the offers chosen in this placement pass, made at its
	// end (sendOffers).
	sending []*offerCall
	refused map[string]map[string]time.Time // job UID → shard → when it refused (or gave up) the job
	stuck   map[string]time.Time            // job UID → since when a claimed job does not fit here
	// dropping are claims this shard gave up while binds under them were
	// in flight (ErrClaimInUse): the drop is tried again every cycle.
	dropping map[string]wire.Claim
	capAt    time.Time // last capacity publication
	// capChecked is when the capacity was last summed to see whether it
	// changed enough to publish.
	capChecked time.Time
	lastCap    wire.Capacity
	// figs are the nodes' parts of the last capacity sum.
	figs capFigs
}

type sentOffer struct {
	to      string
	at      time.Time
	claimed bool
	// need is the gang's summed request as offered (zero for a record this
	// process did not write): until the offer is claimed, the owner counts
	// it against the target's gossiped room (promised).
	need api.Resource
}

func newHandoff() handoff {
	return handoff{offers: map[string]sentOffer{}, refused: map[string]map[string]time.Time{}, stuck: map[string]time.Time{},
		dropping: map[string]wire.Claim{}}
}

// handoffOn reports whether jobs may move between shards.
func (s *Scheduler) handoffOn() bool { return s.deps.Claims != nil && s.deps.Peers != nil }

// roleOf decides who places j, by the rule in doc.go: the shard its claim
// record names as claimed, else the owner of its queue.
func (s *Scheduler) roleOf(ctx context.Context, j *api.Job) role {
	// Admitted in the job's current queue: a job whose PodGroup moved to
	// another queue is placed again only once its reservation has moved.
	admitted := s.admittedIn(j.UID, j.Queue)
	if !s.handoffOn() {
		switch {
		case !admitted:
			return notMine
		case s.deps.Ownership.Holds(wire.QueueKey(j.Queue)):
			return asOwner
		default:
			return placedElsewhere
		}
	}
	if c, ok := s.deps.Claims.Lookup(j.UID); ok {
		if c.State == wire.Claimed && s.deps.Claims.Holds(j.UID) {
			if c.Queue != j.Queue && !c.Unknown {
				// Offered from a queue the job has left: the owner of its
				// new queue places it once its reservation has moved.
				s.dropClaim(ctx, c, "its PodGroup moved to queue "+j.Queue)
				return notMine
			}
			return asClaimer
		}
		if admitted {
			s.followOffer(ctx, j, c)
			return placedElsewhere
		}
		return notMine
	}
	s.offerEnded(j.UID)
	switch {
	case !admitted:
		return notMine
	case s.deps.Claims.OwnerMayPlace(j.UID, j.Queue):
		return asOwner
	default:
		return placedElsewhere
	}
}

// followOffer tracks the claim record of a job this shard admitted: it
// notes when its offer is claimed, and withdraws an offer nobody claimed
// within OfferTimeout (if the record is still the one it offered).
func (s *Scheduler) followOffer(ctx context.Context, j *api.Job, c wire.Claim) {
	if c.Unknown {
		return
	}
	now := s.cfg.Now()
	o, ok := s.ho.offers[j.UID]
	if !ok {
		// A record this process did not write (a previous owner's, or
		// ours before a restart): follow it from now on.
		o = sentOffer{to: c.To, at: now}
	}
	o.to = c.To
	if c.State == wire.Claimed {
		o.claimed = true
		s.ho.offers[j.UID] = o
		return
	}
	s.ho.offers[j.UID] = o
	if c.From != s.deps.Peers.Name() || now.Sub(o.at) < s.cfg.OfferTimeout {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	err := s.deps.Claims.Drop(cctx, j.UID, c.Rev)
	cancel()
	if err != nil {
		s.log.Debug("offer not withdrawn", "job", j.Key(), "to", c.To, "err", err)
		return
	}
	s.stats.offerTimeouts.Add(1)
	s.log.Info("offer not claimed in time; withdrawn", "job", j.Key(), "to", c.To)
	// offerEnded records the refusal once the record is seen gone.
}

// offerEnded is called when a job has no claim record: an offer this
// shard made has ended without the job being placed there for good (the
// target refused it, gave it up, died, or the offer was withdrawn), so the
// target is skipped for this job for a while.
func (s *Scheduler) offerEnded(uid string) {
	o, ok := s.ho.offers[uid]
	if !ok {
		return
	}
	delete(s.ho.offers, uid)
	r := s.ho.refused[uid]
	if r == nil {
		r = map[string]time.Time{}
		s.ho.refused[uid] = r
	}
	r[o.to] = s.cfg.Now()
	s.log.Debug("hand-off ended", "job uid", uid, "to", o.to, "was claimed", o.claimed)
}

// takeOffers answers the offers addressed to this shard: it claims a job
// whose gang fits on its nodes now, refuses one that does not (the offerer
// then tries elsewhere), and drops its claims of jobs that are gone. An
// offer of a job this shard does not know yet (its informers lag) is left
// to the offerer's timeout. It returns the claim records it read (every
// one this shard knows), for the cycle's placement to start from.
func (s *Scheduler) takeOffers(ctx context.Context) []wire.Claim {
	if !s.handoffOn() {
		return nil
	}
	for uid, c := range s.ho.dropping {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Claims.Drop(cctx, uid, c.Rev)
		cancel()
		if !errors.Is(err, wire.ErrClaimInUse) {
			delete(s.ho.dropping, uid) // dropped, or the record changed or went
		}
	}
	me := s.deps.Peers.Name()
	claims := s.deps.Claims.List()
	var mine []wire.Claim
	for _, c := range claims {
		if c.To == me && !c.Unknown {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return claims
	}
	byUID := make(map[string]*api.Job, len(mine))
	for _, c := range mine {
		if j, ok := s.snap.JobByUID(c.Job); ok {
			byUID[c.Job] = j
		}
	}
	nodes := s.unheld(s.snap.Nodes()) // nodes held for a starving gang take no other job
	// Oldest first, as placeAdmitted goes, so that the oldest gang offered
	// takes a hold first. s.held.full is the last placement pass's: a gang
	// of this shard's own that found the hold budget spent goes first.
	byAge := func(c wire.Claim) (time.Time, string) {
		if j := byUID[c.Job]; j != nil {
			return j.Created, c.Job
		}
		return time.Time{}, c.Job
	}
	slices.SortFunc(mine, func(a, b wire.Claim) int {
		ta, ua := byAge(a)
		tb, ub := byAge(b)
		return cmp.Or(ta.Compare(tb), cmp.Compare(ua, ub))
	})
	var take []*claimCall
	for _, c := range mine {
		j := byUID[c.Job]
		if c.State == wire.Claimed {
			if j == nil && s.deps.Claims.Holds(c.Job) {
				s.dropClaim(ctx, c, "job gone")
			}
			continue
		}
		if j == nil || (j.Phase == api.JobCompleted && !s.hasPendingHere(j)) {
			continue // a Completed group with new pending pods is taken like any other
		}
		ready, need, ok := s.readyGang(j)
		if !ok {
			continue // not every gang member is visible here yet
		}
		fits := false
		if len(nodes) > 0 && len(ready) > 0 {
			fits = s.planner.PlaceGang(s.place, ready, nodes, need, s.rng).OK
		}
		// A starving gang that does not fit now is taken if nodes can be
		// held for it here (the owner offers such gangs when no shard has
		// room: offerToHold). The hold is made before the claim and ended
		// if the claim fails.
		held := false
		if !fits && len(ready) >= need && s.offeredToHold(c, ready[:need]) {
			held, _ = s.maybeHold(j, ready, need, s.snap.Nodes())
		}
		if !fits && !held {
			if s.dropClaim(ctx, c, "does not fit here") {
				s.stats.refusals.Add(1)
			}
			continue
		}
		if held {
			nodes = s.unheld(s.snap.Nodes())
		}
		take = append(take, &claimCall{c: c, j: j, held: held})
	}
	// The claims are made side by side, as admit's reservations are: each
	// is one etcd transaction, and a burst offers a shard hundreds of jobs
	// (made one after another, they were most of a claimer's cycle: see
	// docs/benchmarks.md, forty-seventh session). A hold made for a gang
	// whose claim fails ends.
	parallel(take, s.cfg.AdmitParallelism, func(t *claimCall) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, t.err = s.deps.Claims.Claim(cctx, t.c.Job, t.c.Rev)
		cancel()
	})
	for _, t := range take {
		if t.err != nil {
			if t.held {
				s.held.end(t.j.UID)
				delete(s.heldBefore, t.j.UID)
				s.stats.holds.Add(-1)
			}
			s.log.Debug("claim lost", "job", t.j.Key(), "err", t.err)
			continue
		}
		s.stats.claims.Add(1)
		s.log.Info("claimed a job offered by its queue owner", "job", t.j.Key(), "from", t.c.From, "holding nodes for it", t.held)
	}
	return claims
}

// claimCall is one claim takeOffers makes, and its outcome.
type claimCall struct {
	c    wire.Claim
	j    *api.Job
	held bool
	err  error
}

// offeredToHold reports whether an offer looks like one of offerToHold's:
// no other live shard gossips room for the gang now, and the shard that
// offered it could not hold it even were its nodes empty. Only such
// offers are held for when they do not fit; any other is refused as
// before, so that its owner places it where the room is or holds for it
// itself.
func (s *Scheduler) offeredToHold(c wire.Claim, gang []*api.Task) bool {
	sum, largest, ok := gangNeeds(gang)
	if !ok {
		return false
	}
	me := s.deps.Peers.Name()
	from := false
	for _, m := range s.deps.Peers.Members() {
		switch {
		case m.ID == c.From:
			if allocFits(m.Capacity, sum, largest) {
				return false
			}
			from = true
		case m.ID != me && capacityFits(m.Capacity, sum, largest):
			return false
		}
	}
	return from
}

// roomElsewhere reports whether another live shard gossips room for gang
// (its free resources and its largest free node).
func (s *Scheduler) roomElsewhere(gang []*api.Task) bool {
	sum, largest, ok := gangNeeds(gang)
	if !ok || len(gang) == 0 {
		return false
	}
	me := s.deps.Peers.Name()
	for _, m := range s.deps.Peers.Members() {
		if m.ID != me && capacityFits(m.Capacity, sum, largest) {
			return true
		}
	}
	return false
}

// readyGang returns a job's pending tasks that may be tried now and how
// many must fit at once; ok is false while part of the gang is missing.
func (s *Scheduler) readyGang(j *api.Job) (ready []*api.Task, need int, ok bool) {
	pending, bound, _ := s.jobTasks(j)
	ready = s.readyTasks(pending, s.cfg.Now())
	need = max(int(j.MinMember)-bound, 1)
	return ready, need, need <= len(ready)
}

// claimStuck is called when tasks of a job claimed here (gang: those it
// would place next) do not fit: the claim is dropped so that the queue
// owner can place the job or offer it elsewhere, at once when another
// shard gossips room for them, else after ClaimGiveUp without a placement
// (room may come here meanwhile). takeOffers checks each offer against
// the nodes as they are, not less what the other offers it claims and this
// shard's own jobs take in the same cycle, and a claimed job's further
// pods may find no room left once its gang is bound: measured, with the
// give-up alone, a burst at 100k cores with 8 shards bound such a job's
// last pods 3 s late (its rate to the last bind 5,900 pods/s, not
// 30,000-48,000) in about one run of eight, though other shards had room.
func (s *Scheduler) claimStuck(ctx context.Context, j *api.Job, gang []*api.Task) {
	now := s.cfg.Now()
	since, ok := s.ho.stuck[j.UID]
	if !ok {
		since = now
		s.ho.stuck[j.UID] = now
	}
	if now.Sub(since) < s.cfg.ClaimGiveUp && !s.roomElsewhere(gang) {
		return
	}
	c, ok := s.deps.Claims.Lookup(j.UID)
	if !ok || c.Unknown {
		return
	}
	if s.dropClaim(ctx, c, "does not fit here any more") {
		s.stats.refusals.Add(1)
		delete(s.ho.stuck, j.UID)
	}
}

// dropClaim deletes a record addressed to this shard if it is unchanged.
func (s *Scheduler) dropClaim(ctx context.Context, c wire.Claim, why string) bool {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	err := s.deps.Claims.Drop(cctx, c.Job, c.Rev)
	cancel()
	if errors.Is(err, wire.ErrClaimInUse) {
		// No new bind starts under it; finish the drop once they end.
		s.ho.dropping[c.Job] = c
		return true
	}
	if err != nil {
		s.log.Debug("claim record not dropped", "job uid", c.Job, "why", why, "err", err)
		return false
	}
	s.log.Info("claim record dropped", "job uid", c.Job, "from", c.From, "state", c.State, "why", why)
	return true
}

// forgetJob drops the claim record and hand-off state of a job whose
// reservation this shard released (the job is gone or finished).
func (s *Scheduler) forgetJob(ctx context.Context, uid string) {
	delete(s.ho.offers, uid)
	delete(s.ho.refused, uid)
	delete(s.ho.stuck, uid)
	if !s.handoffOn() {
		return
	}
	if _, ok := s.deps.Claims.Lookup(uid); !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	err := s.deps.Claims.Delete(cctx, uid)
	cancel()
	if err != nil {
		s.log.Warn("claim record of a released job not deleted", "job uid", uid, "err", err)
	}
}

// pruneHandoff forgets hand-off state of jobs that are gone and refusals
// older than any offer looks back (holdRefusedFor).
func (s *Scheduler) pruneHandoff() {
	now := s.cfg.Now()
	for uid := range s.ho.offers {
		if !s.live(uid) {
			delete(s.ho.offers, uid)
		}
	}
	for uid, r := range s.ho.refused {
		for to, at := range r {
			if now.Sub(at) >= max(s.cfg.RefusedFor, s.cfg.holdRefusedFor()) {
				delete(r, to)
			}
		}
		if len(r) == 0 || !s.live(uid) {
			delete(s.ho.refused, uid)
		}
	}
	for uid := range s.ho.stuck {
		if !s.live(uid) {
			delete(s.ho.stuck, uid)
		}
	}
}

// placed records that j's gang was placed in role r (a claimed job is no
// longer stuck) and returns the template of its bind requests: a bind of a
// claimed job runs under the claim (Claims.Use), a bind of the queue owner
// under the queue's record (Ownership.Use), so that neither can move on
// while it is in flight.
func (s *Scheduler) placed(j *api.Job, r role) bindReq {
	req := bindReq{job: *j}
	if r == asClaimer {
		delete(s.ho.stuck, j.UID)
		req.claim = j.UID
	} else {
		req.queueKey = wire.QueueKey(j.Queue)
	}
	return req
}

// enterBind starts the fencing of one bind beyond its partition (see
// placed). leave, never nil, ends it and the bind's count in binding,
// whether or not err is nil.
func (s *Scheduler) enterBind(r bindReq) (leave func(), err error) {
	ended := func() {
		s.mu.Lock()
		s.rec(r.job.UID).binding--
		s.tidy(r.job.UID)
		s.mu.Unlock()
	}
	switch {
	case r.claim != "":
		if !s.deps.Claims.Use(r.claim) {
			return ended, fmt.Errorf("job %s is no longer claimed by this shard", r.job.Key())
		}
		return func() { s.deps.Claims.Done(r.claim); ended() }, nil
	case r.queueKey != "":
		if !s.deps.Ownership.Use(r.queueKey) {
			return ended, fmt.Errorf("queue %s is no longer held by this shard", r.job.Queue)
		}
		return func() { s.deps.Ownership.Done(r.queueKey); ended() }, nil
	}
	return ended, nil
}

// jobBinds is the number of binds of a job queued or in flight.
func (s *Scheduler) jobBinds(uid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(uid).binding
}

// forgetReleased drops the claim records and hand-off state of the jobs
// among gone whose reservation was released.
func (s *Scheduler) forgetReleased(ctx context.Context, gone []string) {
	for _, uid := range gone {
		if !s.isAdmitted(uid) {
			s.forgetJob(ctx, uid)
		}
	}
}

func (c *Config) handoffDefaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.OfferTimeout, 5 * time.Second}, {&c.ClaimGiveUp, 3 * time.Second}, {&c.RefusedFor, 10 * time.Second}, {&c.CapacityInterval, 500 * time.Millisecond}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// gangNeeds returns the sum of the tasks' requests and the largest request
// per dimension (without the "pods" count); ok is false if the sum
// overflows (such a gang fits nowhere).
func gangNeeds(gang []*api.Task) (sum, largest api.Resource, ok bool) {
	for _, t := range gang {
		req := t.Request.With(api.Pods, 0)
		next, err := sum.Add(req)
		if err != nil {
			return api.Resource{}, api.Resource{}, false
		}
		sum, largest = next, largest.Max(req)
	}
	return sum, largest, true
}
