//! The MCP sessions of the HTTP listener, seen from outside rmcp: the token each belongs to, each
//! token's share of sessions and streams, and the rest of idle sessions.
//!
//! - **Owners.** Every request naming a session (`POST`, the `GET` stream, `DELETE`) must carry the
//!   token that opened it; any other gets the 404 of an unknown session.
//! - **Shares.** A token keeps at most `http.maxSessionsPerToken` sessions (its least recently
//!   used makes room, never another token's) and `http.maxStreamsPerToken` `GET` streams.
//! - **Rest.** A session that holds nothing open (no request in progress, no `GET` stream, no
//!   subscription, no log level) for `http.sessionRestAfterSecs` lets its connection go: rmcp's
//!   worker, its channels and the handler, about 80 KB. What it must keep stays: its token here,
//!   its client's `initialize` in the session store, its reveals and stored outputs in the gateway
//!   under its name. Its next request has rmcp replay the `initialize` and carries on; the client
//!   sees no difference. After `http.sessionIdleTimeoutSecs` without a request it ends.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use tokio::sync::Semaphore;

use crate::gateway::Gateway;
use crate::listener_config::HttpConfig;
use crate::rest::{self, Grant};
use crate::session::Sessions;
use crate::shared::{InProcessMcpSessions, NoticeKind};

/// The sessions of the HTTP listener: see the module's documentation.
pub(crate) struct SessionOwners {
    book: Mutex<OwnerBook>,
    /// rmcp's sessions: the ones with a connection here.
    manager: Arc<LocalSessionManager>,
    /// The owners of sessions other replicas opened, when replicas share sessions.
    /// The gateway's sessions, which know whether replicas share them, and the store.
    sessions: Arc<Sessions>,
    /// In process, each session's `initialize`, for rmcp to bring a resting session back (with a
    /// shared store, the store keeps them).
    restorable: Option<Arc<InProcessMcpSessions>>,
    gateway: Arc<Gateway>,
    /// The configured tokens: a session whose token is no longer one of them ends.
    tokens: Arc<rest::ApiTokens>,
    max_sessions_per_token: usize,
    max_streams_per_token: usize,
    rest_after: Option<Duration>,
    idle_timeout: Duration,
    metrics: crate::metrics::Metrics,
}

/// Each session known here, its state and when it was last used, and each token's sessions by
/// last use: the least recently used is the first to make room for the same token's next. Who
/// owns a session is not kept here but in the gateway's [`Sessions`], the one map of owners,
/// which every connection serving the session binds against.
struct OwnerBook {
    /// The gateway's sessions, which keep each session's owner.
    owners: Arc<Sessions>,
    sessions: HashMap<String, Owned>,
    by_token: HashMap<rest::TokenId, BTreeMap<u64, String>>,
    /// Held `GET` streams per token.
    streams: HashMap<rest::TokenId, usize>,
    /// A counter standing for time: every use takes the next value.
    clock: u64,
    /// Sessions in [`Life::Resting`].
    resting: usize,
}

struct Owned {
    /// The book's clock at its last use.
    used: u64,
    last_used: Instant,
    /// Its requests and `GET` streams in progress.
    open: usize,
    life: Life,
}

enum Life {
    /// Its connection is here (or, with replicas, may be anywhere).
    Connected,
    /// Its connection is being let go; requests wait for the event to close.
    Closing(Arc<Semaphore>),
    /// No connection: the next request brings it back.
    Resting,
}

impl OwnerBook {
    fn new(owners: Arc<Sessions>) -> Self {
        Self {
            owners,
            sessions: HashMap::new(),
            by_token: HashMap::new(),
            streams: HashMap::new(),
            clock: 0,
            resting: 0,
        }
    }

    /// The owner of a session in the book.
    fn owner(&self, id: &str) -> Option<Option<rest::TokenId>> {
        if !self.sessions.contains_key(id) {
            return None;
        }
        self.owners.owner_named(id)
    }

