//! Supervision of the upstream servers and the handle the rest of the gateway uses.
//!
//! Each upstream runs in its own task: connect, fetch its tools, serve calls, re-fetch on
//! `notifications/tools/list_changed`; when it exits or fails to start, wait (exponential backoff,
//! capped) and start it again, then fetch its tools afresh. One upstream's trouble never touches the
//! others. While an upstream is not `Ready`, a call to it fails at once with its state.

use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient};
use rmcp::{Peer, ServiceError};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use toolsearch_core::{CatalogPolicy, Tool, ToolId};

use crate::config::{GatewayConfig, ServerConfig, SupervisorConfig, Transport};
use crate::error::{GatewayError, Result};
use crate::relay::{CallOrigin, InFlightGuard, Relay};
use crate::upstream::connection::{
    self as upstream, Connection, Signal, StderrTail, UpstreamError,
};
use crate::upstream::http::HttpCalls;
use crate::upstream::sign_in::SignIns;
pub use crate::upstream::state::ServerState;

/// What changed upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamEvent {
    /// The server's tool list, as now known (after connecting, reconnecting, or list_changed),
    /// filtered by `selectedTools` and decorated with category, tags and defer policy.
    ToolsChanged { server: String, tools: Vec<Tool> },
    /// The server's state changed.
    StateChanged { server: String, state: ServerState },
    /// The server's prompts changed (it sent `notifications/prompts/list_changed`).
    PromptsChanged { server: String },
    /// The server's resources changed (it sent `notifications/resources/list_changed`).
    ResourcesChanged { server: String },
}

/// Timings of the supervisor; from the `supervisor` and `toolSearch` config sections.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervisorOptions {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Failed starts in a row after which a server is marked `Failed`; `None` retries forever.
    pub max_restarts: Option<u32>,
    /// Limit on connecting, initializing and the first tools/list.
    pub startup_timeout: Duration,
    /// Default timeout of a forwarded tools/call.
    pub call_timeout: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        Self::from_config(&SupervisorConfig::default(), Duration::from_secs(60))
    }
}

impl SupervisorOptions {
    pub fn from_config(sup: &SupervisorConfig, call_timeout: Duration) -> Self {
        Self {
            initial_backoff: Duration::from_millis(sup.initial_backoff_ms),
            max_backoff: Duration::from_millis(sup.max_backoff_ms),
            max_restarts: sup.max_restarts,
            startup_timeout: Duration::from_secs(sup.startup_timeout_secs),
            call_timeout,
        }
    }

    /// Delay before restart number `failures` (1-based): initial, doubled each time, capped.
    pub fn backoff(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(31);
        self.initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff)
    }
}

struct Live {
    peer: Peer<RoleClient>,
    pid: Option<u32>,
    /// Calls the gateway posts itself (Streamable HTTP servers).
    http_calls: Option<Arc<HttpCalls>>,
}

struct Slot {
    name: String,
    state: watch::Sender<ServerState>,
    live: RwLock<Option<Live>>,
    raw_tools: RwLock<Vec<rmcp::model::Tool>>,
    tools: RwLock<Vec<Tool>>,
    signals: mpsc::UnboundedSender<Signal>,
    /// The last lines a stdio server wrote to stderr, across its restarts.
    stderr: StderrTail,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    match lock.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

struct Inner {
    slots: Vec<Arc<Slot>>,
    events: broadcast::Sender<UpstreamEvent>,
    /// Only for refusing calls to tools the policy does not select; tools are published raw.
    policy: CatalogPolicy,
    options: SupervisorOptions,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    relay: Arc<Relay>,
    /// Where the sign-ins to OAuth servers are kept.
    sign_ins: SignIns,
}

impl Inner {
    fn emit(&self, event: UpstreamEvent) {
        // No subscriber is fine: the state and tools stay readable through the handle.
        let _ = self.events.send(event);
    }

