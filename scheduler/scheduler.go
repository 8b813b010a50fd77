package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/placement"
	"github.com/shardsched/shardsched/shard"
)

// Binder binds one pod to a node. Called concurrently by the bind workers;
// it may block for the duration of one API call.
type Binder interface {
	Bind(ctx context.Context, t *api.Task, node string) error
}

// Quota is the coordinator as seen by a shard (*coordinator.Client).
// Called concurrently (a cycle's reservations, confirms and releases run in
// parallel); calls block until answered.
type Quota interface {
	Reserve(ctx context.Context, job coordinator.JobRef, queue string, amount api.Resource) (coordinator.Result, error)
	Confirm(ctx context.Context, uid string) (coordinator.Result, error)
	Release(ctx context.Context, uid string) (coordinator.Result, error)
	// Resize sets the reservation's amount to each target in turn while
	// it fits at every level (coordinator.Ledger.Resize).
	Resize(ctx context.Context, uid string, targets []api.Resource) (coordinator.Result, error)
	// List returns every reservation, for reconciliation with the jobs
	// that exist.
	List(ctx context.Context) (coordinator.Result, error)
}

// Ownership says which keys this shard may use (*shard.Shard). Safe for
// concurrent use; Use/Done bracket one bind.
type Ownership interface {
	Holds(key string) bool
	Use(key string) bool
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

// Config tunes the scheduler. Use DefaultConfig.
type Config struct {
	SchedulerName string
	Partitions    int
	Strategy      string // "binpack" or "spread"
	CycleInterval time.Duration
	BindWorkers   int
	BindBackoff   time.Duration
	CallTimeout   time.Duration
	Seed          uint64
	Logger        *slog.Logger
	// Tracer provides the cycle, admission, placement and bind spans; nil
	// means no tracing.
	Tracer trace.TracerProvider
	// Now is the clock for backoffs, event rate limits and latencies; nil
	// means time.Now. The simulated bench runs the scheduler on a virtual
	// clock through it.
	Now func() time.Time
	// AdmitParallelism bounds the coordinator calls in flight at once:
	// reservations of different queues (a queue's own jobs are reserved
	// one after another, in priority order), confirms and releases. 0
	// means 32.
	AdmitParallelism int
	// Hand-off of jobs that do not fit on this shard (see handoff.go);
	// zero values mean the defaults. OfferTimeout: an offer nobody claimed
	// is withdrawn after it (5 s). ClaimGiveUp: a claimed job that does not
	// fit for this long is given back (3 s). RefusedFor: a shard that
	// refused a job is not offered it again for this long (10 s).
	// CapacityInterval: the capacity summary is gossiped at most this often
	// (500 ms).
	OfferTimeout, ClaimGiveUp, RefusedFor, CapacityInterval time.Duration
	// Starvation guard (see hold.go): a gang that does not fit after
	// waiting StarveAfter (default 10 s) gets nodes held for it, for at
	// most MaxHold (default 5 min).
	StarveAfter, MaxHold time.Duration
	// InqueueTimeout: a job admitted before its pods exist (sized by its
	// minResources) whose gang's pods have not all come after this long
	// gets its reservation back and returns to Pending with a condition
	// saying why; it is admitted again after a quarter of it. 0 means 3
	// minutes.
	InqueueTimeout time.Duration
}

// DefaultConfig returns bin-packing, 20 ms cycles and 32 bind workers.
func DefaultConfig() Config {
	return Config{
		SchedulerName: "volcano",
		Partitions:    shard.DefaultPartitions,
		Strategy:      "binpack",
		CycleInterval: 20 * time.Millisecond,
		BindWorkers:   32,
		BindBackoff:   time.Second,
		CallTimeout:   10 * time.Second,
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.SchedulerName == "":
		return errors.New("scheduler name is empty")
	case c.Partitions < 1:
		return fmt.Errorf("partitions %d: must be positive", c.Partitions)
	case c.CycleInterval <= 0 || c.BindBackoff <= 0 || c.CallTimeout <= 0:
		return errors.New("cycle interval, bind backoff and call timeout must be positive")
	case c.BindWorkers < 1 || c.BindWorkers > 1024:
		return fmt.Errorf("bind workers %d: must be between 1 and 1024", c.BindWorkers)
	}
	_, err := placement.DefaultConfig(c.Strategy)
	return err
}

// Groups creates and deletes implicit PodGroups (for pods that name no
// group). Called from the scheduling loop; calls block for one API call.
type Groups interface {
	CreatePodGroup(ctx context.Context, namespace, name, queue string, minMember int32) error
	DeletePodGroup(ctx context.Context, namespace, name, uid, resourceVersion string) error
}

// Deps are the ports the scheduler runs on. Groups may be nil (implicit
// PodGroups are then not managed). Peers and Claims may be nil: without
// Peers no capacity is gossiped, without either no job is handed to
// another shard (a job that does not fit waits).
type Deps struct {
	Peers     Peers
	Claims    Claims
	Groups    Groups
	Cache     *cache.Cache
	Ownership Ownership
	Quota     Quota
	Binder    Binder
	Recorder  Recorder
	Status    Status
}

// Scheduler is one shard's scheduling loop and bind pool.
type Scheduler struct {
	cfg   Config
	deps  Deps
	place placement.Config
	log   *slog.Logger
	rng   *rand.Rand // loop only
	snap  *cache.Snapshot

	binds  chan bindReq
	tracer trace.Tracer

	groupOps map[string]time.Time // loop only: implicit PodGroup creates/deletes in flight (by key or UID)
	// summaries memoizes Cache.JobSummary for one cycle (loop only).
	summaries map[string]cache.JobSummary
	// lastStatus is when queue status was last computed (loop only).
	lastStatus time.Time

	stats struct {
		cycles, binds, bindFailures, admitted, quotaWaits, assumeRefused, holds atomic.Int64
		offers, offerTimeouts, claims, refusals                                 atomic.Int64
		orphans                                                                 atomic.Int64
	}
	hist histograms
	ho   handoff // loop only
	held *hold   // loop only: nodes held for a starving gang
	// heldBefore is when each gang was last given a hold (loop only).
	heldBefore map[string]time.Time

	mu        sync.Mutex                 // guards the fields below
	tree      *api.Tree                  // queue hierarchy (SetTree); nil until known
	queueStat map[string]api.QueueStatus // owned queue → last status written
	jobs      map[string]*jobRec         // job UID → what this shard remembers of it (jobs.go)
	backoff   map[string]time.Time       // task UID → not before
	inflight  map[string]string          // task UID → node, bind in progress
	lastEvent map[string]time.Time       // task or job UID → last FailedScheduling/Unschedulable
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
	if cfg.InqueueTimeout <= 0 {
		cfg.InqueueTimeout = 3 * time.Minute
	}
	if cfg.AdmitParallelism <= 0 {
		cfg.AdmitParallelism = 32
	}
	cfg.handoffDefaults()
	return &Scheduler{
		hist:   newHistograms(),
		tracer: cfg.Tracer.Tracer("shardsched/scheduler"),
		cfg:    cfg, deps: deps, place: pc, log: cfg.Logger,
		rng:      rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Now().UnixNano()))),
		snap:     &cache.Snapshot{},
		binds:    make(chan bindReq, 4096),
		groupOps: map[string]time.Time{}, summaries: map[string]cache.JobSummary{}, heldBefore: map[string]time.Time{},
		jobs: map[string]*jobRec{}, backoff: map[string]time.Time{}, inflight: map[string]string{},
		lastEvent: map[string]time.Time{}, queueStat: map[string]api.QueueStatus{},
		ho: newHandoff(), orphans: map[string]time.Time{}, reconQueues: map[string]bool{},
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

