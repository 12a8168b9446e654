#!/bin/sh
# Runs a program from a copy of its file: `go test -exec scripts/run-copied.sh`
# runs a test binary as an installed program runs, for a benchmark that reads
# its own memory (scripts/build.sh says why a just-linked file costs more).
set -u
dir=$(mktemp -d) || exit 1
prog="$dir/$(basename "$1")"
cp "$1" "$prog" || exit 1
shift
"$prog" "$@"
status=$?
rm -rf "$dir"
exit "$status"
