#!/usr/bin/env bash
# The whole test suite, as a new user and CI run it: installs the real MCP peers the integration
# tests talk to (npm and PyPI, pinned), then formatting, lints and every test of the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-test-peers.sh
cargo fmt --all --check
python3 scripts/check-module-cycles.py
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
