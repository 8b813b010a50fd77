// Command shardsched is one scheduler shard: it joins the other shards by
// gossip, campaigns for the coordinator, owns its share of node partitions
// and queues, and schedules pods whose schedulerName it serves. Run one per
// pod of a StatefulSet (see deploy/).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shardsched/shardsched/coordinator"
	"github.com/shardsched/shardsched/internal/daemon"
	"github.com/shardsched/shardsched/internal/gcfloor"
	"github.com/shardsched/shardsched/internal/telemetry"
	"github.com/shardsched/shardsched/internal/version"
	"github.com/shardsched/shardsched/scheduler"
	"github.com/shardsched/shardsched/shard"
	"github.com/shardsched/shardsched/status"
	"github.com/shardsched/shardsched/wire"
)

type options struct {
	kubeconfig, shardName, join                   string
	gossipBind, gossipAdvertise, gossipKeyFile    string
	gossipPort, gossipAdvertisePort               int
	gossipProfile                                 string
	etcdEndpoints, etcdCA, etcdCert, etcdKey      string
	schedulerName, strategy                       string
	partitions, sessionTTL, coordGroupOps         int
	nodePools                                     string
	pools                                         *regexp.Regexp // nodePools compiled by parse
	bindWorkers                                   int
	statusFlush, groupCounts, cycleInterval       time.Duration
	queueCounts                                   time.Duration
	httpAddr, coordAddr, coordAdvertise, logLevel string
	shutdownTimeout                               time.Duration
	implicitGroups                                bool
	version                                       bool
	statusNamespace                               string
	coordTokenFile                                string
	insecureCoordinator                           bool
	profiling, listFirst                          bool
	gcHeapFloor                                   string
	gcFloor                                       uint64 // gcHeapFloor in bytes, set by validate
}

