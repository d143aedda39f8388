//! `tools/call` to a Streamable HTTP upstream, posted by the gateway itself.
//!
//! rmcp's client passes each request through its service loop and its transport worker, and each
//! answer back through a task of its own, the worker and the service loop again. On the path
//! every forwarded call takes, those hand-offs cost a good share of what the gateway adds to a
//! call. A call to an HTTP upstream is therefore posted here, with rmcp's own HTTP client code,
//! on the same connections, in the same session and with the same headers as rmcp's worker uses
//! ([`RouteCapture`]), and its answer is read here:
//!
//! - progress and log messages on the answer's stream go straight to the relay, in the order the
//!   upstream sent them, so what it said before answering reaches the client before the answer;
//! - anything else on that stream (the upstream's requests to the client: sampling, elicitation,
//!   roots; other notifications) is handed to rmcp's service as if its transport had read it
//!   ([`HttpTransport`]), and rmcp answers requests the usual way;
//! - a stream that ends before the answer is resumed from its last event id (a GET with
//!   `Last-Event-ID`), as a server may close it and let the client poll;
//! - the call is left to rmcp, which knows what to do, when no session is set up yet, when the
//!   session has expired (HTTP 404: rmcp opens a new one and sends the call again), when the
//!   server asks for authorization, and under protocol 2026-07-28, whose per-request headers
//!   rmcp writes.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, GetMeta,
    NumberOrString, ProgressToken, RequestId, ServerJsonRpcMessage, ServerNotification,
    ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpError, StreamableHttpPostResponse,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport, Transport};
use rmcp::ServiceError;
use sse_stream::Sse;
use tokio::sync::mpsc;

use crate::relay::Relay;
use crate::upstream::wire::{
    refused_answer_error, size_text, GuardedHttpClient, Route, RouteCapture, MAX_SSE_EVENT,
};

/// Ids of the calls posted here start above every id rmcp's own counter (a `u32`) gives, so the
/// two never meet in one session; they stay integers, which every SDK reads.
const FIRST_ID: i64 = 1 << 32;

/// Times a stream that ended before its answer is resumed without anything read in between.
const MAX_RESUMES: usize = 5;

/// Wait before resuming a stream whose server gave no `retry`: the SSE default.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// How long the rest of an answered stream is read, so that its connection can be kept.
const DRAIN: Duration = Duration::from_secs(1);

/// The first protocol version whose requests carry per-request headers, which rmcp writes.
const PER_REQUEST_HEADERS: &str = "2026-07-28";

/// An answer's SSE stream, its events guarded (`wire.rs`).
type EventStream = BoxStream<'static, Result<Sse, SseError>>;

/// rmcp's Streamable HTTP client transport, plus what the gateway read itself on the streams of
/// the calls it posted and leaves to rmcp: the upstream's requests to the client, and
/// notifications other than progress and log messages.
pub(crate) struct HttpTransport {
    inner: StreamableHttpClientTransport<GuardedHttpClient>,
    handed_over: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
}

impl HttpTransport {
    pub(crate) fn new(
        inner: StreamableHttpClientTransport<GuardedHttpClient>,
        handed_over: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
    ) -> Self {
        Self { inner, handed_over }
    }
}

