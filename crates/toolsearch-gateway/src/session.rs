//! The downstream sessions: who each belongs to and so what it sees, the keys its reveals and
//! large outputs are kept under, how to reach it for notifications, and the sync of what it keeps
//! with the store replicas share (read before a request, written after). The rest of the gateway
//! asks this type, never the shared store, whether a session's state lives elsewhere too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

#[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
use rmcp::model::LoggingLevel;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use toolsearch_core::disclosure::{Disclosure, SessionSnapshot};
use toolsearch_core::Scope;

use crate::error::{GatewayError, Result};
use crate::offload::{OffloadStore, StoredOutput};
use crate::relay::{Downstream, Link, Reach};
use crate::rest::{SharedEngine, TokenId};
use crate::shared::{Notice, NoticeKind, SharedOutput, SharedSessions, SharedStateError};
use crate::upstream::supervisor::UpstreamManager;

/// What a downstream session may see; who it belongs to is in [`Sessions`]' map of owners.
#[derive(Debug, Clone, Default)]
enum Access {
    /// Opened over HTTP, no token bound yet: it sees no tool.
    #[default]
    Unbound,
    /// Bound for the session's lifetime to its token's scope.
    Bound { scope: Arc<Scope> },
}

/// One downstream session.
#[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
#[derive(Default)]
struct Session {
    peer: Option<Peer<RoleServer>>,
    /// A fingerprint of the tools last returned by tools/list (names, descriptions, schemas),
    /// to tell whether a catalog change altered what this session sees.
    listed: Option<u64>,
    access: Access,
    /// A request of protocol 2026-07-28, which has no sessions: rmcp gives each request a
    /// session of its own, so what must outlive the request is kept by owner instead.
    sessionless: bool,
    /// The client's `Mcp-Session-Id` (HTTP), the key of what the session keeps: the same on every
    /// replica that serves it.
    shared_id: Option<String>,
    /// Attachment order, once the session can be sent what upstreams send (its first request
    /// after `initialize`), with which upstreams its scope reaches.
    attached: Option<(u64, Reach)>,
    /// The level the client asked for with `logging/setLevel`; no log messages until it does.
    log_level: Option<LoggingLevel>,
    /// Its connection is being let go while the session rests (`http.sessionRestAfterSecs`):
    /// what it keeps under its shared key stays for the connection that brings it back.
    resting: bool,
}

/// A request's session, resolved once: its id and the scope it sees.
#[derive(Debug, Clone)]
pub(crate) struct SessionRef {
    pub id: String,
    pub scope: Arc<Scope>,
}

/// A shared session's reveals as a call found them (none yet is `None`).
pub(crate) struct RevealsBefore(Option<SessionSnapshot>);

/// What [`Sessions::remove`] tells the caller about a session that ended, for the stores that
/// keep what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The key its reveals and outputs were kept under.
    pub key: String,
    pub sessionless: bool,
    /// It only rests: what it kept stays for the connection that brings it back.
    pub resting: bool,
}

/// What a session keeps outside [`Sessions`]: its reveals (the disclosure), its large outputs,
/// its place in the relay (subscriptions, calls), all ended or kept with it here.
pub(crate) struct Kept<'a> {
    pub disclosure: &'a Disclosure,
    pub offload: Option<&'a OffloadStore>,
    pub upstreams: &'a UpstreamManager,
    pub engine: &'a SharedEngine,
}

/// Every downstream session of this gateway, and the store they are shared through.
pub(crate) struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
    /// The session of each `Mcp-Session-Id` served here now.
    named: Mutex<HashMap<String, String>>,
    /// Who owns each session: the token that opened it (its identity; `None` without tokens,
    /// and over stdio), under its `Mcp-Session-Id` once it has one (there it outlives the
    /// connection while the session rests, until the listener forgets it), else under the
    /// session. The one map of owners: the HTTP listener admits requests by it, and every
    /// connection serving a session binds against it.
    owners: Mutex<HashMap<String, Option<TokenId>>>,
    next: AtomicU64,
    /// Where sessions are kept between requests: this process, or a store shared by replicas.
    shared: Arc<dyn SharedSessions>,
    /// What closes, on this replica, a session its client ended on another one (the listener's).
    ended_elsewhere: Mutex<Option<EndedElsewhere>>,
}

/// Called with the `Mcp-Session-Id` of a session ended on another replica.
pub(crate) type EndedElsewhere = Arc<dyn Fn(String) + Send + Sync>;

