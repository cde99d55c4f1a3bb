#!/usr/bin/env bash
# Builds the real Kubernetes control-plane binaries used by tests and the lab
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# kubelet, kubectl, CoreDNS) and containerd (for `lab up --runtime
# containerd`) from the Go module proxy, and caches them outside the
# repository, keyed by version. Binaries already present are not rebuilt.
#
# Usage: hack/k8s-binaries.sh            # build what is missing, print the dir
#        hack/k8s-binaries.sh --print-containerd-dir
#        CAUSEWAY_K8S_BIN=/dir hack/k8s-binaries.sh
#
# The directory it prints is what tests read from $CAUSEWAY_K8S_BIN (default
# below) and what controller-runtime's envtest accepts as KUBEBUILDER_ASSETS.
set -euo pipefail


K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE_ROOT=${CAUSEWAY_CACHE:-/var/cache/causeway}
OUT=${CAUSEWAY_K8S_BIN:-$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION}
CONTAINERD_OUT=${CAUSEWAY_CONTAINERD_BIN:-$CACHE_ROOT/containerd-$CONTAINERD_VERSION}
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)

log() { echo "k8s-binaries: $*" >&2; }

if [ "${1:-}" = "--print-dir" ]; then echo "$OUT"; exit 0; fi
if [ "${1:-}" = "--print-containerd-dir" ]; then echo "$CONTAINERD_OUT"; exit 0; fi

# have BIN WANT: true when $OUT/BIN exists and reports version WANT. The
# output is captured first: piping --version into grep under pipefail fails
# at random with SIGPIPE.
have() {
  local bin=$OUT/$1 out flag=--version
  case $1 in containerd* | ctr) bin=$CONTAINERD_OUT/$1 ;; esac
  [ -x "$bin" ] || return 1
  case $1 in
    kubectl) flag="version --client" ;;
    coredns) flag=-version ;;
    containerd-shim-runc-v2) flag=-v ;;
  esac
  # shellcheck disable=SC2086
  out=$("$bin" $flag 2>&1 || true)
  [[ "$out" == *"$2"* ]]
}

mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build_etcd() {
  have etcd "${ETCD_VERSION#v}" && return 0
  log "building etcd $ETCD_VERSION"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  cat >go.mod <<MOD
module causeway.local/etcdwrap

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  GOFLAGS=-mod=mod go build -trimpath -o "$OUT/etcd" go.etcd.io/etcd/server/v3
}

build_k8s() {
  local missing=()
  for c in "${K8S_CMDS[@]}"; do
    have "$c" "$K8S_VERSION" || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "building ${missing[*]} $K8S_VERSION"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  {
    echo "module causeway.local/k8swrap"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
  } >go.mod
  GOFLAGS=-mod=mod go mod download k8s.io/kubernetes
  local kmod
  kmod=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  # Every staging module k8s.io/kubernetes replaces with ./staging/... is
  # taken from the proxy at the matching v0.x version instead.
  awk '/=> \.\/staging\// {print $1}' "$kmod/go.mod" | sort -u | while read -r m; do
    echo "replace $m => $m $STAGING_VERSION" >>go.mod
  done
  echo 'package main' >main.go
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  local gitmajor=${K8S_VERSION#v}; gitmajor=${gitmajor%%.*}
  local gitminor=${K8S_VERSION#v*.}; gitminor=${gitminor%%.*}
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$gitmajor -X $pkg.gitMinor=$gitminor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  for c in "${missing[@]}"; do
    log "go build $c"
    GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$OUT/$c" "k8s.io/kubernetes/cmd/$c"
  done
}

build_coredns() {
  have coredns "${COREDNS_VERSION#v}" && return 0
  log "building coredns $COREDNS_VERSION"
  GOBIN="$OUT" go install -trimpath "github.com/coredns/coredns@$COREDNS_VERSION"
}

# containerd and its runc shim, for `lab up --runtime containerd`: the
# daemon with cgo (its overlay snapshotter and seccomp need it) and
# without the btrfs, devmapper and zfs snapshotters (no headers here, not
# used); the shim and ctr (the lab imports its images with it) static.
build_containerd() {
  have containerd "$CONTAINERD_VERSION" && have containerd-shim-runc-v2 "$CONTAINERD_VERSION" && have ctr "$CONTAINERD_VERSION" && return 0
  log "building containerd $CONTAINERD_VERSION"
  mkdir -p "$work/containerd" "$CONTAINERD_OUT" && cd "$work/containerd"
  printf 'module causeway.local/containerdwrap\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' "$CONTAINERD_VERSION" >go.mod
  GOFLAGS=-mod=mod go mod download github.com/containerd/containerd/v2
  local m=github.com/containerd/containerd/v2
  local ldflags="-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=$CONTAINERD_VERSION -X $m/version.Package=$m"
  GOFLAGS=-mod=mod go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ldflags" -o "$CONTAINERD_OUT/containerd" "$m/cmd/containerd"
  for c in containerd-shim-runc-v2 ctr; do
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$CONTAINERD_OUT/$c" "$m/cmd/$c"
  done
}

build_etcd
build_k8s
if [ "${WITH_COREDNS:-1}" = 1 ]; then build_coredns; fi
if [ "${WITH_CONTAINERD:-1}" = 1 ]; then build_containerd; fi
log "ready in $OUT"
echo "$OUT"
