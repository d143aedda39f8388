//! What MCP carries besides tools, through `toolsearch serve`: resources, templates,
//! subscriptions, progress, logging, and an upstream's requests to the client (sampling,
//! elicitation, roots). The real binary in front of two real server-everything upstreams (from
//! npm), driven by the official Python MCP client (tests/clients/mcp_client.py) over stdio and
//! Streamable HTTP; the client answers the upstream's requests through its callbacks.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::peers;
use peers::{everything_js, toml_str, Transport};

/// Two server-everything upstreams, `everything` and `second`: every resource URI and template
/// of one is also one of the other.
fn config(dir: &Path) -> PathBuf {
    let server = |name: &str| {
        format!(
            "[mcpServers.{name}]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n",
            toml_str(&everything_js())
        )
    };
    let text = format!(
        "{}\n{}\n[toolSearch]\npreset = \"search\"\n",
        server("everything"),
        server("second")
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The same two upstreams over Streamable HTTP, each its own server-everything process.
fn http_config(dir: &Path, everything: &peers::Service, second: &peers::Service) -> PathBuf {
    let server = |name: &str, upstream: &peers::Service| {
        format!(
            "[mcpServers.{name}]\ntype = \"http\"\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            upstream.port
        )
    };
    let text = format!(
        "{}\n{}\n[toolSearch]\npreset = \"search\"\n",
        server("everything", everything),
        server("second", second)
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn step(report: &Value, index: usize) -> &Value {
    &report["steps"][index]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

const ARCHITECTURE: &str = "demo://resource/static/document/architecture.md";
const TEXT_TEMPLATE: &str = "demo://resource/dynamic/text/{resourceId}";

fn gateway_uri(server: &str, uri: &str) -> String {
    format!("toolsearch://{server}/{uri}")
}

/// Resources of two upstreams with the same URIs: listed and read under each server's gateway
/// URI, templates filled in and completed, URIs in tool results rewritten so that they can be
/// read back, an upstream URI refused as not found, and a subscription's updates delivered.
fn resources_session(transport: Transport) {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    let architecture = gateway_uri("second", ARCHITECTURE);
    let filled = gateway_uri("everything", "demo://resource/dynamic/text/3");
    let subscribed = gateway_uri("everything", ARCHITECTURE);
    let report = peers::run_client(
        "mcp_client.py",
        transport,
        &config,
        &json!([
            {"op": "resources"},
            {"op": "templates"},
            {"op": "read", "uri": architecture},
            {"op": "read", "uri": filled},
            {"op": "read", "uri": ARCHITECTURE},
            {"op": "call", "name": "everything___get-resource-links", "arguments": {"count": 2}},
            {"op": "call", "name": "second___get-resource-reference", "arguments": {"resourceType": "Text", "resourceId": 2}},
            {"op": "read", "uri": gateway_uri("everything", "demo://resource/dynamic/text/1")},
            {"op": "complete_resource", "uri": gateway_uri("second", TEXT_TEMPLATE), "argument": {"name": "resourceId", "value": "7"}},
            {"op": "subscribe", "uri": subscribed},
            {"op": "call", "name": "everything___toggle-subscriber-updates"},
            {"op": "wait_updated", "uri": subscribed},
            {"op": "unsubscribe", "uri": subscribed}
        ]),
    );
    let caps = &report["initialize"]["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], json!(true), "{caps}");
    assert_eq!(caps["resources"]["listChanged"], json!(true), "{caps}");

    let listed = strings(&step(&report, 0)["uris"]);
    for server in ["everything", "second"] {
        let uri = gateway_uri(server, ARCHITECTURE);
        assert!(listed.contains(&uri), "{uri} in {listed:?}");
    }
    assert!(
        listed.iter().all(|u| u.starts_with("toolsearch://")),
        "{listed:?}"
    );
    let templates = strings(&step(&report, 1)["templates"]);
    assert!(
        templates.contains(&gateway_uri("everything", TEXT_TEMPLATE))
            && templates.contains(&gateway_uri("second", TEXT_TEMPLATE)),
        "{templates:?}"
    );

    let read = &step(&report, 2)["contents"][0];
    assert_eq!(read["uri"], json!(architecture), "{read}");
    assert!(!read["text"].as_str().unwrap_or("").is_empty(), "{read}");
    let read = &step(&report, 3)["contents"][0];
    assert_eq!(read["uri"], json!(filled), "{read}");
    assert!(read["text"].as_str().unwrap().contains('3'), "{read}");
    // An upstream's own URI is not a gateway URI.
    let raw = step(&report, 4);
    assert_eq!(raw["code"], json!(-32002), "{raw}");
    assert!(
        raw["error"].as_str().unwrap().contains("toolsearch://"),
        "{raw}"
    );

    // Resource links and embedded resources in tool results carry gateway URIs.
    let links: Vec<&Value> = step(&report, 5)["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{}", step(&report, 5));
    assert!(
        links.iter().all(|l| l["uri"]
            .as_str()
            .unwrap()
            .starts_with("toolsearch://everything/demo://")),
        "{links:?}"
    );
    let embedded = step(&report, 6)["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "resource")
        .unwrap_or_else(|| panic!("{}", step(&report, 6)))
        .clone();
    assert_eq!(
        embedded["resource"]["uri"],
        json!(gateway_uri("second", "demo://resource/dynamic/text/2")),
        "{embedded}"
    );
    // A linked URI reads back through the gateway.
    let linked = &step(&report, 7)["contents"][0];
    assert!(
        linked["text"].as_str().is_some() || linked["blob"].as_str().is_some(),
        "{linked}"
    );

    // Completions of a template's argument come from its upstream.
    assert_eq!(
        step(&report, 8)["values"],
        json!(["7"]),
        "{}",
        step(&report, 8)
    );

    assert_eq!(step(&report, 9)["ok"], json!(true), "{}", step(&report, 9));
    let updated = strings(&step(&report, 11)["updated"]);
    assert!(updated.contains(&subscribed), "{updated:?}");
    assert!(
        updated.iter().all(|u| u == &subscribed),
        "only the subscribed resource, under its gateway URI: {updated:?}"
    );
    assert_eq!(
        step(&report, 12)["ok"],
        json!(true),
        "{}",
        step(&report, 12)
    );
}

#[test]
fn resources_of_every_upstream_over_stdio() {
    resources_session(Transport::Stdio);
}

#[test]
fn resources_of_every_upstream_over_http() {
    resources_session(Transport::Http);
}

/// A client that offers sampling, elicitation and roots: the upstream's requests made while it
/// runs that client's calls reach it and its answers go back; the upstream's progress reaches
/// it under its own token; log messages arrive named by their server once it set a level.
fn client_requests_session(transport: Transport) {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    client_requests_session_with(transport, &config);
}

fn client_requests_session_with(transport: Transport, config: &Path) {
    let report = peers::run_client(
        "mcp_client.py",
        transport,
        config,
        &json!({
            "client": {
                "sampling": "a haiku about gateways",
                "elicitation": {"name": "Ada", "check": true},
                "roots": [{"uri": "file:///srv/project", "name": "project"}]
            },
            "steps": [
                {"op": "set_level", "level": "debug"},
                {"op": "call_progress", "name": "second___trigger-long-running-operation", "arguments": {"duration": 1, "steps": 3}},
                {"op": "call", "name": "everything___trigger-sampling-request", "arguments": {"prompt": "write", "maxTokens": 20}},
                {"op": "call", "name": "second___trigger-elicitation-request"},
                {"op": "call", "name": "everything___get-roots-list"},
                {"op": "subscribe", "uri": gateway_uri("everything", ARCHITECTURE)},
                {"op": "wait_log", "contains": "Received Subscribe Resource request"},
                {"op": "asked"},
                {"op": "call_progress", "name": "call_tool", "arguments": {"name": "everything___trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}}}
            ]
        }),
    );
    assert!(
        report["initialize"]["capabilities"]["logging"].is_object(),
        "{report}"
    );

    let progress = step(&report, 1);
    assert_eq!(progress["is_error"], json!(false), "{progress}");
    let ticks: Vec<f64> = progress["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_f64().unwrap())
        .collect();
    // Ticks come a third of a second apart; the last one races the result, which ends the
    // client's interest in the token.
    assert!(
        ticks.len() >= 2 && ticks.iter().zip([1.0, 2.0, 3.0]).all(|(a, b)| *a == b),
        "{progress}"
    );
    assert_eq!(progress["progress"][0][1], json!(3.0), "{progress}");

    let sampled = step(&report, 2);
    assert_eq!(sampled["is_error"], json!(false), "{sampled}");
    assert!(
        sampled["text"]
            .as_str()
            .unwrap()
            .contains("a haiku about gateways"),
        "{sampled}"
    );
    let elicited = step(&report, 3);
    assert!(
        elicited["text"].as_str().unwrap().contains("Name: Ada"),
        "{elicited}"
    );
    let roots = step(&report, 4);
    assert!(
        roots["text"]
            .as_str()
            .unwrap()
            .contains("file:///srv/project"),
        "{roots}"
    );

    let logs = step(&report, 6)["logs"].as_array().unwrap().clone();
    let subscribed = logs
        .iter()
        .find(|l| {
            l["data"]
                .as_str()
                .unwrap_or("")
                .contains("Received Subscribe Resource request")
        })
        .unwrap();
    assert_eq!(
        subscribed["logger"], "everything",
        "log messages are named by their server: {subscribed}"
    );

    let asked: Vec<String> = step(&report, 7)["asked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["method"].as_str().unwrap().to_string())
        .collect();
    for method in ["sampling/createMessage", "elicitation/create", "roots/list"] {
        assert!(asked.contains(&method.to_string()), "{method} in {asked:?}");
    }
    let sampling = step(&report, 7)["asked"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["method"] == "sampling/createMessage")
        .unwrap()
        .clone();
    assert!(
        sampling["params"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("write"),
        "the upstream's request reaches the client as it was sent: {sampling}"
    );

    // Through call_tool as directly: the progress of the call it runs.
    let through = step(&report, 8);
    assert_eq!(through["is_error"], json!(false), "{through}");
    assert_eq!(through["progress"][0][0], json!(1.0), "{through}");
    assert_eq!(through["progress"][0][1], json!(2.0), "{through}");
}

#[test]
fn client_requests_progress_and_logs_over_stdio() {
    client_requests_session(Transport::Stdio);
}

#[test]
fn client_requests_progress_and_logs_over_http() {
    client_requests_session(Transport::Http);
}

/// The same with both upstreams over Streamable HTTP: what an upstream sends on a call's own
/// stream before the answer (progress, its requests to the client) reaches the client.
#[test]
fn client_requests_progress_and_logs_from_http_upstreams() {
    let everything = peers::start_everything_http();
    let second = peers::start_everything_http();
    let dir = peers::scratch("passthrough-cli");
    let config = http_config(&dir, &everything, &second);
    client_requests_session_with(Transport::Http, &config);
}

/// The same with both upstreams on the legacy HTTP+SSE transport (`type = "sse"`): progress,
/// the upstreams' requests to the client, logs and subscriptions all arrive on the one event
/// stream each upstream holds open.
#[test]
fn client_requests_progress_and_logs_from_legacy_sse_upstreams() {
    let everything = peers::start_everything_sse();
    let second = peers::start_everything_sse();
    let dir = peers::scratch("passthrough-cli");
    let server = |name: &str, upstream: &peers::Service| {
        format!(
            "[mcpServers.{name}]\ntype = \"sse\"\nurl = \"http://127.0.0.1:{}/sse\"\n",
            upstream.port
        )
    };
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n{}\n[toolSearch]\npreset = \"search\"\n",
            server("everything", &everything),
            server("second", &second)
        ),
    )
    .unwrap();
    client_requests_session_with(Transport::Http, &config);
}

/// A call to a legacy SSE upstream that the gateway abandons (past `callTimeoutSecs`) is
/// cancelled at the server: the gateway's `notifications/cancelled` is posted to the endpoint the
/// server named, and the Python SDK's server cancels the tool's work.
#[test]
fn a_call_abandoned_on_a_legacy_sse_upstream_is_cancelled_there() {
    let server = peers::script_server("sse_server.py", &[], "/sse");
    let dir = peers::scratch("passthrough-cli");
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.legacy]\ntype = \"sse\"\nurl = {}\n\n[toolSearch]\npreset = \"search\"\ncallTimeoutSecs = 2\n",
            toml_str(&server.url)
        ),
    )
    .unwrap();
    let report = peers::run_client(
        "mcp_client.py",
        Transport::Http,
        &config,
        &json!([
            {"op": "call", "name": "call_tool", "arguments": {"name": "legacy___wait", "arguments": {"seconds": 60}}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "legacy___wait_for_cancel", "arguments": {}}}
        ]),
    );
    let abandoned = step(&report, 0);
    assert_eq!(abandoned["is_error"], json!(true), "{abandoned}");
    let told = step(&report, 1);
    assert_eq!(told["text"], "cancelled: 1", "{told}");
}

/// A client that offers neither sampling nor elicitation: the upstream's request gets the
/// standard "method not found" answer, and the call reports it instead of hanging.
#[test]
fn a_client_without_the_capability_gets_the_upstream_a_standard_error() {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    let report = peers::run_client(
        "mcp_client.py",
        Transport::Http,
        &config,
        &json!([
            {"op": "call", "name": "everything___trigger-sampling-request", "arguments": {"prompt": "write"}},
            {"op": "call", "name": "everything___trigger-elicitation-request"}
        ]),
    );
    for index in [0, 1] {
        let call = step(&report, index);
        assert_eq!(call["is_error"], json!(true), "{call}");
        let text = call["text"].as_str().unwrap();
        assert!(
            text.contains("-32601") && text.contains("does not support"),
            "{call}"
        );
    }
}

/// `search_prompts` finds the upstreams' prompts and resource templates by what they do, in the
/// same namespaces; `get_prompt` renders a prompt with its arguments.
fn prompt_search_session(transport: Transport) {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    let report = peers::run_client(
        "mcp_client.py",
        transport,
        &config,
        &json!([
            {"op": "list"},
            {"op": "call", "name": "search_prompts", "arguments": {"query": "a prompt that embeds a resource reference"}},
            {"op": "call", "name": "search_prompts", "arguments": {"query": "dynamic text resource", "limit": 2}},
            {"op": "call", "name": "get_prompt", "arguments": {"name": "second___args-prompt", "arguments": {"city": "Lisbon"}}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "get_prompt", "arguments": {"name": "args-prompt"}}}
        ]),
    );
    // Not listed beside `call_tool`: the instructions name them, and they answer by name or
    // through `call_tool`.
    let listed = strings(&step(&report, 0)["names"]);
    assert!(
        listed.contains(&"call_tool".to_string())
            && !listed.contains(&"search_prompts".to_string())
            && !listed.contains(&"get_prompt".to_string()),
        "{listed:?}"
    );
    let instructions = report["initialize"]["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("`search_prompts` {\"query\"}")
            && instructions.contains("`get_prompt` {\"name\", \"arguments\"}"),
        "{instructions}"
    );

    // The answer is the search contract's, as search_tools writes it.
    let found = &step(&report, 1)["structured"]["tools"];
    let first = &found[0];
    assert_eq!(first["tags"], json!(["prompt"]), "{found}");
    assert!(
        first["name"]
            .as_str()
            .unwrap()
            .ends_with("___resource-prompt"),
        "{found}"
    );
    assert!(
        first["inputSchema"]["properties"]["resourceType"].is_object(),
        "its arguments are its input schema: {found}"
    );
    assert_eq!(step(&report, 1)["structured"]["mode"], "keyword", "{found}");

    let templates = &step(&report, 2)["structured"]["tools"];
    assert_eq!(templates.as_array().unwrap().len(), 2, "{templates}");
    assert_eq!(
        templates[0]["tags"],
        json!(["resource_template"]),
        "{templates}"
    );
    let uri = templates[0]["name"].as_str().unwrap();
    assert!(
        uri.starts_with("toolsearch://")
            && uri.ends_with("demo://resource/dynamic/text/{resourceId}"),
        "{templates}"
    );
    assert!(
        step(&report, 2)["structured"]["nextOffset"].is_u64(),
        "paged as tool searches are: {}",
        step(&report, 2)
    );

    let rendered = step(&report, 3);
    assert_eq!(rendered["is_error"], json!(false), "{rendered}");
    assert_eq!(
        rendered["structured"]["messages"][0]["content"]["text"], "What's weather in Lisbon?",
        "{rendered}"
    );
    let unknown = step(&report, 4);
    assert_eq!(unknown["is_error"], json!(true), "{unknown}");
    assert!(
        unknown["text"].as_str().unwrap().contains("prompts/list"),
        "{unknown}"
    );
}

#[test]
fn prompts_found_by_what_they_do_over_stdio() {
    prompt_search_session(Transport::Stdio);
}

#[test]
fn prompts_found_by_what_they_do_over_http() {
    prompt_search_session(Transport::Http);
}

/// An upstream that gives up on its request to the client: its `notifications/cancelled` reaches
/// the client through the gateway, which cancels its own request there.
#[test]
fn an_upstream_cancelling_its_request_cancels_it_at_the_client() {
    let dir = peers::scratch("passthrough-cli");
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.briefly]\ncommand = {}\nargs = [{}]\n\n[toolSearch]\npreset = \"search\"\n",
            toml_str(&peers::venv_python()),
            toml_str(&peers::client("elicit_server.py"))
        ),
    )
    .unwrap();
    let report = peers::run_client(
        "mcp_client.py",
        Transport::Stdio,
        &config,
        &json!({
            "client": {"elicitation": "hang"},
            "steps": [
                {"op": "call", "name": "briefly___ask_briefly"},
                {"op": "wait_cancelled"}
            ]
        }),
    );
    let call = step(&report, 0);
    assert!(
        call["text"].as_str().unwrap().starts_with("no answer"),
        "{call}"
    );
    let asked = &step(&report, 1)["asked"][0];
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["cancelled"], json!(true), "{asked}");
}

/// An upstream whose resources change: the client is told with
/// `notifications/resources/list_changed` and lists and reads the new one.
fn resources_list_changed_session(transport: Transport) {
    let dir = peers::scratch("passthrough-cli");
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.notes]\ncommand = {}\nargs = [{}]\n\n[toolSearch]\npreset = \"search\"\n",
            toml_str(&peers::venv_python()),
            toml_str(&peers::client("prompts_server.py"))
        ),
    )
    .unwrap();
    let report = peers::run_client(
        "mcp_client.py",
        transport,
        &config,
        &json!([
            {"op": "resources"},
            {"op": "call", "name": "notes___add_resource", "arguments": {"name": "todo"}},
            {"op": "wait_resources_changed"},
            {"op": "resources"},
            {"op": "read", "uri": "toolsearch://notes/notes://todo"}
        ]),
    );
    let before = strings(&step(&report, 0)["uris"]);
    assert_eq!(before, ["toolsearch://notes/notes://greet"], "{before:?}");
    assert!(step(&report, 2)["resources_changed"].as_u64() >= Some(1));
    let after = strings(&step(&report, 3)["uris"]);
    assert!(
        after.contains(&"toolsearch://notes/notes://todo".to_string()),
        "{after:?}"
    );
    let read = &step(&report, 4)["contents"][0];
    assert_eq!(read["text"], "The todo note.", "{read}");
    assert_eq!(read["uri"], "toolsearch://notes/notes://todo", "{read}");
}

