package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/labels"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	schedlisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/consistencydetector"
	"k8s.io/client-go/util/watchlist"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"
	vinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	vlisters "volcano.sh/apis/pkg/client/listers/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
)

// Sink receives cluster events. Its methods are called from informer
// goroutines, concurrently; they must not block for long.
type Sink interface {
	AddOrUpdateNode(api.Node)
	DeleteNode(name, uid string)
	AddOrUpdateTask(api.Task)
	DeleteTask(uid string)
	// DeleteTasksExcept deletes every task whose UID keep reports false
	// (a relist of every pod: those it no longer lists). keep must not
	// call back into the Sink.
	DeleteTasksExcept(keep func(uid string) bool)
	AddOrUpdateJob(api.Job)
	DeleteJob(uid string)
}

// OnQueues receives the Queue objects' specs, sorted by name, and, per
// Queue that could not be converted (a negative or overflowing quantity),
// why. It is called once the Queue informer has synced (never with a
// partial initial list) and then only when the specs or the conversion
// errors changed (a status-only update of a Queue
// calls nothing); never twice at once. It must not block for long.
type OnQueues func(specs []api.QueueSpec, bad map[string]error)

// Source feeds a Sink from informers on Nodes, Pods, PodGroups and Queues,
// and reports the queue specs when they change. It is the event-source port
// of the scheduling core, implemented with client-go.
type Source struct {
	log       *slog.Logger
	sink      Sink
	onQueues  OnQueues
	core      informers.SharedInformerFactory
	vol       vinformers.SharedInformerFactory
	queueLst  vlisters.QueueLister
	queueSync cache.InformerSynced
	pgLst     vlisters.PodGroupLister
	classLst  schedlisters.PriorityClassLister
	// pgMu serializes PodGroup conversions, so that a PriorityClass event
	// re-converting a PodGroup from the lister cannot hand the sink an
	// older version after the PodGroup's own handler handed a newer one.
	pgMu sync.Mutex

	queueMu sync.Mutex // serializes queues() and onQueues; guards the fields below
	// lastSpecs and lastBad are what onQueues was last given (bad as
	// error texts); queuesSent is false until the first call.
	lastSpecs  []api.QueueSpec
	lastBad    map[string]string
	queuesSent bool

	// handlers are the event handlers' registrations, by informer: Start
	// waits until each has been handed its informer's initial list.
	handlers []handlerReg
	// The pods' reflector and its store (podstore.go), its goroutine, and
	// the list of one node's pods from the API server (nodeTasks).
	pods     *podStore
	listNode func(node string) ([]api.Task, error)
	podRefl  *cache.Reflector
	podsRun  sync.WaitGroup
	// watchList is whether the client lets informers take their initial
	// state as a watch-list (false under ListFirst; client-go's
	// WatchListClient feature decides too).
	watchList bool
	// regErr is why a handler could not be added (Start returns it).
	regErr error
}

// handlerReg is what tells that the informer named (or the pod
// reflector's store) has handed its initial list to its handler.
type handlerReg struct {
	informer string
	synced   cache.DoneChecker
}

// handle adds h to inf (named informer) and keeps its registration.
func (s *Source) handle(informer string, inf cache.SharedInformer, h cache.ResourceEventHandler) {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		s.regErr = errors.Join(s.regErr, fmt.Errorf("%s informer: %w", informer, err))
		return
	}
	s.handlers = append(s.handlers, handlerReg{informer, reg.HasSyncedChecker()})
}

// ListFirst returns cs marked, for client-go's informers built on it, as
// not taking their initial state through a watch-list (a stream of watch
// events with sendInitialEvents, client-go's default since 1.35): they list
// first, then watch (daemon.Options.ListFirst).
func ListFirst(cs kubernetes.Interface) kubernetes.Interface { return listFirst{cs} }

// listFirst answers client-go's question (util/watchlist) of whether a
// client does not support watch-list semantics.
type listFirst struct{ kubernetes.Interface }

func (listFirst) IsWatchListSemanticsUnSupported() bool { return true }

// errWatchListDetector is Start's refusal to run with client-go's
// watch-list consistency check on. That check, a switch for client-go's own
// CI, lists every object again after each watch-list, runs the list through
// the informer's transform a second time and panics when what it gets is
// not a Kubernetes object; the pod store's transform hands each pod to the
// cache and keeps only its UID, so the check would deliver every pod twice
// and then stop the process.
var errWatchListDetector = errors.New("KUBE_WATCHLIST_INCONSISTENCY_DETECTOR is set: client-go's watch-list consistency check " +
	"(a switch for client-go's own tests, which panics by design) cannot run on shardsched's pod store, which keeps no pods; " +
	"unset it, or run with --informer-list-first (or KUBE_FEATURE_WatchListClient=false)")

