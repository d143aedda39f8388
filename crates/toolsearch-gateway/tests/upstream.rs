//! The upstream half of the gateway against real MCP servers: server-everything (npm) over stdio
//! and Streamable HTTP, mcp-server-time (PyPI) over stdio, and a paging test server written on the
//! official Python SDK. Install them first with scripts/install-test-peers.sh.

use crate::common;

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsearch_gateway::{GatewayError, ServerState, SupervisorOptions, UpstreamEvent};

use common::*;

fn args(value: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    value.as_object().cloned()
}

fn names(tools: &[toolsearch_core::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_lists_and_calls() {
    let manager = start(vec![("everything", everything_stdio())], options());
    wait_ready(&manager, "everything").await;

    let tools = manager.server_tools("everything").unwrap();
    let tool_names = names(&tools);
    assert!(tool_names.contains(&"echo".to_string()), "{tool_names:?}");
    let echo = tools.iter().find(|t| t.name() == "echo").unwrap();
    assert_eq!(echo.server(), "everything");
    assert_eq!(
        echo.input_schema().to_value()["properties"]["message"]["type"],
        "string"
    );
    assert!(manager.pid("everything").is_some());

    let result = guard(
        "echo",
        manager.call(
            "everything",
            "echo",
            args(json!({"message": "hello gateway"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert!(first_text(&result).contains("hello gateway"), "{result:?}");

    // structuredContent comes back as the upstream sent it.
    let result = guard(
        "get-structured-content",
        manager.call(
            "everything",
            "get-structured-content",
            args(json!({"location": "Chicago"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert!(structured.get("temperature").is_some(), "{structured}");

    // What the upstream answers for an unknown tool comes back as it sent it (here an isError
    // result from the TypeScript SDK).
    let result = guard(
        "unknown tool",
        manager.call("everything", "no_such_tool", None, CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(first_text(&result).contains("no_such_tool"), "{result:?}");

    manager.shutdown().await;
    assert_eq!(manager.state("everything"), Some(ServerState::Stopped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http() {
    let server = HttpServer::everything().await;
    let manager = start(vec![("everything_http", http(&server.url))], options());
    wait_ready(&manager, "everything_http").await;

    let tools = manager.server_tools("everything_http").unwrap();
    assert!(names(&tools).contains(&"echo".to_string()));
    assert_eq!(manager.pid("everything_http"), None);

    let result = guard(
        "echo over http",
        manager.call(
            "everything_http",
            "echo",
            args(json!({"message": "over http"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert!(first_text(&result).contains("over http"), "{result:?}");
    manager.shutdown().await;
}

/// Forwards every TCP connection made to it to `target`, counting the connections.
async fn counting_relay(target: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (port, accepted)
}

/// A call's answer read to its end leaves the connection open for the next call: a new TCP
/// connection per call costs a loopback handshake and teardown on both sides every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_http_reuse_their_connection() {
    use std::sync::atomic::Ordering;
    let server = HttpServer::everything().await;
    let (port, accepted) = counting_relay(server.port()).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let manager = start(vec![("everything_http", http(&url))], options());
    wait_ready(&manager, "everything_http").await;
    let calls = 20;
    let before = accepted.load(Ordering::SeqCst);
    for i in 0..calls {
        let message = format!("call {i}");
        let result = guard(
            "echo over http",
            manager.call(
                "everything_http",
                "echo",
                args(json!({ "message": message })),
                CancellationToken::new(),
            ),
        )
        .await
        .unwrap();
        assert!(first_text(&result).contains(&message), "{result:?}");
    }
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(
        opened < calls / 2,
        "{calls} calls one after the other opened {opened} connections"
    );
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_server_over_stdio() {
    let manager = start(vec![("time", time_stdio())], options());
    wait_ready(&manager, "time").await;

    let tools = manager.server_tools("time").unwrap();
    let tool_names = names(&tools);
    assert!(
        tool_names.contains(&"get_current_time".to_string()),
        "{tool_names:?}"
    );
    assert!(
        tool_names.contains(&"convert_time".to_string()),
        "{tool_names:?}"
    );
    let get_time = tools
        .iter()
        .find(|t| t.name() == "get_current_time")
        .unwrap();
    assert!(
        get_time.annotations().is_some(),
        "read-only annotation kept"
    );

    let result = guard(
        "get_current_time",
        manager.call(
            "time",
            "get_current_time",
            args(json!({"timezone": "UTC"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = serde_json::to_string(&result).unwrap();
    assert!(text.contains("UTC"), "{text}");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_list_changed_and_results_pass_through() {
    let manager = start(vec![("paged", paged_stdio())], options());
    let mut events = manager.subscribe();
    wait_ready(&manager, "paged").await;

    // Nine tools over five pages of two.
    let tool_names = names(&manager.server_tools("paged").unwrap());
    assert_eq!(
        tool_names,
        ["tool_0", "tool_1", "tool_2", "tool_3", "tool_4", "add_tool", "slow", "counts", "poll"]
    );

    // isError and structuredContent come back unchanged.
    let ok = guard(
        "tool_1",
        manager.call(
            "paged",
            "tool_1",
            args(json!({"x": "v"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        ok.structured_content,
        Some(json!({"tool": "tool_1", "x": "v"}))
    );
    assert_ne!(ok.is_error, Some(true));
    let failed = guard(
        "tool_2 failing",
        manager.call(
            "paged",
            "tool_2",
            args(json!({"x": "fail"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(failed.is_error, Some(true));
    assert!(first_text(&failed).contains("failed as asked"));

    // The server adds a tool and announces it; the gateway re-fetches and reports it.
    guard(
        "add_tool",
        manager.call(
            "paged",
            "add_tool",
            args(json!({"x": "fresh_tool"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    let tools = guard("tools changed after list_changed", async {
        loop {
            match events.recv().await {
                Ok(UpstreamEvent::ToolsChanged { server, tools })
                    if server == "paged" && tools.iter().any(|t| t.name() == "fresh_tool") =>
                {
                    break tools
                }
                Ok(_) => continue,
                Err(e) => panic!("event channel: {e}"),
            }
        }
    })
    .await;
    assert_eq!(tools.len(), 10);
    assert!(names(&manager.tools()).contains(&"fresh_tool".to_string()));
    manager.shutdown().await;
}

async fn counts(manager: &toolsearch_gateway::UpstreamManager) -> (u64, u64) {
    let result = manager
        .call("paged", "counts", None, CancellationToken::new())
        .await
        .unwrap();
    let c = result.structured_content.unwrap();
    (
        c["started"].as_u64().unwrap(),
        c["cancelled"].as_u64().unwrap(),
    )
}

/// Polls the server's counters until `pred` holds (bounded by the guard).
async fn wait_counts(
    manager: &toolsearch_gateway::UpstreamManager,
    what: &str,
    pred: impl Fn((u64, u64)) -> bool,
) {
    guard(what, async {
        loop {
            if pred(counts(manager).await) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancellation_reach_the_upstream_over_stdio() {
    timeout_and_cancellation_reach_the_upstream(paged_stdio()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancellation_reach_the_upstream_over_http() {
    let server = HttpServer::paged().await;
    timeout_and_cancellation_reach_the_upstream(http(&server.url)).await;
}

async fn timeout_and_cancellation_reach_the_upstream(paged: toolsearch_gateway::ServerConfig) {
    let manager = start(vec![("paged", paged)], options());
    wait_ready(&manager, "paged").await;

    // A call that outlives its timeout fails naming the tool, and the upstream sees the cancel.
    let err = guard(
        "slow with timeout",
        manager.call_with_timeout(
            "paged",
            "slow",
            None,
            CancellationToken::new(),
            Duration::from_millis(300),
            None,
        ),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, GatewayError::CallTimeout { .. }), "{err}");
    assert!(err.to_string().contains("slow"), "{err}");
    wait_counts(&manager, "cancel after timeout", |(s, c)| s == 1 && c == 1).await;

    // Cancelling the caller's token cancels upstream too.
    let cancel = CancellationToken::new();
    let call = {
        let manager = manager.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { manager.call("paged", "slow", None, cancel).await })
    };
    wait_counts(&manager, "second slow call started", |(s, _)| s == 2).await;
    cancel.cancel();
    let err = guard("cancelled call", call).await.unwrap().unwrap_err();
    assert!(matches!(err, GatewayError::CallCancelled { .. }), "{err}");
    wait_counts(&manager, "cancel after token", |(s, c)| s == 2 && c == 2).await;

    // Dropping the call future cancels upstream as well.
    let call = {
        let manager = manager.clone();
        tokio::spawn(async move {
            manager
                .call("paged", "slow", None, CancellationToken::new())
                .await
        })
    };
    wait_counts(&manager, "third slow call started", |(s, _)| s == 3).await;
    call.abort();
    let _ = call.await;
    wait_counts(&manager, "cancel after drop", |(s, c)| s == 3 && c == 3).await;
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_that_never_starts_fails_alone() {
    let opts = SupervisorOptions {
        max_restarts: Some(2),
        ..options()
    };
    let manager = start(
        vec![
            (
                "broken",
                stdio("/nonexistent/toolsearch-no-such-server", &[]),
            ),
            ("time", time_stdio()),
        ],
        opts,
    );
    let mut broken = manager.watch_state("broken").unwrap();
    // It goes through restarting with the reason before giving up.
    let restarting = guard(
        "broken restarting",
        broken.wait_for(|s| {
            matches!(
                s,
                ServerState::Restarting { .. } | ServerState::Failed { .. }
            )
        }),
    )
    .await
    .unwrap()
    .clone();
    assert!(
        restarting.to_string().contains("program not found"),
        "{restarting}"
    );

    let failed = guard(
        "broken failed",
        manager.wait_for_state("broken", |s| matches!(s, ServerState::Failed { .. })),
    )
    .await
    .unwrap();
    match &failed {
        ServerState::Failed {
            attempts,
            last_error,
        } => {
            assert_eq!(*attempts, 3);
            assert!(
                last_error.contains("/nonexistent/toolsearch-no-such-server"),
                "{last_error}"
            );
        }
        other => panic!("expected failed, got {other}"),
    }

    // The other server is unaffected.
    wait_ready(&manager, "time").await;
    let result = guard(
        "time call",
        manager.call(
            "time",
            "get_current_time",
            args(json!({"timezone": "UTC"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true));

    // A call to the broken server fails at once, naming it and its state.
    let err = manager
        .call("broken", "anything", None, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, GatewayError::ServerUnavailable { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("`broken`") && text.contains("failed"),
        "{text}"
    );

    // Unknown servers are named too.
    let err = manager
        .call("ghost", "x", None, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ghost") && err.to_string().contains("broken, time"));
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_is_restarted_and_its_tools_refreshed() {
    // A long backoff holds the server down until the test restarts it, so the "down" window is
    // not a race; restart_now then skips the wait.
    let opts = SupervisorOptions {
        initial_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(3600),
        ..options()
    };
    let manager = start(
        vec![("everything", everything_stdio()), ("time", time_stdio())],
        opts,
    );
    wait_ready(&manager, "everything").await;
    wait_ready(&manager, "time").await;
    let first_pid = manager.pid("everything").expect("pid of stdio server");
    let mut events = manager.subscribe();

    let status = std::process::Command::new("kill")
        .args(["-KILL", &first_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let down = guard(
        "everything noticed down",
        manager.wait_for_state("everything", |s| {
            matches!(s, ServerState::Restarting { .. })
        }),
    )
    .await
    .unwrap();
    assert!(down.to_string().contains("closed"), "{down}");

    // A call while it is down fails at once, naming the server and its state.
    let err = manager
        .call(
            "everything",
            "echo",
            args(json!({"message": "x"})),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, GatewayError::ServerUnavailable { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("`everything`") && text.contains("restarting"),
        "{text}"
    );
    // Its last known tools stay listed; the other server keeps working.
    assert!(names(&manager.server_tools("everything").unwrap()).contains(&"echo".to_string()));
    assert_eq!(manager.state("time"), Some(ServerState::Ready));

    manager.restart_now("everything").unwrap();
    wait_ready(&manager, "everything").await;
    let second_pid = manager.pid("everything").expect("pid after restart");
    assert_ne!(first_pid, second_pid);

    // The reconnect re-fetched the tools.
    guard("tools refreshed after restart", async {
        loop {
            match events.recv().await {
                Ok(UpstreamEvent::ToolsChanged { server, tools }) if server == "everything" => {
                    assert!(names(&tools).contains(&"echo".to_string()));
                    break;
                }
                Ok(_) => continue,
                Err(e) => panic!("event channel: {e}"),
            }
        }
    })
    .await;

    let result = guard(
        "echo after restart",
        manager.call(
            "everything",
            "echo",
            args(json!({"message": "back again"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert!(first_text(&result).contains("back again"));
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_that_goes_away_is_reconnected() {
    let mut server = HttpServer::everything().await;
    let manager = start(vec![("remote", http(&server.url))], options());
    wait_ready(&manager, "remote").await;

    server.kill();
    // The loss shows either in the session itself or in the next call, which must not hang.
    let err = guard(
        "call to a dead http server",
        manager.call(
            "remote",
            "echo",
            args(json!({"message": "x"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("`remote`"), "{err}");
    let down = guard(
        "remote noticed down",
        manager.wait_for_state("remote", |s| !s.is_ready()),
    )
    .await
    .unwrap();
    assert!(!down.is_ready());

    let _server = HttpServer::everything_on(server.port()).await;
    wait_ready(&manager, "remote").await;
    let result = guard(
        "echo after reconnect",
        manager.call(
            "remote",
            "echo",
            args(json!({"message": "reconnected"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert!(first_text(&result).contains("reconnected"));
    manager.shutdown().await;
}

/// A server may close a call's SSE stream before answering and let the client poll: the call
/// is resumed from the stream's last event id (GET with Last-Event-ID) and answered, and the
/// tool ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_closed_before_the_answer_is_resumed() {
    let server = HttpServer::paged().await;
    let manager = start(vec![("paged", http(&server.url))], options());
    wait_ready(&manager, "paged").await;
    let result = guard(
        "poll over http",
        manager.call("paged", "poll", None, CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(first_text(&result), "polled");
    let counts = manager
        .call("paged", "counts", None, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(counts.structured_content.unwrap()["polls"], json!(1));
    manager.shutdown().await;
}

/// What the HTTP proxy of [`refusing_proxy`] saw.
#[derive(Default)]
struct ProxyCounts {
    /// `tools/call` posts answered 404 by the proxy itself.
    refused: std::sync::atomic::AtomicUsize,
    /// `tools/call` posts passed on to the server.
    forwarded: std::sync::atomic::AtomicUsize,
}

/// An HTTP proxy to `target` that answers the first `refuse` posts of `tools/call` with 404, as a
/// server does for a session it no longer knows, and passes everything else on, streaming.
async fn refusing_proxy(target: String, refuse: usize) -> (String, std::sync::Arc<ProxyCounts>) {
    use std::sync::atomic::Ordering;
    let counts = std::sync::Arc::new(ProxyCounts::default());
    let seen = counts.clone();
    toolsearch_gateway::upstream::ensure_crypto_provider();
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (client, target, seen) = (client.clone(), target.clone(), seen.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let is_call = String::from_utf8_lossy(&body).contains("\"tools/call\"");
            if is_call && seen.refused.load(Ordering::SeqCst) < refuse {
                seen.refused.fetch_add(1, Ordering::SeqCst);
                return axum::response::Response::builder()
                    .status(404)
                    .body(axum::body::Body::from("session not found"))
                    .unwrap();
            }
            if is_call {
                seen.forwarded.fetch_add(1, Ordering::SeqCst);
            }
            let mut headers = parts.headers.clone();
            headers.remove(http::header::HOST);
            let upstream = client
                .request(parts.method, &target)
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let mut response = axum::response::Response::builder().status(upstream.status());
            for (name, value) in upstream.headers() {
                response = response.header(name, value);
            }
            response
                .body(axum::body::Body::from_stream(upstream.bytes_stream()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, counts)
}

/// A call whose post is refused as for an unknown session (HTTP 404) is sent again the way the
/// MCP library sends requests, which renews a session it finds expired: it is answered, and
/// reaches the server once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_its_session_is_sent_again() {
    use std::sync::atomic::Ordering;
    let server = HttpServer::paged().await;
    let (url, seen) = refusing_proxy(server.url.clone(), 1).await;
    let manager = start(vec![("paged", http(&url))], options());
    wait_ready(&manager, "paged").await;
    let result = guard(
        "tool_1 through the refusing proxy",
        manager.call(
            "paged",
            "tool_1",
            args(json!({"x": "again"})),
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"tool": "tool_1", "x": "again"}))
    );
    assert_eq!(seen.refused.load(Ordering::SeqCst), 1);
    assert_eq!(seen.forwarded.load(Ordering::SeqCst), 1);
    manager.shutdown().await;
}
