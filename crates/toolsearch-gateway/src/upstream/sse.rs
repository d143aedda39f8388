//! The HTTP+SSE transport of MCP 2024-11-05, for upstreams that still speak it (`type = "sse"`):
//! a `GET` opens the server's event stream, whose first `endpoint` event names the URL each
//! message is `POST`ed to; everything the server sends arrives as `message` events on that one
//! stream. The requests go through the same guarded HTTP client as Streamable HTTP (every event
//! measured and its depth bounded before it is parsed), and the service on top is rmcp's, so
//! supervision, timeouts, progress, cancellation and pass-through are the same as for any
//! upstream.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{StreamableHttpClient, StreamableHttpError};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use sse_stream::{Error as SseError, Sse};

use super::wire::{GuardedHttpClient, MAX_SSE_EVENT};

/// What can go wrong on the way to a legacy SSE server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SseTransportError {
    #[error("{0}")]
    Http(#[from] StreamableHttpError<reqwest::Error>),
    #[error("the event stream ended before the server named its message endpoint (the `endpoint` event); check that `url` is the server's SSE endpoint (often `/sse`)")]
    NoEndpoint,
    #[error("the event stream failed before the server named its message endpoint: {0}")]
    Stream(String),
    #[error("the server named `{endpoint}` as its message endpoint, which is not a URL on the same server as `url`; the gateway posts messages (and the configured headers) only to the server it was pointed at")]
    ForeignEndpoint { endpoint: String },
}

/// An open legacy SSE session: the event stream, and where to post.
pub(crate) struct SseTransport {
    http: GuardedHttpClient,
    endpoint: Arc<str>,
    headers: HashMap<HeaderName, HeaderValue>,
    events: BoxStream<'static, Result<Sse, SseError>>,
    server: String,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for the message endpoint it names.
    pub(crate) async fn connect(
        server: &str,
        http: GuardedHttpClient,
        url: &str,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Self, SseTransportError> {
        let mut events = http
            .get_stream_with_max_sse_event_size(
                url.into(),
                None,
                None,
                None,
                headers.clone(),
                MAX_SSE_EVENT,
            )
            .await?;
        let named = loop {
            match events.next().await {
                Some(Ok(sse)) if sse.event.as_deref() == Some("endpoint") => {
                    break sse.data.unwrap_or_default();
                }
                // Comments and keep-alives before it.
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(SseTransportError::Stream(e.to_string())),
                None => return Err(SseTransportError::NoEndpoint),
            }
        };
        let endpoint = same_origin_endpoint(url, named.trim())?;
        tracing::debug!(target: "upstream", server, "legacy SSE session open");
        Ok(Self {
            http,
            endpoint: endpoint.into(),
            headers,
            events,
            server: server.to_string(),
        })
    }
}

/// `named` (absolute, or relative to `url` as servers usually send it) resolved, when it is on the
/// same scheme, host and port as `url`.
fn same_origin_endpoint(url: &str, named: &str) -> Result<String, SseTransportError> {
    let foreign = || SseTransportError::ForeignEndpoint {
        endpoint: named.to_string(),
    };
    let base = reqwest::Url::parse(url).map_err(|_| foreign())?;
    let endpoint = base.join(named).map_err(|_| foreign())?;
    if endpoint.origin() != base.origin() {
        return Err(foreign());
    }
    Ok(endpoint.to_string())
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseTransportError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        async move {
            // A legacy server accepts the message (202) and answers on the event stream.
            http.post_message(endpoint, item, None, None, headers)
                .await
                .map(|_| ())
                .map_err(SseTransportError::from)
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            match self.events.next().await? {
                Ok(sse) if sse.event.is_none() || sse.event.as_deref() == Some("message") => {
                    let Some(data) = sse.data else { continue };
                    match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                        Ok(message) => return Some(message),
                        Err(e) => {
                            tracing::warn!(target: "upstream", server = %self.server, error = %e, "dropped an event that is not an MCP message");
                        }
                    }
                }
                // Another `endpoint`, or an event of the server's own.
                Ok(_) => continue,
                Err(e) => {
                    tracing::info!(target: "upstream", server = %self.server, error = %e, "the legacy SSE stream ended");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the stream closes the connection, which ends the session for the server.
        self.events = futures::stream::empty().boxed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_must_be_on_the_server_the_url_names() {
        let url = "http://127.0.0.1:3001/sse";
        assert_eq!(
            same_origin_endpoint(url, "/message?sessionId=abc").unwrap(),
            "http://127.0.0.1:3001/message?sessionId=abc"
        );
        assert_eq!(
            same_origin_endpoint(url, "messages/?session_id=1").unwrap(),
            "http://127.0.0.1:3001/messages/?session_id=1"
        );
        assert_eq!(
            same_origin_endpoint(url, "http://127.0.0.1:3001/m").unwrap(),
            "http://127.0.0.1:3001/m"
        );
        for elsewhere in [
            "http://evil.example/m",
            "https://127.0.0.1:3001/m",
            "http://127.0.0.1:3002/m",
            "//evil.example/m",
        ] {
            let refused = same_origin_endpoint(url, elsewhere).unwrap_err();
            assert!(
                refused.to_string().contains("same server"),
                "{elsewhere}: {refused}"
            );
        }
    }
}
