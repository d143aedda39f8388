//! Several gateway replicas sharing sessions through Redis, behind nginx with the example config
//! of `deploy/nginx.conf`: real Redis, real nginx, real gateway processes, server-everything as
//! each replica's upstream and the official Python MCP client.

use crate::peers;

use std::path::{Path, PathBuf};

use peers::{
    everything_js, http_raw, scratch, serve_http, start_nginx, start_redis, toml_str, Gateway,
};
use serde_json::{json, Value};

fn config(dir: &Path, redis: &str) -> PathBuf {
    let text = format!(
        r#"[mcpServers.everything]
command = "node"
args = [{everything}, "stdio"]

[toolSearch]
threshold = 5
preset = "progressive"

[toolSearch.semantic]
enabled = false

[toolSearch.offload]
thresholdBytes = 500

[state]
redis = {redis}
"#,
        everything = toml_str(&everything_js()),
        redis = toml_str(redis),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn example_nginx_config() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nginx.conf");
    std::fs::read_to_string(path).unwrap()
}

fn metric(gateway: &Gateway, line_start: &str) -> f64 {
    let (status, body) = http_raw(&gateway.addr(), "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn full(step: &Value, tool: &str) -> bool {
    step["tools"][tool]["inputSchema"]["properties"].is_object()
}

#[test]
fn three_replicas_behind_nginx_serve_one_session_and_outlive_a_killed_replica() {
    let dir = scratch("replicas");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let mut replicas: Vec<Gateway> = (0..3).map(|_| serve_http(&config)).collect();
    let backends: Vec<String> = replicas.iter().map(Gateway::addr).collect();
    let nginx = start_nginx(&dir.join("nginx"), &example_nginx_config(), &backends);
    let victim = dir.join("victim.pid");
    std::fs::write(&victim, replicas[2].process().id().to_string()).unwrap();

    let big = "x".repeat(2000);
    let report = peers::run_client_at(
        "mcp_client.py",
        &format!("http://127.0.0.1:{}/mcp", nginx.port),
        &json!([
            {"op": "list"},
            {"op": "call", "name": "tool_search", "arguments": {"query": "echo"}},
            {"op": "wait_list_changed"},
            {"op": "list"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": big}, "save": "h"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 0, "length": 12}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 6, "length": 4}},
            {"op": "kill_pidfile", "path": victim.to_string_lossy()},
            {"op": "call", "name": "tool_search", "arguments": {"query": "get-sum"}},
            {"op": "list"},
            {"op": "call", "name": "everything___get-sum", "arguments": {"a": 2, "b": 3}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 2000, "length": 100}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": "after"}}
        ]),
    );
    let step = |i: usize| &report["steps"][i];
    assert!(!full(step(0), "everything___echo"), "a stub at first");
    assert!(step(1)["json"]["loaded"]
        .as_array()
        .unwrap()
        .contains(&json!("everything___echo")));
    assert!(step(2)["list_changed"].as_u64().unwrap() >= 1);
    assert!(full(step(3), "everything___echo"), "revealed: {}", step(3));
    assert!(
        step(4)["structured"]["offloaded"]["handle"].is_string(),
        "{}",
        step(4)
    );
    assert_eq!(step(5)["json"]["text"], "Echo: xxxxxx");
    assert_eq!(step(6)["json"]["text"], "xxxx");
    assert!(step(7)["killed"].as_u64().is_some());
    // After the kill: the session, its reveals and its stored output live on.
    assert!(step(8)["json"]["loaded"]
        .as_array()
        .unwrap()
        .contains(&json!("everything___get-sum")));
    assert!(full(step(9), "everything___get-sum"), "{}", step(9));
    assert!(full(step(9), "everything___echo"), "{}", step(9));
    assert!(
        step(10)["text"].as_str().unwrap().contains('5'),
        "{}",
        step(10)
    );
    assert_eq!(step(11)["json"]["text"], "xxxxxx");
    assert_eq!(step(12)["text"], "Echo: after");

    // Every surviving replica served the session: opened it, or restored it from Redis.
    for replica in &replicas[..2] {
        let started = metric(replica, "toolsearch_sessions_started_total{how=\"opened\"}")
            + metric(
                replica,
                "toolsearch_sessions_started_total{how=\"restored\"}",
            );
        assert!(started >= 1.0, "a replica never served the session");
        assert_eq!(
            metric(replica, "toolsearch_state_store_up{store=\"redis\"}"),
            1.0
        );
    }
    let restored: f64 = replicas[..2]
        .iter()
        .map(|r| metric(r, "toolsearch_sessions_started_total{how=\"restored\"}"))
        .sum();
    assert!(restored >= 1.0, "no replica restored the session");
    drop(nginx);
    replicas.clear();
}

#[test]
fn without_redis_the_gateway_says_so_and_refuses_sessions_at_once() {
    let dir = scratch("replicas-down");
    // A port nothing listens on.
    let port = peers::free_port();
    let config = config(&dir, &format!("redis://127.0.0.1:{port}"));
    let gateway = serve_http(&config);
    let addr = gateway.addr();

    let (status, body) = http_raw(&addr, "GET", "/metrics", None, None);
    assert_eq!(status, 200);
    assert!(
        body.contains("toolsearch_state_store_up{store=\"redis\"} 0"),
        "{body}"
    );
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    });
    let (status, body) = http_raw(&addr, "POST", "/mcp", None, Some(&initialize.to_string()));
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains(&format!("Redis at redis://127.0.0.1:{port}")),
        "{body}"
    );
    assert!(body.contains("check that it is running"), "{body}");
}

