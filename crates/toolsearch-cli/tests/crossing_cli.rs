//! Nothing crosses scopes: what an upstream logs or asks of a client, and what `/metrics` and the
//! status routes say about it, reach only the sessions and tokens whose scope reaches it.
//! `toolsearch serve` over HTTP in front of tests/clients/crossing_server.py (the official Python
//! SDK: a tool that logs, a tool that asks for sampling once its call has timed out), twice under
//! two names, with tokens scoped to different servers; each session is one
//! tests/clients/mcp_client.py process, and sessions that must overlap wait for each other's files.
//! The peers come from scripts/install-test-peers.sh.

use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;

use serde_json::{json, Value};

use crate::peers;
use peers::{toml_str, venv_python};

/// Every tool.
const FULL: &str = "full-token-0123456789";
/// Only the `other` server.
const NARROW: &str = "narrow-token-0123456789";
/// Only `crossing:wait_for_sampling`.
const WAITER: &str = "waiter-token-0123456789";

/// The gateway's config: the crossing server as `crossing` and as `other`, three tokens, and the
/// extra `[mcpServers.*]` entries given.
fn config(dir: &Path, call_timeout_secs: u64, extra: &str) -> std::path::PathBuf {
    let server = |name: &str| {
        format!(
            "[mcpServers.{name}]\ncommand = {python}\nargs = [{script}]\n",
            python = toml_str(&venv_python()),
            script = toml_str(&peers::client("crossing_server.py")),
        )
    };
    let text = format!(
        r#"{crossing}
{other}
{extra}
[toolSearch]
preset = "passthrough"
callTimeoutSecs = {call_timeout_secs}

[[rest.tokens]]
name = "full"
token = "{FULL}"

[[rest.tokens]]
name = "narrow"
token = "{NARROW}"
tools = ["other:*"]

[[rest.tokens]]
name = "waiter"
token = "{WAITER}"
tools = ["crossing:wait_for_sampling"]
"#,
        crossing = server("crossing"),
        other = server("other"),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs mcp_client.py with `plan` as a session of `token`, on a thread of its own; the handle
/// gives its JSON report.
fn session(url: &str, token: &str, plan: Value) -> JoinHandle<Value> {
    let mut command = Command::new(venv_python());
    command
        .arg(peers::client("mcp_client.py"))
        .arg("--plan")
        .arg(plan.to_string())
        .arg("--url")
        .arg(url)
        .arg("--token")
        .arg(token)
        .env_remove("TOOLSEARCH_API_TOKENS");
    std::thread::spawn(move || {
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
        report
    })
}

fn step(report: &Value, i: usize) -> &Value {
    &report["steps"][i]
}

fn log_texts(logs: &Value) -> Vec<String> {
    logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|log| log["data"].to_string())
        .collect()
}

/// An upstream's log message during one session's call reaches that session only: not a session
/// of a token whose scope excludes the upstream, nor another session that set a level; each of
/// those still gets the logs of its own calls.
#[test]
fn a_log_during_a_call_reaches_only_the_calling_session() {
    let dir = peers::scratch("crossing-cli");
    let config = config(&dir, 60, "");
    let gateway = peers::serve_http(&config);
    let narrow_ready = dir.join("narrow.ready");
    let idle_ready = dir.join("idle.ready");
    let done = dir.join("caller.done");

    // Scoped to `other` only; sets a level and waits while the full token's call logs.
    let narrow = session(
        &gateway.url,
        NARROW,
        json!([
            {"op": "set_level", "level": "debug"},
            {"op": "touch", "path": narrow_ready},
            {"op": "wait_file", "path": done},
            {"op": "call", "name": "other___chatty", "arguments": {"text": "narrow-own"}},
            {"op": "wait_log", "contains": "narrow-own"}
        ]),
    );
    // Every tool, but idle during the other session's call.
    let idle = session(
        &gateway.url,
        FULL,
        json!([
            {"op": "set_level", "level": "debug"},
            {"op": "touch", "path": idle_ready},
            {"op": "wait_file", "path": done},
            {"op": "call", "name": "crossing___chatty", "arguments": {"text": "idle-own"}},
            {"op": "wait_log", "contains": "idle-own"}
        ]),
    );
    let caller = session(
        &gateway.url,
        FULL,
        json!([
            {"op": "set_level", "level": "debug"},
            {"op": "wait_file", "path": narrow_ready},
            {"op": "wait_file", "path": idle_ready},
            {"op": "call", "name": "crossing___chatty", "arguments": {"text": "caller-secret"}},
            {"op": "wait_log", "contains": "caller-secret"},
            {"op": "touch", "path": done}
        ]),
    );
    let caller = caller.join().unwrap();
    let narrow = narrow.join().unwrap();
    let idle = idle.join().unwrap();

    assert_eq!(step(&caller, 3)["text"], "caller-secret", "{caller}");
    let heard = log_texts(step(&caller, 4));
    assert!(
        heard.iter().any(|l| l.contains("caller-secret")),
        "the caller hears its call's log: {heard:?}"
    );
    for (name, report) in [("narrow", &narrow), ("idle", &idle)] {
        let heard = log_texts(step(report, 4));
        assert!(
            heard.iter().any(|l| l.contains(&format!("{name}-own"))),
            "{name} hears its own call's log: {heard:?}"
        );
        assert!(
            !heard.iter().any(|l| l.contains("caller-secret")),
            "{name} heard another session's log: {heard:?}"
        );
    }
    // The narrow token's own log comes from `other`, the only server it reaches.
    let narrow_logs = step(&narrow, 4)["logs"].as_array().unwrap();
    assert!(
        narrow_logs.iter().all(|log| log["logger"]
            .as_str()
            .unwrap_or_default()
            .starts_with("other")),
        "{narrow_logs:?}"
    );
}

/// A sampling request of an upstream whose call has timed out is refused, with an error to the
/// upstream, and shown to no client: not to another token's session that has a call in flight on
/// that upstream, nor to the session whose call ended.
#[test]
fn a_sampling_request_of_a_call_that_timed_out_is_refused() {
    let dir = peers::scratch("crossing-cli");
    let config = config(&dir, 1, "");
    let gateway = peers::serve_http(&config);
    let timed_out = dir.join("timed-out");

    let asker = session(
        &gateway.url,
        FULL,
        json!({
            "client": {"sampling": "from-the-full-token"},
            "steps": [
                {"op": "call", "name": "crossing___sample_later"},
                {"op": "touch", "path": timed_out},
                {"op": "wait_file", "path": dir.join("waiter.done")},
                {"op": "asked"}
            ]
        }),
    );
    let waiter = session(
        &gateway.url,
        WAITER,
        json!({
            "client": {"sampling": "from-the-waiter"},
            "steps": [
                {"op": "wait_file", "path": timed_out},
                {"op": "call", "name": "crossing___wait_for_sampling"},
                {"op": "asked"},
                {"op": "touch", "path": dir.join("waiter.done")}
            ]
        }),
    );
    let waiter = waiter.join().unwrap();
    let asker = asker.join().unwrap();

    let timeout = step(&asker, 0);
    assert_eq!(timeout["is_error"], true, "{asker}");
    assert!(
        timeout["text"].as_str().unwrap().contains("timed out"),
        "{timeout}"
    );
    let outcome = step(&waiter, 1)["text"].as_str().unwrap().to_string();
    assert!(
        outcome.starts_with("refused:") && outcome.contains("ended without its answer"),
        "the upstream is refused, saying why: {outcome}"
    );
    assert_eq!(step(&waiter, 2)["asked"], json!([]), "{waiter}");
    assert_eq!(step(&asker, 3)["asked"], json!([]), "{asker}");
}

/// `/metrics`, `/api/status` and the console's overview answer a scoped token about the servers
/// its scope reaches only; a token that sees every tool gets them all.
#[test]
fn metrics_and_status_name_only_the_servers_in_scope() {
    let dir = peers::scratch("crossing-cli");
    // A server that never starts, so that /api/status has one to report.
    let broken = "[mcpServers.broken]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n";
    let config = config(&dir, 60, broken);
    let gateway = peers::serve_http_at_once(&config);
    let addr = gateway.addr();

    // Wait until `crossing` and `other` are ready and `broken` is reported not ready.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let full_status = loop {
        let (status, page) = peers::http(&addr, "GET", "/api/status", Some(FULL), None);
        assert_eq!(status, 200, "{page}");
        let not_ready: Vec<&str> = page["upstreams"]["notReady"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["server"].as_str())
            .collect();
        if not_ready == ["broken"] {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {page}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (status, narrow_status) = peers::http(&addr, "GET", "/api/status", Some(NARROW), None);
    assert_eq!(status, 200, "{narrow_status}");
    assert_eq!(
        narrow_status["upstreams"]["notReady"],
        json!([]),
        "{narrow_status} (full token: {full_status})"
    );

    let (status, full) = peers::http_raw(&addr, "GET", "/metrics", Some(FULL), None);
    assert_eq!(status, 200, "{full}");
    for server in ["crossing", "other", "broken"] {
        assert!(
            full.contains(&format!("server=\"{server}\"")),
            "{server} in:\n{full}"
        );
    }
    let (status, narrow) = peers::http_raw(&addr, "GET", "/metrics", Some(NARROW), None);
    assert_eq!(status, 200, "{narrow}");
    assert!(
        narrow.contains("toolsearch_upstream_tools{server=\"other\"} 3"),
        "{narrow}"
    );
    assert!(
        !narrow.contains("crossing") && !narrow.contains("broken"),
        "a scoped token's metrics name servers outside its scope:\n{narrow}"
    );

    let (_, overview) = peers::http(&addr, "GET", "/api/console/overview", Some(FULL), None);
    assert_eq!(overview["servers"], 3, "{overview}");
    let (_, overview) = peers::http(&addr, "GET", "/api/console/overview", Some(NARROW), None);
    assert_eq!(overview["servers"], 1, "{overview}");
}
