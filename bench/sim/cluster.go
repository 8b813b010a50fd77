package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/bench/workload"
	"github.com/shardsched/shardsched/cache"
)

// Cluster is the simulated API server and kubelets: the truth about nodes,
// pods and PodGroups, fanned out to every subscribed shard cache the way
// informers would deliver it (in order, per object). It checks the
// invariants on every write. Safe for concurrent use.
type Cluster struct {
	start time.Time
	now   atomic.Int64 // virtual clock at the start of the step, ns since start
	// stepWall, when not 0, is the wall time (Unix ns) the current step
	// started: the virtual clock then runs with the wall clock during the
	// step, so the time a step's cycles and binds take is charged to the
	// pods they bind.
	stepWall atomic.Int64

	mu      sync.Mutex
	lenders map[string]bool // reclaim scenario: lending leaves (guarded by mu)
	// lastBind is the wall time the last bind ended (its events in every
	// cache): a burst's placement throughput runs to it.
	lastBind time.Time
	caches   []*cache.Cache
	// timeCaches: fanout times each cache's update into cacheTime (a
	// virtual CPU per shard charges each shard its own cache's work).
	timeCaches bool
	cacheMu    sync.Mutex
	cacheTime  map[*cache.Cache]time.Duration
	// only, when set, is the one cache fanout updates at once; the
	// others' updates wait in held, in order, until Release (guarded by
	// mu).
	only     *cache.Cache
	held     map[*cache.Cache][]func(*cache.Cache)
	nodes    map[string]*simNode
	nodeList []string // creation order
	pods     map[string]*simPod
	// jobs are the workloads (Volcano jobs, Deployments, batch Jobs) by
	// the name of the PodGroup their pods carry; groups are the PodGroups
	// by UID, groupUIDs their UIDs by name. An implicit group exists only
	// once the scheduler created it, and outlives its workload until the
	// scheduler deletes it.
	jobs      map[string]*simJob
	groups    map[string]*simGroup
	groupUIDs map[string]string
	ends      endHeap // bound pods by end time
	// creates are the pods the Job controller will create (after
	// ControllerDelay), in time order.
	creates  []podCreate
	uid      int64
	gpuEvery int
	// bigPodCPU is the workload's largest pod (milli-CPU), for the
	// samples' count of the room left for such pods.
	bigPodCPU int64
	// queue paths (leaf first, root last) and capabilities of the tree the
	// run declares, for the quota invariant
	paths map[string][]string
	caps  map[string]api.Limit
	// deserved is each queue's deserved CPU (milli), where it sets one.
	deserved map[string]int64
	used     map[string]api.Resource // every queue level: requests of bound, unfinished pods
	// overruns are the first quota overruns seen (at binds and samples).
	overruns []Overrun
	// overrunsByKind counts overrunning binds by job kind.
	overrunsByKind map[string]int64
	// pendingCPU is the milli-CPU of pending pods per leaf queue;
	// pendingPods counts them all.
	pendingCPU  map[string]int64
	pendingPods int
	// queueWriters is who wrote each queue's status.
	queueWriters map[string]map[string]bool

	stats Stats
	lat   latencyHist // submit→bind, virtual
	// tails: per kind and size of job, how long its bound pods waited
	// (what the tail of lat is made of).
	tails map[jobClass]*classTail
	// latFree is the submit→bind latency of the pods of jobs never told
	// to wait for quota: the scheduler's own part of the tail.
	latFree latencyHist
	// slowWhy counts the bound pods that waited over 1 s by the kind of
	// reason their job was last given (waitKind).
	slowWhy map[string]int64
}

// ControllerDelay is how long the simulated Job controller takes to create
// a batch Job's next pod after one succeeds: longer than a step, so the
// scheduler sees the moment between two waves when nothing is pending.
const ControllerDelay = time.Second

// maxOverrunsKept bounds the overruns kept for the notes, per source.
const maxOverrunsKept = 5

// Stats are the cluster's counters.
type Stats struct {
	Binds, BindRefused, Events    int64
	QueueWrites, PodGroupWrites   int64
	DoubleBookedNodes             int64
	PodsBoundTwice, UnfencedBinds int64
	Submitted, Completed, Evicted int64
	// Reclaim (reclaim.go): pods evicted to give quota back, their CPU
	// (milli), and those of them in lending queues.
	ReclaimEvicted, ReclaimEvictedCPU, LenderEvictions int64
	// BelowShareEvictions counts pods evicted to give quota back from a
	// leaf queue whose bound pods then asked for no more CPU than its
	// deserved share (recounted from the pods): a victim that was not
	// above its share, which the reclaim rule forbids (a loop).
	BelowShareEvictions int64
	// QuotaOverruns counts, for every bind, each queue level (the pod's
	// leaf queue and every ancestor) that the bind left above its
	// capability in some dimension: requests of the bound, unfinished pods
	// of the queue's subtree, from the pods themselves.
	QuotaOverruns int64
	// QuotaOverrunSamples counts, at every CheckQuota (each sample), the
	// queue levels above capability in a recount over every pod.
	QuotaOverrunSamples int64
	// QuotaBooksMismatch counts queue levels whose running sum (kept at
	// binds and ends) differed from the recount: a bug in this model.
	QuotaBooksMismatch int64
	// Implicit PodGroups created and deleted through the Groups port;
	// GroupsDeletedUnderPods counts deletes of a group whose pods still
	// ran or waited (their pods would then wait forever).
	GroupsCreated, GroupsDeleted, GroupsDeletedUnderPods int64
	// WritersPerQueue and WritersPerPodGroup are the largest numbers of
	// different shards that wrote one object's status (one writer per
	// object: 1, more only across an ownership change).
	WritersPerQueue, WritersPerPodGroup int
}

