package deploy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// cp is written once by TestMain before any test runs and only read after.
var cp testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &cp))
}

const (
	namespace      = "shardsched"
	overlayDir     = "overlays/external-etcd"
	serviceAccount = "system:serviceaccount:shardsched:shardsched"
)

// kubectl returns the cached kubectl, or skips outside CI when it is missing.
func kubectl(t *testing.T) string {
	t.Helper()
	b, err := cluster.FindBinaries()
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("CI is set and the control plane is missing: %v", err)
		}
		t.Skipf("control plane not built: %v", err)
	}
	return b.Kubectl
}

// deployDir is <repo>/deploy: go test runs in the package directory.
func deployDir(t *testing.T, sub string) string {
	t.Helper()
	d, err := filepath.Abs(sub)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run runs a command and returns its stdout, stderr and error.
func run(ctx context.Context, stdin []byte, name string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null") // never a developer's cluster
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// objects is the output of `kubectl kustomize` as unstructured maps.
type objects []map[string]any

func render(t *testing.T, dir string) objects {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, stderr, err := run(ctx, nil, kubectl(t), "kustomize", deployDir(t, dir))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return decodeObjects(t, "kustomize output of "+dir, out)
}

// decodeObjects parses a YAML stream of Kubernetes objects.
func decodeObjects(t *testing.T, what, out string) objects {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs objects
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode %s: %v", what, err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s: nothing rendered", what)
	}
	return objs
}

func kindOf(o map[string]any) string { s, _ := o["kind"].(string); return s }

func meta(o map[string]any) (name, ns string) {
	m, _ := o["metadata"].(map[string]any)
	name, _ = m["name"].(string)
	ns, _ = m["namespace"].(string)
	return name, ns
}

// all converts every object of a kind into T.
func all[T any](t *testing.T, objs objects, kind string) []T {
	t.Helper()
	var out []T
	for _, o := range objs {
		if kindOf(o) != kind {
			continue
		}
		var v T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &v); err != nil {
			name, _ := meta(o)
			t.Fatalf("%s %s: %v", kind, name, err)
		}
		out = append(out, v)
	}
	return out
}

// one returns the object of a kind and name, failing when it is missing.
func one[T any](t *testing.T, objs objects, kind, name string) T {
	t.Helper()
	for _, o := range objs {
		if n, _ := meta(o); kindOf(o) == kind && n == name {
			var v T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &v); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return v
		}
	}
	t.Fatalf("no %s %q in the kustomize output", kind, name)
	var zero T
	return zero
}

func has(objs objects, kind, name string) bool {
	for _, o := range objs {
		if n, _ := meta(o); kindOf(o) == kind && n == name {
			return true
		}
	}
	return false
}

// wantRules is the whole permission set of a shard: the ClusterRole must
// grant exactly these (apiGroup, resource, verb) triples.
var wantRules = func() []string {
	var out []string
	add := func(groups, resources, verbs []string) {
		for _, g := range groups {
			for _, r := range resources {
				for _, v := range verbs {
					out = append(out, g+"|"+r+"|"+v)
				}
			}
		}
	}
	core, volcano := []string{""}, []string{"scheduling.volcano.sh"}
	add(core, []string{"pods", "nodes"}, []string{"get", "list", "watch"})
	add(core, []string{"pods/binding"}, []string{"create"})
	// Reclaim and preemption evict through the Eviction API.
	add(core, []string{"pods/eviction"}, []string{"create"})
	add([]string{"", "events.k8s.io"}, []string{"events"}, []string{"create", "patch"})
	add(volcano, []string{"queues"}, []string{"get", "list", "watch", "create", "delete", "patch"})
	add(volcano, []string{"podgroups"}, []string{"get", "list", "watch", "create", "delete", "patch"})
	add(volcano, []string{"queues/status", "podgroups/status"}, []string{"patch"})
	// PodGroups' priorityClassName is resolved to the class's value.
	add([]string{"scheduling.k8s.io"}, []string{"priorityclasses"}, []string{"get", "list", "watch"})
	sort.Strings(out)
	return out
}()

