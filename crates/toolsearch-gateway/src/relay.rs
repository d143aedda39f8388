//! What passes between the downstream sessions and the upstreams besides requests and their
//! answers: an upstream's requests to the client (sampling, elicitation, roots), its progress,
//! log messages and resource updates, each routed to the session it belongs to.
//!
//! Every upstream connection is shared by all sessions, so the relay keeps the calls in flight on
//! each upstream and the session each came from; an upstream asks on behalf of the call it is
//! running. MCP does not say which call a request to the client serves, so `sampling/createMessage`
//! and `elicitation/create`, which show a person what one session's work is about, go only to the
//! one session with calls in flight on that upstream, and are refused when several have (never
//! shown to the wrong person). `roots/list` goes to the session of the most recent call in flight,
//! or with none, to the most recent session whose client offers roots (an empty list before any
//! has connected). Progress is matched exactly, by the token the gateway gave the upstream.
// Sampling, roots and logging are deprecated in rmcp for the 2026 protocol, but every client that
// speaks 2025-11-25 (all of today's) still uses them.
#![allow(deprecated)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::{
    CancelledNotificationParam, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, CustomNotification, ElicitRequest, ElicitRequestParams, ElicitResult,
    ErrorCode, ListRootsRequest, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, ServerNotification, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleClient};
use rmcp::{ErrorData, Peer, RoleServer};

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
}

struct SessionLink {
    peer: Peer<RoleServer>,
    /// The level the client asked for with `logging/setLevel`; no log messages until it does.
    log_level: Option<LoggingLevel>,
    attached: u64,
}

#[derive(Default)]
struct RelayState {
    sessions: HashMap<String, SessionLink>,
    calls: Vec<InFlight>,
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
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Relay")
            .field("sessions", &state.sessions.len())
            .field("calls", &state.calls.len())
            .field("subscriptions", &state.subscriptions.len())
            .finish()
    }
}

/// A call registered as in flight until this is dropped.
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
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.relay.lock().calls.retain(|c| c.id != self.id);
    }
}