type simNode struct {
	n    api.Node
	used api.Resource
	pods map[string]bool
}

type simPod struct {
	t     api.Task
	job   *simJob
	life  time.Duration
	end   time.Time
	index int // in ends; -1 when not there
}

// simJob is a workload: what creates a job's pods (a Volcano job, a
// ReplicaSet, the Job controller).
type simJob struct {
	name    string // the workload's; its pods are name-0, name-1, ...
	group   string // the PodGroup its pods carry
	pods    map[string]*simPod
	created int // pods created so far, replacements of evicted ones aside
	done    int // pods succeeded
	size    int // pods to succeed (a batch Job's completions)
	doneAt  time.Time
	spec    workload.JobSpec
	sched   string // the pods' schedulerName
	why     string // the last FailedScheduling or Unschedulable message
	// toldQuota: some message said it waits for a queue's quota.
	toldQuota bool
}

// simGroup is a PodGroup.
type simGroup struct {
	j       api.Job
	writers map[string]bool
	rv      int64
}

// podCreate is a pod the Job controller will create at a time.
type podCreate struct {
	at  time.Time
	job *simJob
}

// Overrun is one queue level found above its capability.
type Overrun struct {
	At       time.Duration // virtual time since the start
	Queue    string
	Resource string
	Used     int64
	Cap      int64
	// Pod and Kind name the bind that overran; empty for a sample.
	Pod, Kind string
}

func (o Overrun) String() string {
	what := "at a sample"
	if o.Pod != "" {
		what = fmt.Sprintf("binding %s (%s)", o.Pod, o.Kind)
	}
	return fmt.Sprintf("%.1f s, %s: queue %s %s %s > capability %s", o.At.Seconds(), what, o.Queue, o.Resource,
		api.FormatQuantity(o.Resource, o.Used), api.FormatQuantity(o.Resource, o.Cap))
}

// NewCluster returns a cluster with n nodes of the workload's shape.
func NewCluster(w *workload.Workload, n int, tree *api.Tree) (*Cluster, error) {
	c := &Cluster{start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nodes: map[string]*simNode{}, pods: map[string]*simPod{},
		jobs: map[string]*simJob{}, groups: map[string]*simGroup{}, groupUIDs: map[string]string{}, paths: map[string][]string{},
		caps: map[string]api.Limit{}, deserved: map[string]int64{}, used: map[string]api.Resource{}, overrunsByKind: map[string]int64{},
		pendingCPU: map[string]int64{}, queueWriters: map[string]map[string]bool{}, gpuEvery: w.Node.GPUEvery,
		bigPodCPU: w.LargestPodCPU() * 1000}
	for _, spec := range tree.Specs() {
		p, err := tree.Path(spec.Name)
		if err != nil {
			return nil, err
		}
		c.paths[spec.Name] = p
		c.caps[spec.Name] = spec.Capability
		if slices.Contains(spec.Deserved.Dims(), api.CPU) {
			c.deserved[spec.Name] = spec.Deserved.Get(api.CPU)
		}
	}
	c.AddNodes(w, n)
	return c, nil
}

// Now is the virtual clock.
func (c *Cluster) Now() time.Time { return c.start.Add(c.Elapsed()) }

// Elapsed is the virtual time since the start.
func (c *Cluster) Elapsed() time.Duration {
	d := time.Duration(c.now.Load())
	if w := c.stepWall.Load(); w != 0 {
		d += max(time.Since(time.Unix(0, w)), 0)
	}
	return d
}

// runClock lets the virtual clock run with the wall clock from wall on;
// freezeClock stops it (until the next setElapsed).
func (c *Cluster) runClock(wall time.Time) { c.stepWall.Store(wall.UnixNano()) }
func (c *Cluster) freezeClock()            { c.stepWall.Store(0) }

func (c *Cluster) setElapsed(d time.Duration) { c.now.Store(int64(d)) }

func (c *Cluster) nextUID(kind string) string {
	c.uid++
	return kind + "-" + strconv.FormatInt(c.uid, 36)
}

// AddNodes adds n nodes of the workload's shape.
func (c *Cluster) AddNodes(w *workload.Workload, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < n; i++ {
		idx := len(c.nodeList)
		name := fmt.Sprintf("node-%05d", idx)
		scal := map[string]int64{api.Pods: 110}
		gpu := w.Node.GPUs > 0 && w.Node.GPUEvery > 0 && idx%w.Node.GPUEvery == 0
		if gpu && w.Node.GPUPool != "" {
			name = fmt.Sprintf("%s-%05d", w.Node.GPUPool, idx)
		}
		labels := map[string]string{"kubernetes.io/hostname": name}
		if gpu {
			scal["nvidia.com/gpu"] = w.Node.GPUs
			labels["accelerator"] = "gpu"
		}
		node := api.Node{Name: name, UID: c.nextUID("node"), Labels: labels,
			Allocatable: api.NewResource(w.Node.CPU*1000, w.Node.MemoryGi<<30, scal)}
		c.nodes[name] = &simNode{n: node, pods: map[string]bool{}}
		c.nodeList = append(c.nodeList, name)
		c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateNode(node) })
	}
}

