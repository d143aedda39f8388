//! What passes between the downstream sessions and the upstreams besides requests and their
//! answers: an upstream's requests to the client (sampling, elicitation, roots), its progress,
//! log messages and resource updates, each routed to the session it belongs to.
//!
//! Every upstream connection is shared by all sessions, so the relay keeps the calls in flight on
//! each upstream and the session each came from, and the resource subscriptions; an upstream asks
//! on behalf of the call it is running. The sessions themselves (how to reach each, which
//! upstreams its scope reaches, the log level it asked for) are the [`Downstream`]'s, which the
//! relay asks when it has something to send. Nothing from an upstream reaches a session whose
//! scope does not reach that upstream.
//!
//! MCP does not say which call a request to the client serves, so `sampling/createMessage` and
//! `elicitation/create`, which show a person what one session's work is about, go only to the one
//! session with calls in flight on that upstream, and are refused when the request may belong to
//! another call: when several sessions have calls in flight there, or when a call of another
//! session ended without its answer (timed out, cancelled, its session gone) less than
//! [`ENDED_CALL_GRACE`] ago, since the upstream may still be working on it. `roots/list` goes to
//! the session of the most recent call in flight, or with none, to the most recent session whose
//! client offers roots (an empty list before any has connected). Log messages go, while calls are
//! in flight on the upstream, only to the calling sessions; otherwise to every session that set a
//! level. Progress is matched exactly, by the token the gateway gave the upstream.
// Sampling, roots and logging are deprecated in rmcp for the 2026 protocol, but every client that
// speaks 2025-11-25 (all of today's) still uses them.
#![allow(deprecated)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CancelledNotificationParam, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, CustomNotification, ElicitRequest, ElicitRequestParams, ElicitResult,
    ErrorCode, ListRootsRequest, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, ServerNotification, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleClient};
use rmcp::{ErrorData, Peer, RoleServer};
use toolsearch_core::{NamePattern, Scope, SearchEngine};

use crate::resources;

/// Where a call to an upstream comes from: the downstream session, and the progress token its
/// client sent with the request, if any.
#[derive(Debug, Clone, Default)]
pub struct CallOrigin {
    pub session: String,
    pub progress_token: Option<ProgressToken>,
}

impl CallOrigin {
    pub fn new(session: impl Into<String>, progress_token: Option<ProgressToken>) -> Self {
        Self {
            session: session.into(),
            progress_token,
        }
    }
}

struct InFlight {
    id: u64,
    server: String,
    session: String,
    /// The client's token, to which the upstream's progress is re-addressed.
    client_token: Option<ProgressToken>,
    /// The token rmcp put on the request to the upstream.
    upstream_token: Option<ProgressToken>,
    /// The upstream answered it: once it ends, nothing more of it can arrive.
    answered: bool,
}

/// How long a call that ended without its answer still counts as one the upstream may be working
/// on: a server is told to stop, but nothing says when it has.
pub const ENDED_CALL_GRACE: Duration = Duration::from_secs(60);

/// Ended calls remembered at most (the oldest are forgotten first).
const MAX_ENDED_CALLS: usize = 4096;

/// A call that ended without the upstream's answer.
struct EndedCall {
    server: String,
    session: String,
    until: Instant,
}

