package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/bench/procstat"
	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/internal/cluster"
)

// procSystem is shards cmd/shardsched OS processes (as a StatefulSet runs
// them, one process a pod) on an etcd of the run's own. Its figures are the
// processes' own: CPU and peak RSS per process, and, once the run's pods
// are bound, how long shard-0 takes to be ready and to own its keys again
// after a restart with every pod of the run in the cluster (restart
// warm-up).
type procSystem struct{ shards int }

// shardReadyWithin bounds a shard process's start, to its /readyz, where
// the cluster holds a few thousand pods at most (the chaos and faults
// modes).
const shardReadyWithin = 5 * time.Minute

// procReadyWithin bounds the start of n shard processes, to every one's
// /readyz and every key owned, with up to pods pods in the cluster
// (restart mode creates them first). Each process lists every pod, so the
// n start-ups share the machine: shardReadyWithin, and a minute more per
// 60,000 pods listed in all (one process took about a minute for 250,000
// pods on 2 busy cores; 8 processes at that size: 38 minutes, a bound
// with a margin, not an estimate).
func procReadyWithin(pods, n int) time.Duration {
	return shardReadyWithin + time.Duration(int64(pods)*int64(n)/60000)*time.Minute
}

func (p procSystem) start(ctx context.Context, env *benchEnv, run runSpec) (*instance, error) {
	if env.shardschedBin == "" {
		return nil, errors.New("shardsched-proc: no cmd/shardsched binary was built")
	}
	vc, err := volcano.NewForConfig(env.rest)
	if err != nil {
		return nil, err
	}
	total, err := ownershipKeys(ctx, vc)
	if err != nil {
		return nil, err
	}
	etcd, err := cluster.StartEtcd(cluster.EtcdOptions{LogLevel: "fatal"})
	if err != nil {
		return nil, err
	}
	var extra []string
	if env.profileSeconds > 0 {
		extra = append(extra, "--profiling")
	}
	within := procReadyWithin(run.pods, p.shards)
	shards, err := startChaosShards(filepath.Join(env.dir, run.namespace), env.shardschedBin, p.shards, run.schedName,
		directLinks(etcd.Endpoints[0], env.kubeconfig), within, extra...)
	if err != nil {
		etcd.Close()
		return nil, err
	}
	var peak int64
	stopped := false
	stop := func() int64 {
		if !stopped {
			stopped = true
			for _, s := range shards {
				peak = max(peak, s.proc.stop())
			}
			etcd.Close()
		}
		return peak
	}
	t0 := time.Now()
	// The time said is to the first round of the settled second, not to
	// its end (the second's hold is the monitor's, not the shards').
	at, err := newMonitor(shards).settledAt(ctx, total, within)
	if err != nil {
		stop()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  %d shard processes own all %d keys %.1f s after all were ready\n", p.shards, total, at.Sub(t0).Seconds())
	// Every shard is ready here (startChaosShards waits for each /readyz):
	// the run's CPU is counted from now, without the start-up's, which
	// restart mode reads whole (sinceStart).
	cpu0 := make([]time.Duration, len(shards))
	for i, s := range shards {
		cpu0[i] = s.proc.cpu()
	}
	return &instance{
		clockStarted: func(ctx context.Context, profiles *profileSet) {
			if env.profileSeconds <= 0 {
				return
			}
			for _, s := range shards {
				path := env.profilePath(run, s.name)
				profiles.take(ctx, func(ctx context.Context) string {
					return fetchProfile(ctx, strings.TrimSuffix(s.metrics, "/metrics"), env.profileSeconds, path, s.name)
				})
			}
		},
		cpu: func() time.Duration {
			var sum time.Duration
			for i, s := range shards {
				sum += s.proc.cpu() - cpu0[i]
			}
			return sum
		},
		check: func() error { return unexpectedExit(shards) },
		ready: func(ctx context.Context, timeout time.Duration) error {
			for _, s := range shards {
				if err := s.proc.waitReady(ctx, s.readyz, timeout); err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
			}
			return nil
		},
		sinceStart: func() (time.Duration, float64) {
			var cpu time.Duration
			var peak float64
			for _, s := range shards {
				cpu += s.proc.cpu()
				if rss, err := procstat.PeakRSSMiBOf(s.proc.cmd.Process.Pid); err == nil {
					peak = max(peak, rss)
				}
			}
			return cpu, peak
		},
		stop: stop,
		finish: func(ctx context.Context) (finished, error) {
			var f finished
			scraped := make([]map[string]float64, 0, len(shards))
			for _, s := range shards {
				m, err := scrapeMetrics(ctx, http.DefaultClient, s.metrics)
				if err != nil {
					f.notes = append(f.notes, fmt.Sprintf("%s: no breakdown of the pods' waits: %v", s.name, err))
					continue
				}
				scraped = append(scraped, m)
				if n := waitsNote(m); n != "" {
					f.notes = append(f.notes, s.name+": "+n)
				}
			}
			if len(shards) > 1 {
				f.notes = append(f.notes, handoffNote(scraped, len(shards)))
			}
			for i, s := range shards {
				rss, err := procstat.PeakRSSMiBOf(s.proc.cmd.Process.Pid)
				if err != nil {
					return finished{}, fmt.Errorf("%s: %w", s.name, err)
				}
				life := s.proc.cpu()
				f.notes = append(f.notes, fmt.Sprintf("%s: %.1f CPU s from every shard's being ready to the restarts (%.1f over its life, its start included), peak RSS %.0f MiB (its first process, before the restarts below)", s.name, (life-cpu0[i]).Seconds(), life.Seconds(), rss))
			}
			for k := range max(env.restarts, 1) {
				var profile string
				if env.profileSeconds > 0 && k == 0 {
					profile = env.profilePath(run, shards[0].name+"-restart")
				}
				r, err := restartShard(ctx, shards, 0, k+1, total, within, profile, min(env.profileSeconds, restartProfileSeconds))
				if err != nil {
					// The run's figures so far are kept: the restart is
					// reported as not timed (the run fails) and the
					// restarts stop there.
					f.restarts = append(f.restarts, report.Restart{What: fmt.Sprintf("%s, restart %d", shards[0].name, k+1), Error: err.Error()})
					break
				}
				f.restarts = append(f.restarts, r.Restart)
				if r.profile != "" {
					f.notes = append(f.notes, r.profile)
				}
			}
			f.notes = append(f.notes, fmt.Sprintf("restart warm-up: %s stopped (SIGTERM) and started again %d times with the run's %d pods in the cluster; the baseline is kube-scheduler started cold against the same cluster, timed to its /readyz (its handlers synced)",
				shards[0].name, len(f.restarts), run.pods))
			// The other shards ran on through the restarts, holding the
			// restarted one's keys while it was down: their peaks over
			// the whole run, which the notes above do not cover.
			var peaks []string
			for _, s := range shards {
				if rss, err := procstat.PeakRSSMiBOf(s.proc.cmd.Process.Pid); err == nil {
					peaks = append(peaks, fmt.Sprintf("%s %.0f", s.name, rss))
				}
			}
			f.notes = append(f.notes, fmt.Sprintf("peak RSS over the whole run, MiB (%s: its last process): %s", shards[0].name, strings.Join(peaks, ", ")))
			cold, err := kubeSchedulerColdStart(ctx, env, run)
			if err != nil {
				f.notes = append(f.notes, "restart baseline: "+err.Error())
			} else {
				f.coldStart = &cold
			}
			return f, nil
		},
	}, nil
}

// kubeSchedulerColdStart is the baseline of a restart: kube-scheduler
// started against the same cluster (every pod of the run in it; a
// schedulerName no pod asks for), timed to its /readyz, which waits for its
// informers' handlers to have the initial lists. The error says why there
// is none (kube-scheduler not built, or it did not start).
func kubeSchedulerColdStart(ctx context.Context, env *benchEnv, run runSpec) (report.Restart, error) {
	bin, err := kubeSchedulerBinary()
	if err != nil {
		return report.Restart{}, fmt.Errorf("no kube-scheduler: %w", err)
	}
	k := kubeSchedulerSystem{bin: bin}
	t0 := time.Now()
	p, url, err := k.startProcess(env, run.namespace+"-cold", run.namespace+"-cold-start")
	if err == nil {
		err = p.waitReady(ctx, url, 5*time.Minute)
	}
	if err != nil {
		if p != nil {
			p.stop()
		}
		return report.Restart{}, fmt.Errorf("kube-scheduler did not start: %w", err)
	}
	rs := report.Restart{What: "kube-scheduler, cold start", ReadySeconds: time.Since(t0).Seconds(), CPUSeconds: p.cpu().Seconds()}
	rs.PeakRSSMiB, _ = procstat.PeakRSSMiBOf(p.cmd.Process.Pid)
	p.stop()
	return rs, nil
}

// restartProfileSeconds bounds the profile of a restarted shard's
// start-up (-shard-cpuprofile-seconds, when shorter, is taken).
const restartProfileSeconds = 15

// restarted is what a shard's restart showed: the report's figures, and
// the note on the profile of its start-up ("" when none was asked).
type restarted struct {
	report.Restart
	profile string
}

// restartShard stops shards[i] gracefully, starts it again with the same
// flags (its log in restart-<n> beside the first), and returns how long
// after the start its /readyz answered and it owned again as many keys as
// it did before it stopped (every one of total keys owned by some shard),
// each within the bound given (the first start's: the restarted shard
// lists every pod while the others watch them), and the steps of its
// start as it exported them (shardsched_startup_step_end_seconds). With a
// profile path it also takes a CPU profile of the shard's first
// profileSeconds (from its /healthz answering: the shard serves its
// endpoints before it lists the cluster).
func restartShard(ctx context.Context, shards []*chaosShard, i, n, total int, within time.Duration, profile string, profileSeconds int) (restarted, error) {
	s := shards[i]
	// What it owns once the shards are settled (a second of every key
	// owned and one coordinator leader: not in the middle of the hand-off
	// after the restart before) is what it must own again.
	mon := newMonitor(shards)
	_, before, err := mon.settle(ctx, total, 5*time.Minute)
	if err != nil {
		return restarted{}, fmt.Errorf("before the restart: %w", err)
	}
	own := before.ownedBy[i]
	s.proc.stop()
	dir := filepath.Join(s.dir, fmt.Sprintf("restart-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return restarted{}, err
	}
	t0 := time.Now()
	p, err := startSchedulerProcess(dir, s.proc.cmd.Path, s.args...)
	if err != nil {
		return restarted{}, err
	}
	s.proc = p
	var profNote chan string
	defer func() {
		// The profile's fetch ends within its seconds; it is joined on
		// every path, the errors' included.
		if profNote != nil {
			<-profNote
		}
	}()
	if profile != "" {
		base := strings.TrimSuffix(s.metrics, "/metrics")
		if err := p.waitReady(ctx, base+"/healthz", time.Minute); err != nil {
			return restarted{}, err
		}
		profNote = make(chan string, 1)
		go func() { profNote <- fetchProfile(ctx, base, profileSeconds, profile, s.name+" (restarted)") }()
	}
	if err := p.waitReady(ctx, s.readyz, within); err != nil {
		return restarted{}, err
	}
	r := restarted{Restart: report.Restart{What: fmt.Sprintf("%s, restart %d", s.name, n), ReadySeconds: time.Since(t0).Seconds(), CPUSeconds: p.cpu().Seconds()}}
	if rss, err := procstat.PeakRSSMiBOf(p.cmd.Process.Pid); err == nil {
		r.PeakRSSMiB = rss
	}
	at, err := mon.ownsAgainAt(ctx, i, own, total, within)
	if err != nil {
		return restarted{}, err
	}
	r.OwnedSeconds = at.Sub(t0).Seconds()
	body, err := httpGet(ctx, http.DefaultClient, s.metrics)
	if err != nil {
		r.Steps = "not read: " + err.Error()
	} else {
		r.Steps = startupSteps(body)
	}
	if profNote != nil {
		r.profile = <-profNote
		profNote = nil
	}
	return r, nil
}

// startupSteps is the steps of the shard's start-up from a scrape of its
// metrics (shardsched_startup_step_end_seconds: each step's end, from the
// shard's start), in order, each with how long it took ("none" when it
// exports none).
func startupSteps(metrics []byte) string {
	const prefix = `shardsched_startup_step_end_seconds{step="`
	type step struct {
		name string
		end  float64
	}
	var steps []step
	for line := range strings.Lines(string(metrics)) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(rest, `"} `)
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); ok && err == nil {
			steps = append(steps, step{name, v})
		}
	}
	if len(steps) == 0 {
		return "none"
	}
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.end, b.end) })
	out := make([]string, len(steps))
	prev := 0.0
	for i, st := range steps {
		out[i] = fmt.Sprintf("%s %.2f s", st.name, st.end-prev)
		prev = st.end
	}
	return strings.Join(out, ", ")
}

