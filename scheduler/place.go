// Placement: the jobs this shard places go onto its nodes as whole gangs,
// within what their reservations cover, and a bounded pool binds them.

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/placement"
	"github.com/shardsched/shardsched/wire"
)

// placeAdmitted places the pending tasks of the jobs this shard places
// (roleOf: admitted here and not claimed elsewhere, or claimed here) on
// this shard's nodes: a gang not yet running needs minMember tasks placed
// at once. A job of the queue owner that does not fit is offered to a
// shard with room. jobs are the cycle's candidates (Scheduler.candidates):
// every job whose role here is not notMine is among them.
func (s *Scheduler) placeAdmitted(ctx context.Context, jobs []*api.Job) {
	// The nodes are copied from the snapshot once a job has tasks ready
	// to place: most cycles have none, and at 5,000 nodes the copy was
	// over a third of what a cycle with nothing to place allocated.
	var nodes []*api.NodeBooks
	now := s.cfg.Now()
	pc := s.place
	if pc.Sample == 0 {
		pc.Sample = nodeSample(s.snap.NumNodes())
	}
	var confirms []confirmReq
	defer func() {
		parallel(confirms, s.cfg.AdmitParallelism, func(c confirmReq) { s.confirm(ctx, c.job, c.bound) })
	}()
	defer s.sendOffers(ctx)
	// One round of the planner: the snapshot's books change only by the
	// plans assumed below (snap.Book), so a job asking what the last one
	// asked starts from the nodes the last scan found.
	s.planner.BeginRound()
	defer s.planner.EndRound()
	// The roles first: most of the cluster's jobs are other shards' to
	// place, and only this shard's are sorted (each job's priority reads
	// the cache). Then oldest first within a priority, so the
	// longest-waiting gang plans before younger jobs take the room.
	// A job of ours with nothing to place (quiet) only keeps its cover and
	// counts as this shard's.
	cycle := s.stats.cycles.Load()
	roles := make(map[*api.Job]role, len(jobs))
	ours := make([]*api.Job, 0, len(jobs))
	keepCover := make(map[string]bool, len(jobs)) // jobs whose reservation nobody else can have resized
	placedJobs, mine := map[string]bool{}, make(map[string]bool, len(jobs))
	for _, j := range jobs {
		r := s.roleOf(ctx, j)
		switch {
		case r == notMine:
		case r == asOwner && s.quiet(j, cycle):
			mine[j.UID], keepCover[j.UID] = true, true
		default:
			roles[j] = r
			ours = append(ours, j)
		}
	}
	jobs = ours
	s.byPriority(jobs)
	s.held.full = false
	defer func() { s.endHold(placedJobs, mine) }()
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
	work := make([]roled, 0, len(jobs))
	var resizes []resizeReq
	room := &lazyRoom{snap: s.snap}
	for _, j := range jobs {
		role := roles[j]
		pending, bound, _ := s.jobTasks(j)
		bySpec := s.boundBySpec(j)
		pending, short := gangOrder(j, pending, bySpec)
		if role == placedElsewhere && s.coverStillOurs(j) {
			keepCover[j.UID] = true
		}
		if role == asOwner || role == asClaimer {
			mine[j.UID] = true
			keepCover[j.UID] = true
			if s.isMarked(j.UID) {
				// Giving quota back (evict.go): it neither grows nor
				// places more.
			} else if r, ok := s.wantResize(j, pending, now, room); ok {
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
		if s.isMarked(j.UID) {
			continue
		}
		ready := s.readyTasks(pending, now)
		if len(ready) == 0 {
			continue
		}
		if nodes == nil {
			nodes = s.snap.Nodes()
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
		n := s.coveredTasks(j, ready)
		if need > n {
			// The reservation has not grown enough yet, or will not here.
			s.uncovered(ctx, j, role, ready[:need], nodes, pc)
			continue
		}
		ready = ready[:n]
		_, pspan := s.tracer.Start(ctx, "scheduler.place", trace.WithAttributes(
			attribute.String("job", j.Key()), attribute.Int("tasks", len(ready)), attribute.Int("min_member", need), attribute.Int("nodes_considered", len(nodes))))
		t0 := time.Now()
		var res placement.Result
		cand := s.holdFilter(j, nodes, &unheld)
		if len(cand) > 0 {
			if short := s.shortOfRoom(ready[:need]); short != "" {
				res.Reasons = noRoomReasons(short, cand)
			} else {
				res = s.planner.PlaceGang(pc, ready, cand, need, s.rng)
			}
		}
		taskShort := res.OK && !taskGangMet(j, ready, res.Assignments, w.bySpec)
		if taskShort {
			// The group's gang fits but a task's own does not: nothing.
			res = placement.Result{Reasons: res.Reasons}
		}
		s.obs.Place(time.Since(t0))
		pspan.SetAttributes(attribute.Bool("placed", res.OK))
		pspan.End()
		s.log.Debug("placement", "job", j.Key(), "need", need, "ready", len(ready), "ok", res.OK, "placed", res.Placed, "reasons", fmt.Sprint(res.Reasons))
		if !res.OK {
			if role == asOwner && s.offer(j, ready[:need]) {
				continue
			}
			if role == asOwner && s.preemptForRoom(ctx, j, ready, need, cand) {
				unheld = nil // a new hold: the nodes others may use changed
				continue
			}
			if role == asOwner {
				held, neverFits := s.maybeHold(j, ready, need, nodes)
				if held {
					unheld = nil
				}
				if neverFits && s.offerToHold(j, ready[:need]) {
					continue
				}
			}
			if role == asClaimer {
				if s.held.byJob[j.UID] != nil {
					// Claimed to be held for (takeOffers): it waits for
					// its nodes to drain, for at most MaxHold.
					delete(s.ho.stuck, j.UID)
				} else {
					s.claimStuck(ctx, j, ready[:need])
				}
				continue
			}
			if len(nodes) == 0 {
				continue
			}
			msg := s.placementMessage(res.Reasons, len(nodes), len(cand))
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
			req.task, req.node, req.queued = *t, node, s.cfg.Now()
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
// held. A bind refused outright forgets the assumption and backs the task
// off. A bind whose outcome is unknown (wire.ErrBindUnknown: the call timed
// out or its connection broke, and the API server may have bound the pod
// or may yet) keeps the assumption, so that nothing else is placed on that
// room, and is tried again after BindBackoff until its outcome is known: a
// retry that succeeds, or finds the pod already on the node, confirms it;
// the informer showing the pod bound or gone ends the doubt; the partition
// or the job's queue leaving this shard ends it too (the pod is then the
// new owner's to see).
func (s *Scheduler) bindWorker(ctx context.Context) {
	for {
		var r bindReq
		select {
		case <-ctx.Done():
			return
		case r = <-s.binds:
		}
		err := s.bindOnce(ctx, r)
		r.queued = time.Time{} // a retry after an unknown outcome waits for no worker
		for errors.Is(err, wire.ErrBindUnknown) {
			s.stats.bindsInDoubt.Add(1)
			s.log.Warn("bind outcome unknown: the pod keeps its room and the bind is tried again", "task", r.task.Key(), "node", r.node, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.BindBackoff):
			}
			if ctx.Err() != nil {
				s.endBind(r.job.UID)
				err = ctx.Err()
				break
			}
			if node, ok := s.deps.Cache.Assumed(r.task.UID); !ok || node != r.node {
				// The informer settled it: bound (the assumption was
				// confirmed) or gone.
				s.endBind(r.job.UID)
				err = nil
				break
			}
			err = s.bindOnce(ctx, r)
		}
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
			s.obs.SubmitToBind(s.since(r.task.Created))
		}
		s.deps.Recorder.Scheduled(&r.task, r.node)
	}
}

// endBind ends a bind's count among its job's binds, for a bind whose
// doubt ended without another call.
func (s *Scheduler) endBind(job string) {
	s.mu.Lock()
	s.rec(job).binding--
	s.tidy(job)
	s.mu.Unlock()
}

// bindOnce makes one bind call for r under its fences; an unknown outcome
// leaves r counted among its job's binds (binding), anything else ends
// that count.
func (s *Scheduler) bindOnce(ctx context.Context, r bindReq) (err error) {
	key := wire.PartitionKey(wire.PartitionIn(r.node, s.cfg.Partitions, s.cfg.NodePools))
	leave, err := s.enterBind(r)
	defer func() {
		leave()
		if errors.Is(err, wire.ErrBindUnknown) {
			// Still in flight as far as the job is concerned.
			s.mu.Lock()
			s.rec(r.job.UID).binding++
			s.mu.Unlock()
		}
	}()
	if err != nil {
		return err
	}
	until, used := s.deps.Ownership.UseUntil(key)
	if !used {
		return fmt.Errorf("partition %s of node %s is no longer held by this shard", key, r.node)
	}
	defer s.deps.Ownership.Done(key)
	bctx, span := s.tracer.Start(ctx, "scheduler.bind", trace.WithAttributes(
		attribute.String("pod", r.task.Key()), attribute.String("node", r.node), attribute.String("job", r.job.Key())))
	defer span.End()
	// No bind may be sent after the partition's record could be another
	// shard's: the call's deadline is the use's.
	deadline := time.Now().Add(s.cfg.CallTimeout)
	if !until.IsZero() && until.Before(deadline) {
		deadline = until
	}
	cctx, cancel := context.WithDeadline(bctx, deadline)
	defer cancel()
	if !r.queued.IsZero() {
		s.obs.BindWait(s.since(r.queued))
	}
	called := s.cfg.Now()
	err = s.deps.Binder.Bind(cctx, &r.task, r.node)
	s.obs.BindCall(s.since(called))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
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

// Reasons counted beside placement's in a FailedScheduling message.
const (
	reasonHeld        = "node(s) held for an older gang"
	reasonOtherShards = "node(s) placed by other shards, none of which reported room for it"
)

// noRoomReasons is what placement would have counted on nodes, for tasks
// the free room of the schedulable nodes together is short of (of
// resource short) for: a node out of sync or cordoned for that, every other
// node short of the resource.
func noRoomReasons(short string, nodes []*api.NodeBooks) map[string]int {
	out := map[string]int{}
	for _, b := range nodes {
		switch {
		case b.OutOfSync:
			out[placement.ReasonOutOfSync]++
		case b.Node.Unschedulable:
			out[placement.ReasonNodeUnschedulable]++
		default:
			out["Insufficient "+short]++
		}
	}
	return out
}

// shortOfRoom names a resource of which the free room of this shard's
// schedulable nodes together (the snapshot's Free, which the cycle's
// placements are booked against) holds less than the tasks ask, or ""
// when it holds enough of each. When it names one, no placement can hold
// the tasks, and they are not scanned for: a full shard scanned every
// node for each gang it then offered (see docs/benchmarks.md, forty-seventh
// session). Their pods are told that the shard's nodes are short of it
// (noRoomReasons). A task that tolerates the cordon may go to a cordoned
// node, which Free leaves out: then placement judges ("").
func (s *Scheduler) shortOfRoom(tasks []*api.Task) string {
	for _, t := range tasks {
		if placement.ToleratesCordon(t) {
			return ""
		}
	}
	sum, _, ok := gangNeeds(tasks)
	if !ok {
		return ""
	}
	free := s.snap.Free()
	if sum.Fits(free) {
		return "" // the common case: no dimension named
	}
	for _, d := range sum.Dims() {
		if sum.Get(d) > free.Get(d) {
			return d
		}
	}
	return ""
}

// placementMessage is kube-scheduler's FailedScheduling message counted
// over every node of the cluster, not only this shard's: the reasons on
// the candidates placement tried, the nodes of this shard held for an older
// gang, and the nodes other shards place on (the owner offers a job that
// does not fit here to a shard that gossips room for it; a message means
// none did).
func (s *Scheduler) placementMessage(reasons map[string]int, mine, candidates int) string {
	all := make(map[string]int, len(reasons)+2)
	for r, n := range reasons {
		all[r] = n
	}
	if held := mine - candidates; held > 0 {
		all[reasonHeld] += held
	}
	total := max(s.snap.KnownNodes(), mine)
	if other := total - mine; other > 0 {
		all[reasonOtherShards] += other
	}
	return placement.Summarize(all, total)
}

// uncovered handles tasks of j, beyond what its reservation covers, that
// this shard would place next. While the cover is being learnt, or a grow
// was refused for quota a moment ago (within its backoff; the resize said
// so on the job), they wait. A grow
// is also held back when they do not fit in this shard's free room
// (wantResize): then, as for a gang that does not fit, the queue owner
// offers the job to a shard that gossips room for them (a running job's
// further pods, a Deployment scaled up, an elastic job's extra tasks), and
// a claimer gives its claim back (claimStuck); when no shard has room,
// the tasks are told why they wait. Loop only.
func (s *Scheduler) uncovered(ctx context.Context, j *api.Job, role role, tasks []*api.Task, nodes []*api.NodeBooks, pc placement.Config) {
	s.mu.Lock()
	rec := s.peek(j.UID)
	// Only a backoff still running holds them back: the record of a
	// refused grow stays until a grow succeeds (it keeps the backoff's
	// doubling), and no grow is asked while the tasks do not fit in this
	// shard's free room, so a record alone kept such tasks here, neither
	// offered nor given back, until room came
	// (TestFurtherPodsOfferedAfterAQuotaWaitWithNoRoomLeft).
	known := rec.cover != nil
	quotaWait := rec.resizeWait != (quotaBackoff{}) && s.cfg.Now().Before(rec.resizeWait.until)
	s.mu.Unlock()
	if !known || quotaWait || len(nodes) == 0 {
		return
	}
	var res placement.Result
	if short := s.shortOfRoom(tasks); short != "" {
		res.Reasons = noRoomReasons(short, nodes)
	} else {
		res = s.planner.PlaceGang(pc, tasks, nodes, len(tasks), s.rng)
	}
	if res.OK {
		return // room here after all: the next cycle's resize grows for it
	}
	switch role {
	case asOwner:
		if s.offer(j, tasks) {
			return
		}
	case asClaimer:
		s.claimStuck(ctx, j, tasks)
		return
	}
	msg := "more of its job's pods than its reservation covers do not fit on this shard's nodes, and no other shard reports room for them: " +
		s.placementMessage(res.Reasons, len(nodes), len(nodes))
	for _, t := range tasks {
		if s.rateLimited(t.UID) {
			s.deps.Recorder.FailedScheduling(t, msg)
		}
	}
}
