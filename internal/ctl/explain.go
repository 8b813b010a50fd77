package ctl

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/placement"
)

// Explanation is why one job (a PodGroup, or the PodGroup of a pod) is
// where it is. Summary is the answer in plain words; the other fields are
// the numbers behind it.
type Explanation struct {
	// Asked is what the user named: "pod ns/name" or "podgroup ns/name".
	Asked    string `json:"asked"`
	PodGroup string `json:"podGroup"`
	Queue    string `json:"queue,omitempty"`
	Phase    string `json:"phase,omitempty"`
	// Node is where the pod asked about is bound ("" when pending or when
	// a PodGroup was asked about).
	Node      string    `json:"node,omitempty"`
	MinMember int32     `json:"minMember"`
	Pods      PodCounts `json:"pods"`
	Summary   string    `json:"summary"`
	// Scheduler is the Unschedulable condition the scheduler wrote on the
	// PodGroup, when there is one: its own verdict, from the coordinator's
	// ledger.
	Scheduler *Condition `json:"scheduler,omitempty"`
	// Ask is what admission reserves for the job on its queue and every
	// ancestor (api.AdmitAmount).
	Ask map[string]string `json:"ask,omitempty"`
	// Path is the job's queue and its ancestors, leaf first.
	Path []Level `json:"queuePath,omitempty"`
	// Ahead is how many jobs of the same queue go before this one
	// (priority, then age) and are not admitted yet; AheadJobs the first
	// of them.
	Ahead     int       `json:"ahead"`
	AheadJobs []JobLine `json:"aheadJobs,omitempty"`
	// Holders are the admitted jobs holding most of HoldersOf's quota.
	HoldersOf string     `json:"holdersOf,omitempty"`
	Holders   []JobLine  `json:"holders,omitempty"`
	Placement *Placement `json:"placement,omitempty"`
	// Events are the latest events of the PodGroup and its pods, oldest
	// first.
	Events []string `json:"events,omitempty"`
}

// PodCounts are the job's pods by state.
type PodCounts struct {
	Pending int `json:"pending"`
	Bound   int `json:"bound"`
	Done    int `json:"done"`
}

// Condition is a PodGroup condition.
type Condition struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Level is one queue of the job's path. InUse is what the bound pods of
// its subtree request; Held what the admitted jobs of its subtree hold
// (their bound pods, or more while a gang is not whole or minResources is
// above what runs); Short, for a job not admitted, how much the level
// lacks for it: Held + Ask − Capability, where positive.
type Level struct {
	Queue      string            `json:"queue"`
	Capability map[string]string `json:"capability,omitempty"`
	InUse      map[string]string `json:"inUse,omitempty"`
	Held       map[string]string `json:"held,omitempty"`
	Short      map[string]string `json:"short,omitempty"`
	LeftOut    string            `json:"leftOut,omitempty"`
}

// JobLine is one other job: what it holds (an admitted one) or asks (one
// waiting), and since when it exists.
type JobLine struct {
	Job      string            `json:"job"`
	Queue    string            `json:"queue"`
	Phase    string            `json:"phase"`
	Amount   map[string]string `json:"amount,omitempty"`
	Priority int32             `json:"priority"`
	Age      string            `json:"age"`
}

// Placement is whether the job's pending pods fit on the whole cluster now,
// with the scheduler's filters, counting every node (not one shard's).
type Placement struct {
	Nodes   int            `json:"nodes"`
	Pending int            `json:"pending"`
	Needed  int            `json:"needed"`
	Fits    bool           `json:"fits"`
	Placed  int            `json:"placed"`
	Message string         `json:"message,omitempty"`
	Reasons map[string]int `json:"reasons,omitempty"`
}

// ExplainOptions name what to explain and how the scheduler is set up.
type ExplainOptions struct {
	// Kind is "pod" or "podgroup".
	Kind, Namespace, Name string
	// SchedulerName is the schedulerName of the pods shardsched serves.
	SchedulerName string
	Now           time.Time
}

