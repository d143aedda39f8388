//! The web console and `/metrics` of `toolsearch serve --http`, as operators use them: the real
//! binary over real upstreams (server-everything from npm, mcp-server-time from PyPI), the console
//! driven in headless Chromium by Playwright (tests/clients/console_browser.mjs), `/metrics` read
//! by a Prometheus text-format parser while the official Python MCP client searches and calls.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use prometheus_parse::{Scrape, Value as Sample};
use serde_json::{json, Value};

use crate::peers;
use peers::{everything_js, mcp_server_time, toml_str};

/// server-everything (started through `sh`, which writes its pid and refuses to start while
/// `block` exists) and mcp-server-time.
fn config(dir: &Path, extra: &str) -> PathBuf {
    let script = format!(
        "if [ -e {block} ]; then echo blocked >&2; exit 1; fi; echo $$ > {pid}; exec node {js} stdio",
        block = dir.join("block").display(),
        pid = dir.join("everything.pid").display(),
        js = everything_js(),
    );
    let text = format!(
        "[mcpServers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {script}]\n\n\
         [mcpServers.time]\ncommand = {time}\nargs = [\"--local-timezone\", \"UTC\"]\n\n\
         [supervisor]\ninitialBackoffMs = 3000\nmaxBackoffMs = 3000\n\n{extra}\n",
        script = toml_str(&script),
        time = toml_str(&mcp_server_time()),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `/metrics`, parsed: every sample by metric name and its labels (sorted `k=v` pairs).
fn scrape(addr: &str, token: Option<&str>) -> HashMap<(String, String), f64> {
    let (status, body) = peers::http_raw(addr, "GET", "/metrics", token, None);
    assert_eq!(status, 200, "{body}");
    let parsed = Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let mut samples = HashMap::new();
    for sample in parsed.samples {
        let mut labels: Vec<String> = sample
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        let value = match sample.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => v,
            Sample::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Sample::Summary(_) => continue,
        };
        samples.insert((sample.metric, labels.join(",")), value);
    }
    samples
}

fn sample(samples: &HashMap<(String, String), f64>, metric: &str, labels: &str) -> f64 {
    samples
        .get(&(metric.to_string(), labels.to_string()))
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn metrics_move_as_searches_and_calls_happen() {
    let dir = peers::scratch("console-cli");
    let config = config(&dir, "");
    let gateway = peers::serve_http(&config);
    let addr = gateway.addr();
    let before = scrape(&addr, None);
    assert_eq!(
        sample(
            &before,
            "toolsearch_upstream_state",
            "server=time,state=ready"
        ),
        1.0,
        "{before:?}"
    );
    assert_eq!(
        sample(
            &before,
            "toolsearch_upstream_state",
            "server=time,state=failed"
        ),
        0.0
    );
    assert!(sample(&before, "toolsearch_upstream_tools", "server=everything") > 5.0);

    peers::run_client_at(
        "mcp_client.py",
        &gateway.url,
        &json!([
            {"op": "call", "name": "search_tools", "arguments": {"query": "current time in a timezone"}},
            {"op": "call", "name": "search_tools", "arguments": {"query": "qqqzzzxxyy"}},
            {"op": "call", "name": "time___get_current_time", "arguments": {"timezone": "UTC"}},
            {"op": "call", "name": "time___get_current_time", "arguments": {"timezone": "Not/AZone"}}
        ]),
    );
    let (status, _) = peers::http(
        &addr,
        "POST",
        "/api/mcp-standard/search_tools",
        None,
        Some(r#"{"query": "echo a message"}"#),
    );
    assert_eq!(status, 200);
    let after = scrape(&addr, None);
    let mcp_searches: f64 = after
        .iter()
        .filter(|((m, l), _)| m == "toolsearch_searches_total" && l.contains("face=mcp"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(mcp_searches, 2.0, "{after:?}");
    assert!(
        after
            .iter()
            .any(|((m, l), v)| m == "toolsearch_searches_total"
                && l.contains("face=rest")
                && *v == 1.0),
        "{after:?}"
    );
    assert_eq!(
        sample(&after, "toolsearch_searches_empty_total", "face=mcp"),
        1.0
    );
    assert_eq!(sample(&after, "toolsearch_calls_total", "server=time"), 2.0);
    assert_eq!(
        sample(&after, "toolsearch_call_errors_total", "server=time"),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            "toolsearch_call_duration_seconds_count",
            "server=time"
        ),
        2.0
    );
    assert_eq!(
        sample(
            &after,
            "toolsearch_search_duration_seconds_count",
            "face=mcp"
        ),
        2.0
    );

    // The same page obeys the API tokens.
    drop(gateway);
    let config = config_with_token(&dir);
    let gateway = peers::serve_http(&config);
    let addr = gateway.addr();
    let (status, _) = peers::http_raw(&addr, "GET", "/metrics", None, None);
    assert_eq!(status, 401);
    let scoped = scrape(&addr, Some("secret-token"));
    assert_eq!(
        sample(
            &scoped,
            "toolsearch_upstream_state",
            "server=time,state=ready"
        ),
        1.0
    );
}

fn config_with_token(dir: &Path) -> PathBuf {
    let sub = dir.join("with-token");
    std::fs::create_dir_all(&sub).unwrap();
    config(&sub, "[rest]\napiTokens = [\"secret-token\"]\n")
}

/// The console in a real browser: the upstreams with their states, a search in the playground
/// with its top tool and score, what the model sees, the recent searches, keyboard navigation; an
/// upstream killed turns to restarting on the page. Each page is written as a screenshot.
#[test]
fn the_console_in_a_browser() {
    let chromium = peers::chromium();
    let node_dir = peers::node_peers_dir();
    let dir = peers::scratch("console-cli");
    let config = config(&dir, "");
    let gateway = peers::serve_http(&config);
    let base = gateway.url.trim_end_matches("mcp").to_string();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let block = dir.join("block");
    std::fs::write(&block, "").unwrap();
    let plan = json!([
        {"op": "upstreams"},
        {"op": "screenshot", "name": "upstreams"},
        {"op": "catalog", "tool": "time___convert_time"},
        {"op": "screenshot", "name": "catalog"},
        {"op": "search", "query": "convert a time between timezones", "mode": "keyword"},
        {"op": "screenshot", "name": "playground"},
        {"op": "payload", "preset": "search", "format": "anthropic"},
        {"op": "screenshot", "name": "payload"},
        {"op": "searches"},
        {"op": "screenshot", "name": "searches"},
        {"op": "keyboard_tabs"},
        {"op": "kill_pidfile", "path": dir.join("everything.pid")},
        {"op": "wait_state", "server": "everything", "state": "restarting"},
        {"op": "screenshot", "name": "upstream-restarting"},
        {"op": "wait_text", "server": "everything", "text": "blocked"}
    ]);
    let output = Command::new("node")
        .arg(peers::client("console_browser.mjs"))
        .args(["--url", &base, "--shots"])
        .arg(&shots)
        .args(["--plan", &plan.to_string()])
        .env("CHROMIUM", &chromium)
        .current_dir(&node_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(output.status.success(), "{report}");
    assert_eq!(report["console_errors"], json!([]), "{report}");
    let steps = report["steps"].as_array().unwrap();

    let rows = steps[0]["rows"].as_array().unwrap();
    for server in ["everything", "time"] {
        let row = rows.iter().find(|r| r["server"] == server).unwrap();
        assert_eq!(row["state"], "ready", "{row}");
        assert!(row["tools"].as_u64().unwrap() >= 2, "{row}");
    }
    let detail = steps[2]["detail"].as_str().unwrap();
    assert!(
        detail.contains("time___convert_time")
            && detail.contains("target_timezone")
            && detail.contains("required"),
        "the tool's page shows its parameters: {detail}"
    );
    assert!(
        detail.contains("Not loaded"),
        "and its deferred stub: {detail}"
    );

    let results = steps[4]["results"].as_array().unwrap();
    assert_eq!(results[0]["name"], "time___convert_time", "{}", steps[4]);
    let score = results[0]["score"].as_f64().unwrap();
    assert!(score > 0.0 && score <= 1.0, "{}", steps[4]);
    assert!(
        results[0]["highlighted"].as_u64().unwrap() > 0,
        "{}",
        steps[4]
    );
    assert!(
        steps[4]["summary"].as_str().unwrap().contains("ms"),
        "{}",
        steps[4]
    );

    let first_tokens = steps[6]["first_tokens"].as_u64().unwrap();
    assert!(first_tokens > 100 && first_tokens < 2000, "{}", steps[6]);
    let surface_tokens = steps[6]["surface_tokens"].as_u64().unwrap();
    assert!(
        surface_tokens > first_tokens,
        "the surface counts the instructions too: {}",
        steps[6]
    );
    assert!(
        steps[6]["figures"]
            .as_str()
            .unwrap()
            .contains("every schema"),
        "{}",
        steps[6]
    );

    let logged = steps[8]["rows"].as_array().unwrap();
    assert!(
        logged
            .iter()
            .any(|r| r[2] == "convert a time between timezones" && r[1] == "console"),
        "{logged:?}"
    );
    assert_eq!(
        steps[10]["selected"],
        json!([
            "tab-catalog",
            "tab-playground",
            "tab-payload",
            "tab-searches",
            "tab-upstreams"
        ])
    );

    let rows = steps[12]["rows"].as_array().unwrap();
    let everything = rows.iter().find(|r| r["server"] == "everything").unwrap();
    assert_eq!(everything["state"], "restarting", "{everything}");
    for name in [
        "upstreams",
        "catalog",
        "playground",
        "payload",
        "searches",
        "upstream-restarting",
    ] {
        let file = shots.join(format!("{name}.png"));
        let bytes = std::fs::read(&file).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{}", file.display());
    }
    eprintln!("screenshots in {}", shots.display());
}

/// The operator's views need a token that sees every tool; a scoped token sees its own catalog.
#[test]
fn console_routes_obey_the_tokens() {
    let dir = peers::scratch("console-cli");
    let sub = dir.join("scoped");
    std::fs::create_dir_all(&sub).unwrap();
    let config = config(
        &sub,
        "[[rest.tokens]]\nname = \"admin\"\ntoken = \"admin-token\"\n\n[[rest.tokens]]\nname = \"time\"\ntoken = \"time-token\"\ntools = [\"time:*\"]\n",
    );
    let gateway = peers::serve_http(&config);
    let addr = gateway.addr();
    // The page itself holds no data and is served to anyone who can reach the listener.
    let (status, page) = peers::http_raw(&addr, "GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(page.contains("toolsearch console"), "{page}");
    let (status, _) = peers::http_raw(&addr, "GET", "/api/console/catalog", None, None);
    assert_eq!(status, 401);
    let (status, catalog) = peers::http(
        &addr,
        "GET",
        "/api/console/catalog",
        Some("time-token"),
        None,
    );
    assert_eq!(status, 200);
    let names: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("time___")),
        "{names:?}"
    );
    for path in ["/api/console/upstreams", "/api/console/searches"] {
        let (status, body) = peers::http(&addr, "GET", path, Some("time-token"), None);
        assert_eq!(status, 403, "{path}: {body}");
        let (status, _) = peers::http(&addr, "GET", path, Some("admin-token"), None);
        assert_eq!(status, 200, "{path}");
    }
}

/// "What the model sees" is the list a new session's `tools/list` returns: the preset's
/// meta-tools and every tool the gateway serves itself, the same definitions, the same bytes and
/// tokens as the official Python client receives.
#[test]
fn what_the_model_sees_is_the_real_tools_list() {
    let dir = peers::scratch("console-cli");
    let sub = dir.join("surface");
    std::fs::create_dir_all(&sub).unwrap();
    let config = config(
        &sub,
        "[toolSearch]\nthreshold = 5\n\n[toolSearch.semantic]\nenabled = false\n",
    );
    let gateway = peers::serve_http(&config);
    let addr = gateway.addr();
    let report = peers::run_client_at("mcp_client.py", &gateway.url, &json!([{"op": "list"}]));
    let listed = &report["steps"][0];
    let names: Vec<&str> = listed["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    // The meta-tools alone: the large-output and prompt tools answer through `call_tool`.
    assert_eq!(names, ["search_tools", "call_tool"]);
    let tools: Vec<Value> = names.iter().map(|n| listed["tools"][n].clone()).collect();

    let (status, view) = peers::http(&addr, "GET", "/api/console/payload?format=mcp", None, None);
    assert_eq!(status, 200, "{view}");
    let first = &view["first"];
    assert_eq!(first["preset"], "search", "{view}");
    let shown = first["payload"]["tools"].as_array().unwrap();
    let shown_names: Vec<&str> = shown.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(shown_names, names);
    assert_eq!(
        shown, &tools,
        "the console's definitions differ from tools/list"
    );
    // Counted over the same bytes: what the client received, as compact JSON.
    let received = json!({ "tools": tools }).to_string();
    assert_eq!(first["bytes"], received.len(), "{view}");
    let counter = toolsearch_gateway::payload::Counter::o200k().unwrap();
    let tokens = counter.size(&json!({ "tools": tools })).tokens;
    assert_eq!(first["tokens"], tokens, "{view}");
    assert!(tokens > 200, "{tokens}");
    // The surface adds the instructions the client received with `initialize`.
    let instructions = report["initialize"]["instructions"].as_str().unwrap();
    let instruction_tokens = counter.tokens(instructions);
    assert!(instructions.contains("search_prompts"), "{report}");
    assert_eq!(first["instructions_tokens"], instruction_tokens, "{view}");
    assert_eq!(
        first["surface_tokens"],
        tokens + instruction_tokens,
        "{view}"
    );
}
