//! One search contract: the same query through MCP `search_tools` (the official Python SDK client
//! over Streamable HTTP), REST `search_tools` on the same gateway, the CLI's `--json` and the
//! library gives byte-identical JSON; and `search_tools`' structured content validates against the
//! `outputSchema` it declares.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use toolsearch_core::contract::{self, SearchArgs, SearchOptions};
use toolsearch_core::{parse_catalog, CatalogFormat, CatalogPolicy, SearchConfig, SearchEngine};

mod peers;
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
const QUERIES: [&str; 3] = ["send an email", "read_file", "zzqqxv"];

fn library_json(query: &str) -> String {
    let mut tools = parse_catalog(TOOLS, "tools.json", Some(CatalogFormat::Mcp)).unwrap();
    for tool in &mut tools {
        tool.server = SERVER.to_string();
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
    let results =
        contract::search(&engine, &SearchArgs::new(query), &SearchOptions::default()).unwrap();
    serde_json::to_string(&results).unwrap()
}

fn cli_json(catalog: &Path, query: &str) -> String {
    let output = toolsearch()
        .args(["search", "--json", "--catalog"])
        .arg(catalog)
        .arg(query)
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
    let plan: Vec<Value> = QUERIES
        .iter()
        .map(|q| json!({"op": "call_checked", "name": "search_tools", "arguments": {"query": q}}))
        .collect();
    let report = run_client_at("mcp_client.py", &gateway.url, &json!(plan));

    for (i, query) in QUERIES.iter().enumerate() {
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

        let body = json!({"query": query}).to_string();
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
    let hit: Value = serde_json::from_str(&library_json("send an email")).unwrap();
    assert_eq!(hit["tools"][0]["name"], "catalog___send_email");
    assert!(hit["tools"][0]["inputSchema"].is_object());
    let exact: Value = serde_json::from_str(&library_json("read_file")).unwrap();
    assert_eq!(exact["tools"][0]["score"], 1.0);
    let miss: Value = serde_json::from_str(&library_json("zzqqxv")).unwrap();
    assert_eq!(miss["totalMatches"], 0);
    assert_eq!(miss["fallback"]["kind"], "names");
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