    fn set_state(&self, slot: &Slot, state: ServerState) {
        // The lines a user watches a first run by (INFO of target `upstream` is on by default):
        // each start, each ready with its tools, each failure with the reason.
        match &state {
            ServerState::Starting { attempt: 1, .. } => {
                tracing::info!(target: "upstream", server = %slot.name, "starting")
            }
            // The failure before it was logged with its reason.
            ServerState::Starting { attempt, .. } => {
                tracing::info!(target: "upstream", server = %slot.name, attempt, "starting again")
            }
            ServerState::Ready => {
                let tools = read(&slot.tools).len();
                tracing::info!(target: "upstream", server = %slot.name, "ready with {tools} tools")
            }
            ServerState::Restarting { .. }
            | ServerState::Failed { .. }
            | ServerState::NeedsAuthorization { .. } => {
                tracing::warn!(target: "upstream", server = %slot.name, "{state}")
            }
            ServerState::Stopped => {
                tracing::debug!(target: "upstream", server = %slot.name, "{state}")
            }
        }
        slot.state.send_replace(state.clone());
        self.emit(UpstreamEvent::StateChanged {
            server: slot.name.clone(),
            state,
        });
    }

    fn publish_tools(&self, slot: &Slot, raw: Vec<rmcp::model::Tool>) {
        // Checked one by one: a bad tool is left out with a warning naming it, its siblings stay.
        // Published otherwise as the server lists them: the engine applies the catalog policy.
        let listed = raw.len();
        let (tools, rejected) = toolsearch_core::validate_tools(
            &slot.name,
            raw.iter()
                .map(|t| upstream::to_core_tool(&slot.name, t))
                .collect(),
        );
        for r in &rejected {
            // `{:?}` shows an empty name as "" and hidden characters escaped.
            tracing::warn!(target: "upstream", server = %slot.name, tool = ?r.name, "tool left out: {}", r.reason);
        }
        // The raw definitions of the tools kept, the first of each name.
        let mut kept: std::collections::HashSet<&str> = tools.iter().map(|t| t.name()).collect();
        let raw: Vec<rmcp::model::Tool> = raw
            .into_iter()
            .filter(|t| kept.remove(t.name.as_ref()))
            .collect();
        // At a start the `ready` line gives the count; a later change is news when the names
        // changed (servers often re-announce the same list).
        let renamed = {
            let before = read(&slot.tools);
            before.len() != tools.len()
                || before.iter().zip(&tools).any(|(a, b)| a.name() != b.name())
        };
        if renamed && slot.state.borrow().is_ready() {
            tracing::info!(target: "upstream", server = %slot.name, tools = tools.len(), listed, left_out = rejected.len(), "tools changed");
        } else {
            tracing::debug!(target: "upstream", server = %slot.name, tools = tools.len(), listed, left_out = rejected.len(), "tools fetched");
        }
        *write(&slot.raw_tools) = raw;
        *write(&slot.tools) = tools.clone();
        self.emit(UpstreamEvent::ToolsChanged {
            server: slot.name.clone(),
            tools,
        });
    }
}

/// Handle on the running upstreams. Cheap to clone; all clones share the same servers. When the
/// last clone is dropped the upstreams are shut down in the background; call
/// [`shutdown`](Self::shutdown) to wait for that.
#[derive(Clone)]
pub struct UpstreamManager {
    inner: Arc<Inner>,
    _stop_on_drop: Arc<tokio_util::sync::DropGuard>,
}

impl fmt::Debug for UpstreamManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamManager")
            .field("servers", &self.servers())
            .finish()
    }
}

/// Capacity of the event channel; a receiver that lags re-reads `tools()` and `states()`.
const EVENT_CAPACITY: usize = 1024;

impl UpstreamManager {
    /// Starts supervising every active server of `config` (enabled, and selected by
    /// `toolSearch.selectedServers`). Must be called inside a Tokio runtime. Returns at once; use
    /// [`wait_for_state`](Self::wait_for_state) or [`subscribe`](Self::subscribe) to follow start-up.
    pub fn start(config: &GatewayConfig, sign_ins: SignIns) -> Self {
        let servers: Vec<(String, ServerConfig)> = config
            .active_servers()
            .map(|(name, server)| (name.to_string(), server.clone()))
            .collect();
        Self::start_signed(
            servers,
            config.catalog_policy(),
            SupervisorOptions::from_config(&config.supervisor, config.tool_search.call_timeout()),
            sign_ins,
        )
    }

