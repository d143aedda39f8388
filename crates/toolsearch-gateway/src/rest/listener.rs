//! The HTTP listener under `/mcp` and the REST API: accepts connections and serves them with
//! hyper, with the limits of the `http` config section ([`HttpConfig`]).
//!
//! - Accepted sockets get `TCP_NODELAY`: Streamable HTTP answers are written in more than one
//!   piece, and with Nagle's algorithm on, the second piece of every answer on a kept-alive
//!   connection waited for the client's delayed ACK (about 40 ms).
//! - A client has `headerReadTimeoutSecs` to send a request's headers (counted from the accept, or
//!   from the end of the previous response) and `bodyReadTimeoutSecs` to send its body, with no
//!   gap longer than `bodyStallTimeoutSecs` between its pieces; then the connection is closed
//!   (a late body is answered 408 first). A body that stalled frees its connection within
//!   seconds, so requests whose body never comes cannot hold the connections for long.
//! - At most `maxConnections` connections are open. At the cap, a new connection closes the
//!   oldest one that is waiting for a request; if every one is busy with a request, the new one
//!   is answered 503 and closed. Idle or half-sent connections can therefore never starve new
//!   clients, nor exhaust the process's file descriptors.
//! - Every request's `Host` and `Origin` are checked ([`HttpConfig::check_request`]) before any
//!   route sees it: 403 when refused.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use crate::listener_config::HttpConfig;

/// Pause after an accept error that is not about one connection (e.g. out of file descriptors),
/// so that the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Accepts one connection and prepares its socket (no Nagle delay).
pub(crate) async fn accept(listener: &TcpListener) -> std::io::Result<(TcpStream, SocketAddr)> {
    let (stream, peer) = listener.accept().await?;
    stream.set_nodelay(true)?;
    Ok((stream, peer))
}

/// Serves `app` on `listener` with the limits and rules of `http` until `shutdown` completes;
/// then stops accepting, lets the requests in progress finish and returns.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    http: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let loopback = listener.local_addr()?.ip().is_loopback();
    let shared = Arc::new(Shared {
        app,
        http,
        loopback,
        registry: Mutex::new(Registry::default()),
    });
    let closing = CancellationToken::new();
    // Every connection task holds a receiver; the sender's `closed()` resolves when all are done.
    let (done_tx, done_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => match accepted {
                Ok(pair) => pair,
                Err(e) if is_per_connection(&e) => {
                    tracing::debug!(target: "http", error = %e, "connection failed while being accepted");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(target: "http", error = %e, "cannot accept connections; retrying (if out of file descriptors, lower http.maxConnections or raise the process's limit)");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Some((id, evicted)) = shared.admit() else {
            // debug, not warn: a flood of connections must not become a flood of log lines.
            tracing::debug!(target: "http", %peer, max = shared.http.max_connections, "every connection is busy; refusing a new one with 503 (raise http.maxConnections if this is normal load)");
            refuse(stream);
            continue;
        };
        let shared = shared.clone();
        let closing = closing.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            serve_connection(&shared, id, stream, evicted, closing).await;
            shared.forget(id);
            drop(done);
        });
    }
    drop(listener);
    closing.cancel();
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// Errors of `accept` that concern only the connection being accepted.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    )
}

/// How long a refused connection is kept to read what the client sent before it is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Answers 503 on a connection the cap leaves no room for, then closes it. Closing a socket with
/// unread input resets it, and a reset can destroy the answer before the client reads it; so the
/// request is read (and dropped) for at most [`REFUSAL_LINGER`] and 64 KiB after the answer.
fn refuse(stream: TcpStream) {
    let body = serde_json::json!({"error": {
        "code": "unavailable",
        "message": "the server is at its connection limit with every connection busy; retry shortly (the operator can raise http.maxConnections)",
    }})
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = stream;
        let linger = async {
            stream.write_all(response.as_bytes()).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            let mut left = 64 * 1024usize;
            while left > 0 {
                let n = stream.read(&mut sink).await?;
                if n == 0 {
                    break;
                }
                left = left.saturating_sub(n);
            }
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, linger).await;
    });
}