#[test]
fn resources_list_changed_reaches_the_client_over_stdio() {
    resources_list_changed_session(Transport::Stdio);
}

#[test]
fn resources_list_changed_reaches_the_client_over_http() {
    resources_list_changed_session(Transport::Http);
}

/// MCP does not say which call a request to the client serves: while two sessions have calls in
/// flight on one upstream, its sampling request is shown to neither, and the upstream is told why.
/// Once the other call is over, the same request goes through to the one session left.
#[test]
fn a_request_to_the_client_is_never_shown_to_another_session() {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    let gateway = peers::serve_http(&config);
    let plan = json!([
        {"op": "list", "session": "a"},
        {"op": "list", "session": "b"},
        {"op": "call", "session": "a", "name": "everything___trigger-long-running-operation",
         "arguments": {"duration": 3, "steps": 3}, "background": true},
        {"op": "sleep", "seconds": 1.0},
        {"op": "call", "session": "b", "name": "everything___trigger-sampling-request", "arguments": {"prompt": "private"}},
        {"op": "join"},
        {"op": "call", "session": "b", "name": "everything___trigger-sampling-request", "arguments": {"prompt": "private"}}
    ]);
    let report = peers::run_client_at("offload_client.py", &gateway.url, &plan);
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps[2]["is_error"], json!(false), "{}", steps[2]);
    let refused = steps[4]["text"].as_str().unwrap();
    assert!(
        steps[4]["is_error"] == json!(true)
            && refused.contains("2 client sessions have calls in flight"),
        "{}",
        steps[4]
    );
    // Alone again, session b's client is asked, and says it cannot sample (it offers no sampling).
    let alone = steps[6]["text"].as_str().unwrap();
    assert!(alone.contains("does not support"), "{}", steps[6]);
}

