# shardsched: a sharded multi-scheduler for very large Kubernetes clusters.
# The two entry points are `make run` and `make test`; everything they need
# is built from the Go module proxy and cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/shardsched.

GO       ?= go
BIN      := bin
# VERSION tags the shard's image; deploy/ names the same tag (deploy_test.go
# checks that they agree).
VERSION  := 0.1.0
RUN_ARGS ?=
TEST_TIMEOUT ?= 30m

.PHONY: run build image test vet controlplane bench-tools bench bench-full bench-scale generate verify-generated clean

## run: build, bring up the local cluster (etcd, kube-apiserver, controller-manager, kwok nodes, 3 shard processes, demo queues and jobs); Ctrl-C stops it
run: controlplane
	$(MAKE) build
	exec $(BIN)/shardsched-local $(RUN_ARGS)

## build: the shard, the local cluster and the kubectl plugin into $(BIN) (each says its commit with --version)
build:
	$(GO) build -buildvcs=auto -o $(BIN)/shardsched-local ./cmd/shardsched-local
	$(GO) build -buildvcs=auto -o $(BIN)/shardsched ./cmd/shardsched
	$(GO) build -buildvcs=auto -o $(BIN)/kubectl-shardsched ./cmd/kubectl-shardsched

## image: the shard's OCI image, built here from the project's files with no registry or daemon: a static binary
## as the only file, non-root, reproducible (same digest twice); written as an OCI layout in $(BIN)/shardsched-image.
## Push with: skopeo copy oci:$(BIN)/shardsched-image:$(VERSION) docker://REGISTRY/shardsched:$(VERSION)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -buildvcs=auto -ldflags="-s -w" -o $(BIN)/image/shardsched ./cmd/shardsched
	cd hack/tools && $(GO) run ./image -binary ../../$(BIN)/image/shardsched -out ../../$(BIN)/shardsched-image \
		-tag $(VERSION) -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
		-created "$$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"

## test: go vet + every test with the race detector, against the real control plane (and the image's test)
test: controlplane vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd hack/tools && $(GO) test -count=1 ./image

vet:
	$(GO) vet ./...

## controlplane: build and cache etcd, kube-apiserver, kube-controller-manager, kubectl, kwok (once)
controlplane:
	@hack/controlplane.sh all >/dev/null

BENCH_OUT ?= bench/out

## bench: the quick tier, in minutes: real mode (200 kwok nodes, 2,000 pods: binder, one shardsched OS process,
## kube-scheduler) and simulated mode (10k cores: churn, burst, chaos and reclaim with 1, 2 and 4 shards); report in
## $(BENCH_OUT)/report.md. The shards run as processes of their own (shardsched-proc-N), so that their CPU is their
## own, as kube-scheduler's is: an in-process shardsched-N's includes the harness's.
bench: bench-tools
	$(GO) run ./bench/realbench -nodes 200 -pods 2000 -warmup 500 -systems binder,shardsched-proc-1,kube-scheduler,kube-scheduler-qps -modes stream -out $(BENCH_OUT)/real
	$(GO) run ./bench/simbench -tier 10k -scenarios churn,burst,chaos,reclaim -shards 1,2,4 -include $(BENCH_OUT)/real/report.json -out $(BENCH_OUT)

## bench-full: the rest: real mode at 1,000 nodes × 64 CPU with 10,000 pods (stream and backlog), the fault scenarios
## (realbench -modes faults, 20 seeds each, 200 nodes: about an hour), simulated churn and burst at 100k cores with
## 1, 2, 4 and 8 shards (30 simulated minutes each), reclaim at 100k, 1M cores with 8 shards, chaos at 100k
bench-full: bench-tools
	$(GO) run ./bench/realbench -nodes 1000 -pods 10000 -modes stream,backlog \
		-systems binder,shardsched-proc-1,shardsched-proc-3,kube-scheduler,kube-scheduler-qps -out $(BENCH_OUT)/full/real
	$(GO) run ./bench/realbench -nodes 200 -warmup 0 -modes faults -fault-seeds 20 -out $(BENCH_OUT)/full/faults
	$(GO) run ./bench/simbench -tier 100k -scenarios churn,burst,chaos,reclaim -chaos-tier 100k -chaos-minutes 3 -shards 1,2,4,8 \
		-include $(BENCH_OUT)/full/real/report.json,$(BENCH_OUT)/full/faults/report.json -out $(BENCH_OUT)/full/sim100k
	$(GO) run ./bench/simbench -tier 1M -scenarios churn -shards 8 -include $(BENCH_OUT)/full/sim100k/report.json -out $(BENCH_OUT)/full

## bench-scale: real mode at 5,000 kwok nodes: 20,000 pods of the churn workload's job mix (gangs, queues), the binder
## against 1 and 3 shardsched OS processes (CPU and peak RSS per process; a shard restarted three times at that size, each
## timed to ready, beside kube-scheduler's cold start against the same cluster); then the start-up at 1M cores of one
## shard process and of eight (16,000 kwok nodes × 64 CPU, 250,000 pods created bound: first start and two restarts
## against kube-scheduler's cold start, CPU and peak RSS per process; on 2 cores about half an hour for one process and
## an hour for eight; kube-apiserver with --request-timeout 10m, as a cluster whose pod list takes minutes needs)
bench-scale: bench-tools
	$(GO) run ./bench/realbench -nodes 5000 -pods 20000 -warmup 0 -workload bench/workloads/churn.yaml -tier 100k \
		-systems binder,shardsched-proc-1,shardsched-proc-3 -modes stream -timeout 20m -restarts 3 -out $(BENCH_OUT)/scale
	$(GO) run ./bench/realbench -nodes 16000 -pods 250000 -groups 2500 -warmup 0 -modes restart \
		-systems shardsched-proc-1,shardsched-proc-8 -restarts 2 -quiet-max 10m -apiserver-request-timeout 10m \
		-out $(BENCH_OUT)/scale-1m

## bench-tools: the control plane plus kube-scheduler, which bench/realbench compares against (once; a few minutes more when cold)
bench-tools:
	@hack/controlplane.sh all >/dev/null
	@hack/controlplane.sh kube-scheduler >/dev/null

## generate: regenerate the Volcano-compatible CRDs from volcano.sh/apis with controller-gen (deploy/crds and the chart's crds/)
generate:
	cd hack/tools && $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen \
		crd:allowDangerousTypes=true paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 output:crd:dir=../../deploy/crds
	cp deploy/crds/*.yaml charts/shardsched/crds/

## verify-generated: fail when deploy/crds is stale or go.mod is not tidy
verify-generated: generate
	$(GO) mod tidy
	git diff --exit-code -- deploy/crds charts/shardsched/crds go.mod go.sum hack/tools/go.mod hack/tools/go.sum || { echo "generated files or go.mod are stale: run make generate && go mod tidy" >&2; exit 1; }

clean:
	rm -rf $(BIN)
