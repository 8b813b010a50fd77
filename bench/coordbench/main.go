// Command coordbench measures hierarchical quota reservations on one
// embedded etcd (fsync on): the coordinator (one leader applying requests in
// order and committing them in grouped, leadership-guarded Txns) against a
// naive baseline in the same run, where every reservation is one etcd Txn
// that compares and swaps the usage key of the leaf and every ancestor and
// is retried on conflict.
//
//	go run ./bench/coordbench                      # 1, 8, 32 clients, 5 s each
//	go run ./bench/coordbench -clients 8 -inflight 1,16 -duration 10s
//	go run ./bench/coordbench -etcd-ceiling        # and etcd's own write rate, 1 to 8 Txns in flight
//
// A client is one shard: it has its own etcd session and issues up to
// -inflight reservations at once (a shard admits many jobs per cycle). Both
// systems get the same clients and in-flight depth.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/shardsched/shardsched/api"
	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/cluster"
)

type options struct {
	clients    []int
	inflight   []int
	duration   time.Duration
	leaves     int
	noFsync    bool
	groupDelay time.Duration
	groupOps   int
	ceiling    bool
	cpuprofile string
	memprofile string
	// cpuSplit: each coordinator run's CPU per reservation by part of the
	// process (leader, clients, etcd), from a CPU profile's labels.
	cpuSplit bool
	// jsonBatches: the coordinator's runs with its clients' batches in
	// JSON, CBOR, or both (each run as its own row).
	jsonBatches []bool
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("-%s: %q is not an integer between 1 and 1024", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func main() {
	var o options
	clients := flag.String("clients", "1,8,32", "comma-separated numbers of concurrent clients (shards)")
	inflight := flag.String("inflight", "1,64", "comma-separated in-flight reservations per client")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measuring time per configuration and system")
	flag.IntVar(&o.leaves, "leaves", 8, "leaf queues (tree: root -> 2 parents -> leaves)")
	flag.BoolVar(&o.noFsync, "no-fsync", false, "run etcd without fsync")
	flag.DurationVar(&o.groupDelay, "group-delay", 0, "coordinator group delay (0: commit when no request waits)")
	flag.IntVar(&o.groupOps, "max-group-ops", 128, "coordinator calls per group and operations per etcd Txn, 1..4096 (etcd's --max-txn-ops is raised to match)")
	flag.BoolVar(&o.ceiling, "etcd-ceiling", false, "also measure etcd alone: Txns of -max-group-ops reservation-sized puts under a lease, guarded like the leader's, with 1, 2, 4 and 8 in flight (the most any layout of one key per reservation can reach, pipelined or not)")
	codecs := flag.String("codecs", "cbor", "comma-separated wire formats of the clients' batches to the leader, each its own coordinator run: cbor (what a client sends to a leader that reads it), json (ClientConfig.JSONBatches)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the coordinator's runs (not the naive baseline's) to this file; with several configurations, one file each, named <file>.<clients>x<inflight>, and with several -codecs .<codec>.<run> after it")
	flag.BoolVar(&o.cpuSplit, "cpu-split", false, "profile each coordinator run and print its CPU per reservation by part of the process: the leader (its HTTP serving, decoding, ledger and etcd client), the clients, etcd, and the rest (the collector's background workers, the runtime), with the rate each part's CPU alone would allow on one core")
	flag.StringVar(&o.memprofile, "memprofile", "", "write the allocations profile (pprof's alloc_space and alloc_objects) at the end of each coordinator run to this file, named as -cpuprofile's; it counts every allocation of the process up to that point, the runs before included")
	flag.Parse()
	var err error
	if o.clients, err = parseInts("clients", *clients); err == nil {
		o.inflight, err = parseInts("inflight", *inflight)
	}
	if err == nil && (o.duration < 100*time.Millisecond || o.duration > time.Hour) {
		err = fmt.Errorf("-duration %s: must be between 100ms and 1h", o.duration)
	}
	for _, c := range strings.Split(*codecs, ",") {
		switch strings.TrimSpace(c) {
		case "cbor":
			o.jsonBatches = append(o.jsonBatches, false)
		case "json":
			o.jsonBatches = append(o.jsonBatches, true)
		default:
			err = fmt.Errorf("-codecs: %q is neither cbor nor json", c)
		}
	}
	if err == nil && (o.leaves < 1 || o.leaves > 1000) {
		err = fmt.Errorf("-leaves %d: must be between 1 and 1000", o.leaves)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordbench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "coordbench:", err)
		os.Exit(1)
	}
}

type stats struct {
	system            string
	clients, inflight int
	ops               int64
	conflicts         int64
	gaveUp            int64
	elapsed           time.Duration
	lat               []time.Duration
}

func (s stats) rate() float64 { return float64(s.ops) / s.elapsed.Seconds() }

func (s stats) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	sort.Slice(s.lat, func(i, j int) bool { return s.lat[i] < s.lat[j] })
	return s.lat[min(len(s.lat)-1, int(p*float64(len(s.lat))))]
}

