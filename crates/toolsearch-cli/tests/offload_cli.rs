//! Large-output offloading through `toolsearch serve`: the real binary in front of a real upstream
//! (server-everything, whose `echo` returns any message and `get-env` a JSON object), driven by
//! the official Python MCP SDK client (tests/clients/offload_client.py), over stdio and HTTP.
//! The peers come from scripts/install-test-peers.sh.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::peers;
use peers::{everything_js, serve_http, toml_str, venv_python, Transport};

fn scratch() -> peers::Scratch {
    peers::scratch("offload-cli")
}

/// A config with server-everything (and `env_lines` for it) and the given `[toolSearch]` lines.
fn config(tool_search: &str, env_lines: &str) -> peers::ScratchFile {
    let text = format!(
        r#"[mcpServers.everything]
command = "node"
args = [{js}, "stdio"]
{env_lines}

[toolSearch]
threshold = 5
{tool_search}
"#,
        js = toml_str(&everything_js()),
    );
    peers::ScratchFile::new("offload-cli", "gateway.toml", &text)
}

/// Runs the client with `plan`; returns its steps.
fn run_client(transport: Transport, config: &Path, plan: Value) -> Vec<Value> {
    run_client_logged(transport, config, plan, "warn").0
}

/// Runs the client with `plan` and the gateway's log at `log_level` (over stdio, the gateway's
/// stderr goes to the client's); returns the steps and the client's stderr.
fn run_client_logged(
    transport: Transport,
    config: &Path,
    plan: Value,
    log_level: &str,
) -> (Vec<Value>, String) {
    let (report, stderr) = peers::run_client_with(
        "offload_client.py",
        transport,
        config,
        &plan,
        &[("RUST_LOG", log_level)],
    );
    (report["steps"].as_array().unwrap().clone(), stderr)
}

