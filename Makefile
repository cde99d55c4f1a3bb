# Causeway build, generation and tests. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
MCS_API_DIR = $(shell $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api)
K8S_BIN ?= $(shell hack/k8s-binaries.sh --print-dir)

.PHONY: help host-setup build generate generate-crds generate-rbac generate-bpf verify-generate lint test test-unit k8s-binaries lab

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/...

generate: generate-crds generate-rbac generate-bpf ## regenerate deep-copy code, CRDs, RBAC roles and eBPF objects

generate-crds: ## deep-copy code and CRD YAML (ours and mcs-api's) under deploy/crds
	$(GO) tool controller-gen object paths=./api/...
	$(GO) tool controller-gen crd paths=./api/... output:crd:dir=deploy/crds
	install -m 0644 $(MCS_API_DIR)/config/crd/multicluster.x-k8s.io_serviceexports.yaml deploy/crds/
	install -m 0644 $(MCS_API_DIR)/config/crd/multicluster.x-k8s.io_serviceimports.yaml deploy/crds/

# Each daemon's least-privilege roles come from the +kubebuilder:rbac markers
# next to the code that needs them: <daemon>=<package> below gives
# deploy/rbac/<daemon>.yaml with ClusterRole and/or Role causeway-<daemon>
# (bindings and ServiceAccounts: deploy/manifests/). A daemon without
# markers gets no file and no rights.
RBAC_DAEMONS = gateway=./pkg/gateway route-agent=./pkg/routeagent mcs-controller=./pkg/mcs/controller

generate-rbac: ## least-privilege roles of each daemon under deploy/rbac
	rm -f deploy/rbac/*.yaml
	@set -e; for d in $(RBAC_DAEMONS); do \
	  echo "controller-gen rbac $${d%%=*}"; \
	  $(GO) tool controller-gen rbac:roleName=causeway-$${d%%=*},fileName=$${d%%=*}.yaml paths=$${d#*=} output:rbac:dir=deploy/rbac; \
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

test: host-setup k8s-binaries verify-generate lint ## everything CI runs: generation check, lint, unit + privileged + apiserver + e2e tests
	CAUSEWAY_K8S_BIN=$(K8S_BIN) CAUSEWAY_E2E=1 $(GO) test -count=1 -timeout 40m ./...
