#!/usr/bin/env bash
# Runs each benchmark beside its named peer and prints the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run='^$' -bench=. -benchtime=1x ./... | grep -E '^(Benchmark|ok|FAIL|---)' || true
# A converged host-config pass needs more than one iteration to be measured.
go test -run='^$' -bench='^BenchmarkConvergedPass$' -benchmem -benchtime=500x ./hostconverge/ | grep -E '^(Benchmark|ok|FAIL|---)' || true
