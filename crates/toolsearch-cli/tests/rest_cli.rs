//! `toolsearch serve --rest-only` as a user runs it: the real binary on a free port, plain HTTP.

use std::path::PathBuf;
use std::process::Child;

use serde_json::json;

use crate::peers;
use peers::{http, toolsearch};

fn catalog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog.json")
}

/// The server process, killed when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(extra: &[&str], tokens: Option<&str>) -> Served {
    serve_on("127.0.0.1:0", extra, tokens)
}

fn serve_on(http_addr: &str, extra: &[&str], tokens: Option<&str>) -> Served {
    let mut command = toolsearch();
    command
        .args(["serve", "--rest-only", "--catalog"])
        .arg(catalog())
        .args(["--http", http_addr])
        .args(extra);
    if let Some(tokens) = tokens {
        command.env("TOOLSEARCH_API_TOKENS", tokens);
    }
    let (child, addr, _) = peers::spawn_listening(command).into_parts();
    Served { child, addr }
}

#[test]
fn serves_the_example_catalog_with_a_token_from_the_environment() {
    let server = serve(&[], Some("cli-token, other-token"));
    let addr = server.addr.as_str();
    let search = r#"{"query": "open an issue", "limit": 3}"#;

    let (status, body) = http(
        addr,
        "POST",
        "/api/mcp-standard/search_tools",
        Some("cli-token"),
        Some(search),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tools"][0]["name"], "github___create_issue");
    assert!(body["tools"].as_array().unwrap().len() <= 3);

    let (status, _) = http(
        addr,
        "POST",
        "/api/mcp-standard/search_tools",
        Some("other-token"),
        Some(search),
    );
    assert_eq!(status, 200);
    let (status, body) = http(
        addr,
        "POST",
        "/api/mcp-standard/search_tools",
        None,
        Some(search),
    );
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, _) = http(
        addr,
        "POST",
        "/api/mcp-standard/search_tools",
        Some("cli-tokenx"),
        Some(search),
    );
    assert_eq!(status, 401);

    let (status, body) = http(
        addr,
        "POST",
        "/api/mcp-standard/list_categories",
        Some("cli-token"),
        None,
    );
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"Development") && ids.contains(&"Files"),
        "{ids:?}"
    );

    let (status, body) = http(
        addr,
        "POST",
        "/api/mcp-standard/get_tools_by_category",
        Some("cli-token"),
        Some(r#"{"category": "Files"}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["category"] == "Files"));

    let (status, body) = http(
        addr,
        "POST",
        "/api/mcp-standard/search_tools",
        Some("cli-token"),
        Some("{}"),
    );
    // No criteria: the catalog a page at a time, as over MCP.
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["offset"], 0);
    assert!(body["totalMatches"].as_u64().unwrap() >= body["returned"].as_u64().unwrap());
    assert!(body["returned"].as_u64().unwrap() > 0, "{body}");

    let (status, body) = http(addr, "GET", "/api/openapi.json", None, None);
    assert_eq!(status, 200);
    assert_eq!(body["openapi"], "3.1.0");
    assert_eq!(body, json!(toolsearch_gateway::rest::openapi_document()));
}

#[test]
fn config_categories_and_tokens_apply() {
    let dir = std::env::temp_dir().join(format!("toolsearch-rest-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rest.toml");
    std::fs::write(
        &config,
        r#"
[[categories]]
id = "code"
name = "Code hosting"
description = "Repositories, issues and pull requests"
servers = ["github"]

[rest]
apiTokens = ["config-token"]
"#,
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let server = serve(&["--config", &config_arg], None);
    let (status, body) = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/get_tools_by_category",
        Some("config-token"),
        Some(r#"{"category": "code"}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["category"]["name"], "Code hosting");
    assert!(body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["server"] == "github"));
    let (status, _) = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/list_categories",
        None,
        None,
    );
    assert_eq!(status, 401);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_an_open_api_beyond_loopback() {
    let output = toolsearch()
        .args(["serve", "--rest-only", "--catalog"])
        .arg(catalog())
        .args(["--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--insecure-no-auth") && stderr.contains("TOOLSEARCH_API_TOKENS"),
        "{stderr}"
    );

    // With the explicit opt-out it serves.
    let server = serve_on("0.0.0.0:0", &["--insecure-no-auth"], None);
    let (status, _) = http(
        &server.addr,
        "POST",
        "/api/mcp-standard/list_categories",
        None,
        None,
    );
    assert_eq!(status, 200);
}

#[test]
fn serve_without_rest_only_says_what_is_available() {
    let output = toolsearch().arg("serve").output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--rest-only"), "{stderr}");
}