/// A message of numbered lines, `count` of them: "line 00000 item-0 ...".
fn numbered_lines(count: usize) -> String {
    (0..count)
        .map(|i| format!("line {i:05} item-{i} lorem ipsum dolor sit amet"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn echo(message: &str) -> Value {
    json!({"op": "call", "name": "everything___echo", "arguments": {"message": message}})
}

fn offloaded(step: &Value) -> &Value {
    let info = &step["structured"]["offloaded"];
    assert!(info.is_object(), "not offloaded: {step}");
    info
}

fn error_text(step: &Value) -> String {
    assert_eq!(step["is_error"], true, "expected an error: {step}");
    step["json"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {step}"))
        .to_string()
}

/// Echo of a 40 KB message: offloaded with a preview; read in ranges, searched with context,
/// small outputs untouched, and every bad input named.
#[test]
fn large_echo_is_offloaded_and_read_back_over_stdio() {
    let config = config("", "");
    let message = numbered_lines(1000);
    let text = format!("Echo: {message}");
    let chars = text.chars().count();
    assert!(text.len() > 16 * 1024);
    let steps = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "list"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": message}, "save": "h"},
            echo("small"),
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 0, "length": 30}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 6, "length": 10}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": 100, "length": 1_000_000}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": chars - 5}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "ITEM-123 lorem", "context": 1}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "^line 0012[0-2] ", "mode": "regex", "context": 0}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "item-", "max_matches": 3}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "(line", "mode": "regex"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "offset": chars}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "out-999999-deadbeef"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$h", "filter": "."}},
            {"op": "call", "name": "read_large_output", "arguments": {"offset": 1}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "read_large_output", "arguments": {"handle": "$h", "length": 4}}}
        ]),
    );
    // Not listed beside the search preset's meta-tools, nor in the instructions: they cost the
    // model nothing until an output is stored, and the notice that stores one names them.
    let names = steps[0]["names"].as_array().unwrap();
    assert!(names.contains(&json!("call_tool")), "{names:?}");
    for name in [
        "read_large_output",
        "search_large_output",
        "query_large_output",
    ] {
        assert!(!names.contains(&json!(name)), "{name}: {names:?}");
    }
    assert!(
        !steps[0]["instructions"]
            .as_str()
            .unwrap()
            .contains("large_output"),
        "{}",
        steps[0]["instructions"]
    );

    let big = &steps[1];
    assert_eq!(big["is_error"], false);
    let info = offloaded(big);
    assert_eq!(info["chars"], chars);
    assert_eq!(info["bytes"], text.len());
    assert_eq!(info["lines"], 1000);
    assert_eq!(info["tool"], "everything___echo");
    let handle = info["handle"].as_str().unwrap();
    assert!(
        text.starts_with(info["preview"].as_str().unwrap()),
        "{info}"
    );
    let notice = big["text"].as_str().unwrap();
    assert!(
        notice.len() < 4096,
        "the notice is short: {} bytes",
        notice.len()
    );
    for needle in [
        handle,
        "`call_tool`",
        "read_large_output {handle, offset?, length?}",
        "search_large_output {handle, pattern,",
        "query_large_output {handle, filter,",
        "Echo: line 00000",
    ] {
        assert!(notice.contains(needle), "`{needle}` in: {notice}");
    }

    assert_eq!(steps[2]["text"], "Echo: small");
    assert!(steps[2]["structured"].is_null(), "{}", steps[2]);

    assert_eq!(steps[3]["json"]["text"], &text[..30]);
    assert_eq!(steps[3]["json"]["nextOffset"], 30);
    assert_eq!(steps[3]["json"]["chars"], chars);
    assert_eq!(steps[4]["json"]["text"], "line 00000");
    let capped = &steps[5]["json"];
    assert_eq!(capped["length"], 12_000, "maxReadChars by default");
    assert_eq!(capped["text"], &text[100..12_100]);
    assert_eq!(capped["nextOffset"], 12_100);
    assert_eq!(steps[6]["json"]["text"], &text[chars - 5..]);
    assert_eq!(steps[6]["json"]["nextOffset"], Value::Null);

    let words = &steps[7]["json"];
    assert_eq!(
        words["totalMatches"], 1,
        "only line 123 has both words: {words}"
    );
    let first = &words["matches"][0];
    assert_eq!(first["line"], 124);
    assert_eq!(
        first["text"],
        "line 00123 item-123 lorem ipsum dolor sit amet"
    );
    assert_eq!(
        first["before"],
        json!([{"line": 123, "text": "line 00122 item-122 lorem ipsum dolor sit amet"}])
    );
    assert_eq!(first["after"][0]["line"], 125);
    let at = first["offset"].as_u64().unwrap() as usize;
    assert_eq!(&text[at..at + 8], "item-123");

    let regex = &steps[8]["json"];
    assert_eq!(regex["totalMatches"], 3, "{regex}");
    let lines: Vec<_> = regex["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["line"].clone())
        .collect();
    assert_eq!(lines, [json!(121), json!(122), json!(123)]);

    let bounded = &steps[9]["json"];
    assert_eq!(bounded["totalMatches"], 1000);
    assert_eq!(bounded["returned"], 3);
    assert_eq!(bounded["truncated"], true);

    let bad_regex = error_text(&steps[10]);
    assert!(
        bad_regex.contains("invalid regex `(line`") && bad_regex.contains("unclosed group"),
        "{bad_regex}"
    );
    let out_of_range = error_text(&steps[11]);
    assert!(
        out_of_range.contains(&format!("offset {chars} is out of range"))
            && out_of_range.contains(&format!("between 0 and {}", chars - 1)),
        "{out_of_range}"
    );
    let unknown = error_text(&steps[12]);
    assert!(
        unknown.contains("no large output `out-999999-deadbeef` in this session")
            && unknown.contains(handle),
        "{unknown}"
    );
    let not_json = error_text(&steps[13]);
    assert!(not_json.contains("is not JSON"), "{not_json}");
    let missing = error_text(&steps[14]);
    assert!(missing.contains("handle"), "{missing}");
    assert_eq!(steps[15]["json"]["text"], "Echo", "through call_tool too");
}

