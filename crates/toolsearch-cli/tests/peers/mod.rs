//! Where the real MCP peers of the integration tests are (installed by
//! scripts/install-test-peers.sh), and scratch space for the tests' config files.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

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

/// A fresh directory for one test's config and switch files, removed with everything in it
/// when the test drops it.
pub fn scratch(prefix: &str) -> Scratch {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "toolsearch-{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A test's scratch directory (see [`scratch`]); used as a `Path`.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `text` written to `name` in this directory; the file's path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

/// A file in a scratch directory of its own, both removed when the test drops it; used as the
/// file's `Path`.
pub struct ScratchFile {
    path: PathBuf,
    _dir: Scratch,
}

impl ScratchFile {
    /// `contents` written to `name` in a fresh scratch directory.
    pub fn new(prefix: &str, name: &str, contents: &str) -> Self {
        Self::write_in(scratch(prefix), name, contents)
    }

    /// `contents` written to `name` in `dir`, which now lives as long as the file.
    pub fn write_in(dir: Scratch, name: &str, contents: &str) -> Self {
        let path = dir.file(name, contents);
        Self { path, _dir: dir }
    }
}

impl std::ops::Deref for ScratchFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for ScratchFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
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
    /// SIGTERM first, so that the gateway stops its upstreams (an upstream with a timer of its own
    /// outlives a gateway killed outright).
    fn drop(&mut self) {
        terminate(&mut self.child, std::time::Duration::from_secs(15));
    }
}

/// Stops `child` with SIGTERM, and with SIGKILL if it has not exited within `grace`; reaps it.
pub fn terminate(child: &mut Child, grace: std::time::Duration) {
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    if terminated {
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The `toolsearch` binary, with no API tokens from the environment.
pub fn toolsearch() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsearch"));
    command.env_remove("TOOLSEARCH_API_TOKENS");
    command
}

/// Runs `toolsearch ARGS` to the end, in `dir` when given.
pub fn run_toolsearch_in(dir: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut command = toolsearch();
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command
        .args(args)
        .output()
        .expect("the toolsearch binary runs")
}

/// A finished command's stderr, as text.
/// The names of the tools a search answered (its `tools`), in order.
pub fn tool_names(found: &Value) -> Vec<&str> {
    found["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {found}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts `toolsearch serve --http` on a free port and waits until it listens.
pub fn serve_http(config: &Path) -> Gateway {
    serve_http_with_env(config, &[])
}

/// [`serve_http`] with extra environment variables for the gateway.
pub fn serve_http_with_env(config: &Path, env: &[(&str, &Path)]) -> Gateway {
    spawn_http(config, env, true)
}

/// The gateway over HTTP as a user starts it, without `--wait-for-upstreams`: returned as soon
/// as it listens, while its upstreams may still be starting.
pub fn serve_http_at_once(config: &Path) -> Gateway {
    spawn_http(config, &[], false)
}

fn spawn_http(config: &Path, env: &[(&str, &Path)], wait_for_upstreams: bool) -> Gateway {
    let mut command = toolsearch();
    for (key, value) in env {
        command.env(key, value);
    }
    command.arg("serve");
    if wait_for_upstreams {
        command.arg("--wait-for-upstreams");
    }
    command
        .arg("--config")
        .arg(config)
        .args(["--http", "127.0.0.1:0"]);
    let (child, _, url) = spawn_listening(command).into_parts();
    Gateway { child, url }
}

/// A `toolsearch serve` that said where it listens: its process, the address of its
/// `listening on http://ADDR/...` line (`127.0.0.1:PORT`; a wildcard listener is reached through
/// loopback), the URL as printed, and its log lines, collected as they come (stderr is drained so
/// that the server never blocks on a full pipe). Dropped, it stops the server (SIGTERM, so that
/// the server stops its upstreams), unless [`Listening::into_parts`] took the process.
pub struct Listening {
    child: Option<Child>,
    pub addr: String,
    pub url: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Listening {
    /// Every log line so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The process, the address and the URL, for a caller that stops the process itself.
    pub fn into_parts(mut self) -> (Child, String, String) {
        let child = self.child.take().expect("the process is taken once");
        (
            child,
            std::mem::take(&mut self.addr),
            std::mem::take(&mut self.url),
        )
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            terminate(child, std::time::Duration::from_secs(15));
        }
    }
}

/// Spawns `command` (a `toolsearch serve ... --http ADDR`) with stderr piped and waits for its
/// listening line; panics with what it wrote when it exits first. The one place the tests learn a
/// server's port.
pub fn spawn_listening(mut command: Command) -> Listening {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the toolsearch binary starts");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    let mut url = None;
    for line in lines.by_ref().map_while(Result::ok) {
        log.lock().unwrap().push(line.clone());
        if let Some(rest) = line
            .split("http://")
            .nth(1)
            .filter(|_| line.contains("listening on"))
        {
            url = rest
                .split_whitespace()
                .next()
                .map(|a| format!("http://{}", a.replace("0.0.0.0", "127.0.0.1")));
            break;
        }
    }
    let Some(url) = url else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the server exited without listening: {:?}",
            log.lock().unwrap()
        );
    };
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("server: {line}");
            keep.lock().unwrap().push(line);
        }
    });
    Listening {
        child: Some(child),
        addr,
        url,
        log,
    }
}