// NewSource builds the informers; Start runs them. onQueues may be nil.
func NewSource(cs kubernetes.Interface, vc volcano.Interface, sink Sink, onQueues OnQueues, log *slog.Logger) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	transform := storeTransform(newPodInterner())
	s := &Source{
		log: log, sink: sink, onQueues: onQueues,
		watchList: !watchlist.DoesClientNotSupportWatchListSemantics(cs),
		core:      informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(transform)),
		vol:       vinformers.NewSharedInformerFactoryWithOptions(vc, 0, vinformers.WithTransform(stripManagedFields)),
	}
	// The pods are followed by a reflector into the sink (podstore.go),
	// not by an informer that would keep them all a second time.
	s.pods = newPodStore(sink, transform, func(key string, err error) { s.bad("pod", key, err) })
	s.pods.relisted = func(pods int, took time.Duration) {
		// client-go logs why a watch ended only at high verbosity; a
		// relist of every pod is what an operator of a large cluster
		// needs to see (each one decodes every pod again, on the shard and
		// on the API server).
		log.Warn("listed every pod again: the pod watch could not resume", "pods", pods,
			"took", took.Round(time.Second), "hint", relistHint(took))
	}
	s.listNode = func(node string) ([]api.Task, error) { return nodeTasks(context.Background(), cs, transform, node) }
	s.podRefl = cache.NewReflectorWithOptions(podListWatch(cs, s.pods.listing), &corev1.Pod{}, s.pods, cache.ReflectorOptions{Name: "pods", TypeDescription: "*v1.Pod"})
	s.handle("nodes", s.core.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.node(o) },
		UpdateFunc: func(_, o any) { s.node(o) },
		DeleteFunc: func(o any) {
			if n, ok := unwrap(o).(*storedNode); ok {
				sink.DeleteNode(n.name, string(n.uid))
			}
		},
	})
	s.handlers = append(s.handlers, handlerReg{"pods", s.pods})
	// PriorityClasses resolve a PodGroup's priorityClassName; a class that
	// appears, changes or goes re-converts the PodGroups it concerns.
	pci := s.core.Scheduling().V1().PriorityClasses()
	s.classLst = pci.Lister()
	s.handle("priorityclasses", pci.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.priorityClass(o) },
		UpdateFunc: func(_, o any) { s.priorityClass(o) },
		DeleteFunc: func(o any) { s.priorityClass(o) },
	})
	s.pgLst = s.vol.Scheduling().V1beta1().PodGroups().Lister()
	s.handle("podgroups", s.vol.Scheduling().V1beta1().PodGroups().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.podGroup(o) },
		UpdateFunc: func(_, o any) { s.podGroup(o) },
		DeleteFunc: func(o any) {
			if pg, ok := unwrap(o).(*schedv1beta1.PodGroup); ok {
				sink.DeleteJob(string(pg.UID))
			}
		},
	})
	qi := s.vol.Scheduling().V1beta1().Queues()
	s.queueLst = qi.Lister()
	s.queueSync = qi.Informer().HasSynced
	s.handle("queues", qi.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.queues() },
		UpdateFunc: func(any, any) { s.queues() },
		DeleteFunc: func(any) { s.queues() },
	})
	return s
}

// apiServerWatchHistory is how long kube-apiserver keeps the events a
// watch can resume from by default: its watch cache's history window,
// max(75 s, --request-timeout + 15 s), with --request-timeout at 60 s.
const apiServerWatchHistory = 75 * time.Second

// relistHint tells an operator why the pods were listed again, from how
// long the list took. A list longer than the API server's watch history
// ends in another: the API server's cacher closes a watcher whose buffer
// (about a second of events) fills while it streams a long watch-list,
// and the watch from the list's resource version that follows finds that
// version gone, so a cluster whose pod list takes longer than the history
// relists every pod for ever.
func relistHint(took time.Duration) string {
	if took > apiServerWatchHistory {
		return "the list took longer than the API server keeps watch history (max(75s, its --request-timeout + 15s)), " +
			"so the watch that follows cannot resume from it and every such list is followed by another: " +
			"raise kube-apiserver's --request-timeout above the list's time, or lighten the API server's load"
	}
	return "the watch fell behind the API server's history or was dropped by it; see the API server's load"
}

// syncReportEvery is how often Start logs the informers it still waits for.
const syncReportEvery = 30 * time.Second