/// Rank of a log level, least severe first.
fn severity(level: LoggingLevel) -> u8 {
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

    /// Remembers how to reach a session (its first request after initialize does this).
    pub fn attach(&self, session: &str, peer: &Peer<RoleServer>) {
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state
            .sessions
            .entry(session.to_string())
            .or_insert_with(|| SessionLink {
                peer: peer.clone(),
                log_level: None,
                attached: order,
            });
    }

    /// Forgets a session; returns the upstream subscriptions nobody holds any more, for the
    /// caller to end upstream.
    pub fn end_session(&self, session: &str) -> Vec<(String, String)> {
        let mut state = self.lock();
        state.sessions.remove(session);
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
        });
        InFlightGuard {
            relay: self.clone(),
            id,
        }
    }

    /// The session whose call is in flight on `server`, when exactly one session has calls in
    /// flight there: what an upstream asks of a person (sampling, elicitation) goes to nobody else.
    /// `Err` with the number of sessions when several have.
    fn sole_caller(&self, server: &str) -> Result<Option<(String, Peer<RoleServer>)>, usize> {
        let state = self.lock();
        let sessions: BTreeSet<&str> = state
            .calls
            .iter()
            .filter(|c| c.server == server && state.sessions.contains_key(&c.session))
            .map(|c| c.session.as_str())
            .collect();
        match sessions.len() {
            0 => Ok(None),
            1 => {
                let session = sessions.into_iter().next().unwrap_or_default();
                Ok(state
                    .sessions
                    .get(session)
                    .map(|link| (session.to_string(), link.peer.clone())))
            }
            several => Err(several),
        }
    }

    /// The one session an upstream's request to the client can go to, or why none can.
    fn asked_session(
        &self,
        server: &str,
        method: &str,
    ) -> Result<(String, Peer<RoleServer>), ErrorData> {
        match self.sole_caller(server) {
            Ok(Some(caller)) => Ok(caller),
            Ok(None) => Err(no_caller(server, method)),
            Err(sessions) => {
                tracing::warn!(server, method, sessions, "refused: several sessions have calls in flight on this server, and MCP does not say which one the request is for");
                Err(ErrorData::internal_error(
                    format!("{method}: {sessions} client sessions have calls in flight on this server through the gateway, and the request does not say which call it serves; it was not shown to any of them. Retry when the other calls have finished"),
                    None,
                ))
            }
        }
    }

    /// The session of the most recent call in flight on `server` whose session is reachable.
    fn caller_of(&self, server: &str) -> Option<(String, Peer<RoleServer>)> {
        let state = self.lock();
        state
            .calls
            .iter()
            .rev()
            .filter(|c| c.server == server)
            .find_map(|c| {
                let link = state.sessions.get(&c.session)?;
                Some((c.session.clone(), link.peer.clone()))
            })
    }

    /// The session to ask for roots: the caller, else the most recent session whose client
    /// offers roots.
    fn roots_holder(&self, server: &str) -> Option<(String, Peer<RoleServer>)> {
        if let Some(caller) = self.caller_of(server) {
            return Some(caller);
        }
        let state = self.lock();
        state
            .sessions
            .iter()
            .filter(|(_, link)| {
                link.peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.roots.is_some())
            })
            .max_by_key(|(_, link)| link.attached)
            .map(|(id, link)| (id.clone(), link.peer.clone()))
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
                .and_then(|c| {
                    let token = c.client_token.clone()?;
                    let peer = state.sessions.get(&c.session)?.peer.clone();
                    Some((c.session.clone(), token, peer))
                })
        };
        let Some((session, token, peer)) = target else {
            tracing::trace!(server, "progress for no call that asked for it; dropped");
            return;
        };
        params.progress_token = token;
        if let Err(e) = peer.notify_progress(params).await {
            tracing::debug!(session, error = %e, "cannot send progress");
        }
    }

    /// Records a session's log level; returns the most verbose level any session asked for,
    /// which is what the upstreams are set to.
    pub fn set_log_level(&self, session: &str, level: LoggingLevel) -> LoggingLevel {
        let mut state = self.lock();
        if let Some(link) = state.sessions.get_mut(session) {
            link.log_level = Some(level);
        }
        state
            .sessions
            .values()
            .filter_map(|l| l.log_level)
            .min_by_key(|l| severity(*l))
            .unwrap_or(level)
    }

    /// The most verbose level any session asked for, if any did.
    pub fn log_level(&self) -> Option<LoggingLevel> {
        self.lock()
            .sessions
            .values()
            .filter_map(|l| l.log_level)
            .min_by_key(|l| severity(*l))
    }

    /// An upstream's log message, to every session that asked for its level or a more verbose
    /// one; the logger is named by the server (`server` or `server/logger`).
    pub async fn log(&self, server: &str, mut params: LoggingMessageNotificationParam) {
        params.logger = Some(match params.logger.take() {
            Some(logger) => format!("{server}/{logger}"),
            None => server.to_string(),
        });
        let peers: Vec<(String, Peer<RoleServer>)> = self
            .lock()
            .sessions
            .iter()
            .filter(|(_, link)| {
                link.log_level
                    .is_some_and(|wanted| severity(params.level) >= severity(wanted))
            })
            .map(|(id, link)| (id.clone(), link.peer.clone()))
            .collect();
        for (session, peer) in peers {
            if let Err(e) = peer.notify_logging_message(params.clone()).await {
                tracing::debug!(session, error = %e, "cannot send a log message");
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
        let peers: Vec<(String, Peer<RoleServer>)> = {
            let state = self.lock();
            let key = (server.to_string(), uri.to_string());
            state
                .subscriptions
                .get(&key)
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s.clone(), state.sessions.get(s)?.peer.clone())))
                .collect()
        };
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
    /// elicitation), to the one session with calls in flight on `server`; dropped otherwise.
    pub async fn custom_notification(&self, server: &str, notification: CustomNotification) {
        let Ok(Some((session, peer))) = self.sole_caller(server) else {
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

    /// Every reachable session, for list_changed notifications that concern them all.
    pub fn peers(&self) -> Vec<(String, Peer<RoleServer>)> {
        self.lock()
            .sessions
            .iter()
            .map(|(id, link)| (id.clone(), link.peer.clone()))
            .collect()
    }

    /// `sampling/createMessage` from `server`, asked of the client of the call in flight.
    pub async fn create_message(
        &self,
        server: &str,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let (session, peer) = self.asked_session(server, "sampling/createMessage")?;
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
        let (session, peer) = self.asked_session(server, "elicitation/create")?;
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
        let Some((session, peer)) = self.roots_holder(server) else {
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