/// A subscription outlives its upstream's restart: the gateway subscribes again when the server
/// is back, and the client, which did nothing, gets the new process's updates.
#[test]
fn subscriptions_are_renewed_when_the_upstream_restarts() {
    let dir = peers::scratch("passthrough-cli");
    let pidfile = dir.join("everything.pid");
    let script = format!(
        "echo $$ > {pid}; exec node {js} stdio",
        pid = pidfile.display(),
        js = everything_js(),
    );
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[mcpServers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\n\
             [supervisor]\ninitialBackoffMs = 200\nmaxBackoffMs = 1000\n\n\
             [toolSearch]\npreset = \"search\"\n",
            toml_str(&script)
        ),
    )
    .unwrap();
    let uri = gateway_uri("everything", ARCHITECTURE);
    let report = peers::run_client(
        "mcp_client.py",
        Transport::Stdio,
        &config,
        &json!([
            {"op": "subscribe", "uri": uri},
            {"op": "call", "name": "everything___toggle-subscriber-updates"},
            {"op": "wait_updated", "uri": uri},
            {"op": "kill_pidfile", "path": pidfile},
            {"op": "mark_updates"},
            {"op": "call_until_ok", "name": "everything___echo", "arguments": {"message": "back"}},
            {"op": "call", "name": "everything___toggle-subscriber-updates"},
            {"op": "wait_updated", "uri": uri, "since_mark": true}
        ]),
    );
    assert!(
        !strings(&step(&report, 2)["updated"]).is_empty(),
        "{report}"
    );
    assert_eq!(
        step(&report, 5)["text"],
        "Echo: back",
        "{}",
        step(&report, 5)
    );
    // The restarted process sends updates only for what it was subscribed to: by the gateway,
    // again, since the client did nothing.
    let marked = step(&report, 4)["marked"].as_u64().unwrap() as usize;
    let after = strings(&step(&report, 7)["updated"]);
    assert!(after.len() > marked, "{after:?}");
}

/// Upstream log messages reach only a session that asked for them with `logging/setLevel`, from
/// then on, at that level and above.
#[test]
fn log_messages_reach_only_sessions_that_set_a_level() {
    let dir = peers::scratch("passthrough-cli");
    let config = config(&dir);
    let features = "demo://resource/static/document/features.md";
    let report = peers::run_client(
        "mcp_client.py",
        Transport::Http,
        &config,
        &json!([
            {"op": "subscribe", "uri": gateway_uri("everything", ARCHITECTURE)},
            {"op": "logs"},
            {"op": "set_level", "level": "error"},
            {"op": "subscribe", "uri": gateway_uri("everything", features)},
            {"op": "logs"},
            {"op": "set_level", "level": "info"},
            {"op": "subscribe", "uri": gateway_uri("second", features)},
            {"op": "wait_log", "contains": "features.md"}
        ]),
    );
    // server-everything logs each subscription at level info.
    assert_eq!(step(&report, 1)["logs"], json!([]), "no level set: nothing");
    assert_eq!(step(&report, 4)["logs"], json!([]), "level error: no info");
    let logs = step(&report, 7)["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["logger"], "second", "{logs:?}");
    assert_eq!(logs[0]["level"], "info", "{logs:?}");
}
