package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// The chart lives beside deploy/; its tests are here, where the manifests
// it must agree with are rendered.
var (
	chartDir          = filepath.Join("..", "charts", "shardsched")
	externalEtcdChart = filepath.Join(chartDir, "ci", "external-etcd-values.yaml")
)

// helm returns the cached helm, or skips outside CI when it is missing.
func helm(t *testing.T) string {
	t.Helper()
	p, err := cluster.FindHelm()
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("CI is set and helm is missing: %v", err)
		}
		t.Skipf("helm not built: %v", err)
	}
	return p
}

// helmTemplate renders the chart as release "shardsched" in namespace ns.
func helmTemplate(t *testing.T, ns string, args ...string) (objects, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append([]string{"template", "shardsched", chartDir, "--namespace", ns, "--include-crds"}, args...)
	out, stderr, err := run(ctx, nil, helm(t), full...)
	if err != nil {
		return nil, &helmError{err: err, stderr: stderr}
	}
	return decodeObjects(t, "helm template "+strings.Join(args, " "), out), nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

func TestHelmLint(t *testing.T) {
	h := helm(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{{"lint", "--strict", chartDir}, {"lint", "--strict", chartDir, "-f", externalEtcdChart}} {
		out, stderr, err := run(ctx, nil, h, args...)
		if err != nil {
			t.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
	}
}

// TestHelmChartIsTheDeployInstall renders the chart with its defaults as
// release "shardsched" in namespace "shardsched" and holds it to the checks
// deploy/ passes: the same least-privilege RBAC, the same shard flags,
// ports, probes and security; the same CRDs; and the image tag `make image`
// builds.
func TestHelmChartIsTheDeployInstall(t *testing.T) {
	objs, err := helmTemplate(t, namespace)
	if err != nil {
		t.Fatal(err)
	}
	checkCRDs(t, objs)
	checkRBAC(t, objs)
	_, f := checkShards(t, objs, generatedKey)
	want := []string{}
	for i := range 3 {
		want = append(want, fmt.Sprintf("http://shardsched-etcd-%d.shardsched-etcd.shardsched.svc:2379", i))
	}
	if got := f["etcd-endpoints"]; got != strings.Join(want, ",") {
		t.Errorf("--etcd-endpoints=%q, want the chart's etcd members %q", got, strings.Join(want, ","))
	}
	// The same shard container as deploy/ renders, flag for flag.
	_, df := checkShards(t, render(t, "."), placeholderKey)
	for k, v := range df {
		if k == "etcd-endpoints" {
			continue
		}
		if f[k] != v {
			t.Errorf("--%s: the chart sets %q, deploy/ %q", k, f[k], v)
		}
	}
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	version := makefileVersion(t)
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != "shardsched:"+version {
		t.Errorf("the chart's shards run %q, want shardsched:%s (the Makefile's VERSION)", got, version)
	}
	var chart struct{ Version, AppVersion string }
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.AppVersion != version {
		t.Errorf("Chart.yaml appVersion %q (err %v), want the Makefile's VERSION %s", chart.AppVersion, err, version)
	}
	// A gossip key is generated: a usable 32-byte key, new at each render.
	sec := one[corev1.Secret](t, objs, "Secret", "shardsched-gossip-key")
	if key := sec.Data["key"]; len(key) != 32 {
		t.Errorf("generated gossip key is %d bytes, want 32", len(key))
	}
	again, err := helmTemplate(t, namespace)
	if err != nil {
		t.Fatal(err)
	}
	if k2 := one[corev1.Secret](t, again, "Secret", "shardsched-gossip-key").Data["key"]; string(k2) == string(sec.Data["key"]) {
		t.Error("two renders generated the same gossip key")
	}
	// GOMEMLIMIT as deploy/ writes it beside the same memory limits.
	deployed := render(t, ".")
	for chartName, deployName := range map[string]string{"shardsched": "shardsched", "shardsched-etcd": "etcd"} {
		chartEnv := one[appsv1.StatefulSet](t, objs, "StatefulSet", chartName).Spec.Template.Spec.Containers[0].Env
		deployEnv := one[appsv1.StatefulSet](t, deployed, "StatefulSet", deployName).Spec.Template.Spec.Containers[0].Env
		if c, d := envValue(chartEnv, "GOMEMLIMIT"), envValue(deployEnv, "GOMEMLIMIT"); c == "" || c != d {
			t.Errorf("StatefulSet %s: GOMEMLIMIT %q in the chart, %q in deploy/", chartName, c, d)
		}
	}
}

// envValue is the value of the variable name in env ("" if none).
func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestHelmChartExternalEtcd renders the external-etcd example: no etcd of
// its own, the endpoints and the client TLS files from the named Secret, no
// generated gossip key or coordinator token (existing Secrets are named), a ServiceMonitor and
// the OTel variables; and refuses values that cannot work, naming them.
// Node pools: no flag by default (deploy_test checks the defaults' flags),
// the pattern passed whole when set, even with characters YAML would read.
func TestHelmChartNodePools(t *testing.T) {
	const pattern = `^(gpu-[a-z0-9]+)-: #x`
	objs, err := helmTemplate(t, namespace, "--set-string", "nodePools="+pattern)
	if err != nil {
		t.Fatal(err)
	}
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	if got := resolveArgs(t, objs, sts.Spec.Template.Spec.Containers[0])["node-pools"]; got != pattern {
		t.Errorf("--node-pools=%q, want %q", got, pattern)
	}
	objs, err = helmTemplate(t, namespace)
	if err != nil {
		t.Fatal(err)
	}
	sts = one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	if got, ok := resolveArgs(t, objs, sts.Spec.Template.Spec.Containers[0])["node-pools"]; ok {
		t.Errorf("--node-pools=%q rendered by default", got)
	}
}

// extraArgs reach the shards' arguments as given, after the chart's own,
// and the default renders none.
func TestHelmChartExtraArgs(t *testing.T) {
	objs, err := helmTemplate(t, namespace, "--set", "extraArgs={--bind-workers=256,--strategy=spread}")
	if err != nil {
		t.Fatal(err)
	}
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	args := sts.Spec.Template.Spec.Containers[0].Args
	if n := len(args); n < 2 || args[n-2] != "--bind-workers=256" || args[n-1] != "--strategy=spread" {
		t.Errorf("args end %q, want the extraArgs last", args[max(len(args)-2, 0):])
	}
	objs, err = helmTemplate(t, namespace)
	if err != nil {
		t.Fatal(err)
	}
	sts = one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	f := resolveArgs(t, objs, sts.Spec.Template.Spec.Containers[0])
	for _, flag := range []string{"bind-workers", "strategy"} {
		if v, ok := f[flag]; ok {
			t.Errorf("--%s=%q rendered by default", flag, v)
		}
	}
}

// GOMEMLIMIT is the container's memory limit less a tenth (at least 64 MiB
// kept) unless goMemLimit gives a size of its own; a size Go would not
// read, or a limit the chart cannot read or that leaves Go under 64 MiB,
// is refused at render time naming the value.
func TestHelmChartGoMemLimit(t *testing.T) {
	// goMemLimit renders the chart and gives the GOMEMLIMIT of the shard's
	// and etcd's containers ("" where there is none).
	goMemLimit := func(args ...string) (shard, etcd string, err error) {
		objs, err := helmTemplate(t, namespace, args...)
		if err != nil {
			return "", "", err
		}
		env := func(c corev1.Container) string {
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
					t.Errorf("helm template %v: GOMEMLIMIT from %+v, want a value", args, e.ValueFrom)
				}
			}
			return envValue(c.Env, "GOMEMLIMIT")
		}
		shard = env(one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched").Spec.Template.Spec.Containers[0])
		etcd = env(one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched-etcd").Spec.Template.Spec.Containers[0])
		return shard, etcd, nil
	}
	// Without goMemLimit: the memory limit less a tenth, at least 64 MiB
	// kept for what Go does not count.
	for _, c := range []struct {
		args        []string
		shard, etcd string
	}{
		{nil, "3687MiB", "3687MiB"}, // 4Gi each: 4096 − 409
		{[]string{"--set", "resources.limits.memory=512Mi"}, "448MiB", "3687MiB"},
		{[]string{"--set", "resources.limits.memory=2G"}, "1717MiB", "3687MiB"}, // 1907 MiB − 190
		{[]string{"--set", "resources.limits.memory=4294967296"}, "3687MiB", "3687MiB"},
		{[]string{"--set", "resources.limits.memory=null", "--set", "etcd.resources.limits.memory=1Gi"}, "", "922MiB"},
		{[]string{"--set", "goMemLimit=400MiB"}, "400MiB", "3687MiB"},
		{[]string{"--set", "goMemLimit=419430400", "--set", "resources.limits.memory=1.5Gi"}, "419430400", "3687MiB"},
	} {
		shard, etcd, err := goMemLimit(c.args...)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if shard != c.shard || etcd != c.etcd {
			t.Errorf("%v: GOMEMLIMIT %q for the shards and %q for etcd, want %q and %q", c.args, shard, etcd, c.shard, c.etcd)
		}
	}
	for _, c := range []struct{ set, want string }{
		{"goMemLimit=400Mi", "goMemLimit: \"400Mi\" is not a size Go reads"},
		{"goMemLimit=-1MiB", "is not a size Go reads"},
		{"goMemLimit=0", "is not a size Go reads"},
		{"goMemLimit=4.5GiB", "is not a size Go reads"},
		{"resources.limits.memory=1.5Gi", `resources.limits.memory: "1.5Gi" is not a memory size the chart reads`},
		{"resources.limits.memory=-1Gi", "is not a memory size the chart reads"},
		{"resources.limits.memory=100Mi", "resources.limits.memory: 100Mi leaves Go less than 64 MiB"},
		{"etcd.resources.limits.memory=1e9", `etcd.resources.limits.memory: "1e9" is not a memory size`},
	} {
		_, _, err := goMemLimit("--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error saying %q", c.set, err, c.want)
		}
	}
}

func TestHelmChartExternalEtcd(t *testing.T) {
	objs, err := helmTemplate(t, namespace, "-f", externalEtcdChart)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if name, _ := meta(o); strings.Contains(name, "etcd") && kindOf(o) != "CustomResourceDefinition" {
			t.Errorf("%s %s rendered with an external etcd", kindOf(o), name)
		}
		if kindOf(o) == "Secret" {
			name, _ := meta(o)
			t.Errorf("Secret %s rendered though gossip.existingSecret and coordinator.existingSecret are set", name)
		}
	}
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	c := sts.Spec.Template.Spec.Containers[0]
	f := resolveArgs(t, objs, c)
	if got := f["etcd-endpoints"]; got != "https://etcd-0.example.internal:2379,https://etcd-1.example.internal:2379,https://etcd-2.example.internal:2379" {
		t.Errorf("--etcd-endpoints=%q", got)
	}
	for flag, file := range map[string]string{"etcd-ca-file": "ca.crt", "etcd-cert-file": "tls.crt", "etcd-key-file": "tls.key"} {
		if f[flag] != "/etc/shardsched/etcd-tls/"+file {
			t.Errorf("--%s=%q", flag, f[flag])
		}
	}
	vols := map[string]string{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			vols[v.Name] = v.Secret.SecretName
		}
	}
	if vols["etcd-tls"] != "shardsched-etcd-tls" || vols["gossip-key"] != "shardsched-gossip-key" || vols["coordinator-token"] != "shardsched-coordinator-token" {
		t.Errorf("secret volumes %v", vols)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" && e.Value == "http://otel-collector.observability:4317"
	}) {
		t.Errorf("OTel endpoint not in the shard's env: %v", c.Env)
	}
	if !slices.ContainsFunc(objs, func(o map[string]any) bool { return kindOf(o) == "ServiceMonitor" }) {
		t.Error("no ServiceMonitor though metrics.serviceMonitor.enabled")
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "replicas=0"}, "replicas must be at least 1"},
		{[]string{"--set", "partitions=0"}, "partitions must be between"},
		{[]string{"--set", "etcd.enabled=false"}, "externalEtcd.endpoints is required"},
		{[]string{"-f", externalEtcdChart, "--set", "externalEtcd.tlsSecret="}, "externalEtcd.tlsSecret is required"},
		{[]string{"--set", "extraArgs={--log-level=debug}"}, "--log-level is set by the chart"},
		{[]string{"--set", "extraArgs={--insecure-coordinator=true}"}, "--insecure-coordinator is set by the chart"},
		{[]string{"--set", "extraArgs={bind-workers=256}"}, `"bind-workers=256" is not --flag=value`},
		{[]string{"--set", "extraArgs={--profiling}"}, `"--profiling" is not --flag=value`},
		{[]string{"--set-json", `extraArgs=["--log-level=debug\nx"]`}, "--log-level is set by the chart"},
	} {
		_, err := helmTemplate(t, namespace, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("helm template %v: %v, want an error saying %q", bad.args, err, bad.want)
		}
	}
}