/// A client on protocol 2026-07-28 has no session: every request may land on another replica.
/// What it finds comes back in full from `tool_search`, it calls that by name, and its large
/// outputs are kept for its token and read on any replica.
#[test]
fn a_client_without_sessions_is_served_by_any_replica() {
    let dir = scratch("replicas-sessionless");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let replicas: Vec<Gateway> = (0..3).map(|_| serve_http(&config)).collect();
    let backends: Vec<String> = replicas.iter().map(Gateway::addr).collect();
    let nginx = start_nginx(&dir.join("nginx"), &example_nginx_config(), &backends);
    let big = "y".repeat(2000);
    let report = peers::run_client_at(
        "offload_client.py",
        &format!("http://127.0.0.1:{}/mcp", nginx.port),
        &json!([
            {"op": "list", "mode": "auto"},
            {"op": "call", "name": "tool_search", "arguments": {"query": "get-sum"}},
            {"op": "call", "name": "everything___get-sum", "arguments": {"a": 20, "b": 22}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": big}, "save": "h"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 0, "length": 8}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 2000, "length": 8}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "yyyy", "max_matches": 1}},
            {"op": "list"}
        ]),
    );
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps[0]["protocol"], "2026-07-28", "{}", steps[0]);
    let found = &steps[1]["json"]["tools"][0];
    assert_eq!(found["name"], "everything___get-sum", "{}", steps[1]);
    assert!(found["inputSchema"]["properties"].is_object(), "{found}");
    assert!(
        steps[2]["text"].as_str().unwrap().contains("42"),
        "{}",
        steps[2]
    );
    assert!(steps[3]["structured"]["offloaded"]["handle"].is_string());
    assert_eq!(steps[4]["json"]["text"], "Echo: yy", "{}", steps[4]);
    assert_eq!(steps[5]["json"]["text"], "yyyyyy", "{}", steps[5]);
    assert_eq!(steps[6]["is_error"], false, "{}", steps[6]);
    // Its tool list never depends on earlier calls.
    assert_eq!(steps[7]["names"], steps[0]["names"]);
    let restored: f64 = replicas
        .iter()
        .map(|r| metric(r, "toolsearch_sessions_started_total{how=\"restored\"}"))
        .sum();
    assert_eq!(restored, 0.0, "no session to restore");
    drop(nginx);
}

