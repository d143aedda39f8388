//! The gateway's composition: start-up (the parts below built and joined), and the loop that
//! follows the upstreams. What a session sees is the core's [`Disclosure`] over one
//! [`SearchEngine`]; sessions, calls, pass-through and indexing are types of their own.

use std::sync::{Arc, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use rmcp::model::{CallToolResult, ProgressToken};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolsearch_core::disclosure::{Disclosure, ServerStatus};
use toolsearch_core::{Preset, SearchEngine};

use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::indexing::Indexer;
use crate::listing::Listing;
use crate::observe::Observer;
use crate::offload::OffloadStore;
use crate::passthrough::Passthrough;
use crate::rest::SharedEngine;
use crate::semantic::Semantic;
use crate::session::{Kept, Sessions};
use crate::startup::FirstStarts;
use crate::tools::{ServedTools, ToolCalls};
use crate::upstream::sign_in::SignIns;
use crate::upstream::supervisor::{ServerState, UpstreamEvent, UpstreamManager};

/// Everything the downstream server needs: engine, disclosure, upstreams, sessions.
pub struct Gateway {
    config: GatewayConfig,
    upstreams: UpstreamManager,
    engine: SharedEngine,
    disclosure: Arc<Disclosure>,
    /// Which upstreams cannot take calls, for search results.
    status: Arc<dyn ServerStatus>,
    /// `tools/call`: meta-tools, served tools, and calls forwarded to their upstream.
    calls: Arc<ToolCalls>,
    /// The downstream sessions, and the store they are kept in between requests.
    sessions: Arc<Sessions>,
    /// Prompts, resources, subscriptions, logging and roots between sessions and upstreams.
    passthrough: Arc<Passthrough>,
    /// The latest `tools/list` answers, by catalog version, scope and reveals.
    listings: crate::listing::Listings,
    /// The embedding model and the tools' vectors, filled in the background.
    semantic: Arc<Semantic>,
    /// Keeps the engine in step with the upstreams' tool lists.
    indexer: Indexer,
    /// Metrics and the last searches.
    observer: Arc<Observer>,
    /// Whether the upstreams' first starts have settled: a session's first tools/list waits.
    first_starts: Arc<FirstStarts>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("preset", &self.disclosure.preset())
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Starts the upstreams and the indexing task. Must run inside a tokio runtime.
    pub fn start(config: GatewayConfig) -> Result<Arc<Self>> {
        let mut disclosure = Disclosure::new(config.disclosure_config())?;
        let engine = config.search_engine()?;
        let sign_ins =
            SignIns::from_state(&config.state).map_err(|e| GatewayError::SignIns(e.to_string()))?;
        if let Some(warning) = crate::upstream::sign_in::unshared(&config.state) {
            if config.has_http_servers() {
                tracing::warn!("{warning}");
            }
        }
        let upstreams = UpstreamManager::start(&config, sign_ins);
        let first_starts =
            FirstStarts::new(upstreams.clone(), config.supervisor.startup_timeout_secs);
        let status = first_starts.status();
        disclosure.set_server_status(status.clone());
        let served = ServedTools::register(&mut disclosure, &config, upstreams.clone());
        // Subscribe before reading the current tools so that no change falls in between.
        let events = upstreams.subscribe();
        let engine = Arc::new(RwLock::new(engine));
        let shared = shared_store(&config, disclosure.config().max_sessions)?;
        let notices = shared.notices();
        let sessions = Arc::new(Sessions::new(shared));
        upstreams.relay().reach_sessions(sessions.clone());
        let observer = Arc::new(Observer::new());
        let semantic = Semantic::start(
            &config.tool_search.semantic,
            engine.clone(),
            crate::semantic::VectorSources {
                shared: sessions.replicated().then(|| sessions.store().clone()),
                runtime: Some(tokio::runtime::Handle::current()),
                metrics: observer.metrics().clone(),
            },
        );
        let disclosure = Arc::new(disclosure);
        let passthrough = Arc::new(Passthrough::new(&upstreams, &engine, &sessions));
        let calls = Arc::new(ToolCalls {
            disclosure: disclosure.clone(),
            engine: engine.clone(),
            upstreams: upstreams.clone(),
            observer: observer.clone(),
            sessions: sessions.clone(),
            passthrough: passthrough.clone(),
            served,
            call_timeout: config.tool_search.call_timeout(),
        });
        let gateway = Arc::new(Self {
            indexer: Indexer::new(engine.clone(), upstreams.clone(), semantic.clone()),
            sessions,
            passthrough,
            semantic,
            status,
            calls,
            observer,
            config,
            upstreams,
            engine,
            disclosure,
            listings: crate::listing::Listings::default(),
            first_starts,
        });
        gateway.indexer.resync_now();
        tokio::spawn(follow_upstreams(Arc::downgrade(&gateway), events));
        tokio::spawn(settle_first_starts(Arc::downgrade(&gateway)));
        tokio::spawn(Sessions::follow_notices(
            Arc::downgrade(&gateway.sessions),
            notices,
        ));
        if gateway.sessions.replicated() {
            gateway.publish_resource_updates();
        }
        Ok(gateway)
    }

    /// Resource updates an upstream sends here reach a subscriber whose stream another replica
    /// holds.
    fn publish_resource_updates(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        self.upstreams
            .relay()
            .forward_updates(Arc::new(move |session: &str, uri: &str| {
                if let Some(gateway) = weak.upgrade() {
                    let (session, uri) = (session.to_string(), uri.to_string());
                    let publish =
                        async move { gateway.sessions.publish_updated(&session, uri).await };
                    tokio::spawn(publish);
                }
            }));
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
        self.calls.served.offload().map(|store| store.as_ref())
    }

    /// Which upstreams cannot take calls right now, for the REST API's results.
    pub fn server_status(&self) -> Arc<dyn ServerStatus> {
        self.status.clone()
    }

    /// The metrics and the last searches, shared with the REST API and the console.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
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

    /// The downstream sessions.
    pub(crate) fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// The tools the gateway serves itself (large outputs, prompt search).
    pub(crate) fn served(&self) -> &ServedTools {
        &self.calls.served
    }

    /// Everything MCP carries besides tools.
    pub(crate) fn passthrough(&self) -> &Passthrough {
        &self.passthrough
    }

    /// What the sessions keep elsewhere, ended or kept with them.
    pub(crate) fn kept(&self) -> Kept<'_> {
        Kept {
            disclosure: &self.disclosure,
            offload: self.offload(),
            upstreams: &self.upstreams,
            engine: &self.engine,
        }
    }

    /// Remembers how to reach a session, for list_changed, and tells the relay which upstreams
    /// its scope reaches (their logs and requests go to no other session).
    pub fn attach_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        self.sessions.attach_reaching(session, peer, &self.kept());
    }

    /// Ends a session, and what it kept (`Sessions::end`).
    pub fn end_session(&self, session: &str) {
        self.sessions.end(session, &self.kept());
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
        let (key, _) = self.sessions.reveal_key(session);
        let scope = self.sessions.scope(session);
        self.listings
            .answer(&self.disclosure, &self.engine, &key, scope)
    }

    /// Instructions for the session's system prompt: its tools and categories.
    pub fn guidance(&self, session: &str) -> String {
        let scope = self.sessions.scope(session);
        // `initialize` is answered at once, before the upstreams are indexed: counts and
        // categories would describe an empty catalog, so say how to find tools instead.
        let guidance = if self.first_starts_done() {
            self.disclosure.guidance_in(&self.read_engine(), &scope)
        } else {
            self.first_starts.starting_guidance(self.preset())
        };
        crate::payload::instructions(guidance, self.served_guidance().as_deref())
    }

    /// What the served tools add to every session's instructions (the large-output tools').
    pub fn served_guidance(&self) -> Option<String> {
        self.calls.served.guidance()
    }

    /// Runs a tools/call for a session, in its scope (`tools.rs`). Errors the model can act on
    /// come back as results with `isError`; a tool outside the scope is an unknown tool.
    pub async fn call_tool(
        &self,
        session: &str,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress_token: Option<ProgressToken>,
    ) -> CallToolResult {
        self.calls
            .call(session, name, arguments, cancel, progress_token)
            .await
    }

    /// After a catalog change: notifies the sessions whose tool list is now different.
    async fn notify_changed_sessions(&self) {
        let candidates = self.sessions.last_listed();
        for (session, listed) in candidates {
            if self.listing(&session).fingerprint != listed {
                self.sessions.tools_changed(&session).await;
            }
        }
    }

    /// Waits at most `limit` for the upstreams' first starts; the servers not ready then.
    pub async fn wait_started(&self, limit: Duration) -> Vec<(String, ServerState)> {
        self.first_starts.wait(limit).await
    }

    /// Waits until the upstreams' first starts settled and the ready ones are indexed.
    pub async fn first_starts_settled(&self) {
        self.first_starts.settled().await
    }

    /// Whether every upstream's first start has settled.
    pub fn first_starts_done(&self) -> bool {
        self.first_starts.done()
    }

    /// Stops the upstreams.
    pub async fn shutdown(&self) {
        self.upstreams.shutdown().await;
    }
}