    /// Like [`start`](Self::start), with the servers and timings given directly, and the
    /// user's own sign-ins.
    pub fn start_with(
        servers: Vec<(String, ServerConfig)>,
        policy: CatalogPolicy,
        options: SupervisorOptions,
    ) -> Self {
        Self::start_signed(servers, policy, options, SignIns::for_user())
    }

    fn start_signed(
        servers: Vec<(String, ServerConfig)>,
        policy: CatalogPolicy,
        options: SupervisorOptions,
        sign_ins: SignIns,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let mut slots = Vec::new();
        let mut receivers = Vec::new();
        for (name, server) in servers {
            let (tx, rx) = mpsc::unbounded_channel();
            let (state, _) = watch::channel(ServerState::Starting {
                attempt: 1,
                last_error: None,
            });
            let transport = server.transport();
            slots.push(Arc::new(Slot {
                name,
                state,
                live: RwLock::new(None),
                raw_tools: RwLock::new(Vec::new()),
                tools: RwLock::new(Vec::new()),
                signals: tx,
                stderr: StderrTail::default(),
            }));
            receivers.push((rx, transport));
        }
        let inner = Arc::new(Inner {
            slots,
            events,
            policy,
            options,
            shutdown: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
            relay: Arc::new(Relay::default()),
            sign_ins,
        });
        let mut tasks = Vec::new();
        for (slot, (rx, transport)) in inner.slots.iter().zip(receivers) {
            let inner2 = inner.clone();
            let slot = slot.clone();
            tasks.push(tokio::spawn(async move {
                match transport {
                    Ok(transport) => {
                        upstream::check_paths(&slot.name, &transport);
                        supervise(inner2, slot, transport, rx).await
                    }
                    Err(why) => {
                        let last_error = format!("server `{}` {why}", slot.name);
                        inner2.set_state(
                            &slot,
                            ServerState::Failed {
                                attempts: 0,
                                last_error,
                            },
                        );
                    }
                }
            }));
        }
        match inner.tasks.lock() {
            Ok(mut t) => t.extend(tasks),
            Err(poisoned) => poisoned.into_inner().extend(tasks),
        }
        let guard = inner.shutdown.clone().drop_guard();
        Self {
            inner,
            _stop_on_drop: Arc::new(guard),
        }
    }

    /// Names of the supervised servers, in config order.
    pub fn servers(&self) -> Vec<String> {
        self.inner.slots.iter().map(|s| s.name.clone()).collect()
    }

    fn slot(&self, server: &str) -> Result<&Arc<Slot>> {
        self.inner
            .slots
            .iter()
            .find(|s| s.name == server)
            .ok_or_else(|| GatewayError::UnknownServer {
                server: server.to_string(),
                known: if self.inner.slots.is_empty() {
                    "none (add servers under mcpServers)".into()
                } else {
                    self.servers().join(", ")
                },
            })
    }

    /// A server's current state; `None` for a server that is not supervised.
    pub fn state(&self, server: &str) -> Option<ServerState> {
        self.slot(server).ok().map(|s| s.state.borrow().clone())
    }

    /// Every server's state, in config order.
    pub fn states(&self) -> Vec<(String, ServerState)> {
        self.inner
            .slots
            .iter()
            .map(|s| (s.name.clone(), s.state.borrow().clone()))
            .collect()
    }

    /// A receiver that sees each state change of one server.
    pub fn watch_state(&self, server: &str) -> Result<watch::Receiver<ServerState>> {
        Ok(self.slot(server)?.state.subscribe())
    }

