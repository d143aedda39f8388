//! Per-token scopes through the real binary: `toolsearch serve` over HTTP in front of two real
//! upstreams (server-everything, and tests/clients/catalog_server.py serving a small catalog),
//! with two tokens limited to different tools, driven by the official Python MCP SDK client
//! (tests/clients/offload_client.py, one session per token) and over REST. Each token searches,
//! lists, counts, is offered and calls only its own tools; a tool outside its scope answers as an
//! unknown tool, and a large output stored for one token's session is unknown to the other's.
//! Resource scopes hold on canonical paths: in front of tests/clients/files_server.py, a file
//! server that normalises whatever path it is asked for, a token scoped to `files:*/public/*`
//! cannot reach `/secret/key.txt` through `..`, `%2e%2e`, `%2f`, `\` or any other traversal form,
//! in any preset.
//! The peers come from scripts/install-test-peers.sh.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::peers;
use peers::{everything_js, serve_http, toml_str, venv_python};

/// Every tool of server-everything.
const EVERYTHING: &str = "everything-token-0123456789";
/// The catalog server's tools, and server-everything's `echo`.
const CATALOG: &str = "catalog-token-0123456789";

/// The catalog server's tools.
fn catalog_tools() -> Value {
    let schema = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
    json!([
        {"name": "create_issue", "description": "Open a new issue in a repository with a title and body.",
         "inputSchema": schema(json!({"repo": {"type": "string"}, "title": {"type": "string"}}), json!(["repo", "title"]))},
        {"name": "list_pull_requests", "description": "List the open pull requests of a repository.",
         "inputSchema": schema(json!({"repo": {"type": "string"}}), json!(["repo"]))},
        {"name": "search_code", "description": "Search source code across repositories.",
         "inputSchema": schema(json!({"query": {"type": "string"}}), json!(["query"]))}
    ])
}

fn config() -> peers::ScratchFile {
    let dir = peers::scratch("scopes-cli");
    let tools = dir.join("tools.json");
    std::fs::write(&tools, catalog_tools().to_string()).unwrap();
    let text = format!(
        r#"[mcpServers.everything]
command = "node"
args = [{js}, "stdio"]

[mcpServers.catalog]
command = {python}
args = [{server}, {tools}]

[toolSearch]
threshold = 3

[[categories]]
id = "demo"
name = "Demo"
servers = ["everything"]

[[categories]]
id = "code"
name = "Code hosting"
servers = ["catalog"]

[[rest.tokens]]
name = "everything"
token = "{EVERYTHING}"
tools = ["everything:*"]

[[rest.tokens]]
name = "catalog"
tokenEnv = "SCOPES_CLI_CATALOG_TOKEN"
tools = ["catalog:*", "everything___echo"]
"#,
        js = toml_str(&everything_js()),
        python = toml_str(&venv_python()),
        server = toml_str(&peers::client("catalog_server.py")),
        tools = toml_str(&tools.to_string_lossy()),
    );
    peers::ScratchFile::write_in(dir, "gateway.toml", &text)
}