// Subscribe replays the cluster into ca and keeps it updated.
func (c *Cluster) Subscribe(ca *cache.Cache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range c.nodeList {
		if n, ok := c.nodes[name]; ok {
			ca.AddOrUpdateNode(n.n)
		}
	}
	for _, g := range c.groups {
		ca.AddOrUpdateJob(g.j)
	}
	for _, p := range c.pods {
		ca.AddOrUpdateTask(p.t)
	}
	c.caches = append(c.caches, ca)
}

// fanout gives one update to every subscribed cache, as each shard's
// informers would, timing each when asked (TimeCaches).
func (c *Cluster) fanout(f func(*cache.Cache)) {
	for _, ca := range c.caches {
		if c.only != nil && ca != c.only {
			c.held[ca] = append(c.held[ca], f)
			continue
		}
		c.deliver(ca, f)
	}
}

// deliver gives ca one update, timing it when asked (TimeCaches).
func (c *Cluster) deliver(ca *cache.Cache, f func(*cache.Cache)) {
	if !c.timeCaches {
		f(ca)
		return
	}
	t0 := time.Now()
	f(ca)
	d := time.Since(t0)
	c.cacheMu.Lock()
	c.cacheTime[ca] += d
	c.cacheMu.Unlock()
}

// HoldOthers makes the updates that follow reach ca at once and wait for
// every other cache until Release. With a virtual CPU per shard, the other
// shards take a shard's binds on machines of their own, not within its
// step: their work, and the garbage collection it brings, stays out of
// the wall time that step is charged.
func (c *Cluster) HoldOthers(ca *cache.Cache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.only = ca
	if c.held == nil {
		c.held = map[*cache.Cache][]func(*cache.Cache){}
	}
}

// Release gives every cache the updates held for it, in the order they
// came, and updates all caches at once again.
func (c *Cluster) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.only = nil
	for _, ca := range c.caches {
		for _, f := range c.held[ca] {
			c.deliver(ca, f)
		}
		delete(c.held, ca)
	}
}

// TimeCaches makes every later update of a cache count the wall time it
// took, per cache (CacheTime). Call before the run starts.
func (c *Cluster) TimeCaches() {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	c.timeCaches = true
	if c.cacheTime == nil {
		c.cacheTime = map[*cache.Cache]time.Duration{}
	}
}

// topQueue is the level of q's path just below the root (a parent of the
// generated tree; q itself when it hangs from the root), from the paths
// built at construction (read-only since).
func (c *Cluster) topQueue(q string) string {
	if p := c.paths[q]; len(p) >= 2 {
		return p[len(p)-2]
	}
	return q
}

// CacheTime is the wall time ca has spent taking the cluster's updates
// since TimeCaches.
func (c *Cluster) CacheTime(ca *cache.Cache) time.Duration {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	return c.cacheTime[ca]
}

// Unsubscribe stops updating ca (its shard died).
func (c *Cluster) Unsubscribe(ca *cache.Cache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// slices.Delete clears the slot left at the end: a copy of the last
	// cache's pointer there kept that shard's whole cache alive.
	c.caches = slices.DeleteFunc(c.caches, func(x *cache.Cache) bool { return x == ca })
	delete(c.held, ca)
	if c.only == ca {
		c.only = nil
	}
	c.cacheMu.Lock()
	delete(c.cacheTime, ca)
	c.cacheMu.Unlock()
}

const namespace = "bench"

// Submit creates a job at the current virtual time: its PodGroup unless
// its pods name none (the scheduler then creates an implicit one), and the
// pods it has at once, pending.
func (c *Cluster) Submit(js workload.JobSpec, schedulerName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The job was created at its arrival time, which falls within the
	// step that just ended.
	now := c.start.Add(js.At)
	if now.After(c.Now()) {
		now = c.Now()
	}
	name := fmt.Sprintf("job-%d", js.Seq)
	group := name
	if js.Implicit {
		// One group per owner, as kube.ImplicitGroupName makes (there
		// named by the owner's UID, which the simulation does not have).
		owner := "job"
		if js.EffectiveKind() == workload.KindDeployment {
			owner = "replicaset"
		}
		group = "shardsched-" + owner + "-" + name
	}
	j := &simJob{name: name, group: group, pods: map[string]*simPod{}, size: js.Size, spec: js, sched: schedulerName}
	c.jobs[group] = j
	if !js.Implicit {
		pg := api.Job{Namespace: namespace, Name: group, Queue: js.Queue, MinMember: js.EffectiveMinMember(), Phase: api.JobPending, Created: now}
		if js.MinMilliCPU > 0 {
			r := api.NewResource(js.MinMilliCPU, 0, nil)
			pg.MinResources = &r
		}
		c.addGroupLocked(pg)
	}
	for i := 0; i < js.EffectiveParallelism(); i++ {
		c.createPodLocked(j, now)
	}
}

// addGroupLocked creates a PodGroup, giving it a UID and a resourceVersion.
func (c *Cluster) addGroupLocked(pg api.Job) *simGroup {
	pg.UID = c.nextUID("pg")
	g := &simGroup{j: pg, writers: map[string]bool{}, rv: 1}
	g.j.ResourceVersion = "1"
	c.groups[pg.UID] = g
	c.groupUIDs[pg.Name] = pg.UID
	c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateJob(g.j) })
	return g
}