/// Whether a session's scope reaches an upstream (by server name): what the upstream logs or
/// asks goes to a session only when it does.
pub type Reach = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A downstream session the relay may send something to: attached (its first request after
/// `initialize`), so its peer and reach are known.
#[derive(Clone)]
pub struct Link {
    pub session: String,
    pub peer: Peer<RoleServer>,
    pub reach: Reach,
    /// The level the client asked for with `logging/setLevel`; no log messages until it does.
    pub log_level: Option<LoggingLevel>,
    /// Attachment order: a larger number attached later.
    pub attached: u64,
}

impl Link {
    fn reaches(&self, server: &str) -> bool {
        (self.reach)(server)
    }
}

/// The downstream sessions as the relay needs them; they keep their peers, reach and log levels
/// themselves (`Sessions`), the relay only routes.
pub trait Downstream: Send + Sync {
    /// The session, once it is attached.
    fn link(&self, session: &str) -> Option<Link>;
    /// Every attached session.
    fn links(&self) -> Vec<Link>;
    /// The attached sessions that asked for log messages of `level` (that level or a more
    /// verbose one), without copying the others.
    fn logging(&self, level: LoggingLevel) -> Vec<Link>;
}

#[derive(Default)]
struct RelayState {
    calls: Vec<InFlight>,
    ended: Vec<EndedCall>,
    /// (server, the upstream's URI) → the sessions subscribed to it.
    subscriptions: BTreeMap<(String, String), BTreeSet<String>>,
}

/// Told of each `resources/updated` sent to a session (its gateway URI), so that replicas sharing
/// sessions pass it to the one holding the session's stream.
pub type UpdateForward = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// The routing tables; one per gateway, shared by every upstream connection.
#[derive(Default)]
pub struct Relay {
    state: Mutex<RelayState>,
    next: AtomicU64,
    forward: Mutex<Option<UpdateForward>>,
    /// The sessions, given once the gateway has them; before that there is nobody to send to.
    downstream: OnceLock<Arc<dyn Downstream>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Relay")
            .field("calls", &state.calls.len())
            .field("ended_calls", &state.ended.len())
            .field("subscriptions", &state.subscriptions.len())
            .finish()
    }
}

/// A call registered as in flight until this is dropped. Dropped before
/// [`answered`](Self::answered), it counts as a call the upstream may still be working on for
/// [`ENDED_CALL_GRACE`].
pub struct InFlightGuard {
    relay: Arc<Relay>,
    id: u64,
}

impl InFlightGuard {
    /// Records the progress token rmcp gave the request to the upstream.
    pub fn set_upstream_token(&self, token: ProgressToken) {
        let mut state = self.relay.lock();
        if let Some(call) = state.calls.iter_mut().find(|c| c.id == self.id) {
            call.upstream_token = Some(token);
        }
    }

    /// The upstream answered the call (a result or an error): nothing more of it will come.
    pub fn answered(&self) {
        let mut state = self.relay.lock();
        if let Some(call) = state.calls.iter_mut().find(|c| c.id == self.id) {
            call.answered = true;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut state = self.relay.lock();
        let Some(at) = state.calls.iter().position(|c| c.id == self.id) else {
            return;
        };
        let call = state.calls.remove(at);
        if !call.answered {
            let now = Instant::now();
            state.ended.retain(|e| e.until > now);
            if state.ended.len() >= MAX_ENDED_CALLS {
                state.ended.remove(0);
            }
            state.ended.push(EndedCall {
                server: call.server,
                session: call.session,
                until: now + ENDED_CALL_GRACE,
            });
        }
    }
}

/// Rank of a log level, least severe first.
pub(crate) fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Relay {
    /// Calls `forward` for every `resources/updated` sent to a session from now on.
    pub fn forward_updates(&self, forward: UpdateForward) {
        *self.forward.lock().unwrap_or_else(|e| e.into_inner()) = Some(forward);
    }

    fn lock(&self) -> MutexGuard<'_, RelayState> {
        // Every update is one insert, retain or field write.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sessions the relay sends to (the gateway's, once it has them).
    pub fn reach_sessions(&self, downstream: Arc<dyn Downstream>) {
        if self.downstream.set(downstream).is_err() {
            tracing::debug!("the relay already reaches the sessions");
        }
    }

    fn link(&self, session: &str) -> Option<Link> {
        self.downstream.get()?.link(session)
    }

    fn links(&self) -> Vec<Link> {
        self.downstream.get().map_or_else(Vec::new, |d| d.links())
    }

    /// Whether the session holds nothing here that must stay with its connection: no resource
    /// subscription, no call in flight.
    pub fn holds_nothing(&self, session: &str) -> bool {
        let state = self.lock();
        !state.subscriptions.values().any(|s| s.contains(session))
            && !state.calls.iter().any(|call| call.session == session)
    }

    /// Forgets a session's subscriptions; returns the upstream subscriptions nobody holds any
    /// more, for the caller to end upstream.
    pub fn end_session(&self, session: &str) -> Vec<(String, String)> {
        let mut state = self.lock();
        let mut orphaned = Vec::new();
        state.subscriptions.retain(|key, sessions| {
            sessions.remove(session);
            if sessions.is_empty() {
                orphaned.push(key.clone());
                false
            } else {
                true
            }
        });
        orphaned
    }

    /// Registers a call to `server` on behalf of `origin` until the guard is dropped.
    pub fn begin_call(self: &Arc<Self>, server: &str, origin: &CallOrigin) -> InFlightGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().calls.push(InFlight {
            id,
            server: server.to_string(),
            session: origin.session.clone(),
            client_token: origin.progress_token.clone(),
            upstream_token: None,
            answered: false,
        });
        InFlightGuard {
            relay: self.clone(),
            id,
        }
    }

