package sim

import (
	"fmt"
	"regexp"
	"runtime"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/cache"
)

// heapOf counts a sample for the shards when the innermost frame that is
// either a shard's or the model's is a shard's.
func TestHeapOfCountsShardFrames(t *testing.T) {
	fn := func(name string) *profile.Location {
		return &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: name}}}}
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_space"}, {Type: "inuse_space"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{fn("github.com/shardsched/shardsched/api.NewResource"), fn("github.com/shardsched/shardsched/cache.(*Cache).setTaskLocked"), fn("github.com/shardsched/shardsched/bench/sim.(*Cluster).Bind")}, Value: []int64{9 << 20, 3 << 20}},
			{Location: []*profile.Location{fn("github.com/shardsched/shardsched/api.NewResource"), fn("github.com/shardsched/shardsched/bench/sim.(*Cluster).newPodLocked")}, Value: []int64{9 << 20, 5 << 20}},
			{Location: []*profile.Location{fn("go.etcd.io/etcd/server/v3/storage/mvcc.(*keyIndex).put")}, Value: []int64{9 << 20, 7 << 20}},
			// The model allocating while a shard's binder calls it: the model's.
			{Location: []*profile.Location{fn("github.com/shardsched/shardsched/bench/sim.(*Cluster).Bind"), fn("github.com/shardsched/shardsched/scheduler.(*Scheduler).bindOne")}, Value: []int64{9 << 20, 11 << 20}},
		},
	}
	if got, err := heapOf(p, shardCode, simCode); err != nil || got != 3 {
		t.Errorf("heapOf = %g MiB, %v; want the 3 MiB allocated by the cache", got, err)
	}
	if got, _ := heapOf(p, regexp.MustCompile(`^go\.etcd\.io/`), simCode); got != 7 {
		t.Errorf("heapOf(etcd) = %g MiB, want 7", got)
	}
	if got, _ := heapOf(p, simCode, shardCode); got != 16 {
		t.Errorf("heapOf(model) = %g MiB, want 5 + 11", got)
	}
	p.SampleType = p.SampleType[:1]
	if _, err := heapOf(p, shardCode, simCode); err == nil {
		t.Error("a profile without inuse_space: no error")
	}
}

// What a cache holds shows up in shardHeapMiB, measured on this process.
func TestShardHeapSeesACache(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100k tasks")
	}
	runtime.GC()
	before, err := shardHeapMiB()
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(cache.Options{})
	for i := range 100_000 {
		c.AddOrUpdateTask(api.Task{Namespace: "ns", Name: fmt.Sprintf("pod-%06d", i), UID: fmt.Sprintf("uid-%06d", i), Job: fmt.Sprintf("job-%d", i/8),
			Request: api.NewResource(1000, 1<<30, map[string]int64{api.Pods: 1}), Phase: api.TaskPending})
	}
	runtime.GC()
	after, err := shardHeapMiB()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 20 {
		t.Errorf("shard heap %.1f → %.1f MiB with 100,000 tasks in a cache; want at least 20 MiB more", before, after)
	}
	runtime.KeepAlive(c)
}
