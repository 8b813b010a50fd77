# shardsched: a sharded multi-scheduler for very large Kubernetes clusters.
# The two entry points are `make run` and `make test`; everything they need
# is built from the Go module proxy and cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/shardsched.

GO       ?= go
BIN      := bin
RUN_ARGS ?=
TEST_TIMEOUT ?= 30m

.PHONY: run test vet controlplane bench-tools generate verify-generated bench-coordinator clean

## run: build, bring up the local cluster (etcd, kube-apiserver, controller-manager, kwok nodes, 3 shard processes, demo queues and jobs); Ctrl-C stops it
run: controlplane
	$(GO) build -o $(BIN)/shardsched-local ./cmd/shardsched-local
	$(GO) build -o $(BIN)/shardsched ./cmd/shardsched
	exec $(BIN)/shardsched-local $(RUN_ARGS)

## test: go vet + every test with the race detector, against the real control plane
test: controlplane vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

vet:
	$(GO) vet ./...

## controlplane: build and cache etcd, kube-apiserver, kube-controller-manager, kubectl, kwok (once)
controlplane:
	@hack/controlplane.sh all >/dev/null

## bench-tools: the control plane plus kube-scheduler, which bench/realbench compares against (once; a few minutes more when cold)
bench-tools:
	@hack/controlplane.sh all >/dev/null
	@hack/controlplane.sh kube-scheduler >/dev/null

## generate: regenerate the Volcano-compatible CRDs from volcano.sh/apis with controller-gen
generate:
	cd hack/tools && $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen \
		crd:allowDangerousTypes=true paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 output:crd:dir=../../deploy/crds

## verify-generated: fail when deploy/crds is stale or go.mod is not tidy
verify-generated: generate
	$(GO) mod tidy
	git diff --exit-code -- deploy/crds go.mod go.sum || { echo "generated files or go.mod are stale: run make generate && go mod tidy" >&2; exit 1; }

clean:
	rm -rf $(BIN)
