package scheduler

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/placement"
	"github.com/shardsched/shardsched/wire"
)

// Binder binds one pod to a node. Called concurrently by the bind workers;
// it may block for the duration of one API call. An error wrapping
// wire.ErrBindUnknown says the call may have bound the pod (or may yet):
// the scheduler keeps the pod's room and asks again. Binding a pod already
// bound to the same node must succeed.
type Binder interface {
	Bind(ctx context.Context, t *api.Task, node string) error
}

// Quota is the coordinator as seen by a shard (*coordinator.Client).
// Called concurrently (a cycle's reservations, confirms and releases run in
// parallel); calls block until answered.
type Quota interface {
	// ReserveWith asks for a job's reservation with its terms; with
	// terms.Reclaim the answer may be a nominated reservation (its
	// victims named) instead of a refusal.
	ReserveWith(ctx context.Context, job wire.JobRef, queue string, amount api.Resource, terms *wire.Terms) (wire.Result, error)
	Confirm(ctx context.Context, uid string) (wire.Result, error)
	Release(ctx context.Context, uid string) (wire.Result, error)
	// Resize sets the reservation's amount to each target in turn while
	// it fits at every level (coordinator.Ledger.Resize), after raising it
	// to bound, when not nil, whatever the capability (what the job's
	// bound pods ask: coordinator.ResizeRequest.Bound).
	Resize(ctx context.Context, uid string, bound *api.Resource, targets []api.Resource) (wire.Result, error)
	// List returns the reservations in these leaf queues (every queue's
	// when none is named), for reconciliation with the jobs that exist.
	List(ctx context.Context, queues ...string) (wire.Result, error)
	// Evictions returns the reservations marked for eviction.
	Evictions(ctx context.Context) (wire.Result, error)
}

// Ownership says which keys this shard may use (*shard.Shard). Safe for
// concurrent use; Use/Done bracket one bind.
type Ownership interface {
	Holds(key string) bool
	Use(key string) bool
	// UseUntil is Use that also says by when the use must end: the shard
	// may lose the key's record soon after (its lease), so a bind under
	// the key gets no later deadline.
	UseUntil(key string) (deadline time.Time, ok bool)
	Done(key string)
}

// Recorder reports scheduling outcomes as Kubernetes events. Called
// concurrently; must not block.
type Recorder interface {
	Scheduled(t *api.Task, node string)
	FailedScheduling(t *api.Task, message string)
	Unschedulable(j *api.Job, message string)
}

// Status receives the latest Queue and PodGroup status (*status.Batcher).
// Called concurrently (from the loop and the parallel admission calls),
// sometimes with the scheduler's own lock held (ForgetPodGroup from prune):
// it must not block and must not call back into the scheduler.
type Status interface {
	SetQueue(queue string, st api.QueueStatus)
	SetPodGroup(namespace, name, uid string, st api.JobStatus)
	// ForgetPodGroup drops what is remembered of a PodGroup that is gone.
	ForgetPodGroup(uid string) <-chan struct{}
}

// Groups creates and deletes implicit PodGroups (for pods that name no
// group). Called from the scheduling loop; calls block for one API call.
type Groups interface {
	CreatePodGroup(ctx context.Context, namespace, name, queue string, minMember int32) error
	DeletePodGroup(ctx context.Context, namespace, name, uid, resourceVersion string) error
}

// Deps are the ports the scheduler runs on. Groups may be nil (implicit
// PodGroups are then not managed). Evictor may be nil: quota is then never
// taken back (evict.go). Peers and Claims may be nil: without
// Peers no capacity is gossiped, without either no job is handed to
// another shard (a job that does not fit waits).
type Deps struct {
	Peers     Peers
	Claims    Claims
	Groups    Groups
	Evictor   Evictor
	Cache     *cache.Cache
	Ownership Ownership
	Quota     Quota
	Binder    Binder
	Recorder  Recorder
	Status    Status
	// Observer receives latencies and counts (nil: none).
	Observer Observer
}