/// get-env's JSON (with a large variable set for the upstream): an outline in the preview, jq
/// queries over it, and a bad filter named.
#[test]
fn json_output_is_outlined_and_queried_with_jq_over_http() {
    let items: Vec<Value> = (0..300)
        .map(|i| json!({"id": i, "even": i % 2 == 0, "name": format!("item {i}")}))
        .collect();
    let env = format!(
        "env = {{ TS_BIG = {}, TS_ITEMS = {} }}",
        toml_str(&"x".repeat(20_000)),
        toml_str(&Value::Array(items).to_string())
    );
    let config = config("", &env);
    let steps = run_client(
        Transport::Http,
        &config,
        json!([
            {"op": "call", "name": "everything___get-env", "arguments": {}, "save": "env"},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_BIG | length"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_ITEMS | fromjson | map(select(.even)) | length"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_ITEMS | fromjson | .[] | select(.id < 3) | .name"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_ITEMS | fromjson | .[]", "max_results": 5}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_ITEMS | fromjson | .["}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": "keys | nosuch"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_BIG + 1"}},
            {"op": "call", "name": "search_large_output", "arguments": {"handle": "$env", "pattern": "\"TS_BIG\":", "mode": "regex", "context": 0}}
        ]),
    );
    let info = offloaded(&steps[0]);
    let outline = &info["outline"];
    assert_eq!(outline["type"], "object", "{info}");
    // The outline lists at most 40 keys; TS_BIG is there unless the environment is crowded.
    let keys = outline["keys"].as_object().unwrap();
    if let Some(big) = keys.get("TS_BIG") {
        assert_eq!(big, &json!({"type": "string", "chars": 20_000}));
    }
    assert!(steps[0]["text"]
        .as_str()
        .unwrap()
        .contains("JSON outline: {\"type\":\"object\""));

    assert_eq!(steps[1]["json"]["results"], json!([20_000]), "{}", steps[1]);
    assert_eq!(steps[2]["json"]["results"], json!([150]), "{}", steps[2]);
    assert_eq!(
        steps[3]["json"]["results"],
        json!(["item 0", "item 1", "item 2"])
    );
    let bounded = &steps[4]["json"];
    assert_eq!(bounded["returned"], 5);
    assert_eq!(bounded["truncated"], true);
    assert_eq!(bounded["results"][4]["id"], 4);

    let syntax = error_text(&steps[5]);
    assert!(
        syntax.starts_with("invalid jq filter `.TS_ITEMS | fromjson | .[`")
            && syntax.contains("column"),
        "{syntax}"
    );
    let undefined = error_text(&steps[6]);
    assert!(
        undefined.contains("undefined filter `nosuch`"),
        "{undefined}"
    );
    let runtime = error_text(&steps[7]);
    assert!(
        runtime.contains("the jq filter `.TS_BIG + 1` failed"),
        "{runtime}"
    );
    assert_eq!(steps[8]["json"]["totalMatches"], 1, "{}", steps[8]);
}

