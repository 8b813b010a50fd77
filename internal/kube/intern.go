package kube

import (
	"strings"
	"sync"

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
	key         []byte // scratch for a toleration list's key
	maxStrings  int
	maxLists    int
}

func newPodInterner() *podInterner {
	return &podInterner{onePod: map[string]int64{api.Pods: 1}, strs: map[string]string{},
		tolerations: map[string][]api.Toleration{}, maxStrings: maxInternedStrings, maxLists: maxTolerationLists}
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

// task shares t's common parts (t is the caller's, just converted).
func (in *podInterner) task(t *api.Task) {
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
}

// tolerationList returns the shared list equal to tols. in.mu is held.
func (in *podInterner) tolerationList(tols []api.Toleration) []api.Toleration {
	k := in.key[:0]
	for _, t := range tols {
		// Each field is preceded by its length: no two lists share a key.
		for _, f := range [...]string{t.Key, t.Operator, t.Value, t.Effect} {
			k = append(k, byte(len(f)), byte(len(f)>>8), byte(len(f)>>16), byte(len(f)>>24))
			k = append(k, f...)
		}
	}
	in.key = k
	if shared, ok := in.tolerations[string(k)]; ok {
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
	in.tolerations[string(k)] = tols
	return tols
}
