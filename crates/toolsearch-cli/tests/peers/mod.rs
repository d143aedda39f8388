//! Where the real MCP peers of the integration tests are (installed by
//! scripts/install-test-peers.sh), and scratch space for the tests' config files.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "../../../../tests/support/peers.rs"]
mod peer_paths;
// Each test binary uses its own subset of these.
#[allow(unused_imports)]
pub use peer_paths::*;

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

/// The gateway over HTTP, killed when dropped.
pub struct Gateway {
    child: Child,
    pub url: String,
}

impl Gateway {
    /// The gateway's process.
    pub fn process(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `toolsearch` binary, with no API tokens from the environment.
pub fn toolsearch() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsearch"));
    command.env_remove("TOOLSEARCH_API_TOKENS");
    command
}

/// Starts `toolsearch serve --http` on a free port and waits until it listens.
pub fn serve_http(config: &Path) -> Gateway {
    let mut child = toolsearch()
        .args(["serve", "--config"])
        .arg(config)
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let line = lines
        .by_ref()
        .map(Result::unwrap)
        .find(|line| line.contains("listening on"))
        .expect("the gateway exited without listening");
    // Keep draining stderr so that the gateway never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("gateway: {line}");
        }
    });
    let url = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|url| format!("http://{url}"))
        .expect("no address on the listening line");
    Gateway { child, url }
}