/// How a test's MCP client reaches the gateway.
pub enum Transport {
    /// The client starts `toolsearch serve --stdio` itself.
    Stdio,
    /// A gateway on a free HTTP port, for the client's run.
    Http,
}

/// Runs the Python client `script` (under tests/clients/) with `plan` against a gateway over
/// `transport`, connecting the moment the gateway can be reached (no waiting for its upstreams,
/// as desktop clients connect); returns its JSON report. Fails the test, with the client's output, when the
/// client fails.
pub fn run_client(script: &str, transport: Transport, config: &Path, plan: &Value) -> Value {
    run_client_with(script, transport, config, plan, &[]).0
}

/// [`run_client`] with extra environment variables for the client (and so, over stdio, for the
/// gateway it starts); returns the report and the client's stderr (over stdio, the gateway's log).
pub fn run_client_with(
    script: &str,
    transport: Transport,
    config: &Path,
    plan: &Value,
    envs: &[(&str, &str)],
) -> (Value, String) {
    let mut command = client_command(script, plan);
    command.envs(envs.iter().copied());
    let _gateway;
    match transport {
        Transport::Stdio => {
            command
                .arg("--stdio")
                .arg(env!("CARGO_BIN_EXE_toolsearch"))
                .args(["serve", "--stdio", "--config"])
                .arg(config);
        }
        Transport::Http => {
            let gateway = serve_http_at_once(config);
            command.arg("--url").arg(&gateway.url);
            _gateway = gateway;
        }
    }
    finish_client(command)
}

/// Runs the Python client `script` with `plan` against a gateway already listening at `url`.
pub fn run_client_at(script: &str, url: &str, plan: &Value) -> Value {
    let mut command = client_command(script, plan);
    command.arg("--url").arg(url);
    finish_client(command).0
}

fn client_command(script: &str, plan: &Value) -> Command {
    let mut command = Command::new(venv_python());
    command
        .arg(client(script))
        .arg("--plan")
        .arg(plan.to_string())
        .env_remove("TOOLSEARCH_API_TOKENS");
    command
}

fn finish_client(mut command: Command) -> (Value, String) {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("the client printed no JSON ({e}):\nstdout: {stdout}\nstderr: {stderr}")
    });
    assert!(
        output.status.success() && report.get("fatal").is_none(),
        "the client failed: {report}\nstderr: {stderr}"
    );
    (report, stderr.into_owned())
}