type histograms struct {
	submitToBind, admissionWait, reserve, place prometheus.Histogram
}

func newHistograms() histograms {
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "shardsched", Name: name, Help: help, Buckets: buckets})
	}
	slow := prometheus.ExponentialBuckets(0.005, 2, 16)  // 5 ms .. ~164 s
	fast := prometheus.ExponentialBuckets(0.0001, 2, 16) // 0.1 ms .. ~3.3 s
	return histograms{
		submitToBind:  h("submit_to_bind_seconds", "Pod creation to successful bind.", slow),
		admissionWait: h("admission_wait_seconds", "PodGroup creation to admission by the coordinator.", slow),
		reserve:       h("reservation_seconds", "Coordinator reservation latency seen by the shard.", fast),
		place:         h("placement_seconds", "Gang placement (filter and score) time per job and cycle.", fast),
	}
}

// nodeSample is how many feasible nodes a task's placement considers out of
// n, as kube-scheduler's adaptive percentageOfNodesToScore does: 50 % less
// 1 % per 125 nodes, at least 5 % and at least 100 nodes. Each task's scan
// starts where the previous one stopped, so successive tasks look at
// different nodes.
func nodeSample(n int) int {
	pct := max(50-n/125, 5)
	return min(n, max(100, n*pct/100))
}

// since is the time elapsed on the scheduler's clock.
func (s *Scheduler) since(t time.Time) time.Duration { return s.cfg.Now().Sub(t) }

// Collectors returns the scheduler's latency histograms, for a registry.
func (s *Scheduler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.hist.submitToBind, s.hist.admissionWait, s.hist.reserve, s.hist.place}
}

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
	// Holds counts node holds started for starving gangs.
	Holds int64
	// Orphans counts reservations released by reconciliation because no
	// job they could cover exists.
	Orphans int64
}

// Stats returns the counters since start.
func (s *Scheduler) Stats() Stats {
	return Stats{Cycles: s.stats.cycles.Load(), Binds: s.stats.binds.Load(), BindFailures: s.stats.bindFailures.Load(),
		Admitted: s.stats.admitted.Load(), QuotaWaits: s.stats.quotaWaits.Load(),
		Offers: s.stats.offers.Load(), OfferTimeouts: s.stats.offerTimeouts.Load(), Claims: s.stats.claims.Load(), Refusals: s.stats.refusals.Load(),
		AssumeRefused: s.stats.assumeRefused.Load(), Holds: s.stats.holds.Load(), Orphans: s.stats.orphans.Load()}
}

