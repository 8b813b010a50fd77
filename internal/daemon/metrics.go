package daemon

import (
	"net/http"

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
	reg.MustRegister(d.sched.Collectors()...)
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
	counter("admissions_total", "Jobs admitted by the coordinator.", func() float64 { return float64(st().Admitted) })
	counter("admission_waits_total", "Admissions refused for lack of quota.", func() float64 { return float64(st().QuotaWaits) })
	counter("cycles_total", "Scheduling cycles run.", func() float64 { return float64(st().Cycles) })
	counter("coordinator_groups_total", "Groups committed while leading.", func() float64 { return float64(d.Coord.Stats().Groups) })
	return reg
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
		if len(d.Shard.Members()) == 0 {
			http.Error(w, "not in the ring yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
