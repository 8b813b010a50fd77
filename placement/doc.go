// Package placement decides where the tasks of one gang (a PodGroup's pods)
// go, against a shard's private snapshot of its nodes' books.
//
// # What it owns
//
// Feasibility and ranking as chains of small typed steps, and the gang
// plan built from them:
//
//	nodes (shuffled once per call by the caller's rng, or the last
//	       call's window first within a round: see Cost)
//	  │
//	  ▼  for each task, in the caller's order (priority, then creation):
//	Filter chain ── OutOfSync → NodeUnschedulable → NodeSelector →
//	  │             RequiredAffinity → Taints → Resources
//	  │             (first non-Success Status rejects the node; its Reason
//	  │              is counted for the FailedScheduling message)
//	  ▼
//	Scorer chain ── BinPack or Spread, 0..100 each, weighted sum
//	  │             (the best total wins; ties go to the earlier node in
//	  │              the shuffled order, so two shards rarely collide)
//	  ▼
//	assume: the task's request is taken off that node's Free in the plan,
//	        so later tasks of the same gang see what earlier ones consumed;
//	        with built-in steps only, a later task that asks the same
//	        (request and constraints) is placed among the feasible nodes
//	        this scan found (only the node just taken is filtered and
//	        scored again), and scans on only when none can take it
//	  │
//	  ▼
//	Result: all tasks that fit when at least minMember do, otherwise none.
//
// A NodeView's Free is the node's idle resources (allocatable − used,
// never negative) minus what earlier tasks of the same gang were assumed
// onto it in the current plan. Resources that bound tasks are releasing
// are not free: placement does not pipeline onto them.
//
// # What it must never do
//
//   - No I/O, no logging, no clocks, no goroutines and no locks. Placement
//     is a pure function of its arguments; the caller's rng is the only
//     source of randomness, so a seed reproduces a plan exactly.
//   - Never mutate its inputs: tasks, NodeBooks (and the Resources and maps
//     inside them) are read only. The plan's free resources live in maps
//     this package allocates and never hands out.
//   - Never panic on data: nil tasks, nil nodes, nil maps, negative or
//     absurd quantities, malformed Gt/Lt numbers, unknown operators and
//     nil steps in a Config are handled, not asserted.
//   - Never return a partial gang: when fewer than minMember tasks fit,
//     Result.Assignments is empty.
//   - No package-level mutable state. Filters and scorers here are
//     stateless values, so one Config may be used by many goroutines at
//     once; a *rand.Rand must not be (give each goroutine its own).
//
// # Cost
//
// One plan allocates a constant number of objects however many nodes it
// scans: nodes are visited through a slice of per-call slots, the built-in
// steps read free resources through a per-node tally of plain numbers
// instead of a freshly built api.Resource, and the static filters (labels,
// taints, cordon, out of sync) run once per node for all the tasks of a
// gang that share a selector, affinity and tolerations. What the steps read
// of a task's request is worked out once per task; a Planner reused across
// a cycle's gangs also keeps, per node, what they read of its allocatable
// (pods, devices) and the static verdicts, while the same books come back
// and the constraints do not change. Within a round (Planner.BeginRound:
// a cycle, whose books change only where its plans were assumed), a call
// that asks what the last one asked starts from the window the last scan
// found, so a stream of one-pod jobs costs what one gang of them does.
// Rejection reasons
// are counted only for the first task that fits nowhere, by re-running its
// (pure) filters, so the placement path does no map work. Steps from other
// packages keep working; they just take the general path, where Free is
// materialized per node.
//
// Out-of-sync nodes (F2: books that would go negative) are always skipped
// by PlaceGang with the reason "node out of sync", whether or not the
// Config lists the OutOfSync filter; the cache rebuilds them.
package placement