/// A handle from session A is unknown in session B, both open at once over HTTP.
#[test]
fn handles_are_isolated_between_http_sessions() {
    let config = config("", "");
    let message = numbered_lines(600);
    let steps = run_client(
        Transport::Http,
        &config,
        json!([
            {"session": "a", "op": "call", "name": "everything___echo", "arguments": {"message": message}, "save": "ha"},
            {"session": "b", "op": "list"},
            {"session": "b", "op": "call", "name": "read_large_output", "arguments": {"handle": "$ha"}},
            {"session": "b", "op": "call", "name": "search_large_output", "arguments": {"handle": "$ha", "pattern": "line"}},
            {"session": "b", "op": "call", "name": "query_large_output", "arguments": {"handle": "$ha", "filter": "."}},
            {"session": "b", "op": "call", "name": "everything___echo", "arguments": {"message": message}, "save": "hb"},
            {"session": "a", "op": "call", "name": "read_large_output", "arguments": {"handle": "$ha", "length": 10}},
            {"session": "a", "op": "call", "name": "read_large_output", "arguments": {"handle": "$hb"}},
            {"session": "b", "op": "call", "name": "read_large_output", "arguments": {"handle": "$hb", "length": 10}},
            {"session": "a", "op": "close"},
            {"session": "b", "op": "call", "name": "read_large_output", "arguments": {"handle": "$ha"}}
        ]),
    );
    let ha = offloaded(&steps[0])["handle"].as_str().unwrap().to_string();
    let hb = offloaded(&steps[5])["handle"].as_str().unwrap().to_string();
    assert_ne!(ha, hb);
    assert!(steps[1]["names"]
        .as_array()
        .unwrap()
        .contains(&json!("call_tool")));
    for i in [2, 3, 4] {
        let e = error_text(&steps[i]);
        assert!(
            e.contains(&format!("no large output `{ha}` in this session")),
            "step {i}: {e}"
        );
    }
    assert_eq!(steps[6]["json"]["text"], "Echo: line");
    let e = error_text(&steps[7]);
    assert!(
        e.contains(&format!("no large output `{hb}`")) && e.contains(&ha),
        "{e}"
    );
    assert_eq!(steps[8]["json"]["text"], "Echo: line");
    assert!(error_text(&steps[10]).contains("no large output"));
}

/// maxOutputsPerSession and maxBytesPerSession: the oldest are dropped first, with an error that
/// says so; an output larger than the whole budget is cut to fit.
#[test]
fn session_store_is_bounded_in_count_and_bytes() {
    let config = config(
        "[toolSearch.offload]\nthresholdBytes = 1000\nmaxOutputsPerSession = 2\nmaxBytesPerSession = 10000",
        "",
    );
    // "Echo: " + 1994 = 2000 bytes each; the fourth is 9000 bytes.
    let m = |c: char, n: usize| c.to_string().repeat(n);
    let steps = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('a', 1994)}, "save": "h1"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('b', 1994)}, "save": "h2"},
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('c', 1994)}, "save": "h3"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h1"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h2", "offset": 6, "length": 3}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('d', 8994)}, "save": "h4"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h2"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h3"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h4", "offset": 8995}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('e', 14994)}, "save": "h5"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h4"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h5", "offset": 9990}},
            {"op": "call", "name": "everything___echo", "arguments": {"message": m('f', 900)}}
        ]),
    );
    let dropped = error_text(&steps[3]);
    assert!(
        dropped.contains("was dropped to make room")
            && dropped.contains("at most 2 outputs and 10000 bytes"),
        "{dropped}"
    );
    assert_eq!(steps[4]["json"]["text"], "bbb");
    // 2000 + 2000 + 9000 bytes: h2 goes for the count, h3 for the bytes.
    assert!(error_text(&steps[6]).contains("dropped"));
    assert!(error_text(&steps[7]).contains("dropped"));
    assert_eq!(steps[8]["json"]["text"], "ddddd");
    let cut = offloaded(&steps[9]);
    assert_eq!(cut["bytes"], 10_000);
    assert_eq!(cut["cutFromBytes"], 15_000);
    assert!(steps[9]["text"]
        .as_str()
        .unwrap()
        .contains("Only the first 10000 of its 15000 bytes were kept"));
    assert!(error_text(&steps[10]).contains("dropped"));
    assert_eq!(steps[11]["json"]["text"], "eeeeeeeeee");
    // At the threshold or under it: unchanged.
    assert_eq!(steps[12]["text"], format!("Echo: {}", m('f', 900)));
}

/// Only text parts count and are replaced: get-tiny-image's image stays as it was.
#[test]
fn images_pass_through_while_text_is_offloaded() {
    let config = config("[toolSearch.offload]\nthresholdBytes = 50", "");
    let steps = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "call", "name": "everything___get-tiny-image", "arguments": {}, "save": "h"},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$h"}}
        ]),
    );
    let content = steps[0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{content:?}");
    assert_eq!(content[0]["type"], "text");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert!(content[1]["data"].as_str().unwrap().len() > 100);
    assert_eq!(
        steps[1]["json"]["text"],
        "Here's the image you requested:\nThe image above is the MCP logo."
    );
}