/// Where sessions are kept between requests (`[state]`), bounded as the config says.
fn shared_store(
    config: &GatewayConfig,
    max_sessions: usize,
) -> Result<Arc<dyn crate::shared::SharedSessions>> {
    let offload = &config.tool_search.offload;
    let limits = crate::shared::Limits {
        max_sessions,
        max_outputs_per_session: offload.max_outputs_per_session,
        max_bytes_per_session: offload.max_bytes_per_session,
    };
    crate::shared::from_config(&config.state, limits)
        .map_err(|e| GatewayError::SharedState(Box::new(e)))
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
                gateway.calls.served.prompts_changed();
                gateway.indexer.index_server(server, tools).await;
                gateway.notify_changed_sessions().await;
            }
            Ok(UpstreamEvent::StateChanged { server, state }) => {
                tracing::info!(server, %state, "upstream state");
                if matches!(state, ServerState::Restarting { .. }) {
                    gateway.observer.metrics().restarted(&server);
                }
                gateway.calls.served.prompts_changed();
                if state.is_ready() {
                    gateway.passthrough.restore_upstream(&server).await;
                }
            }
            Ok(UpstreamEvent::PromptsChanged { server }) => {
                gateway.calls.served.prompts_changed();
                gateway.sessions.prompts_changed(&server).await;
            }
            Ok(UpstreamEvent::ResourcesChanged { server }) => {
                gateway.calls.served.prompts_changed();
                gateway.passthrough.notify_resources_changed(&server).await;
            }
            Err(RecvError::Lagged(missed)) => {
                gateway.calls.served.prompts_changed();
                tracing::warn!(missed, "missed upstream events; re-indexing every server");
                gateway.indexer.resync().await;
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
    let Some(first_starts) = gateway.upgrade().map(|g| g.first_starts.clone()) else {
        return;
    };
    first_starts.wait_for_upstreams().await;
    let Some(gateway) = gateway.upgrade() else {
        return;
    };
    // The indexing task may not have run yet for a server that just became ready.
    gateway.indexer.resync().await;
    first_starts.mark_settled(gateway.read_engine().catalog().len());
    gateway.semantic.upstreams_settled();
    gateway.notify_changed_sessions().await;
}