// wantStatusRules is what a shard may do in its own namespace: keep its
// status Lease.
var wantStatusRules = []string{"coordination.k8s.io|leases|create", "coordination.k8s.io|leases|get", "coordination.k8s.io|leases|update"}

// grants flattens rules into sorted group|resource|verb triples, failing on
// wildcards, resource names and non-resource URLs.
func grants(t *testing.T, what string, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var got []string
	for i, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s rule %d: nonResourceURLs %v resourceNames %v, want none", what, i, r.NonResourceURLs, r.ResourceNames)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" || strings.Contains(res, "*") {
						t.Errorf("%s rule %d grants a wildcard: group %q resource %q verb %q", what, i, g, res, v)
					}
					got = append(got, g+"|"+res+"|"+v)
				}
			}
		}
	}
	sort.Strings(got)
	return slices.Compact(got)
}

func checkRBAC(t *testing.T, objs objects) {
	t.Helper()
	roles := all[rbacv1.ClusterRole](t, objs, "ClusterRole")
	if len(roles) != 2 {
		t.Fatalf("%d ClusterRoles, want exactly 2 (the shards' and the read-only viewer)", len(roles))
	}
	role := one[rbacv1.ClusterRole](t, objs, "ClusterRole", "shardsched")
	viewer := one[rbacv1.ClusterRole](t, objs, "ClusterRole", "shardsched-viewer")
	for _, r := range []rbacv1.ClusterRole{role, viewer} {
		if r.AggregationRule != nil {
			t.Errorf("ClusterRole %s aggregates other roles", r.Name)
		}
	}
	if got := grants(t, "ClusterRole "+role.Name, role.Rules); !slices.Equal(got, wantRules) {
		t.Errorf("ClusterRole %s grants\n  %v\nwant exactly\n  %v", role.Name, got, wantRules)
	}
	for _, g := range grants(t, "ClusterRole "+viewer.Name, viewer.Rules) {
		if v := g[strings.LastIndex(g, "|")+1:]; v != "get" && v != "list" && v != "watch" {
			t.Errorf("the viewer role grants %s: it must only read", g)
		}
	}
	status := one[rbacv1.Role](t, objs, "Role", "shardsched-status")
	if got := grants(t, "Role "+status.Name, status.Rules); !slices.Equal(got, wantStatusRules) {
		t.Errorf("Role %s grants %v, want exactly %v", status.Name, got, wantStatusRules)
	}
	if n := len(all[rbacv1.Role](t, objs, "Role")); n != 1 {
		t.Errorf("%d Roles, want 1", n)
	}
	rbs := all[rbacv1.RoleBinding](t, objs, "RoleBinding")
	if len(rbs) != 1 || rbs[0].RoleRef.Kind != "Role" || rbs[0].RoleRef.Name != status.Name {
		t.Errorf("RoleBindings %+v, want one binding Role %s", rbs, status.Name)
	}

	bindings := all[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding")
	if len(bindings) != 1 {
		t.Fatalf("%d ClusterRoleBindings, want 1", len(bindings))
	}
	b := bindings[0]
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role.Name {
		t.Errorf("ClusterRoleBinding refers to %s %s, want ClusterRole %s", b.RoleRef.Kind, b.RoleRef.Name, role.Name)
	}
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	sa := sts.Spec.Template.Spec.ServiceAccountName
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
	if !slices.Equal(b.Subjects, want) {
		t.Errorf("ClusterRoleBinding subjects %+v, want %+v", b.Subjects, want)
	}
	if len(rbs) == 1 && !slices.Equal(rbs[0].Subjects, want) {
		t.Errorf("RoleBinding subjects %+v, want %+v", rbs[0].Subjects, want)
	}
	one[corev1.ServiceAccount](t, objs, "ServiceAccount", sa)
}

// resolveArgs expands $(VAR) in the container's args for variables set
// literally or from a ConfigMap of the output; other references stay as they are.
func resolveArgs(t *testing.T, objs objects, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := one[corev1.ConfigMap](t, objs, "ConfigMap", ref.Name)
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Fatalf("env %s: ConfigMap %s has no key %q", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		}
	}
	flags := map[string]string{}
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("container %s: argument %q is not --flag=value", c.Name, a)
		}
		if _, dup := flags[name]; dup {
			t.Errorf("container %s: --%s given twice", c.Name, name)
		}
		flags[name] = val
	}
	return flags
}

