#!/usr/bin/env bash
# Builds the RAM disk the VM boot test PXE-boots: Debian's kernel (downloaded as a
# package, not installed) and a busybox initramfs whose /init silences the kernel's
# console messages, prints the kernel command line to the serial console framed by a
# marker and its length (three times), then powers the VM off. The result is
# cached in $BC_TEST_CACHE (default /var/cache/better-compute-test): the kernel in
# ramdisk/, the initramfs in ramdisk-HASH/ named by this script's content, so checkouts of
# different versions of it never build over each other's. Later runs are quick. Prints
# the directory holding vmlinuz and initrd.img.
set -euo pipefail
base=${BC_TEST_CACHE:-/var/cache/better-compute-test}
kernel=$base/ramdisk
cache=$base/ramdisk-$(sha256sum "$0" | cut -c1-16)
busybox=/bin/busybox
mkdir -p "$kernel" "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ ! -s $kernel/vmlinuz ]]; then
	kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
	pkg=$(kernel_pkg)
	[[ -n $pkg ]] || { apt-get -o DPkg::Lock::Timeout=600 update -q >&2 && pkg=$(kernel_pkg); }
	[[ -n $pkg ]] || { echo "no kernel package behind linux-image-amd64 (run apt-get update)" >&2; exit 1; }
	(cd "$work" && apt-get download -q "$pkg" >&2)
	dpkg-deb -x "$work"/"$pkg"_*.deb "$work/root"
	cp "$work"/root/boot/vmlinuz-* "$kernel/vmlinuz.tmp"
	mv "$kernel/vmlinuz.tmp" "$kernel/vmlinuz"
fi
if [[ ! -s $cache/vmlinuz ]]; then
	cp "$kernel/vmlinuz" "$cache/vmlinuz.tmp"
	mv "$cache/vmlinuz.tmp" "$cache/vmlinuz"
fi
if [[ ! -s $cache/initrd.img ]]; then
	[[ $(ldd "$busybox" 2>&1) == *"not a dynamic"* ]] || { echo "$busybox is not static: install busybox-static" >&2; exit 1; }
	root=$work/initramfs
	mkdir -p "$root"/{bin,dev,proc,sys}
	cp "$busybox" "$root/bin/busybox"
	cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
# Only emergencies reach the console from here on, so no kernel message lands inside
# the lines below; each copy is followed by its length, so one that a message split
# anyway is told apart, and the reader takes the next.
echo 1 4 1 7 >/proc/sys/kernel/printk
read -r cmdline </proc/cmdline
for copy in 1 2 3; do
	printf 'BC-RAMDISK-UP cmdline: %s\nBC-RAMDISK-END %d\n' "$cmdline" "${#cmdline}" >/dev/console
done
/bin/busybox poweroff -f
INIT
	chmod 755 "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$cache/initrd.img.tmp"
	mv "$cache/initrd.img.tmp" "$cache/initrd.img"
fi
echo "$cache"