    /// Waits until a server's state satisfies `pred` (checked against the current state first) and
    /// returns that state. Fails only for an unknown server.
    pub async fn wait_for_state(
        &self,
        server: &str,
        pred: impl FnMut(&ServerState) -> bool,
    ) -> Result<ServerState> {
        let mut rx = self.watch_state(server)?;
        let state = rx
            .wait_for(pred)
            .await
            .map(|s| s.clone())
            // The sender lives in the slot, which outlives every receiver made from this handle.
            .unwrap_or(ServerState::Stopped);
        Ok(state)
    }

    /// Events for tool-list and state changes of all servers.
    pub fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.inner.events.subscribe()
    }

    /// All known tools of all servers, in config order, filtered and decorated. A server that is
    /// down keeps its last known tools; check [`state`](Self::state) to tell whether they are callable.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner
            .slots
            .iter()
            .flat_map(|s| read(&s.tools).clone())
            .collect()
    }

    /// One server's known tools.
    pub fn server_tools(&self, server: &str) -> Result<Vec<Tool>> {
        Ok(read(&self.slot(server)?.tools).clone())
    }

    /// How many tools a server has, as [`server_tools`](Self::server_tools) would list them.
    pub fn tool_count(&self, server: &str) -> usize {
        self.slot(server).map_or(0, |slot| read(&slot.tools).len())
    }

    /// One server's tools exactly as it listed them (with title, outputSchema, icons, _meta),
    /// before filtering.
    pub fn raw_tools(&self, server: &str) -> Result<Vec<rmcp::model::Tool>> {
        Ok(read(&self.slot(server)?.raw_tools).clone())
    }

    /// The last lines a stdio server wrote to stderr (at most 20, across restarts), oldest first.
    pub fn stderr_tail(&self, server: &str) -> Vec<String> {
        self.slot(server)
            .map(|slot| slot.stderr.lines())
            .unwrap_or_default()
    }

    /// Process id of a running stdio server.
    pub fn pid(&self, server: &str) -> Option<u32> {
        let slot = self.slot(server).ok()?;
        let live = read(&slot.live);
        live.as_ref().and_then(|l| l.pid)
    }

    /// Restarts a server now: ends its backoff wait or its `Failed` state, or, when it is running,
    /// closes the session and starts it again.
    pub fn restart_now(&self, server: &str) -> Result<()> {
        let _ = self.slot(server)?.signals.send(Signal::RestartNow);
        Ok(())
    }

    /// The connection to `server` while it is ready, for requests other than `tools/call`.
    pub fn ready_peer(&self, server: &str) -> Result<Peer<RoleClient>> {
        Self::slot_peer(self.slot(server)?)
    }

    fn slot_peer(slot: &Slot) -> Result<Peer<RoleClient>> {
        Self::slot_live(slot).map(|(peer, _)| peer)
    }

    /// The live session's peer, and its direct calls for a Streamable HTTP server.
    fn slot_live(slot: &Slot) -> Result<(Peer<RoleClient>, Option<Arc<HttpCalls>>)> {
        let state = slot.state.borrow().clone();
        let live = read(&slot.live);
        match (&state, live.as_ref()) {
            (ServerState::Ready, Some(live)) => Ok((live.peer.clone(), live.http_calls.clone())),
            _ => Err(GatewayError::ServerUnavailable {
                server: slot.name.clone(),
                state: state.to_string(),
            }),
        }
    }

    /// Where upstream requests to clients, progress, logs and resource updates are routed.
    /// Ends the gateway's subscription to a resource on `server` that no session follows any
    /// more; a server that is down or does not answer keeps it (logged).
    #[allow(deprecated)] // resources/unsubscribe: still what 2025-11-25 servers speak
    pub async fn unsubscribe(&self, server: &str, uri: &str) {
        let Ok(peer) = self.ready_peer(server) else {
            return;
        };
        let done = peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri));
        match tokio::time::timeout(self.call_timeout(), done).await {
            Ok(Ok(())) => tracing::debug!(server, uri, "upstream subscription ended"),
            _ => tracing::debug!(server, uri, "cannot end an upstream subscription"),
        }
    }

    pub fn relay(&self) -> &Arc<Relay> {
        &self.inner.relay
    }

    /// Where the sign-ins to OAuth servers are kept.
    pub fn sign_ins(&self) -> &SignIns {
        &self.inner.sign_ins
    }

    /// How long a call may take (`callTimeoutSecs`).
    pub fn call_timeout(&self) -> Duration {
        self.inner.options.call_timeout
    }

    /// Forwards `tools/call` to `server` with the configured timeout and returns its result
    /// unchanged (content, structuredContent, isError). Cancelling `cancel`, or dropping the
    /// returned future, sends `notifications/cancelled` upstream.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        cancel: CancellationToken,
    ) -> Result<CallToolResult> {
        self.call_with_timeout(
            server,
            tool,
            arguments,
            cancel,
            self.inner.options.call_timeout,
            None,
        )
        .await
    }

    /// [`call`](Self::call) with an explicit timeout, on behalf of a downstream session
    /// (`origin`): while it runs, the upstream's requests to the client go to that session, and
    /// its progress reaches that session's client under the token the client sent.
    pub async fn call_with_timeout(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        cancel: CancellationToken,
        timeout: Duration,
        origin: Option<&CallOrigin>,
    ) -> Result<CallToolResult> {
        let slot = self.slot(server)?;
        if !self.inner.policy.tool_selected(&ToolId::new(server, tool)) {
            return Err(GatewayError::ToolNotSelected {
                server: server.to_string(),
                tool: tool.to_string(),
            });
        }
        let (peer, http_calls) = Self::slot_live(slot)?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        tracing::debug!(target: "upstream", server, tool, "tools/call");
        let in_flight = origin.map(|origin| self.inner.relay.begin_call(server, origin));
        let waits_for_progress = origin.is_some_and(|o| o.progress_token.is_some());
        let call = send_call(
            &peer,
            http_calls.as_deref(),
            params,
            in_flight.as_ref(),
            waits_for_progress,
        );
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(GatewayError::CallCancelled {
                server: server.to_string(),
                tool: tool.to_string(),
            }),
            outcome = tokio::time::timeout(timeout, call) => outcome,
        };
        // Answered (a result or an MCP error): nothing more of this call can reach a client.
        if let (Some(in_flight), Ok(Ok(_) | Err(ServiceError::McpError(_)))) =
            (&in_flight, &outcome)
        {
            in_flight.answered();
        }
        let Ok(answer) = outcome else {
            return Err(GatewayError::CallTimeout {
                server: server.to_string(),
                tool: tool.to_string(),
                timeout,
            });
        };
        let posted_by_gateway = http_calls.is_some();
        call_answer(slot, &peer, posted_by_gateway, server, tool, answer)
    }

    /// Stops every upstream (stdio servers are shut down) and waits for the supervisors to end.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let tasks: Vec<JoinHandle<()>> = match self.inner.tasks.lock() {
            Ok(mut t) => t.drain(..).collect(),
            Err(poisoned) => poisoned.into_inner().drain(..).collect(),
        };
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// A failed call's cause in words: a failed send says what failed, without the name of the
/// transport's Rust type that rmcp writes in front of it.
pub(crate) fn service_error_text(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportSend(failed) => format!("sending it failed: {}", failed.error),
        other => other.to_string(),
    }
}