// Start runs the informers until ctx ends and waits for their first sync:
// every informer's initial list is in its store and has been handed to the
// sink. It waits without a deadline: listing a large cluster takes minutes
// on a busy API server (33 s at 100,000 pods on 2 shared cores), and a
// shard that gave up would only begin again from nothing, for ever. What it
// still waits for is logged every syncReportEvery and told by Pending.
func (s *Source) Start(ctx context.Context) error {
	if s.regErr != nil {
		return s.regErr
	}
	if s.watchList && clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) &&
		consistencydetector.IsDataConsistencyDetectionForWatchListEnabled() {
		return errWatchListDetector
	}
	s.core.Start(ctx.Done())
	s.vol.Start(ctx.Done())
	s.podsRun.Go(func() { s.podRefl.RunWithContext(ctx) })
	// A handler has synced once its informer's store has and the handler
	// has been given the whole initial list (handlers are fed from a
	// buffer of their own, behind the store): waiting on the store alone,
	// the scheduler would start with a cache short of pods already bound,
	// and place over them.
	t := time.NewTicker(syncReportEvery)
	defer t.Stop()
	for _, h := range s.handlers {
		if err := s.waitSynced(ctx, h, t.C); err != nil {
			return err
		}
	}
	s.queues()
	return nil
}

// waitSynced waits until h has been handed its informer's initial list or
// ctx ends, logging what is still pending at every tick.
func (s *Source) waitSynced(ctx context.Context, h handlerReg, tick <-chan time.Time) error {
	for {
		select {
		case <-h.synced.Done():
			return nil
		case <-ctx.Done():
			return fmt.Errorf("stopped before the %s informer had listed the cluster: %w", h.informer, ctx.Err())
		case <-tick:
			pending := s.Pending()
			s.log.Info("still listing the cluster", "waiting_for", strings.Join(pending, ","), "hint", syncHint(pending))
		}
	}
}

// Pending names the informers whose initial list has not yet been handed
// to the sink, in the order Start waits for them (none once it returned).
func (s *Source) Pending() []string {
	var out []string
	for _, h := range s.handlers {
		if !cache.IsDone(h.synced) {
			out = append(out, h.informer)
		}
	}
	return out
}

// syncHint is what to check when the informers pending never sync.
func syncHint(pending []string) string {
	for _, p := range pending {
		if p == "podgroups" || p == "queues" {
			return "are Volcano's CRDs (deploy/crds) installed?"
		}
	}
	return "a large cluster takes a while to list; see the API server's load"
}

// Shutdown stops the informers and waits for their goroutines.
func (s *Source) Shutdown() {
	s.core.Shutdown()
	s.vol.Shutdown()
	s.podsRun.Wait()
}

// NodeState calls apply with a node and the tasks bound to it as the API
// server has them, for rebuilding an out-of-sync node, and returns true;
// false (apply not called) when the node is not known, cannot be
// converted, or its pods could not be listed (within podRebuildTimeout
// each time). The node is read from its informer, its pods are listed
// from the API server (nothing is kept here per node: podstore.go), and
// apply runs with the pod events held, only if no event of a pod on the
// node reached the sink while the list was read (else it is read again,
// at most rebuildTries times): a rebuild, which replaces what the cache
// knows of the node, then undoes no event, and the pod watch never waits
// for a list.
func (s *Source) NodeState(name string, apply func(node api.Node, tasks []api.Task)) bool {
	o, found, err := s.core.Core().V1().Nodes().Informer().GetStore().GetByKey(name) // a node's key is its name
	n, stored := o.(*storedNode)
	if err != nil || !found || !stored || n.err != nil {
		return false
	}
	for range rebuildTries {
		seen := s.pods.touchedNode(name)
		tasks, err := s.listNode(name)
		if err != nil {
			s.log.Warn("node out of sync not rebuilt", "node", name, "err", err)
			return false
		}
		if s.pods.applyIfQuiet(name, seen, func() { apply(n.node, tasks) }) {
			return true
		}
	}
	s.log.Info("node out of sync not rebuilt yet: its pods changed while they were listed", "node", name, "tries", rebuildTries)
	return false
}

// rebuildTries is how many lists of a node's pods NodeState reads at most
// before it leaves the node to the next call.
const rebuildTries = 3

// bad logs an object that could not be converted: it is left out (a
// Queue's is also reported on the Queue by its owner, QueueReporter).
func (s *Source) bad(kind, key string, err error) {
	s.log.Warn("cannot convert object; ignoring it", "kind", kind, "object", key, "err", err)
}

// node hands the sink the node the transform converted (storeNode).
func (s *Source) node(o any) {
	n, ok := o.(*storedNode)
	if !ok {
		return
	}
	if n.err != nil {
		s.bad("node", n.name, n.err)
		return
	}
	s.sink.AddOrUpdateNode(n.node)
}

