package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/wire"
)

// Scenario files for a job's quota lifecycle (testdata/lifecycle/*.txt),
// one per case of the quota-lifecycle issue: the real scheduler over a real
// cache and the coordinator's real Ledger (behind fakeQuota), a virtual
// clock, and a small world the commands change. The files are datadriven
// (github.com/cockroachdb/datadriven) directives: run with datadriven's
// -rewrite flag to replace the expected output.
//
// Commands:
//
//	queue name=Q [parent=P] [cpu=N] [deserved=N] [noreclaim] [dequeue=traverse] [closed]
//	                                                       declare or change a queue (capability and deserved share in CPUs;
//	                                                       noreclaim: Volcano's reclaimable false; closed: Volcano's state Closed)
//	node name=N cpu=C                                      a node with C CPUs
//	job name=J [queue=Q] [min=M] [tasks=T] [cpu=C] [minres=MILLICPU] [implicit] [mintask=S:N,...] [spec=S]
//	    [class=NAME:VALUE] [prio=P] [protected]            a PodGroup and T pending tasks of C CPUs (of task spec S);
//	                                                       class: its priorityClassName and the value the edge resolved;
//	                                                       prio: the tasks' priority (pod spec.priority);
//	                                                       protected: volcano.sh/preemptable "false"
//	tasks job=J n=N [cpu=C] [spec=S]                       N more pending tasks (a Job controller's next pods)
//	edit job=J [min=M] [minres=MILLICPU] [queue=Q]         the PodGroup's spec changes in place
//	finish job=J n=N                                       N bound tasks succeed
//	delete job=J                                           the PodGroup and its tasks are gone
//	delete-pods job=J [n=N]                                N of its unfinished pods (all by default) are gone, the PodGroup stays
//	hold queue=Q [off]                                     this shard holds the queue's ownership record again (off: it does not)
//	terminate job=J                                        the PodGroup is gone, its bound tasks are releasing
//	cycle [n=N]                                            N scheduling cycles, 100 ms apart
//	advance d=DURATION                                     the clock moves
//	restart                                                a new scheduler on the same cache and ledger (an owner that restarted)
//	reserve job=J cpu=C                                    someone else reserved for J (a previous owner)
//	state                                                  what is bound, what is reserved, each queue's use from the pods
//
// The shard evicts (Evictor): an evicted task is gone after the cycle that
// evicted it, as a pod deleted at once; state lists what was evicted.
//
// Every command that changes the world is followed by a check of the quota
// rule from the truth (the tasks bound and not finished, by the binder's
// record): a violation is printed as OVERRUN in the output.
func TestLifecycleScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/lifecycle", func(t *testing.T, path string) {
		w := newWorld(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return w.run(t, d)
		})
	})
}

// TestLifecycleCheckRunsAfterCommands shows the quota check at work in
// the scenario driver: tasks bound behind the scheduler's back (as a
// scheduler without the rule would) put the queue over its capability, and
// the next command that changes the world prints the overrun, so an
// expectation of "ok" fails; once a task finishes the check is ok again.
func TestLifecycleCheckRunsAfterCommands(t *testing.T) {
	w := newWorld(t)
	run := func(t *testing.T, d *datadriven.TestData) string { return w.run(t, d) }
	w.begin(t, "queue name=q cpu=2", "node name=n1 cpu=8", "job name=d queue=q min=1 tasks=3 cpu=1")
	for _, uid := range w.jobs["d"].tasks {
		if err := w.r.binder.Bind(context.Background(), w.tasks[uid], "n1"); err != nil {
			t.Fatal(err)
		}
	}
	datadriven.RunTestFromString(t, `
tasks job=d n=1
----
OVERRUN queue q: cpu over capability by 1000

finish job=d n=1
----
ok
`, run)
}

