package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
)

// result is what one run measured.
type result struct {
	mode string
	sys  sysSpec
	pods int // created
	// latencies (seconds, ascending) and bind times (seconds since the
	// clock started) of the bound pods.
	latencies, bindTimes []float64
	wall                 time.Duration // clock start to the last bind (or the timeout)
	podsPerSec           float64
	createPerSec         float64
	// cpu is the system's CPU time over the clock; for an in-process
	// system it includes the harness. harnessCPU is the bench process's
	// CPU over the same time when the system runs as a process of its own.
	cpu, harnessCPU time.Duration
	inProcess       bool
	peakRSSKiB      int64
	notes           []string // the system's own (instance.finish)
	// restarts and coldStart: see finished.
	restarts     []report.Restart
	coldStart    *report.Restart
	boundTwice   int64 // pods whose nodeName changed once set
	doubleBooked int64 // nodes whose pods request more CPU than allocatable
	// load is the machine's 1-minute load average from the clock start
	// to the end of the wait for binds.
	load procstat.LoadStats
	// makingP99 and fromLastP99 (seconds; stream mode, jobs of several
	// pods only, else 0) split create→bound at the create call of the
	// job's last pod (jobMadeNote).
	makingP99, fromLastP99 float64
	// spent is what each part of the machine spent over the run (empty
	// when not read).
	spent cpuSpent
}

func (r result) bound() int { return len(r.latencies) }

// msPerPod is where the machine's CPU went per bound pod, in ms: the whole
// machine, the API server, and the system with the harness beside it (for
// an in-process system its CPU already includes the harness's). ok is
// false when the machine's or the API server's was not read.
func (r result) msPerPod() (machine, api, system float64, ok bool) {
	n := r.bound()
	apiCPU := r.spent.parts[apiServerPart]
	if n == 0 || r.spent.machine == 0 || apiCPU == 0 {
		return 0, 0, 0, false
	}
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(n) }
	return per(r.spent.machine), per(apiCPU), per(r.cpu + r.harnessCPU), true
}

// bindWatch records, from an informer on the run's namespace, when each pod
// was created (by the harness) and first seen bound. Safe for concurrent use.
type bindWatch struct {
	mu      sync.Mutex
	created map[types.UID]time.Time
	bound   map[types.UID]time.Time
	node    map[types.UID]string
	seen    map[types.UID]time.Time // every pod the informer has seen, and when first
	twice   int64
	// lastOfJob is, for each pod of a job of several pods (a workload's
	// job), when the create call of the job's last pod was made: a gang
	// can bind no sooner.
	lastOfJob map[types.UID]time.Time
}

// noteCreated records when the create call of a pod was made.
func (w *bindWatch) noteCreated(uid types.UID, at time.Time) {
	w.mu.Lock()
	w.created[uid] = at
	w.mu.Unlock()
}

// noteJobCreated records that the create call of the last of a job's pods
// (uids) was made at last.
func (w *bindWatch) noteJobCreated(uids []types.UID, last time.Time) {
	w.mu.Lock()
	for _, uid := range uids {
		w.lastOfJob[uid] = last
	}
	w.mu.Unlock()
}

func newBindWatch() *bindWatch {
	return &bindWatch{created: map[types.UID]time.Time{}, bound: map[types.UID]time.Time{},
		node: map[types.UID]string{}, seen: map[types.UID]time.Time{}, lastOfJob: map[types.UID]time.Time{}}
}

func (w *bindWatch) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[p.UID]; !ok {
		w.seen[p.UID] = now
	}
	if p.Spec.NodeName == "" {
		return
	}
	if prev, ok := w.node[p.UID]; !ok {
		w.node[p.UID], w.bound[p.UID] = p.Spec.NodeName, now
	} else if prev != p.Spec.NodeName {
		w.node[p.UID] = p.Spec.NodeName
		w.twice++
	}
}