// Cycle runs one scheduling cycle: snapshot, admission, placement, status.
func (s *Scheduler) Cycle(ctx context.Context) {
	s.stats.cycles.Add(1)
	s.deps.Cache.UpdateSnapshot(s.snap)
	clear(s.summaries)
	jobs := s.snap.Jobs()
	if len(jobs) > 0 {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "scheduler.cycle", trace.WithAttributes(
			attribute.Int("jobs", len(jobs)), attribute.Int("nodes", s.snap.NumNodes())))
		defer span.End()
	}
	s.log.Debug("cycle", "jobs", len(jobs), "nodes", len(s.snap.Nodes()), "pending", len(s.snap.PendingTasks()))
	byQueue := map[string][]*api.Job{}
	live := map[string]bool{}
	for _, j := range jobs {
		live[j.UID] = true
		if !s.deps.Ownership.Holds(shard.QueueKey(j.Queue)) {
			continue
		}
		byQueue[j.Queue] = append(byQueue[j.Queue], j)
	}
	s.releaseGone(ctx, live)
	s.reconcile(ctx, live, byQueue)
	if s.stats.cycles.Load()%pruneEvery == 0 {
		s.prune(live)
		s.pruneHandoff(live)
	}
	s.implicitGroups(ctx, jobs)
	s.admit(ctx, byQueue)
	s.takeOffers(ctx, jobs)
	s.placeAdmitted(ctx, jobs, live)
	s.writeStatus(jobs)
	s.publishCapacity()
}

// summary is the job's task counts, read from the cache once per cycle.
func (s *Scheduler) summary(j *api.Job) cache.JobSummary {
	key := j.Namespace + "/" + j.Name
	if sum, ok := s.summaries[key]; ok {
		return sum
	}
	sum := s.deps.Cache.JobSummary(j.Namespace, j.Name)
	s.summaries[key] = sum
	return sum
}

// jobTasks returns the job's pending tasks for this scheduler (from the
// cycle's snapshot), sorted by priority then creation, and the counts of
// bound (including assumed) and finished tasks (from the cache, which
// covers jobs without pending tasks too).
func (s *Scheduler) jobTasks(j *api.Job) (pending []*api.Task, bound, done int) {
	for _, t := range s.snap.TasksOfJob(j.Namespace, j.Name) {
		if (t.Phase == api.TaskPending || t.Phase == "") && t.NodeName == "" && t.SchedulerName == s.cfg.SchedulerName {
			pending = append(pending, t)
		}
	}
	sum := s.summary(j)
	sort.SliceStable(pending, func(a, b int) bool {
		if pending[a].Priority != pending[b].Priority {
			return pending[a].Priority > pending[b].Priority
		}
		if !pending[a].Created.Equal(pending[b].Created) {
			return pending[a].Created.Before(pending[b].Created)
		}
		return pending[a].Name < pending[b].Name
	})
	return pending, sum.Bound, sum.Done
}

// admit asks the coordinator for every job of an owned queue that has no
// reservation yet. Queues go in fair-share order, jobs by priority then age;
// a queue's jobs are reserved one after another (so priority holds within
// the queue) while up to AdmitParallelism queues are in flight at once (the
// coordinator client batches their calls).
func (s *Scheduler) admit(ctx context.Context, byQueue map[string][]*api.Job) {
	queues := make([]string, 0, len(byQueue))
	for q := range byQueue {
		queues = append(queues, q)
	}
	shares := s.queueShares(byQueue)
	sort.Slice(queues, func(a, b int) bool {
		if shares[queues[a]] != shares[queues[b]] {
			return shares[queues[a]] < shares[queues[b]]
		}
		return queues[a] < queues[b]
	})
	// Work out, on the loop goroutine, what each job would reserve.
	var work [][]admitReq
	for _, q := range queues {
		js := byQueue[q]
		sort.SliceStable(js, func(a, b int) bool {
			if js[a].Priority != js[b].Priority {
				return js[a].Priority > js[b].Priority
			}
			return js[a].Created.Before(js[b].Created)
		})
		var reqs []admitReq
		now := s.cfg.Now()
		traverse := s.dequeueTraverse(q)
		path := s.queuePath(q)
		if closed := s.closedLevel(path); closed != "" {
			s.refuseClosed(js, closed)
			continue
		}
		for _, j := range js {
			s.mu.Lock()
			rec := s.peek(j.UID)
			s.mu.Unlock()
			done, wait := rec.admission != nil, rec.admitWait
			waiting := wait != (quotaBackoff{})
			if done || now.Before(rec.lateUntil) {
				continue // admitted, or its pods did not come: it holds up nobody
			}
			pending, bound, _ := s.jobTasks(j)
			if j.Phase == api.JobCompleted && len(pending) == 0 {
				continue // a Completed group with new pending pods is scheduled again
			}
			pending, short := gangOrder(j, pending, s.boundBySpec(j))
			amount, ok := admitAmount(j, pending, s.summary(j))
			if !ok || (short != "" && (j.MinResources == nil || j.MinResources.IsZero())) {
				continue // not all gang members exist yet
			}
			if s.refuseNeverFits(j, path, amount) {
				continue // can never fit: skipped, so it blocks nobody
			}
			if waiting && now.Before(wait.until) {
				if traverse {
					continue // dequeueStrategy traverse: later jobs may pass it
				}
				// Refused a moment ago: the jobs behind it in this queue
				// (same or lower priority, younger) wait too, so a big
				// gang is not starved by smaller ones taking the quota
				// it waits for (strict FIFO within a queue).
				break
			}
			reqs = append(reqs, admitReq{job: j, amount: amount, bound: bound, traverse: traverse})
		}
		if len(reqs) > 0 {
			work = append(work, reqs)
		}
	}
	// Queues go in parallel (the client batches their calls), so within one
	// cycle the fair-share order between queues is approximate; it holds
	// across cycles. A queue stops at its first job that is not admitted.
	parallel(work, s.cfg.AdmitParallelism, func(reqs []admitReq) {
		for _, r := range reqs {
			if !s.reserve(ctx, r) && !r.traverse {
				return
			}
		}
	})
}