// jobView is one PodGroup with its pods, as the scheduler would count them.
type jobView struct {
	job      api.Job
	pending  []*api.Task
	bound    int
	done     int
	use      api.Resource
	held     api.Resource
	admitted bool
	ask      api.Resource
	sized    bool
	priority int32
	path     []string
	pods     []*corev1.Pod
}

func key(ns, name string) string { return ns + "/" + name }

// Explain answers why the job named by o is where it is, from w.
func Explain(w *World, o ExplainOptions) (*Explanation, error) {
	e := &Explanation{Asked: o.Kind + " " + key(o.Namespace, o.Name)}
	group := o.Name
	var pod *corev1.Pod
	switch o.Kind {
	case "pod":
		for i := range w.Pods {
			if w.Pods[i].Namespace == o.Namespace && w.Pods[i].Name == o.Name {
				pod = &w.Pods[i]
				break
			}
		}
		if pod == nil {
			return nil, fmt.Errorf("pod %s not found", key(o.Namespace, o.Name))
		}
		group = pod.Annotations[kube.GroupNameAnnotation]
		if group == "" {
			group = kube.ImplicitGroupName(pod)
		}
		e.Node = pod.Spec.NodeName
		if pod.Spec.SchedulerName != o.SchedulerName {
			e.PodGroup = key(o.Namespace, group)
			e.Summary = fmt.Sprintf("the pod names scheduler %q, not %q: shardsched does not schedule it", pod.Spec.SchedulerName, o.SchedulerName)
			return e, nil
		}
	case "podgroup":
	default:
		return nil, fmt.Errorf("cannot explain %q: say pod or podgroup", o.Kind)
	}
	e.PodGroup = key(o.Namespace, group)

	tree, left := queueTree(w.Queues)
	pcs := priorityClasses(w)
	views := map[string]*jobView{}
	for i := range w.Groups {
		g := &w.Groups[i]
		j, err := kube.JobFromPodGroup(g)
		if err != nil {
			if g.Namespace == o.Namespace && g.Name == group {
				e.Summary = fmt.Sprintf("the PodGroup is invalid and is not scheduled: %v", err)
				return e, nil
			}
			continue
		}
		v := &jobView{job: j, admitted: admittedPhase(j.Phase)}
		v.path, _ = tree.Path(j.Queue)
		views[j.Key()] = v
	}
	for i := range w.Pods {
		p := &w.Pods[i]
		t, err := kube.TaskFromPod(p)
		if err != nil {
			continue
		}
		v := views[key(t.Namespace, t.Job)]
		if v == nil {
			continue
		}
		if !p.CreationTimestamp.IsZero() && p.CreationTimestamp.Time.Before(v.job.Created.Add(-time.Second)) && p.DeletionTimestamp != nil {
			continue // a terminating pod of a deleted predecessor of the same name
		}
		v.pods = append(v.pods, p)
		switch {
		case t.Phase == api.TaskSucceeded || t.Phase == api.TaskFailed:
			v.done++
		case t.NodeName != "":
			v.bound++
			v.use, _ = v.use.Add(t.Quota())
		case t.Phase == api.TaskPending && t.SchedulerName == o.SchedulerName:
			tt := t
			v.pending = append(v.pending, &tt)
		}
		v.priority = max(v.priority, t.Priority)
	}
	for _, v := range views {
		api.SortPending(v.pending)
		if v.job.PriorityClass != "" {
			v.priority = pcs.value(v.job.PriorityClass)
		}
		v.ask, v.sized = api.AdmitAmount(&v.job, v.pending, v.use)
		v.held = v.use
		if v.admitted && v.sized {
			v.held = v.held.Max(v.ask)
		}
	}
	me := views[e.PodGroup]
	if me == nil {
		e.Summary = fmt.Sprintf("no PodGroup %s exists yet: the scheduler creates one for a plain pod on its next cycle (--implicit-podgroups), or Volcano's podgroup controller does when it runs instead", e.PodGroup)
		return e, nil
	}
	j := &me.job
	e.Queue, e.Phase, e.MinMember = j.Queue, string(j.Phase), j.MinMember
	e.Pods = PodCounts{Pending: len(me.pending), Bound: me.bound, Done: me.done}
	for i := range w.Groups {
		g := &w.Groups[i]
		if g.Namespace != o.Namespace || g.Name != group {
			continue
		}
		for _, c := range g.Status.Conditions {
			if c.Type == schedv1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
				e.Scheduler = &Condition{Reason: c.Reason, Message: c.Message}
			}
		}
	}
	if me.sized {
		e.Ask = quantities(resourceMap(me.ask))
	}
	e.Events = recentEvents(w.Events, me, o.Now)

	// The queue path, each level's use against its capability.
	var shortLevel string
	for _, q := range me.path {
		spec, _ := tree.Get(q)
		var inUse, held api.Resource
		for _, v := range views {
			if !slices.Contains(v.path, q) {
				continue
			}
			inUse, _ = inUse.Add(v.use)
			if v.admitted || v.bound > 0 {
				held, _ = held.Add(v.held)
			}
		}
		l := Level{Queue: q, Capability: quantities(spec.Capability.Map()),
			InUse: quantities(resourceMap(inUse)), Held: quantities(resourceMap(held))}
		if !me.admitted && me.sized {
			want, _ := held.Add(me.ask)
			if me.bound > 0 {
				want, _ = want.Sub(me.held) // its bound pods are in held already
			}
			short := map[string]int64{}
			for _, d := range spec.Capability.Dims() {
				capv, _ := spec.Capability.Get(d)
				if over := want.Get(d) - capv; over > 0 {
					short[d] = over
				}
			}
			l.Short = quantities(short)
			if len(short) > 0 && shortLevel == "" {
				shortLevel = q
			}
		}
		e.Path = append(e.Path, l)
	}

	// Jobs ahead in the queue, and who holds the short level's quota.
	if !me.admitted && j.Phase != api.JobCompleted {
		var waiting []*jobView
		for _, v := range views {
			if v.job.Queue == j.Queue && !v.admitted && v.job.Phase != api.JobCompleted && (len(v.pending) > 0 || v.sized) {
				waiting = append(waiting, v)
			}
		}
		slices.SortFunc(waiting, func(a, b *jobView) int {
			return cmp.Or(cmp.Compare(b.priority, a.priority), a.job.Created.Compare(b.job.Created), strings.Compare(a.job.Key(), b.job.Key()))
		})
		for _, v := range waiting {
			if v == me {
				break
			}
			e.Ahead++
			if len(e.AheadJobs) < 5 {
				e.AheadJobs = append(e.AheadJobs, jobLine(v, v.ask, o.Now))
			}
		}
	}
	e.HoldersOf = shortLevel
	if e.HoldersOf == "" && len(me.path) > 0 {
		e.HoldersOf = me.path[0]
	}
	if e.HoldersOf != "" {
		var holders []*jobView
		for _, v := range views {
			if v != me && (v.admitted || v.bound > 0) && slices.Contains(v.path, e.HoldersOf) && !v.held.IsZero() {
				holders = append(holders, v)
			}
		}
		slices.SortFunc(holders, func(a, b *jobView) int {
			return cmp.Or(cmp.Compare(b.held.Get(api.CPU), a.held.Get(api.CPU)),
				cmp.Compare(b.held.Get(api.Memory), a.held.Get(api.Memory)), strings.Compare(a.job.Key(), b.job.Key()))
		})
		for _, v := range holders[:min(len(holders), 5)] {
			e.Holders = append(e.Holders, jobLine(v, v.held, o.Now))
		}
	}

	if len(me.pending) > 0 {
		e.Placement = place(w, me)
	}
	e.Summary = summarize(e, me, tree, left, pod)
	return e, nil
}