    /// The one session an upstream's request to the client can go to, or why none can: the
    /// request may belong to any call in flight on `server`, or to one that ended without its
    /// answer not long ago, so it goes to a session only when every such call is that session's,
    /// one of them is still in flight, and its scope reaches the server.
    fn asked_session(&self, server: &str, method: &str) -> Result<Link, ErrorData> {
        let (live, ended, only) = {
            let mut state = self.lock();
            let now = Instant::now();
            state.ended.retain(|e| e.until > now);
            let live: BTreeSet<&str> = state
                .calls
                .iter()
                .filter(|c| c.server == server)
                .map(|c| c.session.as_str())
                .collect();
            let ended: BTreeSet<&str> = state
                .ended
                .iter()
                .filter(|e| e.server == server && !live.contains(e.session.as_str()))
                .map(|e| e.session.as_str())
                .collect();
            let only = match (live.len(), ended.len()) {
                (1, 0) => live.first().map(|session| session.to_string()),
                _ => None,
            };
            (live.len(), ended.len(), only)
        };
        match (live, ended) {
            (0, 0) => return Err(no_caller(server, method)),
            (0, _) => {
                tracing::warn!(server, method, "refused: the call it may serve has ended");
                return Err(ErrorData::new(
                    ErrorCode::INVALID_REQUEST,
                    format!("{method}: the client call this request may serve has already ended (timed out, cancelled, or its session closed), so no client is asked; answer within the call's time"),
                    None,
                ));
            }
            (1, 0) => {}
            (sessions, 0) => {
                tracing::warn!(server, method, sessions, "refused: several sessions have calls in flight on this server, and MCP does not say which one the request is for");
                return Err(ErrorData::internal_error(
                    format!("{method}: {sessions} client sessions have calls in flight on this server through the gateway, and the request does not say which call it serves; it was not shown to any of them. Retry when the other calls have finished"),
                    None,
                ));
            }
            (_, ended) => {
                tracing::warn!(server, method, ended, "refused: a call of another session ended without its answer, and the request may be that call's");
                return Err(ErrorData::internal_error(
                    format!("{method}: a call of another client session on this server ended without its answer (timed out, cancelled, or its session closed) less than {} s ago, and the request does not say which call it serves, so it may be that one's; it was not shown to any client. Retry once the server has stopped the ended call's work", ENDED_CALL_GRACE.as_secs()),
                    None,
                ));
            }
        }
        match only.and_then(|session| self.link(&session)) {
            Some(link) if link.reaches(server) => Ok(link),
            // The session closed, or its scope does not reach this server.
            _ => Err(no_caller(server, method)),
        }
    }