func run(o options) error {
	var e *cluster.Etcd
	var err error
	inPart(context.Background(), partEtcd, func(context.Context) {
		e, err = cluster.StartEtcd(cluster.EtcdOptions{NoFsync: o.noFsync, LogLevel: "fatal", MaxTxnOps: uint(max(o.groupOps, 128))})
	})
	if err != nil {
		return err
	}
	defer e.Close()
	newCli := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	specs := []api.QueueSpec{{Name: "p0"}, {Name: "p1"}}
	var leaves []string
	for i := 0; i < o.leaves; i++ {
		leaf := fmt.Sprintf("leaf-%d", i)
		leaves = append(leaves, leaf)
		specs = append(specs, api.QueueSpec{Name: leaf, Parent: fmt.Sprintf("p%d", i%2)})
	}

	// The coordinator: one participant, which leads. Its etcd client's
	// goroutines and its own (the leader's loop, the HTTP server's) are
	// started under the leader's label.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := coordinator.DefaultConfig()
	cfg.GroupDelay = o.groupDelay
	cfg.MaxGroupOps = o.groupOps
	var scli *clientv3.Client
	var srv *coordinator.Server
	inPart(ctx, partLeader, func(ctx context.Context) {
		if scli, err = newCli(); err != nil {
			return
		}
		if srv, err = coordinator.NewServer(scli, cfg); err != nil {
			return
		}
		go func() { _ = srv.Run(ctx) }()
	})
	if scli != nil {
		defer scli.Close()
	}
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); !srv.IsLeader(); {
		if time.Now().After(deadline) {
			return errors.New("coordinator did not become leader")
		}
		time.Sleep(10 * time.Millisecond)
	}

	fmt.Printf("coordbench: embedded etcd (fsync %v, --max-txn-ops %d), coordinator groups of up to %d, tree root -> 2 parents -> %d leaves, %s per run\n\n",
		!o.noFsync, max(o.groupOps, 128), o.groupOps, o.leaves, o.duration)
	fmt.Printf("| clients | in-flight | system | reservations/s | p50 | p99 | conflict retries | given up | ratio |\n")
	fmt.Printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	round := 0
	for _, n := range o.clients {
		for _, inf := range o.inflight {
			var ours []stats
			for _, jsonBatches := range o.jsonBatches {
				round++
				before := srv.Stats()
				// The leader's counters are read as soon as the clients stop:
				// when their sessions end, the leader releases their tentative
				// reservations, which are not part of the run.
				var st coordinator.Stats
				var suffix string
				if len(o.clients)*len(o.inflight) > 1 {
					suffix += fmt.Sprintf(".%dx%d", n, inf)
				}
				if len(o.jsonBatches) > 1 {
					suffix += fmt.Sprintf(".%s.%d", codecName(jsonBatches), round)
				}
				var split bytes.Buffer
				stopProfile, err := startProfile(o, suffix, &split)
				if err != nil {
					return err
				}
				var m0, m1 runtime.MemStats
				var s stats
				inPart(ctx, partClients, func(ctx context.Context) {
					s, err = runCoordinator(ctx, newCli, cfg, specs, leaves, n, inf, o.duration, round, jsonBatches, func() { runtime.ReadMemStats(&m0) }, func() {
						st = srv.Stats()
						runtime.ReadMemStats(&m1)
						stopProfile()
					})
				})
				stopProfile()
				if err != nil {
					return err
				}
				if o.cpuSplit && s.ops > 0 {
					parts, err := cpuByPart(split.Bytes())
					if err != nil {
						return fmt.Errorf("-cpu-split: %w", err)
					}
					fmt.Fprintf(os.Stderr, "%s, %d×%d: %s\n", s.system, n, inf, describeSplit(parts, s.ops))
				}
				ours = append(ours, s)
				if s.ops > 0 {
					// The whole process's over the clients' run (their set-up
					// not counted): leader, etcd and the clients, and with
					// several runs the leader's expiry of the runs before's
					// tentative reservations, which goes on in the background.
					fmt.Fprintf(os.Stderr, "%s, %d×%d: %.1f KiB and %.0f allocations per reservation (the whole process: leader, etcd, clients), %d GC cycles\n",
						s.system, n, inf, float64(m1.TotalAlloc-m0.TotalAlloc)/1024/float64(s.ops), float64(m1.Mallocs-m0.Mallocs)/float64(s.ops), m1.NumGC-m0.NumGC)
				}
				if g := st.Groups - before.Groups; g > 0 && os.Getenv("COORDBENCH_DEBUG") != "" {
					fmt.Fprintf(os.Stderr, "%s: %d groups, %.1f calls/group, commit %.2f ms/group, apply %.2f ms/group, over %s\n", s.system, g,
						float64(st.Calls-before.Calls)/float64(g), float64((st.CommitTime-before.CommitTime).Microseconds())/1e3/float64(g),
						float64((st.ApplyTime-before.ApplyTime).Microseconds())/1e3/float64(g), o.duration)
				}
			}
			naive, err := runNaive(ctx, newCli, specs, leaves, n, inf, o.duration, round)
			if err != nil {
				return err
			}
			for _, s := range append([]stats{naive}, ours...) {
				r := ""
				if s.system != naive.system {
					r = fmt.Sprintf("%.1f×", s.rate()/naive.rate())
				}
				fmt.Printf("| %d | %d | %s | %.0f | %s | %s | %d | %d | %s |\n", s.clients, s.inflight, s.system, s.rate(),
					s.pct(0.50).Round(10*time.Microsecond), s.pct(0.99).Round(10*time.Microsecond), s.conflicts, s.gaveUp, r)
			}
		}
	}
	if o.ceiling {
		return etcdCeiling(ctx, scli, o)
	}
	return nil
}

