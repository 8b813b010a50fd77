#!/usr/bin/env bash
# Builds the local control plane once from the Go module proxy and caches it
# outside the repository, keyed by version:
#   $CACHE/k8s-v1.36.3/{kube-apiserver,kube-controller-manager,kubectl}
#   $CACHE/k8s-v1.36.3/kube-scheduler (only with the kube-scheduler target:
#     the benchmark compares against it, tests do not need it)
#   $CACHE/etcd-v3.6.16/etcd
#   $CACHE/kwok-v0.8.0/{kwok,stages/*.yaml}
#   $CACHE/training-operator-v1.8.1/{training-operator.v1,crds/*.yaml}
#     (Kubeflow's operator, run by the compatibility tests and `make run`)
#   $CACHE/helm-v3.21.4/helm (lints and renders charts/shardsched in the tests)
# where CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/shardsched.
# Prints the bin directory (the layout testenv expects) on the last line.
# Usage: hack/controlplane.sh [all|k8s|etcd|kwok|training-operator|helm|kube-scheduler]
set -euo pipefail

K8S_VERSION=v1.36.3
K8S_STAGING_VERSION=v0.36.3
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
TRAINING_OPERATOR_VERSION=v1.8.1
HELM_VERSION=v3.21.4
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/shardsched"
# One set of build flags everywhere: -trimpath changes Go's cache keys.
BUILD_FLAGS=(-trimpath)

log() { printf '[controlplane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# run_with_progress LABEL CMD...: runs CMD, printing a heartbeat every 30 s.
run_with_progress() {
  local label=$1; shift
  local start=$SECONDS
  "$@" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && log "$label: still building ($((SECONDS - start)) s)"
  done
  wait "$pid"
  log "$label: done in $((SECONDS - start)) s"
}

K8S_OUT="$CACHE/k8s-$K8S_VERSION"

# write_k8s_module: writes the throwaway module that builds Kubernetes
# commands into the current directory and resolves its modules.
write_k8s_module() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes replaces its staging modules with local paths, so it
  # cannot be required as is. Reuse its go.mod (so every dependency keeps the
  # version Kubernetes was released with) and point each staging module at
  # its published version instead.
  sed -e 's#^module .*#module shardsched.local/k8sbuild#' \
      -e "s#^\([[:space:]]*\)\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*#\1\2 => \2 $K8S_STAGING_VERSION#" \
      -e '/^tool /d' \
      "$gomod" > go.mod
  printf '\nrequire k8s.io/kubernetes %s\n' "$K8S_VERSION" >> go.mod
  # kube-scheduler is not listed: the controller-manager already needs every
  # module it imports (go list -mod=readonly -deps agrees), so the module is
  # the same whichever commands are built from it.
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving modules"
  go mod tidy
}

# build_k8s_cmds CMD...: builds each k8s.io/kubernetes/cmd/CMD that is not
# yet in $K8S_OUT. A cached binary is never rebuilt.
build_k8s_cmds() {
  local missing=() cmd
  for cmd in "$@"; do
    [[ -x "$K8S_OUT/$cmd" ]] || missing+=("$cmd")
  done
  ((${#missing[@]})) || return 0
  log "building ${missing[*]} $K8S_VERSION (about 20 min cold on 2 cores for the control plane, a few more for kube-scheduler)"
  local work="$CACHE/build/k8s-$K8S_VERSION"
  mkdir -p "$work" "$K8S_OUT"
  (
    cd "$work"
    write_k8s_module
    local major minor pkg=k8s.io/component-base/version
    major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
    minor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
    local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.gitCommit=0000000000000000000000000000000000000000 -X $pkg.buildDate=1970-01-01T00:00:00Z"
    for cmd in "${missing[@]}"; do
      run_with_progress "$cmd" go build "${BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$K8S_OUT/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
      mv "$K8S_OUT/$cmd.tmp" "$K8S_OUT/$cmd"
    done
  )
}

build_k8s() { build_k8s_cmds kube-apiserver kube-controller-manager kubectl; }

# kube-scheduler is only for the benchmark (make bench-tools), not for `all`.
build_kube_scheduler() { build_k8s_cmds kube-scheduler; }

build_etcd() {
  local out="$CACHE/etcd-$ETCD_VERSION"
  [[ -x "$out/etcd" ]] && return
  log "building etcd $ETCD_VERSION"
  local work="$CACHE/build/etcd-$ETCD_VERSION"
  mkdir -p "$work" "$out"
  (
    cd "$work"
    # go install refuses etcd's main module (it has replace directives), so
    # build the server as a dependency of a tiny wrapper.
    cat > go.mod <<MOD
module shardsched.local/etcdbuild

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go mod tidy
    run_with_progress etcd go build "${BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$out/etcd.tmp" .
    mv "$out/etcd.tmp" "$out/etcd"
  )
}

build_kwok() {
  local out="$CACHE/kwok-$KWOK_VERSION"
  [[ -x "$out/kwok" && -d "$out/stages" ]] && return
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out"
  run_with_progress kwok env GOBIN="$out" go install "${BUILD_FLAGS[@]}" -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/stages.tmp"
  # Node initialize and pod ready/complete/delete; no node heartbeat (it costs
  # about a core at 1,000 nodes here).
  cp "$dir/kustomize/stage/node/fast/node-initialize.yaml" "$out/stages.tmp/"
  cp "$dir"/kustomize/stage/pod/fast/pod-*.yaml "$out/stages.tmp/"
  chmod -R u+w "$out/stages.tmp"
  rm -rf "$out/stages" && mv "$out/stages.tmp" "$out/stages"
}

build_training_operator() {
  local out="$CACHE/training-operator-$TRAINING_OPERATOR_VERSION"
  [[ -x "$out/training-operator.v1" && -d "$out/crds" ]] && return
  log "building Kubeflow training-operator $TRAINING_OPERATOR_VERSION"
  mkdir -p "$out"
  local mod=github.com/kubeflow/training-operator
  # Its go.mod has no replace directives, so go install builds it as
  # released, with the dependency versions it was released with.
  run_with_progress training-operator env GOBIN="$out" go install "${BUILD_FLAGS[@]}" -ldflags "-s -w" "$mod/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION"
  local dir
  dir=$(go mod download -json "$mod@$TRAINING_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/crds.tmp"
  cp "$dir"/manifests/base/crds/kubeflow.org_*.yaml "$out/crds.tmp/"
  chmod -R u+w "$out/crds.tmp"
  rm -rf "$out/crds" && mv "$out/crds.tmp" "$out/crds"
}

build_helm() {
  local out="$CACHE/helm-$HELM_VERSION"
  [[ -x "$out/helm" ]] && return
  log "building helm $HELM_VERSION"
  mkdir -p "$out"
  # Its go.mod has no replace directives: go install builds it as released.
  run_with_progress helm env GOBIN="$out" go install "${BUILD_FLAGS[@]}" -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

what=${1:-all}
case "$what" in
  all) build_etcd; build_kwok; build_training_operator; build_helm; build_k8s ;;
  k8s) build_k8s ;;
  etcd) build_etcd ;;
  kwok) build_kwok ;;
  training-operator) build_training_operator ;;
  helm) build_helm ;;
  kube-scheduler) build_kube_scheduler ;;
  *) echo "usage: $0 [all|k8s|etcd|kwok|training-operator|helm|kube-scheduler]" >&2; exit 2 ;;
esac
echo "$CACHE"
