#!/usr/bin/env bash
# Builds the base layer of the container image: a Debian minbase root
# filesystem with the packages listed in hack/image/packages (and their
# dependencies, with the suite's security updates), made by mmdebstrap,
# packed as one reproducibly ordered tar.gz. It is cached outside the
# repository, keyed by the suite, the package list and this script, so
# only the first run downloads and installs (a few minutes); later runs
# print the cached path at once.
#
# Usage: hack/image/base.sh            # build when missing, print the layer's path
#        hack/image/base.sh --print    # only print the path
#
# Beside the layer, packages.txt lists every installed package and version.
# Delete the directory to pick up newer Debian packages.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CACHE_ROOT=${CAUSEWAY_CACHE:-/var/cache/causeway}

packages=$(grep -v -e '^#' -e '^$' "$here/packages" | sort)
key=$({ echo "$SUITE"; echo "$packages"; cat "$here/base.sh"; } | sha256sum | cut -c1-16)
OUT=$CACHE_ROOT/image-base-$SUITE-$key
LAYER=$OUT/base.tar.gz

log() { echo "image-base: $*" >&2; }

if [ "${1:-}" = "--print" ]; then echo "$LAYER"; exit 0; fi
if [ -s "$LAYER" ]; then echo "$LAYER"; exit 0; fi

if [ "$(id -u)" != 0 ]; then
  log "$LAYER is missing; building it needs root"
  exit 1
fi
command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing: run hack/host-setup.sh"; exit 1; }

mkdir -p "$CACHE_ROOT"
# One builder at a time (make image and the image test may start together).
exec 9>"$CACHE_ROOT/image-base.lock"
flock 9
if [ -s "$LAYER" ]; then echo "$LAYER"; exit 0; fi

work=$(mktemp -d "$CACHE_ROOT/.image-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)
log "building the $SUITE root filesystem with: $(echo $packages)"
# The path filters stay in the image's /etc/dpkg/dpkg.cfg.d/99mmdebstrap,
# so packages installed later in a container leave out the same files;
# force-unsafe-io (no fsync: the result is packed and synced as a whole)
# is removed from it afterwards.
mmdebstrap --mode=root --variant=minbase --quiet \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="$(echo $packages | tr ' ' ,)" \
  --dpkgopt=force-unsafe-io \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  "$SUITE" "$root" \
  "deb $MIRROR $SUITE main" \
  "deb $MIRROR $SUITE-updates main" \
  "deb $SECURITY_MIRROR $SUITE-security main"

sed -i '/^force-unsafe-io$/d' "$root/etc/dpkg/dpkg.cfg.d/99mmdebstrap"

# What the container runtime provides (/dev, /run, hostname, resolv.conf)
# and what only records this build (logs, caches, backups) is left out.
rm -rf "${root:?}"/dev/* "$root"/run/* "$root"/tmp/* "$root"/var/log/* \
  "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
: >"$root/etc/hostname"
: >"$root/etc/resolv.conf"

dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package} ${Version}\n' >"$work/packages.txt"
# Sorted entries, numeric owners (the root filesystem's own, never the
# host's names), whole-second times, no xattrs.
tar --create --format=gnu --sort=name --numeric-owner --directory="$root" . | gzip -n >"$work/base.tar.gz"
sync "$work/base.tar.gz"
rm -rf "$root"
mv "$work" "$OUT"
log "built $LAYER ($(du -h "$LAYER" | cut -f1)) in $(( $(date +%s) - start ))s"
echo "$LAYER"