/// While offloading is on, the three tools are listed only where the list has no `call_tool`
/// (the `passthrough` preset, a catalog under the threshold), and answer through `call_tool`
/// everywhere else; when it is off they do not exist (then large results pass unchanged).
#[test]
fn tools_are_listed_only_without_call_tool_and_absent_when_off() {
    for preset in ["search", "progressive", "add", "limit", "passthrough"] {
        let config = config(&format!("preset = \"{preset}\""), "");
        let steps = run_client(Transport::Stdio, &config, json!([{"op": "list"}]));
        let names = steps[0]["names"].as_array().unwrap();
        let listed = !names.contains(&json!("call_tool"));
        assert_eq!(listed, preset == "passthrough", "{preset}: {names:?}");
        for tool in [
            "read_large_output",
            "search_large_output",
            "query_large_output",
        ] {
            assert_eq!(names.contains(&json!(tool)), listed, "{preset}: {names:?}");
        }
    }
    let config = config("[toolSearch.offload]\nenabled = false", "");
    let message = numbered_lines(1000);
    let steps = run_client(
        Transport::Stdio,
        &config,
        json!([{"op": "list"}, echo(&message)]),
    );
    assert!(!steps[0]["names"]
        .as_array()
        .unwrap()
        .contains(&json!("read_large_output")));
    assert_eq!(steps[1]["text"], format!("Echo: {message}"));
}

/// jq filters run in a bounded worker: one that never ends (#13) is stopped at callTimeoutSecs
/// and the next query is answered; `debug` and `stderr` write nothing of the output to the log,
/// even at debug level; a zero-length read is refused.
#[test]
fn jq_queries_are_bounded_and_never_logged_over_stdio() {
    let secret = "SECRET-4e1d7b";
    let env = format!(
        "env = {{ TS_SECRET = {}, TS_BIG = {} }}",
        toml_str(secret),
        toml_str(&"x".repeat(20_000))
    );
    let config = config("callTimeoutSecs = 2", &env);
    let (steps, log) = run_client_logged(
        Transport::Stdio,
        &config,
        json!([
            {"op": "call", "name": "everything___get-env", "arguments": {}, "save": "env"},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_SECRET | debug | stderr"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": "(.TS_SECRET | debug(\"seen \\(.)\") | halt_error)"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": "[limit(100000000; repeat(.))] | length"}},
            {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": ".TS_SECRET | length"}},
            {"op": "call", "name": "read_large_output", "arguments": {"handle": "$env", "offset": 5, "length": 0}}
        ]),
        // jq's debug and stderr logged under `jaq_std`; the gateway's own records at debug.
        // (Not everything at debug: the MCP SDK logs every message it sends, results included.)
        "warn,jaq_std=trace,toolsearch_gateway=debug",
    );
    offloaded(&steps[0]);
    assert_eq!(steps[1]["json"]["results"], json!([secret]), "{}", steps[1]);
    assert_eq!(steps[2]["json"]["halted"], 5, "{}", steps[2]);
    let stopped = error_text(&steps[3]);
    assert!(
        stopped.starts_with("the jq filter `[limit(100000000; repeat(.))] | length`")
            && stopped.contains("was stopped"),
        "{stopped}"
    );
    assert_eq!(steps[4]["json"]["results"], json!([secret.len()]));
    let zero = error_text(&steps[5]);
    // Refused by the tool's schema, as every served tool's arguments are.
    assert!(
        zero.contains("/length") && zero.contains("minimum of 1"),
        "{zero}"
    );

    // The log is there; the stored output is not in it.
    assert!(log.contains("offloaded a large output"), "{log}");
    assert!(!log.contains(secret), "tool output reached the log:\n{log}");
}

/// The children of process `pid` (Linux).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Whether `pid` is a running process (not gone, not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| Some(stat.rsplit_once(") ")?.1.chars().next()? != 'Z'))
        .unwrap_or(false)
}

