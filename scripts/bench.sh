#!/usr/bin/env bash
# Runs each benchmark beside its named peer and prints the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
# The peers and tools the benchmarks run, installed where missing: nginx beside the site
# cache (its own config, on loopback; the package's service is kept from starting while
# it is installed), and for deploy.image curl, openssl, zstd and mkfs.ext4 (e2fsprogs).
missing=()
for tool in nginx:nginx curl:curl openssl:openssl zstd:zstd mkfs.ext4:e2fsprogs; do
	if ! command -v "${tool%%:*}" >/dev/null 2>&1 && [ ! -x "/usr/sbin/${tool%%:*}" ]; then missing+=("${tool#*:}"); fi
done
if ((${#missing[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -q
	rcd=/usr/sbin/policy-rc.d made=
	if [ ! -e "$rcd" ]; then printf '#!/bin/sh\nexit 101\n' >"$rcd" && chmod +x "$rcd" && made=1; fi
	apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
	if [ -n "$made" ]; then rm -f "$rcd"; fi
fi
# BenchmarkAPI (cli) starts a three-member etcd cluster (Debian's etcd-server) and three replicas on it beside a registry on bbolt;
# its PROJECTION lines (three machines, from the CPU measured) are kept, and so is every
# benchmark's line of medians over alternating rounds.
# The boot server's DHCP rate and boot storms and the site cache run beside their peers in
# BC_BENCH_PAIRS alternating rounds (5) and print the median of the within-round ratios
# with min and max (testkit.RunPairs): the DHCP rate about 6.5 minutes, the same on a store
# already holding 5,000 leases (BC_DHCP_LEASES) about 6, each storm of 1,000 machines
# (BC_STORM_CLIENTS) 2-6 minutes, the cache half a minute. The store's day of answers
# (registry/store: BenchmarkRunEndDropsPending and BenchmarkExpiryReadsItsEntries, each
# on bbolt and etcd over 160,000 relayed commands) prints its ratios and its medians'
# line, about a minute each.
go test -run='^$' -bench=. -skip='^(BenchmarkAgentSessions|BenchmarkIdleFleet|BenchmarkReplicaSessions|BenchmarkVMWipe|BenchmarkDeployImage|BenchmarkConvergedPass)$' -benchtime=1x -timeout=60m ./... | grep -E '^(Benchmark|ok|FAIL|---)|: PROJECTION | alternating rounds; medians' || true
# deploy.image of an ext4 image built from /usr files, beside curl | tee >(openssl dgst) |
# zstd -d --sparse and zstd -d to /dev/null, five alternating rounds on tmpfs and (root) a
# loop device over a file on disk; prints the medians of the ratios with min and max.
# BC_BENCH_IMAGE_MIB and BC_BENCH_PAIRS change the image's size and the rounds.
go test -v -run='^$' -bench='^BenchmarkDeployImage$' -benchtime=1x -timeout=30m ./ramdisk/deploy/ | grep -E '^(Benchmark|ok|FAIL|---|\s+bench_test)' || true
# A converged host-config pass needs more than one iteration to be measured: 500 passes,
# shared out over the BC_BENCH_PAIRS rounds beside as many blind rewrites.
go test -run='^$' -bench='^BenchmarkConvergedPass$' -benchmem -benchtime=500x ./hostconverge/ | grep -E '^(Benchmark|ok|FAIL|---)' || true
# disk.wipe on a qemu VM's NVMe, SATA and virtio disks beside blkdiscard and dd of the
# same disks, run in the same ramdisk (five boots of the VM; several minutes, root).
go test -run='^$' -bench='^BenchmarkVMWipe$' -benchtime=1x -timeout=45m ./e2e/vm | grep -E '^(Benchmark|ok|FAIL|---|\s+bench_test)' || true
# The agent plane at scale: BC_LOAD_AGENTS sessions (10,000 by default) in agent
# processes against one registry endpoint, AGENTS_RUNS times (5); prints each run's
# figures and their spread (a few minutes a run).
./scripts/bench-agents.sh || true # it names a failed run and keeps its output
# Three registry replicas (processes) on one three-member etcd cluster under
# BC_REPLICA_AGENTS agent sessions (10,000 by default, in agent processes of 5,000): the
# connect, a NodeSpec change of every node through replica 1 until all acknowledged it,
# replica 1 killed with SIGKILL until its agents are back on the other two (they notice
# after their idle timeout: BC_REPLICA_KEEPALIVE shortens their keep-alive from 25 s), a
# change through replica 2; each phase's time with every process's CPU (a few minutes).
go test -run='^$' -bench='^BenchmarkReplicaSessions$' -benchtime=1x -timeout=60m ./e2e/agentplane | grep -vE '^(goos|goarch|pkg|cpu|PASS)' || true
# The agent plane idle: BC_LOAD_AGENTS sessions pinging every BC_LOAD_KEEPALIVE (25s) beside
# quic-go connections kept alive as often, IDLE_RUNS times (3); a few minutes a run.
AGENTS_RUNS=${IDLE_RUNS:-3} ./scripts/bench-agents.sh BenchmarkIdleFleet
