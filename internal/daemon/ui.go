package daemon

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/internal/ctl"
	"github.com/shardsched/shardsched/internal/ui"
	"github.com/shardsched/shardsched/internal/version"
	"github.com/shardsched/shardsched/wire"
)

// overview builds the web UI's document from this shard's informer caches
// (Queues with the status their owners wrote, PodGroups with the reasons
// their owners wrote), the ring as this shard sees it, and its counters.
func (d *Daemon) overview(*http.Request) (*ui.Overview, error) {
	if !d.synced.Load() {
		return nil, errors.New("the shard is starting: its informers have not listed the cluster yet")
	}
	now := time.Now()
	o := &ui.Overview{Shard: d.opts.Name, Version: version.String(), Now: now, Evictions: []string{}}
	qs, pgs, err := d.Source.Objects()
	if err != nil {
		return nil, err
	}
	queues := make([]schedv1beta1.Queue, 0, len(qs))
	for _, q := range qs {
		queues = append(queues, *q)
	}
	o.Queues = ctl.QueueTree(queues)
	o.Waiting, o.WaitingTotal = ui.WaitingJobs(pgs, now)

	ring := d.Shard.Ring()
	views := map[string]*ui.ShardView{}
	for _, m := range d.Shard.Members() {
		views[m.ID] = &ui.ShardView{Name: m.ID, Self: m.ID == d.opts.Name}
	}
	count := func(key string, queue bool) {
		owner, ok := ring.Owner(key)
		if v := views[owner]; ok && v != nil {
			if queue {
				v.Queues++
			} else {
				v.Partitions++
			}
		}
	}
	for i := range d.opts.Shard.Partitions {
		count(wire.PartitionKey(i), false)
	}
	for _, r := range o.Queues {
		if r.LeftOut == "" {
			count(wire.QueueKey(r.Name), true)
		}
	}
	if v := views[d.opts.Name]; v != nil {
		v.Leader = d.Coord.IsLeader()
	}
	for _, v := range views {
		o.Shards = append(o.Shards, *v)
	}
	slices.SortFunc(o.Shards, func(a, b ui.ShardView) int { return strings.Compare(a.Name, b.Name) })

	st := d.sched.Stats()
	o.Binds, o.BindFailures, o.OwnershipChanges = st.Binds, st.BindFailures, d.Shard.OwnershipChanges()
	if mfs, err := d.registry.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "shardsched_submit_to_bind_seconds" && len(mf.GetMetric()) > 0 {
				o.Latency = ui.LatencyFrom(mf.GetMetric()[0].GetHistogram())
			}
		}
	}
	if o.Latency.Count == 0 {
		o.Latency = ui.LatencyFrom(nil)
	}
	return o, nil
}
