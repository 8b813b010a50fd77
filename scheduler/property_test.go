package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// A random-event property test of the quota rule: jobs of every kind users
// run (gangs, Deployments with many replicas and minMember 1, elastic jobs
// whose minResources claim almost nothing, batch Jobs whose next pods come
// after the first finish), tasks finishing, jobs deleted, the owner
// restarting, over a two-level tree with capabilities at both levels. After
// every step the use of every queue level, recomputed from the tasks bound
// and not finished (the binder's record), must be within its capability,
// and no job may have more bound than its reservation holds.
func TestPropertyQuotaRuleFromThePods(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			w := newWorld(t)
			rng := rand.New(rand.NewPCG(seed, 99))
			specs := []api.QueueSpec{
				{Name: "org", Capability: mustLimit(t, 10)},
				{Name: "a", Parent: "org", Capability: mustLimit(t, 6)},
				{Name: "b", Parent: "org", Capability: mustLimit(t, 7)},
				{Name: "c"}, // unlimited leaf; the nodes bound it
			}
			if err := w.r.quota.setQueues(specs); err != nil {
				t.Fatal(err)
			}
			tree, err := api.BuildTree(specs)
			if err != nil {
				t.Fatal(err)
			}
			w.r.s.SetTree(tree)
			for i := 0; i < 4; i++ {
				w.r.node(fmt.Sprint("n", i), 8)
			}
			queues := []string{"a", "b", "c"}
			var log []string
			binds := 0
			for step := 0; step < 300; step++ {
				var ev string
				switch k := rng.IntN(20); {
				case k < 5:
					ev = w.randomJob(rng, queues[rng.IntN(len(queues))])
				case k < 9:
					ev = w.finishRandom(rng)
				case k < 10:
					ev = w.deleteRandom(rng)
				case k < 11:
					ev = w.moreTasksRandom(rng)
				case k < 12 && step%50 == 0:
					w.r.restart(t)
					ev = "restart"
				case k < 13:
					w.r.advance(time.Duration(rng.IntN(6000)) * time.Millisecond)
					ev = "advance"
				default:
					w.r.cycles(t, 1)
					ev = "cycle"
				}
				log = append(log, ev)
				if bad := w.check(); bad != "ok" {
					t.Fatalf("step %d (%s): %s\nevents: %s", step, ev, bad, strings.Join(lastN(log, 30), "; "))
				}
				if bad := w.overCover(); bad != "" {
					t.Fatalf("step %d (%s): %s\nevents: %s", step, ev, bad, strings.Join(lastN(log, 30), "; "))
				}
				binds = len(w.r.binder.Binds())
			}
			// The property must not hold vacuously.
			if binds < 20 {
				t.Fatalf("only %d tasks bound in 300 steps: the test exercises nothing", binds)
			}
			// Every job gone: what the scheduler remembers of jobs and the
			// coordinator's reservations go too.
			for len(w.jobs) > 0 {
				w.deleteRandom(rng)
			}
			w.r.cycles(t, pruneEvery+1)
			for i := 0; i < 4; i++ { // reconciliation passes, for reservations a restart left behind
				w.r.advance(6 * time.Second)
				w.r.cycles(t, 2)
			}
			w.r.s.mu.Lock()
			left := len(w.r.s.jobs)
			w.r.s.mu.Unlock()
			list, _ := w.r.quota.List(context.Background())
			if left != 0 || len(list.Reservations) != 0 {
				t.Fatalf("all jobs gone: %d job records and %d reservations left", left, len(list.Reservations))
			}
		})
	}
}

