package sim

import (
	"bytes"
	"fmt"
	"regexp"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"

	"github.com/google/pprof/profile"

	"github.com/shardsched/shardsched/cache"
)

// shardCode matches the functions of the packages a shard process runs
// (the coordinator's included: its leader runs in a shard), not the
// simulator's, etcd's or the shared api package's (the model allocates
// through api too; a shard's api allocations are under its own frames).
var shardCode = regexp.MustCompile(`^github\.com/shardsched/shardsched/(cache|scheduler|placement|status|shard|coordinator|wire|internal/shardproc)\.`)

// simCode matches the simulator's own functions (its cluster model).
var simCode = regexp.MustCompile(`^github\.com/shardsched/shardsched/bench/`)

// shardHeapMiB is the Go heap in use, as of the last GC, allocated by the
// shards' own code: the heap profile's in-use bytes of every sample whose
// innermost frame of either kind is a shard's, not the simulator's (a
// shard calls into the model to bind or evict; the model calls into a
// shard's cache to deliver events). Allocations made for a shard by
// libraries on goroutines of their own (memberlist, gRPC buffers) are not
// counted.
func shardHeapMiB() (float64, error) {
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		return 0, err
	}
	return shardHeapOf(buf.Bytes())
}

// shardHeapOf is shardHeapMiB of a heap profile already taken.
func shardHeapOf(prof []byte) (float64, error) {
	p, err := profile.ParseData(prof)
	if err != nil {
		return 0, err
	}
	return heapOf(p, shardCode, simCode)
}

// heapOf sums the in-use bytes (MiB) of the samples of p whose innermost
// frame matching code or other matches code.
func heapOf(p *profile.Profile, code, other *regexp.Regexp) (float64, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, fmt.Errorf("heap profile without inuse_space")
	}
	var sum int64
	for _, s := range p.Sample {
		if innermost(s, code, other) {
			sum += s.Value[idx]
		}
	}
	return float64(sum) / (1 << 20), nil
}

// innermost reports whether, walking s's stack from the allocation out,
// a frame matching code comes before any matching other.
func innermost(s *profile.Sample, code, other *regexp.Regexp) bool {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function == nil {
				continue
			}
			if code.MatchString(l.Function.Name) {
				return true
			}
			if other.MatchString(l.Function.Name) {
				return false
			}
		}
	}
	return false
}

// shardLiveHeaps stops every live shard, then lets go of them one after
// another and returns, for each, how much the live heap fell when it
// went: the memory that shard alone held (its cache, snapshots,
// scheduler, gossip and etcd client), measured rather than the process's
// divided by the shard count. All are stopped before the first is let go,
// so that no shard takes over another's partitions or coordinator while
// the others are measured. It ends the run: call it last. Strings a shard
// shares with the cluster model (the pods' names and UIDs, allocated by
// the model) stay live and are not counted; a shard process decoding its
// own pods would hold them too.
func (s *sim) shardLiveHeaps() []float64 {
	stopped := s.stopAll()
	var out []float64
	before := liveHeapMiB()
	for _, p := range stopped {
		p.Proc, p.cli, p.check = nil, nil, cache.Snapshot{}
		after := liveHeapMiB()
		out = append(out, before-after)
		before = after
	}
	return out
}

// liveHeapMiB is the live heap after a full collection.
func liveHeapMiB() float64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(sample[0].Value.Uint64()) / (1 << 20)
}