impl Transport<RoleClient> for HttpTransport {
    type Error = <StreamableHttpClientTransport<GuardedHttpClient> as Transport<RoleClient>>::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // Both receivers are cancel-safe; the transport's own end ends the session.
        tokio::select! {
            biased;
            message = self.inner.receive() => message,
            Some(message) = self.handed_over.recv() => Some(message),
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Calls to one HTTP upstream session, posted by the gateway itself.
pub(crate) struct HttpCalls {
    server: Arc<str>,
    client: GuardedHttpClient,
    route: RouteCapture,
    hand_over: mpsc::UnboundedSender<ServerJsonRpcMessage>,
    relay: Arc<Relay>,
    next_id: AtomicI64,
}

/// A call about to be posted here: where, and under which id.
pub(crate) struct Prepared {
    route: Arc<Route>,
    id: i64,
}

impl Prepared {
    /// The call's JSON-RPC id, for `notifications/cancelled`.
    pub(crate) fn request_id(&self) -> RequestId {
        NumberOrString::Number(self.id)
    }

    /// The progress token the call carries upstream.
    pub(crate) fn progress_token(&self) -> ProgressToken {
        ProgressToken(NumberOrString::Number(self.id))
    }
}

impl HttpCalls {
    /// Calls over the session whose posts `client` sees; what is left to rmcp goes to
    /// `hand_over`, the other end of an [`HttpTransport`].
    pub(crate) fn new(
        server: &str,
        client: GuardedHttpClient,
        hand_over: mpsc::UnboundedSender<ServerJsonRpcMessage>,
        relay: Arc<Relay>,
    ) -> Self {
        Self {
            server: server.into(),
            route: client.route(),
            client,
            hand_over,
            relay,
            next_id: AtomicI64::new(FIRST_ID),
        }
    }

    /// The next call's route and id, or `None` when this session's calls are rmcp's to send.
    pub(crate) fn prepare(&self) -> Option<Prepared> {
        let route = self.route.get()?;
        let newer_protocol = route
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|version| version >= PER_REQUEST_HEADERS);
        if newer_protocol {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Some(Prepared { route, id })
    }

    /// Posts `tools/call` and reads its answer: the upstream's answer or why there is none, or
    /// `None` when the upstream did not take the call (expired session, authorization), which
    /// is then rmcp's to send.
    pub(crate) async fn call(
        &self,
        prepared: Prepared,
        params: CallToolRequestParams,
    ) -> Option<Result<ServerResult, ServiceError>> {
        let id = prepared.request_id();
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        request
            .get_meta_mut()
            .set_progress_token(prepared.progress_token());
        let message = ClientJsonRpcMessage::request(request, id.clone());
        let posted = self.client.post_direct(&prepared.route, message).await;
        match posted {
            Ok(StreamableHttpPostResponse::Json(message, _)) => {
                let answer = self.read(message, &id).await;
                Some(answer.unwrap_or_else(|| {
                    Err(self.refused("answered tools/call with a message that is not its answer"))
                }))
            }
            Ok(StreamableHttpPostResponse::Sse(stream, _)) => {
                Some(self.read_stream(stream, &id, &prepared.route).await)
            }
            Ok(StreamableHttpPostResponse::Accepted) => Some(Err(self.refused(
                "accepted tools/call (HTTP 202) without answering it; a Streamable HTTP server answers a request on its POST",
            ))),
            Ok(_) => Some(Err(
                self.refused("answered tools/call in a form the gateway does not read")
            )),
            // The credentials stopped working (revoked, or expired early): every call would
            // be refused alike, so the connection is made again, which renews a sign-in's token
            // or else reports that the server needs authorization.
            Err(StreamableHttpError::AuthRequired(_)) => {
                tracing::warn!(target: "upstream", server = %self.server, "refused the credentials (HTTP 401) on a call; connecting again");
                Some(Err(ServiceError::TransportClosed))
            }
            Err(StreamableHttpError::SessionExpired | StreamableHttpError::InsufficientScope(_)) => {
                None
            }
            Err(e) => Some(Err(self.post_failed(e))),
        }
    }

    /// What a failed post of `tools/call` means. A bad answer (an HTTP error, a page that is not
    /// MCP, a body too large) is this call's error, and the session goes on. A server that cannot
    /// be reached at all, or whose connection broke before it answered (it exited mid-call), is
    /// gone: every session's calls would fail alike, so its connection is started again at once
    /// (with the supervisor's backoff).
    fn post_failed(&self, error: StreamableHttpError<reqwest::Error>) -> ServiceError {
        if self.unreachable(&error) {
            return ServiceError::TransportClosed;
        }
        self.refused(&bad_answer(&error))
    }

    /// Whether `error` says the server cannot be reached at all (said in the log when so).
    fn unreachable(&self, error: &StreamableHttpError<reqwest::Error>) -> bool {
        let unreachable = matches!(error, StreamableHttpError::Client(e) if connection_broke(e));
        if unreachable {
            tracing::warn!(target: "upstream", server = %self.server, "cannot be reached: {}", error_chain(error));
        }
        unreachable
    }

    /// What a failed resume of an answer's stream means: a server that cannot be reached is
    /// gone, as for a failed post (it went away while answering); anything else is a failed send.
    fn resume_failed(&self, error: StreamableHttpError<reqwest::Error>) -> ServiceError {
        if self.unreachable(&error) {
            return ServiceError::TransportClosed;
        }
        ServiceError::TransportSend(DynamicTransportError::new::<HttpTransport, RoleClient>(
            error,
        ))
    }

    /// Reads the answer's SSE stream until the answer, resuming it when it ends before.
    async fn read_stream(
        &self,
        mut stream: EventStream,
        id: &RequestId,
        route: &Route,
    ) -> Result<ServerResult, ServiceError> {
        let mut last_event_id: Option<String> = None;
        let mut retry = DEFAULT_RETRY;
        let mut resumes = 0;
        loop {
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) if is_event_too_large(&e) => {
                        tracing::warn!(target: "upstream", server = %self.server, limit = MAX_SSE_EVENT, "an SSE event larger than the gateway reads became an error for its call");
                        return Err(self.refused(&format!(
                            "sent an SSE event larger than {}, the most the gateway reads from one message; ask the tool for less (a page, a range, a filter), or have the server return less",
                            size_text(MAX_SSE_EVENT)
                        )));
                    }
                    Err(e) => {
                        tracing::debug!(target: "upstream", server = %self.server, error = %e, "the answer's stream broke");
                        break;
                    }
                };
                if let Some(event_id) = event.id {
                    last_event_id = Some(event_id).filter(|e| !e.is_empty());
                }
                if let Some(ms) = event.retry {
                    retry = Duration::from_millis(ms);
                }
                let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                resumes = 0;
                if let Some(answer) = answer_of(&data, id) {
                    finish(stream);
                    return answer;
                }
                let message = match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(message) => message,
                    Err(e) => {
                        tracing::warn!(target: "upstream", server = %self.server, error = %e, "dropped a message on an answer's stream that is not MCP");
                        continue;
                    }
                };
                if let Some(answer) = self.read(message, id).await {
                    finish(stream);
                    return answer;
                }
            }
            let Some(event_id) = last_event_id.clone() else {
                return Err(self.refused(
                    "closed the stream of a tools/call before answering, with no event id to resume it from",
                ));
            };
            if resumes == MAX_RESUMES {
                return Err(self.refused(&format!(
                    "closed the stream of a tools/call {MAX_RESUMES} times in a row without sending anything"
                )));
            }
            resumes += 1;
            tokio::time::sleep(retry).await;
            tracing::debug!(target: "upstream", server = %self.server, event_id, "resuming the answer's stream");
            stream = self
                .client
                .get_direct(route, event_id)
                .await
                .map_err(|e| self.resume_failed(e))?;
        }
    }

    /// One message from the answer's stream: the answer itself (`Some`), or passed on.
    async fn read(
        &self,
        message: ServerJsonRpcMessage,
        id: &RequestId,
    ) -> Option<Result<ServerResult, ServiceError>> {
        match message {
            ServerJsonRpcMessage::Response(response) if response.id == *id => {
                Some(Ok(response.result))
            }
            // An error without an id on this stream is about this request.
            ServerJsonRpcMessage::Error(error)
                if error.id.as_ref().is_none_or(|error_id| error_id == id) =>
            {
                Some(Err(ServiceError::McpError(error.error)))
            }
            ServerJsonRpcMessage::Notification(notification) => {
                match notification.notification {
                    ServerNotification::ProgressNotification(progress) => {
                        self.relay.progress(&self.server, progress.params).await;
                    }
                    #[allow(deprecated)] // logging: see the client handler in `upstream`
                    ServerNotification::LoggingMessageNotification(log) => {
                        self.relay.log(&self.server, log.params).await;
                    }
                    other => self.hand_over(ServerJsonRpcMessage::notification(other)),
                }
                None
            }
            other => {
                self.hand_over(other);
                None
            }
        }
    }

    fn hand_over(&self, message: ServerJsonRpcMessage) {
        if self.hand_over.send(message).is_err() {
            tracing::debug!(target: "upstream", server = %self.server, "a message for a closed session was dropped");
        }
    }

    /// This call's error for an answer the gateway could not read; the upstream stays connected.
    fn refused(&self, what: &str) -> ServiceError {
        ServiceError::McpError(refused_answer_error(format!(
            "server `{}` {what}",
            self.server
        )))
    }
}