async fn serve_connection(
    shared: &Arc<Shared>,
    id: u64,
    stream: TcpStream,
    evicted: CancellationToken,
    closing: CancellationToken,
) {
    let service = ConnectionService {
        shared: shared.clone(),
        id,
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.http.header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(target: "http", error = %e, "connection ended with an error");
            }
        }
        () = evicted.cancelled() => {
            tracing::debug!(target: "http", "idle connection closed to make room for a new one");
        }
        () = closing.cancelled() => {
            connection.as_mut().graceful_shutdown();
            if let Err(e) = connection.await {
                tracing::debug!(target: "http", error = %e, "connection ended with an error while shutting down");
            }
        }
    }
}

struct Shared {
    app: Router,
    http: HttpConfig,
    loopback: bool,
    registry: Mutex<Registry>,
}

/// The open connections by age (ids grow), each with its requests in progress.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Connection>,
}

struct Connection {
    requests: usize,
    evict: CancellationToken,
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // The registry holds plain counters: a panic elsewhere cannot leave it inconsistent.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a new connection, first closing the oldest idle one when at the cap. `None`
    /// when at the cap with every connection busy.
    fn admit(&self) -> Option<(u64, CancellationToken)> {
        let mut registry = self.registry();
        if registry.open.len() >= self.http.max_connections {
            let oldest_idle = registry
                .open
                .iter()
                .find(|(_, c)| c.requests == 0)
                .map(|(&id, _)| id)?;
            if let Some(connection) = registry.open.remove(&oldest_idle) {
                connection.evict.cancel();
            }
        }
        let id = registry.next_id;
        registry.next_id += 1;
        let evict = CancellationToken::new();
        registry.open.insert(
            id,
            Connection {
                requests: 0,
                evict: evict.clone(),
            },
        );
        Some((id, evict))
    }

    fn forget(&self, id: u64) {
        self.registry().open.remove(&id);
    }

    fn request_started(&self, id: u64) {
        if let Some(c) = self.registry().open.get_mut(&id) {
            c.requests += 1;
        }
    }

    fn request_ended(&self, id: u64) {
        if let Some(c) = self.registry().open.get_mut(&id) {
            c.requests = c.requests.saturating_sub(1);
        }
    }
}

/// Marks its connection busy from the request's head until the response body is done (or
/// dropped): a connection streaming an answer is never closed to make room.
struct InProgress {
    shared: Arc<Shared>,
    id: u64,
}

impl InProgress {
    fn new(shared: &Arc<Shared>, id: u64) -> Self {
        shared.request_started(id);
        Self {
            shared: shared.clone(),
            id,
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.shared.request_ended(self.id);
    }
}

/// One connection's requests: Host/Origin check, body deadline, then the app.
#[derive(Clone)]
struct ConnectionService {
    shared: Arc<Shared>,
    id: u64,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, request: Request<Incoming>) -> ServiceFuture {
        let in_progress = InProgress::new(&self.shared, self.id);
        let header = |name| {
            request
                .headers()
                .get(name)
                .map(|v: &axum::http::HeaderValue| {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                })
        };
        let host = header(HOST).or_else(|| request.uri().authority().map(|a| a.to_string()));
        let origin = header(ORIGIN);
        // Probes come from load balancers and the kubelet, which name the address they reach
        // (a pod's IP) as Host; the probes hold no data a rebinding page could read.
        let probe = request.method() == axum::http::Method::GET
            && matches!(
                request.uri().path(),
                super::HEALTHZ_PATH | super::READYZ_PATH
            );
        let checked = if probe {
            Ok(())
        } else {
            self.shared
                .http
                .check_request(self.shared.loopback, host.as_deref(), origin.as_deref())
        };
        if let Err(refusal) = checked {
            tracing::debug!(target: "http", host = ?host, origin = ?origin, "request refused: {refusal}");
            let response = ApiError::Forbidden(refusal.to_string()).into_response();
            return Box::pin(async move { Ok(tracked(response, in_progress)) });
        }
        let timeout = self.shared.http.body_read_timeout;
        let stall = self.shared.http.body_stall_timeout;
        let expired = Arc::new(std::sync::OnceLock::new());
        let request =
            request.map(|body| Body::new(DeadlineBody::new(body, timeout, stall, expired.clone())));
        let mut app = self.shared.app.clone();
        Box::pin(async move {
            let response = tower_service::Service::call(&mut app, request).await?;
            // Whatever a route made of the failed body (rmcp answers 500), it is a 408.
            let response = match expired.get() {
                Some(why) => ApiError::BodyTimeout(why.clone()).into_response(),
                None => response,
            };
            Ok(tracked(response, in_progress))
        })
    }
}

