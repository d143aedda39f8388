//! What one client can do to the server, tried on the real binary over real sockets and pipes:
//! deeply nested queries (CLI, REST, MCP over HTTP and stdio), idle and half-sent connections,
//! foreign `Host`/`Origin`, the bearer scheme's case, malformed stdio lines, and a `tools/call`
//! without a name. Every wait on the server has a generous guard so a regression fails instead of
//! hanging; no assertion is about speed.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::peers;
use peers::{everything_js, serve_http, toml_str, tool_names, toolsearch, venv_python};

/// How long a test waits on the server before calling it hung (a guard, never a measurement).
const GUARD: Duration = Duration::from_secs(60);

fn catalog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog.json")
}

fn write_config(text: &str) -> peers::ScratchFile {
    peers::ScratchFile::new("hardening-cli", "gateway.toml", text)
}

/// `toolsearch serve --rest-only` over the example catalog, killed when dropped.
struct RestServer {
    child: Child,
    addr: String,
}

impl Drop for RestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_rest(config: Option<&Path>) -> RestServer {
    serve_rest_on("127.0.0.1:0", config, &[])
}

fn serve_rest_on(listen: &str, config: Option<&Path>, extra: &[&str]) -> RestServer {
    let mut command = toolsearch();
    command
        .args(["serve", "--rest-only", "--catalog"])
        .arg(catalog())
        .args(["--http", listen])
        .args(extra);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let (child, addr, _) = peers::spawn_listening(command).into_parts();
    RestServer { child, addr }
}