// world is a scenario's state around one rig.
type world struct {
	r       *rig
	status  *recStatus
	specs   map[string]api.QueueSpec
	jobs    map[string]*wJob
	tasks   map[string]*api.Task // by UID: every task made
	done    map[string]bool      // tasks finished
	serial  int
	evictor *fakeEvictor
	// seenCalls: the quota calls the last "calls" command read up to.
	seenCalls int
}

type wJob struct {
	job   api.Job
	tasks []string // UIDs, in creation order
}

// begin runs commands, one each, that are expected to answer "ok" (a
// scenario's set-up).
func (w *world) begin(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		datadriven.RunTestFromString(t, c+"\n----\nok\n", func(t *testing.T, d *datadriven.TestData) string { return w.run(t, d) })
	}
}

func newWorld(t *testing.T) *world {
	w := &world{r: newRig(t, "shard-o"), specs: map[string]api.QueueSpec{}, jobs: map[string]*wJob{}, tasks: map[string]*api.Task{}, done: map[string]bool{},
		status: &recStatus{groups: map[string]api.JobStatus{}}, evictor: &fakeEvictor{}}
	w.r.s.deps.Status = w.status
	w.r.evictor = w.evictor
	w.r.s.deps.Evictor = w.evictor
	w.r.afterCycle = w.evictionsDone
	return w
}

// fakeEvictor records the evictions asked for.
type fakeEvictor struct {
	mu      sync.Mutex
	pending []string // task UIDs evicted, not yet gone
	all     []string // task names evicted, in order
}

func (f *fakeEvictor) Evict(_ context.Context, t *api.Task, _, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, t.UID)
	f.all = append(f.all, t.Name)
	return nil
}

func (f *fakeEvictor) Note(*api.Job, string, string) {}

// evictionsDone makes the tasks evicted during a cycle gone.
func (w *world) evictionsDone() {
	w.evictor.mu.Lock()
	gone := w.evictor.pending
	w.evictor.pending = nil
	w.evictor.mu.Unlock()
	for _, uid := range gone {
		if !w.done[uid] {
			w.r.c.DeleteTask(uid)
			w.done[uid] = true
		}
	}
}

// recStatus keeps the last PodGroup status handed to it, per UID.
type recStatus struct {
	mu     sync.Mutex
	groups map[string]api.JobStatus
}

func (r *recStatus) SetQueue(string, api.QueueStatus) {}

func (r *recStatus) SetPodGroup(_, _, uid string, st api.JobStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[uid] = st
}

func (r *recStatus) ForgetPodGroup(string) <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// phase is the last phase written for uid, with the reason of its first
// condition.
func (r *recStatus) phase(uid string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.groups[uid]
	if !ok {
		return "-"
	}
	out := string(st.Phase)
	if len(st.Conditions) > 0 {
		out += "/" + st.Conditions[0].Reason
	}
	return out
}

func argInt(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	t.Helper()
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, err := strconv.ParseInt(a.Vals[0], 10, 64)
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", d.Pos, key, a.Vals[0], err)
			}
			return v
		}
	}
	return def
}

func argStr(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) > 0 {
				return a.Vals[0]
			}
			return "true"
		}
	}
	return def
}

