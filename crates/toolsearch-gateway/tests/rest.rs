//! The REST API over real HTTP: a server on 127.0.0.1:0, a reqwest client.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use toolsearch_core::{SearchConfig, SearchEngine, Tool};
use toolsearch_gateway::config::{Format, GatewayConfig};
use toolsearch_gateway::rest::{self, ApiTokens, RestState, SharedEngine};

const TOKEN: &str = "test-token-0123456789";

fn tools() -> Vec<Tool> {
    let schema = |props: Value| json!({"type": "object", "properties": props});
    vec![
        Tool::new("create_issue", "Open a new issue in a repository")
            .with_server("github")
            .with_schema(schema(
                json!({"title": {"type": "string", "description": "Issue title"}}),
            ))
            .with_category("Development")
            .with_tags(["issues"]),
        Tool::new(
            "list_pull_requests",
            "List open pull requests of a repository",
        )
        .with_server("github")
        .with_category("Development")
        .with_tags(["review"]),
        Tool::new("read_file", "Read the contents of a file")
            .with_server("filesystem")
            .with_schema(schema(
                json!({"path": {"type": "string", "description": "File path"}}),
            ))
            .with_category("Files")
            .with_tags(["io"]),
        Tool::new("write_file", "Write text to a file, replacing it")
            .with_server("filesystem")
            .with_category("Files")
            .with_tags(["io", "write"]),
        Tool::new("post_message", "Post a message to a Slack channel")
            .with_server("slack")
            .with_tags(["chat"]),
        Tool::new("get_forecast", "Weather forecast for a city")
            .with_server("weather")
            .with_category("Weather"),
    ]
}

/// Categories defined in the config: `chat` claims slack by server, `code` claims github by pattern
/// (so the tools' own `Development` is overridden), the rest keep their own category.
const CONFIG: &str = r#"
[[categories]]
id = "code"
name = "Code hosting"
description = "Repositories, issues and pull requests"
tools = ["github:*"]

[[categories]]
id = "chat"
name = "Chat"
description = "Messaging"
servers = ["slack"]

[[categories]]
id = "empty"
description = "Nothing yet"

[rest]
maxBodyBytes = 2048
"#;

struct Server {
    base: String,
    engine: SharedEngine,
    client: Client,
}

impl Server {
    async fn start(tokens: &[&str]) -> Server {
        let config = GatewayConfig::parse(CONFIG, Format::Toml, "test.toml").unwrap();
        let state = |engine| {
            RestState::new(engine)
                .with_max_body_bytes(config.rest.max_body_bytes)
                .with_tokens(ApiTokens::new(tokens).unwrap())
        };
        Self::start_with(&config, state).await
    }

    /// The API over the test catalog entered through `config`'s policy, with the state `state`
    /// makes of the engine.
    async fn start_with(
        config: &GatewayConfig,
        state: impl FnOnce(SharedEngine) -> RestState,
    ) -> Server {
        // reqwest is built without a default TLS provider; plain HTTP still needs one installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let engine: SharedEngine = Arc::new(RwLock::new(
            SearchEngine::build(tools(), SearchConfig::default(), config.catalog_policy()).unwrap(),
        ));
        let state = state(engine.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(rest::serve(
            listener,
            rest::router(state),
            std::future::pending(),
        ));
        Server {
            base: format!("http://{addr}"),
            engine,
            client: Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.post_as(TOKEN, path, body).await
    }

    async fn post_as(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        decode(response).await
    }

    async fn search(&self, body: Value) -> (StatusCode, Value) {
        self.post(rest::SEARCH_TOOLS_PATH, body).await
    }
}

async fn decode(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, value)
}

fn error_of(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code: {body}")),
        body["error"]["message"].as_str().unwrap(),
    )
}

