#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks use. Idempotent.
set -euo pipefail
packages=(ca-certificates openssl curl kmod)
# boot/: network namespaces (nftables drops datagrams for the loss test), real DHCP/TFTP clients, dnsmasq as the peer DHCP server, the
# iPXE binaries, qemu with its iPXE ROMs, and what scripts/ramdisk-test-image.sh uses.
packages+=(iproute2 nftables busybox-static tftp-hpa dnsmasq-base ipxe qemu-system-x86 ipxe-qemu cpio gzip)
# boot/ routed layout: ISC's DHCP relay agent between the server's segment and the racks', and ISC's client behind it.
packages+=(isc-dhcp-relay isc-dhcp-client)
# boot/tftp: atftp, a TFTP client that negotiates RFC 7440 windowsize.
packages+=(atftp)
# boot/ benchmarks: perfdhcp (kea-admin) drives DHCP; nginx serves the peer's boot files.
packages+=(kea-admin nginx)
# The ramdisk's tests, benchmark and `make ramdisk`.
packages+=(zstd qemu-utils e2fsprogs cpio kmod xz-utils)
# e2e/vm (make e2e): the OS image's partition table, its BIOS boot loader (GRUB by grub-mkimage), its EFI
# system partition (FAT, written without mounting), and the UEFI firmware with and without Secure Boot. The
# signed shim and GRUBs (shim-signed, grub-efi-amd64-signed: the disk GRUB and the network GRUB the site serves
# Secure Boot machines) the tests download and unpack, not install.
packages+=(gdisk grub-pc-bin dosfstools mtools ovmf)
# Measured boot (registry/measuredboot, hardware/tpm, e2e/vm): Debian's software TPM 2.0, its tests' machines and qemu's.
packages+=(swtpm swtpm-tools)
# bmc/redfish: OpenStack's Redfish emulator (sushy-tools, from ../shared/tools/sushy-tools) as the real
# Redfish peer, run by Debian's python3 with its fake driver and basic authentication (bcrypt).
packages+=(python3 python3-flask python3-requests python3-tenacity python3-bcrypt python3-webob)
# registry/console and e2e/deploy: the console's tests drive a headless Chromium (chromedp), with a font to render its pages.
packages+=(chromium fonts-dejavu-core)
# registry/store: the etcd store's tests start a real three-member cluster of Debian's etcd (3.4, which
# serves the v3 API the client of go.etcd.io/etcd/client/v3 speaks).
packages+=(etcd-server)
# testkit: Prometheus's promtool checks the example alerting rules and runs their unit tests, and parses the dashboard's queries.
packages+=(prometheus)
# make test-race: the race detector builds with cgo, so a C compiler and libc's headers.
packages+=(gcc libc6-dev)
# testkit/crashpoint: strace kills a test's child at a chosen system call, and records the order of its writes and fsyncs.
packages+=(strace)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	# The tests start their own servers (nginx, dnsmasq) on their own addresses: keep the
	# packages' services from starting on the host while they install.
	rcd=/usr/sbin/policy-rc.d
	if [ ! -e "$rcd" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$rcd" && chmod +x "$rcd"
		trap 'rm -f "$rcd"' EXIT
	fi
	# Another apt (a fresh machine's unattended upgrades) may hold the lock: wait for it
	# rather than fail at once.
	lock=(-o DPkg::Lock::Timeout=600)
	apt-get "${lock[@]}" update -q
	apt-get "${lock[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi
