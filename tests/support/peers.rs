//! Where the real MCP peers of the integration tests are: installed by
//! scripts/install-test-peers.sh into `.test-peers` at the repository root, or into
//! `$TOOLSEARCH_TEST_PEERS` (the install script honours it too). Included by the gateway's and the
//! CLI's integration tests with `#[path]`, so both find the peers the same way.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn peers_dir() -> PathBuf {
    match std::env::var_os("TOOLSEARCH_TEST_PEERS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.test-peers"),
    }
}

/// `path` as a string, or a failure that says how to install what is missing.
pub fn require(path: PathBuf, what: &str) -> String {
    assert!(
        path.exists(),
        "{what} is not installed (expected at {}); run scripts/install-test-peers.sh from the repository root, then run the tests again",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

pub fn everything_js() -> String {
    require(
        peers_dir().join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything",
    )
}

pub fn venv_python() -> String {
    require(
        peers_dir().join("venv/bin/python"),
        "the test venv (Python mcp SDK)",
    )
}

pub fn mcp_server_time() -> String {
    require(
        peers_dir().join("venv/bin/mcp-server-time"),
        "mcp-server-time",
    )
}
