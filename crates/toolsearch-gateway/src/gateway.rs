//! The gateway glue: the upstreams' tools indexed in one [`SearchEngine`], the core's
//! [`Disclosure`] deciding what each downstream session sees, and tool calls routed back to the
//! owning upstream. Each session has a scope for its lifetime: every tool over stdio, and over
//! HTTP the scope of the API token that opened it (nothing until a token is bound).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CompleteRequestParams, CompleteResult, ContentBlock, GetPromptRequestParams,
    GetPromptResult, ProgressToken, Prompt, ReadResourceRequestParams, ReadResourceResult,
    Reference, Resource, ResourceTemplate, SubscribeRequestParams, UnsubscribeRequestParams,
};
#[allow(deprecated)] // logging: still what 2025-11-25 clients and servers speak
use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use rmcp::service::RoleClient;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolsearch_core::disclosure::{
    error_result, Caller, Disclosure, DisclosureConfig, Dispatch, ServerStatus, CALL_TOOL,
};
use toolsearch_core::{
    parse_arguments, Preset, Scope, SearchConfig, SearchEngine, ServedId, Tool, ToolId,
};

use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::listing::Listing;
use crate::metrics::Face;
use crate::observe::Observer;
use crate::offload::{self, OffloadError, OffloadStore, OffloadTool};
use crate::prompt_search::{
    self, GetPromptArgs, PromptIndex, PromptTool, SearchPromptsArgs, DEFAULT_PROMPT_LIMIT,
    MAX_PROMPT_LIMIT,
};
use crate::relay::CallOrigin;
use crate::resources;
use crate::rest::SharedEngine;
use crate::semantic::Semantic;
use crate::shared::{Notice, NoticeKind, SharedOutput, SharedSessions, SharedStateError};
use crate::supervisor::{ServerState, UpstreamEvent, UpstreamManager};

/// Search results mark the tools of upstreams that are not ready, and name those upstreams.
struct UpstreamStatus {
    upstreams: UpstreamManager,
    /// `true` once every upstream's first start has settled.
    settled: tokio::sync::watch::Receiver<bool>,
}

impl ServerStatus for UpstreamStatus {
    fn unavailable(&self, server: &str) -> Option<String> {
        self.upstreams
            .state(server)
            .filter(|state| !state.is_ready())
            .map(|state| state.to_string())
    }

    fn not_ready(&self) -> Vec<(String, String)> {
        self.upstreams
            .states()
            .into_iter()
            .filter(|(_, state)| !state.is_ready())
            .map(|(server, state)| (server, state.to_string()))
            .collect()
    }

    fn settling(&self) -> bool {
        !*self.settled.borrow()
    }
}

/// Whether a server is still on its first start: starting, with no failed attempt before.
/// Ready, failed, restarting, or starting again after a failure all settle it.
fn on_first_start(state: &ServerState) -> bool {
    matches!(
        state,
        ServerState::Starting {
            last_error: None,
            ..
        }
    )
}

/// Who a downstream session belongs to, and so what it may see.
#[derive(Debug, Clone, Default)]
enum Access {
    /// Opened over HTTP, no token bound yet: it sees no tool.
    #[default]
    Unbound,
    /// Bound for the session's lifetime to a token (its identity; `None` without tokens, and
    /// over stdio) and that token's scope.
    Bound {
        owner: Option<crate::rest::TokenId>,
        scope: Arc<Scope>,
    },
}

/// A downstream session the gateway can notify.
#[derive(Default)]
struct SessionEntry {
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
    /// Whether the relay knows the session's peer (for the upstreams' requests to clients).
    attached: bool,
    /// Its connection is being let go while the session rests (`http.sessionRestAfterSecs`):
    /// what it keeps under its shared key stays for the connection that brings it back.
    resting: bool,
}

