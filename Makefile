# Causeway build, generation and tests. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
MCS_API_DIR = $(shell $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api)
K8S_BIN ?= $(shell hack/k8s-binaries.sh --print-dir)

.PHONY: help host-setup build generate generate-crds generate-rbac generate-bpf verify-generate lint test test-unit fuzz k8s-binaries lab

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/...

generate: generate-crds generate-rbac generate-bpf ## regenerate deep-copy code, CRDs, RBAC roles and eBPF objects

# Generated files go straight into the Helm chart, the one install source:
# its crds/ and templates/rbac/.
CHART = deploy/helm/causeway

generate-crds: ## deep-copy code and CRD YAML (ours and mcs-api's) under the chart's crds/
	$(GO) tool controller-gen object paths=./api/...
	$(GO) tool controller-gen crd paths=./api/... output:crd:dir=$(CHART)/crds
	install -m 0644 $(MCS_API_DIR)/config/crd/multicluster.x-k8s.io_serviceexports.yaml $(CHART)/crds/
	install -m 0644 $(MCS_API_DIR)/config/crd/multicluster.x-k8s.io_serviceimports.yaml $(CHART)/crds/

# Each daemon's least-privilege roles come from the +kubebuilder:rbac markers
# next to the code that needs them: <daemon>=<package> below gives the
# chart's templates/rbac/<daemon>.yaml with ClusterRole and/or Role
# causeway-<daemon> (ServiceAccounts and bindings: templates/identities.yaml).
# A daemon without markers gets no file and no rights.
RBAC_DAEMONS = gateway=./pkg/gateway route-agent=./pkg/routeagent mcs-controller=./pkg/mcs/controller

generate-rbac: ## least-privilege roles of each daemon under the chart's templates/rbac/
	rm -f $(CHART)/templates/rbac/*.yaml
	@set -e; for d in $(RBAC_DAEMONS); do \
	  echo "controller-gen rbac $${d%%=*}"; \
	  $(GO) tool controller-gen rbac:roleName=causeway-$${d%%=*},fileName=$${d%%=*}.yaml paths=$${d#*=} output:rbac:dir=$(CHART)/templates/rbac; \
	done

generate-bpf: ## compile bpf/*.c and regenerate the Go bindings (needs clang-19)
	$(GO) generate ./bpf/...

verify-generate: generate ## fail when generated files differ from the committed ones
	@git diff --exit-code -- api deploy bpf || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api deploy bpf)" || { git status --porcelain -- api deploy bpf; echo "untracked generated files: run 'make generate' and commit"; exit 1; }

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfe[lb]\.go$$')); test -z "$$out" || { echo "gofmt needed: $$out"; exit 1; }
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

host-setup: ## install the host's Debian packages the lab and tests need (root; nothing when present)
	hack/host-setup.sh

k8s-binaries: ## build etcd, kube-apiserver & co. into the cache (slow once)
	hack/k8s-binaries.sh

lab: host-setup k8s-binaries build ## bring the lab up and show c3 reaching c1's exported Service (root)
	hack/lab-demo.sh

test-unit: ## unit tests only (no root, no apiservers)
	$(GO) test -short ./...

# Every fuzz target, as <package>:<target>. -fuzz takes one target per
# package run, so each gets its own go test. Their seed corpora
# (testdata/fuzz/<target>) run with every plain go test as well.
FUZZ_TARGETS = ./pkg/addrpolicy:FuzzDecide ./pkg/gateway:FuzzCompute ./pkg/cable:FuzzValidate \
	./pkg/mcs:FuzzMerge ./pkg/mcs:FuzzSourceFromRecord ./pkg/routeagent:FuzzParseSave ./pkg/routeagent:FuzzPlanIptables
FUZZTIME ?= 4s

fuzz: ## run every fuzz target for FUZZTIME (default 4s) each
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t#*:} ($${t%%:*}, $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

test: host-setup k8s-binaries verify-generate lint fuzz ## everything CI runs: generation check, lint, a short fuzz run, unit + privileged + apiserver + e2e tests
	CAUSEWAY_K8S_BIN=$(K8S_BIN) CAUSEWAY_E2E=1 $(GO) test -count=1 -timeout 40m ./...
