package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/internal/cluster"
)

// shardProc is one shard OS process.
type shardProc struct {
	name     string
	cmd      *exec.Cmd
	httpAddr string
	log      string
	done     chan struct{}
}

// statusNamespace is where the local shards keep their status Leases, the
// namespace deploy/ installs into.
const statusNamespace = "shardsched"

// startShards runs n shard processes gossiping on loopback, with
// environment env (nil: this process's).
func startShards(dir, bin, kubeconfig, etcd string, n, partitions int, schedulerName string, env []string) ([]*shardProc, error) {
	var out []*shardProc
	var seed string
	// The shards share one coordinator token, made for this run.
	tokenFile := filepath.Join(dir, "coordinator.token")
	if err := cluster.WriteToken(tokenFile); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		gp, err := cluster.FreePort()
		if err != nil {
			return out, err
		}
		hp, err := cluster.FreePort()
		if err != nil {
			return out, err
		}
		cp, err := cluster.FreePort()
		if err != nil {
			return out, err
		}
		name := fmt.Sprintf("shard-%d", i)
		args := []string{
			"--shard-name=" + name, "--kubeconfig=" + kubeconfig, "--etcd-endpoints=" + etcd,
			"--gossip-bind-addr=127.0.0.1", "--gossip-port=" + strconv.Itoa(gp), "--gossip-profile=local",
			"--http-addr=127.0.0.1:" + strconv.Itoa(hp), "--coordinator-addr=127.0.0.1:" + strconv.Itoa(cp),
			"--scheduler-name=" + schedulerName, "--partitions=" + strconv.Itoa(partitions), "--session-ttl=5",
			"--status-flush-interval=1s", "--status-namespace=" + statusNamespace,
			"--coordinator-token-file=" + tokenFile,
		}
		if seed != "" {
			args = append(args, "--join="+seed)
		} else {
			seed = "127.0.0.1:" + strconv.Itoa(gp)
		}
		logPath := filepath.Join(dir, name+".log")
		f, err := os.Create(logPath)
		if err != nil {
			return out, err
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			f.Close()
			return out, fmt.Errorf("start %s: %w", name, err)
		}
		p := &shardProc{name: name, cmd: cmd, httpAddr: "127.0.0.1:" + strconv.Itoa(hp), log: logPath, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
		out = append(out, p)
	}
	return out, nil
}

func (p *shardProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM (a graceful stop: leave the ring, release ownership,
// flush status) and SIGKILL after the grace period.
func (p *shardProc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// metrics scrapes the shardsched_* series of one shard.
func (p *shardProc) metrics(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shardsched_") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 2 {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				out[strings.TrimPrefix(f[0], "shardsched_")] = v
			}
		}
	}
	return out
}

func cpuList(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

// sampleQueues creates a three-level hierarchy:
//
//	root ─ research (cap 2000 CPU) ─ research-nlp, research-vision (cap 1200 CPU)
//	     └ prod (cap 4000 CPU) ─ prod-batch
func sampleQueues(ctx context.Context, vc volcano.Interface) error {
	qs := []*schedv1beta1.Queue{
		{ObjectMeta: metav1.ObjectMeta{Name: "research"}, Spec: schedv1beta1.QueueSpec{Weight: 1, Capability: cpuList("2000", "8000Gi")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: schedv1beta1.QueueSpec{Weight: 2, Capability: cpuList("4000", "16000Gi")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "research-nlp"}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: "research"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "research-vision"}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: "research", Capability: cpuList("1200", "4800Gi")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "prod-batch"}, Spec: schedv1beta1.QueueSpec{Weight: 1, Parent: "prod"}},
	}
	for _, q := range qs {
		if _, err := vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create queue %s: %w", q.Name, err)
		}
	}
	return nil
}

// demoWorkload submits gangs and single pods to the leaf queues.
func demoWorkload(ctx context.Context, cs kubernetes.Interface, vc volcano.Interface, schedulerName string) error {
	ns := "demo"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	type job struct {
		name, queue string
		members     int
		cpu         string
	}
	var jobs []job
	for i := 0; i < 6; i++ {
		jobs = append(jobs, job{fmt.Sprintf("nlp-gang-%d", i), "research-nlp", 8, "16"})
		jobs = append(jobs, job{fmt.Sprintf("vision-gang-%d", i), "research-vision", 32, "8"})
		jobs = append(jobs, job{fmt.Sprintf("batch-%d", i), "prod-batch", 1, "4"})
	}
	for _, j := range jobs {
		pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: ns}, Spec: schedv1beta1.PodGroupSpec{MinMember: int32(j.members), Queue: j.queue}}
		if _, err := vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return err
		}
		for k := 0; k < j.members; k++ {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", j.name, k), Namespace: ns,
					Annotations: map[string]string{"scheduling.k8s.io/group-name": j.name}},
				Spec: corev1.PodSpec{SchedulerName: schedulerName, Containers: []corev1.Container{{Name: "c", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: cpuList(j.cpu, "8Gi")}}}},
			}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// demoPyTorchJob runs Kubeflow's training-operator (Volcano gang scheduler)
// on the demo namespace and submits a PyTorchJob to research-nlp: the
// operator creates its pods once the shards have its PodGroup Inqueue.
func demoPyTorchJob(ctx context.Context, cp *cluster.ControlPlane, schedulerName string) (*cluster.TrainingOperator, error) {
	bins, err := cluster.FindTrainingOperator()
	if err != nil {
		return nil, err
	}
	crds, err := bins.CRDManifests("pytorchjobs")
	if err != nil {
		return nil, err
	}
	rc := cp.RESTConfig()
	if err := cluster.InstallCRDs(ctx, rc, crds, time.Minute); err != nil {
		return nil, err
	}
	op, err := cluster.StartTrainingOperator(ctx, rc, cluster.TrainingOperatorConfig{
		Kubeconfig: cp.Kubeconfig, Dir: cp.Dir, Namespace: "demo", Schemes: []string{"pytorchjob"},
	})
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err == nil {
		_, err = dyn.Resource(cluster.PyTorchJobs).Namespace("demo").Create(ctx,
			cluster.PyTorchJob("demo", "mnist", "research-nlp", schedulerName, 3, "8"), metav1.CreateOptions{})
	}
	if err != nil {
		op.Stop()
		return nil, fmt.Errorf("demo PyTorchJob: %w", err)
	}
	fmt.Printf("training-operator %s: PyTorchJob demo/mnist (1 master + 3 workers) in queue research-nlp\n", cluster.TrainingOperatorVersion)
	return op, nil
}
