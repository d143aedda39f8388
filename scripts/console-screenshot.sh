#!/usr/bin/env bash
# Regenerates docs/console.png, the README's picture of the console: the example gateway
# (examples/gateway.toml, its servers fetched through npx) on a free loopback port, a search in the
# playground, a screenshot taken by headless Chromium through playwright-core.
# Needs what scripts/install-test-peers.sh installs (playwright-core, chromium) and a release build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-test-peers.sh >/dev/null
cargo build --release --locked -p toolsearch-cli
PEERS="${TOOLSEARCH_TEST_PEERS:-$PWD/.test-peers}"
WORK="$(mktemp -d)"
trap 'kill "$SERVE" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# The example's filesystem server serves the directory the gateway runs in.
(cd "$WORK" && exec "$OLDPWD/target/release/toolsearch" serve --config "$OLDPWD/examples/gateway.toml" \
    --http 127.0.0.1:0 --wait-for-upstreams 2>"$WORK/serve.log") &
SERVE=$!
for _ in $(seq 1 600); do
    URL="$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.log" | head -1 || true)"
    [ -n "$URL" ] && break
    sleep 0.2
done
[ -n "$URL" ] || { cat "$WORK/serve.log" >&2; echo "the gateway did not start" >&2; exit 1; }

PLAN='[{"op": "search", "query": "read the contents of a file", "mode": "keyword"}, {"op": "screenshot", "name": "console"}]'
(cd "$PEERS/node" && node "$OLDPWD/crates/toolsearch-cli/tests/clients/console_browser.mjs" \
    --url "$URL/" --shots "$OLDPWD/docs" --plan "$PLAN" >/dev/null)
echo "wrote docs/console.png"
