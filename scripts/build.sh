#!/usr/bin/env bash
# Builds bin/agent: one statically linked binary with SQLite inside.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${AGENT_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

mkdir -p bin
CGO_ENABLED=1 go build -trimpath \
  -tags osusergo,netgo,sqlite_omit_load_extension,urfave_cli_no_docs \
  -ldflags "-s -w -X agent/cli.version=${version} -X agent/cli.commit=${commit} -linkmode external -extldflags -static" \
  -o bin/agent .
echo "built bin/agent ${version} (${commit})" >&2
