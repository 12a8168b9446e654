#!/usr/bin/env bash
# Builds bin/agent and runs the shipped example offline: the model's side
# is replayed from examples/hello.cassette.jsonl, so no API key or network
# is needed. The workspace is a fresh temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "demo: building bin/agent; the first build compiles SQLite (cgo) and takes about 3 minutes on 2 cores, later ones seconds" >&2
scripts/build.sh
ws=$(mktemp -d)
export AGENT_HOME=${AGENT_HOME:-$ws/.agent-home}
echo "demo: replaying examples/hello.cassette.jsonl in $ws (no network, no API key)" >&2
set -x
bin/agent run --replay examples/hello.cassette.jsonl --workspace "$ws" "$(cat examples/hello.prompt)"
cat "$ws/hello.txt"