    /// Records `id` as `owner`'s, connected and just used.
    fn insert(&mut self, id: &str, owner: Option<rest::TokenId>) {
        self.remove(id);
        self.owners.claim(id, owner.clone());
        self.clock += 1;
        if let Some(token) = &owner {
            self.by_token
                .entry(token.clone())
                .or_default()
                .insert(self.clock, id.to_string());
        }
        self.sessions.insert(
            id.to_string(),
            Owned {
                used: self.clock,
                last_used: Instant::now(),
                open: 0,
                life: Life::Connected,
            },
        );
    }

    /// Marks `id` used now.
    fn touch(&mut self, id: &str) {
        self.clock += 1;
        let clock = self.clock;
        let Some(owned) = self.sessions.get_mut(id) else {
            return;
        };
        let before = std::mem::replace(&mut owned.used, clock);
        owned.last_used = Instant::now();
        if let Some(token) = self.unindex(before) {
            self.by_token
                .entry(token)
                .or_default()
                .insert(clock, id.to_string());
        }
    }

    fn remove(&mut self, id: &str) -> Option<Owned> {
        let owned = self.sessions.remove(id)?;
        crate::memory::shrink_when_sparse(&mut self.sessions);
        if matches!(owned.life, Life::Resting) {
            self.resting -= 1;
        }
        self.unindex(owned.used);
        self.owners.disown(id);
        Some(owned)
    }

    /// Takes the session last used at `used` out of its token's sessions by last use; the
    /// token, when it has one. The clock never repeats, so `used` names one entry of one token
    /// (there are few tokens).
    fn unindex(&mut self, used: u64) -> Option<rest::TokenId> {
        let token = self
            .by_token
            .iter()
            .find(|(_, sessions)| sessions.contains_key(&used))
            .map(|(token, _)| token.clone())?;
        if let Some(sessions) = self.by_token.get_mut(&token) {
            sessions.remove(&used);
            if sessions.is_empty() {
                self.by_token.remove(&token);
            }
        }
        Some(token)
    }

    /// The least recently used sessions of `token` past `max`, forgotten here.
    fn over_limit(&mut self, token: &rest::TokenId, max: usize) -> Vec<String> {
        let Some(sessions) = self.by_token.get(token) else {
            return Vec::new();
        };
        let over = sessions.len().saturating_sub(max);
        let oldest: Vec<String> = sessions.values().take(over).cloned().collect();
        for id in &oldest {
            self.remove(id);
        }
        oldest
    }
}

/// A `GET` stream of a token, held until its response body ends.
struct StreamSlot {
    owners: Arc<SessionOwners>,
    token: rest::TokenId,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut book = self.owners.lock();
        if let Some(count) = book.streams.get_mut(&self.token) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                book.streams.remove(&self.token);
            }
        }
        drop(book);
        self.owners.metrics.stream_held(-1);
    }
}

/// A request or `GET` stream of a session in progress, until its response body ends: the
/// session does not rest meanwhile.
struct InProgress {
    owners: Arc<SessionOwners>,
    id: String,
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut book = self.owners.lock();
        if let Some(owned) = book.sessions.get_mut(&self.id) {
            owned.open = owned.open.saturating_sub(1);
        }
        // The idle time counts from the end of its last request.
        book.touch(&self.id);
    }
}

/// What a request finds of the session it names.
enum Begun {
    /// In progress; the session was resting (its connection comes back with this request).
    Going(InProgress, bool),
    /// The session is not in the book.
    Unknown,
}

/// What rmcp answers for a session it does not know; a session of another token gets the same,
/// so a token cannot even tell that the session exists.
fn unknown_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

impl SessionOwners {
    pub(crate) fn new(
        gateway: Arc<Gateway>,
        manager: Arc<LocalSessionManager>,
        restorable: Option<Arc<InProcessMcpSessions>>,
        tokens: Arc<rest::ApiTokens>,
        http: &HttpConfig,
    ) -> Arc<Self> {
        let owners = Arc::new(Self {
            book: Mutex::new(OwnerBook::new(gateway.sessions().clone())),
            manager,
            sessions: gateway.sessions().clone(),
            restorable,
            metrics: gateway.observer().metrics().clone(),
            gateway,
            tokens,
            max_sessions_per_token: http.max_sessions_per_token,
            max_streams_per_token: http.max_streams_per_token,
            rest_after: http.session_rest_after,
            idle_timeout: http.session_idle_timeout,
        });
        // A session its client ended on another replica is closed here too.
        let weak = Arc::downgrade(&owners);
        owners.sessions.on_ended_elsewhere(Arc::new(move |id: String| {
            if let Some(owners) = weak.upgrade() {
                tokio::spawn(async move {
                    tracing::debug!(session = %id, "closing an MCP session ended on another replica");
                    owners.end_here(&id).await;
                });
            }
        }));
        let shortest = owners
            .rest_after
            .map_or(owners.idle_timeout, |rest| rest.min(owners.idle_timeout));
        let every = (shortest / 4).clamp(Duration::from_millis(250), Duration::from_secs(15));
        tokio::spawn(tend_sessions(Arc::downgrade(&owners), every));
        owners
    }

