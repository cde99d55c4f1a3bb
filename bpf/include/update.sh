#!/usr/bin/env bash
# Re-vendor the headers in this directory from the host's /usr/include
# (Debian packages libbpf-dev and linux-libc-dev). Run it after upgrading
# those packages, update the versions in README.md, then `make generate-bpf`.
# Files under asm/ are ours and are not touched.
set -euo pipefail
cd "$(dirname "$0")"

libbpf=(bpf_helpers.h bpf_helper_defs.h bpf_endian.h)
uapi=(
	linux/bpf.h linux/bpf_common.h linux/types.h linux/posix_types.h
	linux/stddef.h linux/if_ether.h linux/in.h linux/ip.h linux/udp.h
	linux/libc-compat.h linux/socket.h linux/swab.h
	linux/byteorder/little_endian.h linux/byteorder/big_endian.h
	asm-generic/types.h asm-generic/int-ll64.h asm-generic/bitsperlong.h
	asm-generic/posix_types.h asm-generic/swab.h
)

for f in "${libbpf[@]}"; do install -m 0644 "/usr/include/bpf/$f" "bpf/$f"; done
for f in "${uapi[@]}"; do install -D -m 0644 "/usr/include/$f" "$f"; done

dpkg-query -W -f '${Package} ${Version}\n' libbpf-dev linux-libc-dev