func fieldRefEnv(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// checkStatefulSetShape checks what both StatefulSets must have: parallel
// pod management, a headless governing Service, one pod per node, probes,
// requests, a PodDisruptionBudget, and pods allowed by the restricted Pod
// Security Standard.
func checkStatefulSetShape(t *testing.T, objs objects, sts appsv1.StatefulSet, ready, live string) {
	t.Helper()
	ps := sts.Spec.Template.Spec
	podLabels := labels.Set(sts.Spec.Template.Labels)
	if sts.Namespace != namespace {
		t.Errorf("StatefulSet %s in namespace %q, want %q", sts.Name, sts.Namespace, namespace)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet %s podManagementPolicy %q, want Parallel", sts.Name, sts.Spec.PodManagementPolicy)
	}
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("StatefulSet %s selector does not match its pod labels (%v)", sts.Name, err)
	}

	svc := one[corev1.Service](t, objs, "Service", sts.Spec.ServiceName)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s clusterIP %q, want None (headless)", svc.Name, svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s must publish not-ready addresses (peers meet before they are ready)", svc.Name)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service %s selector %v does not select the pods of %s", svc.Name, svc.Spec.Selector, sts.Name)
	}

	aa := ps.Affinity
	hostTerm := false
	if aa != nil && aa.PodAntiAffinity != nil {
		for _, term := range aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			s, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err == nil && term.TopologyKey == corev1.LabelHostname && s.Matches(podLabels) {
				hostTerm = true
			}
		}
	}
	if !hostTerm {
		t.Errorf("StatefulSet %s has no required pod anti-affinity on %s against its own pods", sts.Name, corev1.LabelHostname)
	}

	var pdbs int
	for _, pdb := range all[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget") {
		s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && s.Matches(podLabels) && pdb.Namespace == sts.Namespace {
			pdbs++
			if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
				t.Errorf("PodDisruptionBudget %s sets neither maxUnavailable nor minAvailable", pdb.Name)
			}
		}
	}
	if pdbs != 1 {
		t.Errorf("%d PodDisruptionBudgets select the pods of %s, want 1", pdbs, sts.Name)
	}

	if len(ps.Containers) != 1 {
		t.Fatalf("StatefulSet %s has %d containers, want 1", sts.Name, len(ps.Containers))
	}
	c := ps.Containers[0]
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", sts.Name, what)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s: %s probe path %q, want %q", sts.Name, what, p.HTTPGet.Path, path)
		}
		if p.HTTPGet.Port.IntValue() == 0 {
			containerPort(t, c, p.HTTPGet.Port.String()) // a named port must exist
		}
	}
	probe("readiness", c.ReadinessProbe, ready)
	probe("liveness", c.LivenessProbe, live)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("%s: no %s request", sts.Name, r)
		}
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && lim.Cmp(c.Resources.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("%s: memory limit below request", sts.Name)
	}

	// The restricted Pod Security Standard (the namespace enforces it).
	psc, sc := ps.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
		t.Errorf("%s: pod must run as non-root with a seccomp profile", sts.Name)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: container must drop ALL capabilities and disallow privilege escalation", sts.Name)
	}
}