/// Everything the downstream server needs: engine, disclosure, upstreams, sessions.
pub struct Gateway {
    config: GatewayConfig,
    upstreams: UpstreamManager,
    engine: SharedEngine,
    disclosure: Disclosure,
    /// Which upstreams cannot take calls, for search results.
    status: Arc<dyn ServerStatus>,
    /// The large-output tools served through the disclosure, by the id it gave each.
    offload_tools: Vec<(ServedId, OffloadTool)>,
    /// `search_prompts` and `get_prompt`, when `toolSearch.searchPrompts` is on.
    prompt_tools: Vec<(ServedId, PromptTool)>,
    /// The upstreams' prompts and resource templates, for `search_prompts`.
    prompt_index: PromptIndex,
    sessions: Mutex<HashMap<String, SessionEntry>>,
    /// The session of each `Mcp-Session-Id` served here now.
    named: Mutex<HashMap<String, String>>,
    /// The latest `tools/list` answers, by catalog version, scope and reveals.
    listings: crate::listing::Listings,
    next_session: AtomicU64,
    call_timeout: Duration,
    /// Large outputs stored per session; `None` when `toolSearch.offload.enabled` is off.
    offload: Option<OffloadStore>,
    /// The embedding model and the tools' vectors, filled in the background.
    semantic: Arc<Semantic>,
    /// Metrics and the last searches.
    observer: Arc<Observer>,
    /// Set to `true` once every upstream's first start has settled (ready, failed, or out of
    /// `supervisor.startupTimeoutSecs`) and the ready ones are indexed: a session's first
    /// tools/list waits for it, so that a client that lists once sees every tool to be had.
    settled: tokio::sync::watch::Sender<bool>,
    /// Where sessions are kept between requests: this process, or a store shared by replicas.
    shared: Arc<dyn SharedSessions>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("preset", &self.disclosure.preset())
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

/// The core's disclosure settings from the `toolSearch` section.
pub fn disclosure_config(config: &GatewayConfig) -> DisclosureConfig {
    let ts = &config.tool_search;
    let defaults = DisclosureConfig::default();
    DisclosureConfig {
        preset: ts.preset,
        threshold: ts.threshold,
        max_tools_limit: ts.max_tools_limit.unwrap_or(defaults.max_tools_limit),
        tool_selection_order: ts.tool_selection_order,
        // "Server priority" is the order the config lists the servers in.
        server_priority: config
            .active_servers()
            .map(|(name, _)| name.to_string())
            .collect(),
        ..defaults
    }
}

/// The engine settings from the `toolSearch` section: the score threshold.
pub fn search_config(config: &GatewayConfig) -> SearchConfig {
    let ts = &config.tool_search;
    let defaults = SearchConfig::default();
    SearchConfig {
        threshold: ts.search_threshold.map_or(defaults.threshold, |t| t as f32),
        ..defaults
    }
}

/// An engine whose servers' tools enter through the config's catalog policy.
pub fn search_engine(config: &GatewayConfig) -> Result<SearchEngine> {
    Ok(SearchEngine::with_policy(
        search_config(config),
        config.catalog_policy(),
    )?)
}

impl Gateway {
    /// Starts the upstreams and the indexing task. Must run inside a tokio runtime.
    pub fn start(config: GatewayConfig) -> Result<Arc<Self>> {
        let mut disclosure = Disclosure::new(disclosure_config(&config))?;
        let engine = search_engine(&config)?;
        let upstreams = UpstreamManager::start(&config);
        let (settled, settled_rx) = tokio::sync::watch::channel(upstreams.servers().is_empty());
        let status: Arc<dyn ServerStatus> = Arc::new(UpstreamStatus {
            upstreams: upstreams.clone(),
            settled: settled_rx,
        });
        disclosure.set_server_status(status.clone());
        let offload_tools = if config.tool_search.offload.enabled {
            OffloadTool::ALL
                .into_iter()
                .map(|tool| {
                    let decl = tool.decl(&config.tool_search.offload);
                    (disclosure.serve(decl), tool)
                })
                .collect()
        } else {
            Vec::new()
        };
        let prompt_tools = if config.tool_search.search_prompts {
            PromptTool::ALL
                .into_iter()
                .map(|tool| (disclosure.serve(tool.decl()), tool))
                .collect()
        } else {
            Vec::new()
        };
        // Subscribe before reading the current tools so that no change falls in between.
        let events = upstreams.subscribe();
        let engine = Arc::new(RwLock::new(engine));
        let shared = crate::shared::from_config(
            &config.state,
            crate::shared::Limits {
                max_sessions: disclosure.config().max_sessions,
                max_outputs_per_session: config.tool_search.offload.max_outputs_per_session,
                max_bytes_per_session: config.tool_search.offload.max_bytes_per_session,
            },
        )
        .map_err(|e| GatewayError::SharedState(Box::new(e)))?;
        let notices = shared.notices();
        let observer = Arc::new(Observer::new());
        let semantic = Semantic::start(
            &config.tool_search.semantic,
            engine.clone(),
            crate::semantic::VectorSources {
                shared: shared.clone(),
                runtime: Some(tokio::runtime::Handle::current()),
                metrics: observer.metrics().clone(),
            },
        );
        let gateway = Arc::new(Self {
            shared,
            semantic,
            status,
            offload_tools,
            prompt_tools,
            prompt_index: PromptIndex::default(),
            observer,
            call_timeout: config.tool_search.call_timeout(),
            offload: config
                .tool_search
                .offload
                .enabled
                .then(|| OffloadStore::new(config.tool_search.offload.clone())),
            config,
            upstreams,
            engine,
            disclosure,
            sessions: Mutex::new(HashMap::new()),
            named: Mutex::new(HashMap::new()),
            listings: crate::listing::Listings::default(),
            next_session: AtomicU64::new(1),
            settled,
        });
        gateway.resync();
        tokio::spawn(follow_upstreams(Arc::downgrade(&gateway), events));
        tokio::spawn(settle_first_starts(Arc::downgrade(&gateway)));
        tokio::spawn(follow_notices(Arc::downgrade(&gateway), notices));
        if gateway.shared.is_shared() {
            let weak = Arc::downgrade(&gateway);
            gateway
                .upstreams
                .relay()
                .forward_updates(Arc::new(move |session: &str, uri: &str| {
                    if let Some(gateway) = weak.upgrade() {
                        let (session, uri) = (session.to_string(), uri.to_string());
                        tokio::spawn(async move { gateway.publish_updated(&session, uri).await });
                    }
                }));
        }
        Ok(gateway)
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    pub fn upstreams(&self) -> &UpstreamManager {
        &self.upstreams
    }

    pub fn engine(&self) -> &SharedEngine {
        &self.engine
    }

    pub fn disclosure(&self) -> &Disclosure {
        &self.disclosure
    }

    /// The large-output store, when offloading is on.
    pub fn offload(&self) -> Option<&OffloadStore> {
        self.offload.as_ref()
    }

    /// Which upstreams cannot take calls right now, for the REST API's results.
    pub fn server_status(&self) -> Arc<dyn ServerStatus> {
        self.status.clone()
    }

    /// The metrics and the last searches, shared with the REST API and the console.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// The `/metrics` page: the counters, with the gauges of state read now; for a scoped
    /// caller, only the series of servers its scope reaches.
    pub fn render_metrics(&self, scope: &Scope) -> String {
        let metrics = self.observer.metrics();
        for (server, state) in self.upstreams.states() {
            metrics.upstream(
                &server,
                state_label(&state),
                self.upstreams.tool_count(&server),
            );
        }
        metrics.sessions(self.lock_sessions().len());
        metrics.state_store(self.shared.kind(), self.shared.is_up());
        if let Some(store) = &self.offload {
            let (outputs, bytes) = store.totals();
            metrics.offloaded(outputs, bytes);
        }
        if scope.is_all() {
            return metrics.render();
        }
        let engine = self.read_engine();
        metrics.render_servers(|server| crate::relay::scope_reaches_server(scope, &engine, server))
    }

    /// Where search by meaning stands (model, vectors ready).
    pub fn semantic(&self) -> &Arc<Semantic> {
        &self.semantic
    }

    pub fn preset(&self) -> Preset {
        self.disclosure.preset()
    }

    fn read_engine(&self) -> RwLockReadGuard<'_, SearchEngine> {
        // Every engine update is one replace_server; a panic mid-way leaves the previous index.
        self.engine.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_engine(&self) -> RwLockWriteGuard<'_, SearchEngine> {
        self.engine.write().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_sessions(&self) -> MutexGuard<'_, HashMap<String, SessionEntry>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-indexes every server from the supervisor's current tool lists.
    fn resync(&self) {
        for server in self.upstreams.servers() {
            match self.upstreams.server_tools(&server) {
                Ok(tools) => self.index_server(&server, tools),
                Err(e) => tracing::warn!(server, error = %e, "cannot read the server's tools"),
            }
        }
    }

    /// Replaces one server's tools in the index; the engine applies the catalog policy.
    fn index_server(&self, server: &str, tools: Vec<Tool>) {
        let count = tools.len();
        let outcome = if tools.is_empty() {
            self.write_engine().remove_server(server)
        } else {
            self.write_engine().replace_server(server, tools)
        };
        self.semantic.tools_changed();
        match outcome {
            Ok(()) => tracing::info!(server, tools = count, "indexed the server's tools"),
            Err(e) => tracing::error!(server, error = %e, "cannot index the server's tools"),
        }
    }

    /// A new downstream session that sees no tool until [`Gateway::bind_session`] gives it a
    /// token's scope (an HTTP session, bound by its first request).
    pub fn new_session(&self) -> String {
        let id = format!("s{}", self.next_session.fetch_add(1, Ordering::Relaxed));
        self.lock_sessions()
            .insert(id.clone(), SessionEntry::default());
        id
    }

    /// A new downstream session that sees the tools of `scope` for its lifetime, with no token
    /// (a stdio session, with every tool).
    pub fn new_session_with_scope(&self, scope: Arc<Scope>) -> String {
        let id = self.new_session();
        if let Some(entry) = self.lock_sessions().get_mut(&id) {
            entry.access = Access::Bound { owner: None, scope };
        }
        id
    }

    /// Binds a session to the token `owner` (its identity, `None` without tokens) and its
    /// `scope`, for the session's lifetime. Binding again with the same token changes nothing;
    /// a request with another token is refused, so no token ever uses a session, its reveals or
    /// its stored outputs, opened with another.
    pub fn bind_session(
        &self,
        session: &str,
        owner: Option<crate::rest::TokenId>,
        scope: Arc<Scope>,
    ) -> Result<()> {
        let mut sessions = self.lock_sessions();
        let Some(entry) = sessions.get_mut(session) else {
            return Err(GatewayError::SessionEnded {
                session: session.to_string(),
            });
        };
        match &entry.access {
            Access::Unbound => {
                tracing::debug!(session, %scope, "session bound to its token's scope");
                entry.access = Access::Bound { owner, scope };
                Ok(())
            }
            Access::Bound { owner: bound, .. } if *bound == owner => Ok(()),
            Access::Bound { .. } => Err(GatewayError::SessionOfAnotherToken),
        }
    }

    /// The scope a session sees: its token's once bound; no tool before, or once it ended.
    pub fn session_scope(&self, session: &str) -> Arc<Scope> {
        match self.lock_sessions().get(session).map(|e| &e.access) {
            Some(Access::Bound { scope, .. }) => scope.clone(),
            Some(Access::Unbound) | None => Arc::new(Scope::none()),
        }
    }

    /// Marks a session as one request of a client without sessions (protocol 2026-07-28): the
    /// large outputs it stores are kept for its token (or for every tokenless caller) rather than
    /// for the session, which ends with the request, as SEP-2567 asks of state handles.
    pub fn mark_sessionless(&self, session: &str) {
        if let Some(entry) = self.lock_sessions().get_mut(session) {
            entry.sessionless = true;
        }
    }

    /// Names a session by the client's `Mcp-Session-Id`, the key of its state on every replica.
    pub fn name_session(&self, session: &str, mcp_session_id: &str) {
        if let Some(entry) = self.lock_sessions().get_mut(session) {
            if entry.shared_id.is_none() {
                entry.shared_id = Some(mcp_session_id.to_string());
                self.lock_named()
                    .insert(mcp_session_id.to_string(), session.to_string());
            }
        }
    }

    fn lock_named(&self) -> MutexGuard<'_, HashMap<String, String>> {
        // Every update is one insert or remove.
        self.named.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets the session named `mcp_session_id` rest, when it holds nothing that must stay with
    /// its connection (`Relay::holds_nothing`): once its connection is closed,
    /// its reveals and stored outputs stay under its name for the connection that brings it
    /// back. False (nothing changed) when it must stay as it is.
    pub fn rest_session(&self, mcp_session_id: &str) -> bool {
        let Some(session) = self.lock_named().get(mcp_session_id).cloned() else {
            return false;
        };
        if !self.upstreams.relay().holds_nothing(&session) {
            return false;
        }
        match self.lock_sessions().get_mut(&session) {
            Some(entry) if !entry.sessionless => {
                entry.resting = true;
                true
            }
            _ => false,
        }
    }

    /// Forgets what a resting session kept (its reveals and stored outputs): it ended without
    /// coming back.
    pub fn forget_rested(&self, mcp_session_id: &str) {
        self.disclosure.end_session(mcp_session_id);
        if let Some(store) = &self.offload {
            store.end_session(mcp_session_id);
        }
    }

    /// The store that keeps sessions between requests.
    pub fn shared(&self) -> &Arc<dyn SharedSessions> {
        &self.shared
    }

    /// The key of a session's large outputs: its `Mcp-Session-Id` over HTTP (the same on every
    /// replica), for a sessionless request its token's shelf (`token:<identity>`, `token:none`
    /// without tokens), else the session itself.
    fn state_key(&self, session: &str) -> String {
        match self.lock_sessions().get(session) {
            Some(SessionEntry {
                sessionless: true,
                access: Access::Bound { owner, .. },
                ..
            }) => match owner {
                Some(owner) => format!("token:{owner}"),
                None => "token:none".to_string(),
            },
            Some(SessionEntry {
                shared_id: Some(id),
                ..
            }) => id.clone(),
            _ => session.to_string(),
        }
    }

    /// The key of a session's reveals: its `Mcp-Session-Id` over HTTP (the same on every
    /// replica), else the session itself. The flag says whether they outlive the request: not for
    /// a request without a session (protocol 2026-07-28), whose `tools/list` must not depend on
    /// earlier calls (SEP-2567).
    fn reveal_key(&self, session: &str) -> (String, bool) {
        match self.lock_sessions().get(session) {
            Some(SessionEntry {
                sessionless: true, ..
            }) => (session.to_string(), false),
            Some(SessionEntry {
                shared_id: Some(id),
                ..
            }) => (id.clone(), true),
            _ => (session.to_string(), true),
        }
    }

    /// Brings the session's reveals up to date from the shared store (another replica may have
    /// changed them). In process there is nothing to read.
    async fn load_shared(&self, key: &str) -> Result<(), SharedStateError> {
        if !self.shared.is_shared() {
            return Ok(());
        }
        if let Some(snapshot) = self.shared.load_reveals(key).await? {
            self.disclosure.restore_session(key, snapshot);
        }
        Ok(())
    }

    /// Remembers how to reach a session, for list_changed, and tells the relay which upstreams
    /// its scope reaches (their logs and requests go to no other session).
    pub fn attach_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        {
            let mut sessions = self.lock_sessions();
            let entry = sessions.entry(session.to_string()).or_default();
            if entry.attached {
                return;
            }
            entry.attached = true;
            entry.peer.get_or_insert_with(|| peer.clone());
        }
        let scope = self.session_scope(session);
        let engine = self.engine.clone();
        let reach: crate::relay::Reach = Arc::new(move |server: &str| {
            scope.is_all()
                || crate::relay::scope_reaches_server(
                    &scope,
                    &engine.read().unwrap_or_else(|e| e.into_inner()),
                    server,
                )
        });
        self.upstreams.relay().attach(session, peer, reach);
    }