/// SIGTERM while a jq query runs: the gateway exits, and its jq worker with it.
#[test]
fn sigterm_ends_the_gateway_while_a_query_runs() {
    let env = format!("env = {{ TS_BIG = {} }}", toml_str(&"x".repeat(20_000)));
    let config = config("callTimeoutSecs = 600", &env);
    let mut gateway = serve_http(&config);
    let plan = json!([
        {"op": "call", "name": "everything___get-env", "arguments": {}, "save": "env"},
        {"op": "call", "name": "query_large_output", "arguments": {"handle": "$env", "filter": "[repeat(.)] | length"}}
    ]);
    let mut client = Command::new(venv_python())
        .arg(peers::client("offload_client.py"))
        .arg("--plan")
        .arg(plan.to_string())
        .arg("--url")
        .arg(&gateway.url)
        .env_remove("TOOLSEARCH_API_TOKENS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = gateway.process().id();
    let is_worker = |child: &u32| {
        std::fs::read(format!("/proc/{child}/cmdline")).is_ok_and(|cmdline| {
            String::from_utf8_lossy(&cmdline).contains("__toolsearch-jq-worker")
        })
    };
    let mut worker = None;
    for _ in 0..1200 {
        worker = children(pid).into_iter().find(is_worker);
        if worker.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let worker = worker.expect("the query started a jq worker");
    assert!(running(worker));

    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let mut exited = None;
    for _ in 0..600 {
        exited = gateway.process().try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = client.kill();
    let _ = client.wait();
    assert!(
        exited.is_some(),
        "the gateway is still running after SIGTERM"
    );
    assert!(!running(worker), "the jq worker outlived the gateway");
}

/// A client on protocol 2026-07-28 has no session, so each of its requests gets one of its own in
/// rmcp. Its large outputs are kept for its token instead, as SEP-2567 asks of state handles: it
/// reads them back by handle on later requests, and another token cannot.
#[test]
fn a_client_without_sessions_reads_its_large_outputs_by_handle() {
    let dir = scratch();
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[mcpServers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n\n\
             [[rest.tokens]]\nname = \"one\"\ntoken = \"token-one-0123456789\"\n\n\
             [[rest.tokens]]\nname = \"two\"\ntoken = \"token-two-0123456789\"\n",
            toml_str(&everything_js())
        ),
    )
    .unwrap();
    let gateway = serve_http(&path);
    let message = numbered_lines(600);
    let report = peers::run_client_at(
        "offload_client.py",
        &gateway.url,
        &json!([
            {"session": "a", "op": "list", "token": "token-one-0123456789", "mode": "auto"},
            {"session": "a", "op": "call", "name": "everything___echo", "arguments": {"message": message}, "save": "h"},
            {"session": "a", "op": "call", "name": "read_large_output", "arguments": {"handle": "$h", "length": 10}},
            {"session": "a", "op": "call", "name": "search_large_output", "arguments": {"handle": "$h", "pattern": "item-599"}},
            {"session": "b", "op": "list", "token": "token-two-0123456789", "mode": "auto"},
            {"session": "b", "op": "call", "name": "read_large_output", "arguments": {"handle": "$h"}},
            {"session": "c", "op": "list", "token": "token-one-0123456789"},
            {"session": "c", "op": "call", "name": "read_large_output", "arguments": {"handle": "$h"}}
        ]),
    );
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps[0]["protocol"], "2026-07-28", "{}", steps[0]);
    offloaded(&steps[1]);
    assert_eq!(steps[2]["json"]["text"], "Echo: line", "{}", steps[2]);
    assert!(
        steps[3]["text"].as_str().unwrap().contains("item-599"),
        "{}",
        steps[3]
    );
    // Another token's request, with or without sessions, does not see it.
    assert!(error_text(&steps[5]).contains("no large output"));
    assert_ne!(steps[6]["protocol"], "2026-07-28", "{}", steps[6]);
    assert!(error_text(&steps[7]).contains("no large output"));
}

/// A config with one upstream (`upstream_lines`: its `[mcpServers.x]` table) and a call timeout
/// of 120 s, far above how long anything here takes: no answer below can be a timeout.
fn config_with(upstream_lines: &str) -> peers::ScratchFile {
    let text = format!("{upstream_lines}\n[toolSearch]\ncallTimeoutSecs = 120\n");
    peers::ScratchFile::new("offload-cli", "gateway.toml", &text)
}

fn call_tool(name: &str, arguments: Value) -> Value {
    json!({"op": "call", "name": "call_tool", "arguments": {"name": name, "arguments": arguments}})
}

fn assert_not_a_timeout(text: &str) {
    assert!(
        !text.contains("timed out") && !text.contains("callTimeoutSecs"),
        "not a timeout: {text}"
    );
}

/// A stdio upstream's answer larger than the MCP library's 16 MiB line ends when it ends: 20 MB
/// of text is read whole and offloaded (cut to `maxBytesPerSession`, its size kept), 70 MB
/// (over the 64 MiB the gateway reads from one message) fails its call as soon as it has been
/// read past, naming its size and the limit; the server answers the next call.
#[test]
fn answers_over_the_line_limit_are_offloaded_or_refused_with_their_size_over_stdio() {
    let config = config_with(&format!(
        "[mcpServers.large]\ncommand = {}\nargs = [{}]\n",
        toml_str(&venv_python()),
        toml_str(&peers::client("large_answer_server.py"))
    ));
    let steps = run_client(
        Transport::Stdio,
        &config,
        json!([
            {"op": "list"},
            call_tool("large___large_text", json!({"megabytes": 20})),
            call_tool("large___large_text", json!({"megabytes": 70})),
            call_tool("large___echo", json!({"text": "still answering"}))
        ]),
    );
    let info = offloaded(&steps[1]);
    assert_eq!(info["cutFromBytes"], 20_000_000, "{info}");
    assert_eq!(info["bytes"], 16 * 1024 * 1024, "{info}");
    let refused = error_text(&steps[2]);
    // The text's newlines are escaped in JSON: the message is larger than the text.
    let bytes: u64 = refused
        .split("the answer of server `large` is ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB (").nth(1))
        .and_then(|rest| rest.split(" bytes)").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in: {refused}"));
    assert!((70_000_000..72_000_000).contains(&bytes), "{refused}");
    assert!(
        refused.contains("more than the 64.0 MiB (67108864 bytes) the gateway reads"),
        "{refused}"
    );
    assert_not_a_timeout(&refused);
    assert_eq!(steps[3]["is_error"], false, "{}", steps[3]);
    assert_eq!(steps[3]["text"], "still answering");
}

fn bad_http_server() -> peers::ScriptServer {
    peers::bad_http_server(0, &[])
}

/// [`bad_http_server`] on `port` (0: a free one).
fn bad_http_server_on(port: u16) -> peers::ScriptServer {
    peers::bad_http_server(port, &[])
}

/// A Streamable HTTP upstream whose process exits while it answers a call is down, not a bad
/// answer: the call says so (and the gateway reconnects at once), where a bad answer leaves the
/// connection as it is.
#[test]
fn an_http_upstream_that_exits_mid_call_is_down() {
    let server = bad_http_server();
    let config = config_with(&format!(
        "[mcpServers.bad]\nurl = {}\n",
        toml_str(&server.url)
    ));
    let steps = run_client(
        Transport::Http,
        &config,
        json!([{"op": "list"}, call_tool("bad___exit_midway", json!({}))]),
    );
    let said = error_text(&steps[1]);
    assert!(said.contains("server `bad` is down"), "{said}");
    assert_not_a_timeout(&said);
}

/// One bad answer of a Streamable HTTP upstream (HTTP 500, an HTML page, a JSON body over the
/// MCP library's 16 MiB, an SSE event over 64 MiB) is that call's error, saying what came back,
/// and never a timeout; the upstream stays connected: another session's very next call
/// succeeds, and the server saw no new `initialize` (no restart). An SSE event of 20 MB is read
/// whole and offloaded.
#[test]
fn a_bad_http_answer_fails_its_call_and_the_upstream_stays_up() {
    let server = bad_http_server();
    let config = config_with(&format!(
        "[mcpServers.bad]\nurl = {}\n",
        toml_str(&server.url)
    ));
    let mut plan = vec![
        json!({"op": "list"}),
        json!({"op": "list", "session": "b"}),
        call_tool("bad___initializations", json!({})),
    ];
    let bad = [
        ("bad___http_500", json!({})),
        ("bad___html_page", json!({})),
        ("bad___oversize_json", json!({"megabytes": 20})),
        ("bad___large_event", json!({"megabytes": 70})),
    ];
    for (name, arguments) in &bad {
        plan.push(call_tool(name, arguments.clone()));
        let mut next = call_tool("bad___echo", json!({"text": format!("after {name}")}));
        next["session"] = json!("b");
        plan.push(next);
    }
    plan.push(call_tool("bad___large_event", json!({"megabytes": 20})));
    let mut last = call_tool("bad___initializations", json!({}));
    last["session"] = json!("b");
    plan.push(last);
    let steps = run_client(Transport::Http, &config, Value::Array(plan));

    let initializations = steps[2]["text"].clone();
    assert_eq!(steps[2]["is_error"], false, "{}", steps[2]);
    let says = [
        "server `bad` answered tools/call with HTTP 500 (Internal Server Error)",
        "server `bad` answered tools/call with content of type `text/html; charset=utf-8`, not JSON or an event stream",
        "server `bad` answered tools/call with a JSON body larger than 16.0 MiB (16777216 bytes)",
        "server `bad` sent an SSE event larger than 64.0 MiB (67108864 bytes)",
    ];
    for (i, (says, (name, _))) in says.iter().zip(&bad).enumerate() {
        let refused = error_text(&steps[3 + 2 * i]);
        assert!(refused.contains(says), "{name}: {refused}");
        assert_not_a_timeout(&refused);
        assert!(!refused.contains("is down"), "{name}: {refused}");
        let next = &steps[4 + 2 * i];
        assert_eq!(next["is_error"], false, "after {name}: {next}");
        assert_eq!(next["text"], format!("after {name}"));
    }
    let info = offloaded(&steps[11]);
    assert_eq!(info["cutFromBytes"], 20_000_000, "{info}");
    assert_eq!(
        steps[12]["text"], initializations,
        "the upstream was not started again: {}",
        steps[12]
    );
}

/// When a Streamable HTTP upstream is gone (its port refuses connections), the call fails saying
/// the server is down and its session is started again: once the server is back on its port,
/// calls succeed over a new session.
#[test]
fn an_unreachable_http_upstream_is_started_again() {
    let first = bad_http_server();
    let port: u16 = first
        .url
        .rsplit(':')
        .next()
        .and_then(|rest| rest.trim_end_matches("/mcp").parse().ok())
        .unwrap();
    let config = config_with(&format!(
        "[mcpServers.bad]\nurl = {}\n",
        toml_str(&first.url)
    ));
    let gateway = serve_http(&config);
    let echo = |text: &str| call_tool("bad___echo", json!({ "text": text }));
    let run = |plan: Value| -> Vec<Value> {
        peers::run_client_at("offload_client.py", &gateway.url, &plan)["steps"]
            .as_array()
            .unwrap()
            .clone()
    };
    let steps = run(json!([{"op": "list"}, echo("up")]));
    assert_eq!(steps[1]["text"], "up", "{}", steps[1]);

    drop(first);
    let steps = run(json!([echo("1")]));
    let gone = error_text(&steps[0]);
    assert!(gone.contains("server `bad` is down"), "{gone}");

    let _second = bad_http_server_on(port);
    let mut answered = None;
    for _ in 0..60 {
        let steps = run(json!([echo("back")]));
        if steps[0]["is_error"] == false {
            answered = Some(steps);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let steps = answered.expect("the upstream never answered again");
    assert_eq!(steps[0]["text"], "back");
}
