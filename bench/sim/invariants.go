package sim

import (
	"fmt"
	"sort"
	"strings"
)

// syncBooks gives the live shards the nodes they now own at each step,
// counting the out-of-sync nodes whose truth fits (see syncOwnership).
func (d *driver) syncBooks() {
	d.outOfSyncBad += int64(d.s.syncOwnership())
}

// checkBooks is run at the samples (the samples-th so far), between steps:
// it counts the books that drifted from the cluster's truth and recounts
// the cluster's quota sums at every 10th sample.
func (d *driver) checkBooks(samples int) {
	d.outOfSyncBad += int64(d.s.booksDrift())
	// The full recount from every pod checks the sums kept at each
	// bind and end (which the overrun check uses at every bind);
	// a drift persists, so every 10th sample (and the end) finds
	// it, at a tenth of the cost (O(pods) under the cluster lock).
	if samples%10 == 0 {
		d.s.cl.CheckQuota()
	}
}

// syncOwnership gives each live shard's cache the nodes it now owns and
// rebuilds out-of-sync nodes from the cluster's truth (what the daemon
// does from its informers). It returns the out-of-sync nodes whose truth
// fits: books that disagree with the API server (an invariant).
func (s *sim) syncOwnership() int {
	bad := 0
	for _, p := range s.live() {
		p.SyncOwnership()
		for _, n := range p.Cache.OutOfSync() {
			if s.cl.Fits(n) {
				bad++
			}
		}
	}
	return bad
}

// booksDrift compares every live shard's books of its nodes with the
// cluster's truth, between steps (no bind in flight): a node whose books
// are in sync but disagree on CPU, memory or pod count has drifted silently.
func (s *sim) booksDrift() int {
	bad := 0
	for _, p := range s.live() {
		p.Cache.UpdateSnapshot(&p.check)
		for _, b := range p.check.Nodes() {
			if b.OutOfSync {
				continue // counted by syncOwnership when the truth fits
			}
			cpu, mem, pods, ok := s.cl.NodeUsage(b.Node.Name)
			if ok && (b.Used.MilliCPU != cpu || b.Used.Memory != mem || b.Tasks != pods) {
				bad++
			}
		}
	}
	return bad
}

// invariants fills the run's invariant counts and, for a reclaim run, its
// reclaim figures (loops are an invariant) and their note. A chaos run's
// admitted jobs lost are counted by chaosFigures (faults.go).
func (d *driver) invariants(st Stats) {
	run := &d.run
	run.Invariants["quota_overruns"] = st.QuotaOverruns
	run.Invariants["quota_overruns_sampled"] = st.QuotaOverrunSamples
	run.Invariants["double_booked_nodes"] = st.DoubleBookedNodes
	run.Invariants["pods_bound_twice"] = st.PodsBoundTwice
	run.Invariants["unfenced_binds"] = st.UnfencedBinds
	run.Invariants["nodes_out_of_sync"] = d.outOfSyncBad
	if d.rw != nil {
		run.Reclaim = d.rw.figures(st, d.vt)
		run.Invariants["reclaim_loops"] = run.Reclaim.Loops
		run.Notes = append(run.Notes, fmt.Sprintf("reclaim: lenders switched on at %.0f s; %d of %d lenders asked; deserved share (or all asked) reached p50 %.1f s, p99 %.1f s after (%d never); %d pods / %.0f CPU evicted against %.0f CPU at least needed (%.2fx); %d pods evicted from a queue not above its deserved share (loops), %d of lenders",
			run.Reclaim.At, run.Reclaim.Asking, run.Reclaim.Lenders, run.Reclaim.ReachP50, run.Reclaim.ReachP99, run.Reclaim.NeverReached,
			run.Reclaim.EvictedPods, run.Reclaim.EvictedCPU, run.Reclaim.NeededCPU, run.Reclaim.EvictedPerNeeded, run.Reclaim.Loops, run.Reclaim.LenderEvictions))
	}
}

