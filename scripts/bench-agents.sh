#!/usr/bin/env bash
# Runs an agent-plane benchmark of e2e/agentplane (BenchmarkAgentSessions, or the one named
# as the first argument, BenchmarkIdleFleet) AGENTS_RUNS times in a row (5 by default),
# each in a process of its own, prints each run, then the spread (min/median/max over the
# runs) of its figures. BC_LOAD_AGENTS and the benchmark's other variables pass through
# (docs/benchmarks.md, "The agent plane"). A run that fails is named with how its process
# ended; the others still run, the spread is over those that passed, the outputs of all
# are kept and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${1:-BenchmarkAgentSessions}
case $bench in BenchmarkAgentSessions | BenchmarkIdleFleet) ;; *) echo "$bench: name BenchmarkAgentSessions or BenchmarkIdleFleet" >&2; exit 2 ;; esac
runs=${AGENTS_RUNS:-5}
case $runs in '' | *[!0-9]* | 0) echo "AGENTS_RUNS=$runs: give a number of runs, 1 or more" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -f "$work/agentplane.test"' EXIT
go test -c -o "$work/agentplane.test" ./e2e/agentplane
# Each run's whole output, its stderr too (the child processes' and the phases the
# benchmark prints), goes to $work/runN. A run that fails does not stop the others: it is
# named, with how its process ended, and the outputs are kept.
passed=() failed=()
for i in $(seq 1 "$runs"); do
	echo "== agent plane, run $i of $runs, $(date -u +%T), load: $(cut -d' ' -f1-3 /proc/loadavg)"
	start=$SECONDS
	set +e
	(cd e2e/agentplane && "$work/agentplane.test" -test.run='^$' -test.bench="^$bench\$" -test.benchtime=1x -test.timeout=60m) 2>&1 | tee "$work/run$i"
	status=${PIPESTATUS[0]}
	set -e
	if ((status == 0)); then
		passed+=("$work/run$i")
		continue
	fi
	if ((status > 128)); then
		how="killed by signal $((status - 128)) (SIG$(kill -l $((status - 128))))"
		if ((status == 137)); then how+=": the kernel's OOM killer (see dmesg) or a kill from outside"; fi
	else
		how="exit status $status (1: the benchmark failed, its message above; 2: a panic or the test timeout)"
	fi
	failed+=("run $i after $((SECONDS - start)) s: $how")
	echo "== agent plane, run $i of $runs FAILED after $((SECONDS - start)) s: $how; its output is kept in $work/run$i"
done
# Each run's figures are the value-unit pairs of its benchmark line.
cat "${passed[@]}" /dev/null | awk -v runs="${#passed[@]}" -v bench="$bench" '
$1 ~ "^" bench "(-[0-9]+)?$" {
	for (i = 3; i < NF; i += 2) {
		unit = $(i + 1)
		if (unit == "ns/op") continue
		if (!(unit in n)) order[++units] = unit
		v[unit, ++n[unit]] = $i
	}
}
END {
	printf "== agent plane: spread over %d runs (min / median / max)\n", runs
	for (u = 1; u <= units; u++) {
		unit = order[u]; k = n[unit]
		for (i = 1; i <= k; i++) s[i] = v[unit, i] + 0
		for (i = 2; i <= k; i++) for (j = i; j > 1 && s[j - 1] > s[j]; j--) { t = s[j]; s[j] = s[j - 1]; s[j - 1] = t }
		med = (k % 2) ? s[(k + 1) / 2] : (s[k / 2] + s[k / 2 + 1]) / 2
		printf "  %-30s %12.4g %12.4g %12.4g  (%d runs)\n", unit, s[1], med, s[k], k
	}
}'
if ((${#failed[@]})); then
	echo "== agent plane: ${#failed[@]} of $runs runs FAILED, their outputs kept in $work:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
rm -rf "$work"