func (w *bindWatch) counts() (seen, bound int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen), len(w.bound)
}

// newRunSpec is the index-th run of the system named sys in mode: a
// namespace and a schedulerName of its own.
func newRunSpec(index int, mode, sys string, pods int) runSpec {
	return runSpec{
		index:     index,
		namespace: fmt.Sprintf("bench-%d-%s-%s", index, mode, sys),
		schedName: fmt.Sprintf("bench-%s-%s", mode, sys),
		pods:      pods,
	}
}

// runOne runs sys once in mode on its own namespace, then deletes the pods.
func runOne(ctx context.Context, o options, env *benchEnv, mode string, sys sysSpec, index int) (result, error) {
	run := newRunSpec(index, mode, sys.name, o.pods)
	plan, err := o.plan(run)
	if err != nil {
		return result{}, err
	}
	if err := createNamespace(ctx, env, run, plan.groups); err != nil {
		return result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := newBindWatch()
	f := informers.NewSharedInformerFactoryWithOptions(env.cs, 0, informers.WithNamespace(run.namespace))
	// A pod may already be bound when the informer first sees it.
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.onPod, UpdateFunc: func(_, obj any) { w.onPod(obj) }}); err != nil {
		return result{}, err
	}
	f.Start(rctx.Done())
	defer func() { cancel(); f.Shutdown() }() // Shutdown waits for the informer, which waits for rctx
	f.WaitForCacheSync(rctx.Done())

	r := result{mode: mode, sys: sys, pods: o.pods}
	var inst *instance
	var start time.Time
	// mon prints progress and samples the load from the clock start.
	var mon *runMonitor
	defer func() { mon.stop() }()
	monitor := func() {
		mon = startMonitor(os.Stderr, progressEvery, sys.name+" "+mode, o.pods, start, func() int { _, b := w.counts(); return b })
	}
	var cpu0, harness0 time.Duration
	var meter *cpuMeter
	var idleNote string
	// profiles are the CPU profiles taken from the clock's start (stream
	// runs).
	var profiles profileSet
	defer func() { cancel(); profiles.wait() }() // no goroutine outlives the run
	var api0 apiCounts
	readAPI := func() apiCounts {
		c, err := readAPICounts(rctx, env.cs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "realbench:", err) // the run goes on without the figure
		}
		return c
	}
	stopped := false
	stop := func() {
		if inst != nil && !stopped {
			stopped = true
			r.peakRSSKiB = inst.stop()
		}
	}
	defer stop()
	quietNote, err := o.quiet.wait(rctx)
	if err != nil {
		return result{}, err
	}
	switch mode {
	case modeStream:
		var err error
		if inst, err = sys.impl.start(rctx, env, run); err != nil {
			return result{}, err
		}
		if o.idleWindow > 0 {
			apiIdle0, t0 := readAPI(), time.Now()
			idle, err := idleRates(rctx, o.idleWindow, env.controlPIDs, inst.cpu, inst.inProcess)
			if err != nil {
				return result{}, err
			}
			idleNote = idle.note(o.idleWindow)
			if n := apiRatesNote(apiIdle0, readAPI(), time.Since(t0).Seconds(), "the same window, the whole API server"); n != "" {
				idleNote += "; " + n
			}
		}
		api0 = readAPI()
		cpu0, harness0, start = inst.cpu(), procstat.CPU(), time.Now()
		meter = startCPUMeter(env.controlPIDs)
		if inst.clockStarted != nil {
			inst.clockStarted(rctx, &profiles)
		}
		if env.apiProfileSeconds > 0 {
			path := env.profilePath(run, "kube-apiserver")
			profiles.take(rctx, func(ctx context.Context) string {
				return fetchAPIServerProfile(ctx, env.cs, env.apiProfileSeconds, path)
			})
		}
		monitor()
		createDur, err := createPods(rctx, podCreator(env.cs, run.namespace), o.creators, plan, w, o.serialJobPods)
		if err != nil {
			return result{}, err
		}
		r.createPerSec = float64(o.pods) / createDur.Seconds()
	case modeBacklog:
		createDur, err := createPods(rctx, podCreator(env.cs, run.namespace), o.creators, plan, w, o.serialJobPods)
		if err != nil {
			return result{}, err
		}
		r.createPerSec = float64(o.pods) / createDur.Seconds()
		// The clock must not start before the watch has caught up.
		if err := waitFor(rctx, time.Minute, func() (bool, error) { seen, _ := w.counts(); return seen >= o.pods, nil }); err != nil {
			return result{}, fmt.Errorf("watch did not see every created pod: %w", err)
		}
		api0 = readAPI()
		harness0, start = procstat.CPU(), time.Now()
		meter = startCPUMeter(env.controlPIDs)
		monitor()
		if inst, err = sys.impl.start(rctx, env, run); err != nil {
			return result{}, err
		}
	}
	err = waitFor(rctx, o.timeout, func() (bool, error) {
		_, bound := w.counts()
		return bound >= o.pods, inst.check()
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// Report what was bound by the timeout.
	case err != nil:
		return result{}, err
	}
	r.wall = time.Since(start)
	r.load = mon.stop()
	spent := meter.stop()
	var api1 apiCounts
	if api0 != nil {
		api1 = readAPI()
	}
	r.cpu, r.inProcess = inst.cpu()-cpu0, inst.inProcess
	if !inst.inProcess {
		r.harnessCPU = procstat.CPU() - harness0
	}
	// The profiles end before finish, which may restart a shard.
	r.notes = profiles.wait()
	if inst.finish != nil {
		f, err := inst.finish(rctx)
		if err != nil {
			return result{}, err
		}
		r.notes = append(r.notes, f.notes...)
		r.restarts, r.coldStart = f.restarts, f.coldStart
	}
	r.spent = spent
	if _, bound := w.counts(); bound > 0 {
		if n := spent.note(bound, r.cpu, r.harnessCPU); n != "" {
			r.notes = append(r.notes, n)
		}
	}
	if quietNote != "" {
		r.notes = append(r.notes, quietNote)
	}
	if idleNote != "" {
		r.notes = append(r.notes, idleNote)
	}
	stop()
	if api1 != nil {
		_, bound := w.counts()
		what := "the whole API server from the clock's start to the last bind, pod creation included"
		if mode == modeBacklog {
			what = "the whole API server from the clock's start to the last bind; the pods were created before it"
		}
		for _, n := range []string{apiWritesNote(api0, api1, bound, what), apiReadsNote(api0, api1, bound, what), apiWatchEventsNote(api0, api1, bound, what)} {
			if n != "" {
				r.notes = append(r.notes, n)
			}
		}
	}

	w.mu.Lock()
	var last time.Duration
	for uid, b := range w.bound {
		from := start
		if mode == modeStream {
			c, ok := w.created[uid]
			if !ok {
				continue // its create call failed after the pod was stored
			}
			from = c
		}
		r.latencies = append(r.latencies, b.Sub(from).Seconds())
		r.bindTimes = append(r.bindTimes, b.Sub(start).Seconds())
		last = max(last, b.Sub(start))
	}
	r.boundTwice = w.twice
	var seenLag, fromLast, making []float64
	if mode == modeStream {
		for uid, c := range w.created {
			if at, ok := w.seen[uid]; ok {
				seenLag = append(seenLag, at.Sub(c).Seconds())
			}
			if l, ok := w.lastOfJob[uid]; ok {
				making = append(making, l.Sub(c).Seconds())
				if b, ok := w.bound[uid]; ok {
					fromLast = append(fromLast, b.Sub(l).Seconds())
				}
			}
		}
	}
	w.mu.Unlock()
	if n := seenLagNote(seenLag); n != "" {
		r.notes = append(r.notes, n)
	}
	if n := jobMadeNote(making, fromLast); n != "" { // sorts both
		r.notes = append(r.notes, n)
		r.makingP99, r.fromLastP99 = report.Percentile(making, 99), report.Percentile(fromLast, 99)
	}
	slices.Sort(r.latencies)
	slices.Sort(r.bindTimes)
	if len(r.latencies) == o.pods {
		r.wall = last
	}
	if last > 0 {
		r.podsPerSec = float64(len(r.latencies)) / last.Seconds()
	}
	if r.doubleBooked, err = doubleBookedNodes(ctx, env.cs); err != nil {
		return result{}, fmt.Errorf("check nodes: %w", err)
	}
	if err := deletePods(ctx, env.cs, run.namespace); err != nil {
		return result{}, fmt.Errorf("delete the run's pods: %w", err)
	}
	return r, nil
}

