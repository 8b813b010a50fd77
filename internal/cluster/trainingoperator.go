package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TrainingOperatorVersion is the Kubeflow training-operator that
// hack/controlplane.sh builds from the module proxy.
const TrainingOperatorVersion = "v1.8.1"

// The operator's own names: its certificate rotator keeps the webhook
// serving certificate in this Secret (in the operator's namespace, which it
// reads from MY_POD_NAMESPACE) and expects the kubelet to mount it in
// trainingOperatorCertDir; both are fixed in v1.8.1.
const (
	trainingOperatorSecret  = "training-operator-webhook-cert"
	trainingOperatorCertDir = "/tmp/k8s-webhook-server/serving-certs"
)

// TrainingOperatorBinaries locates the cached training-operator.
type TrainingOperatorBinaries struct {
	Operator string // the training-operator.v1 command
	CRDs     string // directory of its CRD manifests (kubeflow.org_*.yaml)
}

// FindTrainingOperator returns the cached training-operator, or an error
// naming what is missing and the command that builds it.
func FindTrainingOperator() (TrainingOperatorBinaries, error) {
	dir := filepath.Join(CacheDir(), "training-operator-"+TrainingOperatorVersion)
	b := TrainingOperatorBinaries{Operator: filepath.Join(dir, "training-operator.v1"), CRDs: filepath.Join(dir, "crds")}
	for _, p := range []string{b.Operator, b.CRDs} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("training-operator %s is missing (run `make controlplane` or hack/controlplane.sh training-operator): %w", p, err)
		}
	}
	return b, nil
}

// CRDManifests reads the operator's CRD manifests whose kind is one of
// kinds in lower case (pytorchjobs, tfjobs, ...); none means all.
func (b TrainingOperatorBinaries) CRDManifests(kinds ...string) ([][]byte, error) {
	var names []string
	if len(kinds) == 0 {
		m, err := filepath.Glob(filepath.Join(b.CRDs, "kubeflow.org_*.yaml"))
		if err != nil {
			return nil, err
		}
		names = m
	} else {
		for _, k := range kinds {
			names = append(names, filepath.Join(b.CRDs, "kubeflow.org_"+k+".yaml"))
		}
	}
	sort.Strings(names)
	out := make([][]byte, 0, len(names))
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}

// TrainingOperatorConfig says how to run the operator.
type TrainingOperatorConfig struct {
	// Kubeconfig is the admin kubeconfig of the control plane.
	Kubeconfig string
	// Dir receives the log (training-operator.log).
	Dir string
	// Namespace is the one namespace the operator watches and keeps its
	// webhook certificate in; it must exist.
	Namespace string
	// Schemes to enable (pytorchjob, tfjob, ...); none means all.
	Schemes []string
}

// TrainingOperator is a running training-operator with its Volcano gang
// scheduler: it creates a PodGroup per job and creates the job's pods only
// once the scheduler has moved the PodGroup out of Pending.
type TrainingOperator struct {
	proc   *process
	cancel context.CancelFunc
	done   chan struct{}
}

// StartTrainingOperator runs the cached operator against the control plane
// in cfg.Kubeconfig. Outside a cluster nothing mounts its webhook
// certificate, so this creates the Secret its rotator fills and copies the
// certificate to where the operator waits for it, as the kubelet would.
// Nothing calls its webhooks: no webhook configuration is installed.
func StartTrainingOperator(ctx context.Context, rc *rest.Config, cfg TrainingOperatorConfig) (*TrainingOperator, error) {
	bins, err := FindTrainingOperator()
	if err != nil {
		return nil, err
	}
	if cfg.Namespace == "" || cfg.Kubeconfig == "" || cfg.Dir == "" {
		return nil, errors.New("training-operator: Kubeconfig, Dir and Namespace are required")
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: trainingOperatorSecret, Namespace: cfg.Namespace}}
	if _, err := cs.CoreV1().Secrets(cfg.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("training-operator: create its certificate Secret: %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--gang-scheduler-name=volcano",
		"--namespace=" + cfg.Namespace,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--webhook-server-port=" + strconv.Itoa(port),
	}
	for _, s := range cfg.Schemes {
		args = append(args, "--enable-scheme="+s)
	}
	p, err := startProcessEnv("training-operator", cfg.Dir, bins.Operator,
		[]string{"MY_POD_NAMESPACE=" + cfg.Namespace, "TMPDIR=/tmp"}, args...)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	op := &TrainingOperator{proc: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(op.done)
		mountCertificate(mctx, cs, cfg.Namespace, p)
	}()
	return op, nil
}

// mountCertificate copies the certificate from the operator's Secret to its
// certificate directory whenever the Secret's certificate changes, until ctx
// ends or the operator exits.
func mountCertificate(ctx context.Context, cs kubernetes.Interface, ns string, p *process) {
	var written string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-tick.C:
		}
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, trainingOperatorSecret, metav1.GetOptions{})
		if err != nil {
			continue
		}
		crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		if len(crt) == 0 || len(key) == 0 || string(crt) == written {
			continue
		}
		if err := writeCertPair(trainingOperatorCertDir, crt, key); err != nil {
			continue
		}
		written = string(crt)
	}
}

// writeCertPair writes tls.key, then tls.crt (the file the operator waits
// for) into dir, each replaced whole.
func writeCertPair(dir string, crt, key []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{{corev1.TLSPrivateKeyKey, key}, {corev1.TLSCertKey, crt}}
	for _, f := range files {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return nil
}

// Check returns an error, with the end of its log, if the operator exited.
func (o *TrainingOperator) Check() error {
	if o.proc.exited() {
		return o.proc.failure("exited")
	}
	return nil
}

// Log returns the last n bytes of the operator's log.
func (o *TrainingOperator) Log(n int) string { return o.proc.tail(n) }

// Stop stops the operator. Safe to call more than once.
func (o *TrainingOperator) Stop() {
	if o == nil {
		return
	}
	o.cancel()
	o.proc.stop(10 * time.Second)
	<-o.done
}

// PyTorchJobs is the PyTorchJob resource the operator serves.
var PyTorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// PyTorchJob is a PyTorchJob as a user writes one: a master and workers,
// each asking for cpu and 1Gi, in queue, its pods for schedulerName. The
// operator makes its PodGroup (minMember = every replica, minResources their
// sum) and names its pods <name>-master-0, <name>-worker-<i>.
func PyTorchJob(ns, name, queue, schedulerName string, workers int, cpu string) *unstructured.Unstructured {
	replica := func(n int) map[string]any {
		return map[string]any{
			"replicas":      int64(n),
			"restartPolicy": "OnFailure",
			"template": map[string]any{"spec": map[string]any{
				"schedulerName": schedulerName,
				"containers": []any{map[string]any{
					"name":  "pytorch", // the operator's required container name
					"image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
					"resources": map[string]any{"requests": map[string]any{
						"cpu": cpu, "memory": "1Gi",
					}},
				}},
			}},
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1",
		"kind":       "PyTorchJob",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"runPolicy": map[string]any{"schedulingPolicy": map[string]any{"queue": queue}},
			"pytorchReplicaSpecs": map[string]any{
				"Master": replica(1),
				"Worker": replica(workers),
			},
		},
	}}
}