// deleteGroupLocked deletes a PodGroup.
func (c *Cluster) deleteGroupLocked(g *simGroup) {
	delete(c.groups, g.j.UID)
	if c.groupUIDs[g.j.Name] == g.j.UID {
		delete(c.groupUIDs, g.j.Name)
	}
	c.fanout(func(ca *cache.Cache) { ca.DeleteJob(g.j.UID) })
}

// createPodLocked creates the job's next pod.
func (c *Cluster) createPodLocked(j *simJob, now time.Time) {
	c.newPodLocked(j, fmt.Sprintf("%s-%d", j.name, j.created), j.sched, now)
	j.created++
	c.stats.Submitted++
}

func (c *Cluster) newPodLocked(j *simJob, name, schedulerName string, now time.Time) {
	scal := map[string]int64{api.Pods: 1}
	if j.spec.GPU > 0 {
		scal["nvidia.com/gpu"] = j.spec.GPU
	}
	p := &simPod{job: j, life: j.spec.Lifetime, index: -1, t: api.Task{Namespace: namespace, Name: name, UID: c.nextUID("pod"),
		Job: j.group, Implicit: j.spec.Implicit, Queue: j.spec.Queue, Request: api.NewResource(j.spec.CPU, j.spec.Memory, scal),
		Phase: api.TaskPending, SchedulerName: schedulerName, Created: now}}
	j.pods[p.t.UID] = p
	c.pods[p.t.UID] = p
	c.pendingCPU[j.spec.Queue] += j.spec.CPU
	c.pendingPods++
	c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateTask(p.t) })
}

// errBind is what the simulated API server answers to a bad bind.
var errBind = errors.New("bind refused")

// Bind binds a pod like the pods/binding subresource: the pod must exist
// with that UID and not be bound yet; the node must exist. Like the API
// server it does not check capacity: an overcommitted node is counted as a
// double-booked node (an invariant). shard names the binding shard; fenced
// is false when another live shard held the node's partition at the moment
// of the bind (two holders: a fencing failure).
func (c *Cluster) Bind(t *api.Task, node, shard string, fenced bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[t.UID]
	if !ok {
		c.stats.BindRefused++
		return fmt.Errorf("%w: pod %s (uid %s) not found", errBind, t.Key(), t.UID)
	}
	if p.t.NodeName != "" {
		// The API refuses it, but binds never time out here, so a second
		// bind means two placements of one pod: the rule was broken.
		c.stats.BindRefused++
		c.stats.PodsBoundTwice++
		return fmt.Errorf("%w: pod %s is already bound to %s", errBind, t.Key(), p.t.NodeName)
	}
	n, ok := c.nodes[node]
	if !ok {
		c.stats.BindRefused++
		return fmt.Errorf("%w: node %s not found", errBind, node)
	}
	if !fenced {
		c.stats.UnfencedBinds++
	}
	req := p.t.Request
	used, err := n.used.Add(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errBind, err)
	}
	if !used.LessEqual(n.n.Allocatable) {
		c.stats.DoubleBookedNodes++
	}
	n.used = used
	n.pods[p.t.UID] = true
	now := c.Now()
	p.t.NodeName, p.t.Phase = node, api.TaskRunning
	p.end = now.Add(p.life)
	heap.Push(&c.ends, p)
	c.pendingCPU[p.job.spec.Queue] -= p.job.spec.CPU
	c.pendingPods--
	c.bookQuotaLocked(p)
	c.stats.Binds++
	wait := now.Sub(p.t.Created)
	c.lat.add(wait)
	if !p.job.toldQuota {
		c.latFree.add(wait)
	}
	c.tailLocked(p.job, wait)
	c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateTask(p.t) })
	c.lastBind = time.Now()
	return nil
}

// LastBind returns the wall time the last bind ended (zero before the
// first).
func (c *Cluster) LastBind() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastBind
}

// unbookLocked takes a bound pod off its node and its queues.
func (c *Cluster) unbookLocked(p *simPod) {
	if n, ok := c.nodes[p.t.NodeName]; ok && n.pods[p.t.UID] {
		n.used, _ = n.used.Sub(p.t.Request)
		delete(n.pods, p.t.UID)
	}
	for _, q := range c.paths[p.job.spec.Queue] {
		c.addUsedLocked(q, p.t.Request, -1)
	}
	if p.index >= 0 {
		heap.Remove(&c.ends, p.index)
	}
}

// bookQuotaLocked adds a pod just bound to its leaf queue and every
// ancestor, and counts each level it leaves above its capability.
func (c *Cluster) bookQuotaLocked(p *simPod) {
	for _, q := range c.paths[p.job.spec.Queue] {
		u := c.addUsedLocked(q, p.t.Request, 1)
		over := false
		for _, d := range c.caps[q].Dims() {
			limit, _ := c.caps[q].Get(d)
			if u.Get(d) <= limit {
				continue
			}
			over = true
			if len(c.overruns) < maxOverrunsKept {
				c.overruns = append(c.overruns, Overrun{At: c.Elapsed(), Queue: q, Resource: d, Used: u.Get(d), Cap: limit,
					Pod: p.t.Key(), Kind: p.job.kindLabel()})
			}
		}
		if over {
			c.stats.QuotaOverruns++
			c.overrunsByKind[p.job.kindLabel()]++
		}
	}
}

