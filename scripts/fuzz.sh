#!/usr/bin/env bash
# Runs every fuzz target in the repository briefly, one after the other:
# each `func FuzzX(f *testing.F)` found in a *_test.go file is fuzzed for
# FUZZ_TIME (default 30000x: executions, about 1–4 s each here) with
# `go test -fuzz`, which takes one package and one target per run. A count,
# not a duration: with a duration, Go 1.26's fuzz coordinator can report
# its own deadline as a failure ("context deadline exceeded", no input
# written) on a loaded machine, golang/go#75804, fixed in Go 1.27. The first failure stops the script; go test has then
# written the failing input to PKG/testdata/fuzz/FuzzX/ (it prints the path),
# and `go test -run 'FuzzX/NAME' ./PKG/` replays it.
#
# FUZZ=0 or FUZZ_TIME=0 skips fuzzing (the seed corpora still run as
# ordinary tests under `go test`). FUZZ_MINIMIZE_TIME bounds how long a
# failing input is minimised (default 10s).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZ_TIME:-30000x}
if [ "${FUZZ:-1}" = 0 ] || [ "$fuzztime" = 0 ] || [ "$fuzztime" = 0s ] || [ "$fuzztime" = 0x ]; then
  echo "fuzz: skipped (FUZZ=${FUZZ:-1}, FUZZ_TIME=$fuzztime)"
  exit 0
fi

# "dir name" pairs, sorted, for every fuzz target outside testdata and bin.
targets=$(
  find . -name '*_test.go' -not -path '*/testdata/*' -not -path './bin/*' -not -path './.git/*' -not -path '*/vendor/*' -print0 |
    xargs -0 grep -H -o '^func Fuzz[A-Za-z0-9_]*(' |
    sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#' |
    sort -u
) || true
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz targets found"
  exit 0
fi

n=$(printf '%s\n' "$targets" | wc -l)
echo "fuzz: $n targets, $fuzztime each"
start=$SECONDS
while read -r dir name <&3; do
  pkg="$dir/"
  echo "fuzz: go test -run '^\$' -fuzz '^$name\$' -fuzztime $fuzztime $pkg"
  go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime "${FUZZ_MINIMIZE_TIME:-10s}" "$pkg"
done 3<<<"$targets" # fd 3: go test must not read the list from stdin
echo "fuzz: $n targets passed in $((SECONDS - start))s"