fn names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn search_by_query_returns_the_search_contract() {
    let server = Server::start(&[TOKEN]).await;
    let (status, body) = server.search(json!({"query": "read file"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = &body["tools"][0];
    assert_eq!(first["name"], "filesystem___read_file");
    assert_eq!(first["server"], "filesystem");
    assert_eq!(first["category"], "Files");
    assert_eq!(first["tags"], json!(["io"]));
    assert_eq!(first["inputSchema"]["properties"]["path"]["type"], "string");
    assert!(first["description"].as_str().unwrap().contains("contents"));
    let score = first["score"].as_f64().unwrap();
    assert!(score > 0.0 && score <= 1.0, "{score}");
    let matched: Vec<&str> = first["matchedOn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["field"].as_str().unwrap())
        .collect();
    assert!(matched.contains(&"name"), "{matched:?}");
    assert!(body["totalMatches"].as_u64().unwrap() >= 1);
    assert_eq!(body["query"], "read file");
    assert_eq!(body["mode"], "keyword");
    assert_eq!(body["offset"], 0);
    assert_eq!(body["returned"], body["tools"].as_array().unwrap().len());

    // Config categories override the tools' own.
    let (_, body) = server.search(json!({"query": "create_issue"})).await;
    assert_eq!(body["tools"][0]["name"], "github___create_issue");
    assert_eq!(body["tools"][0]["category"], "code");
    assert_eq!(body["tools"][0]["score"], 1.0);
}

#[tokio::test]
async fn search_by_category_or_tags_alone_lists_matching_tools() {
    let server = Server::start(&[TOKEN]).await;
    let (status, body) = server.search(json!({"category": "code"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        names(&body),
        ["github___create_issue", "github___list_pull_requests"]
    );
    assert_eq!(body["totalMatches"], 2);
    assert!(body.get("nextOffset").is_none(), "{body}");

    // By display name, any case; combined with a query.
    let (_, body) = server
        .search(json!({"category": "CODE HOSTING", "query": "pull"}))
        .await;
    assert_eq!(names(&body), ["github___list_pull_requests"]);

    let (_, body) = server.search(json!({"tags": ["io"]})).await;
    assert_eq!(
        names(&body),
        ["filesystem___read_file", "filesystem___write_file"]
    );
    let (_, body) = server
        .search(json!({"tags": ["write"], "category": "Files"}))
        .await;
    assert_eq!(names(&body), ["filesystem___write_file"]);

    // limit and offset page through the matches; totalMatches covers all of them and nextOffset
    // says where the next page starts.
    let (_, body) = server
        .search(json!({"tags": ["io", "chat"], "limit": 1, "offset": 1}))
        .await;
    assert_eq!(names(&body).len(), 1);
    assert_eq!(body["totalMatches"], 3);
    assert_eq!(body["returned"], 1);
    assert_eq!(body["offset"], 1);
    assert_eq!(body["nextOffset"], 2);
    let (_, body) = server
        .search(json!({"tags": ["io", "chat"], "limit": 1, "offset": 2}))
        .await;
    assert!(body.get("nextOffset").is_none(), "{body}");
}

#[tokio::test]
async fn search_modes_and_misses() {
    let server = Server::start(&[TOKEN]).await;
    let (status, body) = server
        .search(json!({"query": "^write_", "mode": "regex"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(names(&body), ["filesystem___write_file"]);

    let (status, body) = server
        .search(json!({"query": "get_forecast", "mode": "exact"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(names(&body), ["weather___get_forecast"]);

    // Nothing matched: the result says so and offers what to refine with.
    let (status, body) = server.search(json!({"query": "zzzqqq xxyyzz"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["totalMatches"], 0);
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("No tool matched"));
    assert_eq!(body["fallback"]["kind"], "names", "{body}");
    assert_eq!(body["fallback"]["names"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn search_input_errors_are_400_with_a_reason() {
    let server = Server::start(&[TOKEN]).await;

    // An empty body, an empty object and blank criteria browse the catalog a page at a time,
    // as MCP's search_tools does.
    let response = server
        .client
        .post(server.url(rest::SEARCH_TOOLS_PATH))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let (status, browsed) = decode(response).await;
    assert_eq!(status, StatusCode::OK, "{browsed}");
    assert!(browsed["totalMatches"].as_u64().unwrap() > 0, "{browsed}");
    assert!(browsed["tools"].as_array().is_some_and(|t| !t.is_empty()));
    for empty in [json!({}), json!({"query": "  ", "tags": []})] {
        let (status, body) = server.search(empty).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["tools"], browsed["tools"]);
        assert_eq!(body["totalMatches"], browsed["totalMatches"]);
    }

    let (status, body) = server
        .search(json!({"query": "(unclosed", "mode": "regex"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (code, message) = error_of(&body);
    assert_eq!(code, "invalid_query");
    assert!(
        message.contains("invalid regex") && message.contains("(unclosed"),
        "{message}"
    );

    let (status, body) = server.search(json!({"query": "x", "mode": "fuzzy"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).1.contains("`keyword`, `semantic`, `regex`"),
        "{body}"
    );

    for limit in [0, 51] {
        let (status, body) = server
            .search(json!({"query": "file", "limit": limit}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (code, message) = error_of(&body);
        assert_eq!(code, "out_of_range");
        assert!(
            message.contains("limit") && message.contains("50"),
            "{message}"
        );
    }
    let (status, _) = server.search(json!({"query": "file", "limit": 50})).await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = server
        .search(json!({"query": "file", "qurey": "x", "limt": 3}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (code, message) = error_of(&body);
    assert_eq!(code, "unknown_field");
    assert!(
        message.contains("`qurey`") && message.contains("`query`"),
        "{message}"
    );

    let (status, body) = server.search(json!({"query": 5})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&body).0, "invalid_body");

    let response = server
        .client
        .post(server.url(rest::SEARCH_TOOLS_PATH))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{\"query\": ")
        .send()
        .await
        .unwrap();
    let (status, body) = decode(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&body).0, "invalid_body");

    let (status, body) = server.search(json!({"category": "nope"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&body).0, "unknown_category");
}

#[tokio::test]
async fn list_categories_merges_config_and_tool_categories() {
    let server = Server::start(&[TOKEN]).await;
    let (status, body) = server.post(rest::LIST_CATEGORIES_PATH, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"categories": [
            {"id": "code", "name": "Code hosting", "description": "Repositories, issues and pull requests", "toolCount": 2},
            {"id": "chat", "name": "Chat", "description": "Messaging", "toolCount": 1},
            {"id": "empty", "name": "empty", "description": "Nothing yet", "toolCount": 0},
            {"id": "Files", "name": "Files", "toolCount": 2},
            {"id": "Weather", "name": "Weather", "toolCount": 1}
        ]})
    );

    // A bare POST without a body or content type works too.
    let response = server
        .client
        .post(server.url(rest::LIST_CATEGORIES_PATH))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let (status, bare) = decode(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bare, body);

    let (status, body) = server
        .post(rest::LIST_CATEGORIES_PATH, json!({"all": true}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).1.contains("`all`"), "{body}");
}

#[tokio::test]
async fn tools_by_category_and_unknown_category() {
    let server = Server::start(&[TOKEN]).await;
    let (status, body) = server
        .post(rest::TOOLS_BY_CATEGORY_PATH, json!({"category": "files"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["category"]["id"], "Files");
    assert_eq!(body["category"]["toolCount"], 2);
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["filesystem___read_file", "filesystem___write_file"]);
    assert_eq!(
        body["tools"][0]["inputSchema"]["properties"]["path"]["type"],
        "string"
    );

    let (_, body) = server
        .post(
            rest::TOOLS_BY_CATEGORY_PATH,
            json!({"category": "code", "limit": 1, "offset": 1}),
        )
        .await;
    assert_eq!(body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(body["tools"][0]["name"], "github___list_pull_requests");

    let (status, body) = server
        .post(
            rest::TOOLS_BY_CATEGORY_PATH,
            json!({"category": "Developmnt"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (code, message) = error_of(&body);
    assert_eq!(code, "unknown_category");
    assert!(message.contains("Developmnt"), "{message}");
    for id in ["code", "chat", "empty", "Files", "Weather"] {
        assert!(message.contains(id), "{message}");
    }

    let (status, body) = server.post(rest::TOOLS_BY_CATEGORY_PATH, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).1.contains("missing field `category`"),
        "{body}"
    );
}

/// Two tokens limited to different tools, from the config's `[[rest.tokens]]`, and one with
/// every tool: each sees its own catalog in searches, fallbacks, categories and counts.
#[tokio::test]
async fn two_scoped_tokens_see_two_views() {
    const CODE: &str = "code-token-0123456789";
    const FILES: &str = "files-token-0123456789";
    let text = format!(
        r#"{CONFIG}
apiTokens = ["{TOKEN}"]

[[rest.tokens]]
name = "code"
token = "{CODE}"
tools = ["github:*"]

[[rest.tokens]]
name = "files"
token = "{FILES}"
tools = ["filesystem:read_*", "weather___*"]
"#
    );
    let config = GatewayConfig::parse(&text, Format::Toml, "test.toml").unwrap();
    let server = Server::start_with(&config, |engine| {
        RestState::from_config(engine, &config).unwrap()
    })
    .await;
    let search = |token: &'static str, body: Value| {
        let server = &server;
        async move {
            let (status, body) = server.post_as(token, rest::SEARCH_TOOLS_PATH, body).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    let github = ["github___create_issue", "github___list_pull_requests"];

    // "file": the files token finds read_file only (write_file is outside its scope); the code
    // token finds nothing, and its fallback offers only its own tools.
    let body = search(FILES, json!({"query": "file"})).await;
    assert_eq!(names(&body), ["filesystem___read_file"]);
    assert_eq!(body["totalMatches"], 1);
    let body = search(CODE, json!({"query": "file"})).await;
    assert_eq!(body["totalMatches"], 0, "{body}");
    assert_eq!(body["fallback"], json!({"kind": "names", "names": github}));
    let body = search(TOKEN, json!({"query": "file"})).await;
    assert_eq!(body["totalMatches"], 2, "{body}");

    // An exact name outside the scope is not found; a filter by its server finds nothing.
    let body = search(
        FILES,
        json!({"query": "github___create_issue", "mode": "exact"}),
    )
    .await;
    assert_eq!(body["totalMatches"], 0, "{body}");
    assert_eq!(
        body["fallback"]["names"],
        json!(["filesystem___read_file", "weather___get_forecast"])
    );
    let body = search(CODE, json!({"query": "create_issue"})).await;
    assert_eq!(body["tools"][0]["name"], "github___create_issue");
    assert_eq!(body["tools"][0]["score"], 1.0);
    let body = search(CODE, json!({"server": "slack"})).await;
    assert_eq!(body["totalMatches"], 0, "{body}");
    let body = search(FILES, json!({"mode": "regex", "query": ".", "limit": 50})).await;
    assert_eq!(
        names(&body).into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "filesystem___read_file".to_string(),
            "weather___get_forecast".to_string()
        ])
    );

    // Categories: counts of the tools in scope, and only categories holding some.
    let categories = |body: &Value| -> Vec<(String, u64)> {
        body["categories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_string(),
                    c["toolCount"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let (_, body) = server
        .post_as(CODE, rest::LIST_CATEGORIES_PATH, json!({}))
        .await;
    assert_eq!(categories(&body), [("code".to_string(), 2)]);
    let (_, body) = server
        .post_as(FILES, rest::LIST_CATEGORIES_PATH, json!({}))
        .await;
    assert_eq!(
        categories(&body),
        [("Files".to_string(), 1), ("Weather".to_string(), 1)]
    );
    let (_, body) = server
        .post_as(TOKEN, rest::LIST_CATEGORIES_PATH, json!({}))
        .await;
    assert_eq!(categories(&body).len(), 5);

    // A category outside the scope is unknown, and the known ones listed are the token's.
    let (status, body) = server
        .post_as(
            FILES,
            rest::TOOLS_BY_CATEGORY_PATH,
            json!({"category": "Code hosting"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (code, message) = error_of(&body);
    assert_eq!(code, "unknown_category");
    assert!(message.ends_with("Files, Weather"), "{message}");
    let (status, body) = server
        .post_as(
            FILES,
            rest::TOOLS_BY_CATEGORY_PATH,
            json!({"category": "files"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(names(&body), ["filesystem___read_file"]);
    assert_eq!(body["category"]["toolCount"], 1);
    let (_, body) = server
        .post_as(
            CODE,
            rest::TOOLS_BY_CATEGORY_PATH,
            json!({"category": "code"}),
        )
        .await;
    assert_eq!(names(&body), github);

    // A wrong token is still refused.
    let (status, _) = server
        .post_as(
            "code-token-012345678",
            rest::SEARCH_TOOLS_PATH,
            json!({"query": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn auth_requires_a_valid_bearer_token() {
    let server = Server::start(&[TOKEN, "second-token"]).await;
    let url = server.url(rest::LIST_CATEGORIES_PATH);
    let no_token = server
        .client
        .post(&url)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), StatusCode::UNAUTHORIZED);
    assert!(no_token
        .headers()
        .get("www-authenticate")
        .is_some_and(|v| v.to_str().unwrap().starts_with("Bearer")));
    let (_, body) = decode(no_token).await;
    assert_eq!(error_of(&body).0, "unauthorized");

    for header in [
        "Bearer wrong-token",
        "Bearer test-token-012345678",
        "Bearer test-token-01234567890",
        "Basic dGVzdA==",
        "Bearer",
        TOKEN,
    ] {
        let response = server
            .client
            .post(&url)
            .header("authorization", header)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{header}");
    }
    // An unauthenticated request is refused before its body is read.
    let response = server
        .client
        .post(server.url(rest::SEARCH_TOOLS_PATH))
        .body("x".repeat(10_000))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    for header in [format!("Bearer {TOKEN}"), "bearer second-token".to_string()] {
        let response = server
            .client
            .post(&url)
            .header("authorization", header.as_str())
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{header}");
    }

    // The OpenAPI document is public.
    let response = server
        .client
        .get(server.url(rest::OPENAPI_PATH))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn without_tokens_the_api_is_open() {
    let server = Server::start(&[]).await;
    let response = server
        .client
        .post(server.url(rest::SEARCH_TOOLS_PATH))
        .json(&json!({"query": "weather"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn body_limit_content_type_and_unknown_routes_answer_in_json() {
    let server = Server::start(&[TOKEN]).await;
    let big = json!({"query": "x".repeat(4096)});
    let (status, body) = server.search(big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (code, message) = error_of(&body);
    assert_eq!(code, "payload_too_large");
    assert!(message.contains("2048"), "{message}");

    // Also when the body is chunked, with no Content-Length up front.
    let (status, body) = raw_chunked(&server, TOKEN, 8).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("payload_too_large"), "{body}");

    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = server
            .client
            .post(server.url(rest::SEARCH_TOOLS_PATH))
            .bearer_auth(TOKEN)
            .body(r#"{"query": "file"}"#);
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let (status, body) = decode(request.send().await.unwrap()).await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert_eq!(error_of(&body).0, "unsupported_media_type");
    }
    let response = server
        .client
        .post(server.url(rest::SEARCH_TOOLS_PATH))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"query": "file"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let response = server
        .client
        .get(server.url("/api/nothing"))
        .send()
        .await
        .unwrap();
    let (status, body) = decode(response).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_of(&body).1.contains("openapi.json"), "{body}");

    let response = server
        .client
        .get(server.url(rest::SEARCH_TOOLS_PATH))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let (status, body) = decode(response).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_of(&body).0, "method_not_allowed");
}

/// Sends `kib` KiB of JSON with `Transfer-Encoding: chunked` over a raw connection; returns the status
/// and the response text.
async fn raw_chunked(server: &Server, token: &str, kib: usize) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        rest::SEARCH_TOOLS_PATH
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for i in 0..kib {
        let mut chunk = vec![b' '; 1024];
        if i == 0 {
            chunk[0] = b'{';
        }
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        // The server may answer and close before the whole body is sent.
        if stream.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    (status, text)
}

#[tokio::test]
async fn openapi_document_matches_the_routes() {
    let server = Server::start(&[TOKEN]).await;
    let response = server
        .client
        .get(server.url(rest::OPENAPI_PATH))
        .send()
        .await
        .unwrap();
    let (status, doc) = decode(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc, rest::openapi_document());

    // The document's operations are exactly the served routes.
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let served: BTreeSet<(String, String)> = rest::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, served);

    let schema_of = |name: &str| json!({"$ref": format!("#/components/schemas/{name}"), "components": doc["components"]});
    for (method, path) in &documented {
        let operation = &doc["paths"][path][method.to_lowercase()];
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = server
            .client
            .request(method.clone(), server.url(path))
            .bearer_auth(TOKEN);
        let content = &operation["requestBody"]["content"]["application/json"];
        if let Some(example) = content.get("example") {
            // The documented example is a valid request, and its schema accepts it.
            let request_schema = content["schema"]["$ref"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap();
            let validator = jsonschema::validator_for(&schema_of(request_schema)).unwrap();
            assert!(
                validator.is_valid(example),
                "{path}: example does not fit its schema"
            );
            request = request.json(example);
        }
        let (status, body) = decode(request.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}: {body}");
        // The answer fits the documented 200 schema.
        if let Some(reference) =
            operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].as_str()
        {
            let name = reference.rsplit('/').next().unwrap();
            let validator = jsonschema::validator_for(&schema_of(name)).unwrap();
            let problems: Vec<String> = validator
                .iter_errors(&body)
                .map(|e| e.to_string())
                .collect();
            assert!(problems.is_empty(), "{method} {path}: {problems:?}\n{body}");
        }
        // Undocumented methods on a documented path are refused.
        for other in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
            if other == method {
                continue;
            }
            let response = server
                .client
                .request(other.clone(), server.url(path))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{other} {path}"
            );
        }
    }

    // Errors answer with the documented error shape.
    let (_, error) = server.search(json!({"limit": 0})).await;
    assert_eq!(error_of(&error).0, "out_of_range", "{error}");
    let validator = jsonschema::validator_for(&schema_of("Error")).unwrap();
    assert!(validator.is_valid(&error), "{error}");
    // Neighbouring paths are not served.
    for path in [
        "/api/mcp-standard/search",
        "/api/mcp-standard/",
        "/api/openapi.yaml",
    ] {
        let response = server
            .client
            .post(server.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
}

#[tokio::test]
async fn searches_see_catalog_updates() {
    let server = Server::start(&[TOKEN]).await;
    let (_, body) = server.search(json!({"query": "translate"})).await;
    assert_eq!(body["totalMatches"], 0);
    server
        .engine
        .write()
        .unwrap()
        .replace_server(
            "deepl",
            vec![
                Tool::new("translate_text", "Translate text between languages")
                    .with_category("Language"),
            ],
        )
        .unwrap();
    let (_, body) = server.search(json!({"query": "translate"})).await;
    assert_eq!(names(&body), ["deepl___translate_text"]);
    let (_, body) = server.post(rest::LIST_CATEGORIES_PATH, json!({})).await;
    assert!(body["categories"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "Language"));
}

#[test]
fn binding_beyond_loopback_needs_a_token_or_an_explicit_opt_out() {
    let open = ApiTokens::none();
    let guarded = ApiTokens::new([TOKEN]).unwrap();
    let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
    let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let local6: SocketAddr = "[::1]:8080".parse().unwrap();
    let err = rest::check_bind(public, &open, false).unwrap_err();
    assert!(err.to_string().contains("--insecure-no-auth"), "{err}");
    assert!(rest::check_bind(public, &open, true).is_ok());
    assert!(rest::check_bind(public, &guarded, false).is_ok());
    assert!(rest::check_bind(local, &open, false).is_ok());
    assert!(rest::check_bind(local6, &open, false).is_ok());
}