// addUsedLocked adds sign × r to queue q's running sum, in place: the sums
// are the cluster's own (copied out by every reader), and this runs at every
// bind and end under the cluster's lock, so it must not allocate per call.
// It returns the new sum.
func (c *Cluster) addUsedLocked(q string, r api.Resource, sign int64) api.Resource {
	u := c.used[q]
	u.MilliCPU += sign * r.MilliCPU
	u.Memory += sign * r.Memory
	for k, v := range r.Scalars {
		if u.Scalars == nil {
			u.Scalars = map[string]int64{}
		}
		u.Scalars[k] += sign * v
		if u.Scalars[k] == 0 {
			delete(u.Scalars, k)
		}
	}
	c.used[q] = u
	return u
}

// kindLabel names the job's kind and PodGroup style, e.g. "deployment,
// implicit group".
func (j *simJob) kindLabel() string {
	if j.spec.Implicit {
		return j.spec.EffectiveKind() + ", implicit group"
	}
	return j.spec.EffectiveKind()
}

// CheckQuota recounts, from every bound and unfinished pod, the requests
// of each queue's subtree (the pod's leaf and every ancestor in the run's
// tree) and counts each queue above its capability in some dimension; it
// returns how many were. It also counts levels where the running sums
// kept at binds differ from the recount (a bug of this model). It never
// reads a ledger: only the pods.
func (c *Cluster) CheckQuota() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Summed in place (the pods' Resources would allocate at every Add:
	// this runs under the cluster's lock, which binds wait for).
	type sums struct {
		cpu, mem int64
		sc       map[string]int64
	}
	acc := map[string]*sums{}
	for _, p := range c.pods {
		if p.t.NodeName == "" || p.t.Phase.Terminal() {
			continue
		}
		r := p.t.Request
		for _, q := range c.paths[p.job.spec.Queue] {
			a := acc[q]
			if a == nil {
				a = &sums{sc: map[string]int64{}}
				acc[q] = a
			}
			a.cpu += r.MilliCPU
			a.mem += r.Memory
			for k, v := range r.Scalars {
				a.sc[k] += v
			}
		}
	}
	recount := make(map[string]api.Resource, len(acc))
	for q, a := range acc {
		recount[q] = api.NewResource(a.cpu, a.mem, a.sc)
	}
	at := c.Elapsed()
	over := 0
	for q := range c.paths {
		u := recount[q]
		if !u.Equal(c.used[q]) {
			c.stats.QuotaBooksMismatch++
		}
		hit := false
		for _, d := range c.caps[q].Dims() {
			limit, _ := c.caps[q].Get(d)
			if u.Get(d) <= limit {
				continue
			}
			hit = true
			if c.sampleOverrunsLocked() < maxOverrunsKept {
				c.overruns = append(c.overruns, Overrun{At: at, Queue: q, Resource: d, Used: u.Get(d), Cap: limit})
			}
		}
		if hit {
			over++
		}
	}
	c.stats.QuotaOverrunSamples += int64(over)
	return over
}

func (c *Cluster) sampleOverrunsLocked() int {
	n := 0
	for _, o := range c.overruns {
		if o.Pod == "" {
			n++
		}
	}
	return n
}

// Overruns returns the first overruns seen at binds and at samples, and
// the overrunning binds by job kind.
func (c *Cluster) Overruns() ([]Overrun, map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byKind := make(map[string]int64, len(c.overrunsByKind))
	for k, v := range c.overrunsByKind {
		byKind[k] = v
	}
	return append([]Overrun(nil), c.overruns...), byKind
}

// advance moves the clock to d: pods whose time is up succeed (a batch
// Job's controller then creates its next pod, ControllerDelay later), and
// workloads finished for more than retain are deleted with their pods (a
// TTL controller), and with their PodGroup unless it is implicit (the
// scheduler deletes those).
func (c *Cluster) advance(d time.Duration, retain time.Duration) {
	c.setElapsed(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	for len(c.ends) > 0 && !c.ends[0].end.After(now) {
		p := c.ends[0]
		c.unbookLocked(p)
		p.t.Phase = api.TaskSucceeded
		c.stats.Completed++
		j := p.job
		j.done++
		if j.done >= j.size {
			j.doneAt = now
		}
		if j.created < j.size {
			c.creates = append(c.creates, podCreate{at: p.end.Add(ControllerDelay), job: j})
		}
		c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateTask(p.t) })
	}
	for len(c.creates) > 0 && !c.creates[0].at.After(now) {
		pc := c.creates[0]
		c.creates = c.creates[1:]
		if c.jobs[pc.job.group] == pc.job && pc.job.created < pc.job.size {
			c.createPodLocked(pc.job, pc.at)
		}
	}
	for name, j := range c.jobs {
		if j.doneAt.IsZero() || now.Sub(j.doneAt) < retain {
			continue
		}
		for puid := range j.pods {
			delete(c.pods, puid)
			c.fanout(func(ca *cache.Cache) { ca.DeleteTask(puid) })
		}
		delete(c.jobs, name)
		if g := c.groups[c.groupUIDs[j.group]]; g != nil && !g.j.Implicit {
			c.deleteGroupLocked(g)
		}
	}
}