// fetchProfile takes a CPU profile of seconds from the shard process
// served at base (its --profiling endpoints) and writes it to path. It
// returns the run's note on it: where it is, or why there is none (a
// failed profile does not fail the run).
func fetchProfile(ctx context.Context, base string, seconds int, path, name string) string {
	return saveProfile(ctx, seconds, path, name, func(ctx context.Context) ([]byte, error) {
		return httpGet(ctx, http.DefaultClient, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds))
	})
}

// profileSet is the CPU profiles a run takes in the background from its
// clock's start (each shard process's, kube-apiserver's), and their notes.
type profileSet struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	notes []string
}

// take runs fetch (which takes one profile and returns its note, "" for
// none) in the background.
func (p *profileSet) take(ctx context.Context, fetch func(context.Context) string) {
	p.wg.Go(func() {
		n := fetch(ctx)
		if n == "" {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.notes = append(p.notes, n)
	})
}

// wait returns the notes of the profiles taken, sorted, once all are done.
func (p *profileSet) wait() []string {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.notes))
}

// fetchAPIServerProfile is fetchProfile for kube-apiserver, through the
// harness's client (its /debug/pprof/, which --profiling, the default,
// serves to an administrator).
func fetchAPIServerProfile(ctx context.Context, cs kubernetes.Interface, seconds int, path string) string {
	return saveProfile(ctx, seconds, path, "kube-apiserver", func(ctx context.Context) ([]byte, error) {
		return cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	})
}

