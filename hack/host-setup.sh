#!/usr/bin/env bash
# Installs the Debian packages the lab and the tests need on this host
# (as root). Used by `make lab`, `make test` and .ci/run, so the README's two
# commands do the whole set-up on a fresh machine. Packages already
# installed are left alone; nothing is installed when all are present.
# mmdebstrap builds the container image's Debian base (hack/image/base.sh);
# runc and containernetworking-plugins run `lab up --runtime containerd`'s pods;
# dnsutils, socat and netcat-openbsd are the tools test manifests run in
# lab pods through kubectl exec (the lab runs host programs in its pods).
set -euo pipefail

packages=(iptables nftables ipset conntrack iproute2 iputils-ping ethtool curl mmdebstrap
  dnsutils socat netcat-openbsd iperf3 wireguard-tools clang-19 llvm-19 libbpf-dev bpftool runc containernetworking-plugins
  strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "host-setup: missing Debian packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi
echo "host-setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: wireguard-tools would otherwise pull in a kernel.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