    fn lock(&self) -> MutexGuard<'_, OwnerBook> {
        // Every update leaves the book whole before it returns.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one more `GET` stream of `token`; `None` when it holds its limit.
    fn hold_stream(self: &Arc<Self>, token: &rest::TokenId) -> Option<StreamSlot> {
        let mut book = self.lock();
        let count = book.streams.entry(token.clone()).or_insert(0);
        if *count >= self.max_streams_per_token {
            return None;
        }
        *count += 1;
        drop(book);
        self.metrics.stream_held(1);
        Some(StreamSlot {
            owners: self.clone(),
            token: token.clone(),
        })
    }

    /// Counts a request of session `id` in progress, once the session is not letting its
    /// connection go (that takes a moment; the request then brings it back).
    async fn begin(self: &Arc<Self>, id: &str) -> Begun {
        loop {
            let closing = {
                let mut book = self.lock();
                let Some(owned) = book.sessions.get_mut(id) else {
                    return Begun::Unknown;
                };
                match &owned.life {
                    Life::Closing(done) => done.clone(),
                    Life::Connected | Life::Resting => {
                        let was_resting = matches!(owned.life, Life::Resting);
                        owned.open += 1;
                        owned.life = Life::Connected;
                        if was_resting {
                            book.resting -= 1;
                            self.metrics.sessions_resting(book.resting);
                        }
                        book.touch(id);
                        return Begun::Going(
                            InProgress {
                                owners: self.clone(),
                                id: id.to_string(),
                            },
                            was_resting,
                        );
                    }
                }
            };
            // Closed (never granted) once the connection is let go.
            let _ = closing.acquire().await;
        }
    }

    /// Records a session `owner` just opened here and ends the sessions of the same token past
    /// its limit, least recently used first: here, in the shared store, and on the replicas that
    /// hold a copy.
    async fn opened(&self, id: &str, owner: Option<rest::TokenId>) {
        let local_evicted = {
            let mut book = self.lock();
            book.insert(id, owner.clone());
            match &owner {
                // With a shared store, the store decides over the sessions of every replica.
                Some(token) if !self.sessions.replicated() => {
                    book.over_limit(token, self.max_sessions_per_token)
                }
                _ => Vec::new(),
            }
        };
        let evicted = match self
            .sessions
            .store()
            .set_owner(id, owner.as_ref(), self.max_sessions_per_token)
            .await
        {
            Ok(shared_evicted) => {
                let mut book = self.lock();
                for old in &shared_evicted {
                    book.remove(old);
                }
                drop(book);
                local_evicted.into_iter().chain(shared_evicted).collect()
            }
            Err(e) => {
                tracing::error!(error = %e, "the new MCP session is not shared: other replicas will not know it");
                local_evicted
            }
        };
        if evicted.is_empty() {
            return;
        }
        tracing::info!(
            evicted = evicted.len(),
            limit = self.max_sessions_per_token,
            "a token opened a session past http.maxSessionsPerToken: its least recently used sessions end"
        );
        self.metrics.sessions_evicted("token_limit", evicted.len());
        for old in evicted {
            self.end_here(&old).await;
            if self.sessions.replicated() {
                if let Err(e) = self
                    .sessions
                    .store()
                    .tell(&old, NoticeKind::SessionEnded)
                    .await
                {
                    tracing::warn!(error = %e, "replicas that restored an evicted MCP session keep it until it idles out");
                }
            }
        }
    }