/// One session spread over three replicas by hand: its stream on the first, each step on the
/// replica it names. What a step on one replica changes reaches the client's stream on another.
#[test]
fn notifications_reach_the_replica_holding_the_stream() {
    let dir = scratch("replicas-routed");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let mut replicas: Vec<Gateway> = (0..3).map(|_| serve_http(&config)).collect();
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    let victim = dir.join("victim.pid");
    std::fs::write(&victim, replicas[1].process().id().to_string()).unwrap();
    let subscribed = "toolsearch://everything/demo://resource/static/document/architecture.md";
    let big = "z".repeat(2000);
    let report = peers::run_client_with_replicas(
        "mcp_client.py",
        &urls,
        &json!([
            {"op": "route", "to": 1},
            {"op": "list"},
            {"op": "call", "name": "tool_search", "arguments": {"query": "echo"}},
            {"op": "wait_list_changed"},
            {"op": "route", "to": 2},
            {"op": "list"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": big}, "save": "h"},
            {"op": "route", "to": 0},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 0, "length": 8}},
            {"op": "route", "to": 1},
            {"op": "subscribe", "uri": subscribed},
            {"op": "call", "name": "everything___toggle-subscriber-updates"},
            {"op": "wait_updated", "uri": subscribed},
            {"op": "kill_pidfile", "path": victim.to_string_lossy()},
            {"op": "route", "to": 2},
            {"op": "list"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 2000}}
        ]),
    );
    let step = |i: usize| &report["steps"][i];
    assert!(!full(step(1), "everything___echo"));
    // Revealed on replica 1; the stream is on replica 0.
    assert!(
        step(3)["list_changed"].as_u64().unwrap() >= 1,
        "{}",
        step(3)
    );
    assert!(full(step(5), "everything___echo"), "{}", step(5));
    assert_eq!(step(8)["json"]["text"], "Echo: zz", "{}", step(8));
    // Subscribed on replica 1, whose upstream sends the updates; the stream is on replica 0.
    assert!(
        step(12)["updated"]
            .as_array()
            .is_some_and(|u| u.contains(&json!(subscribed))),
        "{}",
        step(12)
    );
    assert!(step(13)["killed"].as_u64().is_some());
    assert!(full(step(15), "everything___echo"), "{}", step(15));
    assert_eq!(step(16)["json"]["text"], "zzzzzz", "{}", step(16));
    // The client ended its session on replica 2 as it left: replica 0, which opened it and held
    // its stream, closes its copy too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while metric(&replicas[0], "toolsearch_sessions_open") > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "replica 0 kept a session its client ended on replica 2"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    replicas.clear();
}

/// With search by meaning on, a replica takes the tool vectors another computed from Redis
/// instead of embedding the catalog again (each replica here has a disk cache of its own).
#[test]
fn replicas_share_tool_vectors() {
    if peers::model_or_skip("replicas_share_tool_vectors").is_none() {
        return;
    }
    let dir = scratch("replicas-vectors");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("enabled = false", "enabled = true");
    std::fs::write(&config, text).unwrap();
    let vectors = |gateway: &Gateway, source: &str| {
        metric(
            gateway,
            &format!("toolsearch_tool_vectors_total{{source=\"{source}\"}}"),
        )
    };
    let ready = |gateway: &Gateway| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let (_, body) = http_raw(&gateway.addr(), "GET", "/api/status", None, None);
            let status: Value = serde_json::from_str(&body).unwrap();
            if status["search"]["state"] == "ready" {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "search by meaning never became ready: {body}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let cache = |name: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    };
    let first = peers::serve_http_with_env(&config, &[("XDG_CACHE_HOME", &cache("cache-1"))]);
    ready(&first);
    let computed = vectors(&first, "model");
    assert!(
        computed >= 16.0,
        "the first replica embeds its catalog: {computed}"
    );
    assert_eq!(vectors(&first, "replicas"), 0.0);

    let second = peers::serve_http_with_env(&config, &[("XDG_CACHE_HOME", &cache("cache-2"))]);
    ready(&second);
    // Later passes (each re-index) find them in its own disk cache.
    assert_eq!(vectors(&second, "model"), 0.0, "nothing embedded again");
    assert_eq!(vectors(&second, "replicas"), computed);
}

/// The per-session bounds on large outputs hold in Redis: the oldest output is dropped there, so
/// a replica that did not store it cannot read it either.
#[test]
fn outputs_in_redis_keep_the_session_bounds() {
    let dir = scratch("replicas-bounds");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "thresholdBytes = 500",
        "thresholdBytes = 500\nmaxOutputsPerSession = 2",
    );
    std::fs::write(&config, text).unwrap();
    let replicas: Vec<Gateway> = (0..2).map(|_| serve_http(&config)).collect();
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    let echo = |c: &str, save: &str| json!({"op": "call", "name": "everything___echo", "arguments": {"message": c.repeat(1000)}, "save": save});
    let read = |handle: &str| json!({"op": "call", "name": "read_large_output", "arguments": {"handle": handle, "length": 7}});
    let report = peers::run_client_with_replicas(
        "mcp_client.py",
        &urls,
        &json!([
            {"op": "call", "name": "tool_search", "arguments": {"query": "echo"}},
            echo("a", "a"),
            echo("b", "b"),
            echo("c", "c"),
            {"op": "route", "to": 1},
            read("$a"),
            read("$b"),
            read("$c")
        ]),
    );
    let step = |i: usize| &report["steps"][i];
    assert_eq!(step(5)["is_error"], true, "dropped: {}", step(5));
    assert_eq!(step(6)["json"]["text"], "Echo: b", "{}", step(6));
    assert_eq!(step(7)["json"]["text"], "Echo: c", "{}", step(7));
}