// codecName is the wire format of a run's batches.
func codecName(jsonBatches bool) string {
	if jsonBatches {
		return "json"
	}
	return "cbor"
}

// startProfile starts the CPU profile of one coordinator run, when asked
// for, in -cpuprofile's file with suffix, and with -cpu-split in split
// too; the function it returns stops it and writes -memprofile's (at most
// once).
func startProfile(o options, suffix string, split io.Writer) (stop func(), err error) {
	var f *os.File
	var w []io.Writer
	if o.cpuprofile != "" {
		if f, err = os.Create(o.cpuprofile + suffix); err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		w = append(w, f)
	}
	if o.cpuSplit {
		w = append(w, split)
	}
	if len(w) > 0 {
		if err := pprof.StartCPUProfile(io.MultiWriter(w...)); err != nil {
			if f != nil {
				_ = f.Close()
			}
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if len(w) > 0 {
				pprof.StopCPUProfile()
			}
			if f != nil {
				_ = f.Close()
			}
			if o.memprofile != "" {
				if err := writeAllocs(o.memprofile + suffix); err != nil {
					fmt.Fprintln(os.Stderr, "coordbench: -memprofile:", err)
				}
			}
		})
	}, nil
}

// writeAllocs writes the process's allocations profile to path.
func writeAllocs(path string) error {
	runtime.GC() // the profile shows the allocations as of the last GC cycle
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// etcdCeiling measures the write rate of the run's etcd alone: each Txn
// puts -max-group-ops keys with a value the size of a stored reservation,
// attached to a lease (as a tentative reservation is) and guarded by a
// compare on a key (as the leader's Txns are on its election key), with 1,
// 2, 4 and 8 Txns in flight at once.
func etcdCeiling(ctx context.Context, cli *clientv3.Client, o options) error {
	guard, err := cli.Put(ctx, "/ceiling/guard", "x")
	if err != nil {
		return err
	}
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		return err
	}
	r := coordinator.Reservation{Job: coordinator.JobRef{Namespace: "bench", Name: "r1-c1-w1-1000", UID: "r1-c1-w1-1000"},
		Queue: "leaf-1", Path: []string{"leaf-1", "p1", api.RootQueue}, Amount: api.NewResource(1000, 1<<30, nil),
		Floor: api.NewResource(1000, 1<<30, nil), State: coordinator.Tentative, Lease: int64(lease.ID), Shard: "shard-1"}
	value, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Printf("\netcd alone: Txns of %d puts of %d bytes under a lease, guarded by a compare, %s per run\n\n", o.groupOps, len(value), o.duration)
	fmt.Printf("| Txns in flight | keys/s | Txn p50 | Txn p99 |\n|---:|---:|---:|---:|\n")
	var seq atomic.Int64
	for _, inflight := range []int{1, 2, 4, 8} {
		s, err := drive(1, inflight, o.duration, func(_, _, _ int, _ time.Time) (int, error) {
			ops := make([]clientv3.Op, o.groupOps)
			for i := range ops {
				ops[i] = clientv3.OpPut(fmt.Sprintf("/ceiling/res/%d", seq.Add(1)), string(value), clientv3.WithLease(lease.ID))
			}
			resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/ceiling/guard"), "=", guard.Header.Revision)).Then(ops...).Commit()
			if err == nil && !resp.Succeeded {
				err = errors.New("etcd ceiling: the guard's compare failed")
			}
			return 0, err
		})
		if err != nil {
			return err
		}
		fmt.Printf("| %d | %.0f | %s | %s |\n", inflight, s.rate()*float64(o.groupOps),
			s.pct(0.50).Round(10*time.Microsecond), s.pct(0.99).Round(10*time.Microsecond))
	}
	// The keys are left: deleting millions in one request outlasts etcd's
	// request timeout, and the embedded etcd goes with the process.
	return nil
}