// checkShards checks the shard StatefulSet and returns its resolved flags.
func checkShards(t *testing.T, objs objects, keys keyPolicy) (appsv1.StatefulSet, map[string]string) {
	t.Helper()
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	checkStatefulSetShape(t, objs, sts, "/readyz", "/healthz")
	c := sts.Spec.Template.Spec.Containers[0]
	f := resolveArgs(t, objs, c)

	if got := f["shard-name"]; got != "$(POD_NAME)" || fieldRefEnv(c, "POD_NAME") != "metadata.name" {
		t.Errorf("--shard-name=%q, want $(POD_NAME) from metadata.name", got)
	}
	if got := f["gossip-advertise-addr"]; got != "$(POD_IP)" || fieldRefEnv(c, "POD_IP") != "status.podIP" {
		t.Errorf("--gossip-advertise-addr=%q, want $(POD_IP) from status.podIP", got)
	}
	if got := f["coordinator-advertise-addr"]; got != "http://$(POD_IP):7070" {
		t.Errorf("--coordinator-advertise-addr=%q", got)
	}
	wantFlags := map[string]string{
		"gossip-bind-addr": "0.0.0.0", "gossip-port": "7946", "scheduler-name": "volcano",
		"partitions": "4096", "status-flush-interval": "1s", "http-addr": ":8080",
		"coordinator-addr": ":7070", "session-ttl": "10",
	}
	for k, v := range wantFlags {
		if f[k] != v {
			t.Errorf("--%s=%q, want %q", k, f[k], v)
		}
	}

	// Ports: the flags and the declared container ports agree.
	type port struct {
		n     int32
		proto corev1.Protocol
	}
	var ports []port
	for _, p := range c.Ports {
		ports = append(ports, port{p.ContainerPort, p.Protocol})
	}
	for _, want := range []port{{7946, corev1.ProtocolTCP}, {7946, corev1.ProtocolUDP}, {7070, corev1.ProtocolTCP}, {8080, corev1.ProtocolTCP}} {
		if !slices.Contains(ports, want) {
			t.Errorf("shard container does not declare port %d/%s", want.n, want.proto)
		}
	}
	if p := c.ReadinessProbe.HTTPGet.Port; p.IntValue() != 8080 && containerPort(t, c, p.String()) != 8080 {
		t.Errorf("readiness probe port %s is not the --http-addr port 8080", p.String())
	}

	// Gossip seeds: the stable DNS names of the StatefulSet's pods.
	seeds := strings.Split(f["join"], ",")
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) < 1 || len(seeds) != int(*sts.Spec.Replicas) {
		t.Errorf("--join has %d seeds for %v replicas", len(seeds), sts.Spec.Replicas)
	}
	for i, s := range seeds {
		want := fmt.Sprintf("%s-%d.%s.%s.svc:%s", sts.Name, i, sts.Spec.ServiceName, namespace, f["gossip-port"])
		if s != want {
			t.Errorf("--join seed %d is %q, want %q", i, s, want)
		}
	}

	// The gossip key file is the "key" item of a Secret of the output.
	keyFile := f["gossip-key-file"]
	secret := secretBehind(t, objs, sts, keyFile)
	key, ok := secret.Data[filepath.Base(keyFile)]
	if !ok {
		t.Fatalf("Secret %s has no %q for --gossip-key-file=%s", secret.Name, filepath.Base(keyFile), keyFile)
	}
	switch {
	case keys == placeholderKey && (validGossipKey(key) || !strings.Contains(string(key), "REPLACE-ME")):
		t.Errorf("gossip key Secret %s holds %q: the repository must ship an invalid REPLACE-ME placeholder, never a usable key", secret.Name, key)
	case keys == generatedKey && !validGossipKey(key):
		t.Errorf("generated gossip key in Secret %s is not a usable key: %q", secret.Name, key)
	}

	// The coordinator token file is an item of a Secret of the output, by
	// the same policy: a placeholder the shard refuses, or a usable token.
	tokenFile := f["coordinator-token-file"]
	if tokenFile == "" {
		t.Fatalf("shards get no --coordinator-token-file: their coordinator API would serve any caller")
	}
	if _, insecure := f["insecure-coordinator"]; insecure {
		t.Errorf("shards run with --insecure-coordinator")
	}
	tsecret := secretBehind(t, objs, sts, tokenFile)
	var token []byte
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tsecret.Name {
			for _, it := range v.Secret.Items {
				if it.Path == filepath.Base(tokenFile) {
					token = tsecret.Data[it.Key]
				}
			}
		}
	}
	switch {
	case keys == placeholderKey && (validToken(token) || !strings.Contains(string(token), "REPLACE-ME")):
		t.Errorf("coordinator token Secret %s holds %q: the repository must ship an invalid REPLACE-ME placeholder, never a usable token", tsecret.Name, token)
	case keys == generatedKey && !validToken(token):
		t.Errorf("generated coordinator token in Secret %s is not a usable token: %q", tsecret.Name, token)
	}
	return sts, f
}

