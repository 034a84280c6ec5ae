#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 5s).
set -euo pipefail
fuzztime=${1:-5s}
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg="./$(dirname "${file#./}")"
	for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz $pkg $target for $fuzztime"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"
	done
done
