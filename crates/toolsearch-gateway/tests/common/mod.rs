//! Helpers shared by the integration tests: where the real peers are, and starting them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use toolsearch_core::CatalogPolicy;
use toolsearch_gateway::config::ServerConfig;
use toolsearch_gateway::{ServerState, SupervisorOptions, UpstreamManager};

/// Upper bound on any single wait, only so that a broken test fails instead of hanging.
pub const GUARD: Duration = Duration::from_secs(120);

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,upstream=info".into()),
        )
        .with_test_writer()
        .try_init();
}

#[path = "../../../../tests/support/peers.rs"]
mod peer_paths;
// Each test binary uses its own subset of these.
#[allow(unused_imports)]
pub use peer_paths::*;

pub fn paged_server_py() -> String {
    require(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/paged_server.py"),
        "tests/peers/paged_server.py",
    )
}

pub fn stdio(command: &str, args: &[&str]) -> ServerConfig {
    ServerConfig {
        command: Some(command.to_string()),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..ServerConfig::default()
    }
}

pub fn http(url: &str) -> ServerConfig {
    ServerConfig {
        url: Some(url.to_string()),
        headers: BTreeMap::from([("X-Test-Header".to_string(), "toolsearch".to_string())]),
        ..ServerConfig::default()
    }
}

pub fn everything_stdio() -> ServerConfig {
    stdio("node", &[&everything_js(), "stdio"])
}

pub fn time_stdio() -> ServerConfig {
    stdio(&mcp_server_time(), &["--local-timezone", "UTC"])
}

pub fn paged_stdio() -> ServerConfig {
    stdio(&venv_python(), &[&paged_server_py()])
}

pub fn options() -> SupervisorOptions {
    SupervisorOptions {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        max_restarts: None,
        startup_timeout: Duration::from_secs(60),
        call_timeout: Duration::from_secs(60),
    }
}

pub fn start(servers: Vec<(&str, ServerConfig)>, options: SupervisorOptions) -> UpstreamManager {
    init_logs();
    UpstreamManager::start_with(
        servers
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect(),
        CatalogPolicy::default(),
        options,
    )
}

pub async fn guard<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(GUARD, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no progress within {GUARD:?}"),
    }
}

pub async fn wait_ready(manager: &UpstreamManager, server: &str) {
    let state = guard(
        &format!("waiting for `{server}` to be ready"),
        manager.wait_for_state(server, |s| {
            matches!(s, ServerState::Ready | ServerState::Failed { .. })
        }),
    )
    .await
    .unwrap();
    assert_eq!(state, ServerState::Ready, "server `{server}` did not start");
}

/// An MCP server over Streamable HTTP at `http://127.0.0.1:PORT/mcp`; killed on drop.
pub struct HttpServer {
    child: Child,
    port: u16,
    pub url: String,
}

impl HttpServer {
    /// server-everything on a free port.
    pub async fn everything() -> Self {
        Self::everything_on(free_port()).await
    }

    /// server-everything on `port`.
    pub async fn everything_on(port: u16) -> Self {
        let child = spawn_everything_http(port);
        Self::listening(child, port, "server-everything").await
    }

    /// The paged test server (tests/peers/paged_server.py), with an event store so that its
    /// streams can be resumed.
    pub async fn paged() -> Self {
        let port = free_port();
        let child = Command::new(venv_python())
            .arg(paged_server_py())
            .args(["http", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test peers' Python must run paged_server.py");
        Self::listening(child, port, "paged_server.py").await
    }

    async fn listening(child: Child, port: u16, what: &str) -> Self {
        let server = Self {
            child,
            port,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        guard(&format!("waiting for {what} to listen"), async {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server now (as a crash would).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Text of the first text content of a call result.
pub fn first_text(result: &toolsearch_gateway::rmcp::model::CallToolResult) -> String {
    let value = serde_json::to_value(result).unwrap();
    value["content"]
        .as_array()
        .and_then(|c| c.iter().find_map(|b| b["text"].as_str()))
        .unwrap_or_default()
        .to_string()
}
