//! A gateway config file, read from disk, drives the upstreams: filters, categories, tags,
//! never_defer; a malformed file names itself, the key and the position.

use crate::common;

use std::path::PathBuf;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsearch_core::DeferPolicy;
use toolsearch_gateway::{GatewayConfig, GatewayError, UpstreamManager};

use common::*;

fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolsearch-gateway-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_drives_the_upstreams() {
    init_logs();
    let text = format!(
        r#"
[mcpServers.everything]
command = "node"
args = [{everything}, "stdio"]

[mcpServers.paged]
command = {python}
args = [{paged}]

[mcpServers.off]
command = "/nonexistent/never-started"
disabled = true

[toolSearch]
selectedTools = ["everything:echo", "paged:tool_*"]
never_defer = ["everything___echo"]
categories = {{ everything = "testing" }}
tags = {{ paged = ["paging", "python"] }}
callTimeoutSecs = 30
"#,
        everything = toml_string(&everything_js()),
        python = toml_string(&venv_python()),
        paged = toml_string(&paged_server_py()),
    );
    let path = write_temp("gateway.toml", &text);
    let config = GatewayConfig::load(&path).unwrap();
    let manager = UpstreamManager::start(
        &config,
        toolsearch_gateway::upstream::sign_in::SignIns::for_user(),
    );
    assert_eq!(manager.servers(), ["everything", "paged"]);
    wait_ready(&manager, "everything").await;
    wait_ready(&manager, "paged").await;

    // The supervisor publishes tools as listed; the engine applies the config's policy on entry.
    assert!(manager.server_tools("everything").unwrap().len() > 1);
    let mut engine = toolsearch_core::SearchEngine::with_policy(
        toolsearch_core::SearchConfig::default(),
        config.catalog_policy(),
    )
    .unwrap();
    for server in manager.servers() {
        engine
            .replace_server(&server, manager.server_tools(&server).unwrap())
            .unwrap();
    }
    let everything = engine.catalog().server_tools("everything").to_vec();
    assert_eq!(everything.len(), 1, "only echo is selected");
    assert_eq!(everything[0].name(), "echo");
    assert_eq!(everything[0].category(), Some("testing"));
    assert_eq!(everything[0].defer(), DeferPolicy::Never);
    assert!(manager.raw_tools("everything").unwrap().len() > 1);

    let paged = engine.catalog().server_tools("paged").to_vec();
    assert_eq!(paged.len(), 5);
    assert!(paged.iter().all(|t| t.name().starts_with("tool_")));
    assert!(paged.iter().all(|t| t.tags() == ["paging", "python"]));
    assert!(paged.iter().all(|t| t.defer() == DeferPolicy::Automatic));
    assert_eq!(engine.catalog().len(), 6);

    let err = manager
        .call("everything", "get-sum", None, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::ToolNotSelected { .. }), "{err}");

    let result = guard(
        "echo",
        manager.call(
            "everything",
            "echo",
            json!({"message": "from a config file"})
                .as_object()
                .cloned(),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert!(first_text(&result).contains("from a config file"));
    manager.shutdown().await;
}

#[test]
fn malformed_config_file_names_file_key_and_position() {
    let path = write_temp(
        "bad.json",
        "{\n  \"mcpServers\": {\"a\": {\"command\": \"x\"}},\n  \"toolSearch\": {\"preset\": \"serch\"}\n}\n",
    );
    let err = GatewayConfig::load(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("toolSearch.preset"), "{text}");
    assert!(text.contains("line 3"), "{text}");
    assert!(text.contains("serch"), "{text}");

    let path = write_temp("bad.toml", "[mcpServers.a]\ncommand = [\n");
    let err = GatewayConfig::load(&path).unwrap_err();
    assert_eq!(err.line, Some(2), "{err}");
}