func (w *world) run(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	switch d.Cmd {
	case "queue":
		spec := api.QueueSpec{Name: argStr(d, "name", ""), Parent: argStr(d, "parent", ""), DequeueStrategy: argStr(d, "dequeue", ""),
			Closed: argStr(d, "closed", "") != "", NotReclaimable: argStr(d, "noreclaim", "") != ""}
		if c := argInt(t, d, "deserved", -1); c >= 0 {
			spec.Deserved = api.NewResource(c*1000, 0, nil)
		}
		if c := argInt(t, d, "cpu", -1); c >= 0 {
			l, err := api.NewLimit(map[string]int64{api.CPU: c * 1000})
			if err != nil {
				return err.Error()
			}
			spec.Capability = l
		}
		w.specs[spec.Name] = spec
		var specs []api.QueueSpec
		for _, s := range w.specs {
			specs = append(specs, s)
		}
		sort.Slice(specs, func(a, b int) bool { return specs[a].Name < specs[b].Name })
		if err := w.r.quota.setQueues(specs); err != nil {
			return err.Error()
		}
		tree, err := api.BuildTree(specs)
		if err != nil {
			return err.Error()
		}
		w.r.s.SetTree(tree)
		return "ok"
	case "node":
		w.r.node(argStr(d, "name", ""), argInt(t, d, "cpu", 8))
		return "ok"
	case "job":
		name := argStr(d, "name", "")
		j := api.Job{Namespace: "ns", Name: name, UID: name + "-uid" + strconv.Itoa(w.serial), Queue: argStr(d, "queue", "q"),
			MinMember: int32(argInt(t, d, "min", 1)), Phase: api.JobPending, Implicit: argStr(d, "implicit", "") != "",
			Protected: argStr(d, "protected", "") != "",
			Created:   w.r.clock().Add(time.Duration(w.serial) * time.Millisecond)} // in the order declared
		w.serial++
		if m := argInt(t, d, "minres", -1); m >= 0 {
			r := api.NewResource(m, 0, nil)
			j.MinResources = &r
		}
		if c := argStr(d, "class", ""); c != "" {
			k, v, _ := strings.Cut(c, ":")
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: class %q: %v", d.Pos, c, err)
			}
			j.PriorityClass, j.Priority = k, int32(n)
		}
		if mt := argStr(d, "mintask", ""); mt != "" {
			j.MinTaskMember = map[string]int32{}
			for _, kv := range strings.Split(mt, ",") {
				k, v, _ := strings.Cut(kv, ":")
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s: mintask %q: %v", d.Pos, kv, err)
				}
				j.MinTaskMember[k] = int32(n)
			}
		}
		w.jobs[name] = &wJob{job: j}
		w.r.c.AddOrUpdateJob(j)
		w.addTasks(name, int(argInt(t, d, "tasks", 1)), argInt(t, d, "cpu", 1), argStr(d, "spec", ""), int32(argInt(t, d, "prio", 0)))
		// protectpods=N: the job's last N pods say volcano.sh/preemptable
		// "false" (the pod, not the PodGroup).
		if n := int(argInt(t, d, "protectpods", 0)); n > 0 {
			for _, uid := range w.jobs[name].tasks[max(len(w.jobs[name].tasks)-n, 0):] {
				w.tasks[uid].Protected = true
				w.r.c.AddOrUpdateTask(*w.tasks[uid])
			}
		}
		return w.check()
	case "edit":
		// The PodGroup's spec changes in place (a new version).
		wj := w.jobs[argStr(d, "job", "")]
		j := wj.job
		if m := argInt(t, d, "min", -1); m >= 0 {
			j.MinMember = int32(m)
		}
		if m := argInt(t, d, "minres", -1); m >= 0 {
			r := api.NewResource(m, 0, nil)
			j.MinResources = &r
		}
		if q := argStr(d, "queue", ""); q != "" {
			j.Queue = q
		}
		w.serial++
		j.ResourceVersion = strconv.Itoa(w.serial)
		wj.job = j
		w.r.c.AddOrUpdateJob(j)
		return w.check()
	case "tasks":
		name := argStr(d, "job", "")
		if w.jobs[name] == nil {
			return "no job " + name
		}
		w.addTasks(name, int(argInt(t, d, "n", 1)), argInt(t, d, "cpu", 1), argStr(d, "spec", ""), int32(argInt(t, d, "prio", 0)))
		return w.check()
	case "finish":
		n := int(argInt(t, d, "n", 1))
		if got := w.eachBound(argStr(d, "job", ""), n, func(tk *api.Task) {
			tk.Phase = api.TaskSucceeded
			w.done[tk.UID] = true
		}); got < n {
			return fmt.Sprintf("only %d bound tasks to finish", got)
		}
		return w.check()
	case "resize":
		// The first n bound, unfinished tasks of the job are resized in
		// place to cpu: the kubelet applied it, nobody asked the scheduler.
		n := int(argInt(t, d, "n", 1))
		req := api.NewResource(argInt(t, d, "cpu", 1)*1000, 0, map[string]int64{api.Pods: 1})
		if got := w.eachBound(argStr(d, "job", ""), n, func(tk *api.Task) {
			w.tasks[tk.UID].Request = req
			tk.Request, tk.Phase = req, api.TaskRunning
		}); got < n {
			return fmt.Sprintf("only %d bound tasks to resize", got)
		}
		return w.check()
	case "old-leader":
		// on: resizes are answered as by a leader that predates Bound.
		w.r.quota.mu.Lock()
		w.r.quota.noBound = argStr(d, "on", "") == "true"
		w.r.quota.mu.Unlock()
		return "ok"
	case "calls":
		// How many calls of op the job's reservation got since the last
		// "calls" (any op).
		op, uid := argStr(d, "op", ""), w.jobs[argStr(d, "job", "")].job.UID
		n := 0
		for _, c := range w.r.quota.Calls()[w.seenCalls:] {
			if c == op+" "+uid {
				n++
			}
		}
		w.seenCalls = len(w.r.quota.Calls())
		return fmt.Sprintf("%d %s calls", n, op)
	case "delete":
		name := argStr(d, "job", "")
		wj := w.jobs[name]
		for _, uid := range wj.tasks {
			w.r.c.DeleteTask(uid)
			w.done[uid] = true
		}
		w.r.c.DeleteJob(wj.job.UID)
		return w.check()
	case "delete-pods":
		// The job's pods are deleted (gone at once); its PodGroup stays.
		wj := w.jobs[argStr(d, "job", "")]
		n := argInt(t, d, "n", int64(len(wj.tasks)))
		for _, uid := range wj.tasks {
			if n > 0 && !w.done[uid] {
				w.r.c.DeleteTask(uid)
				w.done[uid] = true
				n--
			}
		}
		return w.check()
	case "hold":
		key := wire.QueueKey(argStr(d, "queue", ""))
		w.r.own.mu.Lock()
		if argStr(d, "off", "") != "" {
			w.r.own.notHeld[key] = true
		} else {
			delete(w.r.own.notHeld, key)
		}
		w.r.own.mu.Unlock()
		return "ok"
	case "terminate":
		// The PodGroup is deleted; its bound tasks are being deleted and
		// still hold their nodes (grace period); the unbound ones are gone.
		wj := w.jobs[argStr(d, "job", "")]
		binds := w.r.binder.Binds()
		for _, uid := range wj.tasks {
			if w.done[uid] {
				continue
			}
			if node, ok := binds[uid]; ok {
				tk := *w.tasks[uid]
				tk.NodeName, tk.Phase = node, api.TaskReleasing
				w.r.c.AddOrUpdateTask(tk)
				continue
			}
			w.r.c.DeleteTask(uid)
			w.done[uid] = true
		}
		w.r.c.DeleteJob(wj.job.UID)
		return w.check()
	case "cycle":
		w.r.cycles(t, int(argInt(t, d, "n", 1)))
		return w.check()
	case "advance":
		dur, err := time.ParseDuration(argStr(d, "d", "1s"))
		if err != nil {
			return err.Error()
		}
		w.r.advance(dur)
		return "ok"
	case "restart":
		w.r.restart(t)
		return "ok"
	case "reserve":
		wj := w.jobs[argStr(d, "job", "")]
		res, err := w.r.quota.Reserve(ctx, wire.JobRef{Namespace: "ns", Name: wj.job.Name, UID: wj.job.UID}, wj.job.Queue,
			api.NewResource(argInt(t, d, "cpu", 1)*1000, 0, nil))
		if err != nil {
			return err.Error()
		}
		return "reserved " + res.Reservation.Amount.String()
	case "state":
		return w.state()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func (w *world) addTasks(job string, n int, cpu int64, spec string, prio int32) {
	wj := w.jobs[job]
	// Never before its PodGroup (declared jobs are spaced by a millisecond
	// each): a finished pod older than its PodGroup is a predecessor's.
	created := w.r.clock()
	if created.Before(wj.job.Created) {
		created = wj.job.Created
	}
	for i := 0; i < n; i++ {
		k := len(wj.tasks)
		tk := &api.Task{Namespace: "ns", Name: fmt.Sprintf("%s-%d", job, k), UID: fmt.Sprintf("%s-t%d", wj.job.UID, k), Job: job,
			Implicit: wj.job.Implicit, Queue: wj.job.Queue, TaskSpec: spec,
			Request: api.NewResource(cpu*1000, 0, map[string]int64{api.Pods: 1}), Phase: api.TaskPending, SchedulerName: "volcano",
			Created: created, Priority: prio}
		w.tasks[tk.UID] = tk
		wj.tasks = append(wj.tasks, tk.UID)
		w.r.c.AddOrUpdateTask(*tk)
	}
}

