//! Where the real MCP peers of the integration tests are: installed by
//! scripts/install-test-peers.sh into `.test-peers` at the repository root, or into
//! `$TOOLSEARCH_TEST_PEERS` (the install script honours it too); the embedding model in its `model`
//! folder (scripts/test.sh fetches it) or `$TOOLSEARCH_MODEL_DIR`. Included by the gateway's, the
//! CLI's and the embedding crate's integration tests with `#[path]`, so all find them the same way.
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

/// The official TypeScript SDK's example Streamable HTTP server
/// (`@modelcontextprotocol/sdk`, `examples/server/simpleStreamableHttp.js`).
pub fn sdk_example_server_js() -> String {
    require(
        peers_dir().join(
            "node/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js",
        ),
        "@modelcontextprotocol/sdk",
    )
}

/// server-everything over Streamable HTTP at `http://127.0.0.1:PORT/mcp`, its output discarded.
pub fn spawn_everything_http(port: u16) -> std::process::Child {
    std::process::Command::new("node")
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node must be on PATH to run server-everything")
}

/// server-everything over the legacy HTTP+SSE transport at `http://127.0.0.1:PORT/sse`, its
/// output discarded.
pub fn spawn_everything_sse(port: u16) -> std::process::Child {
    std::process::Command::new("node")
        .arg(everything_js())
        .arg("sse")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node must be on PATH to run server-everything")
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

/// The embedding model folder the tests use: `$TOOLSEARCH_MODEL_DIR`, else `model` in the peers
/// folder (where scripts/test.sh has `toolsearch model fetch` install it).
pub fn model_dir() -> PathBuf {
    match std::env::var_os("TOOLSEARCH_MODEL_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => peers_dir().join("model"),
    }
}

/// The model folder if it holds a model. Without one, a test that needs it fails when
/// `TOOLSEARCH_REQUIRE_MODEL=1` (as scripts/test.sh sets), and otherwise is skipped with a note.
pub fn model_or_skip(test: &str) -> Option<PathBuf> {
    let dir = model_dir();
    let present = ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .all(|file| dir.join(file).is_file());
    if present {
        return Some(dir);
    }
    let required = std::env::var("TOOLSEARCH_REQUIRE_MODEL").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: the embedding model is not installed at {} but TOOLSEARCH_REQUIRE_MODEL=1; run `toolsearch model fetch --dir {}` (scripts/test.sh does), then run the tests again",
        dir.display(),
        dir.display()
    );
    // Written to the stderr handle rather than with `eprintln!`, which the test harness captures
    // and hides for a passing test: a skip should be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: no embedding model at {} (run scripts/test.sh, or `toolsearch model fetch --dir {}`)",
        dir.display(),
        dir.display()
    );
    None
}

/// The folder whose node_modules holds playwright-core (the console's browser tests run there).
pub fn node_peers_dir() -> String {
    require(
        peers_dir().join("node/node_modules/playwright-core/package.json"),
        "playwright-core",
    );
    peers_dir().join("node").to_string_lossy().into_owned()
}

/// Debian's Chromium, which scripts/install-test-peers.sh installs when absent (or `$CHROMIUM`).
pub fn chromium() -> String {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    require(path, "Chromium (Debian package `chromium`)")
}

/// Debian's `redis-server`, which scripts/install-test-peers.sh installs when absent (or
/// `$REDIS_SERVER`).
pub fn redis_server() -> String {
    let path = std::env::var_os("REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
    require(path, "Redis (Debian package `redis-server`)")
}

/// Debian's `nginx`, which scripts/install-test-peers.sh installs when absent (or `$NGINX`).
pub fn nginx() -> String {
    let path = std::env::var_os("NGINX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"));
    require(path, "nginx (Debian package `nginx`)")
}

/// A free localhost port (bound, read, released), never the same twice in this process: the port
/// is free when it is picked, but its server binds it later, and two tests running at once could
/// otherwise both be handed it (the second's server then fails to bind and its test talks to the
/// first's).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        if GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
}