// TestHelmServerDryRun applies what the chart renders, with its defaults
// and with the external-etcd example, to the test kube-apiserver with
// --dry-run=server (schema validation, admission with Pod Security
// "restricted", RBAC escalation checks), in a namespace of its own.
func TestHelmServerDryRun(t *testing.T) {
	cp.Require(t)
	kc := kubectl(t)
	const ns = "shardsched-helm"
	nsObj := []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + ns + `","labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, stderr, err := run(ctx, nsObj, kc, "--kubeconfig", cp.Kubeconfig, "apply", "-f", "-"); err != nil {
		t.Fatalf("create namespace: %v\n%s%s", err, out, stderr)
	}
	for _, values := range [][]string{nil, {"-f", externalEtcdChart, "--set", "metrics.serviceMonitor.enabled=false"}} {
		args := append([]string{"template", "shardsched", chartDir, "--namespace", ns, "--include-crds"}, values...)
		manifest, stderr, err := run(ctx, nil, helm(t), args...)
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, stderr)
		}
		n := len(decodeObjects(t, "helm template", manifest))
		out, stderr, err := run(ctx, []byte(manifest), kc, "--kubeconfig", cp.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Fatalf("helm template %v | kubectl apply --dry-run=server: %v\n%s%s", values, err, out, stderr)
		}
		if got := strings.Count(out, "(server dry run)"); got != n {
			t.Errorf("dry run reported %d objects, the chart rendered %d:\n%s", got, n, out)
		}
		for _, line := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(line, "Warning:") && !strings.Contains(line, "last-applied-configuration") {
				t.Errorf("helm template %v | kubectl apply --dry-run=server: %s", values, line)
			}
		}
	}
}