// Scheduler is one shard's scheduling loop and bind pool.
//
// Who calls what:
//   - Cycle runs on one goroutine at a time, the loop: Run's ticker, or a
//     driver that calls it itself (the simulated bench, after
//     StartBinders). Every field marked "loop only" belongs to it. A cycle
//     blocks on the coordinator's and the claim store's calls (each bounded
//     by CallTimeout, in parallel up to AdmitParallelism) and on handing
//     binds to the bind pool; it never blocks on a bind itself.
//   - The bind workers (BindWorkers of them, started by Run or
//     StartBinders) call the Binder; they share with the loop only what mu
//     guards and the cache (which has its own lock).
//   - SetTree, Tree, QueueStatuses, Stats and BindsInFlight may be called
//     from any goroutine at any time and never block on I/O (SetTree is
//     the event source's queue callback).
//
// Lock order: mu, then the cache's lock (Cache.Assume/Forget are called
// with mu released). The scheduler never writes the API server itself: it
// goes through its ports (Binder, Evictor, Groups, Recorder, Status), so
// what it does is the same against the real API server and the simulator.
type Scheduler struct {
	cfg   Config
	deps  Deps
	place placement.Config
	log   *slog.Logger
	rng   *rand.Rand // loop only
	// planner keeps placement's per-node buffers from one job's placement
	// to the next (loop only).
	planner placement.Planner
	snap    *cache.Snapshot

	binds  chan bindReq
	tracer trace.Tracer

	groupOps map[string]time.Time // loop only: implicit PodGroup creates/deletes in flight (by key or UID)
	// summaries memoizes Cache.JobSummary for one cycle (loop only), by
	// the snapshot's job: a pointer hashes faster than two strings, and a
	// cycle asks for every job's summary several times.
	summaries map[*api.Job]cache.JobSummary
	// unsized are the jobs cannotSize last found unsized, with the cycle
	// (loop only): the snapshot's job pointer stands for the PodGroup as
	// it was, and prune drops the entries older than the cycle before.
	unsized map[*api.Job]int64
	// queueHeld memoizes, for one cycle, whether this shard holds a queue
	// (holdsQueue; loop only).
	queueHeld map[string]bool
	// lastStatus is when queue status was last computed (loop only).
	lastStatus time.Time

	stats struct {
		cycles, binds, bindFailures, admitted, quotaWaits, assumeRefused, holds atomic.Int64
		offers, offerTimeouts, claims, refusals, holdOffers                     atomic.Int64
		orphans, bindsInDoubt, lostReservations                                 atomic.Int64
	}
	obs Observer
	// marked: the reservations marked for eviction, as last read (loop
	// only); evicted: task UID → when this shard evicted it (loop only).
	marked        map[string]wire.Reservation
	evicted       map[string]time.Time
	roomTried     map[string]roomTry      // loop only: node-level preemption (nodepreempt.go)
	quietSince    map[string]time.Time    // loop only: victim UID → since when nobody else places it (evict.go)
	runnable      map[string]runnableMemo // loop only: couldRun's answer per job (evict.go)
	lastEvictPoll time.Time               // loop only
	ho            handoff                 // loop only
	held          holds                   // loop only: nodes held for starving gangs (hold.go)
	// heldBefore is when each gang was last given a hold (loop only).
	heldBefore map[string]time.Time

	mu        sync.Mutex                 // guards the fields below
	tree      *api.Tree                  // queue hierarchy (SetTree); nil until known
	queueStat map[string]api.QueueStatus // owned queue → last status written
	jobs      map[string]*jobRec         // job UID → what this shard remembers of it (jobs.go)
	backoff   map[string]time.Time       // task UID → not before
	inflight  map[string]string          // task UID → node, bind in progress
	lastEvent map[string]time.Time       // task or job UID → last FailedScheduling/Unschedulable
	// queueShort: queue → when a job of it was last refused for quota.
	queueShort map[string]time.Time
	// orphans: reservation UID → when reconciliation first found no job
	// for it (loop only).
	orphans   map[string]time.Time
	lastRecon time.Time // loop only
	// lastOwnedCheck: when reconcile last listed the queues held (loop only).
	lastOwnedCheck time.Time
	reconQueues    map[string]bool // loop only: owned queues at the last reconciliation
}

type quotaBackoff struct {
	until time.Time
	delay time.Duration
}

// next backs off once more from now: 50 ms doubling to 2 s.
func (b *quotaBackoff) next(now time.Time) {
	b.delay = min(max(2*b.delay, 50*time.Millisecond), 2*time.Second)
	b.until = now.Add(b.delay)
}

type admission struct {
	job   api.Job
	queue string
	at    time.Time // when this shard admitted it (or adopted its reservation)
}

