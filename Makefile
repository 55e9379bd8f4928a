# SandboxPool. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
export CGO_ENABLED ?= 0

# Pinned tool versions. The versions are part of the tools directories' names, so changing
# one builds a fresh set beside the old instead of mixing them.
KUBE_VERSION := v1.37.2
ETCD_VERSION := v3.7.3
CUE_VERSION  := $(shell awk '$$1=="cuelang.org/go"{print $$2}' go.mod)
STAGING_VERSION := v0.$(patsubst v1.%,%,$(KUBE_VERSION))

TOOLS_DIR   ?= $(CURDIR)/.tools
CONTROLPLANE := $(TOOLS_DIR)/controlplane-k8s$(KUBE_VERSION:v%=%)-etcd$(ETCD_VERSION:v%=%)
OPA_VERSION  := $(shell awk '$$1=="github.com/open-policy-agent/opa"{print $$2}' go.mod)
CLI_TOOLS    := $(TOOLS_DIR)/cli-cue$(CUE_VERSION:v%=%)-k8s$(STAGING_VERSION:v%=%)-opa$(OPA_VERSION:v%=%)

KUBE_APISERVER := $(CONTROLPLANE)/kube-apiserver
KUBECTL        := $(CONTROLPLANE)/kubectl
KUBELET        := $(CONTROLPLANE)/kubelet
KUBE_CONTROLLER_MANAGER := $(CONTROLPLANE)/kube-controller-manager
KUBE_SCHEDULER := $(CONTROLPLANE)/kube-scheduler
KUBE_PROXY     := $(CONTROLPLANE)/kube-proxy
ETCD           := $(CONTROLPLANE)/etcd
CUE            := $(CLI_TOOLS)/cue
# golangci-lint, in its own tools module (hack/lint): its dependencies stay out of the others'.
GOLANGCI_LINT_VERSION := $(shell awk '$$1=="github.com/golangci/golangci-lint/v2"{print $$2}' hack/lint/go.mod)
GOLANGCI_LINT  := $(TOOLS_DIR)/lint-golangci$(GOLANGCI_LINT_VERSION:v%=%)/golangci-lint
# kube-api-linter's analyzers in our small driver (hack/kal), in its own tools module: make
# lint runs them on the API types with hack/kal/kal.yaml (the linters, their settings and the
# exceptions). The driver's own sources are part of the directory's name (a hash), so a
# change to the driver builds beside the old one.
KAL_VERSION     := $(shell awk '$$1=="sigs.k8s.io/kube-api-linter"{print $$2}' hack/kal/go.mod)
KAL_DRIVER      := $(shell cat hack/kal/*.go | sha256sum | cut -c1-8)
KUBE_API_LINTER := $(TOOLS_DIR)/kal-$(KAL_VERSION:v%=%)-$(KAL_DRIVER)/kube-api-linter
DEEPCOPY_GEN   := $(CLI_TOOLS)/deepcopy-gen
OPA            := $(CLI_TOOLS)/opa

# containerd for the placeholder shim's tests: the same release as the shim library in
# go.mod (make verify checks hack/containerd/go.mod agrees), plus ctr, the runc shim (for
# side-by-side figures) and crictl.
CONTAINERD_VERSION := $(shell awk '$$1=="github.com/containerd/containerd/v2"{print $$2}' go.mod)
CRICTL_VERSION     := $(shell awk '$$1=="sigs.k8s.io/cri-tools"{print $$2}' hack/containerd/go.mod)
CONTAINERD_TOOLS   := $(TOOLS_DIR)/containerd$(CONTAINERD_VERSION:v%=%)-crictl$(CRICTL_VERSION:v%=%)
CONTAINERD_BINS    := $(addprefix $(CONTAINERD_TOOLS)/,containerd ctr containerd-shim-runc-v2 crictl)

# Protobuf/TTRPC code generation (agent/shimapi): the plugins at the versions of the
# libraries in go.mod (make verify checks hack/tools/go.mod agrees), driven by minprotoc.
PROTOBUF_VERSION := $(shell awk '$$1=="google.golang.org/protobuf"{print $$2}' go.mod)
TTRPC_VERSION    := $(shell awk '$$1=="github.com/containerd/ttrpc"{print $$2}' go.mod)
PROTO_TOOLS      := $(TOOLS_DIR)/proto-protobuf$(PROTOBUF_VERSION:v%=%)-ttrpc$(TTRPC_VERSION:v%=%)
MINPROTOC           := $(PROTO_TOOLS)/minprotoc
PROTOC_GEN_GO       := $(PROTO_TOOLS)/protoc-gen-go
PROTOC_GEN_GO_TTRPC := $(PROTO_TOOLS)/protoc-gen-go-ttrpc

# Monitoring (tests/deploy): promtool checks and unit-tests deploy/monitoring's rules, and
# the prometheus-operator CRDs (PrometheusRule, PodMonitor) that deploy/monitoring is
# applied against, copied from that module as the Go module proxy serves it.
PROMETHEUS_VERSION          := $(shell awk '$$1=="github.com/prometheus/prometheus"{print $$2}' hack/monitoring/go.mod)
PROMETHEUS_OPERATOR_VERSION := v0.85.0
MONITORING_TOOLS := $(TOOLS_DIR)/monitoring-prometheus$(PROMETHEUS_VERSION:v%=%)-operator$(PROMETHEUS_OPERATOR_VERSION:v%=%)
PROMTOOL         := $(MONITORING_TOOLS)/promtool
MONITORING_CRDS  := $(addprefix $(MONITORING_TOOLS)/crds/monitoring.coreos.com_,prometheusrules.yaml podmonitors.yaml)

KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)

GO_TEST_FLAGS ?= -count=1 -timeout 30m
TEST_ENV = KUBEBUILDER_ASSETS=$(CONTROLPLANE) SANDBOXPOOL_CUE=$(CUE) SANDBOXPOOL_REQUIRE_TOOLS=1 \
	SANDBOXPOOL_CONTAINERD=$(CONTAINERD_TOOLS) SANDBOXPOOL_MONITORING=$(MONITORING_TOOLS) \
	SANDBOXPOOL_IMAGES=$(abspath $(IMAGES_DIR)) SANDBOXPOOL_IMAGES_B=$(abspath $(IMAGES_B_DIR))

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
		/^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-24s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(DEEPCOPY_GEN) $(MINPROTOC) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_TTRPC) ## Regenerate the CRDs and the Go types' field docs (from schema/*.cue), the Go deepcopy code and the shim API.
	$(GO) run ./hack/crdgen -out deploy/crds -go-types schema/v1alpha1/types.go
	$(DEEPCOPY_GEN) --output-file zz_generated.deepcopy.go \
		--go-header-file hack/boilerplate.go.txt ./schema/v1alpha1
	$(MINPROTOC) -I . --plugin=protoc-gen-go=$(PROTOC_GEN_GO) --plugin=protoc-gen-go-ttrpc=$(PROTOC_GEN_GO_TTRPC) \
		--go_out=. --go_opt=paths=source_relative --go-ttrpc_out=. --go-ttrpc_opt=paths=source_relative \
		agent/shimapi/v1/shimapi.proto

.PHONY: verify
verify: generate lint ## Regenerate and fail on any drift; check formatting, vet, lint and tool pins.
	@drift=$$(git status --porcelain -- deploy/crds schema/v1alpha1 agent/shimapi); \
	if [ -n "$$drift" ]; then \
		echo "Generated files differ from the committed ones (run make generate and commit):"; \
		echo "$$drift"; git --no-pager diff --stat -- deploy/crds schema/v1alpha1 agent/shimapi; exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	@for m in cuelang.org/go github.com/open-policy-agent/opa google.golang.org/protobuf github.com/containerd/ttrpc; do \
		lib=$$(awk -v m=$$m '$$1==m && $$2 ~ /^v/ {print $$2}' go.mod); \
		cli=$$(awk -v m=$$m '$$1==m && $$2 ~ /^v/ {print $$2}' hack/tools/go.mod); \
		if [ "$$lib" != "$$cli" ]; then echo "$$m: CLI $$cli (hack/tools/go.mod) and library $$lib (go.mod) differ"; exit 1; fi; done
	@lib=$$(awk '$$1=="github.com/containerd/containerd/v2" && $$2 ~ /^v/ {print $$2}' go.mod); \
	bin=$$(awk '$$1=="github.com/containerd/containerd/v2" && $$2 ~ /^v/ {print $$2}' hack/containerd/go.mod); \
	if [ "$$lib" != "$$bin" ]; then echo "containerd: tools $$bin (hack/containerd/go.mod) and shim library $$lib (go.mod) differ"; exit 1; fi

.PHONY: lint
lint: $(GOLANGCI_LINT) $(KUBE_API_LINTER) ## Run the pinned golangci-lint with .golangci.yml, and kube-api-linter on the API types with hack/kal/kal.yaml (part of make verify).
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	$(KUBE_API_LINTER) -config hack/kal/kal.yaml ./schema/v1alpha1

.PHONY: cue-vet
cue-vet: $(CUE) ## Vet every example with the pinned cue CLI, as users do.
	@for f in examples/*.yaml; do \
		kind=$$(awk '$$1=="kind:"{print $$2; exit}' $$f); \
		echo "cue vet -d '#$$kind' ./schema $$f"; $(CUE) vet -d "#$$kind" ./schema $$f; done

.PHONY: opa-check
opa-check: $(OPA) ## opa check --strict, opa fmt --diff and opa test with the 90% coverage floor.
	bash bundles/check.sh $(OPA)

.PHONY: build
build: ## Build every package and binary (binaries into bin/).
	@mkdir -p bin
	$(GO) build ./...
	$(GO) build -trimpath -o bin/ ./hack/crdgen $(wildcard ./cmd/*)

##@ Images

# The version stamped into the images' binaries (--version, the start-up log) and used as
# their tag: git describe of the checkout (a tag, else the commit, -dirty with local
# changes). Set it to build the same code under another version.
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_REPO ?= ghcr.io/agentcube
IMAGES_DIR ?= _output/images

.PHONY: images
images: ## Build the controller and webhook images as OCI archives in IMAGES_DIR (reproducible, no Docker; VERSION, IMAGE_REPO).
	$(GO) run ./hack/images build --out $(IMAGES_DIR) --repo $(IMAGE_REPO) --version $(VERSION)

# A second build of the same code stamped $(VERSION)-b: tests/e2e rolls the Deployments to
# it and back (TestRollingUpdate), as an upgrade does.
IMAGES_B_DIR ?= $(IMAGES_DIR)-b

.PHONY: images-b
images-b: ## The same images stamped VERSION-b in IMAGES_B_DIR (tests/e2e rolls the Deployments to them and back).
	$(GO) run ./hack/images build --out $(IMAGES_B_DIR) --repo $(IMAGE_REPO) --version $(VERSION)-b

.PHONY: push
push: images ## Push the images to REGISTRY (make push REGISTRY=registry.example.com/team; credentials from docker login).
	@if [ -z "$(REGISTRY)" ]; then echo "make push needs REGISTRY, e.g. make push REGISTRY=registry.example.com/team"; exit 1; fi
	$(GO) run ./hack/images push --registry $(REGISTRY) --dir $(IMAGES_DIR)

##@ Testing

# The test layers as package lists: unit tests beside the code (real cgroups where a package
# needs them, as root); the integration suites in tests/ (a real API server, containerd,
# cgroups); the end-to-end suite on a one-node cluster. make test runs the three lists in one
# go test, so that their packages share the cores as they go, the end-to-end suite first:
# go test starts packages in the order given, and the longest (~8 min, mostly waiting on
# kubelet) then runs beside the others instead of alone after them.
UNIT_PKGS        = $(shell $(GO) list ./... | grep -v /tests/)
INTEGRATION_PKGS = $(shell $(GO) list ./tests/... | grep -v /tests/e2e)
E2E_PKGS         = ./tests/e2e/...

.PHONY: test
test: tools verify cue-vet opa-check images images-b ## Run every test: drift check, cue CLI, unit, integration on a real API server, end-to-end on a one-node cluster.
	$(TEST_ENV) $(GO) test $(GO_TEST_FLAGS) $(E2E_PKGS) $(UNIT_PKGS) $(INTEGRATION_PKGS)
	$(MAKE) --no-print-directory fuzz

# An execution count, not a duration: with a duration Go's fuzz coordinator (go1.26) can
# report its own -fuzztime deadline as a failure (golang/go#75804). about 25 s on 2 cores.
FUZZ_TIME ?= 25000x

.PHONY: fuzz
fuzz: ## Fuzz the admission handler for FUZZ_TIME (corpus kept in webhook/testdata/fuzz).
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(FUZZ_TIME) -fuzzminimizetime 200x ./webhook/

.PHONY: test-unit
test-unit: ## The unit layer: the tests beside the code (no built tools; real-cgroup ones need root).
	$(GO) test $(GO_TEST_FLAGS) $(UNIT_PKGS)

.PHONY: test-integration
test-integration: tools ## The integration layer: tests/ on a real API server, containerd and cgroups (root).
	$(TEST_ENV) $(GO) test $(GO_TEST_FLAGS) $(INTEGRATION_PKGS)

.PHONY: test-e2e
test-e2e: tools images images-b ## The end-to-end layer: tests/e2e on a one-node cluster (root).
	$(TEST_ENV) $(GO) test $(GO_TEST_FLAGS) $(E2E_PKGS)

.PHONY: bench
bench: bench-scale bench-delivery ## The scale proof (hollow nodes, ~40 min) and the slice's delivery (~5 min): prints their tables; the scale proof writes docs/benchmarks-log.md and docs/bench/*.png.

.PHONY: bench-all
bench-all: bench-components bench-scale bench-lease-load ## Every benchmark below (~40 min; figures in docs/benchmarks.md).

.PHONY: bench-components
bench-components: bench-policy-layer ## The components' benchmarks: the policy layer (below), the node policies (Lease renewal, pod status, kubelet event), operator fan-out, agent.
	$(TEST_ENV) $(GO) test -run '^$$' -bench 'LeaseRenewalNodePolicy|NodePoliciesThroughAPIServer' -benchtime 400x ./tests/attack/ | tee _output/bench-lease-policy.txt
	$(MAKE) --no-print-directory bench-operator bench-agent

# Each output file starts with the load average, as the figures in docs/benchmarks.md say.
BENCH_UPTIME = uptime | tee

.PHONY: bench-policy-layer
bench-policy-layer: tools ## The policy layer's tables in docs/benchmarks.md: CUE (and cheaper schema variants), Rego, webhook in process and its throughput, a status write through the API server beside a VAP, idle agent and controller cost, the hollow fleet at 1,000 nodes (~15 min).
	@mkdir -p _output
	$(BENCH_UPTIME) _output/bench-schema.txt
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 300x -count $(BENCH_COUNT) ./schema/ | tee -a _output/bench-schema.txt
	$(BENCH_UPTIME) _output/bench-schema-variants.txt
	hack/schema-variants.sh 300x $(BENCH_COUNT) | tee -a _output/bench-schema-variants.txt
	$(BENCH_UPTIME) _output/bench-policy.txt
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 300x -count $(BENCH_COUNT) ./policy/ | tee -a _output/bench-policy.txt
	$(BENCH_UPTIME) _output/bench-webhook.txt
	$(GO) test -run '^$$' -bench 'Validate|ServeHTTP' -benchmem -benchtime 300x -count $(BENCH_COUNT) \
		./webhook/ | tee -a _output/bench-webhook.txt
	$(BENCH_UPTIME) _output/bench-webhook-throughput.txt
	$(GO) test -v -run '^$$' -bench WebhookThroughput -benchtime 1x ./tests/webhookload/ | tee -a _output/bench-webhook-throughput.txt
	$(BENCH_UPTIME) _output/bench-admission.txt
	$(TEST_ENV) $(GO) test -run '^$$' -bench ThroughAPIServer -benchtime 400x ./tests/admission/ | tee -a _output/bench-admission.txt
	$(BENCH_UPTIME) _output/bench-idle-cost.txt
	$(TEST_ENV) $(GO) test -run '^$$' -bench IdleCost -benchtime 1x -timeout 15m ./tests/scale/ | tee -a _output/bench-idle-cost.txt
	$(BENCH_UPTIME) _output/bench-hollow-1000.txt
	$(TEST_ENV) SANDBOXPOOL_BENCH=1 SANDBOXPOOL_HOLLOW_NODES=1000 SANDBOXPOOL_HOLLOW_STEADY=30s \
		$(GO) test -count=1 -v -timeout 30m -run TestHollowScale ./tests/scale/ \
		| tee -a _output/bench-hollow-1000.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

# How many times bench-components repeats each in-process benchmark (benchstat wants 6 or more).
BENCH_COUNT ?= 6

BENCH_SIZES ?= 1000,5000

.PHONY: bench-agent
bench-agent: tools ## Agent: spec change → manifest, manifest restore (p50/p99), CPU/RSS at rest (root).
	@mkdir -p _output
	$(TEST_ENV) SANDBOXPOOL_BENCH=1 $(GO) test -count=1 -v -run TestAgentFigures ./tests/agent/ \
		| tee _output/bench-agent.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

.PHONY: bench-operator
bench-operator: tools ## Fan-out vs a plain create loop, controller CPU/RSS, phase lag at BENCH_SIZES nodes.
	@mkdir -p _output
	$(TEST_ENV) SANDBOXPOOL_BENCH=1 SANDBOXPOOL_BENCH_SIZES=$(BENCH_SIZES) $(GO) test -count=1 -v -timeout 60m \
		-run TestOperatorScale ./tests/scale/ | tee _output/bench-operator.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

# The hollow-node comparison (tests/scale, docs/benchmarks-log.md): HOLLOW_NODES nodes in one run,
# a DaemonSet's phases then a class's, each HOLLOW_STEADY at rest, a phase given up after
# HOLLOW_LIMIT.
HOLLOW_NODES  ?= 5000
HOLLOW_STEADY ?= 1m
HOLLOW_LIMIT  ?= 10m

.PHONY: bench-scale
bench-scale: tools $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) ## HOLLOW_NODES hollow nodes (each its own identity) side by side with a DaemonSet: fan-out, steady state, policy change, node loss, deletion; writes docs/benchmarks-log.md and docs/bench/*.png (~40 min at 5,000).
	@mkdir -p _output
	$(BENCH_UPTIME) _output/bench-scale.txt
	$(TEST_ENV) SANDBOXPOOL_BENCH=1 SANDBOXPOOL_HOLLOW_NODES=$(HOLLOW_NODES) SANDBOXPOOL_HOLLOW_STEADY=$(HOLLOW_STEADY) \
		SANDBOXPOOL_HOLLOW_LIMIT=$(HOLLOW_LIMIT) SANDBOXPOOL_HOLLOW_REPORT=$(CURDIR)/docs \
		SANDBOXPOOL_COMMIT=$$(git describe --always --dirty) $(GO) test -count=1 -v -timeout 90m \
		-run TestHollowScale ./tests/scale/ | tee -a _output/bench-scale.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

LEASE_LOAD ?= 5000,10000

.PHONY: bench-lease-load
bench-lease-load: tools ## The API server under the steady Lease load alone (LEASE_LOAD Leases, each renewed every 10 s), sizes the hollow fan-out cannot reach.
	@mkdir -p _output
	$(TEST_ENV) SANDBOXPOOL_BENCH=1 SANDBOXPOOL_LEASE_LOAD=$(LEASE_LOAD) $(GO) test -count=1 -v -timeout 30m \
		-run TestLeaseLoad ./tests/scale/ | tee _output/bench-lease-load.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

.PHONY: bench-e2e
bench-e2e: tools images images-b ## End-to-end latencies on the real stack: class → Ready, mirror pod, manifest, resize (root).
	@mkdir -p _output
	$(TEST_ENV) SANDBOXPOOL_E2E_FIGURES=1 $(GO) test -count=1 -v -timeout 60m -run TestFigures ./tests/e2e/ \
		| tee _output/bench-e2e.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

.PHONY: bench-delivery
bench-delivery: tools images images-b ## The slice's delivered cpu under saturation and who is killed first under memory pressure, beside a Guaranteed pod and the slice beside the pods' root (root).
	@mkdir -p _output
	$(BENCH_UPTIME) _output/bench-delivery.txt
	$(TEST_ENV) SANDBOXPOOL_DELIVERY_FIGURES=1 $(GO) test -count=1 -v -timeout 30m -run TestDeliveryFigures ./tests/e2e/ \
		| tee -a _output/bench-delivery.txt | grep -E 'FIGURE|^(---|ok|FAIL)'

##@ Demo

DEMO_DIR ?= /tmp/sandboxpool-demo
# The node half, which the demo installs with deploy/node/install.sh; the cluster half are
# the images (make images).
DEMO_BINARIES := ./cmd/placeholder-agent ./cmd/node-ctl ./cmd/containerd-shim-placeholder-v2
# The demo program make demo builds and runs; make demo-down runs it again to stop the demo.
DEMO_BIN ?= bin/sandboxpool-demo

.PHONY: demo
demo: demo-preflight $(KUBE_APISERVER) $(KUBECTL) $(ETCD) $(KUBELET) $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KUBE_PROXY) $(CONTAINERD_BINS) images ## Run the whole system on this machine (root): a one-node cluster, the cluster half from deploy/, the examples.
	@mkdir -p bin $(dir $(DEMO_BIN))
	$(GO) build -trimpath -o bin/ $(DEMO_BINARIES)
	$(GO) build -trimpath -o $(DEMO_BIN) ./hack/demo
	KUBEBUILDER_ASSETS=$(CONTROLPLANE) SANDBOXPOOL_CONTAINERD=$(CONTAINERD_TOOLS) \
		$(DEMO_BIN) up --dir=$(DEMO_DIR) --bin=bin --images=$(IMAGES_DIR)

.PHONY: demo-preflight
demo-preflight: ## Check, before any tool is built, that make demo can run here (root).
	@if [ "$$(id -u)" != 0 ]; then \
		echo "make demo runs kubelet, containerd and node-ctl on real cgroups: run it as root"; exit 1; fi

.PHONY: demo-down
# Compiles nothing: it runs the demo program make demo built (hack/demo/down.sh).
demo-down: ## Stop exactly what make demo started (PIDs from its state file) and remove its directories.
	@hack/demo/down.sh $(DEMO_DIR) $(DEMO_BIN)

##@ Tools (built from the Go module proxy into $(TOOLS_DIR), once)

.PHONY: tools
TOOLS := $(KUBE_APISERVER) $(KUBECTL) $(ETCD) $(KUBELET) $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KUBE_PROXY) \
	$(CUE) $(DEEPCOPY_GEN) $(OPA) $(CONTAINERD_BINS) \
	$(MINPROTOC) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_TTRPC) $(PROMTOOL) $(MONITORING_CRDS) $(GOLANGCI_LINT) $(KUBE_API_LINTER)
tools: $(TOOLS) ## Build every pinned tool make test needs, once, into TOOLS_DIR (the targets below build one each).

$(KUBE_APISERVER) $(KUBECTL) &: hack/kube/go.mod hack/kube/go.sum
	@echo ">> building kube-apiserver and kubectl $(KUBE_VERSION) (first time: several minutes)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $(CONTROLPLANE)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	@touch $(KUBE_APISERVER) $(KUBECTL)

.PHONY: kubelet
kubelet: $(KUBELET) ## Build kubelet (the node of the end-to-end stack: tests/e2e, make demo).

$(KUBELET): hack/kube/go.mod hack/kube/go.sum
	@echo ">> building kubelet $(KUBE_VERSION)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubelet
	@touch $@

.PHONY: kube-controller-manager
kube-controller-manager: $(KUBE_CONTROLLER_MANAGER) ## Build kube-controller-manager (the one-node cluster's; its DaemonSet controller is also make bench-scale's side-by-side).

$(KUBE_CONTROLLER_MANAGER): hack/kube/go.mod hack/kube/go.sum
	@echo ">> building kube-controller-manager $(KUBE_VERSION)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-controller-manager
	@touch $@

# kube-scheduler and kube-proxy: the rest of a cluster, with which the one-node cluster of
# tests/e2e and make demo runs deploy/'s Deployments.
.PHONY: kube-scheduler kube-proxy
kube-scheduler: $(KUBE_SCHEDULER) ## Build kube-scheduler.
kube-proxy: $(KUBE_PROXY) ## Build kube-proxy.

$(KUBE_SCHEDULER): hack/kube/go.mod hack/kube/go.sum
	@echo ">> building kube-scheduler $(KUBE_VERSION)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-scheduler
	@touch $@

$(KUBE_PROXY): hack/kube/go.mod hack/kube/go.sum
	@echo ">> building kube-proxy $(KUBE_VERSION)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-proxy
	@touch $@

$(ETCD): hack/etcd/go.mod hack/etcd/go.sum
	@echo ">> building etcd $(ETCD_VERSION)"
	@mkdir -p $(CONTROLPLANE)
	cd hack/etcd && $(GO) build -trimpath -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3
	@touch $@

$(GOLANGCI_LINT): hack/lint/go.mod hack/lint/go.sum
	@echo ">> building golangci-lint $(GOLANGCI_LINT_VERSION)"
	cd hack/lint && $(GO) build -trimpath -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@touch $@

$(KUBE_API_LINTER): hack/kal/go.mod hack/kal/go.sum $(wildcard hack/kal/*.go)
	@echo ">> building kube-api-linter $(KAL_VERSION)"
	cd hack/kal && $(GO) build -trimpath -o $@ .
	@touch $@

$(CUE) $(DEEPCOPY_GEN) $(OPA) &: hack/tools/go.mod hack/tools/go.sum
	@echo ">> building cue $(CUE_VERSION), opa $(OPA_VERSION) and deepcopy-gen"
	@mkdir -p $(CLI_TOOLS)
	cd hack/tools && $(GO) build -trimpath -o $(CLI_TOOLS)/ cuelang.org/go/cmd/cue \
		github.com/open-policy-agent/opa k8s.io/code-generator/cmd/deepcopy-gen
	@touch $(CUE) $(DEEPCOPY_GEN) $(OPA)

$(MINPROTOC) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_TTRPC) &: hack/tools/go.mod hack/tools/go.sum hack/tools/minprotoc/main.go
	@echo ">> building minprotoc, protoc-gen-go $(PROTOBUF_VERSION) and protoc-gen-go-ttrpc $(TTRPC_VERSION)"
	@mkdir -p $(PROTO_TOOLS)
	cd hack/tools && $(GO) build -trimpath -o $(PROTO_TOOLS)/ ./minprotoc \
		google.golang.org/protobuf/cmd/protoc-gen-go github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc
	@touch $(MINPROTOC) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_TTRPC)

# --- promtool and the prometheus-operator CRDs (tests/deploy, deploy/monitoring) ---
.PHONY: monitoring
monitoring: $(PROMTOOL) $(MONITORING_CRDS) ## Build promtool and fetch the PrometheusRule/PodMonitor CRDs (for tests/deploy).

# Without service discovery plugins (remove_all_sd): promtool only checks and tests rules.
$(PROMTOOL): hack/monitoring/go.mod hack/monitoring/go.sum
	@echo ">> building promtool $(PROMETHEUS_VERSION)"
	@mkdir -p $(MONITORING_TOOLS)
	cd hack/monitoring && $(GO) build -trimpath -tags remove_all_sd -ldflags "-s -w" -o $@ \
		github.com/prometheus/prometheus/cmd/promtool
	@touch $@

$(MONITORING_CRDS) &:
	@echo ">> fetching the PrometheusRule and PodMonitor CRDs of prometheus-operator $(PROMETHEUS_OPERATOR_VERSION)"
	@mkdir -p $(MONITORING_TOOLS)/crds
	dir=$$(cd / && GOFLAGS=-mod=mod GO111MODULE=on $(GO) mod download -json \
		github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	for f in $(notdir $(MONITORING_CRDS)); do \
		install -m 0644 "$$dir/example/prometheus-operator-crd/$$f" $(MONITORING_TOOLS)/crds/; done

# --- containerd, ctr, containerd-shim-runc-v2 and crictl (tests/shim) ---
CONTAINERD_LDFLAGS := -s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION) \
	-X sigs.k8s.io/cri-tools/pkg/version.Version=$(CRICTL_VERSION)

.PHONY: containerd
containerd: $(CONTAINERD_BINS) ## Build containerd, ctr, the runc shim and crictl (for tests/shim).

$(CONTAINERD_BINS) &: hack/containerd/go.mod hack/containerd/go.sum
	@echo ">> building containerd $(CONTAINERD_VERSION) (containerd, ctr, runc shim) and crictl $(CRICTL_VERSION)"
	@mkdir -p $(CONTAINERD_TOOLS)
	cd hack/containerd && $(GO) build -trimpath -ldflags "$(CONTAINERD_LDFLAGS)" -o $(CONTAINERD_TOOLS)/ \
		github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 sigs.k8s.io/cri-tools/cmd/crictl
	@touch $(CONTAINERD_BINS)

.PHONY: clean
clean: ## Remove built binaries (keeps the tools cache).
	rm -rf bin _output
