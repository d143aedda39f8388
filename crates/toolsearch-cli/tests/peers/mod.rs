//! Where the real MCP peers of the integration tests are (installed by
//! scripts/install-test-peers.sh), and scratch space for the tests' config files.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn peers_dir() -> PathBuf {
    match std::env::var_os("TOOLSEARCH_TEST_PEERS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.test-peers"),
    }
}

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

/// A Python client script under tests/clients/.
pub fn client(name: &str) -> String {
    require(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients")
            .join(name),
        &format!("tests/clients/{name}"),
    )
}

/// A fresh directory for one test's config and switch files.
pub fn scratch(prefix: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "toolsearch-{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `s` as a TOML string literal (JSON string syntax is valid TOML).
pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
