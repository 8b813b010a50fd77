package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/shardsched/shardsched/api"
)

// The pods: a reflector whose store is the sink.
//
// Every shard follows every pod of the cluster, and the sink (the cache)
// keeps each one's task. An informer would keep each pod a second time in
// its own store, under a key of its own, in its index by node: at ready,
// with every pod bound, the informer's stored pods, its map, keys and index
// were over a third of a shard's live heap (a heap profile at 62,500 pods,
// the thirty-second session). So the pods are watched by a client-go
// Reflector alone, its store being podStore: each event is converted
// (storeTransform) and handed to the sink at once, a watch-list's pods too,
// as they stream (listedPod). Nothing is kept per pod: which pods a relist
// no longer lists, the sink tells from its own tasks
// (Sink.DeleteTasksExcept; a set of the pods' UIDs here was 9 MB at
// 250,000 pods).

// podRebuildTimeout bounds the list of one node's pods that rebuilds it
// (NodeState).
const podRebuildTimeout = 5 * time.Second

// nodeSlots is how many counters of pod events by node the store keeps
// (nodes share them by a hash of their name: a shared counter only makes
// a rebuild list again).
const nodeSlots = 256

// podStore is the pod reflector's store: it hands every pod event to the
// sink, in the reflector's goroutine. Safe for concurrent use.
type podStore struct {
	sink      Sink
	transform cache.TransformFunc
	// onBad reports a pod that could not be converted.
	onBad func(key string, err error)
	// relisted, when set, is told of every list after the first (a relist
	// of every pod: the watch could not resume), how many it listed and
	// how long it took from its request (0 if not known).
	relisted func(pods int, took time.Duration)
	// now is the clock the lists are timed by.
	now func() time.Time

	// mu orders the events and a rebuild (applyIfQuiet).
	mu sync.Mutex
	// touched counts, by nodeSlot, the events of pods bound to a node,
	// and every relist: a rebuild from a list of a node's pods is applied
	// only if its counter did not move while the list was read.
	touched [nodeSlots]uint64
	// listStart is when the last list or watch-list of every pod was
	// requested (listing).
	listStart time.Time
	// synced is closed once the first list has been handed to the sink.
	synced     chan struct{}
	syncedOnce sync.Once
}

var (
	_ cache.TransformingStore = (*podStore)(nil)
	_ cache.DoneChecker       = (*podStore)(nil)
)

func newPodStore(sink Sink, transform cache.TransformFunc, onBad func(string, error)) *podStore {
	return &podStore{sink: sink, transform: transform, onBad: onBad, now: time.Now, synced: make(chan struct{})}
}

// listing marks the request of a list, or a watch-list, of every pod (the
// pods' ListerWatcher calls it), from which Replace times the list.
func (s *podStore) listing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listStart = s.now()
}

// listedPod is what the reflector's temporary store keeps of each pod a
// watch-list streams: its UID (the string the pod's task in the sink holds
// too). The pod's task was handed to the sink as it came (stream), and the
// list's end (Replace) needs only which pods it listed. A converted pod
// kept there until the end instead weighed 602 bytes a pod more at the
// end of a relist, every pod's new and old state held at once
// (BenchmarkPodRelistHeap): ~150 MB at 250,000 pods, on a shard that keeps
// ~130.
type listedPod struct{ uid string }

// Transformer makes the reflector's own temporary store (a watch-list's
// initial events, kept until the list is complete) hand each pod on as it
// comes and keep only its listedPod.
func (s *podStore) Transformer() cache.TransformFunc { return s.stream }

// stream hands one pod of a watch-list to the sink at once and returns
// what the reflector's temporary store keeps of it. A watch-list's state
// is not older than the reflector's last, so its pods come to the sink as
// a watch's events would; the pods it does not have are forgotten only at
// its end (Replace), as they were when the whole list was handed on there.
// (A list that failed midway may have handed on pods newer than the one
// retried, from another API server's snapshot: the watch that follows the
// retried list brings them back up to date.) While a relist streams, every
// node's counter keeps moving, so a node's rebuild waits for its end.
func (s *podStore) stream(o any) (any, error) {
	if l, ok := o.(*listedPod); ok {
		return l, nil
	}
	p, err := s.take(o)
	if err != nil {
		return nil, err
	}
	return &listedPod{uid: string(p.uid)}, nil
}

// stored converts what the reflector hands over: a pod, or its storedPod
// (the transform takes either).
func (s *podStore) stored(o any) (*storedPod, error) {
	t, err := s.transform(unwrap(o))
	if err != nil {
		return nil, err
	}
	p, ok := t.(*storedPod)
	if !ok {
		return nil, fmt.Errorf("pod store: %T is not a pod", o)
	}
	return p, nil
}

