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
step "list the tenants" $bc tenants list
