// Package cluster runs a real local control plane from binaries built by
// hack/controlplane.sh: etcd 3.6, kube-apiserver, kube-controller-manager
// (workload controllers only) and kwok for fake nodes. It is used by the
// test environment and by `make run`. Every process it starts runs in its own
// process group, dies with its parent (Pdeathsig) and is stopped by Stop.
package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the control plane; hack/controlplane.sh builds the same ones.
const (
	KubeVersion = "v1.36.3"
	EtcdVersion = "v3.6.16"
	KwokVersion = "v0.8.0"
)

// Binaries locates the cached control-plane binaries.
type Binaries struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kubectl               string
	Kwok                  string
	KwokStages            string // directory of kwok Stage manifests
}

// CacheDir is ${SHARDSCHED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardsched}.
func CacheDir() string {
	if d := os.Getenv("SHARDSCHED_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "shardsched")
}

// FindBinaries returns the cached binaries, or an error naming the first one
// missing and the command that builds it.
func FindBinaries() (Binaries, error) {
	c := CacheDir()
	k8s := filepath.Join(c, "k8s-"+KubeVersion)
	b := Binaries{
		Etcd:                  filepath.Join(c, "etcd-"+EtcdVersion, "etcd"),
		KubeAPIServer:         filepath.Join(k8s, "kube-apiserver"),
		KubeControllerManager: filepath.Join(k8s, "kube-controller-manager"),
		Kubectl:               filepath.Join(k8s, "kubectl"),
		Kwok:                  filepath.Join(c, "kwok-"+KwokVersion, "kwok"),
		KwokStages:            filepath.Join(c, "kwok-"+KwokVersion, "stages"),
	}
	for _, p := range []string{b.Etcd, b.KubeAPIServer, b.KubeControllerManager, b.Kubectl, b.Kwok, b.KwokStages} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("control plane binary %s is missing (run `make controlplane` or hack/controlplane.sh): %w", p, err)
		}
	}
	return b, nil
}

// HelmVersion is the helm hack/controlplane.sh builds; the chart's tests
// lint and render charts/shardsched with it.
const HelmVersion = "v3.21.4"

// FindHelm returns the cached helm binary, or an error naming the command
// that builds it.
func FindHelm() (string, error) {
	p := filepath.Join(CacheDir(), "helm-"+HelmVersion, "helm")
	if _, err := os.Stat(p); err != nil {
		return p, fmt.Errorf("helm %s is missing (run `make controlplane` or hack/controlplane.sh helm): %w", p, err)
	}
	return p, nil
}