    /// Forgets a session's entry.
    fn forget(&self, id: &str) {
        let mut book = self.lock();
        if book
            .remove(id)
            .is_some_and(|o| matches!(o.life, Life::Resting))
        {
            self.metrics.sessions_resting(book.resting);
        }
    }

    /// Closes this replica's connection of a session, when it has one.
    async fn close_here(&self, id: &str) {
        let id: SessionId = id.into();
        if self.manager.has_session(&id).await.unwrap_or(false) {
            if let Err(e) = self.manager.close_session(&id).await {
                tracing::debug!(error = %e, "cannot close an ended MCP session");
            }
        }
    }

    /// Ends a session here: its entry, its connection, what it kept while resting and its
    /// `initialize` (in process; a shared store keeps its own until told).
    async fn end_here(&self, id: &str) {
        self.forget(id);
        self.close_here(id).await;
        self.gateway
            .sessions()
            .forget_rested(id, &self.gateway.kept());
        if let Some(restorable) = &self.restorable {
            restorable.remove(id);
        }
    }

    /// Lets idle sessions rest and ends those idle past the timeout (and forgets those whose
    /// connection rmcp ended).
    async fn tend(&self) {
        let connected: HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        let now = Instant::now();
        let (to_rest, to_end) = {
            let mut book = self.lock();
            let mut to_rest = Vec::new();
            let mut to_end = Vec::new();
            for (id, owned) in &mut book.sessions {
                if owned.open > 0 {
                    continue;
                }
                let idle = now.saturating_duration_since(owned.last_used);
                match owned.life {
                    Life::Closing(_) => {}
                    Life::Resting if idle >= self.idle_timeout => to_end.push(id.clone()),
                    Life::Resting => {}
                    // Ended by rmcp (its idle timeout, or it failed); with a shared store it may be
                    // connected on another replica, and the store keeps its owner.
                    Life::Connected if !connected.contains(id) => to_end.push(id.clone()),
                    Life::Connected if idle >= self.idle_timeout => to_end.push(id.clone()),
                    Life::Connected => {
                        if self.rest_after.is_some_and(|after| idle >= after) {
                            let done = Arc::new(Semaphore::new(0));
                            owned.life = Life::Closing(done.clone());
                            to_rest.push((id.clone(), done));
                        }
                    }
                }
            }
            (to_rest, to_end)
        };
        for id in &to_end {
            self.end_here(id).await;
        }
        let mut rested = 0;
        for (id, done) in to_rest {
            let rests = self
                .gateway
                .sessions()
                .rest_named(&id, &self.gateway.kept());
            if rests {
                self.close_here(&id).await;
                rested += 1;
            }
            let mut book = self.lock();
            if let Some(owned) = book.sessions.get_mut(&id) {
                owned.life = if rests {
                    Life::Resting
                } else {
                    Life::Connected
                };
                if rests {
                    book.resting += 1;
                }
            }
            drop(book);
            done.close();
        }
        if rested > 0 || !to_end.is_empty() {
            tracing::debug!(rested, ended = to_end.len(), "idle MCP sessions tended");
        }
        let resting = self.lock().resting;
        self.metrics.sessions_resting(resting);
    }
}

/// Tends the sessions every `every` until the listener is gone.
async fn tend_sessions(owners: Weak<SessionOwners>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(owners) = owners.upgrade() else {
            return;
        };
        owners.tend().await;
    }
}

