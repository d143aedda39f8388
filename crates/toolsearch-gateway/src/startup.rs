//! The upstreams' first starts. The listener opens at once; a session's first `tools/list` (and
//! its prompts and resources lists) waits until every upstream's first start has settled (ready,
//! failed, or out of `supervisor.startupTimeoutSecs`) and the ready ones are indexed, so that a
//! client that lists once sees every tool to be had. Later lists never wait.

use std::sync::Arc;
use std::time::Duration;

use toolsearch_core::disclosure::{
    ServerStatus, CALL_TOOL, SEARCH_AVAILABLE_TOOLS, SEARCH_TOOLS, TOOL_SEARCH,
};
use toolsearch_core::Preset;

use crate::upstream::supervisor::{ServerState, UpstreamManager};

/// Whether the upstreams' first starts have settled, and waiting for it.
pub(crate) struct FirstStarts {
    upstreams: UpstreamManager,
    /// `true` once every first start has settled and the ready upstreams are indexed.
    settled: tokio::sync::watch::Sender<bool>,
    /// How long a first start may take before the others are served without it.
    limit: Duration,
}

impl FirstStarts {
    pub fn new(upstreams: UpstreamManager, startup_timeout_secs: u64) -> Arc<Self> {
        let (settled, _) = tokio::sync::watch::channel(upstreams.servers().is_empty());
        Arc::new(Self {
            upstreams,
            settled,
            // A second past the supervisor's own limit, so that its verdict comes first.
            limit: Duration::from_secs(startup_timeout_secs.saturating_add(1)),
        })
    }

    /// What search results say of the upstreams that are not ready.
    pub fn status(self: &Arc<Self>) -> Arc<dyn ServerStatus> {
        Arc::new(UpstreamStatus(self.clone()))
    }

    /// Whether every upstream's first start has settled.
    pub fn done(&self) -> bool {
        *self.settled.borrow()
    }

    /// Waits until every upstream's first start has settled and the ready ones are indexed.
    pub async fn settled(&self) {
        if self.done() {
            return;
        }
        let mut settled = self.settled.subscribe();
        // The sender lives as long as this, so the wait ends only when settled.
        let _ = settled.wait_for(|done| *done).await;
    }

    /// Waits at most `limit` for [`FirstStarts::settled`]; the servers that are not ready.
    pub async fn wait(&self, limit: Duration) -> Vec<(String, ServerState)> {
        let _ = tokio::time::timeout(limit, self.settled()).await;
        self.upstreams
            .states()
            .into_iter()
            .filter(|(_, s)| !s.is_ready())
            .collect()
    }

    /// Waits until no upstream is on its first start any more, or the limit passed. The
    /// upstreams start concurrently, so waiting on them one after the other takes as long as the
    /// slowest.
    pub async fn wait_for_upstreams(&self) {
        let all = async {
            for server in self.upstreams.servers() {
                let _ = self
                    .upstreams
                    .wait_for_state(&server, |s| !on_first_start(s))
                    .await;
            }
        };
        let _ = tokio::time::timeout(self.limit, all).await;
    }

    /// Marks the first starts settled (the ready upstreams are indexed) and says how they went.
    pub fn mark_settled(&self, tools: usize) {
        self.settled.send_replace(true);
        let not_ready = UpstreamStatus::not_ready_of(&self.upstreams);
        let ready = self.upstreams.servers().len() - not_ready.len();
        if not_ready.is_empty() {
            tracing::info!(target: "upstream", "all {ready} upstreams ready: {tools} tools; tools/list now answers");
        } else {
            for (server, state) in &not_ready {
                tracing::warn!(target: "upstream", server, %state, "not ready after its first start; serving the others");
            }
            tracing::info!(target: "upstream", "{ready} upstreams ready: {tools} tools; tools/list now answers");
        }
    }

    /// The instructions of a session that began before the first starts settled: counts and
    /// categories would describe an empty catalog, so they say how to find tools instead.
    pub fn starting_guidance(&self, preset: Preset) -> String {
        let servers = self.upstreams.servers();
        let search = match preset {
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

/// Search results mark the tools of upstreams that are not ready, and name those upstreams.
struct UpstreamStatus(Arc<FirstStarts>);

impl UpstreamStatus {
    fn not_ready_of(upstreams: &UpstreamManager) -> Vec<(String, String)> {
        upstreams
            .states()
            .into_iter()
            .filter(|(_, state)| !state.is_ready())
            .map(|(server, state)| (server, state.to_string()))
            .collect()
    }
}

impl ServerStatus for UpstreamStatus {
    fn unavailable(&self, server: &str) -> Option<String> {
        self.0
            .upstreams
            .state(server)
            .filter(|state| !state.is_ready())
            .map(|state| state.to_string())
    }

    fn not_ready(&self) -> Vec<(String, String)> {
        Self::not_ready_of(&self.0.upstreams)
    }

    fn settling(&self) -> bool {
        !self.0.done()
    }
}