// Drain cordons the given nodes and evicts their pods; each evicted pod is
// re-created, pending, by its job (as a job controller would).
func (c *Cluster) Drain(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	for _, name := range names {
		n, ok := c.nodes[name]
		if !ok {
			continue
		}
		n.n.Unschedulable = true
		c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateNode(n.n) })
		uids := make([]string, 0, len(n.pods))
		for uid := range n.pods {
			uids = append(uids, uid)
		}
		sort.Strings(uids)
		for _, uid := range uids {
			p := c.pods[uid]
			c.unbookLocked(p)
			delete(c.pods, uid)
			delete(p.job.pods, uid)
			c.fanout(func(ca *cache.Cache) { ca.DeleteTask(uid) })
			c.stats.Evicted++
			c.newPodLocked(p.job, p.t.Name+"-r", p.t.SchedulerName, now)
		}
	}
}

// Shrink lowers the allocatable CPU of the given nodes to milliCPU.
func (c *Cluster) Shrink(names []string, milliCPU int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		if n, ok := c.nodes[name]; ok {
			n.n.Allocatable = n.n.Allocatable.With(api.CPU, milliCPU)
			c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateNode(n.n) })
		}
	}
}

// NodeState calls apply with a node and the tasks bound to it, as the API
// server has them (for rebuilding an out-of-sync node's books), read just
// before; false when the node is not known.
func (c *Cluster) NodeState(name string, apply func(api.Node, []api.Task)) bool {
	c.mu.Lock()
	n, ok := c.nodes[name]
	if !ok {
		c.mu.Unlock()
		return false
	}
	tasks := make([]api.Task, 0, len(n.pods))
	for uid := range n.pods {
		tasks = append(tasks, c.pods[uid].t)
	}
	node := n.n
	c.mu.Unlock()
	apply(node, tasks)
	return true
}

// NodeUsage is what is bound to a node (truth): CPU, memory and pod count.
func (c *Cluster) NodeUsage(name string) (cpu, memory int64, pods int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return 0, 0, 0, false
	}
	return n.used.MilliCPU, n.used.Memory, len(n.pods), true
}

// Fits reports whether a node's bound pods fit its allocatable (truth).
func (c *Cluster) Fits(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	return ok && n.used.LessEqual(n.n.Allocatable)
}

// NodeNames returns the names of the nodes, in creation order.
func (c *Cluster) NodeNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.nodeList...)
}

// sample is the cluster's state at one moment.
type sample struct {
	usedCPU, allocCPU int64
	// freeCPU is what schedulable nodes have free (milli-CPU), emptyCPU
	// the part of it on nodes running nothing, and bigSlots how many pods
	// of the workload's largest CPU size the free CPU could take.
	freeCPU, emptyCPU, bigSlots int64
	pending                     int
	leafUsed                    map[string]int64 // milli-CPU
	leafPending                 map[string]int64
	runningJobs                 map[string]bool // UIDs of jobs with their whole gang bound
}

func (c *Cluster) sample(leaves []workload.LeafQueue, withJobs bool) sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := sample{leafUsed: map[string]int64{}, leafPending: map[string]int64{}}
	for _, n := range c.nodes {
		if !n.n.Unschedulable {
			alloc := n.n.Allocatable.Get(api.CPU)
			s.allocCPU += alloc
			free := max(alloc-n.used.Get(api.CPU), 0)
			s.freeCPU += free
			if len(n.pods) == 0 {
				s.emptyCPU += free
			}
			if c.bigPodCPU > 0 {
				s.bigSlots += free / c.bigPodCPU
			}
		}
		s.usedCPU += n.used.Get(api.CPU)
	}
	for _, l := range leaves {
		s.leafUsed[l.Name] = c.used[l.Name].Get(api.CPU)
		s.leafPending[l.Name] = c.pendingCPU[l.Name]
	}
	s.pending = c.pendingPods
	if withJobs {
		s.runningJobs = map[string]bool{}
		for uid, g := range c.groups {
			j := c.jobs[g.j.Name]
			if j == nil {
				continue
			}
			bound := 0
			for _, p := range j.pods {
				if p.t.NodeName != "" && !p.t.Phase.Terminal() {
					bound++
				}
			}
			if bound >= int(max(g.j.MinMember, 1)) {
				s.runningJobs[uid] = true
			}
		}
	}
	return s
}

// jobClass is a job's kind and size, for the notes.
type jobClass struct {
	kind string
	size int
	gpu  bool // its pods ask for GPUs (they fit GPU nodes only)
}

// String names the class in the notes.
func (k jobClass) String() string {
	if k.gpu {
		return fmt.Sprintf("%s size %d, GPU", k.kind, k.size)
	}
	return fmt.Sprintf("%s size %d", k.kind, k.size)
}

// pendingByClass counts, per kind and size, the jobs with pending pods and
// the longest any of them has waited, with the oldest one's last reason.
func (c *Cluster) pendingByClass() map[jobClass]pendingJobs {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	out := map[jobClass]pendingJobs{}
	for _, j := range c.jobs {
		for _, p := range j.pods {
			if p.t.NodeName == "" && !p.t.Phase.Terminal() {
				k := jobClass{j.kindLabel(), j.size, j.spec.GPU > 0}
				e := out[k]
				e.jobs++
				if w := now.Sub(p.t.Created).Seconds(); w >= e.oldest {
					e.oldest, e.why = w, j.why
				}
				if g := c.groups[c.groupUIDs[j.group]]; g != nil && g.j.Phase == api.JobCompleted {
					e.inCompleted++
				}
				out[k] = e
				break
			}
		}
	}
	return out
}

