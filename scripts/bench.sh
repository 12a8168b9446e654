#!/usr/bin/env bash
# Benchmarks the static binary and the daemon's hot paths. Each prints what
# it measured:
#   - agent run --json, one write_file call, instant fake model: median/p90
#     wall time and peak RSS (targets <= 50 ms, <= 25 MB; Codex CLI 0.7 s /
#     146 MB, Claude Code 0.87 s / 223 MB);
#   - the harness's own overhead per phase on a 20-phase plan (<= 30 ms);
#   - gateway event fan-out to 100 and 1,000 clients (p50/p99, events/s) and
#     the gateway's idle RSS (<= 30 MB; OpenClaw idles at about 0.8 GB);
#   - the scheduler with 10,000 jobs: idle CPU and p99 dispatch lateness
#     (takes about a minute and a half; skip with BENCH_SCHEDULER=0);
#   - store and model-client micro-benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
bin="$PWD/bin/agent"
AGENT_BIN="$bin" go test -run '^$' -bench 'BenchmarkRunOneTool' -benchtime "${BENCH_RUNS:-50}x" -count 1 .
AGENT_BIN="$bin" go test -run '^$' -bench 'BenchmarkHarnessPhaseOverhead' -benchtime "${BENCH_HARNESS_RUNS:-10}x" -count 1 .
AGENT_BIN="$bin" go test -run '^$' -bench 'BenchmarkGatewayIdleRSS' -benchtime 3x -count 1 .
go test -run '^$' -bench 'BenchmarkFanout' -count 1 ./gateway/
if [ "${BENCH_SCHEDULER:-1}" != 0 ]; then
  go test -run '^$' -bench 'BenchmarkEngine10kJobs' -benchtime 1x -count 1 -timeout 10m ./scheduler/
fi
go test -run '^$' -bench . -benchtime 200x ./store/ ./llm/