/// One HTTP/1.1 request over a fresh connection; returns the status and the body as sent.
pub fn http_raw(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// [`http_raw`], with the body parsed as JSON.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let (status, body) = http_raw(addr, method, path, token, body);
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

/// The console's view of the upstream `name` of the gateway at `addr` (no token).
pub fn upstream_view(addr: &str, name: &str) -> Value {
    let (status, upstreams) = http(addr, "GET", "/api/console/upstreams", None, None);
    assert_eq!(status, 200, "{upstreams}");
    upstreams
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no upstream {name}: {upstreams}"))
}

/// Waits until the gateway at `addr` has finished with the embedding model (every tool embedded,
/// or no model to be had); returns its `/api/status` search section.
pub fn wait_for_search(addr: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (status, body) = http(addr, "GET", "/api/status", None, None);
        assert_eq!(status, 200, "{body}");
        let search = body["search"].clone();
        if matches!(
            search["state"].as_str(),
            Some("ready" | "unavailable" | "off")
        ) {
            return search;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway's search never became ready: {search}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A gateway config with one upstream, `catalog_server.py` serving `tools` (a JSON array of MCP
/// tool definitions, written beside it) under the name `server`, every tool shown (threshold 0).
pub fn catalog_server_config(dir: &Path, server: &str, tools: &str) -> PathBuf {
    let tools_path = dir.join("tools.json");
    std::fs::write(&tools_path, tools).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.{server}]\ncommand = {python}\nargs = [{script}, {tools}]\n\n[toolSearch]\nthreshold = 0\n",
            python = toml_str(&venv_python()),
            script = toml_str(&client("catalog_server.py")),
            tools = toml_str(&tools_path.to_string_lossy()),
        ),
    )
    .unwrap();
    config
}

impl Gateway {
    /// `host:port` of the gateway's listener, for REST requests beside `/mcp`.
    pub fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }
}