// drive runs clients × inflight workers calling op until d has passed.
// An op still running one second after d is abandoned by the naive
// baseline (given up), so a run never takes much longer than d.
func drive(n, inflight int, d time.Duration, op func(client, worker, i int, stop time.Time) (conflicts int, err error)) (stats, error) {
	var ops, conflicts, gaveUp atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := 0; c < n; c++ {
		for w := 0; w < inflight; w++ {
			wg.Add(1)
			go func(c, w int) {
				defer wg.Done()
				local := make([]time.Duration, 0, 1024)
				for i := 0; time.Now().Before(stop); i++ {
					t0 := time.Now()
					k, err := op(c, w, i, stop)
					if errors.Is(err, errGaveUp) {
						gaveUp.Add(1)
						conflicts.Add(int64(k))
						continue
					}
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						return
					}
					local = append(local, time.Since(t0))
					ops.Add(1)
					conflicts.Add(int64(k))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}(c, w)
		}
	}
	wg.Wait()
	return stats{clients: n, inflight: inflight, ops: ops.Load(), conflicts: conflicts.Load(), gaveUp: gaveUp.Load(), elapsed: time.Since(start), lat: lat}, firstErr
}

func runCoordinator(ctx context.Context, newCli func() (*clientv3.Client, error), cfg coordinator.Config,
	specs []api.QueueSpec, leaves []string, n, inflight int, d time.Duration, round int, jsonBatches bool, started, stopped func()) (stats, error) {
	var clients []*coordinator.Client
	var cleanup []func()
	defer func() {
		for _, f := range cleanup {
			f()
		}
	}()
	for i := 0; i < n; i++ {
		cli, err := newCli()
		if err != nil {
			return stats{}, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
		if err != nil {
			cli.Close()
			return stats{}, err
		}
		cc := coordinator.DefaultClientConfig()
		cc.Prefix, cc.Shard, cc.Lease = cfg.Prefix, fmt.Sprintf("shard-%d", i), sess.Lease()
		cc.JSONBatches = jsonBatches
		c, err := coordinator.NewClient(cli, cc)
		if err != nil {
			return stats{}, err
		}
		clients = append(clients, c)
		cleanup = append(cleanup, func() { c.Close(); sess.Close(); cli.Close() })
	}
	if _, err := clients[0].SetQueues(ctx, specs); err != nil {
		return stats{}, err
	}
	amount := api.NewResource(1000, 1<<30, nil)
	started()
	s, err := drive(n, inflight, d, func(c, w, i int, _ time.Time) (int, error) {
		uid := fmt.Sprintf("r%d-c%d-w%d-%d", round, c, w, i)
		_, err := clients[c].Reserve(ctx, coordinator.JobRef{Namespace: "bench", Name: uid, UID: uid}, leaves[(c+w+i)%len(leaves)], amount)
		return 0, err
	})
	stopped()
	s.system = "coordinator, " + codecName(jsonBatches) + " batches"
	return s, err
}

// naiveMaxRetries bounds the conflict retries of one naive reservation; one
// that exhausts them counts as given up, not as done.
const naiveMaxRetries = 200

var errGaveUp = errors.New("gave up after conflict retries")

// runNaive: each reservation reads the usage of the leaf and its ancestors,
// checks capability, and commits one Txn that compares every usage key's
// ModRevision and writes the new usages and the reservation; on a failed
// compare it retries from the read.
func runNaive(ctx context.Context, newCli func() (*clientv3.Client, error), specs []api.QueueSpec, leaves []string,
	n, inflight int, d time.Duration, round int) (stats, error) {
	tree, err := api.BuildTree(specs)
	if err != nil {
		return stats{}, err
	}
	var clis []*clientv3.Client
	defer func() {
		for _, c := range clis {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := newCli()
		if err != nil {
			return stats{}, err
		}
		clis = append(clis, c)
	}
	prefix := fmt.Sprintf("/naive/%d/", round)
	amount := api.NewResource(1000, 1<<30, nil)
	s, err := drive(n, inflight, d, func(c, w, i int, stop time.Time) (int, error) {
		cli := clis[c]
		uid := fmt.Sprintf("c%d-w%d-%d", c, w, i)
		path, err := tree.JobPath(leaves[(c+w+i)%len(leaves)])
		if err != nil {
			return 0, err
		}
		for conflicts := 0; ; conflicts++ {
			ops := make([]clientv3.Op, len(path))
			for j, q := range path {
				ops[j] = clientv3.OpGet(prefix + "usage/" + q)
			}
			resp, err := cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return conflicts, err
			}
			var cmps []clientv3.Cmp
			var puts []clientv3.Op
			for j, q := range path {
				key := prefix + "usage/" + q
				var usage api.Resource
				var modRev int64
				if kvs := resp.Responses[j].GetResponseRange().Kvs; len(kvs) == 1 {
					if err := json.Unmarshal(kvs[0].Value, &usage); err != nil {
						return conflicts, err
					}
					modRev = kvs[0].ModRevision
				}
				next, err := usage.Add(amount)
				if err != nil {
					return conflicts, err
				}
				spec, _ := tree.Get(q)
				if _, _, over := spec.Capability.Excess(next); over {
					return conflicts, fmt.Errorf("naive: queue %s full", q)
				}
				b, _ := json.Marshal(next)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", modRev))
				puts = append(puts, clientv3.OpPut(key, string(b)))
			}
			puts = append(puts, clientv3.OpPut(prefix+"res/"+uid, "1"))
			tr, err := cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
			if err != nil {
				return conflicts, err
			}
			if tr.Succeeded {
				return conflicts, nil
			}
			if conflicts >= naiveMaxRetries || time.Now().After(stop.Add(time.Second)) {
				return conflicts, errGaveUp
			}
		}
	})
	s.system = "naive CAS"
	return s, err
}
