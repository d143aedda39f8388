//! `toolsearch serve --config` as clients use it: the real binary, driven by the official Python MCP
//! SDK client (tests/clients/mcp_client.py) over stdio and Streamable HTTP, in front of real
//! upstreams (server-everything from npm, mcp-server-time from PyPI) installed by
//! scripts/install-test-peers.sh.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};

mod peers;
use peers::{everything_js, mcp_server_time, toml_str, toolsearch, Transport};

fn scratch() -> PathBuf {
    peers::scratch("gateway-cli")
}

/// A config with server-everything and mcp-server-time and the given `[toolSearch]` lines.
fn config(dir: &Path, everything: &str, tool_search: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"{everything}

[mcpServers.time]
command = {time}
args = ["--local-timezone", "UTC"]

{extra}

[supervisor]
initialBackoffMs = 200
maxBackoffMs = 1000

[toolSearch]
threshold = 5
{tool_search}
"#,
        time = toml_str(&mcp_server_time()),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn everything_plain() -> String {
    format!(
        "[mcpServers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]",
        toml_str(&everything_js())
    )
}

/// Runs the Python client with `plan` against a gateway over `transport`; returns its report.
fn run_client(transport: Transport, config: &Path, plan: Value) -> Value {
    peers::run_client("mcp_client.py", transport, config, &plan)
}

fn step(report: &Value, index: usize) -> &Value {
    &report["steps"][index]
}

fn names(step: &Value) -> Vec<String> {
    step["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

fn found(step: &Value) -> Vec<String> {
    step["json"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in the search result: {step}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The `search` preset: a fixed list with search_tools and call_tool, search, calls through
/// call_tool and direct, results unchanged, no list_changed.
fn search_preset_session(transport: Transport) {
    let dir = scratch();
    let config = config(&dir, &everything_plain(), "preset = \"search\"", "");
    let report = run_client(
        transport,
        &config,
        json!([
            {"op": "list"},
            {"op": "call", "name": "search_tools", "arguments": {"query": "echo back a message"}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "everything___echo", "arguments": {"message": "via call_tool"}}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": "direct"}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "time___get_current_time", "arguments": {"timezone": "UTC"}}},
            {"op": "call", "name": "everything___get-structured-content", "arguments": {"location": "New York"}},
            {"op": "call", "name": "everything___echo", "arguments": {}},
            {"op": "call", "name": "everything___ech", "arguments": {"message": "x"}},
            {"op": "list"},
            {"op": "list_changed"}
        ]),
    );
    let init = &report["initialize"];
    assert_eq!(
        init["capabilities"]["tools"]["listChanged"],
        json!(true),
        "{init}"
    );
    assert_eq!(init["server_info"]["name"], "toolsearch");
    let listed = names(step(&report, 0));
    assert!(
        listed.contains(&"search_tools".to_string()) && listed.contains(&"call_tool".to_string()),
        "{listed:?}"
    );
    assert!(!listed.iter().any(|n| n.contains("___")), "{listed:?}");

    let search = step(&report, 1);
    assert_eq!(search["is_error"], false, "{search}");
    assert_eq!(found(search)[0], "everything___echo", "{search}");
    assert!(search["json"]["tools"][0]["inputSchema"]["properties"]["message"].is_object());

    assert_eq!(step(&report, 2)["text"], "Echo: via call_tool");
    assert_eq!(step(&report, 2)["is_error"], false);
    assert_eq!(step(&report, 3)["text"], "Echo: direct");

    let time = step(&report, 4);
    assert_eq!(time["is_error"], false, "{time}");
    assert_eq!(time["json"]["timezone"], "UTC", "{time}");

    // structuredContent comes back as the upstream sent it.
    let structured = step(&report, 5);
    assert_eq!(structured["is_error"], false, "{structured}");
    assert!(
        structured["structured"]["temperature"].is_number(),
        "{structured}"
    );

    let invalid = step(&report, 6);
    assert_eq!(invalid["is_error"], true, "{invalid}");
    assert!(
        invalid["text"].as_str().unwrap().contains("message"),
        "{invalid}"
    );
    assert!(invalid["json"]["schema"].is_object(), "{invalid}");

    let unknown = step(&report, 7);
    assert_eq!(unknown["is_error"], true, "{unknown}");
    assert!(
        unknown["json"]["didYouMean"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("everything___echo"))),
        "{unknown}"
    );

    assert_eq!(
        names(step(&report, 8)),
        listed,
        "the search preset's list never changes"
    );
    assert_eq!(step(&report, 9)["list_changed"], 0);
}

#[test]
fn search_preset_over_stdio() {
    search_preset_session(Transport::Stdio);
}

#[test]
fn search_preset_over_http() {
    search_preset_session(Transport::Http);
}

/// The `add` preset: search lists, add_tool reveals, the client is told and sees the tool.
fn add_preset_session(transport: Transport) {
    let dir = scratch();
    let config = config(&dir, &everything_plain(), "preset = \"add\"", "");
    let report = run_client(
        transport,
        &config,
        json!([
            {"op": "list"},
            {"op": "call", "name": "search_tools", "arguments": {"query": "echo"}},
            {"op": "call", "name": "add_tool", "arguments": {"names": ["everything___echo"]}},
            {"op": "wait_list_changed"},
            {"op": "list"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": "added"}}
        ]),
    );
    let before = names(step(&report, 0));
    assert!(before.contains(&"add_tool".to_string()), "{before:?}");
    assert!(!before.contains(&"everything___echo".to_string()));
    assert!(found(step(&report, 1)).contains(&"everything___echo".to_string()));
    assert_eq!(
        step(&report, 2)["json"]["added"],
        json!(["everything___echo"])
    );
    assert!(step(&report, 3)["list_changed"].as_u64().unwrap() >= 1);
    let after = names(step(&report, 4));
    assert!(
        after.contains(&"everything___echo".to_string()),
        "{after:?}"
    );
    assert_eq!(step(&report, 5)["text"], "Echo: added");
}

#[test]
fn add_preset_sends_list_changed_over_stdio() {
    add_preset_session(Transport::Stdio);
}

#[test]
fn add_preset_sends_list_changed_over_http() {
    add_preset_session(Transport::Http);
}

/// The `progressive` preset: stubs first, tool_search loads the matches in full.
#[test]
fn progressive_preset_reveals_over_http() {
    let dir = scratch();
    let config = config(&dir, &everything_plain(), "preset = \"progressive\"", "");
    let report = run_client(
        Transport::Http,
        &config,
        json!([
            {"op": "list"},
            {"op": "call", "name": "tool_search", "arguments": {"query": "echo"}},
            {"op": "wait_list_changed"},
            {"op": "list"}
        ]),
    );
    let before = &step(&report, 0)["tools"]["everything___echo"];
    assert!(
        before["inputSchema"]["properties"].is_null(),
        "a stub before the search: {before}"
    );
    assert!(step(&report, 1)["json"]["loaded"]
        .as_array()
        .unwrap()
        .contains(&json!("everything___echo")));
    let after = &step(&report, 3)["tools"]["everything___echo"];
    assert!(
        after["inputSchema"]["properties"]["message"].is_object(),
        "in full after the search: {after}"
    );
}

/// An upstream killed mid-session: calls fail naming the server while it is down, search marks
/// its tools unavailable, and after the restart its tools are back and callable.
#[test]
fn upstream_killed_mid_session_is_restarted() {
    let dir = scratch();
    let pidfile = dir.join("everything.pid");
    let block = dir.join("block");
    // While `block` exists the server cannot start, which keeps it down until the plan says so.
    let script = format!(
        "if [ -e {block} ]; then echo blocked >&2; exit 1; fi; echo $$ > {pid}; exec node {js} stdio",
        block = dir.join("block").display(),
        pid = pidfile.display(),
        js = everything_js(),
    );
    let everything = format!(
        "[mcpServers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {}]",
        toml_str(&script)
    );
    let config = config(&dir, &everything, "", "");
    let report = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "call", "name": "call_tool", "arguments": {"name": "everything___echo", "arguments": {"message": "before"}}},
            {"op": "touch", "path": block},
            {"op": "kill_pidfile", "path": pidfile},
            {"op": "call", "name": "call_tool", "arguments": {"name": "everything___echo", "arguments": {"message": "down"}}},
            {"op": "call_until_ok", "name": "call_tool", "arguments": {"name": "time___get_current_time", "arguments": {"timezone": "UTC"}}},
            {"op": "call", "name": "search_tools", "arguments": {"query": "echo"}},
            {"op": "rm", "path": block},
            {"op": "call_until_ok", "name": "call_tool", "arguments": {"name": "everything___echo", "arguments": {"message": "after"}}},
            {"op": "call", "name": "search_tools", "arguments": {"query": "echo"}}
        ]),
    );
    assert_eq!(step(&report, 0)["text"], "Echo: before");
    let down = step(&report, 3);
    assert_eq!(down["is_error"], true, "{down}");
    assert!(
        down["text"].as_str().unwrap().contains("`everything`"),
        "the error names the server: {down}"
    );
    // The other upstream is unaffected.
    assert_eq!(step(&report, 4)["is_error"], false);
    let search_down = &step(&report, 5)["json"]["tools"][0];
    assert_eq!(search_down["name"], "everything___echo", "{search_down}");
    assert_eq!(search_down["available"], false, "{search_down}");
    assert!(
        search_down["serverState"].as_str().is_some(),
        "{search_down}"
    );

    assert_eq!(step(&report, 7)["text"], "Echo: after");
    let search_up = &step(&report, 8)["json"]["tools"][0];
    assert_eq!(search_up["name"], "everything___echo");
    assert!(search_up.get("available").is_none(), "{search_up}");
    let restarted: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(
        json!(restarted),
        step(&report, 2)["killed"],
        "a new process"
    );
}

/// An upstream that never starts: the gateway serves the others.
#[test]
fn upstream_that_never_starts_leaves_the_others_served() {
    let dir = scratch();
    let broken = "[mcpServers.broken]\ncommand = \"/nonexistent/toolsearch-test-server\"";
    let config = config(&dir, &everything_plain(), "", broken);
    let report = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "call", "name": "search_tools", "arguments": {"query": "echo"}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": "still here"}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "broken___anything", "arguments": {}}}
        ]),
    );
    assert_eq!(found(step(&report, 0))[0], "everything___echo");
    assert_eq!(step(&report, 1)["text"], "Echo: still here");
    assert_eq!(step(&report, 2)["is_error"], true);
}

/// A malformed config stops the start with exit code 2, naming the file and the key.
#[test]
fn malformed_config_exits_2_naming_file_and_key() {
    let dir = scratch();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[mcpServers.a]\ncommand = \"true\"\n\n[toolSearch]\npreset = \"sideways\"\n",
    )
    .unwrap();
    for mode in [&["--stdio"][..], &["--http", "127.0.0.1:0"][..]] {
        let output = toolsearch()
            .args(["serve", "--config"])
            .arg(&path)
            .args(mode)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("bad.toml"), "{stderr}");
        assert!(stderr.contains("toolSearch.preset"), "{stderr}");
        assert!(output.stdout.is_empty(), "nothing on stdout: {stderr}");
    }
}
