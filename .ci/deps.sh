#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks use. Idempotent.
set -euo pipefail
packages=(ca-certificates openssl curl)
# The ramdisk's tests, benchmark and `make ramdisk`.
packages+=(zstd qemu-utils e2fsprogs cpio kmod xz-utils)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