// put hands one pod to the sink. s.mu is held.
func (s *podStore) put(p *storedPod) {
	if p.err != nil {
		// Left out; the cache keeps what it had (an earlier version that
		// converted, if any) until the pod is fixed or deleted.
		s.onBad(p.namespace+"/"+p.name, p.err)
		s.touch(p.nodeName)
		return
	}
	t := p.task()
	s.touch(t.NodeName)
	s.sink.AddOrUpdateTask(t)
}

func (s *podStore) Add(o any) error {
	_, err := s.take(o)
	return err
}

// take converts one pod and hands it to the sink, and returns it.
func (s *podStore) take(o any) (*storedPod, error) {
	p, err := s.stored(o)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(p)
	return p, nil
}

func (s *podStore) Update(o any) error { return s.Add(o) }

func (s *podStore) Delete(o any) error {
	o = unwrap(o)
	m, err := meta.Accessor(o)
	if err != nil {
		return fmt.Errorf("pod store: delete of %T: %w", o, err)
	}
	uid := string(m.GetUID())
	node := ""
	switch p := o.(type) {
	case *corev1.Pod:
		node = p.Spec.NodeName
	case *storedPod:
		node = p.nodeName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.DeleteTask(uid)
	s.touch(node)
	return nil
}

// touch counts an event of a pod bound to node. s.mu is held.
func (s *podStore) touch(node string) {
	if node != "" {
		s.touched[nodeSlot(node)]++
	}
}

func nodeSlot(node string) int { return int(xxhash.Sum64String(node) % nodeSlots) }

// touchedNode is the counter of node's pod events, read before a list of
// its pods.
func (s *podStore) touchedNode(node string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.touched[nodeSlot(node)]
}

// applyIfQuiet calls f, with the pod events held, if no event of a pod
// on node (and no relist) was taken since its counter read seen; it
// returns whether it did. A list of the node's pods read after seen is
// then as recent as the cache, and f (a rebuild from it) undoes no event.
func (s *podStore) applyIfQuiet(node string, seen uint64, f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.touched[nodeSlot(node)] != seen {
		return false
	}
	f()
	return true
}

// Replace takes a (re)list: every task of the sink whose pod is not listed
// is deleted (it went while the watch was down), then every pod listed and
// not yet handed on (a list's, where a watch-list's came as they were
// streamed) is handed to the sink. The first one marks the store synced.
func (s *podStore) Replace(list []any, _ string) error {
	if s.relisted != nil && cache.IsDone(s) {
		s.mu.Lock()
		var took time.Duration
		if !s.listStart.IsZero() {
			took = s.now().Sub(s.listStart)
		}
		s.mu.Unlock()
		s.relisted(len(list), took)
	}
	listed := make(map[string]struct{}, len(list))
	var pods []*storedPod
	for _, o := range list {
		if l, ok := o.(*listedPod); ok {
			listed[l.uid] = struct{}{}
			continue
		}
		p, err := s.stored(o)
		if err != nil {
			return err
		}
		listed[string(p.uid)] = struct{}{}
		pods = append(pods, p)
	}
	s.mu.Lock()
	for i := range s.touched {
		s.touched[i]++ // the deletes below are of pods whose node is not known here
	}
	s.sink.DeleteTasksExcept(func(uid string) bool {
		_, ok := listed[uid]
		return ok
	})
	for _, p := range pods {
		s.put(p)
	}
	s.mu.Unlock()
	s.syncedOnce.Do(func() { close(s.synced) })
	return nil
}

// Resync does nothing: the reflector runs without a resync period.
func (*podStore) Resync() error { return nil }

// Name and Done make the store the cache.DoneChecker of its first list
// having been handed to the sink.
func (*podStore) Name() string            { return "pods" }
func (s *podStore) Done() <-chan struct{} { return s.synced }

// podListWatch lists and watches every pod through cs, with the
// watch-list semantics cs supports (ListFirst), and calls listing at the
// request of each list (its first page) or watch-list.
func podListWatch(cs kubernetes.Interface, listing func()) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if opts.Continue == "" {
				listing() // a list's first page
			}
			return cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				listing() // a watch-list
			}
			return cs.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
		},
	}, cs)
}

// nodeTasks lists the pods bound to node from the API server, a read as
// recent as any (no resource version: not older than any event already
// taken), and converts them; a pod that cannot be converted is left out.
func nodeTasks(ctx context.Context, cs kubernetes.Interface, transform cache.TransformFunc, node string) ([]api.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, podRebuildTimeout)
	defer cancel()
	list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var tasks []api.Task
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != node {
			continue // a server (or a fake) that ignored the selector
		}
		o, err := transform(p)
		if err != nil {
			continue
		}
		if sp, ok := o.(*storedPod); ok && sp.err == nil {
			tasks = append(tasks, sp.task())
		}
	}
	return tasks, nil
}