// The check above fails when a bind skips its reservation: tasks bound
// around the scheduler (as a scheduler without the rule would) beyond the
// queue's capability are reported, from the pods alone.
func TestQuotaCheckFailsWhenABindSkipsItsReservation(t *testing.T) {
	w := newWorld(t)
	specs := []api.QueueSpec{{Name: "org", Capability: mustLimit(t, 3)}, {Name: "q", Parent: "org"}}
	if err := w.r.quota.setQueues(specs); err != nil {
		t.Fatal(err)
	}
	tree, _ := api.BuildTree(specs)
	w.r.s.SetTree(tree)
	w.r.node("n1", 16)
	w.jobs["d"] = &wJob{job: api.Job{Namespace: "ns", Name: "d", UID: "d-uid", Queue: "q", MinMember: 1}}
	w.r.c.AddOrUpdateJob(w.jobs["d"].job)
	w.addTasks("d", 4, 1, "", 0)
	// Reserve only one task, then bind all four behind the scheduler's back.
	if _, err := w.r.quota.Reserve(context.Background(), wire.JobRef{Namespace: "ns", Name: "d", UID: "d-uid"}, "q", api.NewResource(1000, 0, nil)); err != nil {
		t.Fatal(err)
	}
	for _, uid := range w.jobs["d"].tasks {
		tk := w.tasks[uid]
		if err := w.r.binder.Bind(context.Background(), tk, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.check(); !strings.Contains(got, "OVERRUN queue org: cpu over capability by 1000") {
		t.Fatalf("check = %q, want the parent's overrun by 1 CPU", got)
	}
	if got := w.overCover(); !strings.Contains(got, "job d binds") {
		t.Fatalf("coverage check = %q, want job d reported", got)
	}
}

func mustLimit(t *testing.T, cpus int64) api.Limit {
	t.Helper()
	l, err := api.NewLimit(map[string]int64{api.CPU: cpus * 1000})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// overCover reports a job whose bound, unfinished tasks (from the binder's
// record) ask more than its reservation holds.
func (w *world) overCover() string {
	list, _ := w.r.quota.List(context.Background())
	res := map[string]api.Resource{}
	for _, r := range list.Reservations {
		res[r.Job.UID] = r.Amount
	}
	binds := w.r.binder.Binds()
	names := make([]string, 0, len(w.jobs))
	for n := range w.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		wj := w.jobs[n]
		use := api.Resource{}
		for _, uid := range wj.tasks {
			if _, ok := binds[uid]; ok && !w.done[uid] {
				use, _ = use.Add(taskQuota(w.tasks[uid]))
			}
		}
		if use.IsZero() {
			continue
		}
		if amt := res[wj.job.UID]; !use.LessEqual(amt) {
			return fmt.Sprintf("job %s binds %s with a reservation of %s", n, use, amt)
		}
	}
	return ""
}

func (w *world) randomJob(rng *rand.Rand, queue string) string {
	name := fmt.Sprint("j", w.serial)
	cpu := int64(1 + rng.IntN(2))
	var min, tasks int
	var minres int64 = -1
	implicit := false
	kind := rng.IntN(4)
	switch kind {
	case 0: // gang
		tasks = 1 + rng.IntN(3)
		min = tasks
	case 1: // Deployment
		tasks, min, implicit = 2+rng.IntN(6), 1, true
	case 2: // elastic, minResources smaller than the pods
		tasks, min, minres = 3+rng.IntN(4), 1+rng.IntN(2), 1
	case 3: // batch Job: first wave; moreTasksRandom adds the next
		tasks, min, implicit = 2, 1, true
	}
	j := api.Job{Namespace: "ns", Name: name, UID: name + "-uid", Queue: queue, MinMember: int32(min), Phase: api.JobPending,
		Implicit: implicit, Created: w.r.clock().Add(time.Duration(w.serial) * time.Millisecond)}
	if minres >= 0 {
		r := api.NewResource(minres, 0, nil)
		j.MinResources = &r
	}
	w.serial++
	w.jobs[name] = &wJob{job: j}
	w.r.c.AddOrUpdateJob(j)
	w.addTasks(name, tasks, cpu, "", 0)
	return fmt.Sprintf("job %s kind %d queue %s tasks %d min %d cpu %d", name, kind, queue, tasks, min, cpu)
}

// boundLive lists bound, unfinished tasks in a stable order.
func (w *world) boundLive() []string {
	var out []string
	for uid := range w.r.binder.Binds() {
		if !w.done[uid] {
			out = append(out, uid)
		}
	}
	sort.Strings(out)
	return out
}

func (w *world) finishRandom(rng *rand.Rand) string {
	live := w.boundLive()
	if len(live) == 0 {
		return "finish none"
	}
	uid := live[rng.IntN(len(live))]
	tk := *w.tasks[uid]
	tk.NodeName, tk.Phase = w.r.binder.Binds()[uid], api.TaskSucceeded
	w.r.c.AddOrUpdateTask(tk)
	w.done[uid] = true
	return "finish " + uid
}

func (w *world) jobNames() []string {
	names := make([]string, 0, len(w.jobs))
	for n := range w.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (w *world) deleteRandom(rng *rand.Rand) string {
	names := w.jobNames()
	if len(names) == 0 {
		return "delete none"
	}
	n := names[rng.IntN(len(names))]
	wj := w.jobs[n]
	for _, uid := range wj.tasks {
		w.r.c.DeleteTask(uid)
		w.done[uid] = true
	}
	w.r.c.DeleteJob(wj.job.UID)
	delete(w.jobs, n)
	return "delete " + n
}

func (w *world) moreTasksRandom(rng *rand.Rand) string {
	names := w.jobNames()
	if len(names) == 0 {
		return "tasks none"
	}
	n := names[rng.IntN(len(names))]
	w.addTasks(n, 1+rng.IntN(2), 1, "", 0)
	return "more tasks " + n
}