func (s *Source) podGroup(o any) {
	pg, ok := o.(*schedv1beta1.PodGroup)
	if !ok {
		return
	}
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	s.convertPodGroup(pg)
}

// convertPodGroup hands pg to the sink. s.pgMu is held.
func (s *Source) convertPodGroup(pg *schedv1beta1.PodGroup) {
	j, err := JobFromPodGroup(pg)
	if err != nil {
		s.bad("podgroup", pg.Namespace+"/"+pg.Name, err)
		return
	}
	j.Priority = s.classValue(j.PriorityClass)
	s.sink.AddOrUpdateJob(j)
}

// classValue is the value of the named PriorityClass; for a name with no
// class (or none given), the global default class's value, else 0, as the
// API server's Priority admission resolves a pod's.
func (s *Source) classValue(name string) int32 {
	if name == "" {
		return 0
	}
	if pc, err := s.classLst.Get(name); err == nil {
		return pc.Value
	}
	classes, _ := s.classLst.List(labels.Everything())
	var def int32
	for _, pc := range classes {
		if pc.GlobalDefault {
			def = pc.Value
		}
	}
	return def
}

// priorityClass re-converts the PodGroups whose priority a class event may
// change: those naming it, and, when it is (or was) the global default,
// those naming a class that does not exist. Cost: O(PodGroups) per
// PriorityClass event, which are rare.
func (s *Source) priorityClass(o any) {
	pc, ok := unwrap(o).(*schedv1.PriorityClass)
	if !ok {
		return
	}
	pgs, err := s.pgLst.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pg := range pgs {
		name := pg.Spec.PriorityClassName
		if name == "" {
			continue
		}
		if name != pc.Name {
			if _, err := s.classLst.Get(name); err == nil {
				continue // its own class decides; the default does not matter
			}
		}
		s.pgMu.Lock()
		// The newest version, read under the lock (see pgMu).
		if cur, err := s.pgLst.PodGroups(pg.Namespace).Get(pg.Name); err == nil && cur.UID == pg.UID {
			s.convertPodGroup(cur)
		}
		s.pgMu.Unlock()
	}
}

// queues converts every Queue and calls onQueues when the result differs
// from the last call. Cost: O(queues) per Queue event.
func (s *Source) queues() {
	if !s.queueSync() {
		// The initial list is still arriving: a partial set would report
		// children before their parents as left out. Start calls again.
		return
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	qs, err := s.queueLst.List(labels.Everything())
	if err != nil {
		s.log.Warn("cannot list queues", "err", err)
		return
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	var specs []api.QueueSpec
	bad := map[string]error{}
	badText := map[string]string{}
	for _, q := range qs {
		spec, err := QueueSpecFromVolcano(q)
		if err != nil {
			bad[q.Name], badText[q.Name] = err, err.Error()
			continue
		}
		specs = append(specs, spec)
	}
	if s.queuesSent && api.EqualSpecs(specs, s.lastSpecs) && maps.Equal(badText, s.lastBad) {
		return // a status-only update, or nothing that matters here
	}
	for n, why := range badText {
		if s.lastBad[n] != why {
			s.log.Warn("cannot convert queue; it is left out of the queue tree", "queue", n, "err", why)
		}
	}
	s.lastSpecs, s.lastBad, s.queuesSent = specs, badText, true
	if s.onQueues != nil {
		s.onQueues(specs, bad)
	}
}

// InvalidQueueMarks returns, per Queue object carrying the invalid-queue
// annotation (InvalidQueueAnnotation), its text, from the informer cache.
func (s *Source) InvalidQueueMarks() map[string]string {
	out := map[string]string{}
	qs, err := s.queueLst.List(labels.Everything())
	if err != nil {
		return out
	}
	for _, q := range qs {
		if v, ok := q.Annotations[InvalidQueueAnnotation]; ok {
			out[q.Name] = v
		}
	}
	return out
}

// QueueUID returns the UID of a Queue object from the informer cache ("" if
// none).
func (s *Source) QueueUID(name string) string {
	q, err := s.queueLst.Get(name)
	if err != nil {
		return ""
	}
	return string(q.UID)
}

func unwrap(o any) any {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

// Objects returns the Queues and PodGroups in the informer cache (shared:
// the caller must not modify them), for read-only views such as the web UI.
func (s *Source) Objects() ([]*schedv1beta1.Queue, []*schedv1beta1.PodGroup, error) {
	qs, err := s.queueLst.List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	pgs, err := s.pgLst.List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	return qs, pgs, nil
}
