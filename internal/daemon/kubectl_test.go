package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/shardsched/shardsched/internal/ctl"
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
	cmd := ctl.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", path, "-n", ev.ns, "--scheduler-name", schedName}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	ev := newEnv(t)
	ctx := context.Background()
	ev.nodes("kc-node", 2, "4", "16Gi")
	ev.queue("kc-parent", "root", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")})
	ev.queue("kc-a", "kc-parent", nil)
	ev.queue("kc-b", "kc-parent", nil)
	ev.podGroup("hold", "kc-a", 3)
	for _, p := range []string{"hold-0", "hold-1", "hold-2"} {
		ev.pod(p, "hold", "1", "1Gi", nil)
	}
	ev.eventually("the holder's 3 pods are bound", 30*time.Second, func() bool { return ev.boundCount("hold", 3) == 3 })
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

	for _, p := range []string{"hold-0", "hold-1", "hold-2"} {
		if err := ev.cs.CoreV1().Pods(ev.ns).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	ev.eventually("the gang is bound once the holder is gone", 30*time.Second, func() bool { return ev.boundCount("wait", 2) == 2 })
	out, err = ev.kubectl("explain", "pod", "wait-1")
	if err != nil || !strings.Contains(out, "bound to node kc-node-") {
		t.Errorf("explain pod wait-1 after binding: err %v\n%s", err, out)
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