// errVersion is parse's answer to --version: print the version and stop.
var errVersion = errors.New("version requested")

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("shardsched", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: in-cluster config)")
	fs.StringVar(&o.shardName, "shard-name", os.Getenv("POD_NAME"), "unique shard name (default $POD_NAME)")
	fs.StringVar(&o.join, "join", "", "comma-separated gossip seeds host:port")
	fs.StringVar(&o.gossipBind, "gossip-bind-addr", "0.0.0.0", "gossip bind IP")
	fs.IntVar(&o.gossipPort, "gossip-port", 7946, "gossip port")
	fs.StringVar(&o.gossipAdvertise, "gossip-advertise-addr", os.Getenv("POD_IP"), "gossip advertise IP (default $POD_IP)")
	fs.IntVar(&o.gossipAdvertisePort, "gossip-advertise-port", 0, "gossip port other shards dial (0: --gossip-port); differs when a proxy or NAT sits in front")
	fs.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "gossip encryption key file (16/24/32 bytes, raw or base64)")
	fs.StringVar(&o.gossipProfile, "gossip-profile", "lan", "memberlist timing profile: lan or local")
	fs.StringVar(&o.etcdEndpoints, "etcd-endpoints", "", "comma-separated etcd endpoints")
	fs.StringVar(&o.etcdCA, "etcd-ca-file", "", "etcd CA bundle")
	fs.StringVar(&o.etcdCert, "etcd-cert-file", "", "etcd client certificate")
	fs.StringVar(&o.etcdKey, "etcd-key-file", "", "etcd client key")
	fs.StringVar(&o.schedulerName, "scheduler-name", "volcano", "schedulerName of the pods this scheduler serves")
	fs.StringVar(&o.strategy, "strategy", "binpack", "placement scoring: binpack or spread")
	fs.IntVar(&o.partitions, "partitions", wire.DefaultPartitions, "node partitions (same on every shard)")
	fs.StringVar(&o.nodePools, "node-pools", "", "regular expression on node names whose first submatch names a node pool: every node of a pool goes to one partition, so one shard places gangs as large as the pool (same on every shard; empty: none)")
	fs.IntVar(&o.bindWorkers, "bind-workers", scheduler.DefaultConfig().BindWorkers,
		"bind calls in flight at once (1..1024): too few and placed pods queue for a worker (each call is an API server round trip)")
	fs.DurationVar(&o.cycleInterval, "cycle-interval", scheduler.DefaultCycleInterval,
		"period of the scheduling cycle (1ms..10s): a pod waits up to this long for the cycle that places it; a longer period places more pods per cycle for less CPU")
	fs.IntVar(&o.sessionTTL, "session-ttl", 10, "etcd session TTL in seconds")
	fs.DurationVar(&o.statusFlush, "status-flush-interval", time.Second, "Queue/PodGroup status flush interval")
	fs.DurationVar(&o.groupCounts, "podgroup-counts-interval", status.DefaultCountsEvery, "least time between two status writes of a PodGroup when only its running/succeeded/failed counts changed (a phase or condition change is written at the next flush); 0 writes counts at every flush")
	fs.DurationVar(&o.queueCounts, "queue-counts-interval", status.DefaultQueueCountsEvery, "least time between two status writes of a Queue that was busy when last written and is busy still (a queue going idle or leaving idle is written at the next flush); 0 writes at every flush")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "address of /metrics, /healthz, /readyz")
	fs.BoolVar(&o.listFirst, "informer-list-first", false, "pod and node informers list the cluster first, then watch, instead of taking their initial state as a stream of watch events (client-go's watch-list): a faster start for more memory while the list is decoded, on the shard and on the API server")
	fs.BoolVar(&o.profiling, "profiling", false, "also serve Go's profiles under /debug/pprof/ on --http-addr (as kube-scheduler's --profiling)")
	fs.StringVar(&o.coordAddr, "coordinator-addr", ":7070", "coordinator listen address")
	fs.StringVar(&o.coordAdvertise, "coordinator-advertise-addr", "", "coordinator URL other shards use (default http://$POD_IP:port)")
	fs.StringVar(&o.coordTokenFile, "coordinator-token-file", "",
		"file holding the token every shard's coordinator calls carry (base64, at least 24 bytes: head -c 32 /dev/urandom | base64); the same on every shard")
	fs.IntVar(&o.coordGroupOps, "coordinator-max-group-ops", coordinator.DefaultConfig().MaxGroupOps,
		"reservation calls the coordinator commits in one etcd Txn, 1..4096; above 128 raise etcd's --max-txn-ops to match (a Txn etcd refuses is halved until taken)")
	fs.BoolVar(&o.insecureCoordinator, "insecure-coordinator", false,
		"run the coordinator API without a token: any caller that reaches its port is served (a trusted network only)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 20*time.Second, "bound on a graceful stop")
	fs.BoolVar(&o.implicitGroups, "implicit-podgroups", true,
		"create a PodGroup (minMember 1) for pods that name none; false when Volcano's podgroup controller runs beside the shards and does it")
	fs.StringVar(&o.statusNamespace, "status-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace of the shard's status Lease, read by `kubectl shardsched shards` (default $POD_NAMESPACE; empty: none)")
	fs.StringVar(&o.gcHeapFloor, "gc-heap-floor", "256Mi",
		"once the shard is ready, the garbage collector does not run before the heap reaches this much (a quantity, 0..64Gi; 0: Go's own pacing): a small live heap is collected once per this much less the live heap of growth, a live heap of half of it or more at Go's pacing; the heap does not grow past it on its account, a soft memory limit (GOMEMLIMIT) still caps it, and it is off when GOGC is set")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.version {
		return o, errVersion
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	var err error
	if o.pools, err = wire.CompileNodePools(o.nodePools); err != nil {
		return o, fmt.Errorf("--node-pools: %w", err)
	}
	return o, nil
}

func (o *options) validate() error {
	switch {
	case o.shardName == "":
		return errors.New("--shard-name is empty and $POD_NAME is unset")
	case o.etcdEndpoints == "":
		return errors.New("--etcd-endpoints is required")
	case o.partitions < 1 || o.partitions > 1<<20:
		return fmt.Errorf("--partitions=%d: must be between 1 and %d", o.partitions, 1<<20)
	case o.sessionTTL < 1 || o.sessionTTL > 3600:
		return fmt.Errorf("--session-ttl=%d: must be between 1 and 3600", o.sessionTTL)
	case o.cycleInterval < time.Millisecond || o.cycleInterval > 10*time.Second:
		return fmt.Errorf("--cycle-interval=%s: must be between 1ms and 10s", o.cycleInterval)
	case o.statusFlush < 10*time.Millisecond || o.statusFlush > 10*time.Minute:
		return fmt.Errorf("--status-flush-interval=%s: must be between 10ms and 10m", o.statusFlush)
	case o.groupCounts < 0 || o.groupCounts > 10*time.Minute:
		return fmt.Errorf("--podgroup-counts-interval=%s: must be between 0 and 10m", o.groupCounts)
	case o.queueCounts < 0 || o.queueCounts > 10*time.Minute:
		return fmt.Errorf("--queue-counts-interval=%s: must be between 0 and 10m", o.queueCounts)
	case o.gossipPort < 0 || o.gossipPort > 65535:
		return fmt.Errorf("--gossip-port=%d: must be 0..65535", o.gossipPort)
	case o.gossipAdvertisePort < 0 || o.gossipAdvertisePort > 65535:
		return fmt.Errorf("--gossip-advertise-port=%d: must be 0..65535", o.gossipAdvertisePort)
	case (o.etcdCert == "") != (o.etcdKey == ""):
		return errors.New("--etcd-cert-file and --etcd-key-file go together")
	case o.bindWorkers < 1 || o.bindWorkers > 1024:
		return fmt.Errorf("--bind-workers=%d: must be between 1 and 1024", o.bindWorkers)
	case o.coordGroupOps < 1 || o.coordGroupOps > 4096:
		return fmt.Errorf("--coordinator-max-group-ops=%d: must be between 1 and 4096", o.coordGroupOps)
	case o.shutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout=%s: must be positive", o.shutdownTimeout)
	case o.coordTokenFile == "" && !o.insecureCoordinator:
		return errors.New("--coordinator-token-file is required (the token shards present to the coordinator; --insecure-coordinator to run without one on a trusted network)")
	case o.coordTokenFile != "" && o.insecureCoordinator:
		return errors.New("--coordinator-token-file and --insecure-coordinator exclude each other")
	}
	if _, _, err := net.SplitHostPort(o.coordAddr); err != nil {
		return fmt.Errorf("--coordinator-addr=%q: %v", o.coordAddr, err)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level=%q: %v", o.logLevel, err)
	}
	q, err := resource.ParseQuantity(o.gcHeapFloor)
	if err != nil {
		return fmt.Errorf("--gc-heap-floor=%q: %v", o.gcHeapFloor, err)
	}
	if q.Sign() < 0 || q.Cmp(*resource.NewQuantity(64<<30, resource.BinarySI)) > 0 {
		return fmt.Errorf("--gc-heap-floor=%q: must be between 0 and 64Gi", o.gcHeapFloor)
	}
	if q.MilliValue()%1000 != 0 {
		return fmt.Errorf("--gc-heap-floor=%q: must be a whole number of bytes", o.gcHeapFloor)
	}
	o.gcFloor = uint64(q.Value())
	return nil
}

// minTokenBytes is the least random bytes a coordinator token must hold.
const minTokenBytes = 24

// readToken reads the coordinator token: standard base64 (padded or not)
// of at least minTokenBytes bytes, surrounding space ignored. A
// placeholder or a short token is refused with a message naming the flag.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--coordinator-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if raw, err := enc.DecodeString(tok); err == nil {
			if len(raw) < minTokenBytes {
				return "", fmt.Errorf("--coordinator-token-file=%s: the token holds %d bytes, want at least %d (head -c 32 /dev/urandom | base64)", path, len(raw), minTokenBytes)
			}
			return tok, nil
		}
	}
	return "", fmt.Errorf("--coordinator-token-file=%s: not a base64 token (head -c 32 /dev/urandom | base64)", path)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func etcdTLS(o options) (*tls.Config, error) {
	if o.etcdCA == "" && o.etcdCert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.etcdCA != "" {
		pem, err := os.ReadFile(o.etcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca-file %s: no PEM certificates", o.etcdCA)
		}
		cfg.RootCAs = pool
	}
	if o.etcdCert != "" {
		cert, err := tls.LoadX509KeyPair(o.etcdCert, o.etcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert-file/--etcd-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if errors.Is(err, errVersion) {
			fmt.Println("shardsched", version.String())
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "shardsched:", err)
		os.Exit(2)
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(o.logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := run(o, log); err != nil {
		log.Error("shardsched stopped", "err", err)
		os.Exit(1)
	}
}

func run(o options, log *slog.Logger) error {
	var rc *rest.Config
	var err error
	if o.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	tlsCfg, err := etcdTLS(o)
	if err != nil {
		return err
	}
	sc := shard.DefaultConfig()
	sc.BindAddr, sc.BindPort, sc.AdvertiseAddr, sc.AdvertisePort = o.gossipBind, o.gossipPort, o.gossipAdvertise, o.gossipAdvertisePort
	sc.Join, sc.GossipKeyFile, sc.Partitions, sc.SessionTTL, sc.GossipProfile = splitList(o.join), o.gossipKeyFile, o.partitions, o.sessionTTL, o.gossipProfile
	sc.NodePools = o.pools
	cc := coordinator.DefaultConfig()
	cc.ListenAddr, cc.SessionTTL, cc.MaxGroupOps = o.coordAddr, o.sessionTTL, o.coordGroupOps
	if o.coordTokenFile != "" {
		if cc.Token, err = readToken(o.coordTokenFile); err != nil {
			return err
		}
	}
	cc.AdvertiseAddr = o.coordAdvertise
	if cc.AdvertiseAddr == "" && os.Getenv("POD_IP") != "" {
		_, port, _ := net.SplitHostPort(o.coordAddr)
		cc.AdvertiseAddr = "http://" + net.JoinHostPort(os.Getenv("POD_IP"), port)
	}
	schedCfg := scheduler.DefaultConfig()
	schedCfg.BindWorkers = o.bindWorkers
	schedCfg.CycleInterval = o.cycleInterval
	schedCfg.SchedulerName, schedCfg.Strategy = o.schedulerName, o.strategy // partitions: the shard config's, taken by the assembly
	stCfg := status.DefaultConfig()
	stCfg.Interval = o.statusFlush
	stCfg.CountsEvery = o.groupCounts
	stCfg.QueueCountsEvery = o.queueCounts

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The floor starts once the shard is ready: while its informers fill
	// the heap, Go's pacing keeps the heap at twice what is live (the
	// floor as first built, a headroom of live+floor, added up to the floor
	// to a start-up's peak: at 1M cores, 473–499 MiB at ready against 424
	// at Go's pacing).
	startFloor := func() {}
	switch {
	case o.gcFloor == 0:
	case os.Getenv("GOGC") != "":
		log.Info("GOGC is set: --gc-heap-floor is off", "GOGC", os.Getenv("GOGC"))
	default:
		startFloor = func() { go gcfloor.New(o.gcFloor).Run(ctx, time.Second) }
	}
	tp, shutdownTracing, err := telemetry.Setup(ctx, "shardsched", o.shardName, nil)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{
			Name: o.shardName, REST: rc, EtcdEndpoints: splitList(o.etcdEndpoints), EtcdTLS: tlsCfg, HTTPAddr: o.httpAddr, Profiling: o.profiling, ListFirst: o.listFirst,
			Shard: sc, Coordinator: cc, Scheduler: schedCfg, Status: stCfg, Logger: log, Tracer: tp,
			NoImplicitGroups: !o.implicitGroups,
			StatusNamespace:  o.statusNamespace,
		}, func(d *daemon.Daemon) {
			log.Info("shard ready", "name", o.shardName, "gossip", d.Shard.GossipAddr(), "coordinator", d.Coord.Addr())
			startFloor()
		})
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping: leaving the ring, releasing ownership, flushing status")
	select {
	case err := <-done:
		return err
	case <-time.After(o.shutdownTimeout):
		return fmt.Errorf("graceful stop took longer than %s", o.shutdownTimeout)
	}
}
