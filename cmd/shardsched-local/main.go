// Command shardsched-local brings up a local cluster for development and
// demos: an embedded etcd for the coordinator and the shards, a real control
// plane (etcd 3.6, kube-apiserver, kube-controller-manager with the workload
// controllers, kwok) with the Volcano-compatible CRDs and fake nodes, and
// several shard processes (bin/shardsched) gossiping on loopback. It creates
// a sample three-level queue hierarchy and a demo workload (gangs, single
// pods, and a PyTorchJob run by Kubeflow's training-operator), prints the
// kubeconfig, and shows a live summary until interrupted; Ctrl-C stops every
// process and removes the state directory unless -keep-state is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/version"
)

type options struct {
	shards        int
	partitions    int
	demo          bool
	schedulerName string
	nodes         int
	nodeCPU       string
	nodeMemory    string
	stateDir      string
	keepState     bool
	spans         bool
	spansFile     string
}

func (o *options) validate() error {
	if o.shards < 0 || o.shards > 16 {
		return fmt.Errorf("-shards=%d: must be between 0 and 16", o.shards)
	}
	if o.partitions < 1 || o.partitions > 1<<16 {
		return fmt.Errorf("-partitions=%d: must be between 1 and 65536", o.partitions)
	}
	if o.nodes < 0 || o.nodes > 20000 {
		return fmt.Errorf("-nodes=%d: must be between 0 and 20000", o.nodes)
	}
	for flagName, v := range map[string]string{"-node-cpu": o.nodeCPU, "-node-memory": o.nodeMemory} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", flagName, v, err)
		}
		if q.Sign() <= 0 {
			return fmt.Errorf("%s=%q: must be positive", flagName, v)
		}
	}
	return nil
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 200, "number of kwok fake nodes")
	flag.IntVar(&o.shards, "shards", 3, "number of shard processes")
	flag.IntVar(&o.partitions, "partitions", 256, "node partitions")
	flag.BoolVar(&o.demo, "demo", true, "create a sample queue hierarchy and a demo workload")
	flag.StringVar(&o.schedulerName, "scheduler-name", "volcano", "schedulerName the shards serve")
	flag.StringVar(&o.nodeCPU, "node-cpu", "64", "allocatable CPU of each fake node")
	flag.StringVar(&o.nodeMemory, "node-memory", "256Gi", "allocatable memory of each fake node")
	flag.StringVar(&o.stateDir, "state-dir", "", "state directory (default: a new temporary directory)")
	flag.BoolVar(&o.keepState, "keep-state", false, "keep the state directory on exit")
	flag.BoolVar(&o.spans, "spans", false, "receive the shards' OpenTelemetry spans (OTLP/gRPC on a loopback port) and show them in the summary")
	flag.StringVar(&o.spansFile, "spans-file", "", "append every received span to this file as one JSON line (implies -spans)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("shardsched-local", version.String())
		return
	}
	if o.spansFile != "" {
		o.spans = true
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "shardsched-local: %v\n", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "shardsched-local: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	dir := o.stateDir
	if dir == "" {
		d, err := os.MkdirTemp("", "shardsched-run-")
		if err != nil {
			return err
		}
		dir = d
	}
	dir, _ = filepath.Abs(dir)
	defer func() {
		if o.keepState {
			fmt.Printf("state kept in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()

	// Compacted every 10 minutes, as deploy/ runs it.
	coord, err := cluster.StartEtcd(cluster.EtcdOptions{Dir: filepath.Join(dir, "coordinator-etcd"), CompactionRetention: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer coord.Close()
	fmt.Printf("coordinator etcd (embedded): %s\n", coord.Endpoints[0])

	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	cp, err := cluster.Start(ctx, cluster.Config{
		Dir: filepath.Join(dir, "controlplane"), ControllerManager: true, Kwok: true, CRDs: crds,
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	fmt.Printf("kube-apiserver %s ready at %s\n", cluster.KubeVersion, cp.Host)

	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	if o.nodes > 0 {
		if err := cluster.CreateFakeNodes(ctx, cs, "kwok-node", o.nodes, o.nodeCPU, o.nodeMemory, 2*time.Minute); err != nil {
			return err
		}
	}
	// The shards keep their status Leases where a real install has them.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: statusNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", statusNamespace, err)
	}
	bins, _ := cluster.FindBinaries()
	vc, err := volcano.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	var spans *spanReceiver
	var shardEnv []string
	if o.spans {
		var file io.Writer
		if o.spansFile != "" {
			f, err := os.OpenFile(o.spansFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("-spans-file=%s: %w", o.spansFile, err)
			}
			defer f.Close()
			file = f
		}
		spans, err = startSpanReceiver(8, file)
		if err != nil {
			return err
		}
		// Deferred before the shards' stop, so it runs after it: a
		// stopping shard flushes its last spans here.
		defer spans.Stop(5 * time.Second)
		shardEnv = spans.ShardEnv(os.Environ())
		fmt.Printf("OTLP span receiver (gRPC): %s\n", spans.Addr())
	}
	var shards []*shardProc
	if o.shards > 0 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin := filepath.Join(filepath.Dir(self), "shardsched")
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("shard binary %s not found (make run builds it): %w", bin, err)
		}
		shards, err = startShards(filepath.Join(dir, "controlplane"), bin, cp.Kubeconfig, coord.Endpoints[0], o.shards, o.partitions, o.schedulerName, shardEnv)
		defer func() {
			for _, p := range shards {
				p.stop(10 * time.Second)
			}
		}()
		if err != nil {
			return err
		}
	}
	if o.demo {
		if err := sampleQueues(ctx, vc); err != nil {
			return err
		}
		if err := demoWorkload(ctx, cs, vc, o.schedulerName); err != nil {
			return err
		}
		op, err := demoPyTorchJob(ctx, cp, o.schedulerName)
		if err != nil {
			return err
		}
		defer op.Stop()
	}
	fmt.Printf("\nready in %.1fs: %d kwok nodes (%s CPU, %s each), %d shards\n", time.Since(start).Seconds(), o.nodes, o.nodeCPU, o.nodeMemory, o.shards)
	fmt.Printf("kubeconfig: %s\n", cp.Kubeconfig)
	fmt.Printf("try:        %s --kubeconfig %s get queues,podgroups,pods -A\n", bins.Kubectl, cp.Kubeconfig)
	fmt.Printf("            %s --kubeconfig %s run demo --image=busybox --overrides='{\"spec\":{\"schedulerName\":\"%s\"}}'\n", bins.Kubectl, cp.Kubeconfig, o.schedulerName)
	if self, err := os.Executable(); err == nil {
		if plugin := filepath.Join(filepath.Dir(self), "kubectl-shardsched"); fileExists(plugin) {
			fmt.Printf("why:        %s --kubeconfig %s queues   (or: explain podgroup NAME -n NAMESPACE)\n", plugin, cp.Kubeconfig)
		}
	}
	if len(shards) > 0 {
		fmt.Printf("web UI:     http://%s/ui/   (every shard serves it on its HTTP port)\n", shards[0].httpAddr)
	}
	fmt.Printf("logs:       %s\n", filepath.Join(dir, "controlplane"))
	fmt.Println("Ctrl-C stops every process and removes the state; kill a shard's pid to watch the others take over.")

	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	sum := &summary{cs: cs, vc: vc, shards: shards, spans: spans, tty: isTTY()}
	for {
		select {
		case <-ctx.Done():
			fmt.Println("\nstopping")
			return nil
		case <-tick.C:
			if err := cp.Check(); err != nil {
				return errors.New("a control-plane process died: " + err.Error())
			}
			sum.print(ctx)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