type admitReq struct {
	job    *api.Job
	amount api.Resource
	bound  int
	// traverse: the queue's dequeueStrategy lets later jobs pass this one
	// when it is refused.
	traverse bool
}

// reserve asks the coordinator for one job's reservation and records the
// answer; it reports whether the jobs behind it in its queue may be asked
// for now (it was admitted, or it can never fit). Called concurrently by
// admit's workers.
func (s *Scheduler) reserve(ctx context.Context, r admitReq) bool {
	j := r.job
	actx, span := s.tracer.Start(ctx, "scheduler.admit", trace.WithAttributes(
		attribute.String("job", j.Key()), attribute.String("queue", j.Queue)))
	cctx, cancel := context.WithTimeout(actx, s.cfg.CallTimeout)
	t0 := time.Now()
	res, err := s.deps.Quota.Reserve(cctx, coordinator.JobRef{Namespace: j.Namespace, Name: j.Name, UID: j.UID}, j.Queue, r.amount)
	s.hist.reserve.Observe(time.Since(t0).Seconds())
	cancel()
	span.SetAttributes(attribute.Bool("admitted", err == nil))
	span.End()
	var qe *coordinator.QuotaError
	switch {
	case err == nil:
		s.stats.admitted.Add(1)
		if !j.Created.IsZero() {
			s.hist.admissionWait.Observe(s.since(j.Created).Seconds())
		}
		s.log.Debug("admitted", "job", j.Key(), "queue", j.Queue, "amount", r.amount.String())
		s.mu.Lock()
		rec := s.rec(j.UID)
		rec.admission = &admission{job: *j, queue: j.Queue, at: s.cfg.Now()}
		// The reservation may predate this ask (a queue that changed
		// owner, a retry): what it holds is what the answer says.
		amount := res.Reservation.Amount
		rec.setCover(&amount)
		rec.admitWait = quotaBackoff{}
		s.mu.Unlock()
		if j.Phase == api.JobPending || j.Phase == api.JobCompleted || j.Phase == "" {
			s.setPodGroup(j.Namespace, j.Name, j.UID, api.JobStatus{Phase: api.JobInqueue, Running: int32(r.bound)})
		}
	case errors.As(err, &qe) && qe.Asked > qe.Capability:
		// Larger than a level's capability: it can never fit there, so
		// it must not hold up the jobs behind it.
		s.backOffAdmission(j.UID)
		s.neverFitsStatus(j, qe.Queue, qe.Resource, qe.Asked, qe.Capability)
		return true
	case errors.As(err, &qe):
		s.stats.quotaWaits.Add(1)
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("waiting for quota: %v", qe)
		s.waiting(j, "QueueQuotaExceeded", msg)
	case errors.Is(err, coordinator.ErrInvalid):
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("cannot be admitted: %v", err)
		s.waiting(j, "InvalidQueue", msg)
	default:
		// The coordinator is unreachable or failing over: the rest of
		// the queue would wait CallTimeout each for the same answer.
		s.backOffAdmission(j.UID)
		s.log.Warn("reserve failed", "job", j.Key(), "err", err)
	}
	return err == nil
}

// dequeueTraverse reports whether queue q's dequeueStrategy is traverse
// (a job waiting for quota lets later ones pass); fifo is the default.
func (s *Scheduler) dequeueTraverse(q string) bool {
	tree := s.Tree()
	if tree == nil {
		return false
	}
	spec, _ := tree.Get(q)
	return spec.DequeueStrategy == api.DequeueTraverse
}

// closedLevel is the first level of path (leaf first) that is Closed or
// Closing, or "".
func (s *Scheduler) closedLevel(path []string) string {
	tree := s.Tree()
	if tree == nil {
		return ""
	}
	for _, q := range path {
		if spec, ok := tree.Get(q); ok && spec.Closed {
			return q
		}
	}
	return ""
}

// refuseClosed says on each job of js not admitted yet that its queue (or
// the ancestor closed) admits nothing new; what was admitted goes on.
func (s *Scheduler) refuseClosed(js []*api.Job, closed string) {
	now := s.cfg.Now()
	for _, j := range js {
		s.mu.Lock()
		rec := s.peek(j.UID)
		s.mu.Unlock()
		if rec.admission != nil || now.Before(rec.admitWait.until) {
			continue
		}
		s.backOffAdmission(j.UID)
		msg := fmt.Sprintf("queue %q is closed (or closing): it admits no new job; jobs already admitted keep running", closed)
		s.waiting(j, "QueueClosed", msg)
	}
}

// queuePath is q and its ancestors, leaf first (nil without a tree).
func (s *Scheduler) queuePath(q string) []string {
	tree := s.Tree()
	if tree == nil {
		return nil
	}
	p, _ := tree.Path(q)
	return p
}

// refuseNeverFits reports whether amount is above the capability of a level
// of path (so the job can never be admitted) and, if so, says so on the
// PodGroup and backs it off.
func (s *Scheduler) refuseNeverFits(j *api.Job, path []string, amount api.Resource) bool {
	q, dim, asked, capv, never := neverFits(s.Tree(), path, amount)
	if !never {
		return false
	}
	s.backOffAdmission(j.UID)
	s.neverFitsStatus(j, q, dim, asked, capv)
	return true
}

