#!/usr/bin/env bash
# Installs, at pinned versions, the real MCP peers that the gateway's integration tests talk to:
#   .test-peers/node   @modelcontextprotocol/server-everything and playwright-core (npm)
#   .test-peers/venv   mcp (the official Python SDK) and mcp-server-time (PyPI)
#   /usr/bin/chromium  Debian's Chromium, for the console's browser tests (apt, when absent)
#   redis-server, nginx  Debian's, for the replica tests (apt, when absent)
# Idempotent: a peer already at its pinned version is left alone.
# Needs: node + npm (>= 18), python3 (>= 3.10) with the venv module.
set -euo pipefail

SERVER_EVERYTHING_VERSION="2026.8.31"
PLAYWRIGHT_CORE_VERSION="1.64.1"
# The official TypeScript SDK: its example server with an in-memory OAuth provider is the
# OAuth-protected peer of the sign-in tests.
MCP_SDK_VERSION="1.32.2"
MCP_VERSION="2.3.0"
MCP_SERVER_TIME_VERSION="2026.10.19"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${TOOLSEARCH_TEST_PEERS:-$ROOT/.test-peers}"
NODE_DIR="$PEERS/node"
VENV="$PEERS/venv"

die() {
    echo "install-test-peers: $*" >&2
    exit 1
}

command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js 18 or newer (e.g. apt-get install nodejs npm) and run again"
command -v python3 >/dev/null 2>&1 || die "python3 not found: install Python 3.10 or newer and run again"
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "python3 is $(python3 -V 2>&1); mcp-server-time needs 3.10 or newer"

mkdir -p "$NODE_DIR"

# --- npm: server-everything --------------------------------------------------
EVERYTHING_PKG="$NODE_DIR/node_modules/@modelcontextprotocol/server-everything/package.json"
PLAYWRIGHT_PKG="$NODE_DIR/node_modules/playwright-core/package.json"
SDK_PKG="$NODE_DIR/node_modules/@modelcontextprotocol/sdk/package.json"
installed_everything=""
installed_playwright=""
installed_sdk=""
if [ -f "$EVERYTHING_PKG" ]; then
    installed_everything="$(node -p "require('$EVERYTHING_PKG').version" 2>/dev/null || true)"
fi
if [ -f "$PLAYWRIGHT_PKG" ]; then
    installed_playwright="$(node -p "require('$PLAYWRIGHT_PKG').version" 2>/dev/null || true)"
fi
if [ -f "$SDK_PKG" ]; then
    installed_sdk="$(node -p "require('$SDK_PKG').version" 2>/dev/null || true)"
fi
if [ "$installed_everything" = "$SERVER_EVERYTHING_VERSION" ] && [ "$installed_playwright" = "$PLAYWRIGHT_CORE_VERSION" ] && [ "$installed_sdk" = "$MCP_SDK_VERSION" ]; then
    echo "server-everything $SERVER_EVERYTHING_VERSION, @modelcontextprotocol/sdk $MCP_SDK_VERSION and playwright-core $PLAYWRIGHT_CORE_VERSION already installed"
else
    cat >"$NODE_DIR/package.json" <<JSON
{
  "name": "toolsearch-test-peers",
  "private": true,
  "dependencies": {
    "@modelcontextprotocol/server-everything": "$SERVER_EVERYTHING_VERSION",
    "@modelcontextprotocol/sdk": "$MCP_SDK_VERSION",
    "playwright-core": "$PLAYWRIGHT_CORE_VERSION"
  }
}
JSON
    echo "installing @modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION, @modelcontextprotocol/sdk@$MCP_SDK_VERSION and playwright-core@$PLAYWRIGHT_CORE_VERSION ..."
    (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error --save-exact) \
        || die "npm install failed in $NODE_DIR (is the npm registry reachable?)"
fi
EVERYTHING_JS="$NODE_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
[ -f "$EVERYTHING_JS" ] || die "server-everything entry point missing at $EVERYTHING_JS"

# --- PyPI: mcp + mcp-server-time -----------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    echo "creating venv $VENV ..."
    python3 -m venv "$VENV" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
fi
have_versions() {
    "$VENV/bin/python" - "$MCP_VERSION" "$MCP_SERVER_TIME_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    ok = version("mcp") == sys.argv[1] and version("mcp-server-time") == sys.argv[2]
except PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if have_versions; then
    echo "mcp $MCP_VERSION and mcp-server-time $MCP_SERVER_TIME_VERSION already installed"
else
    echo "installing mcp==$MCP_VERSION mcp-server-time==$MCP_SERVER_TIME_VERSION ..."
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "mcp==$MCP_VERSION" "mcp-server-time==$MCP_SERVER_TIME_VERSION" \
        || die "pip install failed in $VENV (is PyPI reachable?)"
fi
[ -x "$VENV/bin/mcp-server-time" ] || die "mcp-server-time entry point missing at $VENV/bin/mcp-server-time"

# --- Debian: Chromium (driven by playwright-core, which downloads no browser), and Redis and nginx
# for the replica tests: each installed with apt when absent ----------------------------------
apt_updated=""
debian_package() { # PATH PACKAGE VARIABLE
    if [ -x "$1" ]; then
        echo "$2 already installed ($1)"
        return
    fi
    echo "installing $2 (Debian package) ..."
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    command -v apt-get >/dev/null 2>&1 || die "$2 is missing at $1 and apt-get is not available: install $2 and set $3 to its path"
    if [ -z "$apt_updated" ]; then
        # A failing source in the machine's apt lists must not stop the install from Debian's own.
        $sudo apt-get update -qq || echo "apt-get update reported errors; trying the install anyway" >&2
        apt_updated=1
    fi
    (DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null) \
        || die "apt-get install $2 failed (are Debian's package mirrors reachable, and are you root or a sudoer?)"
    [ -x "$1" ] || die "$2 was installed but $1 is missing; set $3 to its path"
}
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
NGINX="${NGINX:-/usr/sbin/nginx}"
debian_package "$CHROMIUM" chromium CHROMIUM
debian_package "$REDIS_SERVER" redis-server REDIS_SERVER
debian_package "$NGINX" nginx NGINX

echo
echo "test peers ready:"
echo "  server-everything $SERVER_EVERYTHING_VERSION: node $EVERYTHING_JS [stdio|streamableHttp]"
echo "  mcp-server-time $MCP_SERVER_TIME_VERSION:      $VENV/bin/mcp-server-time"
echo "  mcp (Python SDK) $MCP_VERSION:           $VENV/bin/python"
echo "  playwright-core $PLAYWRIGHT_CORE_VERSION, chromium:       $CHROMIUM"
echo "  redis-server, nginx (the replica tests):  $REDIS_SERVER, $NGINX"