    /// Remembers how to send a session notifications, from its `initialize`: a replica that
    /// holds only the session's stream (its other requests go elsewhere) sees no later request.
    pub fn remember_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        if let Some(entry) = self.lock_sessions().get_mut(session) {
            entry.peer.get_or_insert_with(|| peer.clone());
        }
    }

    /// Forgets a session: its reveals and its peer.
    pub fn end_session(&self, session: &str) {
        let removed = {
            let mut sessions = self.lock_sessions();
            let removed = sessions.remove(session);
            crate::memory::shrink_when_sparse(&mut sessions);
            removed
        };
        let (sessionless, shared_id, resting) = removed.map_or((false, None, false), |entry| {
            (entry.sessionless, entry.shared_id, entry.resting)
        });
        if let Some(name) = &shared_id {
            let mut named = self.lock_named();
            if named.get(name).is_some_and(|s| s == session) {
                named.remove(name);
                crate::memory::shrink_when_sparse(&mut named);
            }
        }
        let orphaned = self.upstreams.relay().end_session(session);
        if !orphaned.is_empty() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let upstreams = self.upstreams.clone();
                runtime.spawn(async move {
                    for (server, uri) in orphaned {
                        unsubscribe_upstream(&upstreams, &server, &uri).await;
                    }
                });
            }
        }
        if resting {
            tracing::debug!(session, "session resting");
            crate::memory::session_ended();
            return;
        }
        // Its reveals and outputs are kept under its shared key; what the shared store holds
        // stays for the replicas that go on serving it.
        let key = shared_id.unwrap_or_else(|| session.to_string());
        self.disclosure.end_session(&key);
        if let Some(store) = &self.offload {
            // A sessionless request's outputs belong to its token's shelf, which outlives it.
            if !sessionless {
                store.end_session(&key);
            }
        }
        tracing::debug!(session, "session ended");
        crate::memory::session_ended();
    }

    /// What tools/list returns to this session: the tools of its scope, with its reveals (read
    /// from the shared store when replicas share one, which fails when that store does not
    /// answer).
    pub async fn list_tools(&self, session: &str) -> Result<Arc<Listing>> {
        // A client that lists once (most desktop clients) must see every upstream that could
        // start; once the first starts have settled this returns at once.
        self.first_starts_settled().await;
        let (key, kept) = self.reveal_key(session);
        if kept {
            self.load_shared(&key)
                .await
                .map_err(|e| GatewayError::SharedState(Box::new(e)))?;
        }
        let listing = self.listing(session);
        if let Some(entry) = self.lock_sessions().get_mut(session) {
            entry.listed = Some(listing.fingerprint);
        }
        Ok(listing)
    }

    /// The session's tools/list answer as it stands: its scope's tools with its reveals, computed
    /// once for every session with the same scope and reveals.
    fn listing(&self, session: &str) -> Arc<Listing> {
        let scope = self.session_scope(session);
        let (key, _) = self.reveal_key(session);
        let reveals = self.disclosure.session_snapshot(&key);
        let engine = self.read_engine();
        let version = engine.catalog().version();
        if let Some(listing) = self.listings.get(version, &scope, &reveals) {
            return listing;
        }
        let tools = self
            .disclosure
            .visible_tools(Caller::new(&key, &scope), &engine);
        drop(engine);
        let listing = Arc::new(Listing::new(&tools));
        self.listings.put(version, scope, reveals, listing.clone());
        listing
    }

    /// Every ready upstream's prompts that the session's scope allows, named as tools are
    /// (`server___prompt`, the scope's patterns read the same way). An upstream that offers no
    /// prompts, is down, or does not answer in the call timeout adds none (and is logged).
    pub async fn list_prompts(&self, session: &str) -> Vec<Prompt> {
        // Like tools/list: a client that lists once at start sees every upstream's.
        self.first_starts_settled().await;
        let scope = self.session_scope(session);
        let naming = self.read_engine().naming().clone();
        let mut all = Vec::new();
        for server in self.upstreams.servers() {
            let Ok(peer) = self.upstreams.ready_peer(&server) else {
                continue;
            };
            let offers = peer
                .peer_info()
                .is_some_and(|info| info.capabilities.prompts.is_some());
            if !offers {
                continue;
            }
            let listed =
                tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_prompts()).await;
            let prompts = match listed {
                Ok(Ok(prompts)) => prompts,
                Ok(Err(e)) => {
                    tracing::warn!(server, error = %e, "prompts/list failed; its prompts are left out");
                    continue;
                }
                Err(_) => {
                    tracing::warn!(server, "prompts/list timed out; its prompts are left out");
                    continue;
                }
            };
            for mut prompt in prompts {
                let id = ToolId::new(server.as_str(), prompt.name.as_str());
                if scope.allows(&id, &naming) {
                    prompt.name = naming.public_name(&id);
                    all.push(prompt);
                }
            }
        }
        all
    }

    /// `prompts/get` of a namespaced prompt, on its upstream, if the session's scope allows it.
    pub async fn get_prompt(
        &self,
        session: &str,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> Result<GetPromptResult> {
        let (server, prompt) = self.prompt_target(session, name)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let mut params = GetPromptRequestParams::new(prompt.as_str());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let failed = |message: String| GatewayError::PromptFailed {
            server: server.clone(),
            prompt: prompt.clone(),
            message,
        };
        let in_flight = self
            .upstreams
            .relay()
            .begin_call(&server, &CallOrigin::new(session, None));
        let outcome =
            tokio::time::timeout(self.upstreams.call_timeout(), peer.get_prompt(params)).await;
        if upstream_answered(&outcome) {
            in_flight.answered();
        }
        match outcome {
            Ok(Ok(mut result)) => {
                resources::rewrite_prompt_result(&mut result, &server);
                Ok(result)
            }
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer in {}s (toolSearch.callTimeoutSecs)",
                self.upstreams.call_timeout().as_secs_f64()
            ))),
        }
    }

    /// `completion/complete` for an argument of a namespaced prompt or of a gateway resource
    /// template, on its upstream (an upstream that offers no completions gives none).
    pub async fn complete(
        &self,
        session: &str,
        mut request: CompleteRequestParams,
    ) -> Result<CompleteResult> {
        let (server, upstream_name) = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (server, upstream_name) = self.prompt_target(session, &prompt.name)?;
                prompt.name = upstream_name.clone();
                (server, upstream_name)
            }
            Reference::Resource(resource) => {
                let (server, uri) = self.resource_target(session, &resource.uri)?;
                resource.uri = uri.clone();
                (server, uri)
            }
            _ => return Ok(CompleteResult::default()),
        };
        let peer = self.upstreams.ready_peer(&server)?;
        let offers = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.completions.is_some());
        if !offers {
            return Ok(CompleteResult::default());
        }
        match tokio::time::timeout(self.upstreams.call_timeout(), peer.complete(request)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(GatewayError::PromptFailed {
                server,
                prompt: upstream_name,
                message: format!("completion failed: {e}"),
            }),
            Err(_) => Err(GatewayError::PromptFailed {
                server,
                prompt: upstream_name,
                message: "completion timed out (toolSearch.callTimeoutSecs)".into(),
            }),
        }
    }

    /// The server and upstream name of a namespaced prompt the session may use.
    fn prompt_target(&self, session: &str, name: &str) -> Result<(String, String)> {
        // Before any matching: scope patterns are matched against the name.
        toolsearch_core::check_name_length(name, "prompt")?;
        let scope = self.session_scope(session);
        let naming = self.read_engine().naming().clone();
        let id = naming.parse(name);
        if id.server.is_empty()
            || !self.upstreams.servers().contains(&id.server)
            || !scope.allows(&id, &naming)
        {
            return Err(GatewayError::UnknownPrompt {
                name: name.to_string(),
                separator: naming.separator().to_string(),
            });
        }
        Ok((id.server, id.name))
    }

    /// The server and canonical upstream URI of a gateway resource URI the session may use. The
    /// scope is asked about the canonical form, and only that form goes upstream, so that `..`,
    /// `%2e%2e` or `\` cannot name to the server what the scope did not allow. A URI that has no
    /// canonical form is answered as an unknown one, so that nothing leaks.
    fn resource_target(&self, session: &str, uri: &str) -> Result<(String, String)> {
        let unknown = || GatewayError::UnknownResource {
            uri: uri.to_string(),
        };
        let (server, original) = resources::parse_public_uri(uri).ok_or_else(unknown)?;
        let canonical = resources::canonical_uri(&original).map_err(|reason| {
            tracing::debug!(session, server, %reason, "resource URI refused");
            unknown()
        })?;
        let scope = self.session_scope(session);
        let naming = self.read_engine().naming().clone();
        if !self.upstreams.servers().contains(&server)
            || !resources::in_scope(&scope, &naming, &server, &canonical)
        {
            return Err(unknown());
        }
        Ok((server, canonical))
    }

    /// The ready upstreams that offer resources (and so resource templates).
    fn resource_servers(&self) -> Vec<(String, Peer<RoleClient>)> {
        self.upstreams
            .servers()
            .into_iter()
            .filter_map(|server| {
                let peer = self.upstreams.ready_peer(&server).ok()?;
                let offers = peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.resources.is_some());
                offers.then_some((server, peer))
            })
            .collect()
    }

    /// Every ready upstream's resources that the session's scope allows (a resource counts as
    /// `server:<its uri>` for the scope's patterns), under gateway URIs. An upstream that fails or
    /// does not answer in the call timeout adds none (and is logged).
    pub async fn list_resources(&self, session: &str) -> Vec<Resource> {
        // Like tools/list: a client that lists once at start sees every upstream's.
        self.first_starts_settled().await;
        let scope = self.session_scope(session);
        let naming = self.read_engine().naming().clone();
        let mut all = Vec::new();
        for (server, peer) in self.resource_servers() {
            let listed =
                tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_resources())
                    .await;
            let Some(listed) = upstream_list(&server, "resources/list", listed) else {
                continue;
            };
            for mut resource in listed {
                // Listed as reading it would be judged: by its canonical form.
                let in_scope = resources::canonical_uri(&resource.uri).is_ok_and(|canonical| {
                    resources::in_scope(&scope, &naming, &server, &canonical)
                });
                if in_scope {
                    resource.uri = resources::public_uri(&server, &resource.uri);
                    all.push(resource);
                }
            }
        }
        all
    }

    /// Every ready upstream's resource templates the session's scope allows, under gateway URIs.
    pub async fn list_resource_templates(&self, session: &str) -> Vec<ResourceTemplate> {
        // Like tools/list: a client that lists once at start sees every upstream's.
        self.first_starts_settled().await;
        let scope = self.session_scope(session);
        let naming = self.read_engine().naming().clone();
        let mut all = Vec::new();
        for (server, peer) in self.resource_servers() {
            let listed = tokio::time::timeout(
                self.upstreams.call_timeout(),
                peer.list_all_resource_templates(),
            )
            .await;
            let Some(listed) = upstream_list(&server, "resources/templates/list", listed) else {
                continue;
            };
            for mut template in listed {
                let id = ToolId::new(server.as_str(), template.uri_template.as_str());
                if scope.allows(&id, &naming) {
                    template.uri_template = resources::public_uri(&server, &template.uri_template);
                    all.push(template);
                }
            }
        }
        all
    }

    /// `resources/read` of a gateway URI, on its upstream; URIs in the contents are gateway URIs.
    pub async fn read_resource(&self, session: &str, uri: &str) -> Result<ReadResourceResult> {
        let (server, original) = self.resource_target(session, uri)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let failed = |message: String| GatewayError::ResourceFailed {
            server: server.clone(),
            uri: original.clone(),
            action: "read",
            message,
        };
        let in_flight = self
            .upstreams
            .relay()
            .begin_call(&server, &CallOrigin::new(session, None));
        let read = peer.read_resource(ReadResourceRequestParams::new(original.as_str()));
        let outcome = tokio::time::timeout(self.upstreams.call_timeout(), read).await;
        if upstream_answered(&outcome) {
            in_flight.answered();
        }
        match outcome {
            Ok(Ok(mut result)) => {
                resources::rewrite_read_result(&mut result, &server);
                Ok(result)
            }
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer in {}s (toolSearch.callTimeoutSecs)",
                self.upstreams.call_timeout().as_secs_f64()
            ))),
        }
    }

    /// Subscribes the session to a resource's updates. The gateway holds one upstream
    /// subscription per resource, whatever the number of sessions subscribed to it.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    pub async fn subscribe(&self, session: &str, uri: &str) -> Result<()> {
        let (server, original) = self.resource_target(session, uri)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let offers = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !offers {
            return Err(GatewayError::ResourceFailed {
                server,
                uri: original,
                action: "subscribe to",
                message: "the server does not offer subscriptions".into(),
            });
        }
        let relay = self.upstreams.relay();
        if relay.subscribe(session, &server, &original) {
            let subscribed = tokio::time::timeout(
                self.upstreams.call_timeout(),
                peer.subscribe(SubscribeRequestParams::new(original.as_str())),
            )
            .await;
            let message = match subscribed {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("no answer in the call timeout".to_string()),
            };
            if let Some(message) = message {
                relay.unsubscribe(session, &server, &original);
                return Err(GatewayError::ResourceFailed {
                    server,
                    uri: original,
                    action: "subscribe to",
                    message,
                });
            }
        }
        tracing::debug!(session, server, uri = original, "subscribed");
        Ok(())
    }

    /// Ends the session's subscription; the upstream one ends with the last session's.
    pub async fn unsubscribe(&self, session: &str, uri: &str) -> Result<()> {
        let (server, original) = self.resource_target(session, uri)?;
        if self
            .upstreams
            .relay()
            .unsubscribe(session, &server, &original)
        {
            unsubscribe_upstream(&self.upstreams, &server, &original).await;
        }
        Ok(())
    }

    /// `logging/setLevel` of a session: it gets the upstreams' log messages of that level and
    /// above. Each upstream that offers logging is set to the most verbose level any session
    /// asked for; the gateway filters per session.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    pub async fn set_log_level(&self, session: &str, level: LoggingLevel) {
        let upstream_level = self.upstreams.relay().set_log_level(session, level);
        for server in self.upstreams.servers() {
            self.set_upstream_log_level(&server, upstream_level).await;
        }
    }

    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    async fn set_upstream_log_level(&self, server: &str, level: LoggingLevel) {
        let Ok(peer) = self.upstreams.ready_peer(server) else {
            return;
        };
        let offers = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.logging.is_some());
        if !offers {
            return;
        }
        let set = peer.set_level(SetLevelRequestParams::new(level));
        match tokio::time::timeout(self.upstreams.call_timeout(), set).await {
            Ok(Ok(())) => tracing::debug!(server, ?level, "upstream log level set"),
            Ok(Err(e)) => tracing::warn!(server, error = %e, "logging/setLevel failed"),
            Err(_) => tracing::warn!(server, "logging/setLevel timed out"),
        }
    }

    /// A client's `notifications/roots/list_changed`, passed to every ready upstream.
    pub async fn roots_changed(&self) {
        for server in self.upstreams.servers() {
            if let Ok(peer) = self.upstreams.ready_peer(&server) {
                if let Err(e) = peer.notify_roots_list_changed().await {
                    tracing::debug!(server, error = %e, "cannot send roots/list_changed");
                }
            }
        }
    }

    /// After an upstream (re)started: its resource subscriptions and log level as the sessions
    /// left them.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    async fn restore_upstream(&self, server: &str) {
        if let Some(level) = self.upstreams.relay().log_level() {
            self.set_upstream_log_level(server, level).await;
        }
        let uris = self.upstreams.relay().subscribed(server);
        let Ok(peer) = self.upstreams.ready_peer(server) else {
            return;
        };
        for uri in uris {
            let again = peer.subscribe(SubscribeRequestParams::new(uri.as_str()));
            match tokio::time::timeout(self.upstreams.call_timeout(), again).await {
                Ok(Ok(())) => tracing::debug!(server, uri, "subscription restored"),
                _ => tracing::warn!(server, uri, "cannot restore a resource subscription"),
            }
        }
    }

    /// Sends `notifications/resources/list_changed` to every session the gateway can reach.
    async fn notify_resources_changed(&self, server: &str) {
        let peers = self.upstreams.relay().peers();
        tracing::debug!(server, sessions = peers.len(), "resources changed upstream");
        for (session, peer) in peers {
            if let Err(e) = peer.notify_resource_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send resources/list_changed");
            }
        }
    }

    /// Instructions for the session's system prompt: its tools and categories.
    pub fn guidance(&self, session: &str) -> String {
        let scope = self.session_scope(session);
        // `initialize` is answered at once, before the upstreams are indexed: counts and
        // categories would describe an empty catalog, so say how to find tools instead.
        let mut guidance = if self.first_starts_done() {
            self.disclosure.guidance_in(&self.read_engine(), &scope)
        } else {
            self.starting_guidance()
        };
        if let Some(store) = &self.offload {
            if !guidance.is_empty() {
                guidance.push_str("\n\n");
            }
            guidance.push_str(&offload::guidance(store.config()));
        }
        guidance
    }

    /// Runs a tools/call for a session, in its scope: a meta-tool here, anything else on its
    /// upstream. Errors the model can act on come back as results with `isError`; a tool outside
    /// the scope is an unknown tool.
    pub async fn call_tool(
        self: &Arc<Self>,
        session: &str,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress_token: Option<ProgressToken>,
    ) -> CallToolResult {
        let scope = self.session_scope(session);
        let started = std::time::Instant::now();
        let (key, kept) = self.reveal_key(session);
        if kept {
            if let Err(e) = self.load_shared(&key).await {
                tracing::warn!(session, tool = name, error = %e, "call refused");
                return error_text(&GatewayError::SharedState(Box::new(e)));
            }
        }
        let before =
            (kept && self.shared.is_shared()).then(|| self.disclosure.session_snapshot(&key));
        // A meta-tool searches (and in hybrid mode embeds the query), an unknown name is matched
        // against the catalog for a did-you-mean, and arguments are checked against a schema:
        // CPU work that grows with the catalog or with what the client sent, and must not hold
        // an async worker, which the other sessions' I/O needs. Only a call whose tool resolves
        // at once, with small arguments, is dispatched inline.
        let searches = self.disclosure.is_meta_tool(name) && name != CALL_TOOL;
        let dispatch = if searches || !self.dispatch_is_cheap(name, &arguments, &scope) {
            let gateway = self.clone();
            let (key, scope, tool) = (key.clone(), scope.clone(), name.to_string());
            let searched = tokio::task::spawn_blocking(move || {
                let engine = gateway.read_engine();
                gateway
                    .disclosure
                    .dispatch(Caller::new(&key, &scope), &tool, arguments, &engine)
            })
            .await;
            match searched {
                Ok(dispatch) => dispatch,
                Err(e) => {
                    tracing::error!(session, tool = name, error = %e, "a meta-tool's task failed");
                    return error_text(&GatewayError::Downstream(format!(
                        "`{name}` failed inside the gateway ({e}); try the call again, and report it if it repeats"
                    )));
                }
            }
        } else {
            let engine = self.read_engine();
            self.disclosure
                .dispatch(Caller::new(&key, &scope), name, arguments, &engine)
        };
        if let Some(before) = before {
            let after = self.disclosure.session_snapshot(&key);
            if let (Some(after), true) = (&after, after != before) {
                if let Err(e) = self.shared.save_reveals(&key, after).await {
                    tracing::warn!(session, tool = name, error = %e, "reveals not shared");
                    return error_text(&GatewayError::SharedState(Box::new(e)));
                }
            }
        }
        match dispatch {
            Err(e) => {
                tracing::debug!(session, tool = name, error = %e, "call refused");
                json_result(error_result(&e), true)
            }
            Ok(Dispatch::Meta(outcome)) => {
                self.observer.search_result(
                    Face::Mcp,
                    Some(session),
                    &outcome.result,
                    started.elapsed(),
                );
                if outcome.visible_changed {
                    self.notify(session).await;
                    self.publish_tools_changed(&key).await;
                }
                json_result(outcome.result, false)
            }
            Ok(Dispatch::Served { id, arguments }) => {
                let prompt_tool = self
                    .prompt_tools
                    .iter()
                    .find(|(served, _)| *served == id)
                    .map(|(_, tool)| *tool);
                match prompt_tool {
                    Some(tool) => self.call_prompt_tool(session, tool, arguments).await,
                    None => self.call_offload(session, id, arguments, cancel).await,
                }
            }
            Ok(Dispatch::Call { tool, arguments }) => {
                let arguments = match arguments {
                    Value::Object(map) => Some(map),
                    _ => None,
                };
                let origin = CallOrigin::new(session, progress_token);
                let public = self.read_engine().naming().tool_name(&tool);
                self.observer.called(session, &public);
                let call_started = std::time::Instant::now();
                let outcome = self
                    .upstreams
                    .call_with_timeout(
                        &tool.server,
                        &tool.name,
                        arguments,
                        cancel,
                        self.call_timeout,
                        Some(&origin),
                    )
                    .await
                    .map(|mut result| {
                        resources::rewrite_call_result(&mut result, &tool.server);
                        result
                    });
                let failed = match &outcome {
                    Ok(result) => result.is_error == Some(true),
                    Err(_) => true,
                };
                self.observer.metrics().call(
                    &tool.server,
                    call_started.elapsed().as_secs_f64(),
                    failed,
                );
                match outcome {
                    Ok(result) => match &self.offload {
                        Some(store) if store.would_offload(&result) => {
                            let shelf = self.state_key(session);
                            // Storing counts the characters of what may be megabytes, and
                            // outlines it when it is JSON: on the blocking pool.
                            let gateway = self.clone();
                            let (key, tool_name) = (shelf.clone(), public.clone());
                            let stored = tokio::task::spawn_blocking(move || {
                                gateway.offload.as_ref().map(|store| {
                                    store.offload_result_keeping(&key, &tool_name, result)
                                })
                            })
                            .await;
                            let (result, stored) = match stored {
                                Ok(Some(stored)) => stored,
                                Ok(None) | Err(_) => {
                                    tracing::error!(session, tool = %public, "storing a large output failed");
                                    return error_text(&GatewayError::Downstream(format!(
                                        "the large output of `{public}` could not be stored; call the tool again, and report it if it repeats"
                                    )));
                                }
                            };
                            if let (Some(output), true) = (stored, self.shared.is_shared()) {
                                let copy = SharedOutput {
                                    tool: output.tool.clone(),
                                    text: output.text.clone(),
                                };
                                if let Err(e) =
                                    self.shared.put_output(&shelf, &output.handle, &copy).await
                                {
                                    // The handle still works on this replica.
                                    tracing::warn!(session, handle = %output.handle, error = %e, "large output not shared");
                                }
                            }
                            result
                        }
                        _ => result,
                    },
                    Err(e) => {
                        tracing::warn!(session, server = %tool.server, tool = %tool.name, error = %e, "call failed");
                        error_text(&e)
                    }
                }
            }
        }
    }

    /// Whether dispatching a call to `name` is cheap whatever the client sent: the tool it runs
    /// (or the one `call_tool` names) is served here or resolves in `scope`, and its arguments
    /// are small. Anything else is dispatched on the blocking pool.
    fn dispatch_is_cheap(&self, name: &str, arguments: &Value, scope: &Scope) -> bool {
        // `call_tool` unpacks only where the preset serves it; elsewhere it is just a name.
        let (target, arguments) = if name == CALL_TOOL && self.disclosure.is_meta_tool(CALL_TOOL) {
            match arguments.get("name").and_then(Value::as_str) {
                Some(target) => (target, arguments.get("arguments")),
                None => return false,
            }
        } else {
            (name, Some(arguments))
        };
        if target.len() > toolsearch_core::MAX_NAME_CHARS
            || !arguments.is_none_or(|a| json_within(a, INLINE_ARGUMENT_BYTES))
        {
            return false;
        }
        let served = self.offload_tools.iter().any(|(_, t)| t.name() == target)
            || self.prompt_tools.iter().any(|(_, t)| t.name() == target);
        served || self.read_engine().resolve_in(target, scope).is_some()
    }

    /// Runs `search_prompts` or `get_prompt` for a session, in its scope.
    async fn call_prompt_tool(
        self: &Arc<Self>,
        session: &str,
        tool: PromptTool,
        arguments: Value,
    ) -> CallToolResult {
        let refused = |message: String| json_result(serde_json::json!({ "error": message }), true);
        match tool {
            PromptTool::Search => {
                let args: SearchPromptsArgs = match parse_arguments(tool.name(), arguments) {
                    Ok(args) => args,
                    Err(e) => return refused(e.to_string()),
                };
                if self.prompt_index.needs_rebuild() {
                    self.rebuild_prompt_index().await;
                }
                let limit = args
                    .limit
                    .unwrap_or(DEFAULT_PROMPT_LIMIT)
                    .clamp(1, MAX_PROMPT_LIMIT);
                let offset = args.offset.unwrap_or(0);
                let scope = self.session_scope(session);
                // A search is CPU work that grows with the query: on the blocking pool.
                let gateway = self.clone();
                let searched = tokio::task::spawn_blocking(move || {
                    gateway
                        .prompt_index
                        .search(&args.query, limit, offset, &scope)
                })
                .await;
                match searched {
                    Ok(Ok(results)) => match serde_json::to_value(results) {
                        Ok(value) => json_result(value, false),
                        Err(e) => refused(format!("cannot write the results: {e}")),
                    },
                    Ok(Err(e)) => refused(e.to_string()),
                    Err(e) => refused(format!(
                        "the prompt search failed inside the gateway ({e}); try again, and report it if it repeats"
                    )),
                }
            }
            PromptTool::Get => {
                let args: GetPromptArgs = match parse_arguments(tool.name(), arguments) {
                    Ok(args) => args,
                    Err(e) => return refused(e.to_string()),
                };
                match self.get_prompt(session, &args.name, args.arguments).await {
                    Ok(prompt) => match serde_json::to_value(prompt) {
                        Ok(value) => json_result(value, false),
                        Err(e) => refused(format!("cannot write the prompt: {e}")),
                    },
                    Err(e) => refused(e.to_string()),
                }
            }
        }
    }

    /// How many prompts `server` offers, as last indexed (the index is brought up to date
    /// first); `None` when it offers none or was not ready.
    pub async fn prompt_count(&self, server: &str) -> Option<usize> {
        if self.prompt_index.needs_rebuild() {
            self.rebuild_prompt_index().await;
        }
        self.prompt_index.prompt_count(server)
    }

    /// Lists every ready upstream's prompts and resource templates into the prompt index.
    async fn rebuild_prompt_index(&self) {
        self.prompt_index.begin_rebuild();
        let mut servers = Vec::new();
        for server in self.upstreams.servers() {
            let Ok(peer) = self.upstreams.ready_peer(&server) else {
                continue;
            };
            let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
            let mut entries = Vec::new();
            if capabilities.as_ref().is_some_and(|c| c.prompts.is_some()) {
                let listed =
                    tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_prompts())
                        .await;
                for prompt in upstream_list(&server, "prompts/list", listed).unwrap_or_default() {
                    entries.push(prompt_search::prompt_as_tool(&server, &prompt));
                }
            }
            if capabilities.as_ref().is_some_and(|c| c.resources.is_some()) {
                let listed = tokio::time::timeout(
                    self.upstreams.call_timeout(),
                    peer.list_all_resource_templates(),
                )
                .await;
                for template in
                    upstream_list(&server, "resources/templates/list", listed).unwrap_or_default()
                {
                    entries.push(prompt_search::template_as_tool(&server, &template));
                }
            }
            servers.push((server, entries));
        }
        self.prompt_index.rebuild(servers);
    }

    /// Runs one of the large-output tools the disclosure dispatched to. A cancelled call is
    /// dropped, and a running jq worker with it.
    async fn call_offload(
        &self,
        session: &str,
        id: ServedId,
        arguments: Value,
        cancel: CancellationToken,
    ) -> CallToolResult {
        let tool = self
            .offload_tools
            .iter()
            .find(|(served, _)| *served == id)
            .map(|(_, tool)| *tool);
        let (Some(store), Some(tool)) = (&self.offload, tool) else {
            return json_result(
                serde_json::json!({ "error": "this tool is not served by this gateway" }),
                true,
            );
        };
        let key = self.state_key(session);
        if self.shared.is_shared() {
            if let Err(e) = self.adopt_shared_output(store, &key, &arguments).await {
                return json_result(serde_json::json!({ "error": e.to_string() }), true);
            }
        }
        let call = store.call(&key, tool, arguments, self.call_timeout);
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = cancel.cancelled() => Err(OffloadError::Cancelled { tool: tool.name() }),
        };
        match outcome {
            Ok(value) => json_result(value, false),
            Err(e) => {
                tracing::debug!(session, tool = tool.name(), error = %e, "large-output call refused");
                json_result(serde_json::json!({ "error": e.to_string() }), true)
            }
        }
    }

    /// Copies the output a large-output call names from the shared store when another replica
    /// stored it.
    async fn adopt_shared_output(
        &self,
        store: &OffloadStore,
        key: &str,
        arguments: &Value,
    ) -> Result<(), SharedStateError> {
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

    /// Tells the other replicas that a session's tool list changed: the client's stream may be
    /// held by any of them.
    async fn publish_tools_changed(&self, key: &str) {
        if !self.shared.is_shared() || self.preset() == Preset::Search {
            return;
        }
        if let Err(e) = self.shared.tell(key, NoticeKind::ToolsChanged).await {
            tracing::warn!(session = key, error = %e, "the other replicas were not told of a tool list change");
        }
    }

    /// Tells the other replicas that a resource a session subscribed to changed.
    async fn publish_updated(&self, session: &str, uri: String) {
        let Some(key) = self
            .lock_sessions()
            .get(session)
            .and_then(|e| e.shared_id.clone())
        else {
            return;
        };
        if let Err(e) = self
            .shared
            .tell(&key, NoticeKind::ResourceUpdated { uri })
            .await
        {
            tracing::warn!(session, error = %e, "the other replicas were not told of a resource update");
        }
    }

    /// Acts on another replica's notice: the sessions here named by it are notified.
    async fn on_notice(&self, notice: Notice) {
        let sessions: Vec<String> = self
            .lock_sessions()
            .iter()
            .filter(|(_, e)| e.shared_id.as_deref() == Some(notice.session.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        tracing::debug!(from = %notice.from, session = %notice.session, kind = ?notice.kind, here = sessions.len(), "notice of another replica");
        for session in sessions {
            match &notice.kind {
                NoticeKind::ToolsChanged => self.notify(&session).await,
                // The HTTP listener closes the MCP session, which ends this one.
                NoticeKind::SessionEnded => {}
                NoticeKind::ResourceUpdated { uri } => {
                    let peer = self
                        .lock_sessions()
                        .get(&session)
                        .and_then(|e| e.peer.clone());
                    if let Some(peer) = peer {
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

    /// Sends `notifications/tools/list_changed` to one session.
    async fn notify(&self, session: &str) {
        let peer = self
            .lock_sessions()
            .get(session)
            .and_then(|e| e.peer.clone());
        if let Some(peer) = peer {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send tools/list_changed");
            }
        }
    }

    /// Sends `notifications/prompts/list_changed` to every session the gateway can reach: an
    /// upstream's prompts are the same for all of them (each re-lists within its own scope).
    async fn notify_prompts_changed(&self, server: &str) {
        let peers: Vec<(String, Peer<RoleServer>)> = self
            .lock_sessions()
            .iter()
            .filter_map(|(id, entry)| Some((id.clone(), entry.peer.clone()?)))
            .collect();
        tracing::debug!(server, sessions = peers.len(), "prompts changed upstream");
        for (session, peer) in peers {
            if let Err(e) = peer.notify_prompt_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send prompts/list_changed");
            }
        }
    }

    /// After a catalog change: notifies the sessions whose tool list is now different.
    async fn notify_changed_sessions(&self) {
        let candidates: Vec<(String, u64)> = self
            .lock_sessions()
            .iter()
            .filter(|(_, e)| e.peer.is_some())
            .filter_map(|(id, e)| e.listed.map(|l| (id.clone(), l)))
            .collect();
        for (session, listed) in candidates {
            if self.listing(&session).fingerprint != listed {
                self.notify(&session).await;
            }
        }
    }

    /// Waits until every upstream has finished its first start (ready, or failed and waiting to
    /// retry), at most `limit`, so that the first tools/list already holds their tools. Returns
    /// the servers that are not ready.
    pub async fn wait_started(&self, limit: Duration) -> Vec<(String, ServerState)> {
        let _ = tokio::time::timeout(limit, self.first_starts_settled()).await;
        self.upstreams
            .states()
            .into_iter()
            .filter(|(_, s)| !s.is_ready())
            .collect()
    }

    /// Waits until every upstream's first start has settled and the ready ones are indexed (at
    /// most `supervisor.startupTimeoutSecs` and a second after the gateway started).
    pub async fn first_starts_settled(&self) {
        if self.first_starts_done() {
            return;
        }
        let mut settled = self.settled.subscribe();
        // The sender lives as long as the gateway, so this ends only when settled.
        let _ = settled.wait_for(|done| *done).await;
    }

    /// Whether every upstream's first start has settled.
    pub fn first_starts_done(&self) -> bool {
        *self.settled.borrow()
    }

    /// The instructions of a session that began before the upstreams' first starts settled.
    fn starting_guidance(&self) -> String {
        let servers = self.upstreams.servers();
        use toolsearch_core::disclosure::{SEARCH_AVAILABLE_TOOLS, SEARCH_TOOLS, TOOL_SEARCH};
        let search = match self.preset() {
            Preset::Passthrough => None,
            Preset::Search | Preset::Add => Some(SEARCH_TOOLS),
            Preset::Progressive => Some(TOOL_SEARCH),
            Preset::Limit => Some(SEARCH_AVAILABLE_TOOLS),
        };
        let how = match search {
            None => "Every tool will be in your tool list.".to_string(),
            Some(search) => format!(
                "If your tool list has `{search}`, call it with what you need, then run the tool it finds with `{CALL_TOOL}`; otherwise every tool is in your tool list."
            ),
        };
        format!(
            "Your tools come from {} server(s) ({}) that were starting when this session began. {how}",
            servers.len(),
            servers.join(", ")
        )
    }

    /// Stops the upstreams.
    pub async fn shutdown(&self) {
        self.upstreams.shutdown().await;
    }
}

/// Keeps the index current as upstreams change; ends with the gateway.
async fn follow_upstreams(
    gateway: Weak<Gateway>,
    mut events: tokio::sync::broadcast::Receiver<UpstreamEvent>,
) {
    loop {
        let event = events.recv().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        match event {
            Ok(UpstreamEvent::ToolsChanged { server, tools }) => {
                // Also after a (re)start: its prompts and templates may have changed with it.
                gateway.prompt_index.mark_stale();
                // Indexing is CPU work: off the async workers, which serve every session's I/O.
                let indexing = gateway.clone();
                let indexed =
                    tokio::task::spawn_blocking(move || indexing.index_server(&server, tools))
                        .await;
                if let Err(e) = indexed {
                    tracing::error!(error = %e, "indexing a server's tools failed");
                }
                gateway.notify_changed_sessions().await;
            }
            Ok(UpstreamEvent::StateChanged { server, state }) => {
                tracing::info!(server, %state, "upstream state");
                if matches!(state, ServerState::Restarting { .. }) {
                    gateway.observer.metrics().restarted(&server);
                }
                gateway.prompt_index.mark_stale();
                if state.is_ready() {
                    gateway.restore_upstream(&server).await;
                }
            }
            Ok(UpstreamEvent::PromptsChanged { server }) => {
                gateway.prompt_index.mark_stale();
                gateway.notify_prompts_changed(&server).await;
            }
            Ok(UpstreamEvent::ResourcesChanged { server }) => {
                gateway.prompt_index.mark_stale();
                gateway.notify_resources_changed(&server).await;
            }
            Err(RecvError::Lagged(missed)) => {
                gateway.prompt_index.mark_stale();
                tracing::warn!(missed, "missed upstream events; re-indexing every server");
                let indexing = gateway.clone();
                if let Err(e) = tokio::task::spawn_blocking(move || indexing.resync()).await {
                    tracing::error!(error = %e, "re-indexing every server failed");
                }
                gateway.notify_changed_sessions().await;
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Marks the first starts settled once no upstream is on its first start any more (or the
/// startup timeout and a second have passed), after indexing the ready ones; then tells the
/// sessions whose tool list that changed.
async fn settle_first_starts(gateway: Weak<Gateway>) {
    let (upstreams, limit) = match gateway.upgrade() {
        Some(gateway) => (
            gateway.upstreams.clone(),
            Duration::from_secs(
                gateway
                    .config
                    .supervisor
                    .startup_timeout_secs
                    .saturating_add(1),
            ),
        ),
        None => return,
    };
    // The upstreams start concurrently, so waiting on them one after the other takes as long as
    // the slowest.
    let all = async {
        for server in upstreams.servers() {
            let _ = upstreams
                .wait_for_state(&server, |s| !on_first_start(s))
                .await;
        }
    };
    let _ = tokio::time::timeout(limit, all).await;
    let Some(gateway) = gateway.upgrade() else {
        return;
    };
    // The indexing task may not have run yet for a server that just became ready.
    let indexing = gateway.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || indexing.resync()).await {
        tracing::error!(error = %e, "indexing the upstreams' tools failed");
    }
    gateway.settled.send_replace(true);
    let not_ready = gateway.status.not_ready();
    let ready = gateway.upstreams.servers().len() - not_ready.len();
    let tools = gateway.read_engine().catalog().len();
    if not_ready.is_empty() {
        tracing::info!(target: "upstream", "all {ready} upstreams ready: {tools} tools; tools/list now answers");
    } else {
        for (server, state) in &not_ready {
            tracing::warn!(target: "upstream", server, %state, "not ready after its first start; serving the others");
        }
        tracing::info!(target: "upstream", "{ready} upstreams ready: {tools} tools; tools/list now answers");
    }
    gateway.notify_changed_sessions().await;
}

/// Acts on the other replicas' notices; ends with the gateway.
async fn follow_notices(
    gateway: Weak<Gateway>,
    mut notices: tokio::sync::broadcast::Receiver<Notice>,
) {
    loop {
        let notice = notices.recv().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        match notice {
            Ok(notice) => gateway.on_notice(notice).await,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "missed notices of other replicas");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// A server state as the `state` label of the metrics.
pub(crate) fn state_label(state: &ServerState) -> &'static str {
    match state {
        ServerState::Starting { .. } => "starting",
        ServerState::Ready => "ready",
        ServerState::Restarting { .. } => "restarting",
        ServerState::Failed { .. } => "failed",
        ServerState::Stopped => "stopped",
    }
}

/// What an upstream listed, or `None` (logged) when it failed or timed out.
fn upstream_list<T>(
    server: &str,
    method: &str,
    listed: std::result::Result<
        std::result::Result<Vec<T>, rmcp::ServiceError>,
        tokio::time::error::Elapsed,
    >,
) -> Option<Vec<T>> {
    match listed {
        Ok(Ok(items)) => Some(items),
        Ok(Err(e)) => {
            tracing::warn!(server, error = %e, "{method} failed; its items are left out");
            None
        }
        Err(_) => {
            tracing::warn!(server, "{method} timed out; its items are left out");
            None
        }
    }
}

/// Ends the gateway's upstream subscription to a resource nobody follows any more.
#[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
async fn unsubscribe_upstream(upstreams: &UpstreamManager, server: &str, uri: &str) {
    let Ok(peer) = upstreams.ready_peer(server) else {
        return;
    };
    let done = peer.unsubscribe(UnsubscribeRequestParams::new(uri));
    match tokio::time::timeout(upstreams.call_timeout(), done).await {
        Ok(Ok(())) => tracing::debug!(server, uri, "upstream subscription ended"),
        _ => tracing::debug!(server, uri, "cannot end an upstream subscription"),
    }
}

/// A JSON value as a tool result: compact text (what models read) plus the same structure.
fn json_result(value: Value, is_error: bool) -> CallToolResult {
    let text = value.to_string();
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(value);
    result
}

/// A gateway error as a tool result the model can read.
fn error_text(error: &GatewayError) -> CallToolResult {
    json_result(serde_json::json!({ "error": error.to_string() }), true)
}

/// Whether an upstream request ended with the upstream's answer (a result or an MCP error), so
/// that nothing more of it can arrive; not on a timeout or a broken connection.
fn upstream_answered<T>(
    outcome: &std::result::Result<
        std::result::Result<T, rmcp::ServiceError>,
        tokio::time::error::Elapsed,
    >,
) -> bool {
    matches!(
        outcome,
        Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_)))
    )
}

/// Arguments up to about this many bytes of JSON are checked against a tool's schema inline.
const INLINE_ARGUMENT_BYTES: usize = 64 << 10;

/// Whether `value` takes about `budget` bytes of JSON or fewer (strings and keys by their
/// length, every other value as a few bytes); walks no more of it than that.
fn json_within(value: &Value, budget: usize) -> bool {
    let mut left = budget;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        // Containers are charged a byte per member before any member is looked at.
        let size = match value {
            Value::String(text) => text.len() + 2,
            Value::Array(items) => items.len() + 2,
            Value::Object(map) => 3 * map.len() + 2,
            _ => 8,
        };
        left = match left.checked_sub(size) {
            Some(left) => left,
            None => return false,
        };
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    left = match left.checked_sub(key.len()) {
                        Some(left) => left,
                        None => return false,
                    };
                    pending.push(item);
                }
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod dispatch_cost_tests {
    use super::*;

    #[test]
    fn json_within_counts_strings_keys_and_values() {
        assert!(json_within(&serde_json::json!({"city": "Oslo"}), 64));
        assert!(!json_within(&serde_json::json!({"x": "a".repeat(100)}), 64));
        assert!(!json_within(&serde_json::json!([[["a".repeat(100)]]]), 64));
        let wide: Vec<Value> = (0..100).map(Value::from).collect();
        assert!(!json_within(&Value::Array(wide), 64));
    }
}
