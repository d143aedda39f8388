//! What the gateway reads from an upstream before the MCP library parses it: a stdio server's
//! output line by line, a Streamable HTTP server's SSE events one by one ([`GuardedHttpClient`]).
//!
//! The JSON parser stops at 128 levels of nesting, and the MCP library then drops the whole message:
//! one tool with a schema nested 200 levels hid every tool of its server (tools/list never
//! answered), and a result nested 300 levels became a timeout. Here every line is measured without
//! parsing it (any depth is safe) and a line nested deeper than [`MAX_WIRE_DEPTH`] is rewritten:
//! an answer to `tools/list` keeps its shape with the too-deep values replaced by a marker (the
//! tools holding them are then left out one by one, for their schema's depth), any other answer
//! becomes a JSON-RPC error for its request saying why, and anything else is dropped with a warning.
//!
//! A Streamable HTTP server answers a request either with an SSE stream, whose events are guarded
//! like stdio lines, or with one JSON body, which rmcp's client parses itself: a body too deep to
//! parse is then known only by the parser's error, so it becomes an error for its request saying
//! why (a `tools/list` answered that way cannot keep its other tools).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ErrorData, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::{json, Value};
use sse_stream::Sse;
use toolsearch_core::catalog::json_depth;

/// Nesting read from an upstream, below the JSON parser's own limit of 128.
pub(crate) const MAX_WIRE_DEPTH: usize = 100;

/// Stands in for a value nested deeper than [`MAX_WIRE_DEPTH`].
const MARKER: &str = "\"(nested too deep)\"";

/// The line the MCP library may read in place of `line` (without its newline), or `None` to drop it.
pub(crate) fn guard_line<'a>(server: &str, line: &'a [u8]) -> Option<Cow<'a, [u8]>> {
    let depth = json_depth(line);
    if depth <= MAX_WIRE_DEPTH {
        return Some(Cow::Borrowed(line));
    }
    let pruned = prune(line, MAX_WIRE_DEPTH);
    let Ok(message) = serde_json::from_slice::<Value>(&pruned) else {
        tracing::warn!(target: "upstream", server, depth, "dropped a message nested {depth} levels deep that is not valid JSON either");
        return None;
    };
    let id = message.get("id").filter(|id| !id.is_null()).cloned();
    let is_answer = message.get("result").is_some() || message.get("error").is_some();
    match (id, is_answer) {
        (Some(_), true)
            if message
                .pointer("/result/tools")
                .is_some_and(Value::is_array) =>
        {
            tracing::debug!(target: "upstream", server, depth, "tools/list nested {depth} levels deep; its deepest values are cut");
            Some(Cow::Owned(pruned))
        }
        (Some(id), true) => {
            tracing::warn!(target: "upstream", server, depth, "an answer nested {depth} levels deep was refused");
            let error = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": -32603, "message": too_deep(server, depth)},
            });
            Some(Cow::Owned(error.to_string().into_bytes()))
        }
        _ => {
            tracing::warn!(target: "upstream", server, depth, "dropped a message nested {depth} levels deep, more than the {MAX_WIRE_DEPTH} the gateway reads");
            None
        }
    }
}

/// The message saying an answer nests `depth` levels, deeper than the gateway reads.
fn too_deep(server: &str, depth: usize) -> String {
    format!(
        "the answer of server `{server}` nests {depth} levels deep, more than the {MAX_WIRE_DEPTH} the gateway reads; the server must return flatter JSON"
    )
}

/// The largest message read from an upstream: a stdio server's line, or an SSE event of a
/// Streamable HTTP server. An answer up to this size is read whole and goes on to be offloaded
/// (cut to `maxBytesPerSession` when larger); a larger one becomes an error for its call as soon as
/// it has been read past, naming its size and this limit.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Marks, in an error's `data`, an error the gateway made of an upstream's answer it could not
/// read (too large, not MCP): the upstream is fine, only that call failed.
pub(crate) const REFUSED_ANSWER: &str = "refusedAnswer";

/// The error for the call `id` whose answer could not be read, with `message` saying why.
pub(crate) fn refused_answer(message: String, id: rmcp::model::RequestId) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(refused_answer_error(message), Some(id))
}

/// The error data of [`refused_answer`].
pub(crate) fn refused_answer_error(message: String) -> ErrorData {
    ErrorData::internal_error(message, Some(json!({ REFUSED_ANSWER: true })))
}