fn error_text(step: &Value) -> String {
    assert_eq!(step["is_error"], true, "expected an error: {step}");
    step["json"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {step}"))
        .to_string()
}

/// Fails unless `step` is the answer to an unknown tool `name`, offering only names in scope
/// (`in_scope`) and never one of `hidden`.
fn assert_unknown(step: &Value, name: &str, in_scope: impl Fn(&str) -> bool, hidden: &[&str]) {
    let message = error_text(step);
    assert!(
        message.starts_with(&format!("unknown tool `{name}`")),
        "{name}: {message}"
    );
    let text = step["text"].as_str().unwrap();
    let shown = text.replace(name, "");
    for hidden in hidden {
        assert!(!shown.contains(hidden), "{hidden} shows through: {text}");
    }
    for suggested in step["json"]["didYouMean"].as_array().into_iter().flatten() {
        let suggested = suggested.as_str().unwrap();
        assert!(in_scope(suggested), "{suggested} is offered: {text}");
    }
    assert!(step["json"].get("schema").is_none(), "{text}");
}

fn names(step: &Value) -> BTreeSet<String> {
    step["structured"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {step}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn categories(value: &Value) -> Vec<(String, u64)> {
    value["categories"]
        .as_array()
        .unwrap_or_else(|| panic!("no categories: {value}"))
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["toolCount"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn call(session: &str, name: &str, arguments: Value) -> Value {
    json!({"op": "call", "session": session, "name": name, "arguments": arguments})
}

#[test]
fn two_tokens_see_two_views_over_mcp_and_rest() {
    let config = config();
    // The catalog token's secret comes from the environment (`tokenEnv`).
    std::env::set_var("SCOPES_CLI_CATALOG_TOKEN", CATALOG);
    let gateway = serve_http(&config);
    let message: String = (0..800)
        .map(|i| format!("line {i:05} lorem ipsum dolor sit amet\n"))
        .collect();
    let issue = json!({"repo": "acme/site", "title": "Broken link"});
    let plan = json!([
        // Session e: the everything token.
        {"op": "list", "session": "e", "token": EVERYTHING},
        call("e", "search_tools", json!({"query": "create issue pull request"})),
        call("e", "search_tools", json!({"query": "echo"})),
        call("e", "list_categories", json!({})),
        call("e", "get_tools_by_category", json!({"category": "code"})),
        call("e", "call_tool", json!({"name": "catalog___create_issue", "arguments": issue})),
        call("e", "catalog___create_issue", json!({})),
        call("e", "call_tool", json!({"name": "create_issue", "arguments": issue})),
        call("e", "everything___echo", json!({"message": "direct"})),
        {"op": "call", "session": "e", "name": "everything___echo", "arguments": {"message": message}, "save": "h"},
        call("e", "read_large_output", json!({"handle": "$h", "length": 10})),
        // Session c: the catalog token.
        {"op": "list", "session": "c", "token": CATALOG},
        call("c", "search_tools", json!({"query": "create issue pull request"})),
        call("c", "list_categories", json!({})),
        call("c", "get_tools_by_category", json!({"category": "demo"})),
        call("c", "call_tool", json!({"name": "catalog___create_issue", "arguments": issue})),
        call("c", "everything___echo", json!({"message": "direct"})),
        call("c", "call_tool", json!({"name": "everything___get-env", "arguments": {}})),
        call("c", "everything___get-env", json!({})),
        call("c", "read_large_output", json!({"handle": "$h"})),
        call("c", "search_tools", json!({"query": "environment variables"})),
        // Prompts obey the same scope.
        {"op": "prompts", "session": "e"},
        {"op": "prompts", "session": "c"},
        {"op": "get_prompt", "session": "c", "name": "everything___simple-prompt"},
        {"op": "get_prompt", "session": "e", "name": "everything___simple-prompt"},
        // So do resources and the prompt search.
        {"op": "resources", "session": "e"},
        {"op": "resources", "session": "c"},
        {"op": "read", "session": "c", "uri": "toolsearch://everything/demo://resource/static/document/architecture.md"},
        {"op": "read", "session": "e", "uri": "toolsearch://everything/demo://resource/static/document/architecture.md"},
        call("c", "search_prompts", json!({"query": "simple prompt"})),
        call("e", "search_prompts", json!({"query": "simple prompt"})),
    ]);
    let report = peers::run_client_at("offload_client.py", &gateway.url, &plan);
    let steps = report["steps"].as_array().unwrap();
    let everything_scope = |name: &str| name.starts_with("everything___");
    let catalog_scope = |name: &str| name.starts_with("catalog___") || name == "everything___echo";

    // The everything token: its list, searches and categories hold no catalog tool.
    let listed = steps[0]["names"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .all(|n| !n.as_str().unwrap().starts_with("catalog___")),
        "{listed:?}"
    );
    assert!(listed.contains(&json!("search_tools")), "{listed:?}");
    let searched = &steps[1];
    assert_eq!(searched["is_error"], false, "{searched}");
    assert!(
        names(searched).iter().all(|n| everything_scope(n)),
        "{searched}"
    );
    assert!(
        !searched["text"].as_str().unwrap().contains("catalog"),
        "{searched}"
    );
    assert!(
        names(&steps[2]).contains("everything___echo"),
        "{}",
        steps[2]
    );
    let demo = categories(&steps[3]["structured"]);
    assert_eq!(demo.len(), 1, "{demo:?}");
    assert_eq!(demo[0].0, "demo");
    let everything_tools = demo[0].1;
    assert!(everything_tools > 3, "{demo:?}");
    let message = error_text(&steps[4]);
    assert!(
        message.contains("unknown category `code`") && message.ends_with("demo"),
        "{message}"
    );
    // Out of scope: unknown through call_tool, directly, by bare name, with or without valid
    // arguments, and nothing of the catalog named back.
    let hidden = [
        "catalog___",
        "create_issue",
        "list_pull_requests",
        "search_code",
    ];
    assert_unknown(
        &steps[5],
        "catalog___create_issue",
        everything_scope,
        &hidden,
    );
    assert_unknown(
        &steps[6],
        "catalog___create_issue",
        everything_scope,
        &hidden,
    );
    assert_unknown(&steps[7], "create_issue", everything_scope, &hidden);
    // In scope: a direct call, and a large output offloaded and read back by its session.
    assert_eq!(steps[8]["is_error"], false, "{}", steps[8]);
    assert_eq!(steps[8]["text"], "Echo: direct");
    let handle = report["saved"]["h"].as_str().unwrap();
    assert_eq!(steps[10]["is_error"], false, "{}", steps[10]);
    assert_eq!(steps[10]["structured"]["text"], "Echo: line");

    // The catalog token: the catalog and echo, nothing else of server-everything.
    let listed: Vec<&str> = steps[11]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        listed
            .iter()
            .all(|n| !n.starts_with("everything___") || *n == "everything___echo"),
        "{listed:?}"
    );
    let searched = names(&steps[12]);
    assert!(searched.contains("catalog___create_issue"), "{searched:?}");
    assert!(searched.iter().all(|n| catalog_scope(n)), "{searched:?}");
    assert_eq!(
        categories(&steps[13]["structured"]),
        [("demo".to_string(), 1), ("code".to_string(), 3)]
    );
    let echo_only = &steps[14]["structured"];
    assert_eq!(echo_only["totalMatches"], 1, "{echo_only}");
    assert_eq!(echo_only["tools"][0]["name"], "everything___echo");
    let created = &steps[15];
    assert_eq!(created["is_error"], false, "{created}");
    assert_eq!(created["json"]["tool"], "create_issue", "{created}");
    assert_eq!(steps[16]["text"], "Echo: direct", "{}", steps[16]);
    let hidden = ["get-env", "get-sum", "get-structured-content"];
    assert_unknown(&steps[17], "everything___get-env", catalog_scope, &hidden);
    assert_unknown(&steps[18], "everything___get-env", catalog_scope, &hidden);
    // The everything token's stored output is unknown to the catalog token's session.
    let prompts = |index: usize| -> Vec<String> {
        steps[index]["names"]
            .as_array()
            .unwrap_or_else(|| panic!("a prompt list: {}", steps[index]))
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let everything_prompts = prompts(21);
    assert!(
        everything_prompts.contains(&"everything___simple-prompt".to_string()),
        "{everything_prompts:?}"
    );
    assert!(
        prompts(22).is_empty(),
        "the catalog token's scope holds no prompt: {}",
        steps[22]
    );
    assert_eq!(steps[23]["code"], -32602, "{}", steps[23]);
    assert!(steps[24]["messages"].is_array(), "{}", steps[24]);
    let uris = |index: usize| steps[index]["uris"].as_array().unwrap().len();
    assert!(uris(25) > 0, "{}", steps[25]);
    assert_eq!(
        uris(26),
        0,
        "the catalog token's scope holds no resource: {}",
        steps[26]
    );
    assert_eq!(steps[27]["code"], -32002, "{}", steps[27]);
    assert!(steps[28]["contents"].is_array(), "{}", steps[28]);
    let prompt_results = |index: usize| {
        steps[index]["structured"]["tools"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(prompt_results(29), 0, "{}", steps[29]);
    assert!(prompt_results(30) > 0, "{}", steps[30]);

    let message = error_text(&steps[19]);
    assert!(
        message.contains(&format!("no large output `{handle}` in this session"))
            && message.contains("this session holds: none"),
        "{message}"
    );
    let missed = &steps[20]["structured"];
    assert!(
        missed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| catalog_scope(t["name"].as_str().unwrap())),
        "{missed}"
    );
    assert!(!missed.to_string().contains("get-env"), "{missed}");

    // REST answers each token with the same view.
    let addr = gateway
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let rest = |token: &str, path: &str, body: Value| {
        let (status, body) = peers::http(&addr, "POST", path, Some(token), Some(&body.to_string()));
        assert_eq!(status, 200, "{path}: {body}");
        body
    };
    let categories_of =
        |token| categories(&rest(token, "/api/mcp-standard/list_categories", json!({})));
    assert_eq!(
        categories_of(EVERYTHING),
        [("demo".to_string(), everything_tools)]
    );
    assert_eq!(
        categories_of(CATALOG),
        [("demo".to_string(), 1), ("code".to_string(), 3)]
    );
    let found = |token, query: &str| -> BTreeSet<String> {
        rest(
            token,
            "/api/mcp-standard/search_tools",
            json!({"query": query, "limit": 50}),
        )["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(found(EVERYTHING, "create issue")
        .iter()
        .all(|n| everything_scope(n)));
    assert_eq!(
        found(CATALOG, "create issue").into_iter().next().as_deref(),
        Some("catalog___create_issue")
    );
    assert!(found(CATALOG, "echo environment sum")
        .iter()
        .all(|n| catalog_scope(n)));
    let (status, _) = peers::http(
        &addr,
        "POST",
        "/api/mcp-standard/list_categories",
        Some("not-a-token"),
        Some("{}"),
    );
    assert_eq!(status, 401);
}

/// A token limited to `files:*/public/*`.
const PUBLIC_FILES: &str = "public-files-token-0123456789";
const SECRET: &str = "SECRET-KEY-4242";
const FILES: &str = "toolsearch://files/";

/// Paths that name `/secret/key.txt` to a server that decodes and normalises what it is asked
/// for, though their text matches `*/public/*`.
const TRAVERSALS: [&str; 10] = [
    "file:///public/../secret/key.txt",
    "file:///public/%2e%2e/secret/key.txt",
    "file:///public/%2E%2e/secret/key.txt",
    "file:///public/..%2fsecret/key.txt",
    "file:///public/..%2Fsecret%2Fkey.txt",
    "file:///public/%5c..%5csecret%5ckey.txt",
    "file:///public//../../secret/key.txt",
    "file:///public/x/../../secret/key.txt",
    "file:///public/%252e%252e/secret/key.txt",
    "file:///public\\..\\secret\\key.txt",
];

/// Refused as the gateway cannot make them canonical, though their text matches `*/public/*`.
const UNCANONICAL: [&str; 5] = [
    "file:///public/../../secret/key.txt",
    "file:///public/a.txt%00",
    "file:///public/%zz",
    "file://public/secret/key.txt",
    "file:///secret/key.txt?/public/",
];

/// Runs tests/clients/mcp_client.py with `plan` and `args` (its transport); returns its report.
fn mcp_client(plan: &Value, args: &[&str]) -> Value {
    let output = std::process::Command::new(venv_python())
        .arg(peers::client("mcp_client.py"))
        .arg("--plan")
        .arg(plan.to_string())
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "the client printed no JSON ({e}):\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(
        output.status.success() && report.get("fatal").is_none(),
        "the client failed: {report}"
    );
    report
}

fn read(uri: &str) -> Value {
    json!({"op": "read", "uri": uri})
}

/// The text of a successful read.
fn read_text(step: &Value) -> &str {
    step["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text read: {step}"))
}

/// Fails unless `step` is the gateway's answer to an unknown resource `uri`, the answer an URI
/// outside the scope gets, with nothing of the secret in it.
fn assert_unknown_resource(step: &Value, uri: &str) {
    assert_eq!(step["code"], -32002, "{uri}: {step}");
    let message = step["error"].as_str().unwrap();
    assert!(message.contains("no resource `"), "{uri}: {message}");
    assert!(!step.to_string().contains(SECRET), "{uri}: {step}");
}

/// The trusting file server really serves the secret for the traversal forms: what the gateway
/// must refuse is not refused upstream.
#[test]
fn the_files_server_serves_traversals_when_asked_directly() {
    let plan: Vec<Value> = TRAVERSALS.iter().map(|uri| read(uri)).collect();
    let server = peers::client("files_server.py");
    let report = mcp_client(&json!(plan), &["--stdio", &venv_python(), &server]);
    let served = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["contents"][0]["text"] == SECRET)
        .count();
    // All but the raw backslashes, which its template does not match.
    assert_eq!(served, TRAVERSALS.len() - 1, "{report}");
}

/// A token scoped to `files:*/public/*` reads the public files, also by a path that stays inside
/// `/public/`, and is answered "no resource" for every path that leaves it, however written, in
/// every preset, through reads, subscriptions and completions.
#[test]
fn resource_scopes_hold_on_canonical_paths_in_every_preset() {
    for preset in ["search", "progressive", "add", "limit", "passthrough"] {
        let text = format!(
            r#"[mcpServers.files]
command = {python}
args = [{server}]

[toolSearch]
preset = "{preset}"

[[rest.tokens]]
name = "public-files"
token = "{PUBLIC_FILES}"
tools = ["files:*/public/*"]
"#,
            python = toml_str(&venv_python()),
            server = toml_str(&peers::client("files_server.py")),
        );
        let config = peers::ScratchFile::new("scopes-files", "gateway.toml", &text);
        let gateway = peers::serve_http_at_once(&config);
        let template = format!("{FILES}file:///public/{{+path}}");
        let mut plan = vec![
            json!({"op": "resources"}),
            json!({"op": "templates"}),
            read(&format!("{FILES}file:///public/a.txt")),
            read(&format!("{FILES}file:///public/x/..//./b.txt")),
            read(&format!("{FILES}file:///secret/key.txt")),
            json!({"op": "complete_resource", "uri": template, "argument": {"name": "path", "value": "a"}}),
            json!({"op": "complete_resource", "uri": format!("{FILES}file:///public/../secret/{{+path}}"), "argument": {"name": "path", "value": ""}}),
            json!({"op": "subscribe", "uri": format!("{FILES}file:///public/a.txt")}),
        ];
        for uri in TRAVERSALS.iter().chain(&UNCANONICAL) {
            let uri = format!("{FILES}{uri}");
            plan.push(read(&uri));
            plan.push(json!({"op": "subscribe", "uri": uri}));
            plan.push(json!({"op": "unsubscribe", "uri": uri}));
        }
        let report = mcp_client(
            &json!(plan),
            &["--url", &gateway.url, "--token", PUBLIC_FILES],
        );
        let steps = report["steps"].as_array().unwrap();
        let context = format!("preset {preset}");

        assert_eq!(
            steps[0]["uris"],
            json!([format!("{FILES}file:///public/a.txt")]),
            "{context}"
        );
        assert_eq!(steps[1]["templates"], json!([template]), "{context}");
        assert_eq!(read_text(&steps[2]), "public text A", "{context}");
        // A path that stays inside /public/ is read by its canonical form.
        assert_eq!(read_text(&steps[3]), "public text B", "{context}");
        assert_eq!(
            steps[3]["contents"][0]["uri"],
            format!("{FILES}file:///public/b.txt"),
            "{context}"
        );
        let outside = format!("{FILES}file:///secret/key.txt");
        assert_unknown_resource(&steps[4], &outside);
        assert_eq!(
            steps[5]["values"],
            json!(["a.txt"]),
            "{context}: {}",
            steps[5]
        );
        assert_unknown_resource(&steps[6], &context);
        // In scope, a subscription reaches the server (which offers none); out of scope it is
        // an unknown resource like any other.
        let offered = steps[7]["error"].as_str().unwrap_or_default();
        assert!(
            offered.contains("does not offer subscriptions"),
            "{context}: {}",
            steps[7]
        );
        let answer_outside = steps[4]["error"].as_str().unwrap().replace(&outside, "");
        for (index, uri) in TRAVERSALS.iter().chain(&UNCANONICAL).enumerate() {
            let uri = format!("{FILES}{uri}");
            for step in &steps[8 + 3 * index..8 + 3 * index + 3] {
                assert_unknown_resource(step, &format!("{context}: {uri}"));
                // Word for word what an URI outside the scope gets.
                let message = step["error"].as_str().unwrap();
                let shown = message.replace(&uri, "");
                assert_eq!(shown, answer_outside, "{context}: {uri}");
            }
        }
    }
}