type bindReq struct {
	task api.Task
	node string
	job  api.Job
	// claim is the job UID when the job is placed under its claim record;
	// queueKey the queue's key when it is placed by the queue owner.
	claim, queueKey string
	// queued is when the request was handed to the bind pool.
	queued time.Time
}

// New checks cfg and deps.
func New(cfg Config, deps Deps) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Cache == nil || deps.Ownership == nil || deps.Quota == nil || deps.Binder == nil || deps.Recorder == nil || deps.Status == nil {
		return nil, errors.New("scheduler: every dependency is required")
	}
	pc, _ := placement.DefaultConfig(cfg.Strategy)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StarveAfter <= 0 {
		cfg.StarveAfter = 10 * time.Second
	}
	if cfg.MaxHold <= 0 {
		cfg.MaxHold = 5 * time.Minute
	}
	if cfg.HoldShare == 0 {
		cfg.HoldShare = 0.1
	}
	if cfg.InqueueTimeout <= 0 {
		cfg.InqueueTimeout = 3 * time.Minute
	}
	if cfg.AdmitParallelism <= 0 {
		cfg.AdmitParallelism = defaultCallParallelism
	}
	cfg.handoffDefaults()
	var obs Observer = noObserver{}
	if deps.Observer != nil {
		obs = deps.Observer
	}
	return &Scheduler{
		marked: map[string]wire.Reservation{}, evicted: map[string]time.Time{}, roomTried: map[string]roomTry{}, quietSince: map[string]time.Time{}, runnable: map[string]runnableMemo{},
		obs:    obs,
		tracer: cfg.Tracer.Tracer("shardsched/scheduler"),
		cfg:    cfg, deps: deps, place: pc, log: cfg.Logger,
		rng:      rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Now().UnixNano()))),
		snap:     &cache.Snapshot{},
		binds:    make(chan bindReq, 4096),
		groupOps: map[string]time.Time{}, summaries: map[*api.Job]cache.JobSummary{}, unsized: map[*api.Job]int64{}, queueHeld: map[string]bool{}, heldBefore: map[string]time.Time{},
		jobs: map[string]*jobRec{}, backoff: map[string]time.Time{}, inflight: map[string]string{},
		lastEvent: map[string]time.Time{}, queueStat: map[string]api.QueueStatus{}, queueShort: map[string]time.Time{},
		ho: newHandoff(), held: newHolds(), orphans: map[string]time.Time{}, reconQueues: map[string]bool{},
	}, nil
}

// Run runs the bind workers and the scheduling loop until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	wait := s.StartBinders(ctx)
	tick := time.NewTicker(s.cfg.CycleInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wait()
			return nil
		case <-tick.C:
			s.Cycle(ctx)
		}
	}
}

// StartBinders starts only the bind workers, for a caller that drives
// Cycle itself (the simulated bench); they stop when ctx ends, and wait
// returns once they have.
func (s *Scheduler) StartBinders(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for i := 0; i < s.cfg.BindWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.bindWorker(ctx)
		}()
	}
	return wg.Wait
}

// BindsInFlight is the number of binds queued or in progress.
func (s *Scheduler) BindsInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// nodeSample is how many feasible nodes a task's placement considers out of
// n, as kube-scheduler's adaptive percentageOfNodesToScore does: 50 % less
// 1 % per 125 nodes, at least 5 % and at least 100 nodes. A cycle's first
// placement shuffles the nodes (the scheduler's rng), so successive cycles
// look at different nodes; within a gang, and from one job to the next of
// a cycle when they ask the same, see placement.Config.Sample and
// placement.Planner.BeginRound.
func nodeSample(n int) int {
	pct := max(50-n/125, 5)
	return min(n, max(100, n*pct/100))
}

// since is the time elapsed on the scheduler's clock.
func (s *Scheduler) since(t time.Time) time.Duration { return s.cfg.Now().Sub(t) }