func admittedPhase(p api.JobPhase) bool {
	return p == api.JobInqueue || p == api.JobRunning || p == api.JobUnknown
}

func queueTree(queues []schedv1beta1.Queue) (*api.Tree, map[string]error) {
	var specs []api.QueueSpec
	bad := map[string]error{}
	for i := range queues {
		spec, err := kube.QueueSpecFromVolcano(&queues[i])
		if err != nil {
			bad[queues[i].Name] = err
			continue
		}
		specs = append(specs, spec)
	}
	return api.BuildTreeExcluding(specs, bad)
}

type classes struct {
	byName map[string]int32
	global int32
}

func priorityClasses(w *World) classes {
	c := classes{byName: map[string]int32{}}
	for _, pc := range w.PriorityClasses {
		c.byName[pc.Name] = pc.Value
		if pc.GlobalDefault {
			c.global = pc.Value
		}
	}
	return c
}

// value is a class's priority; a missing class takes the global default's,
// as the scheduler resolves it.
func (c classes) value(name string) int32 {
	if v, ok := c.byName[name]; ok {
		return v
	}
	return c.global
}

func jobLine(v *jobView, amount api.Resource, now time.Time) JobLine {
	return JobLine{Job: v.job.Key(), Queue: v.job.Queue, Phase: string(v.job.Phase), Amount: quantities(resourceMap(amount)),
		Priority: v.priority, Age: age(now, v.job.Created)}
}