/// Middleware of `/mcp`, after the token check: a request naming a session opened with another
/// token (or with a token no longer configured) is answered as if the session did not exist; a
/// new session is recorded with its token, within the token's share of sessions; a `GET` stream
/// takes one of its token's stream slots for as long as it is held; a request keeps its session
/// from resting until its answer ends, and a `DELETE` of a resting session ends it here.
pub(crate) async fn require_session_owner(
    State(sessions): State<Arc<SessionOwners>>,
    request: Request,
    next: Next,
) -> Response {
    let owner = request.extensions().get::<Grant>().map(Grant::owner);
    let named = request
        .headers()
        .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let delete = request.method() == Method::DELETE;
    if named.is_none() && request.method() == Method::POST && sessions.sessions.replicated() {
        if let Err(e) = sessions.sessions.store().check().await {
            tracing::error!(error = %e, "refused a new MCP session");
            return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response();
        }
    }
    let mut in_progress = None;
    if let Some(id) = &named {
        match admit(&sessions, id, &owner, delete).await {
            Ok(guard) => in_progress = Some(guard),
            Err(refusal) => return refusal,
        }
    }
    let stream = match (&named, &owner) {
        (Some(_), Some(Some(token))) if request.method() == Method::GET => {
            match stream_slot(&sessions, token) {
                Ok(slot) => Some(slot),
                Err(refusal) => return *refusal,
            }
        }
        _ => None,
    };
    let response = next.run(request).await;
    if let Some(id) = &named {
        // Ended while this request ran (a replica's notice, a revoked token, a DELETE): rmcp
        // answers it 500 ("session service terminated"); the client is told what any request on
        // an ended session is told.
        if response.status() == StatusCode::INTERNAL_SERVER_ERROR
            && sessions.lock().owner(id).is_none()
        {
            return unknown_session();
        }
    }
    match (named, owner) {
        (None, Some(owner)) => {
            let created = response
                .headers()
                .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
                .and_then(|v| v.to_str().ok());
            if let Some(id) = created.map(str::to_string) {
                sessions.opened(&id, owner).await;
            }
        }
        (Some(id), _) if delete && response.status().is_success() => {
            drop(in_progress.take());
            closed_by_client(&sessions, &id).await;
        }
        _ => {}
    }
    if stream.is_none() && in_progress.is_none() {
        return response;
    }
    rest::hold_until_sent(response, (stream, in_progress))
}

