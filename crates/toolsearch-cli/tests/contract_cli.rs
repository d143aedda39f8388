//! One search contract: the same query through MCP `search_tools` (the official Python SDK client
//! over Streamable HTTP), REST `search_tools` on the same gateway, the CLI's `--json` and the
//! library gives byte-identical JSON; and `search_tools`' structured content validates against the
//! `outputSchema` it declares.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use toolsearch_core::contract::{self, SearchArgs, SearchOptions};
use toolsearch_core::{parse_catalog, CatalogFormat, CatalogPolicy, SearchConfig, SearchEngine};

use crate::peers;
use peers::{http_raw, run_client_at, serve_http, toolsearch, wait_for_search};

/// The catalog, as an MCP `tools/list` array: served by a Python MCP server behind the gateway,
/// and read from a file by the CLI and the library. `type` comes last in each schema because the
/// Python SDK moves it there; the gateway passes an upstream's schema on as the upstream wrote it.
const TOOLS: &str = r#"[
  {"name": "send_email", "description": "Send an email to a recipient",
   "inputSchema": {"properties": {"to": {"type": "string", "description": "Recipient address"}, "subject": {"type": "string"}}, "required": ["to"], "type": "object"}},
  {"name": "read_email", "description": "Read email messages from the inbox",
   "inputSchema": {"properties": {"folder": {"type": "string"}}, "type": "object"}},
  {"name": "read_file", "description": "Read a text file from disk",
   "inputSchema": {"properties": {"path": {"type": "string", "description": "File path"}}, "required": ["path"], "type": "object"}},
  {"name": "write_file", "description": "Write text to a file on disk",
   "inputSchema": {"properties": {"path": {"type": "string"}, "text": {"type": "string"}}, "type": "object"}},
  {"name": "get_weather", "description": "Current weather for a city",
   "inputSchema": {"properties": {"city": {"type": "string"}}, "type": "object"}},
  {"name": "create_event", "description": "Create a calendar event and invite people by email",
   "inputSchema": {"properties": {"title": {"type": "string"}, "attendees": {"type": "array", "items": {"type": "string"}}}, "type": "object"}}
]"#;

const SERVER: &str = "catalog";
/// Each is one search: a ranked hit, an exact name, a miss with its fallback, and several needs
/// in one search (`queries`), two of which share tools.
const SEARCHES: [&[&str]; 4] = [
    &["send an email"],
    &["read_file"],
    &["zzqqxv"],
    &["send an email", "read email messages", "zzqqxv"],
];

/// A search's arguments as a client writes them.
fn arguments(queries: &[&str]) -> Value {
    match queries {
        [one] => json!({"query": one}),
        several => json!({"queries": several}),
    }
}

fn library_json(queries: &[&str]) -> String {
    let mut tools = parse_catalog(TOOLS, "tools.json", Some(CatalogFormat::Mcp)).unwrap();
    for tool in &mut tools {
        tool.set_server(SERVER);
    }
    let mut engine =
        SearchEngine::build(tools, SearchConfig::default(), CatalogPolicy::default()).unwrap();
    // The model the binary finds (TOOLSEARCH_MODEL_DIR), so that every face searches alike.
    if let Some(dir) = std::env::var_os("TOOLSEARCH_MODEL_DIR") {
        if let Ok(model) = toolsearch_embed::BertEmbedder::load(Path::new(&dir)) {
            engine.set_embedder(Some(std::sync::Arc::new(model)));
            engine.embed_pending().unwrap();
        }
    }
    let args: SearchArgs = serde_json::from_value(arguments(queries)).unwrap();
    let results = contract::search(&engine, &args, &SearchOptions::default()).unwrap();
    serde_json::to_string(&results).unwrap()
}