impl Sessions {
    pub fn new(shared: Arc<dyn SharedSessions>) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            named: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            shared,
            ended_elsewhere: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        // Every update is one insert, remove or field write.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_named(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.named.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_owners(&self) -> MutexGuard<'_, HashMap<String, Option<TokenId>>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store sessions are kept in between requests.
    pub fn store(&self) -> &Arc<dyn SharedSessions> {
        &self.shared
    }

    /// Sessions open here now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// A new session that sees no tool until [`Sessions::bind`] gives it a token's scope.
    pub fn open(&self) -> String {
        let id = format!("s{}", self.next.fetch_add(1, Ordering::Relaxed));
        self.lock().insert(id.clone(), Session::default());
        id
    }

    /// A new session that sees the tools of `scope` for its lifetime, with no token.
    pub fn open_with_scope(&self, scope: Arc<Scope>) -> String {
        let id = self.open();
        if let Some(session) = self.lock().get_mut(&id) {
            session.access = Access::Bound { scope };
        }
        self.lock_owners().insert(id.clone(), None);
        id
    }

    /// Binds a session to the token `owner` and its `scope`, for the session's lifetime. Binding
    /// again with the same token changes nothing; another token is refused.
    pub fn bind(&self, session: &str, owner: Option<TokenId>, scope: Arc<Scope>) -> Result<()> {
        let mut sessions = self.lock();
        let Some(entry) = sessions.get_mut(session) else {
            return Err(GatewayError::SessionEnded {
                session: session.to_string(),
            });
        };
        let key = entry
            .shared_id
            .clone()
            .unwrap_or_else(|| session.to_string());
        let mut owners = self.lock_owners();
        match owners.get(&key) {
            Some(bound) if *bound != owner => return Err(GatewayError::SessionOfAnotherToken),
            Some(_) => {}
            None => {
                owners.insert(key, owner);
            }
        }
        drop(owners);
        if let Access::Unbound = entry.access {
            tracing::debug!(session, %scope, "session bound to its token's scope");
            entry.access = Access::Bound { scope };
        }
        Ok(())
    }

    /// Records `owner` as the owner of the session named `mcp_session_id` (the HTTP listener's
    /// record of a session it opened, or one another replica opened, from the shared store).
    pub fn claim(&self, mcp_session_id: &str, owner: Option<TokenId>) {
        self.lock_owners().insert(mcp_session_id.to_string(), owner);
    }

    /// The owner of the session named `mcp_session_id`, if it is known here.
    pub fn owner_named(&self, mcp_session_id: &str) -> Option<Option<TokenId>> {
        self.lock_owners().get(mcp_session_id).cloned()
    }

    /// Forgets the owner of the session named `mcp_session_id`: it ended here.
    pub fn disown(&self, mcp_session_id: &str) {
        let mut owners = self.lock_owners();
        owners.remove(mcp_session_id);
        crate::memory::shrink_when_sparse(&mut owners);
    }

    /// The scope a session sees: its token's once bound; no tool before, or once it ended.
    pub fn scope(&self, session: &str) -> Arc<Scope> {
        match self.lock().get(session).map(|e| &e.access) {
            Some(Access::Bound { scope, .. }) => scope.clone(),
            Some(Access::Unbound) | None => Arc::new(Scope::none()),
        }
    }

    /// The session `id` as a request sees it.
    pub fn get(&self, id: &str) -> SessionRef {
        SessionRef {
            id: id.to_string(),
            scope: self.scope(id),
        }
    }

    /// Marks a session as one request of a client without sessions (protocol 2026-07-28).
    pub fn mark_sessionless(&self, session: &str) {
        if let Some(entry) = self.lock().get_mut(session) {
            entry.sessionless = true;
        }
    }

    /// Names a session by the client's `Mcp-Session-Id`, the key of its state on every replica
    /// and of its owner, which it takes there: a session already known under that name (one
    /// coming back from rest, or opened on another replica) keeps its owner, and a connection of
    /// another token is refused.
    pub fn name(&self, session: &str, mcp_session_id: &str) -> Result<()> {
        let mut sessions = self.lock();
        let Some(entry) = sessions.get_mut(session) else {
            return Err(GatewayError::SessionEnded {
                session: session.to_string(),
            });
        };
        if entry.shared_id.is_some() {
            return Ok(());
        }
        let mut owners = self.lock_owners();
        if let Some(owner) = owners.get(session).cloned() {
            match owners.get(mcp_session_id) {
                Some(named) if *named != owner => return Err(GatewayError::SessionOfAnotherToken),
                Some(_) => {}
                None => {
                    owners.insert(mcp_session_id.to_string(), owner);
                }
            }
            owners.remove(session);
        }
        drop(owners);
        entry.shared_id = Some(mcp_session_id.to_string());
        self.lock_named()
            .insert(mcp_session_id.to_string(), session.to_string());
        Ok(())
    }