/// Redis dying under an open session: its calls fail at once with an error that names Redis,
/// rather than hang or act on state that may be stale.
#[test]
fn when_redis_dies_calls_fail_with_an_error_naming_it() {
    let dir = scratch("replicas-redis-dies");
    let redis = start_redis();
    let config = config(&dir, &format!("redis://127.0.0.1:{}", redis.port));
    let gateway = serve_http(&config);
    let pidfile = dir.join("redis.pid");
    std::fs::write(&pidfile, redis.pid().to_string()).unwrap();
    let report = peers::run_client_at(
        "mcp_client.py",
        &gateway.url,
        &json!([
            {"op": "call", "name": "tool_search", "arguments": {"query": "echo"}},
            {"op": "kill_pidfile", "path": pidfile.to_string_lossy()},
            {"op": "call", "name": "tool_search", "arguments": {"query": "sum"}}
        ]),
    );
    let step = |i: usize| &report["steps"][i];
    assert_eq!(step(0)["is_error"], false, "{}", step(0));
    assert_eq!(step(2)["is_error"], true, "{}", step(2));
    let text = step(2)["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("Redis at redis://127.0.0.1:{}", redis.port)),
        "{text}"
    );
    let (_, metrics) = http_raw(&gateway.addr(), "GET", "/metrics", None, None);
    assert!(
        metrics.contains("toolsearch_state_store_up{store=\"redis\"} 0"),
        "{metrics}"
    );
}

/// A gateway config with API tokens (`(name, token)`, in this order) and `extra` settings, over
/// Redis when `redis` is given.
fn token_config(
    dir: &Path,
    file: &str,
    redis: Option<&str>,
    tokens: &[(&str, &str)],
    extra: &str,
) -> PathBuf {
    let mut text = format!(
        r#"[mcpServers.everything]
command = "node"
args = [{everything}, "stdio"]

[toolSearch.semantic]
enabled = false

{extra}
"#,
        everything = toml_str(&everything_js()),
    );
    if let Some(redis) = redis {
        text.push_str(&format!("\n[state]\nredis = {}\n", toml_str(redis)));
    }
    for (name, token) in tokens {
        text.push_str(&format!(
            "\n[[rest.tokens]]\nname = \"{name}\"\ntoken = \"{token}\"\n"
        ));
    }
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

/// One MCP request over a fresh connection as a Streamable HTTP client sends it; returns the
/// status, the `Mcp-Session-Id` answered (if any) and the body.
fn mcp_post(
    addr: &str,
    token: &str,
    session: Option<&str>,
    message: &Value,
) -> (u16, Option<String>, String) {
    use std::io::{Read, Write};
    let body = message.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(session) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    head.push_str("\r\n");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let session = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_string())
    });
    (status, session, body.to_string())
}

/// Opens an MCP session with `token` and finishes its handshake; returns its id.
fn open_session(addr: &str, token: &str) -> String {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}
    });
    let (status, session, body) = mcp_post(addr, token, None, &initialize);
    assert_eq!(status, 200, "{body}");
    let session = session.expect("initialize answered without Mcp-Session-Id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = mcp_post(addr, token, Some(&session), &initialized);
    assert_eq!(status, 202, "{body}");
    session
}

/// `tools/list` on `session` with `token`: the status, and the body.
fn list_tools(addr: &str, token: &str, session: &str) -> (u16, String) {
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, _, body) = mcp_post(addr, token, Some(session), &list);
    (status, body)
}

