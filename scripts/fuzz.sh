#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded effort each: a count of inputs
# ("5000x", the default, so a loaded machine cannot turn a time limit into a failure)
# or a duration ("5m" for a long run; a target failed only by the time running out
# mid-input, with no failing input written, is no finding). Minimising each new input
# is bounded to 200 runs: go test's default, 60s an input, left some targets minimising
# instead of fuzzing.
set -euo pipefail
budget=${1:-5000x}
cd "$(dirname "$0")/.."
# inputs counts the inputs kept in a fuzz target's corpus folder (none when it is missing).
inputs() { { ls "$1" 2>/dev/null || true; } | wc -l; }
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg="./$(dirname "${file#./}")"
	for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz $pkg $target for $budget"
		corpus="$pkg/testdata/fuzz/$target"
		before=$(inputs "$corpus")
		log=$(mktemp)
		if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$budget" -fuzzminimizetime=200x "$pkg" 2>&1 | tee "$log"; then
			rm -f "$log"
			continue
		fi
		# Go 1.26's fuzzing coordinator can fail a target whose time budget ran out
		# while a worker was mid-input (go.dev/issue/75804, fixed in Go 1.27): the
		# target fails with "context deadline exceeded" and writes no failing input.
		# That is no finding; anything else, or a new input in the corpus, is one.
		after=$(inputs "$corpus")
		deadline=$(tail -n 5 "$log" | grep -c '^    context deadline exceeded$' || true)
		rm -f "$log"
		[ "$after" -eq "$before" ] && [ "$deadline" -gt 0 ] || exit 1
		echo "fuzz $pkg $target: the time budget ran out mid-input (no failing input written); going on"
	done
done