/// Whether `error` is one the gateway made of an answer it could not read ([`refused_answer`]).
pub(crate) fn is_refused_answer(error: &ErrorData) -> bool {
    error
        .data
        .as_ref()
        .and_then(|data| data.get(REFUSED_ANSWER))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// `bytes` in words: mebibytes for large sizes, with the exact count.
pub(crate) fn size_text(bytes: usize) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB ({bytes} bytes)", bytes as f64 / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// The message for an answer of `bytes` bytes, over the `limit` the gateway reads.
pub(crate) fn too_large(server: &str, bytes: usize, limit: usize) -> String {
    format!(
        "the answer of server `{server}` is {}, more than the {} the gateway reads from one message; ask the tool for less (a page, a range, a filter), or have the server return less",
        size_text(bytes),
        size_text(limit)
    )
}

/// What the top level of a JSON-RPC message says, read from its bytes as they pass (in pieces,
/// without keeping them): its `id`, and whether it is a request or notification (`method`) or an
/// answer (`result`, `error`). Reads any size and any depth in constant memory, so that a message
/// too large to keep can still be answered for its request.
#[derive(Debug, Default)]
pub(crate) struct MessageHead {
    bytes: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    /// The top-level key being read (its first bytes).
    key: Option<Vec<u8>>,
    /// The last top-level key read.
    last_key: Vec<u8>,
    /// The JSON text of `id`'s value while it is read.
    id_text: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
    has_method: bool,
    has_answer: bool,
}

/// Bytes of a top-level key kept: enough for `id`, `method`, `result`, `error`.
const KEY_BYTES: usize = 8;
/// Bytes of an id's JSON text kept; a longer id is not one the gateway sent.
const ID_BYTES: usize = 256;

impl MessageHead {
    /// The head of one whole message.
    pub(crate) fn of(message: &[u8]) -> Self {
        let mut head = Self::default();
        head.feed(message);
        head
    }

    /// Reads the next piece of the message.
    pub(crate) fn feed(&mut self, piece: &[u8]) {
        self.bytes += piece.len();
        for &b in piece {
            // Once the id and the kind are known, the rest is only counted.
            if self.id.is_some() && (self.has_answer || self.has_method) {
                break;
            }
            if let Some(text) = self.id_text.as_mut() {
                let ends = !self.in_string && self.depth == 1 && (b == b',' || b == b'}');
                if ends {
                    self.id = self.id_text.take();
                } else if text.len() < ID_BYTES {
                    text.push(b);
                } else {
                    self.id_text = None;
                }
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if let Some(key) = self.key.take() {
                        self.last_key = key;
                    }
                    continue;
                }
                if let Some(key) = self.key.as_mut().filter(|k| k.len() <= KEY_BYTES) {
                    key.push(b);
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expect_key {
                        self.key = Some(Vec::new());
                        self.expect_key = false;
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 1 {
                        self.expect_key = b == b'{';
                    }
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => self.expect_key = true,
                b':' if self.depth == 1 => match self.last_key.as_slice() {
                    b"id" if self.id.is_none() => self.id_text = Some(Vec::new()),
                    b"method" => self.has_method = true,
                    b"result" | b"error" => self.has_answer = true,
                    _ => {}
                },
                _ => {}
            }
        }
    }

    /// Bytes read so far.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The id of the request this message answers; `None` for a request, a notification, or a
    /// message without a readable id.
    pub(crate) fn answered_id(&self) -> Option<rmcp::model::RequestId> {
        if self.has_method {
            return None;
        }
        serde_json::from_slice(self.id.as_deref()?).ok()
    }
}

/// Idle connections kept per upstream, for calls made at once.
const IDLE_CONNECTIONS: usize = 8;
/// How long an idle connection to an upstream is kept: under the 5 seconds after which Node's
/// and uvicorn's HTTP servers close an idle keep-alive connection.
const IDLE_CONNECTION: std::time::Duration = std::time::Duration::from_secs(4);

/// The JSON parser's own limit, which a JSON body that rmcp parses itself runs into.
const PARSER_DEPTH: usize = 128;

/// The largest SSE event read from an upstream.
pub(crate) const MAX_SSE_EVENT: usize = MAX_MESSAGE_BYTES;

/// rmcp's Streamable HTTP client (reqwest) with [`guard_line`] between the server and the MCP
/// library: every SSE event's data (answers to requests, and the server's own stream) is
/// measured and rewritten or dropped before it is parsed, and a JSON body too deep to parse
/// becomes an error for its request.
#[derive(Clone)]
pub(crate) struct GuardedHttpClient {
    inner: reqwest::Client,
    server: Arc<str>,
    /// Where rmcp's worker posts, in which session, with which headers.
    route: RouteCapture,
}

/// Where and how rmcp's worker last posted to the upstream: its URL, the session id, the
/// authorization and the headers (the configured ones plus `MCP-Protocol-Version`). A call the
/// gateway posts itself (`upstream/http.rs`) goes out the same way.
#[derive(Clone, Default)]
pub(crate) struct RouteCapture(Arc<std::sync::Mutex<Option<Arc<Route>>>>);

/// One route of [`RouteCapture`].
pub(crate) struct Route {
    pub(crate) uri: Arc<str>,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) auth_header: Option<String>,
    pub(crate) headers: HashMap<HeaderName, HeaderValue>,
}

impl RouteCapture {
    /// The route of the last post, once the session is set up (`None` before).
    pub(crate) fn get(&self) -> Option<Arc<Route>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Notes a post of rmcp's worker. An `initialize` request is left out: it opens a session
    /// and carries none of its headers.
    fn record(
        &self,
        uri: &Arc<str>,
        session_id: &Option<Arc<str>>,
        auth_header: &Option<String>,
        headers: &HashMap<HeaderName, HeaderValue>,
        message: &ClientJsonRpcMessage,
    ) {
        if matches!(
            message,
            ClientJsonRpcMessage::Request(request)
                if matches!(request.request, rmcp::model::ClientRequest::InitializeRequest(_))
        ) {
            return;
        }
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let same = current.as_ref().is_some_and(|route| {
            route.uri == *uri
                && route.session_id == *session_id
                && route.auth_header == *auth_header
                && route.headers == *headers
        });
        if !same {
            *current = Some(Arc::new(Route {
                uri: uri.clone(),
                session_id: session_id.clone(),
                auth_header: auth_header.clone(),
                headers: headers.clone(),
            }));
        }
    }
}

impl GuardedHttpClient {
    /// The client of `server`. Connections are kept between calls: rmcp reads each answer's
    /// stream to its end, and only a connection whose answer was read to the end goes back to
    /// the pool (rmcp's own client keeps none, which costs every call a TCP handshake and
    /// teardown). An idle connection is dropped after [`IDLE_CONNECTION`], before servers with
    /// the common 5-second keep-alive close it under a request. Redirects are followed only when
    /// they keep the method, the body and the origin (307, 308), at most 10.
    pub(crate) fn new(server: &str) -> Result<Self, reqwest::Error> {
        ensure_crypto_provider();
        let redirect = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > 10 {
                attempt.error("more than 10 redirects")
            } else {
                attempt.follow()
            }
        });
        let inner = reqwest::Client::builder()
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .pool_idle_timeout(IDLE_CONNECTION)
            .redirect(redirect)
            .build()?;
        Ok(Self {
            inner,
            server: server.into(),
            route: RouteCapture::default(),
        })
    }

    /// Where rmcp's worker posts; shared by every clone of this client.
    pub(crate) fn route(&self) -> RouteCapture {
        self.route.clone()
    }

    /// Posts `message` like rmcp's worker would, guarded, without noting the route: for calls the
    /// gateway posts itself.
    pub(crate) async fn post_direct(
        &self,
        route: &Route,
        message: ClientJsonRpcMessage,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let id = request_id(&message);
        let response = self
            .inner
            .post_message_with_max_sse_event_size(
                route.uri.clone(),
                message,
                route.session_id.clone(),
                route.auth_header.clone(),
                route.headers.clone(),
                MAX_SSE_EVENT,
            )
            .await;
        self.guard_post(id, response)
    }

    /// Resumes a stream of `route`'s session after `last_event_id`, guarded, without noting the
    /// route.
    pub(crate) async fn get_direct(
        &self,
        route: &Route,
        last_event_id: String,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>>
    {
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                route.uri.clone(),
                route.session_id.clone(),
                Some(last_event_id),
                route.auth_header.clone(),
                route.headers.clone(),
                MAX_SSE_EVENT,
            )
            .await?;
        Ok(self.guard_stream(stream))
    }

    /// `stream` with each event's data passed through [`guard_line`].
    fn guard_stream(
        &self,
        stream: BoxStream<'static, Result<Sse, SseError>>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        let server = self.server.clone();
        stream
            .filter_map(move |event| {
                std::future::ready(match event {
                    Ok(sse) => guard_event(&server, sse).map(Ok),
                    Err(e) => Some(Err(e)),
                })
            })
            .boxed()
    }

    /// The answer to `message` with its SSE stream guarded; a JSON answer the client could not
    /// parse for its depth becomes an error for the request.
    fn guard_post(
        &self,
        message_id: Option<rmcp::model::RequestId>,
        response: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        match response {
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => Ok(
                StreamableHttpPostResponse::Sse(self.guard_stream(stream), session),
            ),
            Err(StreamableHttpError::UnexpectedServerResponse(why))
                if why.contains("recursion limit exceeded") && message_id.is_some() =>
            {
                tracing::warn!(target: "upstream", server = %self.server, "a JSON answer too deep to parse was refused");
                let error = ErrorData::internal_error(
                    format!(
                        "the answer of server `{}` nests more than {PARSER_DEPTH} levels deep, more than the gateway reads; the server must return flatter JSON",
                        self.server
                    ),
                    None,
                );
                Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::error(error, message_id),
                    None,
                ))
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for GuardedHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.route
            .record(&uri, &session_id, &auth_header, &custom_headers, &message);
        let id = request_id(&message);
        let response = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.guard_post(id, response)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.route
            .record(&uri, &session_id, &auth_header, &custom_headers, &message);
        let id = request_id(&message);
        let response = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.guard_post(id, response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let stream = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await?;
        Ok(self.guard_stream(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.guard_stream(stream))
    }
}

/// An SSE event with its data passed through [`guard_line`]: kept, rewritten, or dropped (`None`).
fn guard_event(server: &str, mut sse: Sse) -> Option<Sse> {
    let Some(data) = sse.data.take() else {
        return Some(sse);
    };
    sse.data = Some(match guard_line(server, data.as_bytes())? {
        Cow::Borrowed(_) => data,
        Cow::Owned(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
    });
    Some(sse)
}

/// HTTPS needs a process-wide rustls crypto provider (reqwest panics building a client without
/// one); install ring's unless one is set already.
pub(crate) fn ensure_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// The id of a request (an answer is expected), `None` for anything else.
fn request_id(message: &ClientJsonRpcMessage) -> Option<rmcp::model::RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// `text` with every object or array that opens deeper than `max` replaced by [`MARKER`].
fn prune(text: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Depth at which the value being skipped opened; nothing is copied while it is set.
    let mut skipping: Option<usize> = None;
    for &b in text {
        let copy = skipping.is_none();
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    if skipping.is_none() && depth > max {
                        skipping = Some(depth);
                        out.extend_from_slice(MARKER.as_bytes());
                        continue;
                    }
                }
                b'}' | b']' => {
                    if skipping == Some(depth) {
                        skipping = None;
                        depth = depth.saturating_sub(1);
                        continue;
                    }
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            }
        }
        if copy && skipping.is_none() {
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn shallow_lines_pass_unchanged() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert!(matches!(guard_line("s", line), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn a_deep_answer_becomes_an_error_for_its_request() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"structuredContent":{{"a":{}}}}}}}"#,
            nested(300)
        );
        let out = guard_line("deep", line.as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 7);
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("server `deep` nests 303 levels"),
            "{message}"
        );
    }

    #[test]
    fn a_deep_tool_list_keeps_its_other_tools() {
        let deep_schema = format!(r#"{{"type":"object","x":{}}}"#, nested(200));
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"tools":[{{"name":"ok","inputSchema":{{"type":"object"}}}},{{"name":"deep","inputSchema":{deep_schema}}}]}}}}"#
        );
        let out = guard_line("s", line.as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let tools = v["result"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(
            tools[0],
            json!({"name":"ok","inputSchema":{"type":"object"}})
        );
        assert_eq!(tools[1]["name"], "deep");
        assert!(json_depth(tools[1]["inputSchema"].to_string().as_bytes()) > 64);
        assert!(out.len() < line.len());
    }

    #[test]
    fn brackets_in_strings_are_not_nesting() {
        let text = format!(r#"["{}",[[1]]]"#, "[".repeat(500));
        assert_eq!(
            prune(text.as_bytes(), 2),
            format!(r#"["{}",[{MARKER}]]"#, "[".repeat(500)).into_bytes()
        );
    }

    #[test]
    fn the_head_of_a_message_is_read_in_pieces_in_any_key_order() {
        let big = "x".repeat(10_000);
        let cases = [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"{big}"}}}}"#),
                Some(json!(7)),
            ),
            (
                format!(
                    r#"{{"result":{{"a":[{{"id":1}}],"t":"{big}"}},"jsonrpc":"2.0","id":"k,\"}}"}}"#
                ),
                Some(json!("k,\"}")),
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","id":3,"error":{{"code":1,"message":"{big}"}}}}"#),
                Some(json!(3)),
            ),
            (
                format!(
                    r#"{{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":"{big}"}}"#
                ),
                None,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":"{big}"}}"#),
                None,
            ),
            (format!(r#"["id", 5, "{big}"]"#), None),
        ];
        for (text, id) in cases {
            for piece in [1, 7, 4096, text.len()] {
                let mut head = MessageHead::default();
                for chunk in text.as_bytes().chunks(piece) {
                    head.feed(chunk);
                }
                assert_eq!(head.bytes(), text.len());
                let got = head
                    .answered_id()
                    .map(|id| serde_json::to_value(id).unwrap());
                assert_eq!(got, id, "{}", &text[..80]);
            }
        }
    }

    #[test]
    fn a_too_large_answer_says_its_size_and_the_limit() {
        let text = too_large("big", 73_400_320, MAX_MESSAGE_BYTES);
        assert!(
            text.contains("server `big` is 70.0 MiB (73400320 bytes)"),
            "{text}"
        );
        assert!(
            text.contains("more than the 64.0 MiB (67108864 bytes)"),
            "{text}"
        );
        let error = refused_answer(text, rmcp::model::RequestId::Number(3));
        let value = serde_json::to_value(&error).unwrap();
        assert_eq!(value["id"], 3);
        let data: ErrorData = serde_json::from_value(value["error"].clone()).unwrap();
        assert!(is_refused_answer(&data));
        assert!(!is_refused_answer(&ErrorData::internal_error("x", None)));
    }

    #[test]
    fn a_deep_notification_is_dropped() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}}}"#,
            nested(150)
        );
        assert!(guard_line("s", line.as_bytes()).is_none());
    }

    fn event(data: &str) -> Result<Sse, SseError> {
        Ok(Sse {
            event: Some("message".into()),
            data: Some(data.to_string()),
            id: None,
            retry: None,
        })
    }

    #[tokio::test]
    async fn http_events_are_guarded_like_stdio_lines() {
        let client = GuardedHttpClient::new("remote").unwrap();
        let shallow = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let deep_answer = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"a":{}}}}}"#,
            nested(150)
        );
        let deep_note = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}}}"#,
            nested(150)
        );
        let events = vec![
            event(shallow),
            event(&deep_answer),
            event(&deep_note),
            Ok(Sse {
                event: None,
                data: None,
                id: Some("0".into()),
                retry: Some(1000),
            }),
        ];
        let out: Vec<Sse> = client
            .guard_stream(futures::stream::iter(events).boxed())
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(out.len(), 3, "the deep notification is dropped: {out:?}");
        assert_eq!(out[0].data.as_deref(), Some(shallow));
        let error: Value = serde_json::from_str(out[1].data.as_deref().unwrap()).unwrap();
        assert_eq!(error["id"], 2);
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("server `remote` nests 152 levels"),
            "{error}"
        );
        assert_eq!(out[2].retry, Some(1000));
    }

    #[test]
    fn a_json_body_too_deep_to_parse_is_an_error_for_its_request() {
        let client = GuardedHttpClient::new("remote").unwrap();
        let parse_error = || {
            Err(StreamableHttpError::UnexpectedServerResponse(
                "could not parse JSON response as ServerJsonRpcMessage: recursion limit exceeded at line 1 column 140: {...".into(),
            ))
        };
        let id = rmcp::model::RequestId::Number(9);
        match client.guard_post(Some(id), parse_error()) {
            Ok(StreamableHttpPostResponse::Json(message, None)) => {
                let value = serde_json::to_value(&message).unwrap();
                assert_eq!(value["id"], 9);
                assert!(
                    value["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("server `remote` nests more than 128 levels"),
                    "{value}"
                );
            }
            other => panic!("expected an error answer, got {other:?}"),
        }
        // Without a request to answer, and for other failures, the error stays what it was.
        assert!(client.guard_post(None, parse_error()).is_err());
        let other = client.guard_post(
            Some(rmcp::model::RequestId::Number(1)),
            Err(StreamableHttpError::UnexpectedServerResponse(
                "HTTP 500".into(),
            )),
        );
        assert!(other.is_err());
    }
}
