#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded effort each: a count of inputs
# ("5000x", the default, so a loaded machine cannot turn a time limit into a failure)
# or a duration ("5m" for a long run). Minimising each new input is bounded to 200 runs:
# go test's default, 60s an input, left some targets minimising instead of fuzzing.
set -euo pipefail
budget=${1:-5000x}
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg="./$(dirname "${file#./}")"
	for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz $pkg $target for $budget"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$budget" -fuzzminimizetime=200x "$pkg"
	done
done