// Stats are cumulative counters. Offers: jobs this shard offered to
// another; OfferTimeouts: its offers withdrawn unclaimed; Claims: jobs it
// claimed from another shard's offer; Refusals: offers it refused and
// claims it gave up because the job did not fit.
type Stats struct {
	Cycles, Binds, BindFailures, Admitted, QuotaWaits int64
	Offers, OfferTimeouts, Claims, Refusals           int64
	// AssumeRefused counts gang plans dropped because the cache refused
	// one of their tasks (the node changed since the cycle's snapshot).
	AssumeRefused int64
	// Holds counts node holds started for starving gangs. HoldOffers
	// counts the offers (also in Offers) of starving gangs that fit on no
	// shard's free room, to a shard whose nodes could hold them when empty,
	// there to be held for.
	Holds, HoldOffers int64
	// Orphans counts reservations released by reconciliation because no
	// job they could cover exists.
	Orphans int64
	// BindsInDoubt counts bind calls whose outcome was unknown (retried).
	BindsInDoubt int64
	// LostReservations counts admissions found without their reservation
	// (gone with an expired session lease) and asked for again.
	LostReservations int64
}

// Stats returns the counters since start.
func (s *Scheduler) Stats() Stats {
	return Stats{Cycles: s.stats.cycles.Load(), Binds: s.stats.binds.Load(), BindFailures: s.stats.bindFailures.Load(),
		Admitted: s.stats.admitted.Load(), QuotaWaits: s.stats.quotaWaits.Load(),
		Offers: s.stats.offers.Load(), OfferTimeouts: s.stats.offerTimeouts.Load(), Claims: s.stats.claims.Load(), Refusals: s.stats.refusals.Load(),
		AssumeRefused: s.stats.assumeRefused.Load(), Holds: s.stats.holds.Load(), HoldOffers: s.stats.holdOffers.Load(), Orphans: s.stats.orphans.Load(),
		BindsInDoubt: s.stats.bindsInDoubt.Load(), LostReservations: s.stats.lostReservations.Load()}
}

// Cycle runs one scheduling cycle: snapshot, admission, placement, status.
func (s *Scheduler) Cycle(ctx context.Context) {
	s.stats.cycles.Add(1)
	s.deps.Cache.UpdateSnapshot(s.snap)
	clear(s.summaries)
	clear(s.queueHeld)
	jobs := s.snap.Jobs()
	if len(jobs) > 0 {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "scheduler.cycle", trace.WithAttributes(
			attribute.Int("jobs", len(jobs)), attribute.Int("nodes", s.snap.NumNodes())))
		defer span.End()
	}
	s.log.Debug("cycle", "jobs", len(jobs), "nodes", s.snap.NumNodes(), "pending", s.snap.NumPending())
	// Every shard's snapshot holds every job of the cluster, but a shard
	// works on few of them: the jobs of the queues it holds, and those it
	// admitted, offered or was offered. The passes below start from those
	// (byQueue, candidates) and look jobs up by UID or name, so a cycle's
	// work does not grow with the jobs of other shards' queues: the
	// snapshot keeps the jobs by queue, and only writeStatus's roll-up to
	// held ancestors reads every job. Each held queue's list is copied:
	// the passes may reorder what they are given.
	byQueue := map[string][]*api.Job{}
	for q, js := range s.snap.Queues {
		if s.holdsQueue(q) {
			byQueue[q] = slices.Clone(js)
		}
	}
	s.releaseGone(ctx)
	s.reconcile(ctx, byQueue)
	s.takeBack(ctx)
	if s.stats.cycles.Load()%pruneEvery == 0 {
		s.prune()
		s.pruneHandoff()
	}
	s.implicitGroups(ctx, byQueue)
	s.admit(ctx, byQueue)
	claims := s.takeOffers(ctx)
	s.placeAdmitted(ctx, s.candidates(claims))
	s.writeStatus(jobs)
	s.publishCapacity()
}

// holdsQueue reports whether this shard holds the queue's ownership record,
// asked once per queue and cycle (a cycle's passes see one answer). Loop only.
func (s *Scheduler) holdsQueue(q string) bool {
	h, ok := s.queueHeld[q]
	if !ok {
		h = s.deps.Ownership.Holds(wire.QueueKey(q))
		s.queueHeld[q] = h
	}
	return h
}

// live reports whether the cycle's snapshot has a job of this UID. Loop only.
func (s *Scheduler) live(uid string) bool {
	_, ok := s.snap.JobByUID(uid)
	return ok
}