/// Whether `session` serves `token`'s `tools/list`.
fn serves(addr: &str, token: &str, session: &str) -> bool {
    let (status, body) = list_tools(addr, token, session);
    match status {
        200 => {
            assert!(
                body.contains("tool_search") || body.contains("\"tools\""),
                "{body}"
            );
            true
        }
        404 => false,
        other => panic!("tools/list answered {other}: {body}"),
    }
}

/// Whether `session` still serves `token`'s `tools/list` while it is being ended: a request the
/// end overtakes gets its stream closed before the answer (the client's next request on the
/// session gets the 404), which counts as ended.
fn still_serves(addr: &str, token: &str, session: &str) -> bool {
    let (status, body) = list_tools(addr, token, session);
    match status {
        200 => body.contains("\"jsonrpc\""),
        404 => false,
        other => panic!("tools/list answered {other}: {body}"),
    }
}

/// Opens the `GET` stream of `session` and keeps it open: its status, the connection (to hold
/// it), and the body of a refusal.
fn hold_stream(addr: &str, token: &str, session: &str) -> (u16, std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut received = Vec::new();
    let mut byte = [0u8; 1];
    while !received.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "the stream closed before its headers"
        );
        received.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&received).into_owned();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = String::new();
    if status != 200 {
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut bytes = vec![0u8; length];
        stream.read_exact(&mut bytes).unwrap();
        body = String::from_utf8_lossy(&bytes).into_owned();
    }
    (status, stream, body)
}