// validToken mirrors the shard's token reader: standard base64 of at least
// 24 bytes.
func validToken(b []byte) bool {
	s := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if dec, err := enc.DecodeString(s); err == nil {
			return len(dec) >= 24
		}
	}
	return false
}

// How the gossip key Secret is filled: deploy/ ships a placeholder that
// fails closed; the chart generates a random key at install.
type keyPolicy int

const (
	placeholderKey keyPolicy = iota
	generatedKey
)

// secretBehind returns the Secret whose item is mounted at file in the pods of sts.
func secretBehind(t *testing.T, objs objects, sts appsv1.StatefulSet, file string) corev1.Secret {
	t.Helper()
	ps := sts.Spec.Template.Spec
	for _, m := range ps.Containers[0].VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, file)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s: mount %s of %s is writable", sts.Name, m.MountPath, file)
		}
		for _, v := range ps.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			key := rel
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			s := one[corev1.Secret](t, objs, "Secret", v.Secret.SecretName)
			if _, ok := s.Data[key]; !ok {
				t.Errorf("Secret %s has no key %q for %s", s.Name, key, file)
			}
			if s.Namespace != sts.Namespace {
				t.Errorf("Secret %s in %q, StatefulSet in %q", s.Name, s.Namespace, sts.Namespace)
			}
			return s
		}
	}
	t.Fatalf("%s: %s is not in a mounted Secret", sts.Name, file)
	return corev1.Secret{}
}

// validGossipKey mirrors the shard's key loader: 16, 24 or 32 bytes, raw or base64.
func validGossipKey(b []byte) bool {
	s := strings.TrimSpace(string(b))
	ok := func(n int) bool { return n == 16 || n == 24 || n == 32 }
	if dec, err := base64.StdEncoding.DecodeString(s); err == nil && ok(len(dec)) {
		return true
	}
	return ok(len(s))
}

func checkEtcd(t *testing.T, objs objects) appsv1.StatefulSet {
	t.Helper()
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "etcd")
	checkStatefulSetShape(t, objs, sts, "/readyz", "/livez")
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("etcd replicas %v, want 3", sts.Spec.Replicas)
	}
	ps := sts.Spec.Template.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("etcd pods must not mount a service account token")
	}
	c := ps.Containers[0]
	f := resolveArgs(t, objs, c)
	if f["name"] != "$(POD_NAME)" || fieldRefEnv(c, "POD_NAME") != "metadata.name" {
		t.Errorf("etcd --name=%q, want $(POD_NAME) from metadata.name", f["name"])
	}
	dns := func(member string) string {
		return fmt.Sprintf("%s.%s.%s.svc", member, sts.Spec.ServiceName, namespace)
	}
	if want := "http://" + dns("$(POD_NAME)") + ":2380"; f["initial-advertise-peer-urls"] != want {
		t.Errorf("etcd --initial-advertise-peer-urls=%q, want %q", f["initial-advertise-peer-urls"], want)
	}
	if want := "http://" + dns("$(POD_NAME)") + ":2379"; f["advertise-client-urls"] != want {
		t.Errorf("etcd --advertise-client-urls=%q, want %q", f["advertise-client-urls"], want)
	}
	var members []string
	for i := range int(*sts.Spec.Replicas) {
		m := fmt.Sprintf("%s-%d", sts.Name, i)
		members = append(members, m+"=http://"+dns(m)+":2380")
	}
	if want := strings.Join(members, ","); f["initial-cluster"] != want {
		t.Errorf("etcd --initial-cluster=%q, want %q", f["initial-cluster"], want)
	}
	if f["initial-cluster-state"] != "new" {
		t.Errorf("etcd --initial-cluster-state=%q, want new", f["initial-cluster-state"])
	}
	if len(sts.Spec.VolumeClaimTemplates) == 0 {
		t.Errorf("etcd has no volumeClaimTemplates: its data would not survive a restart")
	}
	return sts
}