// neverFitsStatus marks a job that asks more than a queue level's
// capability as Unschedulable, with an event (rate-limited).
func (s *Scheduler) neverFitsStatus(j *api.Job, queue, dim string, asked, capv int64) {
	msg := fmt.Sprintf("can never be admitted: it asks for %s of %s, above the capability %s of queue %q; jobs behind it are not held up",
		api.FormatQuantity(dim, asked), dim, api.FormatQuantity(dim, capv), queue)
	s.waiting(j, "QueueCapabilityTooSmall", msg)
}

// backOffAdmission makes a job that was not admitted (no quota, a bad
// queue, the coordinator unreachable) wait before it is asked
// for again, 50 ms doubling to 2 s, not on every cycle (50 times a second).
func (s *Scheduler) backOffAdmission(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec(uid).admitWait.next(s.cfg.Now())
}

// placeAdmitted places the pending tasks of the jobs this shard places
// (roleOf: admitted here and not claimed elsewhere, or claimed here) on
// this shard's nodes: a gang not yet running needs minMember tasks placed
// at once. A job of the queue owner that does not fit is offered to a
// shard with room. live holds the UIDs of every job in the snapshot.
func (s *Scheduler) placeAdmitted(ctx context.Context, jobs []*api.Job, live map[string]bool) {
	nodes := s.snap.Nodes()
	now := s.cfg.Now()
	pc := s.place
	if pc.Sample == 0 {
		pc.Sample = nodeSample(len(nodes))
	}
	var confirms []confirmReq
	defer func() {
		parallel(confirms, s.cfg.AdmitParallelism, func(c confirmReq) { s.confirm(ctx, c.job, c.bound) })
	}()
	// Oldest first within a priority, so the longest-waiting gang plans
	// before younger jobs take the room.
	jobs = slices.Clone(jobs)
	slices.SortStableFunc(jobs, func(a, b *api.Job) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.Created.Compare(b.Created))
	})
	placedJobs, mine := map[string]bool{}, map[string]bool{}
	defer func() { s.endHold(placedJobs, mine, live) }()
	// First the roles, and the reservations of the jobs placed here resized
	// to what their tasks ask (in parallel; the client batches them), so
	// that placement below binds only what the reservations cover.
	type roled struct {
		j       *api.Job
		role    role
		pending []*api.Task
		bound   int
		// Per-task gangs (taskgang.go): bound tasks per spec, and the
		// first spec short of its minimum.
		bySpec map[string]int
		short  string
	}
	var work []roled
	var resizes []resizeReq
	keepCover := map[string]bool{} // jobs whose reservation nobody else can have resized
	room := &lazyRoom{nodes: nodes}
	for _, j := range jobs {
		role := s.roleOf(ctx, j)
		if role == notMine {
			continue
		}
		pending, bound, _ := s.jobTasks(j)
		bySpec := s.boundBySpec(j)
		pending, short := gangOrder(j, pending, bySpec)
		if role == placedElsewhere && s.coverStillOurs(j) {
			keepCover[j.UID] = true
		}
		if role == asOwner || role == asClaimer {
			mine[j.UID] = true
			keepCover[j.UID] = true
			if r, ok := s.wantResize(j, pending, now, room); ok {
				resizes = append(resizes, r)
			}
		}
		work = append(work, roled{j: j, role: role, pending: pending, bound: bound, bySpec: bySpec, short: short})
	}
	s.forgetCover(keepCover)
	parallel(resizes, s.cfg.AdmitParallelism, func(r resizeReq) { s.resize(ctx, r) })
	var unheld []*api.NodeBooks // nodes minus the held ones, computed once
	for _, w := range work {
		j, role, pending, bound := w.j, w.role, w.pending, w.bound
		if role == placedElsewhere {
			if s.needsConfirm(j, bound) {
				confirms = append(confirms, confirmReq{job: j, bound: bound})
			}
			continue
		}
		// A gang that is bound is confirmed, whatever else of the job
		// still waits (for quota, for room): its reservation must not go
		// with this shard's lease while its pods run.
		if role == asOwner && s.needsConfirm(j, bound) {
			confirms = append(confirms, confirmReq{job: j, bound: bound})
		}
		ready := s.readyTasks(pending, now)
		if len(ready) == 0 {
			continue
		}
		need := int(j.MinMember) - bound
		if need < 1 {
			need = 1
		}
		if need > len(ready) {
			continue // part of the gang is in backoff: wait for it
		}
		if w.short != "" && bound < int(max(j.MinMember, 1)) {
			continue // a task's own gang is not all there yet
		}
		// The quota rule: only what the reservation covers is placed.
		ready = ready[:s.coveredTasks(j, ready)]
		if need > len(ready) {
			continue // the reservation has not grown enough yet
		}
		_, pspan := s.tracer.Start(ctx, "scheduler.place", trace.WithAttributes(
			attribute.String("job", j.Key()), attribute.Int("tasks", len(ready)), attribute.Int("min_member", need), attribute.Int("nodes_considered", len(nodes))))
		t0 := time.Now()
		var res placement.Result
		if cand := s.holdFilter(j, nodes, &unheld); len(cand) > 0 {
			res = placement.PlaceGang(pc, ready, cand, need, s.rng)
		}
		taskShort := res.OK && !taskGangMet(j, ready, res.Assignments, w.bySpec)
		if taskShort {
			// The group's gang fits but a task's own does not: nothing.
			res = placement.Result{Reasons: res.Reasons}
		}
		s.hist.place.Observe(time.Since(t0).Seconds())
		pspan.SetAttributes(attribute.Bool("placed", res.OK))
		pspan.End()
		s.log.Debug("placement", "job", j.Key(), "need", need, "ready", len(ready), "ok", res.OK, "placed", res.Placed, "reasons", fmt.Sprint(res.Reasons))
		if !res.OK {
			if role == asOwner && s.offer(ctx, j, ready[:need]) {
				continue
			}
			if role == asOwner {
				s.maybeHold(j, ready, need, nodes)
			}
			if role == asClaimer {
				s.claimStuck(ctx, j)
				continue
			}
			if len(nodes) == 0 {
				continue
			}
			msg := placement.Summarize(res.Reasons, len(nodes))
			if need > 1 {
				msg = fmt.Sprintf("gang of %d (minMember %d) does not fit: %s", need, j.MinMember, msg)
			}
			if taskShort {
				msg = fmt.Sprintf("the pods of one of its tasks (minTaskMember %v) do not all fit at once: %s", j.MinTaskMember, msg)
			}
			for _, t := range ready {
				if s.rateLimited(t.UID) {
					s.deps.Recorder.FailedScheduling(t, msg)
				}
			}
			continue
		}
		// Assume the whole plan before any bind: if the cache refuses one
		// task (its node changed since the snapshot), the gang binds
		// nothing this cycle rather than part of itself.
		var assumed []*api.Task
		refused := false
		for _, t := range ready {
			node, ok := res.Assignments[t.UID]
			if !ok {
				continue
			}
			if err := s.deps.Cache.Assume(t.UID, node); err != nil {
				s.log.Debug("assume refused; the gang waits for the next cycle", "task", t.Key(), "node", node, "err", err)
				refused = true
				break
			}
			assumed = append(assumed, t)
		}
		if refused {
			s.stats.assumeRefused.Add(1)
			for _, t := range assumed {
				s.deps.Cache.Forget(t.UID)
			}
			continue
		}
		// The rest of this cycle plans with these tasks on their nodes.
		for _, t := range assumed {
			s.snap.Book(res.Assignments[t.UID], t.Request)
		}
		placedJobs[j.UID] = true
		req := s.placed(j, role)
		for i, t := range assumed {
			node := res.Assignments[t.UID]
			s.mu.Lock()
			s.inflight[t.UID] = node
			s.rec(j.UID).binding++
			s.mu.Unlock()
			req.task, req.node = *t, node
			select {
			case s.binds <- req:
			case <-ctx.Done():
				// Stopping: undo what will never be sent (only task i
				// was counted in flight so far).
				s.mu.Lock()
				delete(s.inflight, t.UID)
				s.rec(j.UID).binding--
				s.tidy(j.UID)
				s.mu.Unlock()
				for _, u := range assumed[i:] {
					s.deps.Cache.Forget(u.UID)
				}
				return
			}
		}
	}
}