fn metric_with(gateway: &Gateway, token: &str, line_start: &str) -> f64 {
    let (status, body) = http_raw(&gateway.addr(), "GET", "/metrics", Some(token), None);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

const ALPHA: &str = "alpha-token-5b1f0c";
const BETA: &str = "beta-token-9e2d47";
const GAMMA: &str = "gamma-token-31aa8e";

/// A session belongs to its token, not to the token's place in the list: replicas whose lists
/// are in another order (a rolling update) agree, and removing a token ends its sessions without
/// handing anyone else's to another token.
#[test]
fn sessions_belong_to_their_token_whatever_the_order_of_the_list() {
    let dir = scratch("replicas-token-order");
    let redis = start_redis();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let first = serve_http(&token_config(
        &dir,
        "ab.toml",
        Some(&url),
        &[("a", ALPHA), ("b", BETA)],
        "",
    ));
    let second = serve_http(&token_config(
        &dir,
        "ba.toml",
        Some(&url),
        &[("b", BETA), ("a", ALPHA)],
        "",
    ));
    let (one, two) = (first.addr(), second.addr());

    let of_alpha = open_session(&one, ALPHA);
    let of_beta = open_session(&one, BETA);
    // On the replica with the list the other way round, each session is still its token's.
    assert!(!serves(&two, BETA, &of_alpha), "B was handed A's session");
    assert!(serves(&two, ALPHA, &of_alpha));
    assert!(!serves(&two, ALPHA, &of_beta), "A was handed B's session");
    assert!(serves(&two, BETA, &of_beta));

    // A is revoked: [A, B] becomes [B, C] on a new replica.
    let third = serve_http(&token_config(
        &dir,
        "bc.toml",
        Some(&url),
        &[("b", BETA), ("c", GAMMA)],
        "",
    ));
    let three = third.addr();
    assert!(!serves(&three, GAMMA, &of_beta), "C was handed B's session");
    assert!(serves(&three, BETA, &of_beta), "B's session stays B's");
    assert!(
        !serves(&three, GAMMA, &of_alpha),
        "C was handed A's session"
    );
    assert!(!serves(&three, BETA, &of_alpha));
    // A's session ended everywhere: the replicas that still accept A no longer know it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while still_serves(&two, ALPHA, &of_alpha) || still_serves(&one, ALPHA, &of_alpha) {
        assert!(
            std::time::Instant::now() < deadline,
            "a session of a revoked token lived on"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(serves(&one, BETA, &of_beta));
}

/// A token at `http.maxSessionsPerToken` that opens one more loses its least recently used
/// session, never another token's: in one process, and across replicas sharing Redis.
#[test]
fn a_token_past_its_session_limit_loses_its_own_oldest_session() {
    let dir = scratch("replicas-session-limit");
    let limit = "[http]\nmaxSessionsPerToken = 3\n";
    let tokens = [("a", ALPHA), ("b", BETA)];
    let redis = start_redis();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let alone = serve_http(&token_config(&dir, "memory.toml", None, &tokens, limit));
    let shared: Vec<Gateway> = (0..2)
        .map(|i| {
            serve_http(&token_config(
                &dir,
                &format!("redis-{i}.toml"),
                Some(&url),
                &tokens,
                limit,
            ))
        })
        .collect();
    for (what, addrs) in [
        ("in process", vec![alone.addr(), alone.addr()]),
        ("with Redis", shared.iter().map(Gateway::addr).collect()),
    ] {
        let (here, there) = (&addrs[0], &addrs[1]);
        let of_beta = open_session(here, BETA);
        let first = open_session(here, ALPHA);
        let second = open_session(there, ALPHA);
        let third = open_session(here, ALPHA);
        // The first is used again, so the second is now the least recently used.
        assert!(serves(there, ALPHA, &first), "{what}");
        let fourth = open_session(here, ALPHA);
        // Ended: 404, or, while its end is still under way, a stream closed before the answer.
        assert!(
            !still_serves(here, ALPHA, &second),
            "{what}: the least recently used ends"
        );
        assert!(
            !still_serves(there, ALPHA, &second),
            "{what}: ended on every replica"
        );
        for session in [&first, &third, &fourth] {
            assert!(serves(there, ALPHA, session), "{what}");
        }
        assert!(
            serves(there, BETA, &of_beta),
            "{what}: another token's session stays"
        );
        let evicted = metric_with(
            &alone,
            ALPHA,
            "toolsearch_sessions_evicted_total{reason=\"token_limit\"}",
        ) + shared
            .iter()
            .map(|g| {
                metric_with(
                    g,
                    ALPHA,
                    "toolsearch_sessions_evicted_total{reason=\"token_limit\"}",
                )
            })
            .sum::<f64>();
        assert!(evicted >= 1.0, "{what}: evictions are counted");
    }
}

/// A token holding `http.maxStreamsPerToken` GET streams is told so (429, naming the setting) on
/// one more; another token still connects, lists tools and holds its stream.
#[test]
fn a_token_at_its_stream_limit_gets_429_and_others_still_connect() {
    let dir = scratch("streams-limit");
    let config = token_config(
        &dir,
        "streams.toml",
        None,
        &[("a", ALPHA), ("b", BETA)],
        "[http]\nmaxStreamsPerToken = 2\n",
    );
    let gateway = serve_http(&config);
    let addr = gateway.addr();
    let mut held = Vec::new();
    for _ in 0..2 {
        let session = open_session(&addr, ALPHA);
        let (status, stream, body) = hold_stream(&addr, ALPHA, &session);
        assert_eq!(status, 200, "{body}");
        held.push(stream);
    }
    let one_more = open_session(&addr, ALPHA);
    let (status, _refused, body) = hold_stream(&addr, ALPHA, &one_more);
    assert_eq!(status, 429, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("http.maxStreamsPerToken"), "{message}");
    assert_eq!(error["jsonrpc"], "2.0", "{body}");
    // Its requests other than streams still work.
    assert!(serves(&addr, ALPHA, &one_more));

    let of_beta = open_session(&addr, BETA);
    assert!(serves(&addr, BETA, &of_beta));
    let (status, _beta_stream, body) = hold_stream(&addr, BETA, &of_beta);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        metric_with(
            &gateway,
            BETA,
            "toolsearch_limit_refusals_total{limit=\"streams\"}"
        ),
        1.0
    );
    assert_eq!(metric_with(&gateway, BETA, "toolsearch_streams_held"), 3.0);
    // A stream given up frees its slot.
    drop(held.pop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, stream, _) = hold_stream(&addr, ALPHA, &one_more);
        if status == 200 {
            drop(stream);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a closed stream kept its slot"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Requests whose body never arrives hold their connections only up to the token's share
/// (`http.maxRequestsPerToken`): past it the token is answered 429 at once, and another token is
/// served; a stalled body is given up after `http.bodyStallTimeoutSecs` with 408.
#[test]
fn stalled_bodies_of_one_token_leave_room_for_others() {
    use std::io::{Read, Write};
    let dir = scratch("requests-limit");
    let config = token_config(
        &dir,
        "requests.toml",
        None,
        &[("a", ALPHA), ("b", BETA)],
        "[http]\nmaxRequestsPerToken = 2\nbodyStallTimeoutSecs = 1\n",
    );
    let gateway = serve_http(&config);
    let addr = gateway.addr();
    let stalled = |token: &str| {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{"
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream
    };
    let mut held: Vec<_> = (0..2).map(|_| stalled(ALPHA)).collect();
    // The two stalled requests are in progress once the third is refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        let (status, _, body) = mcp_post(&addr, ALPHA, None, &initialize);
        if status == 429 {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never refused: {status} {body}"
        );
    };
    assert!(refused.contains("http.maxRequestsPerToken"), "{refused}");
    let of_beta = open_session(&addr, BETA);
    assert!(serves(&addr, BETA, &of_beta));
    // The stalled bodies are given up: 408, and the token's slots are free again.
    for stream in &mut held {
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    let of_alpha = open_session(&addr, ALPHA);
    assert!(serves(&addr, ALPHA, &of_alpha));
}

/// `DELETE` of `session` with `token`: the status.
fn mcp_delete(addr: &str, token: &str, session: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Waits until `gateway` counts at least `resting` sessions resting (the state this test is
/// about, reached `http.sessionRestAfterSecs` after a session's last request).
fn wait_resting(gateway: &Gateway, token: &str, resting: f64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while metric_with(gateway, token, "toolsearch_sessions_resting ") < resting {
        assert!(
            std::time::Instant::now() < deadline,
            "no session rested within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An idle session rests (`http.sessionRestAfterSecs`) and comes back as it was on its next
/// request: its reveals, its tools answering, its token alone; a session holding its `GET`
/// stream does not rest; a resting session ends on `DELETE`. In process and over Redis.
#[test]
fn idle_sessions_rest_and_come_back_as_they_were() {
    let dir = scratch("sessions-rest");
    let settings = "[toolSearch]\npreset = \"add\"\n\n[http]\nsessionRestAfterSecs = 1\n";
    let tokens = [("a", ALPHA), ("b", BETA)];
    let redis = start_redis();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let alone = serve_http(&token_config(&dir, "memory.toml", None, &tokens, settings));
    let shared = serve_http(&token_config(
        &dir,
        "redis.toml",
        Some(&url),
        &tokens,
        settings,
    ));
    for (what, gateway) in [("in process", &alone), ("with Redis", &shared)] {
        let addr = gateway.addr();
        let listening = open_session(&addr, ALPHA);
        let (status, _stream, body) = hold_stream(&addr, ALPHA, &listening);
        assert_eq!(status, 200, "{what}: {body}");
        let session = open_session(&addr, ALPHA);
        let add = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "add_tool", "arguments": {"names": ["everything___echo"]}}});
        let (status, _, body) = mcp_post(&addr, ALPHA, Some(&session), &add);
        assert_eq!(status, 200, "{what}: {body}");
        let (_, listed) = list_tools(&addr, ALPHA, &session);
        assert!(listed.contains("everything___echo"), "{what}: {listed}");

        wait_resting(gateway, ALPHA, 1.0);
        // The session holding its stream stays connected; both still count as open.
        assert_eq!(
            metric_with(gateway, ALPHA, "toolsearch_sessions_resting "),
            1.0,
            "{what}"
        );
        assert!(
            metric_with(gateway, ALPHA, "toolsearch_sessions_open ") >= 2.0,
            "{what}"
        );
        assert!(
            !serves(&addr, BETA, &session),
            "{what}: another token cannot use a resting session"
        );
        let (status, listed) = list_tools(&addr, ALPHA, &session);
        assert_eq!(status, 200, "{what}: {listed}");
        assert!(
            listed.contains("everything___echo"),
            "{what}: the reveals came back with the session: {listed}"
        );
        let echo = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "everything___echo", "arguments": {"message": "after rest"}}});
        let (status, _, body) = mcp_post(&addr, ALPHA, Some(&session), &echo);
        assert_eq!(status, 200, "{what}: {body}");
        assert!(body.contains("Echo: after rest"), "{what}: {body}");

        wait_resting(gateway, ALPHA, 1.0);
        assert_eq!(mcp_delete(&addr, ALPHA, &session), 204, "{what}");
        assert!(
            !serves(&addr, ALPHA, &session),
            "{what}: a deleted resting session is gone"
        );
        assert_eq!(mcp_delete(&addr, ALPHA, &session), 404, "{what}");
        assert!(serves(&addr, ALPHA, &listening), "{what}");
    }
}
