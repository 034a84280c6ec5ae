#!/usr/bin/env bash
# Builds the RAM disk the VM boot test PXE-boots: Debian's kernel (downloaded as a
# package, not installed) and a busybox initramfs whose /init prints a marker line and
# the kernel command line to the serial console, then powers the VM off. The result is
# cached in $BC_TEST_CACHE (default /var/cache/better-compute-test/ramdisk), so later
# runs are quick. Prints the directory holding vmlinuz and initrd.img.
set -euo pipefail
cache=${BC_TEST_CACHE:-/var/cache/better-compute-test}/ramdisk
busybox=/bin/busybox
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ ! -s $cache/vmlinuz ]]; then
	kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
	pkg=$(kernel_pkg)
	[[ -n $pkg ]] || { apt-get update -q >&2 && pkg=$(kernel_pkg); }
	[[ -n $pkg ]] || { echo "no kernel package behind linux-image-amd64 (run apt-get update)" >&2; exit 1; }
	(cd "$work" && apt-get download -q "$pkg" >&2)
	dpkg-deb -x "$work"/"$pkg"_*.deb "$work/root"
	cp "$work"/root/boot/vmlinuz-* "$cache/vmlinuz.tmp"
	mv "$cache/vmlinuz.tmp" "$cache/vmlinuz"
fi
if [[ ! -s $cache/initrd.img || $0 -nt $cache/initrd.img ]]; then
	[[ $(ldd "$busybox" 2>&1) == *"not a dynamic"* ]] || { echo "$busybox is not static: install busybox-static" >&2; exit 1; }
	root=$work/initramfs
	mkdir -p "$root"/{bin,dev,proc,sys}
	cp "$busybox" "$root/bin/busybox"
	cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
echo "BC-RAMDISK-UP cmdline: $(/bin/busybox cat /proc/cmdline)" >/dev/console
/bin/busybox poweroff -f
INIT
	chmod 755 "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$cache/initrd.img.tmp"
	mv "$cache/initrd.img.tmp" "$cache/initrd.img"
fi
echo "$cache"