func checkCRDs(t *testing.T, objs objects) {
	t.Helper()
	files, err := deploy.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, b := range files {
		var o map[string]any
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&o); err != nil {
			t.Fatal(err)
		}
		n, _ := meta(o)
		want = append(want, n)
	}
	for _, o := range objs {
		if kindOf(o) == "CustomResourceDefinition" {
			n, _ := meta(o)
			got = append(got, n)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("kustomize output has CRDs %v, deploy.CRDs() has %v (list new files in deploy/crds/Kustomization)", got, want)
	}
}

func checkCommon(t *testing.T, objs objects) {
	t.Helper()
	checkCRDs(t, objs)
	checkRBAC(t, objs)
	ns := one[corev1.Namespace](t, objs, "Namespace", namespace)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("Namespace %s does not enforce the restricted Pod Security Standard", ns.Name)
	}
	for _, o := range objs {
		name, on := meta(o)
		switch kindOf(o) {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
			if on != "" {
				t.Errorf("cluster-scoped %s %s has namespace %q", kindOf(o), name, on)
			}
		default:
			if on != namespace {
				t.Errorf("%s %s in namespace %q, want %q", kindOf(o), name, on, namespace)
			}
		}
	}
}

// TestKustomizeDeploy checks the rendered `kubectl kustomize deploy/`.
func TestKustomizeDeploy(t *testing.T) {
	objs := render(t, ".")
	checkCommon(t, objs)
	_, f := checkShards(t, objs, placeholderKey)
	etcd := checkEtcd(t, objs)
	var want []string
	for i := range int(*etcd.Spec.Replicas) {
		want = append(want, fmt.Sprintf("http://%s-%d.%s.%s.svc:2379", etcd.Name, i, etcd.Spec.ServiceName, namespace))
	}
	if got := f["etcd-endpoints"]; got != strings.Join(want, ",") {
		t.Errorf("shards' --etcd-endpoints=%q, want the in-cluster members %q", got, strings.Join(want, ","))
	}
	for _, flag := range []string{"etcd-ca-file", "etcd-cert-file", "etcd-key-file"} {
		if _, ok := f[flag]; ok {
			t.Errorf("--%s set for the in-cluster (plain HTTP) etcd", flag)
		}
	}
	// The shards run the image `make image` tags with the Makefile's VERSION.
	sts := one[appsv1.StatefulSet](t, objs, "StatefulSet", "shardsched")
	if got, want := sts.Spec.Template.Spec.Containers[0].Image, "shardsched:"+makefileVersion(t); got != want {
		t.Errorf("the shards run image %q, want %q (the Makefile's VERSION, which make image tags)", got, want)
	}
}

// makefileVersion is the Makefile's VERSION, the tag `make image` builds.
func makefileVersion(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSION\s*:?=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no VERSION in the Makefile")
	}
	return string(m[1])
}