/// Sends one `tools/call` and waits for its answer. An HTTP server's call is posted by the
/// gateway itself (see `upstream/http.rs`), unless its session says it is rmcp's to send; any
/// other goes through rmcp's request handle. Either way a call dropped before its answer
/// (timeout, cancellation) is cancelled upstream, and the upstream's progress token is given to
/// the relay.
async fn send_call(
    peer: &Peer<RoleClient>,
    http_calls: Option<&HttpCalls>,
    params: CallToolRequestParams,
    in_flight: Option<&InFlightGuard>,
    waits_for_progress: bool,
) -> std::result::Result<ServerResult, ServiceError> {
    if let Some((calls, prepared)) = http_calls.and_then(|calls| Some((calls, calls.prepare()?))) {
        if let Some(in_flight) = in_flight {
            in_flight.set_upstream_token(prepared.progress_token());
        }
        let mut abandon = CancelOnDrop {
            peer: peer.clone(),
            id: Some(prepared.request_id()),
        };
        let posted = calls.call(prepared, params.clone()).await;
        abandon.id = None;
        match posted {
            Some(answer) => return answer,
            None => {
                tracing::debug!(target: "upstream", tool = %params.name, "tools/call left to rmcp")
            }
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    if let Some(in_flight) = in_flight {
        in_flight.set_upstream_token(handle.progress_token.clone());
    }
    let mut abandon = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    abandon.id = None;
    if waits_for_progress {
        // rmcp hands each notification to a task of its own and the answer straight to this
        // one, which tends to run first: let the progress read before the answer reach the
        // client before it. On the single-threaded runtime one yield is enough (this task
        // resumes once every task that is ready has run, and passing a notification on never
        // waits for I/O); each more costs a poll of the driver.
        let yields = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => 1,
            _ => 4,
        };
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
    }
    answer
}

/// What a `tools/call` answer means for the caller: its result, or the error that says why
/// there is none. A connection that is gone (not one failed post of an HTTP server the gateway
/// posts to itself, whose session ends only when rmcp's transport closes) restarts the server.
fn call_answer(
    slot: &Slot,
    peer: &Peer<RoleClient>,
    posted_by_gateway: bool,
    server: &str,
    tool: &str,
    answer: std::result::Result<ServerResult, ServiceError>,
) -> Result<CallToolResult> {
    let (server, tool) = (server.to_string(), tool.to_string());
    match answer {
        Ok(ServerResult::CallToolResult(result)) => Ok(result),
        Ok(_) => Err(GatewayError::CallFailed {
            server,
            tool,
            message: "the server answered tools/call with another kind of result (an input_required or task result needs protocol 2026-07-28, which the gateway does not speak upstream)".into(),
        }),
        Err(ServiceError::McpError(error)) if crate::upstream::wire::is_refused_answer(&error) => {
            Err(GatewayError::AnswerRefused {
                server,
                tool,
                message: error.message.to_string(),
            })
        }
        Err(ServiceError::McpError(error)) => Err(GatewayError::UpstreamRejected {
            server,
            tool,
            error: Box::new(error),
        }),
        Err(e) => {
            let message = service_error_text(&e);
            let gone = match e {
                ServiceError::TransportClosed => true,
                ServiceError::TransportSend(ref failed) => {
                    !posted_by_gateway
                        || peer.is_transport_closed()
                        || crate::upstream::http::send_found_server_gone(failed)
                }
                _ => false,
            };
            if !gone {
                return Err(GatewayError::CallFailed {
                    server,
                    tool,
                    message,
                });
            }
            let _ = slot.signals.send(Signal::ConnectionLost(format!(
                "the connection failed during a call: {message}"
            )));
            Err(GatewayError::ConnectionLost {
                server,
                tool,
                message,
            })
        }
    }
}

/// Tells the upstream to stop a request whose answer nobody will read (its future was dropped on
/// timeout or cancellation), unless cleared first.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        // Drop cannot wait; the runtime is there (calls run on it).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("request abandoned by the caller".into()),
                    ))
                    .await;
            });
        }
    }
}

