package kube

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardsched/shardsched/api"
)

// What the pods of a cluster have in common is kept once.
//
// Every string of a decoded pod is an allocation of its own, and every shard
// keeps every pod's task: the namespace, the scheduler's name, the group and
// queue names, the node's name and, above all, the two tolerations the API
// server's admission adds to every pod (node.kubernetes.io/not-ready and
// unreachable, with their operator and effect) were stored once per pod, a
// tenth of what a shard held at ready (a heap profile at 40,000 pods).

// The tables' bounds. A table that reaches its bound starts over: what
// tasks hold stays as it is, and what comes next is shared again. A cluster
// has few namespaces, queues, scheduler names and pod templates; the bounds
// are for the names that come and go (groups, nodes), so that a long-lived
// shard's tables never grow without end (at most a few MiB).
const (
	maxInternedStrings = 1 << 16
	maxTolerationLists = 4096
	maxShapes          = 8192
)

// podInterner shares what tasks converted from pods have in common. Tasks
// are read-only once converted (the cache copies what it keeps), so sharing
// is safe. Safe for concurrent use.
type podInterner struct {
	// onePod is the scalars map of every task whose only scalar is one
	// pod, most of them: a map per task was a seventh of what a shard kept
	// per pod.
	onePod map[string]int64

	mu          sync.Mutex
	strs        map[string]string
	tolerations map[string][]api.Toleration
	// shapes are the tasks without their per-pod fields, by shapeKey.
	shapes     map[string]*api.Task
	key        []byte // scratch for a toleration list's or a shape's key
	maxStrings int
	maxLists   int
	maxShapes  int
}

func newPodInterner() *podInterner {
	return &podInterner{onePod: map[string]int64{api.Pods: 1}, strs: map[string]string{},
		tolerations: map[string][]api.Toleration{}, shapes: map[string]*api.Task{},
		maxStrings: maxInternedStrings, maxLists: maxTolerationLists, maxShapes: maxShapes}
}

// str returns the shared copy of s. in.mu is held.
func (in *podInterner) str(s string) string {
	if s == "" {
		return s
	}
	if shared, ok := in.strs[s]; ok {
		return shared
	}
	if len(in.strs) >= in.maxStrings {
		clear(in.strs)
	}
	// A copy of its own: s may be part of a larger buffer the table must
	// not hold on to.
	s = strings.Clone(s)
	in.strs[s] = s
	return s
}

// task shares t's common parts (t is the caller's, just converted) and
// returns its shape: t without its per-pod fields (Name, UID, NodeName,
// Phase, Created), shared with every task converted before it that is
// equal to it in all the others. The shape is read-only.
func (in *podInterner) task(t *api.Task) *api.Task {
	if s := t.Request.Scalars; len(s) == 1 && s[api.Pods] == 1 {
		t.Request.Scalars = in.onePod
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	t.Namespace = in.str(t.Namespace)
	t.Job = in.str(t.Job)
	t.Queue = in.str(t.Queue)
	t.TaskSpec = in.str(t.TaskSpec)
	t.NodeName = in.str(t.NodeName)
	t.SchedulerName = in.str(t.SchedulerName)
	if len(t.Tolerations) > 0 {
		t.Tolerations = in.tolerationList(t.Tolerations)
	}
	in.key = appendShapeKey(in.key[:0], t)
	if shared, ok := in.shapes[string(in.key)]; ok {
		return shared
	}
	if len(in.shapes) >= in.maxShapes {
		clear(in.shapes)
	}
	sh := *t
	sh.Name, sh.UID, sh.NodeName, sh.Phase, sh.Created = "", "", "", "", time.Time{}
	in.shapes[string(in.key)] = &sh
	return &sh
}

// tolerationList returns the shared list equal to tols. in.mu is held.
func (in *podInterner) tolerationList(tols []api.Toleration) []api.Toleration {
	w := keyWriter(in.key[:0])
	w.tolerations(tols)
	in.key = w
	if shared, ok := in.tolerations[string(in.key)]; ok {
		return shared
	}
	for i := range tols {
		t := &tols[i]
		t.Key, t.Operator, t.Value, t.Effect = in.str(t.Key), in.str(t.Operator), in.str(t.Value), in.str(t.Effect)
	}
	if len(in.tolerations) >= in.maxLists {
		clear(in.tolerations)
	}
	// Full capacity: an append to one task's list must not write into the
	// list the others share.
	tols = tols[:len(tols):len(tols)]
	in.tolerations[string(in.key)] = tols
	return tols
}

// appendShapeKey appends to k a key of every field of t but the per-pod
// ones: two tasks have the same key if and only if they are equal in all
// those fields (a nil map or slice and an empty one differ, as they do to
// a deep comparison). Strings are preceded by their lengths and maps are
// written in key order, so no two different shapes share a key.
func appendShapeKey(k []byte, t *api.Task) []byte {
	w := keyWriter(k)
	w.str(t.Namespace)
	w.str(t.Job)
	w.flag(t.Implicit)
	w.str(t.Queue)
	w.str(t.TaskSpec)
	w.int(t.Request.MilliCPU)
	w.int(t.Request.Memory)
	w.count(t.Request.Scalars == nil, len(t.Request.Scalars))
	var buf [8]string
	for _, name := range sortedKeys(buf[:0], t.Request.Scalars) {
		w.str(name)
		w.int(t.Request.Scalars[name])
	}
	w.count(t.NodeSelector == nil, len(t.NodeSelector))
	for _, key := range sortedKeys(buf[:0], t.NodeSelector) {
		w.str(key)
		w.str(t.NodeSelector[key])
	}
	w.count(t.Affinity == nil, len(t.Affinity))
	for _, term := range t.Affinity {
		w.count(term.MatchExpressions == nil, len(term.MatchExpressions))
		for _, r := range term.MatchExpressions {
			w.str(r.Key)
			w.str(r.Operator)
			w.count(r.Values == nil, len(r.Values))
			for _, v := range r.Values {
				w.str(v)
			}
		}
	}
	w.count(t.Tolerations == nil, len(t.Tolerations))
	w.tolerations(t.Tolerations)
	w.int(int64(t.Priority))
	w.str(t.SchedulerName)
	w.flag(t.Protected)
	return w
}

// keyWriter appends the parts of a shape's key.
type keyWriter []byte

func (w *keyWriter) str(s string) {
	*w = binary.AppendUvarint(*w, uint64(len(s)))
	*w = append(*w, s...)
}

// tolerations writes each toleration's fields, each preceded by its
// length: no two lists share what is written.
func (w *keyWriter) tolerations(tols []api.Toleration) {
	for _, t := range tols {
		w.str(t.Key)
		w.str(t.Operator)
		w.str(t.Value)
		w.str(t.Effect)
	}
}

func (w *keyWriter) int(v int64) { *w = binary.AppendVarint(*w, v) }

func (w *keyWriter) flag(b bool) {
	if b {
		*w = append(*w, 1)
	} else {
		*w = append(*w, 0)
	}
}

// count writes whether a map or slice is nil and, if not, its length.
func (w *keyWriter) count(isNil bool, n int) {
	if isNil {
		*w = append(*w, 0)
		return
	}
	*w = binary.AppendUvarint(*w, uint64(n)+1)
}

// sortedKeys appends m's keys to keys, sorted.
func sortedKeys[V any](keys []string, m map[string]V) []string {
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