/// Lets a request on the session `id` through when the token it carries (`owner`) opened the
/// session, here or, with replicas, on another one; it then counts as in progress. Anything
/// else is answered as a request on an unknown session (or 503 when the shared store cannot
/// say). A `DELETE` of a session whose connection is gone ends it at once.
async fn admit(
    sessions: &Arc<SessionOwners>,
    id: &str,
    owner: &Option<Option<rest::TokenId>>,
    delete: bool,
) -> Result<InProgress, Response> {
    let known = sessions.lock().owner(id);
    let bound = match known {
        Some(bound) => bound,
        // Opened on another replica: its token is in the shared store.
        None if sessions.sessions.replicated() => match sessions.sessions.store().owner(id).await {
            Ok(Some(bound)) => {
                sessions.lock().insert(id, bound.clone());
                bound
            }
            Ok(None) => return Err(unknown_session()),
            Err(e) => {
                tracing::error!(error = %e, "cannot check an MCP session's token");
                return Err((StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response());
            }
        },
        // In process every session opened here is in the book until it ends: one that is not
        // never was, or has ended (and must not be brought back).
        None => return Err(unknown_session()),
    };
    if !sessions.tokens.knows(bound.as_ref()) {
        tracing::info!("ending an MCP session whose token is no longer configured");
        end_everywhere(sessions, id).await;
        return Err(unknown_session());
    }
    if owner.as_ref() != Some(&bound) {
        tracing::warn!(token = ?owner.clone().flatten(), "refused a request on an MCP session opened with another token");
        return Err(unknown_session());
    }
    match sessions.begin(id).await {
        Begun::Unknown => Err(unknown_session()),
        Begun::Going(_, true) if delete => {
            // Its connection is gone already: ending it is this replica's to do.
            end_everywhere(sessions, id).await;
            Err(StatusCode::NO_CONTENT.into_response())
        }
        Begun::Going(guard, _) => Ok(guard),
    }
}

/// One of the token's `GET` stream slots, or the 429 that says it holds all of them.
fn stream_slot(
    sessions: &Arc<SessionOwners>,
    token: &rest::TokenId,
) -> Result<StreamSlot, Box<Response>> {
    sessions.hold_stream(token).ok_or_else(|| {
        sessions.metrics.limit_refused("streams");
        tracing::debug!("GET stream refused: the token is at http.maxStreamsPerToken");
        Box::new(rest::at_limit(
            true,
            &format!(
                "this token already holds {} GET streams, its limit; close one (or end sessions it no longer uses) and retry (the operator can raise http.maxStreamsPerToken)",
                sessions.max_streams_per_token
            ),
        ))
    })
}

/// A session its client ended with a `DELETE`: forgotten here, in the shared store, and on the
/// replicas that restored it.
async fn closed_by_client(sessions: &SessionOwners, id: &str) {
    sessions.forget(id);
    if let Some(restorable) = &sessions.restorable {
        restorable.remove(id);
    }
    end_on_replicas(sessions, id).await;
}

/// Ends a session here, in the shared store and on every replica holding a copy.
async fn end_everywhere(sessions: &SessionOwners, id: &str) {
    sessions.end_here(id).await;
    end_on_replicas(sessions, id).await;
}

/// Forgets an ended session in the shared store and tells the replicas that restored it.
async fn end_on_replicas(sessions: &SessionOwners, id: &str) {
    if sessions.sessions.replicated() {
        if let Err(e) = sessions.sessions.store().end_session(id).await {
            tracing::warn!(error = %e, "an ended MCP session stays in the shared store until it expires");
        }
        if let Err(e) = sessions
            .sessions
            .store()
            .tell(id, NoticeKind::SessionEnded)
            .await
        {
            tracing::warn!(error = %e, "replicas that restored an ended MCP session keep it until it idles out");
        }
    }
}

/// What a `DELETE` needs to know: whether the session it names exists here or, with replicas,
/// in the shared store.
#[derive(Clone)]
pub(crate) struct SessionsToClose {
    pub(crate) manager: Arc<LocalSessionManager>,
    pub(crate) sessions: Arc<Sessions>,
}

/// A `DELETE` that ended its session is answered 204 No Content. rmcp answers 202, which the
/// official Python SDK does not expect from a session's termination (it accepts 200, 204 and
/// 405) and warns about on every close. rmcp also answers 202 for a session that does not exist
/// (never opened, or already ended); that is a 404, as for any other request naming it.
pub(crate) async fn session_closed_no_content(
    State(sessions): State<SessionsToClose>,
    request: Request,
    next: Next,
) -> Response {
    let delete = request.method() == Method::DELETE;
    if delete {
        let named = request
            .headers()
            .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(SessionId::from);
        if let Some(id) = named {
            let here = sessions.manager.has_session(&id).await.unwrap_or(false);
            let elsewhere = here
                || (sessions.sessions.replicated()
                    && matches!(sessions.sessions.store().owner(&id).await, Ok(Some(_))));
            if !elsewhere {
                return unknown_session();
            }
        }
    }
    let response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        let (mut parts, _) = response.into_parts();
        parts.status = StatusCode::NO_CONTENT;
        parts.headers.remove(http::header::CONTENT_LENGTH);
        parts.headers.remove(http::header::CONTENT_TYPE);
        return Response::from_parts(parts, axum::body::Body::empty());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> OwnerBook {
        OwnerBook::new(Arc::new(Sessions::new(Arc::new(
            crate::shared::InProcess::default(),
        ))))
    }

    /// The book keeps no owner of its own: it records them in the gateway's sessions, and a
    /// token's least recently used session is the first past its limit.
    #[test]
    fn the_book_records_owners_in_the_sessions_and_evicts_a_tokens_least_recently_used() {
        let mut book = book();
        let alice = rest::TokenId::from_stored("alice");
        book.insert("a1", Some(alice.clone()));
        book.insert("a2", Some(alice.clone()));
        book.insert("open", None);
        assert_eq!(book.owners.owner_named("a1"), Some(Some(alice.clone())));
        assert_eq!(book.owner("open"), Some(None));
        assert_eq!(book.owner("elsewhere"), None);

        book.touch("a1");
        assert_eq!(book.over_limit(&alice, 1), vec!["a2".to_string()]);
        assert_eq!(book.owner("a2"), None);
        assert_eq!(
            book.owners.owner_named("a2"),
            None,
            "forgotten in the sessions too"
        );
        assert_eq!(book.over_limit(&alice, 1), Vec::<String>::new());

        book.remove("a1");
        assert!(book.by_token.is_empty(), "no token keeps an ended session");
        assert_eq!(book.owners.owner_named("a1"), None);
    }
}
