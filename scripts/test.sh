#!/usr/bin/env bash
# Runs every check CI runs: formatting, vet and the whole test suite with
# the race detector. The first run compiles SQLite twice (normal and -race),
# which takes a few minutes; later runs are cached.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
echo "test.sh: gofmt" >&2
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
beat= progress=
trap 'if [ -n "$beat" ]; then kill "$beat"; fi; rm -rf "$progress"' EXIT
# go vet says nothing while it compiles: a line every minute says it runs.
began=$SECONDS
(while sleep 60; do echo "test.sh: go vet still runs after $(((SECONDS - began) / 60))m" >&2; done) &
beat=$!
echo "test.sh: go vet ./... (with a cold build cache it compiles SQLite first: about 3 minutes on 2 cores)" >&2
go vet ./...
kill "$beat"
beat=
# The suite runs through scripts/testprogress: each package prints as it
# finishes (ok or FAIL with its time, a failure with all its failed tests'
# output), and at least once a minute a line names what still runs. The
# exit code is go test's: pipefail keeps whichever of the two failed.
progress=$(mktemp -d)
go build -o "$progress/testprogress" ./scripts/testprogress
echo "test.sh: go test -race ./... (a cold cache compiles SQLite again with the race detector, about 3 more minutes; then the suite runs for several minutes)" >&2
go test -race -count=1 -timeout 15m -json ./... | "$progress/testprogress"
echo "test.sh: fuzzing (scripts/fuzz.sh)" >&2
# Then each fuzz target briefly (FUZZ_TIME, default 30000x executions; FUZZ=0
# skips this): about 30 s for 8 targets once built; fuzzing builds its own
# instrumented copies, so a cold cache adds a few minutes of compiling.
scripts/fuzz.sh