// freeRoom is what the schedulable, in-sync nodes have free (without the
// pod count), summed in place: it runs in cycles where a job may grow.
func freeRoom(nodes []*api.NodeBooks) api.Resource {
	var cpu, mem int64
	var sc map[string]int64
	for _, n := range nodes {
		if n.OutOfSync || n.Node.Unschedulable {
			continue
		}
		a, u := n.Node.Allocatable, n.Used
		cpu += max(a.MilliCPU-u.MilliCPU, 0)
		mem += max(a.Memory-u.Memory, 0)
		for k, v := range a.Scalars {
			if f := v - u.Scalars[k]; f > 0 && k != api.Pods {
				if sc == nil {
					sc = map[string]int64{}
				}
				sc[k] += f
			}
		}
	}
	return api.NewResource(cpu, mem, sc)
}

// readyTasks returns the pending tasks that may be placed now: not those
// whose bind is in flight (assumed: already counted as bound) nor those
// backing off after a failed bind.
func (s *Scheduler) readyTasks(pending []*api.Task, now time.Time) []*api.Task {
	var ready []*api.Task
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range pending {
		if _, busy := s.inflight[t.UID]; busy {
			continue
		}
		if until, ok := s.backoff[t.UID]; ok && now.Before(until) {
			continue
		}
		ready = append(ready, t)
	}
	return ready
}

// bindWorker binds one pod at a time, only while the node's partition is
// held; a failed bind forgets the assumption and backs the task off.
func (s *Scheduler) bindWorker(ctx context.Context) {
	for {
		var r bindReq
		select {
		case <-ctx.Done():
			return
		case r = <-s.binds:
		}
		key := shard.PartitionKey(shard.Partition(r.node, s.cfg.Partitions))
		leave, err := s.enterBind(r)
		switch {
		case err != nil:
		case s.deps.Ownership.Use(key):
			bctx, span := s.tracer.Start(ctx, "scheduler.bind", trace.WithAttributes(
				attribute.String("pod", r.task.Key()), attribute.String("node", r.node), attribute.String("job", r.job.Key())))
			cctx, cancel := context.WithTimeout(bctx, s.cfg.CallTimeout)
			err = s.deps.Binder.Bind(cctx, &r.task, r.node)
			cancel()
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			s.deps.Ownership.Done(key)
		default:
			err = fmt.Errorf("partition %s of node %s is no longer held by this shard", key, r.node)
		}
		leave()
		s.mu.Lock()
		delete(s.inflight, r.task.UID)
		if err != nil {
			s.backoff[r.task.UID] = s.cfg.Now().Add(s.cfg.BindBackoff)
		} else {
			delete(s.backoff, r.task.UID)
		}
		s.mu.Unlock()
		if err != nil {
			s.stats.bindFailures.Add(1)
			s.deps.Cache.Forget(r.task.UID)
			s.log.Warn("bind failed", "task", r.task.Key(), "node", r.node, "err", err)
			continue
		}
		s.stats.binds.Add(1)
		if !r.task.Created.IsZero() {
			s.hist.submitToBind.Observe(s.since(r.task.Created).Seconds())
		}
		s.deps.Recorder.Scheduled(&r.task, r.node)
	}
}

