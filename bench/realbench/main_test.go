package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/shardsched/shardsched/bench/report"
	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// cp is set once by TestMain and only read afterwards.
var cp testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Kwok: true}, &cp))
}

// The short version of `realbench -modes faults`: every scenario once, on
// 20 kwok nodes, against the real control plane and shard processes built
// from cmd/shardsched; each must end with no invariant broken (computed
// from the API server and etcd) and with every pod that fits bound.
func TestFaultScenarios(t *testing.T) {
	cfg := cp.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := uniformShape().nodes("faults-node", 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateNodes(ctx, cs, nodes, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	bin, cleanup, err := shardschedBinary(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	env := &benchEnv{rest: cfg, cs: cs, kubeconfig: cp.Kubeconfig, dir: t.TempDir()}
	fo := faultOptions{seeds: 1, firstSeed: 1, stream: 6 * time.Second, timeout: time.Minute}
	var runs []report.Run
	if err := runFaults(ctx, fo, env, bin, func(r report.Run) error { runs = append(runs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(scenarioNames()) {
		t.Fatalf("%d scenarios reported, want %d", len(runs), len(scenarioNames()))
	}
	for _, r := range runs {
		if r.Pods == 0 {
			t.Errorf("%s: no pod bound", r.Name)
		}
		if r.Failed() {
			t.Errorf("%s broke an invariant: %v\n%s", r.Name, r.Invariants, strings.Join(r.Notes, "\n"))
		}
	}
}

// -apiserver-cpuprofile-seconds: the real kube-apiserver answers the
// harness's client with a profile (gzipped, as pprof writes it), and a
// failed fetch is a note, not a failed run.
func TestAPIServerProfile(t *testing.T) {
	cfg := cp.Require(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "api.pb.gz")
	note := fetchAPIServerProfile(context.Background(), cs, 1, path)
	if !strings.Contains(note, "CPU profile of the run's first 1 s in "+path) {
		t.Fatalf("note %q, want the profile's path", note)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("%d bytes, not a gzipped profile", len(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if note := fetchAPIServerProfile(ctx, cs, 1, filepath.Join(t.TempDir(), "none.pb.gz")); !strings.Contains(note, "kube-apiserver: no CPU profile") {
		t.Errorf("cancelled fetch: note %q, want no profile", note)
	}
}