/// How a connected session ended.
enum Ended {
    Shutdown,
    Lost(String),
    /// The sign-in's access token is about to expire: connect again with a renewed one.
    Renew,
}

async fn supervise(
    inner: Arc<Inner>,
    slot: Arc<Slot>,
    transport: Transport,
    mut signals: mpsc::UnboundedReceiver<Signal>,
) {
    let opts = inner.options.clone();
    let shutdown = inner.shutdown.clone();
    let mut failures: u32 = 0;
    // Kept while it restarts, so that a state read mid-attempt still says why it is down.
    let mut previous_error: Option<String> = None;
    loop {
        // Signals from a previous session no longer apply.
        while signals.try_recv().is_ok() {}
        inner.set_state(
            &slot,
            ServerState::Starting {
                attempt: failures + 1,
                last_error: previous_error.clone(),
            },
        );
        let started = tokio::select! {
            _ = shutdown.cancelled() => break,
            started = start(&slot, &transport, opts.startup_timeout, inner.relay.clone(), &inner.sign_ins) => started,
        };
        let last_error = match started {
            Ok((connection, raw)) => {
                let up_since = Instant::now();
                match serve_connected(&inner, &slot, connection, raw, &mut signals).await {
                    Ended::Shutdown => break,
                    Ended::Renew => continue,
                    Ended::Lost(why) => {
                        // A server that stayed up longer than the longest delay starts afresh.
                        if up_since.elapsed() >= opts.max_backoff {
                            failures = 0;
                        }
                        why
                    }
                }
            }
            Err(error) if error.needs_authorization() => {
                // Trying again at once would only be refused again: the user must set the
                // credentials. Now and then, in case they were fixed on the server's side.
                let reason = error.to_string();
                previous_error = Some(reason.clone());
                inner.set_state(&slot, ServerState::NeedsAuthorization { reason });
                // A sign-in (`toolsearch auth login`) writes the server's token file: try again
                // as soon as it does.
                tokio::select! {
                    () = wait_for_restart(&shutdown, &mut signals, Some(opts.max_backoff)) => {}
                    () = inner.sign_ins.changed(&slot.name) => {}
                }
                if shutdown.is_cancelled() {
                    break;
                }
                continue;
            }
            Err(error) => error.to_string(),
        };
        previous_error = Some(last_error.clone());
        failures = failures.saturating_add(1);
        let gave_up = opts.max_restarts.is_some_and(|max| failures > max);
        wait_after_failure(&inner, &slot, failures, last_error, gave_up, &mut signals).await;
        if shutdown.is_cancelled() {
            break;
        }
        if gave_up {
            failures = 0;
        }
    }
    inner.set_state(&slot, ServerState::Stopped);
}

