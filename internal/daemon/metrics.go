package daemon

import (
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/internal/ui"
	"github.com/shardsched/shardsched/scheduler"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registerMetrics exposes the daemon's counters on its own registry (no
// global registry: several daemons may run in one test process).
func (d *Daemon) registerMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "shardsched", Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "shardsched", Name: name, Help: help}, f))
	}
	reg.MustRegister(d.obs.collectors()...)
	gauge("owned_keys", "Partitions and queues this shard holds.", func() float64 { return float64(len(d.Shard.Owned())) })
	counter("ownership_changes_total", "Ownership records acquired or released.", func() float64 { return float64(d.Shard.OwnershipChanges()) })
	gauge("gossip_members", "Live members seen by gossip.", func() float64 { return float64(len(d.Shard.Members())) })
	gauge("coordinator_leader", "1 if this process leads the coordinator.", func() float64 {
		if d.Coord.IsLeader() {
			return 1
		}
		return 0
	})
	gauge("nodes_out_of_sync", "Owned nodes whose books are out of sync (F2).", func() float64 { return float64(len(d.Cache.OutOfSync())) })
	counter("nodes_out_of_sync_total", "Transitions of nodes into out of sync (F2).", func() float64 { return float64(d.Cache.OutOfSyncTotal()) })
	gauge("status_pending", "Queue and PodGroup status entries waiting for a flush (F3).", func() float64 { return float64(d.Status.Stats().Pending) })
	counter("status_writes_total", "Status writes sent to the API server.", func() float64 { return float64(d.Status.Stats().Writes) })
	counter("status_conflicts_total", "Status writes answered 409 Conflict (expected 0).", func() float64 { return float64(d.Status.Stats().Conflicts) })
	counter("status_coalesced_total", "Status updates absorbed without a write.", func() float64 { return float64(d.Status.Stats().Coalesced) })
	st := d.sched.Stats
	counter("binds_total", "Pods bound.", func() float64 { return float64(st().Binds) })
	counter("bind_failures_total", "Bind calls that failed.", func() float64 { return float64(st().BindFailures) })
	counter("status_fenced_total", "Queue status values dropped because this shard no longer held the queue's record.", func() float64 { return float64(d.Status.Stats().Fenced) })
	counter("status_held_total", "Times a flush held a status: a PodGroup's whose counts alone changed within --podgroup-counts-interval of its last write, or a busy Queue's within --queue-counts-interval.", func() float64 { return float64(d.Status.Stats().Held) })
	counter("reservations_orphaned_total", "Reservations released by reconciliation because no job they could cover exists.", func() float64 { return float64(st().Orphans) })
	counter("reservations_lost_total", "Admissions found without their reservation (gone with an expired session lease) and asked for again.", func() float64 { return float64(st().LostReservations) })
	counter("starvation_holds_total", "Node holds started for gangs that waited too long for room (see scheduler/hold.go).", func() float64 { return float64(st().Holds) })
	counter("assume_refused_total", "Gang plans dropped for a cycle because the cache refused one of their tasks (the node changed since the snapshot).", func() float64 { return float64(st().AssumeRefused) })
	counter("admissions_total", "Jobs admitted by the coordinator.", func() float64 { return float64(st().Admitted) })
	counter("admission_waits_total", "Admissions refused for lack of quota.", func() float64 { return float64(st().QuotaWaits) })
	counter("cycles_total", "Scheduling cycles run.", func() float64 { return float64(st().Cycles) })
	counter("handoff_offers_total", "Jobs that did not fit here offered to another shard.", func() float64 { return float64(st().Offers) })
	counter("handoff_offer_timeouts_total", "Offers withdrawn because no shard claimed them in time.", func() float64 { return float64(st().OfferTimeouts) })
	counter("handoff_claims_total", "Jobs claimed here from another shard's offer.", func() float64 { return float64(st().Claims) })
	counter("handoff_refusals_total", "Offers refused and claims given up here because the job did not fit.", func() float64 { return float64(st().Refusals) })
	counter("coordinator_groups_total", "Groups committed while leading.", func() float64 { return float64(d.Coord.Stats().Groups) })
	reg.MustRegister(newQueueCollector(d), d.steps)
	return reg
}

// queueCollector exports the queues this shard owns: CPU in cores, memory
// in bytes, other resources as counted.
type queueCollector struct {
	d                                     *Daemon
	allocated, capability, deserved, jobs *prometheus.Desc
}

func newQueueCollector(d *Daemon) queueCollector {
	desc := func(name, help, label string) *prometheus.Desc {
		return prometheus.NewDesc("shardsched_queue_"+name, help, []string{"queue", label}, nil)
	}
	return queueCollector{d: d,
		allocated:  desc("allocated", "Resources bound to the queue's pods (and its descendants'), per resource; exported by the queue's owner. CPU in cores.", "resource"),
		capability: desc("capability", "The queue's hard limit per resource (absent: unlimited). CPU in cores.", "resource"),
		deserved:   desc("deserved", "The queue's deserved share per resource. CPU in cores.", "resource"),
		jobs:       desc("jobs", "The queue's jobs by state (pending, inqueue, running).", "state"),
	}
}

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.allocated
	ch <- c.capability
	ch <- c.deserved
	ch <- c.jobs
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	tree := c.d.sched.Tree()
	for q, st := range c.d.sched.QueueStatuses() {
		for _, dim := range st.Allocated.Dims() {
			if dim == api.Pods {
				continue
			}
			sendConst(ch, c.allocated, prometheus.GaugeValue, unit(dim, st.Allocated.Get(dim)), q, dim)
		}
		sendConst(ch, c.jobs, prometheus.GaugeValue, float64(st.Pending), q, "pending")
		sendConst(ch, c.jobs, prometheus.GaugeValue, float64(st.Inqueue), q, "inqueue")
		sendConst(ch, c.jobs, prometheus.GaugeValue, float64(st.Running), q, "running")
		if tree == nil {
			continue
		}
		spec, ok := tree.Get(q)
		if !ok {
			continue
		}
		for _, dim := range spec.Capability.Dims() {
			v, _ := spec.Capability.Get(dim)
			sendConst(ch, c.capability, prometheus.GaugeValue, unit(dim, v), q, dim)
		}
		for _, dim := range spec.Deserved.Dims() {
			sendConst(ch, c.deserved, prometheus.GaugeValue, unit(dim, spec.Deserved.Get(dim)), q, dim)
		}
	}
}

