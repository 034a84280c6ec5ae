#!/usr/bin/env bash
# The README's first command: a registry on an embedded store in a temporary directory,
# then the operator's first steps against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bc=bin/better-compute
dir=$(mktemp -d /tmp/better-compute-demo.XXXXXX)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; echo; echo "demo data left in $dir"' EXIT
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

echo "starting the registry in $dir"
$bc serve --data-dir "$dir" --listen 127.0.0.1:0 --agent-listen 127.0.0.1:0 >"$dir/serve.out" 2>"$dir/serve.log" &
pid=$!
for _ in $(seq 100); do [ -s "$dir/admin.conf" ] && grep -q listening "$dir/serve.out" && break; sleep 0.1; done
cat "$dir/serve.out"
export BC_CONFIG=$dir/admin.conf

step "make a tenant" $bc tenants create acme
step "give it a credential that may manage profiles" \
	$bc credentials create --tenant acme --actions compute:profiles:manage,compute:profiles:read --out "$dir/acme.conf"
export BC_CONFIG=$dir/acme.conf

echo
echo "The recipe of a GPU host: examples/ubuntu-gpu-host.json"
step "check it before storing it" $bc profiles validate --file examples/ubuntu-gpu-host.json
step "store it as version 1 (private to acme)" $bc profiles create examples/ubuntu-gpu-host.json
step "validate the stored version" $bc profiles validate ubuntu-24.04-gpu-host --profile-version 1
step "render the steps a deploy would run: where each runs, its timeout, its input" \
	$bc profiles render ubuntu-24.04-gpu-host

echo
echo "A broken copy: a timeout that is not a duration and a step that does not exist"
sed -e 's/"30m"/"soon"/' -e 's/"boot.cleanUp"/"boot.cleanup"/' examples/ubuntu-gpu-host.json >"$dir/broken.json"
step "validate reports every problem with its path" $bc profiles validate --file "$dir/broken.json" || true
step "create refuses it at the first one, and stores nothing" $bc profiles create "$dir/broken.json" || true
step "what acme can use: its own profiles, public ones, and the shipped ones" $bc profiles list

echo
echo "Now a machine, end to end: a qemu VM PXE-boots from bcd site, the ramdisk streams a"
echo "signed image from the site cache onto its disk, kexecs into it, and the installed OS"
echo "joins with its single-use token and converges as an active node."
if [ "$(id -u)" != 0 ]; then
	echo "(skipped: the VM runs in network namespaces, which need root)"
	exit 0
fi
./.ci/deps.sh >/dev/null
BC_E2E_SHOW=1 go test -count=1 -v -timeout 15m -run '^TestVMDeploy$' ./e2e/vm/ | grep -v '^=== RUN'
