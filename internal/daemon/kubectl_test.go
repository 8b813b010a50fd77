package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/shardsched/shardsched/internal/ctl"
	"github.com/shardsched/shardsched/internal/ctl/cli"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/internal/testenv"
)

// kubectl runs the kubectl plugin's command with a kubeconfig for the test
// API server, as a user would run `kubectl shardsched ARGS`.
func (ev *env) kubectl(args ...string) (string, error) {
	ev.t.Helper()
	path := filepath.Join(ev.t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: ev.cfg.Host, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: ev.cfg.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	cfg.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		ev.t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	base := []string{"--kubeconfig", path, "-n", ev.ns, "--scheduler-name", schedName}
	if ev.asUser != "" {
		base = append(base, "--as", ev.asUser)
	}
	cmd.SetArgs(append(base, args...))
	// Generous: the plugin lists every pod, and under -race on a loaded
	// machine the API server can take a while.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestKubectlPluginExplainsAWaitingGang runs the plugin against the real API
// server while a shard schedules: a gang short of quota at its parent queue
// is explained with that level, the shortfall and the job holding the
// quota; the queue tree shows the status the shard wrote; once the holder
// is gone the same pod is explained as bound.
func TestKubectlPluginExplainsAWaitingGang(t *testing.T) {
	ev := newNamespace(t)
	etcd := testenv.NewEtcd(t)
	ev.d, ev.http, _ = runDaemon(t, ev.cfg, "shard-0", etcd.Endpoints, nil, func(o *Options) {
		o.StatusNamespace, o.StatusEvery = ev.ns, 300*time.Millisecond
	})
	testenv.Eventually(ev.t, 20*time.Second, func() bool { return len(ev.d.Shard.Owned()) >= 64 }, "the shard holds every partition")
	ctx := context.Background()
	// Everything below runs as a user bound only to deploy/'s read-only
	// viewer role: what an operator without write access can see.
	ev.viewer()
	ev.nodes("kc-node", 2, "4", "16Gi")
	ev.queue("kc-parent", "root", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")})
	ev.queue("kc-a", "kc-parent", nil)
	ev.queue("kc-b", "kc-parent", nil)
	ev.podGroup("hold", "kc-a", 3)
	for _, p := range []string{"hold-0", "hold-1", "hold-2"} {
		ev.pod(p, "hold", "1", "1Gi", nil)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("hold", 3) == 3 }, "the holder's 3 pods are bound")
	ev.podGroup("wait", "kc-b", 2)
	ev.pod("wait-0", "wait", "1", "1Gi", nil)
	ev.pod("wait-1", "wait", "1", "1Gi", nil)
	ev.lcEventually("the waiting gang has the scheduler's condition", 30*time.Second, func() (bool, string) {
		pg, err := ev.vc.SchedulingV1beta1().PodGroups(ev.ns).Get(ctx, "wait", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pg.Status.Conditions) > 0, fmt.Sprintf("%+v", pg.Status)
	})

	out, err := ev.kubectl("explain", "podgroup", "wait")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl shardsched explain podgroup wait:\n%s", out)
	for _, want := range []string{`queue "kc-parent" is short of cpu by 1`, "the biggest holder is " + ev.ns + "/hold", "The scheduler says:", "kc-b", "kc-parent"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain does not say %q", want)
		}
	}
	out, err = ev.kubectl("explain", "pod", "wait-0", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var e ctl.Explanation
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if e.PodGroup != ev.ns+"/wait" || len(e.Holders) == 0 || e.Holders[0].Job != ev.ns+"/hold" || e.Placement == nil || !e.Placement.Fits {
		t.Errorf("explain pod -o json: podGroup %s, holders %+v, placement %+v", e.PodGroup, e.Holders, e.Placement)
	}

	var rows []ctl.QueueRow
	ev.lcEventually("the queue tree shows kc-a's allocation as the shard wrote it", 30*time.Second, func() (bool, string) {
		out, err := ev.kubectl("queues", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			if r.Name == "kc-a" {
				return r.Depth == 2 && r.Parent == "kc-parent" && r.Allocated["cpu"] == "3" && r.Running == 1, out
			}
		}
		return false, out
	})
	if out, err := ev.kubectl("queues"); err != nil || !strings.Contains(out, "    kc-a") || !strings.Contains(out, "3/∞") {
		t.Errorf("queues (text): err %v\n%s", err, out)
	}

	var shards []kube.ShardRecord
	ev.lcEventually("kubectl shardsched shards shows the shard, leading, with every partition and the test's queues", 30*time.Second, func() (bool, string) {
		out, err := ev.kubectl("shards", "--shards-namespace", ev.ns, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		shards = nil
		if err := json.Unmarshal([]byte(out), &shards); err != nil {
			return false, err.Error()
		}
		ok := len(shards) == 1 && shards[0].Shard == "shard-0" && shards[0].CoordinatorLeader && !shards[0].Expired &&
			shards[0].Partitions == 64 && shards[0].PartitionsTotal == 64 && slices.Contains(shards[0].Queues, "kc-b") &&
			shards[0].Binds >= 3 && shards[0].Nodes == 2
		return ok, out
	})
	if out, err := ev.kubectl("shards", "--shards-namespace", ev.ns); err != nil || !strings.Contains(out, "shard-0") || !strings.Contains(out, "64/64") {
		t.Errorf("shards (text): err %v\n%s", err, out)
	} else {
		t.Logf("kubectl shardsched shards:\n%s", out)
	}

	for _, p := range []string{"hold-0", "hold-1", "hold-2"} {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("wait", 2) == 2 }, "the gang is bound once the holder is gone")
	out, err = ev.kubectl("explain", "pod", "wait-1")
	if err != nil || !strings.Contains(out, "bound to node kc-node-") {
		t.Errorf("explain pod wait-1 after binding: err %v\n%s", err, out)
	}
	// top: the gang that waited for quota is among the slowest jobs, its
	// time from creation to bound read from the pods' PodScheduled. Every
	// row is asked for: the package's other tests share the cluster, and
	// ten of their jobs may have waited as long (ties at whole seconds).
	out, err = ev.kubectl("top", "-o", "json", "--rows", "1000")
	var top ctl.Top
	if err == nil {
		err = json.Unmarshal([]byte(out), &top)
	}
	if err != nil || !slices.ContainsFunc(top.Slowest, func(j ctl.TopJob) bool { return j.Job == ev.ns+"/wait" && j.Pods == 2 }) {
		t.Errorf("top: err %v, slowest %+v", err, top.Slowest)
	}
	if out, err := ev.kubectl("top"); err == nil {
		t.Logf("kubectl shardsched top:\n%s", out)
	}

	// Bad input gets an error that names it, and no output.
	for _, args := range [][]string{{"explain", "node", "x"}, {"queues", "-o", "xml"}, {"explain", "pod", "nope"}, {"explain", "pod"}} {
		out, err := ev.kubectl(args...)
		if err == nil || out != "" {
			t.Errorf("%v: err %v, output %q; want an error and nothing printed", args, err, out)
		} else {
			t.Logf("%v: %v", args, err)
		}
	}
}

// viewer makes the plugin run as a user bound only to deploy/'s read-only
// ClusterRole shardsched-viewer (created for the test under a unique name).
func (ev *env) viewer() {
	ev.t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "rbac.yaml"))
	if err != nil {
		ev.t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err == nil && r.Kind == "ClusterRole" && r.Name == "shardsched-viewer" {
			role = &r
		}
	}
	if role == nil {
		ev.t.Fatal("no ClusterRole shardsched-viewer in deploy/base/rbac.yaml")
	}
	role.Name = "shardsched-viewer-" + ev.ns
	user := "viewer-" + ev.ns
	// Before the binding, the plugin (impersonating the user) is refused.
	ev.asUser = user
	if _, err := ev.kubectl("queues"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		ev.t.Fatalf("queues as %s before any binding: %v, want forbidden", user, err)
	}
	if _, err := ev.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := ev.cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		ev.t.Fatal(err)
	}
	ev.t.Cleanup(func() {
		_ = ev.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		_ = ev.cs.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	// The authorizer learns of the binding through an informer.
	ev.lcEventually("the viewer may list queues", 30*time.Second, func() (bool, string) {
		_, err := ev.kubectl("queues")
		return err == nil, fmt.Sprint(err)
	})
	if _, err := ev.kubectl("explain", "pod", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		ev.t.Fatalf("as the viewer, explain of a missing pod: %v (want not found, not forbidden)", err)
	}
}