    /// The session served here under the client's `Mcp-Session-Id`.
    pub fn named(&self, mcp_session_id: &str) -> Option<String> {
        self.lock_named().get(mcp_session_id).cloned()
    }

    /// Lets a session rest unless it is one request of a client without sessions; whether it
    /// now rests.
    pub fn rest(&self, session: &str) -> bool {
        match self.lock().get_mut(session) {
            Some(entry) if !entry.sessionless => {
                entry.resting = true;
                true
            }
            _ => false,
        }
    }

    /// The key of a session's large outputs: its `Mcp-Session-Id` over HTTP (the same on every
    /// replica), for a sessionless request its token's shelf (`token:<identity>`, `token:none`
    /// without tokens), else the session itself.
    pub fn state_key(&self, session: &str) -> String {
        let sessions = self.lock();
        let Some(entry) = sessions.get(session) else {
            return session.to_string();
        };
        if entry.sessionless {
            let key = entry.shared_id.as_deref().unwrap_or(session);
            if let Some(owner) = self.lock_owners().get(key) {
                return match owner {
                    Some(owner) => format!("token:{owner}"),
                    None => "token:none".to_string(),
                };
            }
        }
        entry
            .shared_id
            .clone()
            .unwrap_or_else(|| session.to_string())
    }

    /// The key of a session's reveals: its `Mcp-Session-Id` over HTTP (the same on every
    /// replica), else the session itself. The flag says whether they outlive the request: not for
    /// a request without a session (protocol 2026-07-28), whose `tools/list` must not depend on
    /// earlier calls (SEP-2567).
    pub fn reveal_key(&self, session: &str) -> (String, bool) {
        match self.lock().get(session) {
            Some(Session {
                sessionless: true, ..
            }) => (session.to_string(), false),
            Some(Session {
                shared_id: Some(id),
                ..
            }) => (id.clone(), true),
            _ => (session.to_string(), true),
        }
    }

    /// The session's `Mcp-Session-Id`, when it has one.
    pub fn shared_id(&self, session: &str) -> Option<String> {
        self.lock().get(session).and_then(|e| e.shared_id.clone())
    }

    /// Makes the session one the upstreams' messages can reach (once): its peer, and which
    /// upstreams its scope reaches; their logs and requests go to no other session.
    pub fn attach_reaching(&self, session: &str, peer: &Peer<RoleServer>, kept: &Kept<'_>) {
        if self
            .lock()
            .get(session)
            .is_some_and(|e| e.attached.is_some())
        {
            return;
        }
        let scope = self.scope(session);
        let engine = kept.engine.clone();
        let reach: Reach = Arc::new(move |server: &str| {
            scope.is_all()
                || crate::relay::scope_reaches_server(
                    &scope,
                    &engine.read().unwrap_or_else(|e| e.into_inner()),
                    server,
                )
        });
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        let mut sessions = self.lock();
        let entry = sessions.entry(session.to_string()).or_default();
        entry.peer.get_or_insert_with(|| peer.clone());
        entry.attached.get_or_insert((order, reach));
    }

    /// Records a session's log level; returns the most verbose level any session asked for,
    /// which is what the upstreams are set to.
    #[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
    pub fn set_log_level(&self, session: &str, level: LoggingLevel) -> LoggingLevel {
        let mut sessions = self.lock();
        if let Some(entry) = sessions.get_mut(session) {
            entry.log_level = Some(level);
        }
        most_verbose(&sessions).unwrap_or(level)
    }

    /// The most verbose level any session asked for, if any did.
    #[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
    pub fn log_level(&self) -> Option<LoggingLevel> {
        most_verbose(&self.lock())
    }