    /// The session to ask for roots: the one of the most recent call in flight on `server` whose
    /// scope reaches it, else the most recent session offering roots whose scope does.
    fn roots_holder(&self, server: &str) -> Option<Link> {
        let callers: Vec<String> = self
            .lock()
            .calls
            .iter()
            .rev()
            .filter(|c| c.server == server)
            .map(|c| c.session.clone())
            .collect();
        let mut offering: Vec<Link> = self
            .links()
            .into_iter()
            .filter(|link| {
                link.peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.roots.is_some())
            })
            .collect();
        offering.sort_by_key(|link| std::cmp::Reverse(link.attached));
        callers
            .iter()
            .filter_map(|session| self.link(session))
            .chain(offering)
            .find(|link| link.reaches(server))
    }

    /// Sends an upstream's progress to the client whose call it is about, under the client's
    /// token; progress for a call whose client sent no token is dropped.
    pub async fn progress(&self, server: &str, mut params: ProgressNotificationParam) {
        let target = {
            let state = self.lock();
            state
                .calls
                .iter()
                .find(|c| {
                    c.server == server && c.upstream_token.as_ref() == Some(&params.progress_token)
                })
                .and_then(|c| Some((c.session.clone(), c.client_token.clone()?)))
        };
        let Some((session, token, peer)) = target
            .and_then(|(session, token)| Some((session.clone(), token, self.link(&session)?.peer)))
        else {
            tracing::trace!(server, "progress for no call that asked for it; dropped");
            return;
        };
        params.progress_token = token;
        if let Err(e) = peer.notify_progress(params).await {
            tracing::debug!(session, error = %e, "cannot send progress");
        }
    }

    /// An upstream's log message, to the sessions that asked for its level or a more verbose one
    /// and whose scope reaches the upstream: while calls are in flight on it, only the sessions
    /// of those calls (the message is about their work), otherwise every such session. The
    /// logger is named by the server (`server` or `server/logger`).
    pub async fn log(&self, server: &str, mut params: LoggingMessageNotificationParam) {
        params.logger = Some(match params.logger.take() {
            Some(logger) => format!("{server}/{logger}"),
            None => server.to_string(),
        });
        let callers: BTreeSet<String> = self
            .lock()
            .calls
            .iter()
            .filter(|c| c.server == server)
            .map(|c| c.session.clone())
            .collect();
        let logging = self
            .downstream
            .get()
            .map_or_else(Vec::new, |d| d.logging(params.level));
        for link in logging {
            if !(callers.is_empty() || callers.contains(&link.session)) || !link.reaches(server) {
                continue;
            }
            if let Err(e) = link.peer.notify_logging_message(params.clone()).await {
                tracing::debug!(session = link.session, error = %e, "cannot send a log message");
            }
        }
    }

    /// Adds a session's subscription to an upstream resource; true when it is the first, so the
    /// caller subscribes upstream.
    pub fn subscribe(&self, session: &str, server: &str, uri: &str) -> bool {
        let mut state = self.lock();
        let sessions = state
            .subscriptions
            .entry((server.to_string(), uri.to_string()))
            .or_default();
        let first = sessions.is_empty();
        sessions.insert(session.to_string());
        first
    }

    /// Removes a session's subscription; true when it was the last, so the caller unsubscribes
    /// upstream.
    pub fn unsubscribe(&self, session: &str, server: &str, uri: &str) -> bool {
        let mut state = self.lock();
        let key = (server.to_string(), uri.to_string());
        let Some(sessions) = state.subscriptions.get_mut(&key) else {
            return false;
        };
        let removed = sessions.remove(session);
        if sessions.is_empty() {
            state.subscriptions.remove(&key);
            return removed;
        }
        false
    }

    /// The upstream URIs of `server` somebody is subscribed to (re-subscribed after a restart).
    pub fn subscribed(&self, server: &str) -> Vec<String> {
        self.lock()
            .subscriptions
            .keys()
            .filter(|(s, _)| s == server)
            .map(|(_, uri)| uri.clone())
            .collect()
    }

    /// `notifications/resources/updated` from an upstream, to the sessions subscribed to that
    /// resource, under its gateway URI.
    pub async fn resource_updated(&self, server: &str, uri: &str) {
        let subscribed: Vec<String> = {
            let state = self.lock();
            let key = (server.to_string(), uri.to_string());
            state
                .subscriptions
                .get(&key)
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        };
        let peers: Vec<(String, Peer<RoleServer>)> = subscribed
            .into_iter()
            .filter_map(|session| Some((session.clone(), self.link(&session)?.peer)))
            .collect();
        let public = resources::public_uri(server, uri);
        let forward = self
            .forward
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (session, peer) in peers {
            if let Err(e) = peer
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(
                    public.clone(),
                ))
                .await
            {
                tracing::debug!(session, error = %e, "cannot send resources/updated");
            }
            if let Some(forward) = &forward {
                forward(&session, &public);
            }
        }
    }

    /// A notification rmcp has no type for (such as `notifications/elicitation/complete` of a URL
    /// elicitation), to the session a request of `server` would go to; dropped otherwise.
    pub async fn custom_notification(&self, server: &str, notification: CustomNotification) {
        let Ok(Link { session, peer, .. }) = self.asked_session(server, &notification.method)
        else {
            tracing::debug!(server, method = %notification.method, "notification for no single session's call; dropped");
            return;
        };
        let method = notification.method.clone();
        let notification = CustomNotification::new(notification.method, notification.params);
        if let Err(e) = peer
            .send_notification(ServerNotification::CustomNotification(notification))
            .await
        {
            tracing::debug!(session, method, error = %e, "cannot forward a notification");
        }
    }

    /// `sampling/createMessage` from `server`, asked of the client of the call in flight.
    pub async fn create_message(
        &self,
        server: &str,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let Link { session, peer, .. } = self.asked_session(server, "sampling/createMessage")?;
        require(&peer, "sampling/createMessage", |c| c.sampling.is_some())?;
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match forward(server, &session, &peer, request, context).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(unexpected("sampling/createMessage")),
        }
    }

    /// `elicitation/create` from `server`, asked of the client of the call in flight.
    pub async fn create_elicitation(
        &self,
        server: &str,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Link { session, peer, .. } = self.asked_session(server, "elicitation/create")?;
        require(&peer, "elicitation/create", |c| c.elicitation.is_some())?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match forward(server, &session, &peer, request, context).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(unexpected("elicitation/create")),
        }
    }

    /// `roots/list` from `server`, asked of the client of the call in flight (or the latest
    /// client that offers roots). With no such client yet there are no roots: an empty list (the
    /// gateway sends `roots/list_changed` when one arrives, so the server asks again).
    pub async fn list_roots(
        &self,
        server: &str,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let Some(Link { session, peer, .. }) = self.roots_holder(server) else {
            tracing::debug!(server, "roots/list with no client offering roots: none yet");
            return Ok(ListRootsResult::default());
        };
        require(&peer, "roots/list", |c| c.roots.is_some())?;
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match forward(server, &session, &peer, request, context).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(unexpected("roots/list")),
        }
    }
}