// eachBound hands change a copy of each of the job's first n bound,
// unfinished tasks (on its node), in creation order, and gives the cache
// what change made of it; it returns how many it found.
func (w *world) eachBound(job string, n int, change func(*api.Task)) int {
	binds := w.r.binder.Binds()
	done := 0
	for _, uid := range w.jobs[job].tasks {
		node, bound := binds[uid]
		if done == n || !bound || w.done[uid] {
			continue
		}
		tk := *w.tasks[uid]
		tk.NodeName = node
		change(&tk)
		w.r.c.AddOrUpdateTask(tk)
		done++
	}
	return done
}

// usage is, per queue (every level), the requests of the tasks bound and
// not finished: the truth, from the binder's record, never from the ledger.
func (w *world) usage() map[string]api.Resource {
	tree := w.r.s.Tree()
	out := map[string]api.Resource{}
	for uid := range w.r.binder.Binds() {
		if w.done[uid] {
			continue
		}
		tk := w.tasks[uid]
		q := tk.Queue
		if wj := w.jobs[tk.Job]; wj != nil {
			q = wj.job.Queue // a pod counts in its PodGroup's queue, moved or not
		}
		path := []string{q}
		if tree != nil {
			if p, err := tree.Path(q); err == nil {
				path = p
			}
		}
		for _, l := range path {
			out[l], _ = out[l].Add(tk.Request.With(api.Pods, 0))
		}
	}
	return out
}