// classTail is how long the bound pods of one kind and size of job
// waited: how many, how many over 1, 10 and 60 s, the longest, and the
// reason its job was last given before that longest wait ended.
type classTail struct {
	pods, over1, over10, over60 int64
	max                         time.Duration
	why                         string
}

// tailLocked counts one bind of a pod of j that waited w.
func (c *Cluster) tailLocked(j *simJob, w time.Duration) {
	if c.tails == nil {
		c.tails = map[jobClass]*classTail{}
	}
	k := jobClass{j.kindLabel(), j.size, j.spec.GPU > 0}
	t := c.tails[k]
	if t == nil {
		t = &classTail{}
		c.tails[k] = t
	}
	t.pods++
	for _, o := range []struct {
		n  *int64
		at time.Duration
	}{{&t.over1, time.Second}, {&t.over10, 10 * time.Second}, {&t.over60, time.Minute}} {
		if w > o.at {
			*o.n++
		}
	}
	if w > t.max {
		t.max, t.why = w, j.why
	}
	if w > time.Second {
		if c.slowWhy == nil {
			c.slowWhy = map[string]int64{}
		}
		c.slowWhy[waitKind(j.why)]++
	}
}

// waitKind sorts a job's last reason: "quota" (a queue short of quota),
// "room" (no nodes had room), "no reason given" (none recorded: waiting
// for its reservation, its group's pods or its next cycle) or "other".
func waitKind(why string) string {
	switch {
	case why == "":
		return "no reason given"
	case strings.Contains(why, "quota"):
		return "quota"
	case strings.Contains(why, "does not fit") || strings.Contains(why, "nodes are available"):
		return "room"
	}
	return "other"
}

// tailNote says, for the kinds and sizes of job whose bound pods waited
// over 10 s, what share of their pods did and why the longest waited; ""
// when none did. It is what the run's p99 is made of.
func (c *Cluster) tailNote() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all, over10 int64
	keys := make([]jobClass, 0, len(c.tails))
	for k, t := range c.tails {
		all += t.pods
		over10 += t.over10
		if t.over10 > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Slice(keys, func(a, b int) bool { return c.tails[keys[a]].over10 > c.tails[keys[b]].over10 })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		t := c.tails[k]
		why := t.why
		if why == "" {
			why = "no event"
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d pods over 10 s (%d over 1 s, %d over 60 s), longest %.0f s (%q)",
			k, t.over10, t.pods, t.over1, t.over60, t.max.Seconds(), why))
	}
	var slow int64
	for _, n := range c.slowWhy {
		slow += n
	}
	kinds := slices.Sorted(maps.Keys(c.slowWhy))
	sort.SliceStable(kinds, func(a, b int) bool { return c.slowWhy[kinds[a]] > c.slowWhy[kinds[b]] })
	whys := make([]string, 0, len(kinds))
	for _, k := range kinds {
		whys = append(whys, fmt.Sprintf("%s %.0f %%", k, 100*float64(c.slowWhy[k])/float64(max(slow, 1))))
	}
	return fmt.Sprintf("bound pods that waited over 10 s: %d of %d (%.2f %%), by kind and size of job, most first: %s. The %d pods that waited over 1 s, by the last reason their job was given: %s",
		over10, all, 100*float64(over10)/float64(max(all, 1)), strings.Join(parts, "; "), slow, strings.Join(whys, ", "))
}

type pendingJobs struct {
	inCompleted int // of them, jobs whose PodGroup is Completed
	jobs        int
	oldest      float64
	why         string
}

// jobSettled reports whether a PodGroup still exists and, if so, whether
// all its pods are bound or finished.
func (c *Cluster) jobSettled(uid string) (exists, settled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[uid]
	if !ok {
		return false, false
	}
	j := c.jobs[g.j.Name]
	if j == nil {
		return true, true
	}
	for _, p := range j.pods {
		if p.t.NodeName == "" && !p.t.Phase.Terminal() {
			return true, false
		}
	}
	return true, true
}

// pending is the number of pods not bound yet.
func (c *Cluster) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingPods
}

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// latencies returns the submit→bind latency percentiles (seconds) and a
// CDF sample.
func (c *Cluster) latencies() (p50, p99, maxLat float64, cdf []float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lat.quantile(0.50), c.lat.quantile(0.99), c.lat.max.Seconds(), c.lat.sample(1000)
}

// quotaFreeNote gives the p50 and p99 of the pods whose job was never
// told to wait for a queue's quota, beside all pods'; "" when every pod's
// job was, or none was.
func (c *Cluster) quotaFreeNote() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latFree.n == 0 || c.latFree.n == c.lat.n {
		return ""
	}
	return fmt.Sprintf("pods of jobs never told to wait for quota: %d of %d (%.1f %%), submit→bind p50 %.3f s, p99 %.3f s, longest %.0f s (all pods: p99 %.3f s); the quota rule holds the others back on purpose",
		c.latFree.n, c.lat.n, 100*float64(c.latFree.n)/float64(c.lat.n), c.latFree.quantile(0.5), c.latFree.quantile(0.99), c.latFree.max.Seconds(), c.lat.quantile(0.99))
}

// latencyHist counts latencies in 1 ms buckets up to a minute (one more
// for everything above), so a run of any length keeps constant memory.
type latencyHist struct {
	counts []int64
	n      int64
	max    time.Duration
}