/// The error an upstream gets when no client session can answer its request.
fn no_caller(server: &str, method: &str) -> ErrorData {
    tracing::debug!(server, method, "no client session to ask");
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("{method}: no client session is waiting on this server's work, so none can answer"),
        None,
    )
}

/// Refuses, with the error a client without the capability gives, a request the session's
/// client did not declare it supports.
fn require(
    peer: &Peer<RoleServer>,
    method: &str,
    offers: impl Fn(&rmcp::model::ClientCapabilities) -> bool,
) -> Result<(), ErrorData> {
    let declared = peer
        .peer_info()
        .is_some_and(|info| offers(&info.capabilities));
    if declared {
        Ok(())
    } else {
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("{method}: the client does not support it (it did not declare the capability)"),
            None,
        ))
    }
}

fn unexpected(method: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("{method}: the client answered with another result type"),
        None,
    )
}

/// Sends an upstream's request to a client and waits for the answer; when the upstream cancels
/// its request, the client's request is cancelled too.
async fn forward(
    server: &str,
    session: &str,
    peer: &Peer<RoleServer>,
    request: ServerRequest,
    context: RequestContext<RoleClient>,
) -> Result<ClientResult, ErrorData> {
    tracing::debug!(
        server,
        session,
        "forwarding a request of the upstream to the client"
    );
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| ErrorData::internal_error(format!("cannot reach the client: {e}"), None))?;
    let id = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => match answer {
            Ok(result) => Ok(result),
            Err(rmcp::ServiceError::McpError(error)) => Err(error),
            Err(e) => Err(ErrorData::internal_error(format!("the client did not answer: {e}"), None)),
        },
        () = context.ct.cancelled() => {
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(
                    Some(id),
                    Some(format!("cancelled by upstream `{server}`")),
                ))
                .await;
            Err(ErrorData::internal_error("cancelled by the server", None))
        }
    }
}

/// Whether `scope` reaches `server`: a pattern with a server part names it (its tools, prompts or
/// resources), or a bare pattern is written with its public-name prefix or matches one of its
/// tools in the catalog. What a server logs, asks or counts is shown to a scoped caller only
/// then.
pub fn scope_reaches_server(scope: &Scope, engine: &SearchEngine, server: &str) -> bool {
    let Some(patterns) = scope.patterns() else {
        return true;
    };
    let naming = engine.naming();
    patterns.iter().any(|pattern| {
        let raw = pattern.as_str().trim();
        if raw.contains(':') {
            return pattern.matches_server(server);
        }
        if let Some((prefix, _)) = raw.split_once(naming.separator()) {
            if NamePattern::server(prefix).matches_server(server) {
                return true;
            }
        }
        engine
            .catalog()
            .server_tools(server)
            .iter()
            .any(|tool| pattern.matches(&tool.id(), naming))
    })
}
