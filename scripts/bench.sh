#!/usr/bin/env bash
# Runs each benchmark beside its named peer and prints the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run='^$' -bench=. -skip='^BenchmarkAgentSessions$' -benchtime=1x ./... | grep -E '^(Benchmark|ok|FAIL|---)' || true
# The agent plane at scale: BC_LOAD_AGENTS sessions (10,000 by default) in agent
# processes against one registry endpoint; prints its figures (a few minutes).
go test -run='^$' -bench='^BenchmarkAgentSessions$' -benchtime=1x -timeout=60m ./e2e/agentplane
