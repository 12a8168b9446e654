#!/usr/bin/env bash
# Installs what the tests use beyond Go and gcc, when it is missing: tmux
# (the terminal tests drive the console in a real pseudo-terminal). On a
# machine without apt-get or root it says what is missing and goes on; the
# tests that need it then skip and say so.
set -euo pipefail

missing=()
command -v tmux >/dev/null || missing+=(tmux)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "deps.sh: missing ${missing[*]}; install them (the tests that need them skip)" >&2
  exit 0
fi
echo "deps.sh: installing ${missing[*]} with apt-get (about a minute)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq "${missing[@]}" >&2