type confirmReq struct {
	job   *api.Job
	bound int
}

// parallel calls f for every item with at most n calls at once, and
// returns when all have.
func parallel[T any](items []T, n int, f func(T)) {
	if len(items) == 0 {
		return
	}
	next := make(chan T)
	var wg sync.WaitGroup
	for i := 0; i < min(n, len(items)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				f(it)
			}
		}()
	}
	for _, it := range items {
		next <- it
	}
	close(next)
	wg.Wait()
}

// needsConfirm reports whether a job's gang is bound and its reservation
// not yet confirmed.
func (s *Scheduler) needsConfirm(j *api.Job, bound int) bool {
	if bound < int(max(j.MinMember, 1)) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.peek(j.UID).confirmed
}

// confirm confirms a job's reservation once its gang is bound. Called
// concurrently for different jobs.
func (s *Scheduler) confirm(ctx context.Context, j *api.Job, bound int) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	_, err := s.deps.Quota.Confirm(cctx, j.UID)
	cancel()
	if errors.Is(err, coordinator.ErrNotFound) {
		// The tentative reservation went with an expired shard session:
		// forget it, so the next cycle reserves again (bound tasks included).
		s.log.Warn("reservation lost before confirm; admitting again", "job", j.Key())
		s.dropReservation(j.UID)
		return
	}
	if err != nil {
		s.log.Warn("confirm failed", "job", j.Key(), "err", err)
		return
	}
	s.mu.Lock()
	s.rec(j.UID).confirmed = true
	s.mu.Unlock()
	s.syncPhase(j, api.JobRunning, bound)
}

// syncPhase writes a job's phase with its counts (running = bound tasks,
// succeeded and failed from the cache) when they differ from what this
// shard last wrote for it.
func (s *Scheduler) syncPhase(j *api.Job, phase api.JobPhase, bound int) {
	sum := s.summary(j)
	st := api.JobStatus{Phase: phase, Running: int32(bound), Succeeded: int32(sum.Done - sum.Failed), Failed: int32(sum.Failed)}
	key := phaseKey{phase: st.Phase, running: st.Running, succeeded: st.Succeeded, failed: st.Failed}
	s.mu.Lock()
	r := s.rec(j.UID)
	same := r.phaseSent == key
	r.phaseSent = key
	s.mu.Unlock()
	if !same {
		s.setPodGroup(j.Namespace, j.Name, j.UID, st)
	}
}

// releaseGone releases reservations of jobs that no longer exist (matched
// by UID) or whose tasks have all finished.
func (s *Scheduler) releaseGone(ctx context.Context, live map[string]bool) {
	s.mu.Lock()
	var gone []string
	var names []admission
	for uid, r := range s.jobs {
		if r.admission != nil && !live[uid] {
			gone = append(gone, uid)
			names = append(names, *r.admission)
		}
	}
	s.mu.Unlock()
	// A deleted job's pods may still be terminating, holding their nodes:
	// its reservation covers them until they are gone.
	kept := gone[:0]
	for i, uid := range gone {
		if !s.podsStillBound(names[i].job.Namespace, names[i].job.Name) {
			kept = append(kept, uid)
		}
	}
	gone = kept
	for _, j := range s.snap.Jobs() {
		if !s.isAdmitted(j.UID) {
			continue
		}
		pending, bound, done := s.jobTasks(j)
		if len(pending) == 0 && bound == 0 && done >= int(max(j.MinMember, 1)) {
			gone = append(gone, j.UID)
			s.syncPhase(j, api.JobCompleted, 0)
			continue
		}
		s.mu.Lock()
		confirmed := s.peek(j.UID).confirmed
		s.mu.Unlock()
		if confirmed {
			// Running while minMember are bound; Unknown when a running
			// gang lost members, as Volcano computes it.
			phase := api.JobRunning
			if bound < int(max(j.MinMember, 1)) {
				phase = api.JobUnknown
			}
			s.syncPhase(j, phase, bound)
		}
		if s.podsLate(j, len(pending), bound, done) {
			gone = append(gone, j.UID)
			msg := fmt.Sprintf("admitted %s ago but only %d of its minMember %d pods exist: its quota is given back until they come",
				s.cfg.InqueueTimeout, len(pending)+bound+done, max(j.MinMember, 1))
			s.waiting(j, "PodsNotCreated", msg)
			s.mu.Lock()
			s.rec(j.UID).lateUntil = s.cfg.Now().Add(s.cfg.InqueueTimeout / 4)
			s.mu.Unlock()
		}
	}
	parallel(gone, s.cfg.AdmitParallelism, func(uid string) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		_, err := s.deps.Quota.Release(cctx, uid)
		cancel()
		if err != nil {
			s.log.Warn("release failed", "job uid", uid, "err", err)
			return
		}
		s.dropReservation(uid)
	})
	s.forgetReleased(ctx, gone)
}

