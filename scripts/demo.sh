#!/usr/bin/env bash
# `make demo`: a registry on an embedded store in a temporary directory, the operator's
# first steps against it, then (as root) a qemu VM provisioned end to end. It tells what
# it does as numbered phases, each with what it is for and how long it took, and prints
# every line as it happens, to a terminal or a file alike. The README's transcript is
# what it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
bc=bin/better-compute
dir=$(mktemp -d /tmp/better-compute-demo.XXXXXX)
pids=()
finish() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	echo
	echo "demo data left in $dir"
}
trap finish EXIT
tty=0
[ -t 1 ] && tty=1

phase=0 phase_start=$SECONDS demo_start=$SECONDS
end_phase() { if ((phase)); then echo "   ($((SECONDS - phase_start)) s)"; fi; }
# phase TITLE: WHAT starts the next numbered phase.
phase() {
	end_phase
	phase=$((phase + 1)) phase_start=$SECONDS
	local title=${1%%: *} what=${1#*: }
	echo
	if ((tty)); then printf '\033[1m%d. %s\033[0m\n' "$phase" "$title"; else printf '%d. %s\n' "$phase" "$title"; fi
	[ "$what" = "$1" ] || echo "   $what"
}
# step CMD... shows a command, then runs it with its output indented.
step() {
	printf '   $ %s\n' "$*"
	local rc=0
	"$@" 2>&1 | sed -u 's/^/     /' || rc=$?
	return "$rc"
}
# live LABEL LOG CMD... runs CMD with its output in LOG, showing how long it has run
# and its last line: rewritten in place on a terminal, a line every 10 s in a file.
live() {
	local label=$1 log=$2 pid start=$SECONDS last=-1 line
	shift 2
	: >"$log" # there before the first look at it, whenever the command starts
	"$@" >>"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		line=$(tail -n 1 "$log" | tr -d '\r' | cut -c1-70) || line=
		if ((tty)); then
			printf '\r\033[K   %s %3d s  %s' "$label" $((SECONDS - start)) "$line"
		elif (((SECONDS - start) / 10 != last)); then
			last=$(((SECONDS - start) / 10))
			printf '   %s %3d s  %s\n' "$label" $((SECONDS - start)) "$line"
		fi
		sleep 1
	done
	((tty)) && printf '\r\033[K'
	if ! wait "$pid"; then
		echo "   $label failed; the end of $log:"
		tail -n 30 "$log" | sed 's/^/     /'
		return 1
	fi
	echo "   $label: done in $((SECONDS - start)) s"
}

phase "Start the registry: better-compute serve on an embedded store (bbolt) in $dir"
$bc serve --data-dir "$dir" --listen 127.0.0.1:0 --agent-listen 127.0.0.1:0 >"$dir/serve.out" 2>"$dir/serve.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/admin.conf" ] && grep -q '^try:' "$dir/serve.out" && break; sleep 0.1; done
sed 's/^/   /' "$dir/serve.out"
export BC_CONFIG=$dir/admin.conf

phase "A tenant and its credential: tenant acme, and a credential that may only manage and read profiles"
step $bc tenants create acme
step $bc credentials create --tenant acme --actions compute:profiles:manage,compute:profiles:read --out "$dir/acme.conf"
export BC_CONFIG=$dir/acme.conf

phase "A profile: the recipe of a GPU host (examples/ubuntu-gpu-host.json), checked, stored as version 1 (private to acme) and rendered into the steps a deploy would run"
step $bc profiles validate --file examples/ubuntu-gpu-host.json
step $bc profiles create examples/ubuntu-gpu-host.json
step $bc profiles render ubuntu-24.04-gpu-host

phase "A broken copy: a timeout that is not a duration and a step that does not exist; validate lists every problem with its path, create refuses it and stores nothing"
sed -e 's/"30m"/"soon"/' -e 's/"boot.cleanUp"/"boot.cleanup"/' examples/ubuntu-gpu-host.json >"$dir/broken.json"
step $bc profiles validate --file "$dir/broken.json" || true
step $bc profiles create "$dir/broken.json" || true
step $bc profiles list

if [ "$(id -u)" != 0 ]; then
	end_phase
	echo
	echo "The rest provisions a qemu VM end to end in network namespaces, which needs root:"
	echo "run \`make demo\` as root to see it."
	exit 0
fi
kill "${pids[@]}" && wait "${pids[@]}" 2>/dev/null || true
pids=()

phase "Install what a VM needs: qemu, iPXE, dnsmasq, GRUB and friends from Debian (.ci/deps.sh; waits for another apt's lock)"
live "installing packages" "$dir/deps.log" ./.ci/deps.sh

phase "Build the PXE ramdisk: Debian's kernel and modules, busybox and a static bcd (make ramdisk, packages cached); and the end-to-end test that drives the VM"
live "building the ramdisk" "$dir/ramdisk.log" env RAMDISK_CACHE=/var/cache/better-compute-test/ramdisk-debs ./scripts/make-ramdisk.sh
live "compiling the test" "$dir/compile.log" go test -c -o "$dir/vm.test" ./e2e/vm/

# The VM test tells its phases in $dir/story (BC_E2E_STORY); its own output goes to a log.
story=$dir/story keep=$dir/vm-registry
: >"$story"
mkdir -m 0700 "$keep"
(cd e2e/vm && BC_E2E_STORY=$story BC_E2E_KEEP=$keep BC_E2E_RAMDISK=$OLDPWD/out/ramdisk \
	exec "$dir/vm.test" -test.count=1 -test.v -test.timeout=15m -test.run='^TestVMDeploy$') >"$dir/vm-test.log" 2>&1 &
test_pid=$!
pids+=("$test_pid")
while IFS= read -r line; do
	case $line in
	"phase: "*) phase "${line#phase: }" ;;
	*) printf '%s\n' "$line" ;;
	esac
done < <(tail -n +1 -f --pid="$test_pid" "$story")
pids=()
if ! wait "$test_pid"; then
	end_phase
	echo
	echo "The VM run failed; its log is $dir/vm-test.log. What failed:"
	grep -E '_test\.go:[0-9]+: |--- FAIL' "$dir/vm-test.log" | head -n 20 | sed 's/^ */   /'
	exit 1
fi

phase "Look at what it made: the registry the VM run used, started again on its data directory, and the commands that show the node, its workflow and its inventory"
$bc serve --data-dir "$keep" --listen 127.0.0.1:0 --agent-listen 127.0.0.1:0 >"$keep/serve.out" 2>"$keep/serve.log" &
pids+=($!)
for _ in $(seq 100); do grep -q '^try:' "$keep/serve.out" 2>/dev/null && break; sleep 0.1; done
export BC_CONFIG=$keep/admin.conf
node=$($bc nodes list --format json | sed -n 's/.*"id": "\(nd_[0-9a-f]*\)".*/\1/p' | head -n 1)
workflow=$($bc nodes get "$node" --format json | sed -n 's/.*"workflowId": "\(wf_[0-9a-f]*\)".*/\1/p' | head -n 1)
step $bc nodes get "$node"
step $bc workflows get "$workflow"
step $bc nodes inventory "$node"
end_phase
echo
echo "The whole demo took $((SECONDS - demo_start)) s. To look again later:"
echo "   $bc serve --data-dir $keep --listen 127.0.0.1:7443 &"
echo "   export BC_CONFIG=$keep/admin.conf"
echo "   $bc nodes get $node"
echo "   $bc workflows get $workflow"
echo "   $bc nodes inventory $node"
