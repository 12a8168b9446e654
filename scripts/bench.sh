#!/usr/bin/env bash
# Benchmarks the static binary end to end. Prints median/p90 wall time and
# peak RSS of `agent run --json` with one write_file call against an
# instant local fake model. Targets: <= 50 ms and <= 25 MB on 2 cores
# (Codex CLI: 0.7 s / 146 MB, Claude Code: 0.87 s / 223 MB on this task).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
AGENT_BIN="$PWD/bin/agent" go test -run '^$' -bench 'BenchmarkRunOneTool' -benchtime "${BENCH_RUNS:-50}x" -count 1 .
AGENT_BIN="$PWD/bin/agent" go test -run '^$' -bench 'BenchmarkHarnessPhaseOverhead' -benchtime "${BENCH_HARNESS_RUNS:-10}x" -count 1 .
go test -run '^$' -bench . -benchtime 200x ./store/ ./llm/