// podsLate reports whether j, admitted here, has waited InqueueTimeout for
// the pods of its gang: fewer than minMember exist and none is bound.
func (s *Scheduler) podsLate(j *api.Job, pending, bound, done int) bool {
	if bound > 0 || pending+done >= int(max(j.MinMember, 1)) {
		return false
	}
	s.mu.Lock()
	a := s.peek(j.UID).admission
	s.mu.Unlock()
	return a != nil && !a.at.IsZero() && s.since(a.at) >= s.cfg.InqueueTimeout
}

// podsStillBound reports whether pods of a PodGroup that no longer exists
// (namespace/name, no successor under that name) are still bound and
// unfinished: being deleted, they hold their nodes through their grace
// period, and the quota rule counts them until they are gone.
func (s *Scheduler) podsStillBound(namespace, name string) bool {
	if _, exists := s.deps.Cache.JobByName(namespace, name); exists {
		return false // a successor's members are its own; its predecessor's pods are not told apart
	}
	return s.deps.Cache.JobSummary(namespace, name).Bound > 0
}

// pruneEvery is how many cycles pass between prunes of per-task state.
const pruneEvery = 50

// prune forgets backoff and event times of tasks that are no longer pending
// and of jobs that are gone, so this state stays O(pending), not O(tasks
// ever seen).
func (s *Scheduler) prune(liveJobs map[string]bool) {
	pending := map[string]bool{}
	for _, t := range s.snap.PendingTasks() {
		pending[t.UID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.backoff {
		if !pending[uid] {
			delete(s.backoff, uid)
		}
	}
	for uid := range s.lastEvent {
		if !pending[uid] && !liveJobs[uid] {
			delete(s.lastEvent, uid)
		}
	}
	// The batcher remembers the last status written per PodGroup; a gone
	// PodGroup's entry would stay forever.
	for uid, r := range s.jobs {
		if liveJobs[uid] {
			continue
		}
		r.admitWait, r.resizeWait, r.lateUntil, r.phaseSent = quotaBackoff{}, quotaBackoff{}, time.Time{}, phaseKey{}
		if r.admission == nil {
			r.confirmed = false // nothing to release: releaseGone keeps admitted ones
			r.setCover(nil)
		}
		if r.statusSent {
			r.statusSent = false
			s.deps.Status.ForgetPodGroup(uid)
		}
		s.tidy(uid)
	}
}

// waiting says on a job's PodGroup why it is not admitted: phase Pending,
// an Unschedulable condition with reason and msg, and an event (at most
// one every 5 s per job).
func (s *Scheduler) waiting(j *api.Job, reason, msg string) {
	s.setPodGroup(j.Namespace, j.Name, j.UID, api.JobStatus{Phase: api.JobPending, Conditions: []api.JobCondition{{
		Type: "Unschedulable", Status: "True", Reason: reason, Message: msg}}})
	if s.rateLimited(j.UID) {
		s.deps.Recorder.Unschedulable(j, msg)
	}
}

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

// implicitGroups creates the implicit PodGroup of pending pods that name
// none (one per workload, in the queue the pod asks for, by that queue's
// owner) and deletes implicit PodGroups with no pod left, with UID and
// resourceVersion preconditions (F4).
func (s *Scheduler) implicitGroups(ctx context.Context, jobs []*api.Job) {
	if s.deps.Groups == nil {
		return
	}
	have := map[string]bool{}
	for _, j := range jobs {
		have[j.Namespace+"/"+j.Name] = true
	}
	now := s.cfg.Now()
	for k, t := range s.groupOps {
		if now.Sub(t) > 2*time.Second {
			delete(s.groupOps, k)
		}
	}
	created := map[string]bool{}
	for _, t := range s.snap.PendingTasks() {
		if !t.Implicit || t.SchedulerName != s.cfg.SchedulerName || t.NodeName != "" {
			continue
		}
		key := t.Namespace + "/" + t.Job
		if have[key] || created[key] {
			continue
		}
		if _, recent := s.groupOps[key]; recent {
			continue // created a moment ago; the informer has not shown it yet
		}
		q := t.Queue
		if q == "" {
			q = api.DefaultQueue
		}
		if !s.deps.Ownership.Holds(shard.QueueKey(q)) {
			continue
		}
		created[key] = true
		s.groupOps[key] = now
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Groups.CreatePodGroup(cctx, t.Namespace, t.Job, q, 1)
		cancel()
		if err != nil {
			s.log.Warn("create implicit podgroup", "podgroup", key, "err", err)
		}
	}
	for _, j := range jobs {
		if !j.Implicit || !s.deps.Ownership.Holds(shard.QueueKey(j.Queue)) {
			continue
		}
		sum := s.summary(j)
		if sum.Pending+sum.Bound+sum.Done > 0 {
			continue
		}
		if s.since(j.Created) < 2*time.Second {
			continue // give a new group's first pod time to show up
		}
		if _, recent := s.groupOps[j.UID]; recent {
			continue
		}
		s.groupOps[j.UID] = now
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := s.deps.Groups.DeletePodGroup(cctx, j.Namespace, j.Name, j.UID, j.ResourceVersion)
		cancel()
		if err != nil {
			s.log.Warn("delete implicit podgroup", "podgroup", j.Key(), "err", err)
		}
	}
}