const histBuckets = 60000 // 1 ms each

func (h *latencyHist) add(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]int64, histBuckets+1)
	}
	i := int(max(d, 0) / time.Millisecond)
	h.counts[min(i, histBuckets)]++
	h.n++
	h.max = max(h.max, d)
}

// quantile is the upper edge of the bucket holding the q-th latency
// (nearest rank), in seconds; the overflow bucket reports the maximum.
func (h *latencyHist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == histBuckets {
				return h.max.Seconds()
			}
			return min(float64(i+1)/1000, h.max.Seconds())
		}
	}
	return h.max.Seconds()
}

// sample returns up to n latencies evenly spaced over the sorted set.
func (h *latencyHist) sample(n int) []float64 {
	if h.n == 0 || n <= 0 {
		return nil
	}
	out := make([]float64, 0, n)
	for k := 0; k < n; k++ {
		q := float64(k) / float64(max(n-1, 1))
		out = append(out, h.quantile(q))
	}
	return out
}

// Binder is one shard's view of the binding API.
type Binder struct {
	c     *Cluster
	shard string
	// othersHold reports whether another live shard holds node's partition.
	othersHold func(node string) bool
}

// Bind implements scheduler.Binder.
func (b *Binder) Bind(_ context.Context, t *api.Task, node string) error {
	return b.c.Bind(t, node, b.shard, !b.othersHold(node))
}

// StatusWriter is one shard's view of the status API (status.Writer).
type StatusWriter struct {
	c     *Cluster
	shard string
}

// WriteQueueStatus counts the write and who made it.
func (w *StatusWriter) WriteQueueStatus(_ context.Context, queue string, _ api.QueueStatus) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.stats.QueueWrites++
	ws := w.c.queueWriters[queue]
	if ws == nil {
		ws = map[string]bool{}
		w.c.queueWriters[queue] = ws
	}
	ws[w.shard] = true
	w.c.stats.WritersPerQueue = max(w.c.stats.WritersPerQueue, len(ws))
	return nil
}

// WritePodGroupStatus counts the write; a write to a PodGroup that is gone
// (or was re-created under another UID) is refused like a failed
// precondition.
func (w *StatusWriter) WritePodGroupStatus(_ context.Context, _, name, uid string, st api.JobStatus) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.stats.PodGroupWrites++
	g, ok := w.c.groups[uid]
	if !ok {
		return nil // gone: nothing to write, nothing to retry
	}
	g.writers[w.shard] = true
	w.c.stats.WritersPerPodGroup = max(w.c.stats.WritersPerPodGroup, len(g.writers))
	if g.j.Phase != st.Phase {
		g.j.Phase = st.Phase
		g.rv++
		g.j.ResourceVersion = strconv.FormatInt(g.rv, 10)
		w.c.fanout(func(ca *cache.Cache) { ca.AddOrUpdateJob(g.j) }) // as the informers would
	}
	return nil
}

// Groups is one shard's view of the PodGroup API for implicit groups
// (scheduler.Groups): creates like the API server (an existing name is not
// an error) and deletes with UID and resourceVersion preconditions (F4).
type Groups struct {
	c *Cluster
}

// CreatePodGroup implements scheduler.Groups.
func (g *Groups) CreatePodGroup(_ context.Context, ns, name, queue string, minMember int32) error {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	if _, ok := g.c.groupUIDs[name]; ok {
		return nil
	}
	g.c.stats.GroupsCreated++
	g.c.addGroupLocked(api.Job{Namespace: ns, Name: name, Queue: queue, MinMember: minMember, Phase: api.JobPending,
		Created: g.c.Now(), Implicit: true})
	return nil
}

// DeletePodGroup implements scheduler.Groups; a failed precondition or a
// missing group is not an error.
func (g *Groups) DeletePodGroup(_ context.Context, _, name, uid, resourceVersion string) error {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	pg, ok := g.c.groups[uid]
	if !ok || pg.j.Name != name || (resourceVersion != "" && resourceVersion != pg.j.ResourceVersion) {
		return nil
	}
	if j := g.c.jobs[name]; j != nil {
		for _, p := range j.pods {
			if !p.t.Phase.Terminal() {
				g.c.stats.GroupsDeletedUnderPods++
				break
			}
		}
	}
	g.c.stats.GroupsDeleted++
	g.c.deleteGroupLocked(pg)
	return nil
}

// Recorder counts the events a shard would send (each one an API write)
// and keeps the last reason given for each job that waits.
type Recorder struct{ c *Cluster }

func (r *Recorder) count(job, why string) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.c.stats.Events++
	if why == "" {
		return
	}
	if j := r.c.jobs[job]; j != nil {
		j.why = why
		j.toldQuota = j.toldQuota || waitKind(why) == "quota"
	}
}

// Scheduled implements scheduler.Recorder.
func (r *Recorder) Scheduled(*api.Task, string) { r.count("", "") }

// FailedScheduling implements scheduler.Recorder.
func (r *Recorder) FailedScheduling(t *api.Task, msg string) { r.count(t.Job, msg) }

// Unschedulable implements scheduler.Recorder.
func (r *Recorder) Unschedulable(j *api.Job, msg string) { r.count(j.Name, msg) }

// endHeap orders bound pods by end time.
type endHeap []*simPod

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *endHeap) Push(x any) {
	p := x.(*simPod)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *endHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.index = -1
	*h = old[:len(old)-1]
	return p
}
