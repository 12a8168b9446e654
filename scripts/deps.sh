#!/usr/bin/env bash
# Installs what the tests use beyond Go and gcc, when it is missing:
# - tmux: the terminal tests drive the console in a real pseudo-terminal;
# - the reference MCP servers (npm @modelcontextprotocol/server-filesystem and
#   server-everything, pinned) under .cache/mcp-servers: third-party MCP servers
#   the MCP tests use (server-everything: list changes, progress, elicitation,
#   sampling, tasks and resources);
# - postgresql (the Debian package's server programs in /usr/lib/postgresql/*/bin):
#   the store's PostgreSQL tests start throwaway servers of their own (store/pgtest);
# - chromium: the web view's tests drive the page in a headless browser (e2e/web);
# - jq: the hook tests run Claude Code's documented hook scripts, which read
#   their JSON input with jq (hooks, runner, e2e).
# On a machine without apt-get, root or npm, or when an install fails, it says
# what is missing and goes on (it always exits 0); the tests that need it then
# skip and say so. When another apt-get or dpkg holds its lock, it waits for
# it, up to DEPS_LOCK_WAIT seconds (default 600).
set -euo pipefail
cd "$(dirname "$0")/.."

mcp_dir=.cache/mcp-servers
for server in filesystem@2026.8.31 everything@2026.8.31; do
  if [ ! -x "$mcp_dir/node_modules/.bin/mcp-server-${server%@*}" ]; then
    if command -v npm >/dev/null; then
      echo "deps.sh: installing the reference MCP server $server with npm (a few seconds)" >&2
      mkdir -p "$mcp_dir"
      npm install --prefix "$mcp_dir" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-$server" >&2 ||
        echo "deps.sh: npm could not install the MCP server $server; the tests with it skip" >&2
    else
      echo "deps.sh: npm is missing; the tests with the reference MCP servers skip" >&2
    fi
  fi
done

# missing lists the packages whose programs are not here.
missing() {
  command -v tmux >/dev/null || echo tmux
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || echo postgresql
  command -v chromium >/dev/null || echo chromium
  command -v jq >/dev/null || echo jq
}
mapfile -t need < <(missing)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "deps.sh: missing ${need[*]}; install them (the tests that need them skip)" >&2
  exit 0
fi
echo "deps.sh: installing ${need[*]} with apt-get (a minute or two)" >&2
export DEBIAN_FRONTEND=noninteractive
lock_wait=${DEPS_LOCK_WAIT:-600}

# apt-get update does not wait for the package lists' lock as install waits
# for dpkg's (DPkg::Lock::Timeout), so it is tried again while another apt
# holds it. A failed update still leaves the install to try with the lists
# there are.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
waited=0
until apt-get -qq update >"$log" 2>&1; do
  if ! grep -q 'Could not get lock' "$log" || [ "$waited" -ge "$lock_wait" ]; then
    cat "$log" >&2
    echo "deps.sh: apt-get update failed; trying the install with the package lists there are" >&2
    break
  fi
  [ "$waited" -eq 0 ] && echo "deps.sh: another apt-get or dpkg holds the package lists' lock; waiting up to ${lock_wait}s" >&2
  sleep 5
  waited=$((waited + 5))
done

if ! apt-get -o DPkg::Lock::Timeout="$lock_wait" install -y -qq "${need[@]}" >&2; then
  mapfile -t still < <(missing)
  [ ${#still[@]} -eq 0 ] ||
    echo "deps.sh: apt-get could not install ${still[*]} (see above); going on: the tests that need them skip and say so" >&2
fi
exit 0
