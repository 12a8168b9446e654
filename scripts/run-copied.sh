#!/bin/sh
# Runs a program from a copy of its file: `go test -exec scripts/run-copied.sh`
# runs a test binary as an installed program would run. The file the linker
# writes is mapped in 2 MiB pieces by every process that runs it, several
# MiB more resident memory than a copy, which a benchmark reading its own
# memory would count (scripts/build.sh installs bin/agent as a copy too).
set -u
dir=$(mktemp -d) || exit 1
cp "$1" "$dir/$(basename "$1")" || exit 1
prog="$dir/$(basename "$1")"
shift
"$prog" "$@"
status=$?
rm -rf "$dir"
exit "$status"
