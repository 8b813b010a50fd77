package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/shardsched/shardsched/deploy"
	"github.com/shardsched/shardsched/internal/cluster"
)

// ControlPlane is the real control plane of one test package.
type ControlPlane struct {
	*cluster.ControlPlane
	// Missing explains why the binaries were not found (then ControlPlane is nil).
	Missing error
}

// Options say which optional components a test package needs.
type Options struct {
	ControllerManager bool
	Kwok              bool
}

// InCI reports whether the tests run in CI, where a missing control plane is
// a failure, not a skip.
func InCI() bool { return os.Getenv("CI") != "" && os.Getenv("CI") != "false" }

// Main is called from a package's TestMain. It starts one control plane with
// the CRDs installed, runs the tests, and stops it. When the binaries are
// missing, tests that need them skip (outside CI) or the package fails (CI).
func Main(m *testing.M, opts Options, out *ControlPlane) int {
	if _, err := cluster.FindBinaries(); err != nil {
		if InCI() {
			fmt.Fprintf(os.Stderr, "testenv: CI is set and the control plane is missing: %v\n", err)
			return 1
		}
		out.Missing = err
		return m.Run()
	}
	crds, err := deploy.CRDs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cp, err := cluster.Start(ctx, cluster.Config{ControllerManager: opts.ControllerManager, Kwok: opts.Kwok, CRDs: crds})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: start control plane: %v\n", err)
		return 1
	}
	out.ControlPlane = cp
	code := m.Run()
	cp.Stop()
	return code
}

// Require returns the REST config of the package's control plane, or skips
// the test when the binaries are missing outside CI.
func (c *ControlPlane) Require(t testing.TB) *rest.Config {
	t.Helper()
	if c.ControlPlane == nil {
		if c.Missing != nil {
			t.Skipf("control plane not built: %v", c.Missing)
		}
		t.Fatalf("control plane not started: call testenv.Main from TestMain")
	}
	if err := c.Check(); err != nil {
		t.Fatalf("control plane died: %v", err)
	}
	return c.RESTConfig()
}
