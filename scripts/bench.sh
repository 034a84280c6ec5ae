#!/usr/bin/env bash
# Runs each benchmark beside its named peer and prints the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run='^$' -bench=. -benchtime=1x ./... | grep -E '^(Benchmark|ok|FAIL|---)' || true