/// Whether `TOOLSEARCH_MODEL_DIR` holds the embedding model; under `TOOLSEARCH_REQUIRE_MODEL` it
/// must (`scripts/test.sh` installs it).
pub fn model_installed() -> bool {
    let with_model = std::env::var_os("TOOLSEARCH_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .is_some_and(|dir| dir.join("model.safetensors").is_file());
    assert!(
        with_model || std::env::var_os("TOOLSEARCH_REQUIRE_MODEL").is_none(),
        "TOOLSEARCH_REQUIRE_MODEL is set but TOOLSEARCH_MODEL_DIR holds no model"
    );
    with_model
}

/// Waits until something accepts connections on `127.0.0.1:port`, at most 20 s.
pub fn wait_for_port(port: u16, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} does not listen on port {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A child process killed (and reaped) when dropped.
pub struct Service {
    child: Child,
    pub port: u16,
}

impl Service {
    /// The process id, for a test's client to kill it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Service {
    /// SIGTERM first: nginx's master then stops its workers (killed outright, it would leave
    /// them running).
    fn drop(&mut self) {
        terminate(&mut self.child, std::time::Duration::from_secs(10));
    }
}

/// server-everything (npm) over Streamable HTTP on a free loopback port, at
/// `http://127.0.0.1:PORT/mcp`.
pub fn start_everything_http() -> Service {
    let port = free_port();
    let service = Service {
        child: spawn_everything_http(port),
        port,
    };
    wait_for_port(port, "server-everything");
    service
}

/// The official TypeScript SDK's example server behind OAuth (`--oauth`): its MCP endpoint at
/// `http://localhost:PORT/mcp` and its authorization server (an in-memory provider that approves
/// every sign-in at once, with dynamic client registration and PKCE) on a second port. Returns
/// the service (its MCP port) and the authorization server's port.
pub fn start_sdk_oauth_server() -> (Service, u16) {
    let port = free_port();
    let auth_port = free_port();
    let child = Command::new("node")
        .arg(sdk_example_server_js())
        .arg("--oauth")
        .env("MCP_PORT", port.to_string())
        .env("MCP_AUTH_PORT", auth_port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node must be on PATH to run the SDK's example server");
    let service = Service { child, port };
    wait_for_port(port, "the SDK's example server");
    wait_for_port(auth_port, "the SDK's example authorization server");
    (service, auth_port)
}

/// An MCP server behind OAuth on the official Python SDK (tests/clients/oauth_server.py): its
/// authorization-server routes, with refresh and revocation, at `http://localhost:PORT`; access
/// tokens live `lifetime` seconds; grants and revocations are logged to `log`.
pub fn start_python_oauth_server(lifetime: u64, log: &Path) -> Service {
    let port = free_port();
    let child = Command::new(venv_python())
        .arg(client("oauth_server.py"))
        .args([port.to_string(), lifetime.to_string()])
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test peers' Python must run oauth_server.py");
    let service = Service { child, port };
    wait_for_port(port, "oauth_server.py");
    service
}

/// server-everything over the legacy HTTP+SSE transport on a free loopback port (`/sse`).
pub fn start_everything_sse() -> Service {
    let port = free_port();
    let service = Service {
        child: spawn_everything_sse(port),
        port,
    };
    wait_for_port(port, "server-everything (SSE)");
    service
}

/// A Redis server of its own on a free loopback port, with no persistence.
pub fn start_redis() -> Service {
    let port = free_port();
    let child = Command::new(redis_server())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service { child, port };
    wait_for_port(port, "redis-server");
    service
}

/// nginx on a free loopback port with the config `config` (its listen port and upstream servers
/// replaced by `port` and `backends`), run from `dir`.
pub fn start_nginx(dir: &Path, config: &str, backends: &[String]) -> Service {
    let port = free_port();
    let mut text = String::new();
    let mut servers = backends.iter();
    for line in config.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("listen ") {
            text.push_str(&format!("        listen 127.0.0.1:{port};\n"));
        } else if trimmed.starts_with("server 127.0.0.1:") {
            let rest = trimmed.split_once(' ').map_or("", |(_, r)| r);
            let options = rest.split_once(' ').map_or(";", |(_, o)| o);
            if let Some(backend) = servers.next() {
                text.push_str(&format!("        server {backend} {options}\n"));
            }
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    assert!(
        servers.next().is_none(),
        "the config has fewer servers than backends"
    );
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("nginx.conf"), text).unwrap();
    let child = Command::new(nginx())
        .arg("-p")
        .arg(dir)
        .args(["-c", "nginx.conf", "-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let service = Service { child, port };
    wait_for_port(port, "nginx");
    service
}

/// Runs the Python client `script` with one session over several gateways (`--replicas`): its
/// stream on the first, each request on the one the plan's `route` steps name.
pub fn run_client_with_replicas(script: &str, urls: &[String], plan: &Value) -> Value {
    let mut command = client_command(script, plan);
    command.arg("--replicas").arg(urls.join(","));
    finish_client(command).0
}

/// An HTTP upstream run from a script of tests/clients/ that prints its port on stdout; stopped
/// when dropped.
pub struct ScriptServer {
    child: Child,
    pub url: String,
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The hand-written Streamable HTTP upstream (tests/clients/bad_http_server.py) on `port` (0: a
/// free one), with the script's `options`.
pub fn bad_http_server(port: u16, options: &[&str]) -> ScriptServer {
    let port = port.to_string();
    let mut args = vec!["--port", port.as_str()];
    args.extend_from_slice(options);
    script_server("bad_http_server.py", &args, "/mcp")
}

/// `script` of tests/clients/ run with `args`, reached at `path` on the port it prints.
pub fn script_server(script: &str, args: &[&str], path: &str) -> ScriptServer {
    let mut child = Command::new(venv_python())
        .arg(client(script))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let port: u16 = port
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{script} printed no port ({e}): {port:?}"));
    ScriptServer {
        child,
        url: format!("http://127.0.0.1:{port}{path}"),
    }
}