    /// Ends a session: the one place that does. Its upstream subscriptions no other session
    /// holds end too; its reveals and outputs end with it, unless it only rests (they stay under
    /// its `Mcp-Session-Id` for the connection that brings it back) or it was one request of a
    /// client without sessions (its outputs stay on its token's shelf). What the shared store
    /// holds stays for the replicas that go on serving it.
    pub fn end(&self, session: &str, kept: &Kept<'_>) {
        let ended = self.remove(session);
        let orphaned = kept.upstreams.relay().end_session(session);
        if !orphaned.is_empty() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let upstreams = kept.upstreams.clone();
                runtime.spawn(async move {
                    for (server, uri) in orphaned {
                        upstreams.unsubscribe(&server, &uri).await;
                    }
                });
            }
        }
        if ended.resting {
            tracing::debug!(session, "session resting");
        } else {
            kept.disclosure.end_session(&ended.key);
            if let (Some(store), false) = (kept.offload, ended.sessionless) {
                store.end_session(&ended.key);
            }
            tracing::debug!(session, "session ended");
        }
        crate::memory::session_ended();
    }

    /// Lets the session named `mcp_session_id` rest when it holds nothing that must stay with
    /// its connection (no log level asked for, nothing in `Relay::holds_nothing`): once its connection is closed, its reveals and
    /// stored outputs stay under its name for the connection that brings it back. False
    /// (nothing changed) when it must stay as it is.
    pub fn rest_named(&self, mcp_session_id: &str, kept: &Kept<'_>) -> bool {
        let Some(session) = self.named(mcp_session_id) else {
            return false;
        };
        let asked_for_logs = self
            .lock()
            .get(&session)
            .is_some_and(|e| e.log_level.is_some());
        !asked_for_logs && kept.upstreams.relay().holds_nothing(&session) && self.rest(&session)
    }

    /// Forgets what a resting session kept (its reveals and stored outputs): it ended without
    /// coming back.
    pub fn forget_rested(&self, mcp_session_id: &str, kept: &Kept<'_>) {
        kept.disclosure.end_session(mcp_session_id);
        if let Some(store) = kept.offload {
            store.end_session(mcp_session_id);
        }
    }

    /// Remembers how to send a session notifications (from its `initialize`).
    pub fn remember_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        if let Some(entry) = self.lock().get_mut(session) {
            entry.peer.get_or_insert_with(|| peer.clone());
        }
    }

    /// How to reach a session, when it can be notified.
    pub fn peer(&self, session: &str) -> Option<Peer<RoleServer>> {
        self.lock().get(session).and_then(|e| e.peer.clone())
    }

    /// Every session that can be notified, with its peer.
    pub fn peers(&self) -> Vec<(String, Peer<RoleServer>)> {
        self.lock()
            .iter()
            .filter_map(|(id, entry)| Some((id.clone(), entry.peer.clone()?)))
            .collect()
    }

    /// The sessions here that the client's `Mcp-Session-Id` names (usually one).
    pub fn under_shared_id(&self, shared_id: &str) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.shared_id.as_deref() == Some(shared_id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Records the fingerprint of the tools last listed to a session.
    pub fn listed(&self, session: &str, fingerprint: u64) {
        if let Some(entry) = self.lock().get_mut(session) {
            entry.listed = Some(fingerprint);
        }
    }

    /// The sessions that can be notified and have listed tools, with what they last saw.
    pub fn last_listed(&self) -> Vec<(String, u64)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.peer.is_some())
            .filter_map(|(id, e)| e.listed.map(|l| (id.clone(), l)))
            .collect()
    }

    /// Forgets a session; what it kept is the caller's to end, under the key returned.
    pub fn remove(&self, session: &str) -> Ended {
        let removed = {
            let mut sessions = self.lock();
            let removed = sessions.remove(session);
            crate::memory::shrink_when_sparse(&mut sessions);
            removed
        };
        let (sessionless, shared_id, resting) = removed.map_or((false, None, false), |entry| {
            (entry.sessionless, entry.shared_id, entry.resting)
        });
        let mut served_by_another = false;
        if let Some(name) = &shared_id {
            let mut named = self.lock_named();
            match named.get(name) {
                Some(serving) if serving == session => {
                    named.remove(name);
                    crate::memory::shrink_when_sparse(&mut named);
                }
                Some(_) => served_by_another = true,
                None => {}
            }
        }
        // A resting session's owner stays under its name for the connection that brings it back.
        if !resting && !served_by_another {
            self.disown(shared_id.as_deref().unwrap_or(session));
        }
        Ended {
            key: shared_id.unwrap_or_else(|| session.to_string()),
            sessionless,
            resting,
        }
    }

    /// Brings a session's reveals up to date from the shared store (another replica may have
    /// changed them). In process there is nothing to read.
    pub async fn load_reveals(
        &self,
        key: &str,
        disclosure: &Disclosure,
    ) -> Result<(), SharedStateError> {
        if !self.shared.is_shared() {
            return Ok(());
        }
        if let Some(snapshot) = self.shared.load_reveals(key).await? {
            disclosure.restore_session(key, snapshot);
        }
        Ok(())
    }

    /// The reveals under `key` before a call that may change them, when they are shared and so
    /// must be written back if it does (`None` when nothing is shared).
    pub fn reveals_before(&self, key: &str, disclosure: &Disclosure) -> Option<RevealsBefore> {
        self.shared
            .is_shared()
            .then(|| RevealsBefore(disclosure.session_snapshot(key)))
    }

    /// Writes the reveals under `key` to the shared store when a call changed them from `before`
    /// (a session that had none before counts as changed once it has some).
    pub async fn save_reveals_if_changed(
        &self,
        key: &str,
        before: Option<RevealsBefore>,
        disclosure: &Disclosure,
    ) -> Result<(), SharedStateError> {
        let Some(RevealsBefore(before)) = before else {
            return Ok(());
        };
        match disclosure.session_snapshot(key) {
            Some(after) if Some(&after) != before.as_ref() => {
                self.shared.save_reveals(key, &after).await
            }
            _ => Ok(()),
        }
    }

    /// Puts a large output stored here into the shared store, so that its handle works on every
    /// replica; a failure is logged (the handle still works here).
    pub async fn share_output(&self, shelf: &str, output: &StoredOutput) {
        if !self.shared.is_shared() {
            return;
        }
        let copy = SharedOutput {
            tool: output.tool.clone(),
            text: output.text.clone(),
        };
        if let Err(e) = self.shared.put_output(shelf, &output.handle, &copy).await {
            tracing::warn!(handle = %output.handle, error = %e, "large output not shared");
        }
    }

    /// Copies the output a large-output call names from the shared store when another replica
    /// stored it.
    pub async fn adopt_output(
        &self,
        store: &OffloadStore,
        key: &str,
        arguments: &Value,
    ) -> Result<(), SharedStateError> {
        if !self.shared.is_shared() {
            return Ok(());
        }
        let Some(handle) = arguments.get("handle").and_then(Value::as_str) else {
            return Ok(());
        };
        if store.get(key, handle).is_ok() {
            return Ok(());
        }
        if let Some(output) = self.shared.get_output(key, handle).await? {
            store.adopt(key, handle, &output.tool, output.text);
        }
        Ok(())
    }

    /// Tells the other replicas something about the session kept under `key`: the client's
    /// stream may be held by any of them. Nothing to tell in process.
    pub async fn tell(&self, key: &str, kind: NoticeKind) {
        if !self.shared.is_shared() {
            return;
        }
        if let Err(e) = self.shared.tell(key, kind).await {
            tracing::warn!(session = key, error = %e, "the other replicas were not told");
        }
    }

    /// Tells the other replicas that a resource a session subscribed to changed.
    pub async fn publish_updated(&self, session: &str, uri: String) {
        if let Some(key) = self.shared_id(session) {
            self.tell(&key, NoticeKind::ResourceUpdated { uri }).await;
        }
    }

    /// Sends `notifications/tools/list_changed` to one session.
    pub async fn tools_changed(&self, session: &str) {
        if let Some(peer) = self.peer(session) {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send tools/list_changed");
            }
        }
    }

    /// Sends `notifications/prompts/list_changed` to every session that can be reached: an
    /// upstream's prompts are the same for all of them (each re-lists within its own scope).
    pub async fn prompts_changed(&self, server: &str) {
        let peers = self.peers();
        tracing::debug!(server, sessions = peers.len(), "prompts changed upstream");
        for (session, peer) in peers {
            if let Err(e) = peer.notify_prompt_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send prompts/list_changed");
            }
        }
    }

    /// Acts on the other replicas' notices, the one loop that reads them; ends with the sessions.
    pub async fn follow_notices(
        sessions: Weak<Sessions>,
        mut notices: broadcast::Receiver<Notice>,
    ) {
        loop {
            let notice = notices.recv().await;
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            match notice {
                Ok(notice) => sessions.on_notice(notice).await,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "missed notices of other replicas");
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Sets what closes here a session its client ended on another replica.
    pub fn on_ended_elsewhere(&self, close: EndedElsewhere) {
        *self
            .ended_elsewhere
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(close);
    }

    /// Acts on another replica's notice: the sessions here named by it are notified, and one
    /// its client ended is closed here too.
    async fn on_notice(&self, notice: Notice) {
        if notice.kind == NoticeKind::SessionEnded {
            let close = self
                .ended_elsewhere
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(close) = close {
                close(notice.session.clone());
            }
        }
        let sessions = self.under_shared_id(&notice.session);
        tracing::debug!(from = %notice.from, session = %notice.session, kind = ?notice.kind, here = sessions.len(), "notice of another replica");
        for session in sessions {
            match &notice.kind {
                NoticeKind::ToolsChanged => self.tools_changed(&session).await,
                // Closed above: the listener's closing of the MCP session ends this one.
                NoticeKind::SessionEnded => {}
                NoticeKind::ResourceUpdated { uri } => {
                    if let Some(peer) = self.peer(&session) {
                        let update =
                            rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
                        if let Err(e) = peer.notify_resource_updated(update).await {
                            tracing::debug!(session, error = %e, "cannot send resources/updated");
                        }
                    }
                }
            }
        }
    }

    /// Whether other replicas may serve these sessions too.
    pub fn replicated(&self) -> bool {
        self.shared.is_shared()
    }
}

/// The most verbose log level of `sessions`, if any asked for one.
#[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
fn most_verbose(sessions: &HashMap<String, Session>) -> Option<LoggingLevel> {
    sessions
        .values()
        .filter_map(|e| e.log_level)
        .min_by_key(|level| crate::relay::severity(*level))
}

impl Session {
    fn link(&self, id: &str) -> Option<Link> {
        let (attached, reach) = self.attached.clone()?;
        Some(Link {
            session: id.to_string(),
            peer: self.peer.clone()?,
            reach,
            log_level: self.log_level,
            attached,
        })
    }
}

impl Downstream for Sessions {
    fn link(&self, session: &str) -> Option<Link> {
        self.lock().get(session)?.link(session)
    }

    fn links(&self) -> Vec<Link> {
        self.lock()
            .iter()
            .filter_map(|(id, entry)| entry.link(id))
            .collect()
    }

    #[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
    fn logging(&self, level: LoggingLevel) -> Vec<Link> {
        let severity = crate::relay::severity;
        self.lock()
            .iter()
            .filter(|(_, e)| {
                e.log_level
                    .is_some_and(|wanted| severity(level) >= severity(wanted))
            })
            .filter_map(|(id, entry)| entry.link(id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(Arc::new(crate::shared::InProcess::default()))
    }

    fn sees_nothing(scope: &Scope) -> bool {
        scope.patterns().is_some_and(|patterns| patterns.is_empty())
    }

    #[test]
    fn a_session_sees_nothing_until_bound_and_only_its_own_token_may_bind_it_again() {
        let sessions = sessions();
        let id = sessions.open();
        assert!(sees_nothing(&sessions.scope(&id)));
        let alice = Some(TokenId::from_stored("alice"));
        sessions
            .bind(&id, alice.clone(), Arc::new(Scope::all()))
            .unwrap();
        assert!(sessions.scope(&id).is_all());
        sessions
            .bind(&id, alice, Arc::new(Scope::none()))
            .expect("the same token binds again");
        assert!(
            sessions.scope(&id).is_all(),
            "binding again changes nothing"
        );
        assert!(matches!(
            sessions.bind(
                &id,
                Some(TokenId::from_stored("bob")),
                Arc::new(Scope::all())
            ),
            Err(GatewayError::SessionOfAnotherToken)
        ));
        assert!(matches!(
            sessions.bind("s999", None, Arc::new(Scope::all())),
            Err(GatewayError::SessionEnded { .. })
        ));
    }

    #[test]
    fn keys_follow_the_client_session_id_and_a_sessionless_request_keeps_outputs_by_token() {
        let sessions = sessions();
        let plain = sessions.open_with_scope(Arc::new(Scope::all()));
        assert_eq!(sessions.state_key(&plain), plain);
        assert_eq!(sessions.reveal_key(&plain), (plain.clone(), true));

        let named = sessions.open_with_scope(Arc::new(Scope::all()));
        sessions.name(&named, "mcp-1").unwrap();
        sessions.name(&named, "mcp-2").unwrap();
        assert_eq!(sessions.state_key(&named), "mcp-1", "the first name stays");
        assert_eq!(sessions.reveal_key(&named), ("mcp-1".to_string(), true));
        assert_eq!(sessions.named("mcp-1"), Some(named.clone()));
        assert_eq!(sessions.under_shared_id("mcp-1"), vec![named.clone()]);

        let once = sessions.open();
        sessions
            .bind(
                &once,
                Some(TokenId::from_stored("alice")),
                Arc::new(Scope::all()),
            )
            .unwrap();
        sessions.mark_sessionless(&once);
        assert_eq!(sessions.state_key(&once), "token:alice");
        assert_eq!(sessions.reveal_key(&once), (once.clone(), false));
        assert!(!sessions.rest(&once), "a sessionless request never rests");

        let ended = sessions.remove(&named);
        assert_eq!(
            ended,
            Ended {
                key: "mcp-1".to_string(),
                sessionless: false,
                resting: false
            }
        );
        assert_eq!(sessions.named("mcp-1"), None);
        assert!(
            sees_nothing(&sessions.scope(&named)),
            "an ended session sees nothing"
        );
        assert_eq!(sessions.len(), 2);
    }

    /// One map of owners: a session's owner moves to its `Mcp-Session-Id`, stays there while the
    /// session rests, binds the connection that brings it back, and goes when the session ends.
    #[test]
    fn a_named_session_keeps_its_owner_while_it_rests_and_loses_it_when_it_ends() {
        let sessions = sessions();
        let (alice, bob) = (
            Some(TokenId::from_stored("alice")),
            Some(TokenId::from_stored("bob")),
        );
        let first = sessions.open();
        sessions
            .bind(&first, alice.clone(), Arc::new(Scope::all()))
            .unwrap();
        sessions.name(&first, "mcp-1").unwrap();
        assert_eq!(sessions.owner_named("mcp-1"), Some(alice.clone()));
        assert!(sessions.rest(&first));
        sessions.remove(&first);
        assert_eq!(
            sessions.owner_named("mcp-1"),
            Some(alice.clone()),
            "a resting session keeps its owner"
        );

        // Its next connection: another token's is refused when it takes the name.
        let stranger = sessions.open();
        sessions
            .bind(&stranger, bob, Arc::new(Scope::all()))
            .unwrap();
        assert!(matches!(
            sessions.name(&stranger, "mcp-1"),
            Err(GatewayError::SessionOfAnotherToken)
        ));
        sessions.remove(&stranger);
        let back = sessions.open();
        sessions
            .bind(&back, alice.clone(), Arc::new(Scope::all()))
            .unwrap();
        sessions.name(&back, "mcp-1").unwrap();
        assert_eq!(sessions.owner_named("mcp-1"), Some(alice));
        assert_eq!(
            sessions.owners.lock().unwrap().len(),
            1,
            "one entry a session"
        );

        // It ends (not resting): its owner goes with it.
        sessions.remove(&back);
        assert_eq!(sessions.owner_named("mcp-1"), None);
        assert!(sessions.owners.lock().unwrap().is_empty());

        // The listener claims and forgets names it opened or found in the shared store.
        sessions.claim("mcp-2", None);
        assert_eq!(sessions.owner_named("mcp-2"), Some(None));
        sessions.disown("mcp-2");
        assert_eq!(sessions.owner_named("mcp-2"), None);
    }

    /// Log levels are the sessions': the upstreams are set to the most verbose any session
    /// asked for, and a session the relay cannot reach yet (not attached) is no link of it.
    #[test]
    #[allow(deprecated)] // logging/setLevel: still what every 2025-11-25 client speaks
    fn the_upstreams_log_at_the_most_verbose_level_a_session_asked_for() {
        let sessions = sessions();
        let (quiet, chatty) = (sessions.open(), sessions.open());
        assert_eq!(sessions.log_level(), None, "no session asked: no level");
        assert_eq!(
            sessions.set_log_level(&quiet, LoggingLevel::Error),
            LoggingLevel::Error
        );
        assert_eq!(
            sessions.set_log_level(&chatty, LoggingLevel::Debug),
            LoggingLevel::Debug
        );
        assert_eq!(
            sessions.set_log_level(&chatty, LoggingLevel::Warning),
            LoggingLevel::Warning,
            "a session's new level replaces its old one"
        );
        sessions.remove(&chatty);
        assert_eq!(sessions.log_level(), Some(LoggingLevel::Error));
        assert!(Downstream::link(&sessions, &quiet).is_none());
        assert!(Downstream::links(&sessions).is_empty());
    }

    #[test]
    fn a_resting_session_ends_as_resting() {
        let sessions = sessions();
        let id = sessions.open_with_scope(Arc::new(Scope::all()));
        sessions.name(&id, "mcp-9").unwrap();
        assert!(sessions.rest(&id));
        let ended = sessions.remove(&id);
        assert!(ended.resting);
        assert_eq!(ended.key, "mcp-9");
        assert!(!sessions.rest("s404"), "an unknown session does not rest");
    }

    /// A store other replicas would see: it keeps reveals and counts what was written.
    #[derive(Default)]
    struct Replicated {
        reveals: Mutex<HashMap<String, SessionSnapshot>>,
        saves: AtomicU64,
        notices: Mutex<Option<broadcast::Sender<Notice>>>,
    }

    impl Replicated {
        fn saves(&self) -> u64 {
            self.saves.load(Ordering::Relaxed)
        }

        fn sender(&self) -> broadcast::Sender<Notice> {
            self.notices
                .lock()
                .unwrap()
                .get_or_insert_with(|| broadcast::channel(8).0)
                .clone()
        }
    }

    #[async_trait::async_trait]
    impl SharedSessions for Replicated {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn is_shared(&self) -> bool {
            true
        }
        fn is_up(&self) -> bool {
            true
        }
        async fn check(&self) -> Result<(), SharedStateError> {
            Ok(())
        }
        async fn load_reveals(
            &self,
            key: &str,
        ) -> Result<Option<SessionSnapshot>, SharedStateError> {
            Ok(self.reveals.lock().unwrap().get(key).cloned())
        }
        async fn save_reveals(
            &self,
            key: &str,
            snapshot: &SessionSnapshot,
        ) -> Result<(), SharedStateError> {
            self.saves.fetch_add(1, Ordering::Relaxed);
            self.reveals
                .lock()
                .unwrap()
                .insert(key.to_string(), snapshot.clone());
            Ok(())
        }
        async fn put_output(
            &self,
            _: &str,
            _: &str,
            _: &SharedOutput,
        ) -> Result<(), SharedStateError> {
            Ok(())
        }
        async fn get_output(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<SharedOutput>, SharedStateError> {
            Ok(None)
        }
        async fn set_owner(
            &self,
            _: &str,
            _: Option<&TokenId>,
            _: usize,
        ) -> Result<Vec<String>, SharedStateError> {
            Ok(Vec::new())
        }
        async fn owner(&self, _: &str) -> Result<Option<Option<TokenId>>, SharedStateError> {
            Ok(None)
        }
        async fn end_session(&self, _: &str) -> Result<(), SharedStateError> {
            Ok(())
        }
        async fn publish(&self, notice: &Notice) -> Result<(), SharedStateError> {
            let _ = self.sender().send(notice.clone());
            Ok(())
        }
        fn notices(&self) -> broadcast::Receiver<Notice> {
            self.sender().subscribe()
        }
        fn replica(&self) -> &str {
            "replica-a"
        }
    }

    fn revealed(names: &[(&str, &str)]) -> SessionSnapshot {
        SessionSnapshot {
            revealed: names
                .iter()
                .map(|(server, name)| toolsearch_core::ToolId::new(*server, *name))
                .collect(),
            limit_set: None,
        }
    }

    #[tokio::test]
    async fn reveals_are_read_from_and_written_back_to_a_shared_store_only_when_they_change() {
        let store = Arc::new(Replicated::default());
        let sessions = Sessions::new(store.clone());
        let disclosure = Disclosure::new(Default::default()).unwrap();

        // Another replica revealed a tool: loading brings it here.
        store
            .reveals
            .lock()
            .unwrap()
            .insert("mcp-1".into(), revealed(&[("files", "read_file")]));
        sessions.load_reveals("mcp-1", &disclosure).await.unwrap();
        assert_eq!(
            disclosure.session_snapshot("mcp-1"),
            Some(revealed(&[("files", "read_file")]))
        );

        // A call that changes nothing writes nothing.
        let before = sessions.reveals_before("mcp-1", &disclosure);
        sessions
            .save_reveals_if_changed("mcp-1", before, &disclosure)
            .await
            .unwrap();
        assert_eq!(store.saves(), 0);

        // A session that had no reveals yet writes its first ones.
        let before = sessions.reveals_before("mcp-2", &disclosure);
        assert!(before.is_some(), "shared reveals are watched");
        disclosure.restore_session("mcp-2", revealed(&[("db", "query")]));
        sessions
            .save_reveals_if_changed("mcp-2", before, &disclosure)
            .await
            .unwrap();
        assert_eq!(store.saves(), 1);
        assert_eq!(
            store.reveals.lock().unwrap().get("mcp-2"),
            Some(&revealed(&[("db", "query")]))
        );

        // In process nothing is watched, read or written.
        let local = self::sessions();
        assert!(local.reveals_before("mcp-2", &disclosure).is_none());
    }

    #[tokio::test]
    async fn one_loop_reads_the_notices_of_other_replicas() {
        let store = Arc::new(Replicated::default());
        let sessions = Arc::new(Sessions::new(store.clone()));
        let (closed, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
        sessions.on_ended_elsewhere(Arc::new(move |id: String| {
            let _ = closed.send(id);
        }));
        tokio::spawn(Sessions::follow_notices(
            Arc::downgrade(&sessions),
            store.notices(),
        ));
        store.tell("mcp-7", NoticeKind::ToolsChanged).await.unwrap();
        store.tell("mcp-7", NoticeKind::SessionEnded).await.unwrap();
        let id = tokio::time::timeout(std::time::Duration::from_secs(10), closed_rx.recv())
            .await
            .expect("the listener is told within the time")
            .expect("the channel stays open");
        assert_eq!(id, "mcp-7", "only the ended session is closed");
    }
}