fn cli_json(catalog: &Path, queries: &[&str]) -> String {
    let output = toolsearch()
        .args(["search", "--json", "--catalog"])
        .arg(catalog)
        .args(queries)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn every_face_writes_the_same_search_json() {
    let dir = peers::scratch("contract");
    let catalog = dir.join("catalog.json");
    let multi = json!({"servers": {SERVER: serde_json::from_str::<Value>(TOOLS).unwrap()}});
    std::fs::write(&catalog, multi.to_string()).unwrap();
    let config = peers::catalog_server_config(&dir, SERVER, TOOLS);

    let gateway = serve_http(&config);
    let addr = gateway.addr();
    let status = wait_for_search(&addr);
    if std::env::var_os("TOOLSEARCH_REQUIRE_MODEL").is_some() {
        assert_eq!(status["defaultMode"], "hybrid", "{status}");
    }
    let plan: Vec<Value> = SEARCHES
        .iter()
        .map(|q| json!({"op": "call_checked", "name": "search_tools", "arguments": arguments(q)}))
        .collect();
    let report = run_client_at("mcp_client.py", &gateway.url, &json!(plan));

    for (i, query) in SEARCHES.iter().enumerate() {
        let mcp = &report["steps"][i];
        assert_eq!(mcp["is_error"], false, "{mcp}");
        assert_eq!(
            mcp["schema_errors"],
            json!([]),
            "structuredContent must validate against outputSchema: {mcp}"
        );
        assert_eq!(mcp["output_schema"]["type"], "object", "{mcp}");
        let mcp_text = mcp["text"].as_str().unwrap().to_string();
        assert_eq!(
            serde_json::from_str::<Value>(&mcp_text).unwrap(),
            mcp["structured"],
            "the text and the structured content are the same JSON"
        );

        let body = arguments(query).to_string();
        let (status, rest) = http_raw(
            &addr,
            "POST",
            "/api/mcp-standard/search_tools",
            None,
            Some(&body),
        );
        assert_eq!(status, 200, "{rest}");
        let cli = cli_json(&catalog, query);
        let library = library_json(query);

        assert_eq!(mcp_text, library, "MCP vs library for {query:?}");
        assert_eq!(rest, library, "REST vs library for {query:?}");
        assert_eq!(cli, library, "CLI vs library for {query:?}");
    }

    // The queries exercise a ranked hit, an exact name and a miss with its fallback.
    let hit: Value = serde_json::from_str(&library_json(SEARCHES[0])).unwrap();
    assert_eq!(hit["tools"][0]["name"], "catalog___send_email");
    assert!(hit["tools"][0]["inputSchema"].is_object());
    assert!(hit.get("perQuery").is_none());
    let exact: Value = serde_json::from_str(&library_json(SEARCHES[1])).unwrap();
    assert_eq!(exact["tools"][0]["score"], 1.0);
    let miss: Value = serde_json::from_str(&library_json(SEARCHES[2])).unwrap();
    // With the model, the closest guesses, scored under 0.5; by words alone, nothing.
    if miss["mode"] == "hybrid" {
        assert_eq!(miss["nothingFits"], true, "{miss}");
        assert!(miss["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["score"].as_f64().unwrap() < 0.5));
    } else {
        assert_eq!(miss["totalMatches"], 0, "{miss}");
    }
    assert_eq!(miss["fallback"]["kind"], "names");
    // Several needs: each query's own results by name, every tool listed once.
    let several: Value = serde_json::from_str(&library_json(SEARCHES[3])).unwrap();
    let parts = several["perQuery"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0]["tools"][0], "catalog___send_email");
    assert_eq!(parts[1]["tools"][0], "catalog___read_email");
    assert_eq!(parts[2]["fallback"]["kind"], "names");
    let listed: Vec<&str> = several["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let named: std::collections::BTreeSet<&str> = parts
        .iter()
        .flat_map(|p| p["tools"].as_array().unwrap())
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), named.len(), "each tool once: {listed:?}");
    assert_eq!(
        listed
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        named
    );
}

#[test]
fn docs_show_the_schemas_toolsearch_prints() {
    let output = toolsearch().arg("schema").output().unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONTRACT.md"),
    )
    .unwrap();
    let block = doc
        .split("<!-- toolsearch schema -->\n```json\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/CONTRACT.md has the schema block");
    assert_eq!(
        block.trim(),
        printed.trim(),
        "docs/CONTRACT.md is stale: paste `toolsearch schema` into it"
    );
    let schemas: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(schemas["SearchResults"]["type"], "object");
}
