# Causeway build, generation and tests. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
MCS_API_DIR = $(shell $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api)
K8S_BIN ?= $(shell hack/k8s-binaries.sh --print-dir)

.PHONY: help host-setup build image image-base generate generate-crds generate-rbac generate-bpf verify-generate lint test test-unit fuzz k8s-binaries lab

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/...

# The container image (hack/image/README.md), built without a container
# daemon: the Debian base layer cached by hack/image/base.sh plus one layer
# with the product's binaries at /usr/local/bin; and the lab image, that
# image plus causeway-lab (for `causeway-lab up --runtime containerd`).
# Tagged with the version (git describe) and the commit; created at the
# commit's time, so a rebuild of one commit has the same digest.
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty)
IMAGE_COMMIT ?= $(shell git rev-parse HEAD)
IMAGE_TAGS ?= $(IMAGE_VERSION),$(shell git rev-parse --short=12 HEAD)$(if $(findstring -dirty,$(IMAGE_VERSION)),-dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)

image-base: host-setup ## the image's Debian base layer, cached under /var/cache/causeway (root; minutes once, then instant)
	@hack/image/base.sh >/dev/null

image: image-base ## container image: OCI layout bin/image/, `docker load` tarball bin/causeway-image.tar; the lab's bin/causeway-lab-image.tar
	$(GO) run ./hack/image --base "$$(hack/image/base.sh --print)" --layout bin/image --tarball bin/causeway-image.tar \
	  --lab-tarball bin/causeway-lab-image.tar \
	  --tags $(IMAGE_TAGS) --version $(IMAGE_VERSION) --revision $(IMAGE_COMMIT) --epoch $(SOURCE_DATE_EPOCH)

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
# Every daemon also gets the markers of pkg/about (its cluster ID, read
# through pkg/daemon). A daemon without markers gets no file and no rights.
RBAC_DAEMONS = gateway=./pkg/gateway route-agent=./pkg/routeagent mcs-controller=./pkg/mcs/controller globalnet=./pkg/globalnet/controller

generate-rbac: ## least-privilege roles of each daemon under the chart's templates/rbac/
	rm -f $(CHART)/templates/rbac/*.yaml
	@set -e; for d in $(RBAC_DAEMONS); do \
	  echo "controller-gen rbac $${d%%=*}"; \
	  $(GO) tool controller-gen rbac:roleName=causeway-$${d%%=*},fileName=$${d%%=*}.yaml paths="{$${d#*=},./pkg/about}" output:rbac:dir=$(CHART)/templates/rbac; \
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
# FUZZTIME is a count of executions, not a duration: with a duration Go
# 1.26's fuzz coordinator can fail a clean run with "context deadline
# exceeded" when its workers are starved at the deadline (golang/go#75804),
# and a loaded CI machine would fuzz less rather than fail.
FUZZ_TARGETS = ./pkg/addrpolicy:FuzzDecide ./pkg/addrpolicy:FuzzCheckRecord ./pkg/gateway:FuzzCompute ./pkg/cable:FuzzValidate \
	./pkg/mcs:FuzzMerge ./pkg/mcs:FuzzSourceFromRecord ./pkg/mcs:FuzzJoinRecord ./pkg/routeagent:FuzzParseSave ./pkg/routeagent:FuzzPlanIptables \
	./pkg/routeagent:FuzzVIPDesired ./pkg/broker:FuzzClaimNames ./pkg/globalnet:FuzzRules
FUZZTIME ?= 2000x

fuzz: ## run every fuzz target for FUZZTIME executions (default 2000x) each
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t#*:} ($${t%%:*}, $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

test: host-setup k8s-binaries image-base verify-generate lint fuzz ## everything CI runs: generation check, lint, a short fuzz run, unit + privileged + apiserver + e2e tests
	CAUSEWAY_K8S_BIN=$(K8S_BIN) CAUSEWAY_E2E=1 $(GO) test -count=1 -timeout 50m ./...