// TestKustomizeExternalEtcd checks the rendered external-etcd overlay: no
// in-cluster etcd, https endpoints, and the client TLS files from a Secret.
func TestKustomizeExternalEtcd(t *testing.T) {
	objs := render(t, overlayDir)
	checkCommon(t, objs)
	for _, o := range objs {
		if n, _ := meta(o); strings.HasPrefix(n, "etcd") {
			t.Errorf("overlay keeps the in-cluster etcd's %s %s", kindOf(o), n)
		}
	}
	sts, f := checkShards(t, objs, placeholderKey)
	for _, e := range strings.Split(f["etcd-endpoints"], ",") {
		if !strings.HasPrefix(e, "https://") {
			t.Errorf("external etcd endpoint %q is not https", e)
		}
	}
	var tlsSecret string
	for _, flag := range []string{"etcd-ca-file", "etcd-cert-file", "etcd-key-file"} {
		file, ok := f[flag]
		if !ok {
			t.Errorf("overlay does not set --%s", flag)
			continue
		}
		s := secretBehind(t, objs, sts, file)
		if tlsSecret != "" && s.Name != tlsSecret {
			t.Errorf("--%s from Secret %s, others from %s", flag, s.Name, tlsSecret)
		}
		tlsSecret = s.Name
		if v := s.Data[filepath.Base(file)]; bytes.Contains(v, []byte("-----BEGIN")) {
			t.Errorf("Secret %s ships real PEM data in %s: the repository must hold placeholders only", s.Name, filepath.Base(file))
		}
	}
}

// applyDryRun runs `kubectl apply --dry-run=server -k dir` and checks that
// the API server accepted every object without a Pod Security warning.
func applyDryRun(t *testing.T, kc, kubeconfig, dir string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, stderr, err := run(ctx, nil, kc, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-k", deployDir(t, dir))
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k %s: %v\nstdout:\n%s\nstderr:\n%s", dir, err, out, stderr)
	}
	if got := strings.Count(out, "(server dry run)"); got != n {
		t.Errorf("kubectl apply --dry-run=server -k %s reported %d objects, rendered %d:\n%s", dir, got, n, out)
	}
	for _, line := range strings.Split(stderr, "\n") {
		// The CRDs were created by the test environment without kubectl's
		// last-applied annotation; kubectl says so and adds it.
		if strings.HasPrefix(line, "Warning:") && !strings.Contains(line, "last-applied-configuration") {
			t.Errorf("kubectl apply --dry-run=server -k %s: %s", dir, line)
		}
	}
	t.Logf("kubectl apply --dry-run=server -k %s:\n%s%s", dir, out, stderr)
}