// check is "ok", or each level whose use from the pods is above its
// capability.
func (w *world) check() string {
	return strings.Join(overruns(w.r.s.Tree(), w.usage()), "\n")
}

// overruns lists the levels where use exceeds the capability.
func overruns(tree *api.Tree, use map[string]api.Resource) []string {
	var out []string
	if tree == nil {
		return []string{"ok"}
	}
	for _, q := range tree.Names() {
		spec, _ := tree.Get(q)
		if d, over, bad := spec.Capability.Excess(use[q]); bad {
			out = append(out, fmt.Sprintf("OVERRUN queue %s: %s over capability by %d", q, d, over))
		}
	}
	if len(out) == 0 {
		return []string{"ok"}
	}
	return out
}

func (w *world) state() string {
	var b strings.Builder
	binds := w.r.binder.Binds()
	names := make([]string, 0, len(w.jobs))
	for n := range w.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	res := map[string]wire.Reservation{}
	list, _ := w.r.quota.List(context.Background())
	for _, r := range list.Reservations {
		res[r.Job.UID] = r
	}
	for _, n := range names {
		wj := w.jobs[n]
		var bound, pending, done int
		for _, uid := range wj.tasks {
			switch _, ok := binds[uid]; {
			case w.done[uid]:
				done++
			case ok:
				bound++
			default:
				pending++
			}
		}
		r, ok := res[wj.job.UID]
		reserved := "none"
		if ok {
			reserved = fmt.Sprintf("%s (%s)", r.Amount.With(api.Pods, 0), r.State)
			if r.Queue != wj.job.Queue {
				reserved += " in queue " + r.Queue
			}
			if r.Evict != nil {
				reserved += " victim of " + r.Evict.By.Name
			}
		}
		fmt.Fprintf(&b, "job %s: bound=%d pending=%d done=%d reserved=%s phase=%s\n", n, bound, pending, done, reserved, w.status.phase(wj.job.UID))
		if len(wj.job.MinTaskMember) > 0 {
			by := map[string]int{}
			for _, uid := range wj.tasks {
				if _, ok := binds[uid]; ok && !w.done[uid] {
					by[w.tasks[uid].TaskSpec]++
				}
			}
			var parts []string
			for _, spec := range slices.Sorted(maps.Keys(wj.job.MinTaskMember)) {
				parts = append(parts, fmt.Sprintf("%s=%d/%d", spec, by[spec], wj.job.MinTaskMember[spec]))
			}
			fmt.Fprintf(&b, "  bound by task (of minTaskMember): %s\n", strings.Join(parts, " "))
		}
	}
	w.evictor.mu.Lock()
	if len(w.evictor.all) > 0 {
		fmt.Fprintf(&b, "evicted: %s\n", strings.Join(slices.Sorted(slices.Values(w.evictor.all)), " "))
	}
	w.evictor.mu.Unlock()
	use := w.usage()
	if tree := w.r.s.Tree(); tree != nil {
		for _, q := range tree.Names() {
			spec, _ := tree.Get(q)
			c := "unlimited"
			if v, set := spec.Capability.Get(api.CPU); set {
				c = api.FormatQuantity(api.CPU, v)
			}
			if use[q].IsZero() && c == "unlimited" {
				continue
			}
			fmt.Fprintf(&b, "queue %s: cpu used %s of %s\n", q, api.FormatQuantity(api.CPU, use[q].MilliCPU), c)
		}
	}
	b.WriteString(strings.Join(overruns(w.r.s.Tree(), use), "\n"))
	return b.String()
}

