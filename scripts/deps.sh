#!/usr/bin/env bash
# Installs what the tests use beyond Go and gcc, when it is missing:
# - tmux: the terminal tests drive the console in a real pseudo-terminal;
# - the reference MCP filesystem server (npm @modelcontextprotocol/server-filesystem,
#   pinned) under .cache/mcp-servers: a third-party MCP server the MCP tests use;
# - postgresql (the Debian package's server programs in /usr/lib/postgresql/*/bin):
#   the store's PostgreSQL tests start throwaway servers of their own (store/pgtest);
# - chromium: the web view's tests drive the page in a headless browser (e2e/web).
# On a machine without apt-get, root or npm it says what is missing and goes on;
# the tests that need it then skip and say so.
set -euo pipefail
cd "$(dirname "$0")/.."

mcp_fs_version=2026.8.31
mcp_dir=.cache/mcp-servers
if [ ! -x "$mcp_dir/node_modules/.bin/mcp-server-filesystem" ]; then
  if command -v npm >/dev/null; then
    echo "deps.sh: installing the reference MCP filesystem server $mcp_fs_version with npm (a few seconds)" >&2
    mkdir -p "$mcp_dir"
    npm install --prefix "$mcp_dir" --no-audit --no-fund --loglevel=error \
      "@modelcontextprotocol/server-filesystem@$mcp_fs_version" >&2 ||
      echo "deps.sh: npm could not install the MCP filesystem server; its test skips" >&2
  else
    echo "deps.sh: npm is missing; the test with the reference MCP server skips" >&2
  fi
fi

missing=()
command -v tmux >/dev/null || missing+=(tmux)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "deps.sh: missing ${missing[*]}; install them (the tests that need them skip)" >&2
  exit 0
fi
echo "deps.sh: installing ${missing[*]} with apt-get (a minute or two)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq "${missing[@]}" >&2
