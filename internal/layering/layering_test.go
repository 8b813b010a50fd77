package layering

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shardsched/shardsched"

// rule says what one package must not depend on, directly or not: our
// packages by path below the module (allowed lists them when only those
// are allowed), outside ones by path prefix.
type rule struct {
	pkg string // below the module, e.g. "scheduler"
	// allowed, when set, are the only packages of ours it may depend on
	// (itself aside).
	allowed []string
	// forbidden are our packages it must not depend on.
	forbidden []string
	// outside are path prefixes of other modules it must not depend on.
	outside []string
	why     string
}

// rules are the layers, as the README's layout table draws them.
func rules() []rule {
	clientGo := []string{"k8s.io/client-go/"}
	etcdGossip := []string{"go.etcd.io/", "github.com/hashicorp/memberlist", "google.golang.org/grpc"}
	return []rule{
		{pkg: "api", allowed: []string{}, outside: append(slices.Clone(clientGo), etcdGossip...),
			why: "the model: imports nothing of ours"},
		{pkg: "wire", allowed: []string{"api"}, outside: append(slices.Clone(clientGo), etcdGossip...),
			why: "the values crossing the scheduler's ports: only api"},
		{pkg: "placement", allowed: []string{"api"}, outside: append(slices.Clone(clientGo), etcdGossip...),
			why: "a pure function of tasks and nodes"},
		{pkg: "cache", allowed: []string{"api"}, outside: append(slices.Clone(clientGo), etcdGossip...),
			why: "books fed through its methods, not by informers"},
		{pkg: "scheduler", allowed: []string{"api", "wire", "cache", "placement"}, outside: append(slices.Clone(clientGo), etcdGossip...),
			why: "the scheduling core depends on ports, not on etcd, memberlist or the API server"},
		{pkg: "status", allowed: []string{"api"}, outside: clientGo,
			why: "writes through its Writer port"},
		{pkg: "coordinator", forbidden: []string{"shard", "cache", "scheduler", "status", "placement"}, outside: clientGo,
			why: "the quota ledger and its server: neither shards nor caches"},
		{pkg: "shard", forbidden: []string{"coordinator", "cache", "scheduler", "status", "placement"}, outside: clientGo,
			why: "membership and ownership: nothing of scheduling"},
		{pkg: "cmd/shardsched", forbidden: []string{"internal/ctl/cli"}, outside: []string{"k8s.io/cli-runtime/", "github.com/spf13/cobra", "sigs.k8s.io/kustomize/"},
			why: "the daemon links the kubectl plugin's views, not its command-line machinery"},
	}
}

// check returns what breaks r, given the packages pkg depends on (deps:
// full import paths, as `go list -deps` prints them).
func check(r rule, deps []string) []string {
	var bad []string
	self := module + "/" + r.pkg
	for _, d := range deps {
		if d == self {
			continue
		}
		if ours, ok := strings.CutPrefix(d, module+"/"); ok {
			if r.allowed != nil && !slices.Contains(r.allowed, ours) {
				bad = append(bad, fmt.Sprintf("%s depends on %s (only %v allowed)", r.pkg, ours, r.allowed))
			}
			if slices.Contains(r.forbidden, ours) {
				bad = append(bad, fmt.Sprintf("%s depends on %s", r.pkg, ours))
			}
			continue
		}
		for _, o := range r.outside {
			if strings.HasPrefix(d, o) {
				bad = append(bad, fmt.Sprintf("%s depends on %s", r.pkg, d))
				break
			}
		}
	}
	return bad
}

// TestLayers lists each core package's dependencies with the go command
// and checks them against its rule.
func TestLayers(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	for _, r := range rules() {
		out, err := exec.Command(goBin, "list", "-deps", module+"/"+r.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", r.pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 || !slices.Contains(deps, module+"/"+r.pkg) {
			t.Fatalf("go list -deps %s listed %d packages, not the package itself", r.pkg, len(deps))
		}
		for _, b := range check(r, deps) {
			t.Errorf("%s (%s)", b, r.why)
		}
	}
}

// The check reports a broken layer: the scheduler linking etcd and the
// shard package, the API importing a package of ours, the coordinator
// importing the cache, the daemon linking the kubectl plugin's command
// tree; and passes what is allowed.
func TestCheckReportsBrokenLayers(t *testing.T) {
	byPkg := map[string]rule{}
	for _, r := range rules() {
		byPkg[r.pkg] = r
	}
	cases := []struct {
		pkg  string
		deps []string
		want int
	}{
		{"scheduler", []string{module + "/scheduler", module + "/api", module + "/cache", "go.etcd.io/etcd/client/v3", module + "/shard"}, 2},
		{"scheduler", []string{module + "/scheduler", module + "/api", module + "/wire", module + "/placement", "github.com/prometheus/client_golang/prometheus"}, 0},
		{"api", []string{module + "/api", module + "/wire"}, 1},
		{"coordinator", []string{module + "/coordinator", module + "/api", module + "/cache", "go.etcd.io/etcd/client/v3"}, 1},
		{"shard", []string{module + "/shard", "k8s.io/client-go/kubernetes"}, 1},
		{"cmd/shardsched", []string{module + "/cmd/shardsched", module + "/internal/ctl", module + "/internal/ctl/cli", "github.com/spf13/cobra", "k8s.io/cli-runtime/pkg/genericclioptions"}, 3},
		{"cmd/shardsched", []string{module + "/cmd/shardsched", module + "/internal/ctl", "k8s.io/client-go/kubernetes"}, 0},
	}
	for _, c := range cases {
		if got := check(byPkg[c.pkg], c.deps); len(got) != c.want {
			t.Errorf("%s with %v: %d problems %v, want %d", c.pkg, c.deps, len(got), got, c.want)
		}
	}
}