// candidates returns the snapshot's jobs that this shard may have a role in
// this cycle (roleOf is notMine for every other job, with no side effect):
// those it admitted, those it offered to another shard, and those with a
// claim record (offered to it, claimed by it, or by another: claims, as
// takeOffers listed them; a record written since names a job this shard
// offered or admitted). They come in the snapshot's order (namespace,
// name, UID). Loop only.
func (s *Scheduler) candidates(claims []wire.Claim) []*api.Job {
	s.mu.Lock()
	uids := make(map[string]struct{}, len(s.jobs))
	for uid, r := range s.jobs {
		if r.admission != nil {
			uids[uid] = struct{}{}
		}
	}
	s.mu.Unlock()
	for uid := range s.ho.offers {
		uids[uid] = struct{}{}
	}
	for _, c := range claims {
		uids[c.Job] = struct{}{}
	}
	out := make([]*api.Job, 0, len(uids))
	for uid := range uids {
		if j, ok := s.snap.JobByUID(uid); ok {
			out = append(out, j)
		}
	}
	return s.snap.InOrder(out)
}

// summary is the job's task counts, read from the cache once per cycle.
func (s *Scheduler) summary(j *api.Job) cache.JobSummary {
	if sum, ok := s.summaries[j]; ok {
		return sum
	}
	sum := s.deps.Cache.JobSummary(j.Namespace, j.Name)
	s.summaries[j] = sum
	return sum
}

// jobKey is a job's namespace and name (a map key without a string built).
type jobKey struct{ namespace, name string }

// byPriority sorts js by priority (highest first), then age (oldest
// first), stably; each job's priority is looked up once. Loop only.
func (s *Scheduler) byPriority(js []*api.Job) {
	prio := make(map[*api.Job]int32, len(js))
	for _, j := range js {
		prio[j] = s.priority(j)
	}
	slices.SortStableFunc(js, func(a, b *api.Job) int {
		return cmp.Or(cmp.Compare(prio[b], prio[a]), a.Created.Compare(b.Created))
	})
}

// priority is the job's priority: its PodGroup's PriorityClass's value when
// it names one, else its highest live member's (cache.JobSummary.Priority).
// Loop goroutine only.
func (s *Scheduler) priority(j *api.Job) int32 {
	if j.PriorityClass != "" {
		return j.Priority
	}
	return s.summary(j).Priority
}

// jobTasks returns the job's pending tasks for this scheduler (from the
// cycle's snapshot), sorted by priority then creation, and the counts of
// bound (including assumed) and finished tasks (from the cache, which
// covers jobs without pending tasks too).
func (s *Scheduler) jobTasks(j *api.Job) (pending []*api.Task, bound, done int) {
	for _, t := range s.snap.PendingOfJob(j.Namespace, j.Name) {
		if s.pendingHere(t) {
			pending = append(pending, t)
		}
	}
	sum := s.summary(j)
	api.SortPending(pending)
	return pending, sum.Bound, sum.Done
}

// pendingHere reports whether t waits for this scheduler to place it.
func (s *Scheduler) pendingHere(t *api.Task) bool {
	return (t.Phase == api.TaskPending || t.Phase == "") && t.NodeName == "" && t.SchedulerName == s.cfg.SchedulerName
}

// hasPendingHere reports whether j has a task waiting for this scheduler.
func (s *Scheduler) hasPendingHere(j *api.Job) bool {
	for _, t := range s.snap.PendingOfJob(j.Namespace, j.Name) {
		if s.pendingHere(t) {
			return true
		}
	}
	return false
}

// jobCounts is jobTasks' counts without the pending list: for the callers
// that only count, every cycle, over every admitted job.
func (s *Scheduler) jobCounts(j *api.Job) (pending, bound, done int) {
	for _, t := range s.snap.PendingOfJob(j.Namespace, j.Name) {
		if s.pendingHere(t) {
			pending++
		}
	}
	sum := s.summary(j)
	return pending, sum.Bound, sum.Done
}

// pruneEvery is how many cycles pass between prunes of per-task state.
const pruneEvery = 50

// setPodGroup hands a PodGroup's status to Status and remembers that it
// did, so prune can make Status forget it once the PodGroup is gone.
func (s *Scheduler) setPodGroup(namespace, name, uid string, st api.JobStatus) {
	s.mu.Lock()
	s.rec(uid).statusSent = true
	s.mu.Unlock()
	s.deps.Status.SetPodGroup(namespace, name, uid, st)
}

// rateLimited reports whether an event for uid may be sent now (one per 5 s).
func (s *Scheduler) rateLimited(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.lastEvent[uid]; ok && s.since(t) < 5*time.Second {
		return false
	}
	s.lastEvent[uid] = s.cfg.Now()
	return true
}