// saveProfile writes what get answers (within seconds and 30 s more) to
// path, and returns the note on it.
func saveProfile(ctx context.Context, seconds int, path, name string, get func(context.Context) ([]byte, error)) string {
	cctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	body, err := get(cctx)
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	if err != nil {
		return fmt.Sprintf("%s: no CPU profile: %v", name, err)
	}
	return fmt.Sprintf("%s: CPU profile of the run's first %d s in %s", name, seconds, path)
}

// handoffNote sums the shards' hand-off counters (each since its process
// started): the jobs that moved between shards because they did not fit on
// their queue owner's nodes. scraped are the metrics read, of shards
// shards; the note says when some could not be read.
func handoffNote(scraped []map[string]float64, shards int) string {
	var offers, timeouts, claims, refusals float64
	for _, m := range scraped {
		offers += m["handoff_offers_total"]
		timeouts += m["handoff_offer_timeouts_total"]
		claims += m["handoff_claims_total"]
		refusals += m["handoff_refusals_total"]
	}
	of := ""
	if len(scraped) < shards {
		of = fmt.Sprintf(" (%d of %d shards read)", len(scraped), shards)
	}
	return fmt.Sprintf("hand-off between shards%s: %.0f offers, %.0f claimed, %.0f refused or given back, %.0f withdrawn unclaimed",
		of, offers, claims, refusals, timeouts)
}

// waitsNote sets out where a pod's time went in one shard, from the means
// of its histograms (sum over count, since it started): creation to bind,
// and the parts the shard measures on the way (a reservation call to the
// coordinator, a job's placement, a placed pod's wait for a bind worker,
// the bind call itself). Empty when no pod was bound.
func waitsNote(m map[string]float64) string {
	mean := func(h string) (float64, float64, bool) {
		n := m[h+"_count"]
		if n <= 0 {
			return 0, 0, false
		}
		return m[h+"_sum"] / n, n, true
	}
	total, n, ok := mean("submit_to_bind_seconds")
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "where a pod's time went (means of the shard's histograms): creation to bind %.0f ms over %.0f pods", total*1000, n)
	for _, h := range []struct{ name, what string }{
		{"reservation_seconds", "a reservation call"},
		{"resize_seconds", "a resize of a reservation"},
		{"placement_seconds", "a job's placement in a cycle"},
		{"bind_wait_seconds", "a placed pod's wait for a bind worker"},
		{"bind_call_seconds", "a bind call"},
	} {
		if v, c, ok := mean(h.name); ok {
			fmt.Fprintf(&b, "; %s %.1f ms (%.0f)", h.what, v*1000, c)
		}
	}
	return b.String()
}