/// Characters of an answer's body quoted in an error.
const EXCERPT_CHARS: usize = 200;

/// Why a post of `tools/call` got no answer, in words, with the status and a short excerpt of
/// the body when the MCP library kept them.
fn bad_answer(error: &StreamableHttpError<reqwest::Error>) -> String {
    match error {
        StreamableHttpError::HttpStatus(status) => format!(
            "answered tools/call with HTTP {}{}; the server stays connected: try again, or check the server's logs",
            status.status,
            reason(status.status)
        ),
        StreamableHttpError::UnexpectedServerResponse(why) => format!(
            "answered tools/call with something that is not an MCP answer: {}",
            excerpt(why)
        ),
        StreamableHttpError::UnexpectedContentType(content_type) => format!(
            "answered tools/call with content of type `{}`, not JSON or an event stream (an error page, or a URL that is not an MCP endpoint?); check the server's logs and its url",
            excerpt(content_type.as_deref().unwrap_or("none"))
        ),
        StreamableHttpError::ResponseBodyTooLarge { max_size } => format!(
            "answered tools/call with a JSON body larger than {}, the most the MCP library reads from one; ask the tool for less (a page, a range, a filter), or have the server answer with an event stream (up to {})",
            size_text(*max_size),
            size_text(MAX_SSE_EVENT)
        ),
        other => format!(
            "gave no answer to tools/call: {}; try again",
            excerpt(&error_chain(other))
        ),
    }
}