/// After failed start number `failures`: `Failed` until asked to restart when the supervisor
/// `gave_up`, else `Restarting` for the backoff's delay (or until asked, or shut down).
async fn wait_after_failure(
    inner: &Inner,
    slot: &Slot,
    failures: u32,
    last_error: String,
    gave_up: bool,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
) {
    let (state, delay) = if gave_up {
        let state = ServerState::Failed {
            attempts: failures,
            last_error,
        };
        (state, None)
    } else {
        let retry_in = inner.options.backoff(failures);
        let state = ServerState::Restarting {
            attempt: failures,
            last_error,
            retry_in,
        };
        (state, Some(retry_in))
    };
    inner.set_state(slot, state);
    wait_for_restart(&inner.shutdown, signals, delay).await;
}

/// A started server, ready: its tools published and its connection live until it is lost or
/// the gateway shuts down.
async fn serve_connected(
    inner: &Arc<Inner>,
    slot: &Arc<Slot>,
    connection: Connection,
    raw: Vec<rmcp::model::Tool>,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
) -> Ended {
    inner.publish_tools(slot, raw);
    *write(&slot.live) = Some(Live {
        peer: connection.service.peer().clone(),
        pid: connection.pid,
        http_calls: connection.http_calls.clone(),
    });
    inner.set_state(slot, ServerState::Ready);
    let ended = run_connected(inner, slot, connection, signals).await;
    *write(&slot.live) = None;
    ended
}

/// Waits until the next start is due: `delay` has passed (when there is one), a restart was
/// asked for, or the gateway shuts down.
async fn wait_for_restart(
    shutdown: &CancellationToken,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
    delay: Option<Duration>,
) {
    let sleep = async {
        match delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = &mut sleep => break,
            signal = signals.recv() => match signal {
                Some(Signal::RestartNow) | None => break,
                Some(_) => continue,
            },
        }
    }
}