fn tracked(response: Response<Body>, in_progress: InProgress) -> Response<Body> {
    response.map(|inner| {
        Body::new(TrackedBody {
            inner,
            _in_progress: in_progress,
        })
    })
}

/// A response body that keeps its connection marked busy until it is done.
struct TrackedBody {
    inner: Body,
    _in_progress: InProgress,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The body of a request not received within `http.bodyReadTimeoutSecs`, or that stopped
/// arriving for `http.bodyStallTimeoutSecs`.
#[derive(Debug, thiserror::Error)]
pub enum BodyReadTimeout {
    #[error("the request body did not arrive within {}s; send the whole body at once (the limit is http.bodyReadTimeoutSecs)", .0.as_secs())]
    Total(Duration),
    #[error("the request body stopped arriving for {}s; send the whole body at once (the limit is http.bodyStallTimeoutSecs)", .0.as_secs())]
    Stalled(Duration),
}

/// A request body that fails with [`BodyReadTimeout`] once its deadline passes unfinished, or
/// once no piece of it arrived for the stall timeout.
struct DeadlineBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    stall_timeout: Duration,
    stall: Pin<Box<tokio::time::Sleep>>,
    /// Set to the message when a deadline passed, for the answer.
    expired: Arc<std::sync::OnceLock<String>>,
}

impl DeadlineBody {
    fn new(
        inner: Incoming,
        timeout: Duration,
        stall_timeout: Duration,
        expired: Arc<std::sync::OnceLock<String>>,
    ) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            stall_timeout,
            stall: Box::pin(tokio::time::sleep(stall_timeout)),
            expired,
        }
    }

    fn fail(&self, why: BodyReadTimeout) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let _ = self.expired.set(why.to_string());
        Poll::Ready(Some(Err(Box::new(why))))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + self.stall_timeout;
                self.stall.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    return self.fail(BodyReadTimeout::Total(self.timeout));
                }
                if self.stall.as_mut().poll(cx).is_ready() {
                    return self.fail(BodyReadTimeout::Stalled(self.stall_timeout));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accept path used by `serve_with` turns Nagle's algorithm off on every socket.
    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(TcpStream::connect(addr));
        let (stream, _) = accept(&listener).await.unwrap();
        assert!(stream.nodelay().unwrap());
        // The default that the accept path changes.
        let client = client.await.unwrap().unwrap();
        assert!(!client.nodelay().unwrap());
    }

    fn shared(max: usize) -> Shared {
        Shared {
            app: Router::new(),
            http: HttpConfig {
                max_connections: max,
                ..HttpConfig::default()
            },
            loopback: true,
            registry: Mutex::new(Registry::default()),
        }
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let s = shared(2);
        let (a, evict_a) = s.admit().unwrap();
        let (b, evict_b) = s.admit().unwrap();
        s.request_started(a);
        // `a` is busy, so `b` (idle) goes.
        let (c, evict_c) = s.admit().unwrap();
        assert!(!evict_a.is_cancelled());
        assert!(evict_b.is_cancelled());
        s.request_started(c);
        // Every connection busy: refused.
        assert!(s.admit().is_none());
        s.request_ended(a);
        let (_, _) = s.admit().unwrap();
        assert!(evict_a.is_cancelled());
        assert!(!evict_c.is_cancelled());
        s.forget(b);
        assert_eq!(s.registry().open.len(), 2);
    }
}