/// The reason phrase of an HTTP status, with a leading space, when there is one.
fn reason(status: u16) -> String {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" ({r})"))
        .unwrap_or_default()
}

/// `text` clipped to [`EXCERPT_CHARS`] characters on one line.
fn excerpt(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(EXCERPT_CHARS) {
        Some((end, _)) => format!("{}…", &flat[..end]),
        None => flat,
    }
}

/// An error and its sources, joined: reqwest's own message ("error sending request") says
/// little without them.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// Whether the SSE stream broke on an event larger than [`MAX_SSE_EVENT`]. The MCP library keeps
/// that error's type to itself; its message is all there is to tell it by.
fn is_event_too_large(error: &SseError) -> bool {
    error_chain(error).contains("SSE event exceeded the maximum size")
}

/// Reads what is left of an answered stream: only a response read to its end gives its
/// connection back to the pool. The end mostly comes with the answer; when it does not, it is
/// read in the background for at most [`DRAIN`].
fn finish(mut stream: EventStream) {
    if let Some(None) = stream.next().now_or_never() {
        return;
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(DRAIN, async { while stream.next().await.is_some() {} }).await;
    });
}

/// The fields that tell a call's answer from anything else on its stream, read without
/// building the rest.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(borrow, default)]
    result: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

/// `data` read as the successful answer to `id`, or `None` when it is something else (an error,
/// a notification, a request), which is then read as a whole message. The result alone goes
/// through the MCP library's parser, not the whole message twice over.
fn answer_of(data: &str, id: &RequestId) -> Option<Result<ServerResult, ServiceError>> {
    let envelope = serde_json::from_str::<Envelope>(data).ok()?;
    if envelope.method.is_some() || envelope.id.as_ref() != Some(id) {
        return None;
    }
    let result = serde_json::from_str::<ServerResult>(envelope.result?.get()).ok()?;
    Some(Ok(result))
}

/// Whether a send that rmcp made (a `tools/call` left to it) failed because the server cannot be
/// reached: the same verdict as for a call the gateway posts ([`HttpCalls::call`]), which the
/// supervisor would otherwise reach only once rmcp's own stream notices the server went away.
pub(crate) fn send_found_server_gone(failed: &DynamicTransportError) -> bool {
    matches!(
        failed.error.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::Client(e)) if connection_broke(e)
    )
}

/// Whether a request failed for its connection, with no answer at all: it could not be made, or
/// it broke before any status came back. A slow answer (a timeout) is not that.
fn connection_broke(error: &reqwest::Error) -> bool {
    error.is_connect() || (error.is_request() && error.status().is_none() && !error.is_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send rmcp made to a port that refuses connections says the server is gone; a send that
    /// failed otherwise does not.
    #[tokio::test]
    async fn a_send_to_a_closed_port_finds_the_server_gone() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        crate::upstream::wire::ensure_crypto_provider();
        let refused = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/mcp"))
            .send()
            .await
            .unwrap_err();
        let as_rmcp_says = |error| DynamicTransportError::new::<HttpTransport, RoleClient>(error);
        assert!(send_found_server_gone(&as_rmcp_says(
            StreamableHttpError::Client(refused)
        )));
        assert!(!send_found_server_gone(&as_rmcp_says(
            StreamableHttpError::UnexpectedEndOfStream
        )));
    }

    #[test]
    fn only_the_calls_own_success_is_read_as_its_answer() {
        let id = NumberOrString::Number(FIRST_ID);
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":{FIRST_ID},"result":{{"content":[{{"type":"text","text":"hi"}}]}}}}"#
        );
        match answer_of(&answer, &id) {
            Some(Ok(ServerResult::CallToolResult(result))) => {
                assert_eq!(result.content.len(), 1);
            }
            _ => panic!("not read as the answer"),
        }
        let other = answer.replace(&FIRST_ID.to_string(), "7");
        assert!(answer_of(&other, &id).is_none());
        let error = format!(
            r#"{{"jsonrpc":"2.0","id":{FIRST_ID},"error":{{"code":-32602,"message":"no"}}}}"#
        );
        assert!(answer_of(&error, &id).is_none(), "errors are read whole");
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        assert!(answer_of(progress, &id).is_none());
        let request =
            format!(r#"{{"jsonrpc":"2.0","id":{FIRST_ID},"method":"roots/list","result":{{}}}}"#);
        assert!(
            answer_of(&request, &id).is_none(),
            "a request is never an answer"
        );
    }
}