/// Connects and fetches the first tool list, within `timeout`.
async fn start(
    slot: &Slot,
    transport: &Transport,
    timeout: Duration,
    relay: Arc<Relay>,
    sign_ins: &SignIns,
) -> std::result::Result<(Connection, Vec<rmcp::model::Tool>), UpstreamError> {
    let attempt = async {
        let connection = upstream::connect(
            &slot.name,
            transport,
            slot.signals.clone(),
            relay,
            slot.stderr.clone(),
            sign_ins,
        )
        .await?;
        let tools = upstream::list_tools(connection.service.peer(), timeout)
            .await
            .map_err(|e| e.with_stderr(&connection.stderr))?;
        Ok((connection, tools))
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(UpstreamError::StartTimeout(timeout)),
    }
}

async fn run_connected(
    inner: &Inner,
    slot: &Slot,
    connection: Connection,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
) -> Ended {
    let Connection {
        service,
        pid: _,
        stderr,
        http_calls: _,
        renew_at,
    } = connection;
    let renew = async {
        match renew_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(renew);
    let peer = service.peer().clone();
    let cancel_service = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let shutdown = inner.shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                cancel_service.cancel();
                // Closing a stdio server waits for it to exit, then signals and kills it.
                let _ = tokio::time::timeout(Duration::from_secs(10), &mut waiting).await;
                return Ended::Shutdown;
            }
            () = &mut renew => {
                tracing::info!(target: "upstream", server = %slot.name, "renewing the sign-in's access token");
                cancel_service.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(10), &mut waiting).await;
                return Ended::Renew;
            }
            quit = &mut waiting => {
                let why = match quit {
                    Ok(reason) => format!("the connection closed ({reason:?})"),
                    Err(e) => format!("the connection task failed: {e}"),
                };
                return Ended::Lost(upstream::with_stderr(why, &stderr));
            }
            signal = signals.recv() => match signal {
                Some(Signal::ToolListChanged) => {
                    match upstream::list_tools(&peer, inner.options.startup_timeout).await {
                        Ok(raw) => inner.publish_tools(slot, raw),
                        Err(e) => {
                            tracing::warn!(target: "upstream", server = %slot.name, "re-fetching tools after list_changed failed: {e}");
                            if peer.is_transport_closed() {
                                cancel_service.cancel();
                                let _ = (&mut waiting).await;
                                return Ended::Lost(e.with_stderr(&stderr).to_string());
                            }
                        }
                    }
                }
                Some(Signal::PromptListChanged) => {
                    inner.emit(UpstreamEvent::PromptsChanged { server: slot.name.clone() });
                }
                Some(Signal::ResourceListChanged) => {
                    inner.emit(UpstreamEvent::ResourcesChanged { server: slot.name.clone() });
                }
                Some(Signal::ConnectionLost(why)) => {
                    cancel_service.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(10), &mut waiting).await;
                    return Ended::Lost(upstream::with_stderr(why, &stderr));
                }
                Some(Signal::RestartNow) => {
                    tracing::info!(target: "upstream", server = %slot.name, "restart requested");
                    cancel_service.cancel();
                    let _ = tokio::time::timeout(Duration::from_secs(10), &mut waiting).await;
                    return Ended::Lost("restart requested".into());
                }
                None => {
                    cancel_service.cancel();
                    return Ended::Shutdown;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let opts = SupervisorOptions {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            ..SupervisorOptions::default()
        };
        let delays: Vec<u64> = (1..=9)
            .map(|n| opts.backoff(n).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(opts.backoff(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn state_messages_name_the_problem() {
        let s = ServerState::Restarting {
            attempt: 2,
            last_error: "cannot start `x`".into(),
            retry_in: Duration::from_secs(1),
        };
        let text = s.to_string();
        assert!(
            text.contains("attempt") || text.contains("failure 2"),
            "{text}"
        );
        assert!(text.contains("cannot start `x`"), "{text}");
    }
}