/// An HTTP answer: status, headers (names lowercased) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of an SSE or JSON body.
    fn messages(&self) -> Vec<Value> {
        if self.body.trim_start().starts_with('{') {
            return vec![self.json()];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .filter(Value::is_object)
            .collect()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`); `headers` are extra lines.
/// The `Host` is the server's address unless `headers` gives one.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("no complete answer to {method} {path}: {e}"));
    parse_answer(&String::from_utf8_lossy(&raw))
}

fn parse_answer(raw: &str) -> Answer {
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {raw:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    let body = if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

const MCP_HEADERS: [(&str, &str); 1] = [("Accept", "application/json, text/event-stream")];

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "hardening-test", "version": "1"}}})
    .to_string()
}

/// `initialize` on `/mcp` with extra headers.
fn mcp_initialize(addr: &str, extra: &[(&str, &str)]) -> Answer {
    let mut headers = MCP_HEADERS.to_vec();
    headers.extend_from_slice(extra);
    http(addr, "POST", "/mcp", &headers, &initialize_body())
}

/// Whether the server has closed `stream` (EOF or reset), reading whatever it sent first.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(GUARD)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                return true
            }
            Err(_) => return false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Deeply nested queries
// ---------------------------------------------------------------------------------------------

fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}", "(".repeat(depth))
}

#[test]
fn cli_search_survives_deeply_nested_parentheses() {
    // 16,000 levels aborted the CLI with a stack overflow; the query limit is 32,768 characters.
    let query = nested(16_000, "open issue");
    let output = toolsearch()
        .arg("search")
        .arg("--catalog")
        .arg(catalog())
        .arg("--json")
        .arg(&query)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    let found: Value = serde_json::from_slice(&output.stdout).unwrap();
    // The words inside the parentheses still count (in hybrid mode the model reads them too).
    let names = tool_names(&found);
    assert!(names.contains(&"github___create_issue"), "{found}");
}

#[test]
fn rest_search_survives_deeply_nested_parentheses() {
    let server = serve_rest(None);
    let body = json!({"query": nested(4_000, "open issue"), "limit": 3}).to_string();
    let answer = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/search_tools",
        &[],
        &body,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The first hit's name, whether the answer nests the tool (`tool.name`) or flattens it.
    let first = &answer.json()["tools"][0];
    let name = first["tool"]["name"].as_str().or(first["name"].as_str());
    assert_eq!(name, Some("github___create_issue"), "{}", answer.body);
    // Still serving.
    let after = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/list_categories",
        &[],
        "",
    );
    assert_eq!(after.status, 200, "{}", after.body);
}

/// The official Python MCP client against the gateway (server-everything upstream): search_tools
/// with 4,000 nested parentheses, then an ordinary search on the same session.
fn mcp_search_survives_deeply_nested_parentheses(stdio: bool) {
    let config = write_config(&format!(
        "[mcpServers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n\n[toolSearch]\nthreshold = 5\n",
        toml_str(&everything_js())
    ));
    let plan = json!([
        {"op": "call", "name": "search_tools", "arguments": {"query": nested(4_000, "echo back a message")}},
        {"op": "call", "name": "search_tools", "arguments": {"query": "echo back a message"}}
    ]);
    let mut command = Command::new(venv_python());
    command
        .arg(peers::client("mcp_client.py"))
        .arg("--plan")
        .arg(plan.to_string())
        .env_remove("TOOLSEARCH_API_TOKENS");
    let _gateway;
    if stdio {
        command
            .arg("--stdio")
            .arg(env!("CARGO_BIN_EXE_toolsearch"))
            .args(["serve", "--stdio", "--wait-for-upstreams", "--config"])
            .arg(&config);
    } else {
        let gateway = serve_http(&config);
        command.arg("--url").arg(&gateway.url);
        _gateway = gateway;
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON from the client ({e}): {stdout}\n{stderr}"));
    assert!(
        output.status.success() && report.get("fatal").is_none(),
        "the client failed (the gateway died?): {report}\n{stderr}"
    );
    for step in report["steps"].as_array().unwrap() {
        assert_eq!(step["is_error"], false, "{step}");
        assert_eq!(
            step["json"]["tools"][0]["name"], "everything___echo",
            "{step}"
        );
    }
}

#[test]
fn mcp_search_over_http_survives_deeply_nested_parentheses() {
    mcp_search_survives_deeply_nested_parentheses(false);
}

#[test]
fn mcp_search_over_stdio_survives_deeply_nested_parentheses() {
    mcp_search_survives_deeply_nested_parentheses(true);
}

// ---------------------------------------------------------------------------------------------
// 3. Timeouts and the connection cap
// ---------------------------------------------------------------------------------------------

/// A gateway without upstreams, with the given extra config.
fn bare_gateway(extra: &str) -> peers::Gateway {
    serve_http(&write_config(&format!(
        "[mcpServers]\n\n[toolSearch]\npreset = \"search\"\n\n{extra}\n"
    )))
}

/// Idle and half-sent connections, many more than the cap: a legitimate request still gets its
/// answer, and every idle connection is closed by the server (made room for, or timed out).
#[test]
fn idle_and_half_sent_connections_are_closed_and_new_clients_served() {
    let gateway = bare_gateway("[http]\nheaderReadTimeoutSecs = 1\nmaxConnections = 4\n");
    let addr = gateway.addr();
    let mut idle = Vec::new();
    for i in 0..24 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        match i % 3 {
            // Half a request line and some headers, never finished.
            0 => stream
                .write_all(
                    b"POST /api/mcp-standard/list_categories HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                )
                .unwrap(),
            1 => stream.write_all(b"GET /api/open").unwrap(),
            // Nothing at all.
            _ => {}
        }
        idle.push(stream);
    }
    let answer = http(&addr, "POST", "/api/mcp-standard/list_categories", &[], "");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = mcp_initialize(&addr, &[]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    // A kept-alive connection that had its answer and then goes quiet is closed too.
    let mut kept_alive = TcpStream::connect(&addr).unwrap();
    kept_alive
        .write_all(
            format!("POST /api/mcp-standard/list_categories HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    kept_alive.set_read_timeout(Some(GUARD)).unwrap();
    let mut first = [0u8; 12];
    kept_alive.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200", "answered before going idle");
    idle.push(kept_alive);
    for (i, stream) in idle.iter_mut().enumerate() {
        assert!(
            closed_by_server(stream),
            "idle connection {i} was left open"
        );
    }
}

/// A body that stops arriving is answered 408 once `bodyReadTimeoutSecs` passes, and the
/// connection is closed.
#[test]
fn a_body_that_does_not_arrive_is_answered_408_and_closed() {
    let gateway = bare_gateway("[http]\nbodyReadTimeoutSecs = 1\n");
    let addr = gateway.addr();
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream
        .write_all(
            format!(
                "POST /api/mcp-standard/search_tools HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"query\": "
            )
            .as_bytes(),
        )
        .unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .expect("the server closes the connection");
    let answer = parse_answer(&String::from_utf8_lossy(&raw));
    assert_eq!(answer.status, 408, "{}", answer.body);
    assert_eq!(answer.json()["error"]["code"], "request_timeout");
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("http.bodyReadTimeoutSecs"));
}

/// At the cap with every connection busy (bodies still arriving), a new connection is answered
/// 503 and closed rather than left waiting; once the busy ones go, new clients are served (after
/// the server has seen them go: a bounded number of tries).
#[test]
fn at_the_cap_with_every_connection_busy_new_ones_get_503() {
    let gateway = bare_gateway("[http]\nmaxConnections = 2\nbodyReadTimeoutSecs = 600\n");
    let addr = gateway.addr();
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        stream.set_read_timeout(Some(GUARD)).unwrap();
        stream
            .write_all(
                format!("POST /api/mcp-standard/search_tools HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n").as_bytes(),
            )
            .unwrap();
        // `100 Continue` comes when the handler starts reading the body: the request is in
        // progress from then on.
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).expect("100 Continue");
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("100 Continue"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        stream.write_all(b"{").unwrap();
        busy.push(stream);
    }
    let refused = http(&addr, "POST", "/api/mcp-standard/list_categories", &[], "");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "unavailable");
    assert!(refused.body.contains("http.maxConnections"));
    drop(busy);
    let mut served = false;
    for _ in 0..200 {
        if http(&addr, "POST", "/api/mcp-standard/list_categories", &[], "").status == 200 {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        served,
        "new clients are served once the busy connections are gone"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. The edges agree: Host/Origin, bearer scheme, stdio errors, invalid params
// ---------------------------------------------------------------------------------------------

#[test]
fn foreign_host_or_origin_is_refused_on_mcp_and_rest() {
    let gateway = bare_gateway("");
    let addr = gateway.addr();
    let rest = |headers: &[(&str, &str)]| {
        http(
            &addr,
            "POST",
            "/api/mcp-standard/list_categories",
            headers,
            "",
        )
    };
    // Loopback names and origins pass.
    assert_eq!(mcp_initialize(&addr, &[]).status, 200);
    assert_eq!(rest(&[]).status, 200);
    let local_origin = [("Origin", "http://localhost:3000")];
    assert_eq!(mcp_initialize(&addr, &local_origin).status, 200);
    assert_eq!(rest(&local_origin).status, 200);
    let localhost = format!("localhost:{}", addr.rsplit(':').next().unwrap());
    assert_eq!(rest(&[("Host", localhost.as_str())]).status, 200);

    for headers in [
        &[("Host", "evil.example")][..],
        &[("Host", "evil.example:8787")][..],
        &[("Origin", "http://evil.example")][..],
        &[("Origin", "null")][..],
    ] {
        let mcp = mcp_initialize(&addr, headers);
        assert_eq!(mcp.status, 403, "/mcp with {headers:?}: {}", mcp.body);
        assert_eq!(mcp.json()["error"]["code"], "forbidden");
        let api = rest(headers);
        assert_eq!(api.status, 403, "REST with {headers:?}: {}", api.body);
        assert_eq!(api.json()["error"]["code"], "forbidden");
        let spec = http(&addr, "GET", "/api/openapi.json", headers, "");
        assert_eq!(spec.status, 403, "openapi with {headers:?}");
    }
    let refused = rest(&[("Origin", "http://evil.example")]);
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("http.allowedOrigins"), "{message}");
}

#[test]
fn allowed_hosts_and_origins_extend_the_loopback_rules() {
    let gateway = bare_gateway(
        "[http]\nallowedHosts = [\"tools.internal\"]\nallowedOrigins = [\"https://agent.example.com\"]\n",
    );
    let addr = gateway.addr();
    let listed = [
        ("Host", "tools.internal"),
        ("Origin", "https://agent.example.com"),
    ];
    assert_eq!(mcp_initialize(&addr, &listed).status, 200);
    assert_eq!(
        http(
            &addr,
            "POST",
            "/api/mcp-standard/list_categories",
            &listed,
            ""
        )
        .status,
        200
    );
    assert_eq!(
        mcp_initialize(&addr, &[("Origin", "https://other.example.com")]).status,
        403
    );
}

/// A listener beyond loopback (here `0.0.0.0`, reached through 127.0.0.1) takes its lists: only
/// listed Hosts when `allowedHosts` is set, and no Origin unless listed.
#[test]
fn other_listeners_apply_the_allowed_lists() {
    let config = write_config("[http]\nallowedHosts = [\"tools.example.com\"]\n");
    let server = serve_rest_on("0.0.0.0:0", Some(&config), &["--insecure-no-auth"]);
    let rest = |headers: &[(&str, &str)]| {
        http(
            &server.addr,
            "POST",
            "/api/mcp-standard/list_categories",
            headers,
            "",
        )
    };
    assert_eq!(rest(&[("Host", "tools.example.com")]).status, 200);
    assert_eq!(rest(&[("Host", "tools.example.com:8080")]).status, 200);
    let other = rest(&[("Host", "other.example.com")]);
    assert_eq!(other.status, 403, "{}", other.body);
    assert!(other.body.contains("http.allowedHosts"), "{}", other.body);
    // Not even a loopback page: beyond loopback, origins must be listed.
    let page = rest(&[
        ("Host", "tools.example.com"),
        ("Origin", "http://localhost:3000"),
    ]);
    assert_eq!(page.status, 403, "{}", page.body);
    // Probes name the address they reach as Host (a pod's IP) and hold no data: they pass.
    for probe in ["/healthz", "/readyz"] {
        let answer = http(&server.addr, "GET", probe, &[("Host", "10.1.2.3:8787")], "");
        assert_eq!(answer.status, 200, "{probe}: {}", answer.body);
    }
    // Only the probes: any other route with that Host is still refused.
    let status = http(
        &server.addr,
        "GET",
        "/api/status",
        &[("Host", "10.1.2.3:8787")],
        "",
    );
    assert_eq!(status.status, 403, "{}", status.body);
}

#[test]
fn bearer_scheme_is_case_insensitive_on_both_edges() {
    let gateway = bare_gateway("[rest]\napiTokens = [\"edge-token\"]\n");
    let addr = gateway.addr();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let value = format!("{scheme} edge-token");
        let auth = [("Authorization", value.as_str())];
        let mcp = mcp_initialize(&addr, &auth);
        assert_eq!(mcp.status, 200, "/mcp with {value}: {}", mcp.body);
        let api = http(
            &addr,
            "POST",
            "/api/mcp-standard/list_categories",
            &auth,
            "",
        );
        assert_eq!(api.status, 200, "REST with {value}: {}", api.body);
    }
    for bad in [&[("Authorization", "bearer wrong")][..], &[][..]] {
        let mcp = mcp_initialize(&addr, bad);
        assert_eq!(mcp.status, 401, "/mcp with {bad:?}");
        assert!(mcp
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")));
        let api = http(&addr, "POST", "/api/mcp-standard/list_categories", bad, "");
        assert_eq!(api.status, 401, "REST with {bad:?}");
        assert_eq!(mcp.json()["error"]["code"], api.json()["error"]["code"]);
    }
}

/// A `tools/call` without a name over Streamable HTTP is invalid params (-32602).
#[test]
fn tools_call_without_a_name_is_invalid_params_over_http() {
    let gateway = bare_gateway("");
    let addr = gateway.addr();
    let init = mcp_initialize(&addr, &[]);
    assert_eq!(init.status, 200, "{}", init.body);
    let session = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let headers = [
        MCP_HEADERS[0],
        ("Mcp-Session-Id", session.as_str()),
        ("Mcp-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let answer = http(&addr, "POST", "/mcp", &headers, &initialized);
    assert!(answer.status < 300, "{} {}", answer.status, answer.body);
    for (id, params) in [(2, json!({})), (3, json!({"arguments": {"query": "x"}}))] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
            .to_string();
        let answer = http(&addr, "POST", "/mcp", &headers, &call);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let reply = answer
            .messages()
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to id {id}: {}", answer.body));
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert!(
            reply["error"]["message"].as_str().unwrap().contains("name"),
            "{reply}"
        );
    }
}

/// An MCP session belongs to the token that opened it: the same session id with another valid
/// token is answered as an unknown session (404) on `POST`, the `GET` stream and `DELETE`, and
/// the session goes on for its own token.
#[test]
fn an_mcp_session_answers_only_the_token_that_opened_it() {
    let gateway = bare_gateway(
        r#"[[rest.tokens]]
token = "owner-token"
tools = ["a:*"]

[[rest.tokens]]
token = "other-token"
tools = ["b:*"]
"#,
    );
    let addr = gateway.addr();
    let init = mcp_initialize(&addr, &[("Authorization", "Bearer owner-token")]);
    assert_eq!(init.status, 200, "{}", init.body);
    let session = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let as_token = |token: &str| {
        vec![
            MCP_HEADERS[0],
            ("Mcp-Session-Id", session.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
            (
                "Authorization",
                if token == "owner" {
                    "Bearer owner-token"
                } else {
                    "Bearer other-token"
                },
            ),
        ]
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let answer = http(&addr, "POST", "/mcp", &as_token("owner"), &initialized);
    assert!(answer.status < 300, "{} {}", answer.status, answer.body);
    let list = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string();

    let foreign = http(&addr, "POST", "/mcp", &as_token("other"), &list(2));
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    let foreign = http(&addr, "GET", "/mcp", &as_token("other"), "");
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    let foreign = http(&addr, "DELETE", "/mcp", &as_token("other"), "");
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    // The same answer as for a session that never existed.
    let mut unknown = as_token("other");
    unknown[1] = ("Mcp-Session-Id", "no-such-session");
    let never = http(&addr, "POST", "/mcp", &unknown, &list(3));
    assert_eq!(
        (never.status, never.body.as_str()),
        (404, foreign.body.as_str())
    );

    let own = http(&addr, "POST", "/mcp", &as_token("owner"), &list(4));
    assert_eq!(own.status, 200, "{}", own.body);
    assert!(
        own.messages()
            .iter()
            .any(|m| m["id"] == 4 && m["result"]["tools"].is_array()),
        "{}",
        own.body
    );
    let closed = http(&addr, "DELETE", "/mcp", &as_token("owner"), "");
    // 204: what the official SDKs expect from a session's end (rmcp alone answers 202).
    assert_eq!(closed.status, 204, "{}", closed.body);
    let gone = http(&addr, "POST", "/mcp", &as_token("owner"), &list(5));
    assert_eq!(gone.status, 404, "{}", gone.body);
    // Ending it again, or ending one that never was, is a request on an unknown session.
    let again = http(&addr, "DELETE", "/mcp", &as_token("owner"), "");
    assert_eq!(
        (again.status, again.body.as_str()),
        (404, foreign.body.as_str())
    );
    let mut never = as_token("owner");
    never[1] = ("Mcp-Session-Id", "no-such-session");
    let never = http(&addr, "DELETE", "/mcp", &never, "");
    assert_eq!(never.status, 404, "{}", never.body);
}

/// A megabyte-long method name, resource URI or tool name, and an upstream that echoes the URI
/// to its stderr, leave a log of a few lines, each cut: text a client chooses is clipped in errors
/// and logs, so one request cannot write megabytes of log.
#[test]
fn client_chosen_text_is_clipped_in_the_log() {
    let scratch = peers::scratch("hardening-log");
    let config = scratch.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.time]\ncommand = {}\n\n[toolSearch]\npreset = \"search\"\n",
            toml_str(&peers::mcp_server_time())
        ),
    )
    .unwrap();
    let log_path = scratch.join("gateway.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = KilledOnDrop(
        toolsearch()
            .args(["serve", "--wait-for-upstreams", "--config"])
            .arg(&config)
            .args(["--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let addr = wait_for_listening_line(&log_path, &mut child.0);
    let init = mcp_initialize(&addr, &[]);
    assert_eq!(init.status, 200, "{}", init.body);
    let session = init
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let headers = [
        MCP_HEADERS[0],
        ("Mcp-Session-Id", session.as_str()),
        ("Mcp-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert!(http(&addr, "POST", "/mcp", &headers, &initialized).status < 300);
    let long = "x".repeat(1 << 20);
    let requests = [
        json!({"jsonrpc": "2.0", "id": 2, "method": long, "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
            "params": {"uri": format!("toolsearch://time/{long}")}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": long, "arguments": {}}}),
    ];
    for request in &requests {
        let answer = http(&addr, "POST", "/mcp", &headers, &request.to_string());
        assert_eq!(
            answer.status,
            200,
            "{}",
            &answer.body[..answer.body.len().min(500)]
        );
        assert!(
            answer.body.len() < 64 << 10,
            "an answer of {} bytes quotes the request whole: {}",
            answer.body.len(),
            answer
                .body
                .lines()
                .map(|line| &line[..line.len().min(200)])
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // A last request that surely logs, so the log has caught up with the three above.
    let after = http(&addr, "DELETE", "/mcp", &headers, "");
    assert_eq!(after.status, 204, "{}", after.body);
    terminate_child(&mut child.0);
    let text = std::fs::read_to_string(&log_path).unwrap();
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 8 << 10, "a log line of {longest} bytes");
    assert!(text.len() < 256 << 10, "{} bytes of log", text.len());
}

/// Waits for the gateway writing its log to `path` to say where it listens; its address.
fn wait_for_listening_line(path: &Path, child: &mut Child) -> String {
    let deadline = std::time::Instant::now() + GUARD;
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(rest) = text
            .lines()
            .find(|line| line.contains("listening on"))
            .and_then(|line| line.split("http://").nth(1))
        {
            return rest
                .split(|c: char| c == '/' || c.is_whitespace())
                .next()
                .unwrap_or_default()
                .to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the gateway exited ({status}) without listening:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the gateway did not listen within {GUARD:?}");
}

/// A child process that a failing test does not leave behind.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        terminate_child(&mut self.0);
    }
}

/// SIGTERM, then the exit.
fn terminate_child(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// The gateway on stdio, fed line by line; answers are read on a thread.
struct StdioSession {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Drop for StdioSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StdioSession {
    fn start(config: &Path) -> Self {
        let mut child = toolsearch()
            .args(["serve", "--stdio", "--wait-for-upstreams", "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message the gateway writes (its own notifications are skipped).
    fn next_answer(&mut self, after: &str) -> Value {
        loop {
            let line = self.lines.recv_timeout(GUARD).unwrap_or_else(|e| {
                panic!("no answer after {after} ({e}): the caller would wait forever")
            });
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
            if message.get("method").is_none() {
                return message;
            }
        }
    }
}

#[test]
fn malformed_stdio_lines_get_json_rpc_errors_and_the_session_goes_on() {
    let config = write_config("[mcpServers]\n\n[toolSearch]\npreset = \"search\"\n");
    let mut session = StdioSession::start(&config);
    session.send(&initialize_body());
    let init = session.next_answer("initialize");
    assert_eq!(init["id"], 1, "{init}");
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    session.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    session.send("this is not json");
    let parse = session.next_answer("a line that is not JSON");
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null, "{parse}");

    session.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#);
    let truncated = session.next_answer("a truncated message");
    assert_eq!(truncated["error"]["code"], -32700, "{truncated}");

    session.send(r#"{"jsonrpc":"1.0","id":3,"method":"tools/list"}"#);
    let invalid = session.next_answer("a message with the wrong version");
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert_eq!(invalid["id"], 3, "{invalid}");

    session.send(r#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#);
    let batch = session.next_answer("a batch");
    assert_eq!(batch["error"]["code"], -32600, "{batch}");

    session.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}"#);
    let nameless = session.next_answer("tools/call without a name");
    assert_eq!(nameless["id"], 5, "{nameless}");
    assert_eq!(nameless["error"]["code"], -32602, "{nameless}");

    // The session is still alive.
    session.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#);
    let list = session.next_answer("tools/list");
    assert_eq!(list["id"], 6, "{list}");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    // No upstreams: the offload tools alone.
    assert!(names.contains(&"read_large_output"), "{names:?}");
}

// ---------------------------------------------------------------------------------------------
// 6. The first run: what stderr says, the listening address, the session's end
// ---------------------------------------------------------------------------------------------

/// server-everything and a server whose program does not exist (given up at once).
fn everything_and_broken() -> peers::ScratchFile {
    write_config(&format!(
        "[mcpServers.everything]\ncommand = \"node\"\nargs = [{js}, \"stdio\"]\n\n\
         [mcpServers.broken]\ncommand = \"no-such-program-for-toolsearch\"\n\n\
         [supervisor]\nmaxRestarts = 0\n\n\
         [toolSearch.semantic]\nenabled = false\n",
        js = toml_str(&everything_js()),
    ))
}

/// `toolsearch serve --http 127.0.0.1:0 --wait-for-upstreams ARGS` with stderr written to a file
/// (as a desktop client or a redirect keeps it, not a terminal); returns that file's text once
/// the gateway listens (its upstreams' first starts are over by then) and has stopped.
fn first_run_log(config: &Path, args: &[&str]) -> String {
    let log = peers::ScratchFile::new("hardening-cli", "stderr.log", "");
    let mut child = toolsearch()
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--wait-for-upstreams",
            "--config",
        ])
        .arg(config)
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&*log).unwrap()))
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let text = std::fs::read_to_string(&*log).unwrap_or_default();
        if text.contains("listening on http://") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && matches!(child.try_wait(), Ok(None)),
            "the gateway did not listen: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The lines written right after the address (the console's) arrive too.
    std::thread::sleep(Duration::from_millis(500));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
    std::fs::read_to_string(&*log).unwrap()
}

/// The port of the machine-readable line `toolsearch: MCP gateway listening on http://ADDR/mcp`.
fn listening_addr(log: &str) -> String {
    log.lines()
        .find_map(|line| line.split("listening on http://").nth(1))
        .and_then(|rest| rest.split(['/', ' ', '"']).next())
        .unwrap_or_else(|| panic!("no listening line: {log}"))
        .to_string()
}

/// A first run says what happens, on stderr redirected to a file: each upstream starting, ready
/// with its tool count, or failing with the reason, and the console's address, with no colour
/// codes; `--log-format json` makes each line a JSON object; `--quiet` keeps warnings only.
#[test]
fn a_first_run_talks_in_plain_text_json_or_not_at_all() {
    let config = everything_and_broken();

    let text = first_run_log(&config, &[]);
    assert!(
        !text.contains('\u{1b}'),
        "escape codes in a log file: {text:?}"
    );
    let line = |needles: &[&str]| {
        text.lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .unwrap_or_else(|| panic!("no line with {needles:?}: {text}"))
            .to_string()
    };
    line(&["starting", "server=everything"]);
    line(&["starting", "server=broken"]);
    let ready = line(&["ready with", "server=everything"]);
    let count: usize = ready
        .split("ready with ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tool count: {ready}"));
    assert!(count > 5, "{ready}");
    assert!(
        ready.contains(&format!("ready with {count} tools")),
        "{ready}"
    );
    // The failure and its reason: the program that is missing, and what to do.
    let failed = line(&["server=broken", "no-such-program-for-toolsearch"]);
    assert!(
        failed.contains("WARN") && failed.contains("PATH"),
        "{failed}"
    );
    let addr = listening_addr(&text);
    line(&[&format!("console at http://{addr}/")]);

    let json = first_run_log(&config, &["--log-format", "json"]);
    let events: Vec<Value> = json
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |pred: &dyn Fn(&Value) -> bool| events.iter().find(|e| pred(e)).cloned();
    let ready = find(&|e| {
        e["server"] == "everything"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ready with"))
    })
    .unwrap_or_else(|| panic!("no ready event: {json}"));
    assert_eq!(ready["level"], "INFO", "{ready}");
    assert_eq!(ready["target"], "upstream", "{ready}");
    assert!(
        find(&|e| e["server"] == "broken" && e["level"] == "WARN").is_some(),
        "{json}"
    );
    // The address line is a JSON line too, and still names the address.
    let addr = listening_addr(&json);
    assert!(
        find(&|e| e["message"] == format!("console at http://{addr}/").as_str()).is_some(),
        "{json}"
    );

    let quiet = first_run_log(&config, &["--quiet"]);
    assert!(quiet.contains("listening on http://"), "{quiet}");
    for chatter in ["starting", "ready with", "console at", " INFO "] {
        assert!(
            !quiet.contains(chatter),
            "{chatter:?} under --quiet: {quiet}"
        );
    }
    assert!(quiet.contains("no-such-program-for-toolsearch"), "{quiet}");
}

/// `--http` takes a bare port (on loopback), `localhost:PORT` and an address, and refuses
/// anything else with what it accepts.
#[test]
fn http_takes_a_bare_port_localhost_or_an_address() {
    let port = peers::free_port();
    let server = serve_rest_on(&port.to_string(), None, &[]);
    assert_eq!(server.addr, format!("127.0.0.1:{port}"));
    let answer = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/list_categories",
        &[],
        "",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    drop(server);

    let server = serve_rest_on("localhost:0", None, &[]);
    assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
    drop(server);

    let server = serve_rest_on("127.0.0.1:0", None, &[]);
    assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
    drop(server);

    let out = toolsearch()
        .args(["serve", "--rest-only", "--catalog"])
        .arg(catalog())
        .args(["--http", "example.com:80"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("localhost:PORT") && err.contains("8787"),
        "{err}"
    );
}

/// The official Python SDK ends its HTTP session with `DELETE /mcp` and accepts 200, 204 or 405;
/// any other answer makes it warn "Session termination failed" on every close.
#[test]
fn the_python_client_closes_its_session_without_a_warning() {
    let config = write_config(&format!(
        "[mcpServers.everything]\ncommand = \"node\"\nargs = [{js}, \"stdio\"]\n\n\
         [toolSearch.semantic]\nenabled = false\n",
        js = toml_str(&everything_js()),
    ));
    let (report, stderr) = peers::run_client_with(
        "mcp_client.py",
        peers::Transport::Http,
        &config,
        &json!([{"op": "list"}]),
        &[],
    );
    assert!(report["steps"][0]["names"].is_array(), "{report}");
    assert!(
        !stderr.contains("Session termination failed"),
        "the client warned on closing: {stderr}"
    );
}

/// On a terminal (a pseudo-terminal from util-linux's `script`) the log is coloured, unless
/// `NO_COLOR` is set.
#[test]
fn colours_on_a_terminal_and_never_with_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux's `script` is not installed");
        return;
    }
    let config = everything_and_broken();
    let on_a_terminal = |no_color: Option<&str>| {
        let command = format!(
            "timeout 5 {} serve --config {} --http 127.0.0.1:0 --wait-for-upstreams",
            env!("CARGO_BIN_EXE_toolsearch"),
            config.display()
        );
        let mut script = Command::new("script");
        script
            .args(["-qec", &command, "/dev/null"])
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        let out = script.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = on_a_terminal(None);
    assert!(coloured.contains("ready with"), "{coloured}");
    assert!(
        coloured.contains("\u{1b}["),
        "no colour on a terminal: {coloured}"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(plain.contains("ready with"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "colour with NO_COLOR: {plain:?}");
}

// ---------------------------------------------------------------------------------------------
// No one session's input holds another session
// ---------------------------------------------------------------------------------------------

/// A session opened over `/mcp` by hand, as a raw JSON-RPC client: initialized, then one
/// request per connection.
struct RawSession {
    addr: String,
    id: String,
    /// The next request id: requests in flight at once need ids of their own.
    next: std::sync::atomic::AtomicU64,
}

impl RawSession {
    fn open(addr: &str) -> Self {
        let init = mcp_initialize(addr, &[]);
        assert_eq!(init.status, 200, "{}", init.body);
        let id = init
            .header("mcp-session-id")
            .expect("a session id")
            .to_string();
        let session = Self {
            addr: addr.to_string(),
            id,
            next: std::sync::atomic::AtomicU64::new(2),
        };
        let initialized =
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        let answer = session.post(&initialized);
        assert!(answer.status < 300, "{} {}", answer.status, answer.body);
        session
    }

    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn post(&self, body: &str) -> Answer {
        let headers = [
            MCP_HEADERS[0],
            ("Mcp-Session-Id", self.id.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ];
        http(&self.addr, "POST", "/mcp", &headers, body)
    }

    /// `tools/call` of `name`: the result's `isError` and its first text, and the result.
    fn call(&self, name: &str, arguments: Value) -> (bool, String, Value) {
        let id = self.next_id();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
        .to_string();
        let answer = self.post(&request);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let reply = answer
            .messages()
            .into_iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("no answer to the call of a {}-byte name", name.len()));
        let result = reply["result"].clone();
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        (result["isError"] == true, text.to_string(), result)
    }

    /// `prompts/get` of `name`: the JSON-RPC error's code and message.
    fn get_prompt_error(&self, name: &str) -> (i64, String) {
        let id = self.next_id();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "prompts/get",
            "params": {"name": name}})
        .to_string();
        let answer = self.post(&request);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let reply = answer
            .messages()
            .into_iter()
            .find(|m| m["id"] == id)
            .expect("an answer to prompts/get");
        let error = &reply["error"];
        (
            error["code"].as_i64().unwrap_or_default(),
            error["message"].as_str().unwrap_or_default().to_string(),
        )
    }
}

/// With 5,000 tools behind the gateway, one session sends what used to hold an async worker for
/// seconds to a minute — an unknown tool name of 300,000 characters (directly and through
/// `call_tool` and `add_tool`), a prompt name as long, and searches and reads over a 10 MB stored output — while
/// another session, the official SDK's client, lists its tools and searches. The long names are
/// refused at once with a clear error that does not echo them, the searches answer, and the
/// other session gets every answer. Search is by words here: embedding 5,000 tools would only
/// make the test slow.
#[test]
fn one_sessions_huge_input_never_holds_another_session() {
    let scratch = peers::scratch("hardening-stall");
    let verbs = ["create", "list", "update", "delete", "export"];
    let tools: Vec<Value> = (0..5_000)
        .map(|i| {
            let verb = verbs[i % verbs.len()];
            json!({
                "name": format!("{verb}_record_{i:04}"),
                "description": format!("{verb} one record of table {i}"),
                "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
            })
        })
        .collect();
    let tools_path = scratch.file("tools.json", &Value::Array(tools).to_string());
    let config = scratch.file(
        "gateway.toml",
        &format!(
            "[mcpServers.catalog]\ncommand = {python}\nargs = [{catalog}, {tools}]\n\n\
             [mcpServers.big]\ncommand = {python}\nargs = [{big}]\n\n\
             [toolSearch]\npreset = \"add\"\n\n[toolSearch.semantic]\nenabled = false\n",
            python = toml_str(&venv_python()),
            catalog = toml_str(&peers::client("catalog_server.py")),
            tools = toml_str(&tools_path.to_string_lossy()),
            big = toml_str(&peers::client("large_answer_server.py")),
        ),
    );
    let gateway = serve_http(&config);
    let addr = gateway.addr();

    // Session A stores a large output first, then sends the heavy requests side by side.
    let a = RawSession::open(&addr);
    let (failed, notice, stored) = a.call("big___large_text", json!({"megabytes": 10}));
    assert!(!failed, "{notice}");
    let handle = stored["structuredContent"]["offloaded"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("the output was not stored: {notice}"))
        .to_string();
    let long_name = format!("create_record_{}", "x".repeat(300_000));
    let heavy = std::thread::scope(|s| {
        let direct = s.spawn(|| a.call(&long_name, json!({})));
        let added = s.spawn(|| {
            a.call(
                "add_tool",
                json!({"names": ["create_record_0000", long_name]}),
            )
        });
        let through = s.spawn(|| a.call("call_tool", json!({"name": long_name})));
        let prompt = s.spawn(|| a.get_prompt_error(&format!("catalog___{long_name}")));
        let searched = s.spawn(|| {
            a.call(
                "search_large_output",
                json!({"handle": handle, "pattern": "line 10000[0-9] lorem", "mode": "regex"}),
            )
        });
        let read = s.spawn(|| {
            a.call(
                "read_large_output",
                json!({"handle": handle, "offset": 9_000_000, "length": 100}),
            )
        });
        // Session B, as desktop clients are: lists its tools, then again, and searches.
        let plan = json!([
            {"op": "list"},
            {"op": "call", "name": "search_tools", "arguments": {"query": "export record"}},
            {"op": "list"},
        ]);
        let other = peers::run_client_at("mcp_client.py", &gateway.url, &plan);
        (
            direct.join().unwrap(),
            through.join().unwrap(),
            added.join().unwrap(),
            prompt.join().unwrap(),
            searched.join().unwrap(),
            read.join().unwrap(),
            other,
        )
    });
    let (direct, through, added, prompt, searched, read, other) = heavy;

    for (what, (failed, text, _)) in [
        ("a direct call", &direct),
        ("call_tool", &through),
        ("add_tool", &added),
    ] {
        assert!(failed, "{what}: {text}");
        assert!(
            text.contains("tool name of 300014 characters is longer than the 256 allowed"),
            "{what}: {text}"
        );
        assert!(
            text.len() < 1_000,
            "{what} echoed the name: {} bytes",
            text.len()
        );
    }
    let (code, message) = prompt;
    assert_eq!(code, -32602, "{message}");
    assert!(
        message.contains("prompt name of 300024 characters is longer than the 256 allowed"),
        "{message}"
    );
    let (failed, text, _) = searched;
    assert!(!failed, "{text}");
    let found: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(found["totalMatches"], 10, "{found}");
    let (failed, text, _) = read;
    assert!(!failed, "{text}");
    let piece: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(piece["length"], 100, "{piece}");

    let steps = other["steps"].as_array().unwrap();
    for listed in [&steps[0], &steps[2]] {
        assert!(
            listed["names"]
                .as_array()
                .is_some_and(|names| names.iter().any(|n| n == "add_tool")),
            "{}",
            listed["names"]
        );
    }
    let found = &steps[1];
    assert_eq!(found["is_error"], false, "{}", found["text"]);
    assert!(
        found["json"]["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty()),
        "{}",
        found["text"]
    );
}
