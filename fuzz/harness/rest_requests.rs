//! One input of the `rest_requests` fuzz target, shared with its replay on stable
//! (`crates/toolsearch-gateway/tests/fuzz_corpora.rs`): any bytes as an HTTP request to the REST
//! API, written like a request on the wire without the version:
//!
//! ```text
//! POST /api/mcp-standard/search_tools
//! Content-Type: application/json
//! Authorization: Bearer fuzz-token
//!
//! {"query": "open an issue"}
//! ```
//!
//! A request line, header lines, an empty line, then the body (any bytes). Inputs the HTTP
//! library could not carry (a bad method, path or header) are skipped. The `Host` and `Origin`
//! rules run first, as the listener runs them; then the API's router answers, in process. Every
//! answer is JSON; a refusal is `{"error": {"code", "message"}}` with a documented code and a
//! client-error status, never a server error; a search answers at most `MAX_LIMIT` tools.

use std::sync::{Arc, OnceLock, RwLock};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use toolsearch_core::contract::ServerStatus;
use toolsearch_core::{SearchEngine, Tool};
use toolsearch_gateway::listener_config::HttpConfig;
use toolsearch_gateway::rest::{self, ApiError, ApiTokens, RestState, MAX_LIMIT};
use tower_service::Service;

/// The token the seeds send.
pub const TOKEN: &str = "fuzz-token";
/// A small body limit, so that inputs reach it.
const MAX_BODY_BYTES: usize = 2048;

/// `slack` is down, so that results mark its tools.
struct SlackDown;

impl ServerStatus for SlackDown {
    fn unavailable(&self, server: &str) -> Option<String> {
        (server == "slack").then(|| "restarting in 4s: connection refused".to_string())
    }
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let tools = [
            (
                "github",
                "create_issue",
                "Open a new issue in a repository",
                "code",
            ),
            ("files", "read_file", "Read the contents of a file", "files"),
            (
                "slack",
                "post_message",
                "Post a message to a channel",
                "chat",
            ),
        ];
        let engine = SearchEngine::from_tools(tools.into_iter().map(
            |(server, name, description, category)| {
                Tool::new(name, description)
                    .with_server(server)
                    .with_category(category)
                    .with_tags([server])
            },
        ))
        .expect("the fuzz catalog is valid");
        let tokens = ApiTokens::new([TOKEN]).expect("the fuzz token is valid");
        let state = RestState::new(Arc::new(RwLock::new(engine)))
            .with_tokens(tokens)
            .with_max_body_bytes(MAX_BODY_BYTES)
            .with_server_status(Arc::new(SlackDown));
        Harness {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the router"),
            router: rest::router(state),
        }
    })
}

/// The request an input describes, with its `Host` and `Origin`; `None` when the HTTP library
/// cannot carry it.
fn request(data: &[u8]) -> Option<(Request<Body>, Option<String>, Option<String>)> {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.lines();
    let (method, path) = lines.next()?.trim().split_once(' ')?;
    let mut builder = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).ok()?)
        .uri(path.trim());
    let (mut host, mut origin) = (None, None);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("host") {
            host = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("origin") {
            origin = Some(value.to_string());
        }
        builder = builder.header(name, value);
    }
    let request = builder.body(Body::from(body.to_vec())).ok()?;
    Some((request, host, origin))
}

/// Checks one input; panics when a property does not hold. Returns the answer's status, `None`
/// for an input that is no request.
pub fn check(data: &[u8]) -> Option<StatusCode> {
    let (request, host, origin) = request(data)?;
    // The listener's rules, before any route (a loopback listener with the default settings).
    if let Err(refusal) =
        HttpConfig::default().check_request(true, host.as_deref(), origin.as_deref())
    {
        assert!(!refusal.to_string().is_empty());
        return Some(StatusCode::FORBIDDEN);
    }
    let path = request.uri().path().to_string();
    let harness = harness();
    let mut router = harness.router.clone();
    let (status, body) = harness.runtime.block_on(async move {
        let response = match router.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("an in-memory body reads");
        (status, body)
    });
    assert!(!status.is_server_error(), "{status} for {path}: {body:?}");
    let json: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{status} for {path} is not JSON ({e}): {body:?}"));
    if status.is_success() {
        if path == rest::SEARCH_TOOLS_PATH {
            let returned = json["returned"]
                .as_u64()
                .expect("`returned` in a search answer");
            assert!(returned as usize <= MAX_LIMIT, "{json}");
            assert_eq!(
                json["tools"].as_array().map(Vec::len),
                Some(returned as usize)
            );
        }
        return Some(status);
    }
    let code = json["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}: {json}"));
    assert!(
        ApiError::CODES.contains(&code),
        "undocumented code `{code}`: {json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{json}"
    );
    assert!(status.is_client_error(), "{status}: {json}");
    Some(status)
}