// createNamespace creates the run's namespace and its PodGroups (before
// the clock starts).
func createNamespace(ctx context.Context, env *benchEnv, run runSpec, groups []*schedv1beta1.PodGroup) error {
	if _, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: run.namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	vc, err := volcano.NewForConfig(env.rest)
	if err != nil {
		return err
	}
	for _, pg := range groups {
		if _, err := vc.SchedulingV1beta1().PodGroups(run.namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create PodGroup %s: %w", pg.Name, err)
		}
	}
	return nil
}

// createPods creates the plan's pods (each with create, the API server's
// create call) with creators workers and records when each call was made.
// It returns how long it took. Each worker takes the next piece of work and
// creates its pods one after the other: with serial a piece is a unit (one
// pod, or every pod of a workload's job); otherwise it is one pod, the
// units' pods in order, so that a job's pods are created side by side, as
// a job controller creates them.
func createPods(ctx context.Context, create func(context.Context, *corev1.Pod) (*corev1.Pod, error), creators int, plan podPlan, w *bindWatch, serial bool) (time.Duration, error) {
	start := time.Now()
	type made struct {
		mu   sync.Mutex
		uids []types.UID
		last time.Time // the latest create call of the unit's pods
		left int
	}
	units := make([]made, len(plan.units))
	type slot struct{ unit, pod int }
	var work [][]slot
	for u, pods := range plan.units {
		units[u].left = len(pods)
		for i := range pods {
			if serial && i > 0 {
				work[len(work)-1] = append(work[len(work)-1], slot{u, i})
			} else {
				work = append(work, []slot{{u, i}})
			}
		}
	}
	// createOne creates one pod and, once it was its unit's last, records the
	// job's last create call.
	createOne := func(sl slot) error {
		p := plan.units[sl.unit][sl.pod]
		t0 := time.Now()
		out, err := create(ctx, p)
		if err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		w.noteCreated(out.UID, t0)
		m := &units[sl.unit]
		m.mu.Lock()
		m.uids = append(m.uids, out.UID)
		if t0.After(m.last) {
			m.last = t0
		}
		m.left--
		done := m.left == 0 && len(m.uids) > 1
		m.mu.Unlock()
		if done {
			w.noteJobCreated(m.uids, m.last)
		}
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, creators)
	for c := 0; c < creators; c++ {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(work); i = int(next.Add(1)) - 1 {
				for _, sl := range work[i] {
					if err := createOne(sl); err != nil {
						errs[c] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// podCreator is the API server's create call for pods in namespace,
// retried as createRetrying says.
func podCreator(cs kubernetes.Interface, namespace string) func(context.Context, *corev1.Pod) (*corev1.Pod, error) {
	return func(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
		return createRetrying(ctx, createBackoff(),
			func(ctx context.Context) (*corev1.Pod, error) {
				return cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
			},
			func(ctx context.Context) (*corev1.Pod, error) {
				return cs.CoreV1().Pods(namespace).Get(ctx, p.Name, metav1.GetOptions{})
			})
	}
}

// createBackoff paces the retries of one create (a pod's, a PodGroup's):
// about a minute in all before the run fails.
func createBackoff() wait.Backoff {
	return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 10, Cap: 10 * time.Second}
}

// createRetrying makes one object's create call (a pod's, or the chaos
// mode's PodGroups'), and makes it again, paced by b, when a slow or
// overloaded API server fails it for itself: a lost connection (at
// 250,000 pods, every create in flight on the HTTP/2 connection failed at
// once and ended a run of an hour), a timeout, 429 or 5xx. A create refused
// for what it asks (any other 4xx) is not retried. A retry answered
// AlreadyExists means an earlier attempt landed and its answer was lost:
// the object is read back with get and the create succeeded.
func createRetrying[T any](ctx context.Context, b wait.Backoff, create, get func(context.Context) (T, error)) (T, error) {
	var out, none T
	var last error
	attempts := 0
	err := wait.ExponentialBackoffWithContext(ctx, b, func(ctx context.Context) (bool, error) {
		attempts++
		p, err := create(ctx)
		if attempts > 1 && apierrors.IsAlreadyExists(err) {
			p, err = get(ctx)
		}
		switch {
		case err == nil:
			out = p
			return true, nil
		case ctx.Err() != nil || !serverFault(err):
			return false, err
		}
		last = err
		return false, nil
	})
	if err != nil && last != nil && ctx.Err() == nil && wait.Interrupted(err) {
		return none, fmt.Errorf("%w (%d attempts)", last, attempts)
	}
	return out, err
}

// serverFault reports whether err is the API server's or the connection's
// fault rather than the request's: 429, 5xx, or no answer at all.
func serverFault(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
	}
	return true
}

// waitFor polls done every 50 ms until it reports true or an error, ctx
// ends, or timeout passes (context.DeadlineExceeded).
func waitFor(ctx context.Context, timeout time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// doubleBookedNodes counts the nodes whose pods (every namespace, terminal
// pods excluded) request more CPU than the node's allocatable.
func doubleBookedNodes(ctx context.Context, cs kubernetes.Interface) (int64, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	requested := map[string]int64{} // node → milli-CPU
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			requested[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	var n int64
	for i := range nodes.Items {
		nd := &nodes.Items[i]
		if requested[nd.Name] > nd.Status.Allocatable.Cpu().MilliValue() {
			n++
		}
	}
	return n, nil
}

// jobMadeNote splits create→bound for the pods of jobs of several pods
// (seconds): making is each pod's wait, from its create call, for the
// create call of its job's last pod (a gang binds no sooner); fromLast is from that
// call to the pod's bind, what the scheduler took once the whole job
// existed.
func jobMadeNote(making, fromLast []float64) string {
	if len(making) == 0 {
		return ""
	}
	slices.Sort(making)
	slices.Sort(fromLast)
	return fmt.Sprintf("pods of jobs of several pods (%d): create call → create call of the job's last pod p50 %.3f s, p99 %.3f s, max %.3f s; "+
		"that last create call → bound (the scheduler's part once the whole job exists) p50 %.3f s, p99 %.3f s, max %.3f s",
		len(making), report.Percentile(making, 50), report.Percentile(making, 99), report.Percentile(making, 100),
		report.Percentile(fromLast, 50), report.Percentile(fromLast, 99), report.Percentile(fromLast, 100))
}

// seenLagNote gives the time from a pod's create call to the harness's
// watch first seeing it, in seconds: how far behind the API server's
// watches ran (a scheduler's informer watches the same server), to set
// beside create→bound.
func seenLagNote(lag []float64) string {
	if len(lag) == 0 {
		return ""
	}
	slices.Sort(lag)
	return fmt.Sprintf("create call → pod first seen by the harness's watch: p50 %.3f s, p99 %.3f s, max %.3f s",
		report.Percentile(lag, 50), report.Percentile(lag, 99), report.Percentile(lag, 100))
}