// notes adds the run's notes: the clocks, the cluster's counts, the RSS,
// the quota overruns, the implicit PodGroups and the jobs still pending.
func (d *driver) notes(st Stats, end memory) {
	s, cfg, run := d.s, d.cfg, &d.run
	if !cfg.Pace {
		run.Notes = append(run.Notes, "the scheduler's timers (backoffs, offer timeouts) run on the virtual clock, which may run ahead of the wall clock here, while leases and gossip run on the wall clock")
	}
	run.Notes = append(run.Notes,
		fmt.Sprintf("%d pods submitted, %d bound, %d completed, %d evicted by drains; %d binds refused by the API (already bound or gone)", st.Submitted, st.Binds, st.Completed, st.Evicted, st.BindRefused),
		fmt.Sprintf("status writes: %d queue, %d PodGroup; most shards writing one queue: %d, one PodGroup: %d", st.QueueWrites, st.PodGroupWrites, st.WritersPerQueue, st.WritersPerPodGroup),
		fmt.Sprintf("RSS: %.0f MiB before the shards started; at the end of warm-up %v; at the end %v (each after a GC that returned the freed memory to the OS, and etcd's history compacted to that moment and its database defragmented); whole process: cluster model, embedded etcd and %d shards", d.sampler.rss0, d.sampler.memWarm, end, cfg.Shards))
	if n := s.reserves.note(); n != "" {
		run.Notes = append(run.Notes, n)
	}
	if n := s.warns.note(); n != "" {
		run.Notes = append(run.Notes, n)
	}
	run.Notes = append(run.Notes, quotaNotes(s.cl, st)...)
	for _, n := range []string{d.offeredNote(), d.sampler.roomNote(s.cl.bigPodCPU), s.cl.tailNote(), s.cl.quotaFreeNote()} {
		if n != "" {
			run.Notes = append(run.Notes, n)
		}
	}
	if st.GroupsCreated > 0 || st.GroupsDeletedUnderPods > 0 {
		run.Notes = append(run.Notes, fmt.Sprintf("implicit PodGroups: %d created and %d deleted by the shards; %d deleted while their pods still ran or waited",
			st.GroupsCreated, st.GroupsDeleted, st.GroupsDeletedUnderPods))
	}
	if ps := s.cl.pendingByClass(); len(ps) > 0 {
		classes := make([]jobClass, 0, len(ps))
		for k := range ps {
			classes = append(classes, k)
		}
		sort.Slice(classes, func(a, b int) bool {
			if classes[a].kind != classes[b].kind {
				return classes[a].kind < classes[b].kind
			}
			return classes[a].size < classes[b].size
		})
		var parts []string
		for _, k := range classes {
			e := ps[k]
			why := e.why
			if why == "" {
				why = "no event yet"
			}
			completed := ""
			if e.inCompleted > 0 {
				completed = fmt.Sprintf(", %d of them in a PodGroup already Completed", e.inCompleted)
			}
			parts = append(parts, fmt.Sprintf("%s: %d jobs (oldest %.0f s%s: %q)", k, e.jobs, e.oldest, completed, why))
		}
		run.Notes = append(run.Notes, "jobs with pending pods at the end, by kind and size: "+strings.Join(parts, ", "))
	}
}

// quotaNotes describes the quota overruns found: how each count is made,
// the first few (queue, resource, used vs capability, time) and the
// overrunning binds by job kind.
func quotaNotes(cl *Cluster, st Stats) []string {
	out := []string{"quota_overruns counts binds × queue levels (leaf and every ancestor) left above capability, quota_overruns_sampled queue levels above capability at samples; both recount requests of bound, unfinished pods from the cluster model, never from the coordinator's ledger"}
	if st.QuotaBooksMismatch > 0 {
		out = append(out, fmt.Sprintf("BUG in the cluster model: its per-queue running sums differed from a recount over the pods %d times", st.QuotaBooksMismatch))
	}
	first, byKind := cl.Overruns()
	if len(first) == 0 {
		return out
	}
	parts := make([]string, 0, len(first))
	for _, o := range first {
		parts = append(parts, o.String())
	}
	out = append(out, "first quota overruns: "+strings.Join(parts, "; "))
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts = parts[:0]
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	if len(parts) > 0 {
		out = append(out, "overrunning binds by job kind (the bind that found the queue full, not necessarily the job that took quota it had not reserved): "+strings.Join(parts, ", "))
	}
	return out
}