// unit converts the API's integer amounts to Prometheus base units.
func unit(dim string, v int64) float64 {
	if dim == api.CPU {
		return float64(v) / 1000
	}
	return float64(v)
}

// Handler serves /metrics, /healthz and /readyz.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !d.synced.Load() {
			waiting := "scheduling to start"
			if p := d.Source.Pending(); len(p) > 0 {
				waiting = "the informers of " + strings.Join(p, ", ")
			}
			http.Error(w, "starting: the informers have not handed their initial lists to the cache yet; waiting for "+waiting, http.StatusServiceUnavailable)
			return
		}
		if len(d.Shard.Members()) == 0 {
			http.Error(w, "not in the ring yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	// The read-only web UI (internal/ui).
	mux.Handle("/ui/", ui.Handler(d.overview))
	mux.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
	if d.opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// sendConst sends one sample to Collect's channel; a sample that cannot be
// built (it never happens with these fixed descriptors) is left out rather
// than failing the scrape.
func sendConst(ch chan<- prometheus.Metric, desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(desc, t, v, labels...); err == nil {
		ch <- m
	}
}

// promObserver exports the scheduler's measurements (scheduler.Observer) as
// Prometheus histograms and counters; safe for concurrent use.
type promObserver struct {
	submitToBind, admissionWait, reserve, resize, place prometheus.Histogram
	bindWait, bindCall                                  prometheus.Histogram
	evictions                                           *prometheus.CounterVec
	victims, reclaimToRunning                           prometheus.Histogram
}

var _ scheduler.Observer = (*promObserver)(nil)

func newPromObserver() *promObserver {
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "shardsched", Name: name, Help: help, Buckets: buckets})
	}
	slow := prometheus.ExponentialBuckets(0.005, 2, 16)  // 5 ms .. ~164 s
	fast := prometheus.ExponentialBuckets(0.0001, 2, 16) // 0.1 ms .. ~3.3 s
	return &promObserver{
		submitToBind:  h("submit_to_bind_seconds", "Pod creation to successful bind.", slow),
		admissionWait: h("admission_wait_seconds", "PodGroup creation to admission by the coordinator.", slow),
		reserve:       h("reservation_seconds", "Coordinator reservation latency seen by the shard.", fast),
		resize:        h("resize_seconds", "One resize of a job's reservation to what its tasks ask, seen by the shard (a job growing as its pods arrive).", fast),
		place:         h("placement_seconds", "Gang placement (filter and score) time per job and cycle.", fast),
		bindWait:      h("bind_wait_seconds", "A placed pod's wait for a bind worker (placement to the start of its bind call).", slow),
		bindCall:      h("bind_call_seconds", "One bind call to the API server, answered either way.", slow),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shardsched", Name: "evictions_total",
			Help: "Pods evicted, by reason (reclaim: to a queue below its deserved share; preempt: to a job of higher priority in the same queue; node: room on nodes for a job of higher priority)."}, []string{"reason"}),
		victims: h("victims_per_preemption", "Jobs marked to give quota back per job that took it (reclaim or preemption), seen by the preemptor's queue owner.",
			prometheus.ExponentialBuckets(1, 2, 8)),
		reclaimToRunning: h("reclaim_to_running_seconds", "Time from a job's nomination (quota taken back for it) to its gang bound.",
			prometheus.ExponentialBuckets(0.05, 2, 14)),
	}
}

func (o *promObserver) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.submitToBind, o.admissionWait, o.reserve, o.resize, o.place, o.bindWait, o.bindCall, o.evictions, o.victims, o.reclaimToRunning}
}

func (o *promObserver) SubmitToBind(d time.Duration)     { o.submitToBind.Observe(d.Seconds()) }
func (o *promObserver) AdmissionWait(d time.Duration)    { o.admissionWait.Observe(d.Seconds()) }
func (o *promObserver) Reserve(d time.Duration)          { o.reserve.Observe(d.Seconds()) }
func (o *promObserver) Resize(d time.Duration)           { o.resize.Observe(d.Seconds()) }
func (o *promObserver) Place(d time.Duration)            { o.place.Observe(d.Seconds()) }
func (o *promObserver) BindWait(d time.Duration)         { o.bindWait.Observe(d.Seconds()) }
func (o *promObserver) BindCall(d time.Duration)         { o.bindCall.Observe(d.Seconds()) }
func (o *promObserver) Evicted(reason string)            { o.evictions.WithLabelValues(reason).Inc() }
func (o *promObserver) Victims(n int)                    { o.victims.Observe(float64(n)) }
func (o *promObserver) ReclaimToRunning(d time.Duration) { o.reclaimToRunning.Observe(d.Seconds()) }