// createNamespace creates the Namespace of the kustomization for real:
// a server dry run creates nothing, so the namespaced objects of the same
// dry run would otherwise fail with "namespaces not found".
func createNamespace(t *testing.T, kc, kubeconfig string, objs objects) {
	t.Helper()
	for _, o := range objs {
		if kindOf(o) != "Namespace" {
			continue
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, stderr, err := run(ctx, b, kc, "--kubeconfig", kubeconfig, "apply", "-f", "-")
		cancel()
		if err != nil {
			t.Fatalf("create namespace: %v\n%s%s", err, out, stderr)
		}
	}
}

// TestServerDryRun is the CI check of the issue: `kubectl apply
// --dry-run=server -k` of deploy/ and of the external-etcd overlay against
// the test kube-apiserver (which validates every object, runs admission,
// Pod Security included, and checks RBAC escalation for the ClusterRole).
func TestServerDryRun(t *testing.T) {
	cp.Require(t)
	kc := kubectl(t)
	objs := render(t, ".")
	createNamespace(t, kc, cp.Kubeconfig, objs)
	applyDryRun(t, kc, cp.Kubeconfig, ".", len(objs))
	applyDryRun(t, kc, cp.Kubeconfig, overlayDir, len(render(t, overlayDir)))
}

// TestApplyGrantsExactlyWhatShardsUse applies deploy/ for real (twice: it
// must be idempotent) and asks the API server's RBAC authorizer what the
// shards' service account may do.
func TestApplyGrantsExactlyWhatShardsUse(t *testing.T) {
	cp.Require(t)
	kc := kubectl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 2 {
		out, stderr, err := run(ctx, nil, kc, "--kubeconfig", cp.Kubeconfig, "apply", "-k", deployDir(t, "."))
		if err != nil {
			t.Fatalf("kubectl apply -k deploy/ (#%d): %v\n%s%s", i+1, err, out, stderr)
		}
	}

	canIIn := func(ns, verb, resource, sub string) (bool, error) {
		args := []string{"--kubeconfig", cp.Kubeconfig, "auth", "can-i", verb, resource, "--as=" + serviceAccount, "-n", ns}
		if sub != "" {
			args = append(args, "--subresource="+sub)
		}
		out, stderr, err := run(ctx, nil, kc, args...)
		var ee *exec.ExitError
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &ee) && strings.TrimSpace(out) == "no":
			return false, nil
		default:
			return false, fmt.Errorf("kubectl auth can-i %s %s %s: %v: %s%s", verb, resource, sub, err, out, stderr)
		}
	}
	canI := func(verb, resource, sub string) (bool, error) { return canIIn("default", verb, resource, sub) }
	type q struct{ verb, resource, sub string }
	allowed := []q{
		{"create", "pods", "binding"}, {"get", "pods", ""}, {"list", "pods", ""}, {"watch", "pods", ""},
		{"list", "nodes", ""}, {"watch", "nodes", ""},
		{"create", "events", ""}, {"patch", "events", ""}, {"create", "events.events.k8s.io", ""}, {"patch", "events.events.k8s.io", ""},
		{"watch", "queues.scheduling.volcano.sh", ""}, {"create", "queues.scheduling.volcano.sh", ""}, {"delete", "queues.scheduling.volcano.sh", ""},
		{"patch", "queues.scheduling.volcano.sh", "status"}, {"patch", "queues.scheduling.volcano.sh", ""},
		{"list", "podgroups.scheduling.volcano.sh", ""}, {"patch", "podgroups.scheduling.volcano.sh", ""}, {"delete", "podgroups.scheduling.volcano.sh", ""},
		{"list", "priorityclasses.scheduling.k8s.io", ""}, {"watch", "priorityclasses.scheduling.k8s.io", ""},
	}
	denied := []q{
		{"create", "pods", ""}, {"update", "pods", ""}, {"patch", "pods", ""}, {"delete", "pods", ""}, {"update", "pods", "status"},
		{"update", "nodes", ""}, {"patch", "nodes", ""}, {"delete", "events", ""}, {"update", "events", ""},
		{"get", "secrets", ""}, {"list", "configmaps", ""}, {"create", "leases.coordination.k8s.io", ""},
		{"update", "queues.scheduling.volcano.sh", ""}, {"update", "queues.scheduling.volcano.sh", "status"},
		{"update", "podgroups.scheduling.volcano.sh", ""}, {"deletecollection", "podgroups.scheduling.volcano.sh", ""},
		{"create", "customresourcedefinitions.apiextensions.k8s.io", ""}, {"create", "clusterroles.rbac.authorization.k8s.io", ""},
		{"impersonate", "serviceaccounts", ""}, {"create", "priorityclasses.scheduling.k8s.io", ""},
	}
	// The authorizer sees the new binding through an informer: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := canI("create", "pods", "binding")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still may not create pods/binding 30s after apply", serviceAccount)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range allowed {
		if ok, err := canI(a.verb, a.resource, a.sub); err != nil || !ok {
			t.Errorf("%s may not %s %s %s (err %v), but shards need it", serviceAccount, a.verb, a.resource, a.sub, err)
		}
	}
	for _, d := range denied {
		if ok, err := canI(d.verb, d.resource, d.sub); err != nil || ok {
			t.Errorf("%s may %s %s %s (err %v): more than least privilege", serviceAccount, d.verb, d.resource, d.sub, err)
		}
	}
	// Its status Lease, in its own namespace only.
	for _, verb := range []string{"get", "create", "update"} {
		if ok, err := canIIn(namespace, verb, "leases.coordination.k8s.io", ""); err != nil || !ok {
			t.Errorf("%s may not %s leases in %s (err %v), but shards keep their status Lease there", serviceAccount, verb, namespace, err)
		}
	}
	if ok, err := canIIn(namespace, "delete", "leases.coordination.k8s.io", ""); err != nil || ok {
		t.Errorf("%s may delete leases in %s (err %v): more than least privilege", serviceAccount, namespace, err)
	}
	t.Logf("checked %d allowed and %d denied requests", len(allowed), len(denied))
}