func age(now, t time.Time) string {
	if t.IsZero() || now.IsZero() {
		return "-"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// place runs the scheduler's placement over every node of the cluster, with
// what the bound pods use, for the job's pending pods.
func place(w *World, me *jobView) *Placement {
	books := map[string]*api.NodeBooks{}
	var nodes []*api.NodeBooks
	for i := range w.Nodes {
		n, err := kube.NodeFromNode(&w.Nodes[i])
		if err != nil {
			continue
		}
		b := &api.NodeBooks{Node: n}
		books[n.Name] = b
		nodes = append(nodes, b)
	}
	for i := range w.Pods {
		p := &w.Pods[i]
		b := books[p.Spec.NodeName]
		if b == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req, err := kube.PodRequest(p)
		if err != nil {
			continue
		}
		b.Used, _ = b.Used.Add(req)
		b.Tasks++
	}
	need := 1
	if m := int(me.job.MinMember) - me.bound; m > 1 {
		need = m
	}
	cfg, err := placement.DefaultConfig(placement.StrategyBinPack)
	if err != nil {
		return nil
	}
	res := placement.PlaceGang(cfg, me.pending, nodes, need, nil)
	pl := &Placement{Nodes: len(nodes), Pending: len(me.pending), Needed: need, Fits: res.OK, Placed: res.Placed}
	if !res.OK {
		pl.Reasons = res.Reasons
		pl.Message = placement.Summarize(res.Reasons, len(nodes))
	}
	return pl
}

func recentEvents(evs []corev1.Event, me *jobView, now time.Time) []string {
	uids := map[string]bool{me.job.UID: true}
	for _, p := range me.pods {
		uids[string(p.UID)] = true
	}
	type ev struct {
		at   time.Time
		line string
	}
	var out []ev
	for i := range evs {
		x := &evs[i]
		if !uids[string(x.InvolvedObject.UID)] {
			continue
		}
		at := x.LastTimestamp.Time
		if at.IsZero() {
			at = x.EventTime.Time
		}
		if at.IsZero() {
			at = x.CreationTimestamp.Time
		}
		line := fmt.Sprintf("%s ago  %s %s  %s: %s", age(now, at), strings.ToLower(x.InvolvedObject.Kind), x.InvolvedObject.Name, x.Reason, x.Message)
		if x.Count > 1 {
			line += fmt.Sprintf(" (x%d)", x.Count)
		}
		out = append(out, ev{at, line})
	}
	slices.SortStableFunc(out, func(a, b ev) int { return a.at.Compare(b.at) })
	out = out[max(len(out)-8, 0):]
	lines := make([]string, len(out))
	for i, x := range out {
		lines[i] = x.line
	}
	return lines
}

// summarize puts the verdict in plain words, the most decisive reason first.
func summarize(e *Explanation, me *jobView, tree *api.Tree, left map[string]error, pod *corev1.Pod) string {
	j := &me.job
	if pod != nil && pod.Spec.NodeName != "" {
		return fmt.Sprintf("the pod is bound to node %s; its PodGroup is %s", pod.Spec.NodeName, j.Phase)
	}
	if err, bad := left[j.Queue]; bad {
		if _, inTree := tree.Get(j.Queue); !inTree {
			return fmt.Sprintf("its queue %q is left out of the scheduler's queue tree (%v): nothing of this job is scheduled until the Queue is fixed", j.Queue, err)
		}
	}
	if _, ok := tree.Get(j.Queue); !ok {
		return fmt.Sprintf("its queue %q does not exist: create it, or move the job to an existing leaf queue", j.Queue)
	}
	if !tree.IsLeaf(j.Queue) {
		return fmt.Sprintf("its queue %q has child queues: jobs must name a leaf queue (%s)", j.Queue, strings.Join(tree.Children(j.Queue), ", "))
	}
	if j.Phase == api.JobCompleted && len(me.pending) == 0 {
		return "completed: every pod has finished"
	}
	if me.admitted {
		switch {
		case len(me.pending) == 0:
			return fmt.Sprintf("admitted (%s): %d pod(s) bound, none waiting", j.Phase, me.bound)
		case e.Placement != nil && e.Placement.Fits:
			return fmt.Sprintf("admitted (%s), its quota reserved; the cluster has room for its %d pending pod(s) now: the shard that places it binds them on its next cycle (pods beyond minMember each grow the reservation first, if the queue has room)", j.Phase, len(me.pending))
		case e.Placement != nil:
			return fmt.Sprintf("admitted (%s), its quota reserved, but no room on any node of the cluster for %d more pod(s): %s", j.Phase, e.Placement.Needed, e.Placement.Message)
		}
	}
	if c := e.Scheduler; c != nil && (c.Reason == "Reclaiming" || c.Reason == "Preempting") {
		return fmt.Sprintf("quota is being taken back for it: the quota is held for it and its pods are bound once its victims are gone (%s)", c.Message)
	}
	spec, _ := tree.Get(j.Queue)
	if spec.Closed {
		return fmt.Sprintf("its queue %q is closed (or closing): it admits no new job", j.Queue)
	}
	if !me.sized {
		return fmt.Sprintf("waiting for its pods: %d of minMember %d exist, and without minResources the gang cannot be sized until they do", len(me.pending)+me.bound, max(j.MinMember, 1))
	}
	for _, l := range e.Path {
		qs, _ := tree.Get(l.Queue)
		if d, over, bad := qs.Capability.Excess(me.ask); bad {
			return fmt.Sprintf("can never be admitted: it asks for %s of %s, above the capability %s of queue %q",
				api.FormatQuantity(d, me.ask.Get(d)), d, api.FormatQuantity(d, me.ask.Get(d)-over), l.Queue)
		}
	}
	for _, l := range e.Path {
		if len(l.Short) > 0 {
			var parts []string
			for _, d := range sortedDims(l.Short) {
				parts = append(parts, fmt.Sprintf("%s by %s", d, l.Short[d]))
			}
			msg := fmt.Sprintf("waiting for quota: queue %q is short of %s for it (held by admitted jobs %s, it asks %s, capability %s)",
				l.Queue, strings.Join(parts, " and "), dims(l.Held), dims(e.Ask), dims(l.Capability))
			if len(e.Holders) > 0 {
				msg += fmt.Sprintf("; the biggest holder is %s", e.Holders[0].Job)
			}
			return msg
		}
	}
	if e.Ahead > 0 && spec.DequeueStrategy != api.DequeueTraverse {
		return fmt.Sprintf("waiting in fifo queue %q behind %d job(s) not yet admitted (higher priority or older): %s first", j.Queue, e.Ahead, e.AheadJobs[0].Job)
	}
	if e.Placement != nil && !e.Placement.Fits {
		return fmt.Sprintf("its queue has room, but no node of the cluster has room for the gang now: %s", e.Placement.Message)
	}
	return "its queue has room and the cluster has room: it should be admitted on the scheduler's next pass (if it stays here, look at the scheduler's condition and events below)"
}

func sortedDims(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return strings.Compare(dimOrder(a), dimOrder(b)) })
	return keys
}