// restart replaces the rig's scheduler with a new one on the same cache,
// quota and fakes: everything the old one remembered is lost, as when a
// queue's owner restarts.
func (r *rig) restart(t *testing.T) {
	t.Helper()
	tree := r.s.Tree()
	r.stop()
	s := r.newScheduler(t, 2, r.s.deps.Status)
	s.SetTree(tree)
	r.s = s
	r.start(t)
}

// A running job admitted here has its tasks counted once and is then
// skipped by releaseGone and by placement (neither reads its counts), its
// steady mark carried from cycle to cycle, while nothing of it changes;
// each change ends the skip and has its effect in the next cycles: a task
// that finishes is counted in the status sent and its cover shrinks, a
// status forgotten is sent again, a PodGroup whose minMember rises past
// what is bound shows Unknown, a pod that comes is placed, and the last
// tasks finishing give the quota back.
func TestSteadyJobsAreSkippedUntilTheyChange(t *testing.T) {
	w := newWorld(t)
	// The queue status roll-up, which reads every job's counts every
	// statusEvery, is held off.
	w.r.s.lastStatus = w.r.clock().Add(time.Hour)
	run := func(t *testing.T, d *datadriven.TestData) string { return w.run(t, d) }
	w.begin(t, "queue name=q cpu=8", "node name=n1 cpu=8", "job name=g queue=q min=2 tasks=3 cpu=1", "cycle n=3")
	uid := w.jobs["g"].job.UID
	steady := func() bool {
		w.r.s.mu.Lock()
		defer w.r.s.mu.Unlock()
		r := w.r.s.jobs[uid]
		return r != nil && r.steady.cycle == w.r.s.stats.cycles.Load()
	}
	status := func() (api.JobStatus, bool) {
		w.status.mu.Lock()
		defer w.status.mu.Unlock()
		st, ok := w.status.groups[uid]
		return st, ok
	}
	expect := func(when string, phase api.JobPhase, running, succeeded int32) {
		t.Helper()
		st, ok := status()
		if !ok || st.Phase != phase || st.Running != running || st.Succeeded != succeeded {
			t.Fatalf("%s: status %+v (sent: %v), want %s with %d running and %d succeeded", when, st, ok, phase, running, succeeded)
		}
	}
	// counted reports whether the last cycle read the job's task counts
	// (every read goes through the cycle's memo).
	counted := func() bool {
		j, ok := w.r.s.snap.JobByUID(uid)
		_, read := w.r.s.summaries[j]
		return !ok || read
	}
	// Three cycles place, confirm and settle it; the fourth finds it quiet.
	datadriven.RunTestFromString(t, "cycle\n----\nok\n", run)
	if !steady() {
		t.Fatal("a running job with nothing changing is not marked steady")
	}
	if counted() {
		t.Fatal("a steady job's tasks were counted again")
	}
	expect("running", api.JobRunning, 3, 0)

	datadriven.RunTestFromString(t, "finish job=g n=1\n----\nok\n\ncycle\n----\nok\n", run)
	expect("a task finished", api.JobRunning, 2, 1)
	if !counted() {
		t.Fatal("the job's tasks were not counted in the cycle after one finished")
	}
	datadriven.RunTestFromString(t, "cycle n=2\n----\nok\n", run)
	if !steady() || counted() {
		t.Fatalf("two cycles after the change: steady %v, counted %v; want steady and not counted", steady(), counted())
	}

	w.r.s.mu.Lock()
	w.r.s.jobs[uid].phaseSent = phaseKey{}
	w.r.s.mu.Unlock()
	w.status.mu.Lock()
	delete(w.status.groups, uid)
	w.status.mu.Unlock()
	datadriven.RunTestFromString(t, "cycle\n----\nok\n", run)
	expect("its status forgotten", api.JobRunning, 2, 1)

	datadriven.RunTestFromString(t, "cycle n=2\n----\nok\n\nedit job=g min=3\n----\nok\n\ncycle\n----\nok\n", run)
	expect("minMember above the bound", api.JobUnknown, 2, 1)

	// Its cover shrank to what is bound, and a pod that comes is placed.
	datadriven.RunTestFromString(t, `
state
----
job g: bound=2 pending=0 done=1 reserved=cpu=2 (Confirmed) phase=Unknown
queue q: cpu used 2 of 8
queue root: cpu used 2 of unlimited
ok

cycle n=2
----
ok

tasks job=g n=1
----
ok

cycle n=2
----
ok

state
----
job g: bound=3 pending=0 done=1 reserved=cpu=3 (Confirmed) phase=Running
queue q: cpu used 3 of 8
queue root: cpu used 3 of unlimited
ok
`, run)

	datadriven.RunTestFromString(t, `
cycle n=2
----
ok

finish job=g n=3
----
ok

cycle
----
ok

state
----
job g: bound=0 pending=0 done=4 reserved=none phase=Completed
queue q: cpu used 0 of 8
ok
`, run)
	w.begin(t, "job name=k queue=q min=1 tasks=2 cpu=1", "cycle n=4")
	// A steady job is taken from its mark without a look-up while no job
	// of its UID changed; its PodGroup deleted, its quota goes back.
	kuid := w.jobs["k"].job.UID
	w.r.s.mu.Lock()
	km := w.r.s.jobs[kuid].steady
	w.r.s.mu.Unlock()
	if km.cycle != w.r.s.stats.cycles.Load() {
		t.Fatalf("job k not steady after four cycles: %+v", km)
	}
	w.begin(t, "delete job=k", "cycle")
	datadriven.RunTestFromString(t, `
state
----
job g: bound=0 pending=0 done=4 reserved=none phase=Completed
job k: bound=0 pending=0 done=2 reserved=none phase=Running
queue q: cpu used 0 of 8
ok
`, run)
}
