//! Several gateway replicas sharing sessions through Redis, behind nginx with the example config
//! of `deploy/nginx.conf`: real Redis, real nginx, real gateway processes, server-everything as
//! each replica's upstream and the official Python MCP client.

mod peers;

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
