//! The gateway glue: the upstreams' tools indexed in one [`SearchEngine`], the core's
//! [`Disclosure`] deciding what each downstream session sees, and tool calls routed back to the
//! owning upstream. Each session has a scope for its lifetime: every tool over stdio, and over
//! HTTP the scope of the API token that opened it (nothing until a token is bound).

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, ProgressToken};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolsearch_core::disclosure::{
    error_result, Caller, Disclosure, DisclosureConfig, Dispatch, ServerStatus, CALL_TOOL,
};
use toolsearch_core::{parse_arguments, Preset, Scope, SearchConfig, SearchEngine, ServedId, Tool};

use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::listing::Listing;
use crate::metrics::Face;
use crate::observe::Observer;
use crate::offload::{self, OffloadError, OffloadStore, OffloadTool};
use crate::passthrough::{unsubscribe_upstream, upstream_list, Passthrough};
use crate::prompt_search::{
    self, GetPromptArgs, PromptIndex, PromptTool, SearchPromptsArgs, DEFAULT_PROMPT_LIMIT,
    MAX_PROMPT_LIMIT,
};
use crate::relay::CallOrigin;
use crate::resources;
use crate::rest::SharedEngine;
use crate::semantic::Semantic;
use crate::session::Sessions;
use crate::shared::{Notice, NoticeKind};
use crate::upstream::supervisor::{ServerState, UpstreamEvent, UpstreamManager};

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
    /// The downstream sessions, and the store they are kept in between requests.
    sessions: Sessions,
    /// Prompts, resources, subscriptions, logging and roots between sessions and upstreams.
    passthrough: Passthrough,
    /// The latest `tools/list` answers, by catalog version, scope and reveals.
    listings: crate::listing::Listings,
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
            sessions: Sessions::new(shared),
            passthrough: Passthrough::new(upstreams.clone(), engine.clone()),
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
            listings: crate::listing::Listings::default(),
            settled,
        });
        gateway.resync();
        tokio::spawn(follow_upstreams(Arc::downgrade(&gateway), events));
        tokio::spawn(settle_first_starts(Arc::downgrade(&gateway)));
        tokio::spawn(follow_notices(Arc::downgrade(&gateway), notices));
        if gateway.sessions.replicated() {
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
        metrics.sessions(self.sessions.len());
        let store = self.sessions.store();
        metrics.state_store(store.kind(), store.is_up());
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

    /// The downstream sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Everything MCP carries besides tools.
    pub(crate) fn passthrough(&self) -> &Passthrough {
        &self.passthrough
    }

    /// Lets the session named `mcp_session_id` rest, when it holds nothing that must stay with
    /// its connection (`Relay::holds_nothing`): once its connection is closed,
    /// its reveals and stored outputs stay under its name for the connection that brings it
    /// back. False (nothing changed) when it must stay as it is.
    pub fn rest_session(&self, mcp_session_id: &str) -> bool {
        let Some(session) = self.sessions.named(mcp_session_id) else {
            return false;
        };
        self.upstreams.relay().holds_nothing(&session) && self.sessions.rest(&session)
    }

    /// Forgets what a resting session kept (its reveals and stored outputs): it ended without
    /// coming back.
    pub fn forget_rested(&self, mcp_session_id: &str) {
        self.disclosure.end_session(mcp_session_id);
        if let Some(store) = &self.offload {
            store.end_session(mcp_session_id);
        }
    }

    /// Remembers how to reach a session, for list_changed, and tells the relay which upstreams
    /// its scope reaches (their logs and requests go to no other session).
    pub fn attach_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        if !self.sessions.attach(session, peer) {
            return;
        }
        let scope = self.sessions.scope(session);
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

    /// Forgets a session: its reveals and its peer.
    pub fn end_session(&self, session: &str) {
        let ended = self.sessions.remove(session);
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
        if ended.resting {
            tracing::debug!(session, "session resting");
            crate::memory::session_ended();
            return;
        }
        // Its reveals and outputs are kept under its shared key; what the shared store holds
        // stays for the replicas that go on serving it.
        self.disclosure.end_session(&ended.key);
        if let Some(store) = &self.offload {
            // A sessionless request's outputs belong to its token's shelf, which outlives it.
            if !ended.sessionless {
                store.end_session(&ended.key);
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
        let (key, kept) = self.sessions.reveal_key(session);
        if kept {
            self.sessions
                .load_reveals(&key, &self.disclosure)
                .await
                .map_err(|e| GatewayError::SharedState(Box::new(e)))?;
        }
        let listing = self.listing(session);
        self.sessions.listed(session, listing.fingerprint);
        Ok(listing)
    }

    /// The session's tools/list answer as it stands: its scope's tools with its reveals, computed
    /// once for every session with the same scope and reveals.
    fn listing(&self, session: &str) -> Arc<Listing> {
        let scope = self.sessions.scope(session);
        let (key, _) = self.sessions.reveal_key(session);
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

    /// Instructions for the session's system prompt: its tools and categories.
    pub fn guidance(&self, session: &str) -> String {
        let scope = self.sessions.scope(session);
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
        let scope = self.sessions.scope(session);
        let started = std::time::Instant::now();
        let (key, kept) = self.sessions.reveal_key(session);
        if kept {
            if let Err(e) = self.sessions.load_reveals(&key, &self.disclosure).await {
                tracing::warn!(session, tool = name, error = %e, "call refused");
                return error_text(&GatewayError::SharedState(Box::new(e)));
            }
        }
        let before = kept
            .then(|| self.sessions.reveals_before(&key, &self.disclosure))
            .flatten();
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
        if let Err(e) = self
            .sessions
            .save_reveals_if_changed(&key, before, &self.disclosure)
            .await
        {
            tracing::warn!(session, tool = name, error = %e, "reveals not shared");
            return error_text(&GatewayError::SharedState(Box::new(e)));
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
                            let shelf = self.sessions.state_key(session);
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
                            if let Some(output) = stored {
                                self.sessions.share_output(&shelf, &output).await;
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
                let scope = self.sessions.scope(session);
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
                match self
                    .passthrough
                    .get_prompt(&self.sessions.get(session), &args.name, args.arguments)
                    .await
                {
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
        let key = self.sessions.state_key(session);
        if let Err(e) = self.sessions.adopt_output(store, &key, &arguments).await {
            return json_result(serde_json::json!({ "error": e.to_string() }), true);
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

    /// Tells the other replicas that a session's tool list changed: the client's stream may be
    /// held by any of them.
    async fn publish_tools_changed(&self, key: &str) {
        if self.preset() != Preset::Search {
            self.sessions.tell(key, NoticeKind::ToolsChanged).await;
        }
    }

    /// Tells the other replicas that a resource a session subscribed to changed.
    async fn publish_updated(&self, session: &str, uri: String) {
        if let Some(key) = self.sessions.shared_id(session) {
            self.sessions
                .tell(&key, NoticeKind::ResourceUpdated { uri })
                .await;
        }
    }

    /// Acts on another replica's notice: the sessions here named by it are notified.
    async fn on_notice(&self, notice: Notice) {
        let sessions = self.sessions.under_shared_id(&notice.session);
        tracing::debug!(from = %notice.from, session = %notice.session, kind = ?notice.kind, here = sessions.len(), "notice of another replica");
        for session in sessions {
            match &notice.kind {
                NoticeKind::ToolsChanged => self.notify(&session).await,
                // The HTTP listener closes the MCP session, which ends this one.
                NoticeKind::SessionEnded => {}
                NoticeKind::ResourceUpdated { uri } => {
                    if let Some(peer) = self.sessions.peer(&session) {
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
        if let Some(peer) = self.sessions.peer(session) {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send tools/list_changed");
            }
        }
    }

    /// Sends `notifications/prompts/list_changed` to every session the gateway can reach: an
    /// upstream's prompts are the same for all of them (each re-lists within its own scope).
    async fn notify_prompts_changed(&self, server: &str) {
        let peers = self.sessions.peers();
        tracing::debug!(server, sessions = peers.len(), "prompts changed upstream");
        for (session, peer) in peers {
            if let Err(e) = peer.notify_prompt_list_changed().await {
                tracing::debug!(session, error = %e, "cannot send prompts/list_changed");
            }
        }
    }

    /// After a catalog change: notifies the sessions whose tool list is now different.
    async fn notify_changed_sessions(&self) {
        let candidates = self.sessions.last_listed();
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
                    gateway.passthrough.restore_upstream(&server).await;
                }
            }
            Ok(UpstreamEvent::PromptsChanged { server }) => {
                gateway.prompt_index.mark_stale();
                gateway.notify_prompts_changed(&server).await;
            }
            Ok(UpstreamEvent::ResourcesChanged { server }) => {
                gateway.prompt_index.mark_stale();
                gateway.passthrough.notify_resources_changed(&server).await;
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
