#!/usr/bin/env bash
# Builds the ramdisk machines PXE-boot into: a Debian kernel and an initramfs holding a
# static busybox, the modules the ramdisk needs (with their dependencies and a fresh
# modules.dep), and a static bcd started by /init as `bcd ramdisk`, which reads the kernel command line.
#
# Artifacts: out/ramdisk/{vmlinuz,initrd.img,SHA256SUMS}. Downloaded packages are kept in
# RAMDISK_CACHE (default out/ramdisk-cache). KERNEL_PACKAGE picks the kernel (default: the
# one linux-image-amd64 depends on).
set -euo pipefail
cd "$(dirname "$0")/.."

out=out/ramdisk
cache=${RAMDISK_CACHE:-out/ramdisk-cache}
# The drivers a ramdisk needs on the machines it boots: virtual machines' and common
# server NICs and disk controllers, the file systems it mounts, and loop devices.
# crc32c_generic comes first: ext4 and xfs name it only as a soft dependency (modules.dep
# leaves it out), and without it a mount with metadata checksums fails with ENOENT.
modules=(crc32c_generic virtio_pci virtio_net virtio_blk virtio_scsi e1000 e1000e igb ixgbe i40e ice bnxt_en mlx5_core
	nvme ahci sd_mod ext4 xfs btrfs vfat nls_cp437 nls_iso8859_1 loop)

for tool in apt-get apt-cache dpkg-deb cpio depmod gzip; do
	command -v "$tool" >/dev/null || { echo "make-ramdisk: $tool is missing (make deps)" >&2; exit 1; }
done

kernel_pkg=${KERNEL_PACKAGE:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')}
[ -n "$kernel_pkg" ] || { echo "make-ramdisk: no kernel package found; run apt-get update" >&2; exit 1; }

mkdir -p "$cache" "$out"
fetch() { # fetch PACKAGE: the .deb's path in the cache, downloading it once
	local deb
	deb=$(ls "$cache/$1"_*.deb 2>/dev/null | head -1 || true)
	if [ -z "$deb" ]; then
		(cd "$cache" && apt-get download -q "$1" >&2)
		deb=$(ls "$cache/$1"_*.deb | head -1)
	fi
	echo "$deb"
}
kernel_deb=$(fetch "$kernel_pkg")
busybox_deb=$(fetch busybox-static)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$kernel_deb" "$work/kernel"
dpkg-deb -x "$busybox_deb" "$work/busybox"
kver=$(ls "$work/kernel/lib/modules" | head -1)
kmods=$work/kernel/lib/modules/$kver
# The package leaves modules.dep to its install scripts.
depmod -b "$work/kernel" "$kver"

root=$work/root
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,run,etc,mnt,usr/share/udhcpc,lib/modules/"$kver"}
cp "$work/busybox/bin/busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# The wanted modules and everything they depend on, from the kernel's modules.dep.
declare -A seen=()
want() {
	local name=${1//-/_} line path dep
	line=$(awk -v n="$name" -F: '{ f = $1; sub(/.*\//, "", f); sub(/\.ko.*/, "", f); gsub(/-/, "_", f); if (f == n) { print; exit } }' "$kmods/modules.dep")
	[ -n "$line" ] || return 0 # built into the kernel, or not in this kernel
	path=${line%%:*}
	[ -z "${seen[$path]:-}" ] || return 0
	seen[$path]=1
	for dep in ${line#*:}; do
		dep=${dep##*/}
		want "${dep%%.ko*}"
	done
}
for m in "${modules[@]}"; do want "$m"; done
for path in "${!seen[@]}"; do
	dest=$root/lib/modules/$kver/${path%%.ko*}.ko
	mkdir -p "$(dirname "$dest")"
	case $path in
	*.ko.xz) xz -dc "$kmods/$path" >"$dest" ;;
	*.ko.zst) zstd -qdc "$kmods/$path" >"$dest" ;;
	*.ko.gz) gzip -dc "$kmods/$path" >"$dest" ;;
	*) cp "$kmods/$path" "$dest" ;;
	esac
done
cp "$kmods"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/" 2>/dev/null || true
depmod -b "$root" "$kver"

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/bin/bcd" ./bcd

cat >"$root/usr/share/udhcpc/default.script" <<'SCRIPT'
#!/bin/sh
# Applies a DHCP lease to the interface: address, default route, resolvers.
case "$1" in
bound|renew)
	ip addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	for r in $router; do ip route add default via "$r" dev "$interface"; break; done
	: >/etc/resolv.conf
	for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
	;;
deconfig) ip addr flush dev "$interface" ;;
esac
SCRIPT
chmod 0755 "$root/usr/share/udhcpc/default.script"

cat >"$root/init" <<SCRIPT
#!/bin/sh
# The ramdisk's init: file systems, drivers, a DHCP lease, then bcd in ramdisk mode
# reading the kernel command line (which carries the ramdisk token, registry and pins).
# The kernel starts init without a PATH (busybox's shell would export a default of its
# own): this one says where bcd looks up programs (dcgmi, nv-hostengine).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
# The firmware's TPM event log, for measured boot's tpm.quote.
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
for m in ${modules[*]}; do modprobe -q "\$m" 2>/dev/null; done
# An extra initrd's hooks (loading its driver's modules, say), in name order.
for hook in /etc/ramdisk.d/*; do [ -x "\$hook" ] && "\$hook"; done
ip link set lo up
for dev in /sys/class/net/*; do
	name=\${dev##*/}
	[ -e "\$dev/device" ] || continue
	ip link set "\$name" up
	udhcpc -q -n -t 5 -s /usr/share/udhcpc/default.script -i "\$name" && break
done
/bin/bcd ramdisk
echo "bcd ramdisk exited (\$?); a shell for the console"
exec setsid cttyhack sh
SCRIPT
chmod 0755 "$root/init"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -9 >"$out/initrd.img"
cp "$work/kernel/boot/vmlinuz-$kver" "$out/vmlinuz"
(cd "$out" && sha256sum vmlinuz initrd.img >SHA256SUMS)
echo "ramdisk: kernel $kver, ${#seen[@]} modules; $(du -h "$out/initrd.img" | cut -f1) initrd in $out/"
