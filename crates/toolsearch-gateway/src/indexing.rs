//! The upstreams' tools in the search engine: one server replaced at a time, through the engine's
//! catalog policy, always on the blocking pool (indexing is CPU work that grows with the catalog,
//! and the async workers serve every session's I/O). The model is told, so that the new tools
//! get their vectors in the background.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLockWriteGuard};

use toolsearch_core::{SearchEngine, Tool};

use crate::rest::SharedEngine;
use crate::semantic::Semantic;
use crate::upstream::supervisor::UpstreamManager;

/// Keeps the engine in step with the upstreams' tool lists.
#[derive(Clone)]
pub(crate) struct Indexer {
    engine: SharedEngine,
    upstreams: UpstreamManager,
    semantic: Arc<Semantic>,
    /// A fingerprint of each server's tool list as last indexed: the same list again (a resync
    /// after the first starts, a restart that lists the same tools) changes nothing, and the
    /// tools keep their vectors.
    indexed: Arc<Mutex<HashMap<String, u64>>>,
}

impl Indexer {
    pub fn new(engine: SharedEngine, upstreams: UpstreamManager, semantic: Arc<Semantic>) -> Self {
        Self {
            engine,
            upstreams,
            semantic,
            indexed: Arc::default(),
        }
    }

    fn write_engine(&self) -> RwLockWriteGuard<'_, SearchEngine> {
        // Every engine update is one replace_server; a panic mid-way leaves the previous index.
        self.engine.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-indexes every server from the supervisor's current tool lists, on the blocking pool.
    pub async fn resync(&self) {
        let indexer = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || indexer.resync_now()).await {
            tracing::error!(error = %e, "indexing the upstreams' tools failed");
        }
    }

    /// [`Indexer::resync`] on the calling thread (at start, before any session).
    pub fn resync_now(&self) {
        for server in self.upstreams.servers() {
            match self.upstreams.server_tools(&server) {
                Ok(tools) => self.index_server_now(&server, tools),
                Err(e) => tracing::warn!(server, error = %e, "cannot read the server's tools"),
            }
        }
    }

    /// Replaces one server's tools in the index, on the blocking pool.
    pub async fn index_server(&self, server: String, tools: Vec<Tool>) {
        let indexer = self.clone();
        let indexed =
            tokio::task::spawn_blocking(move || indexer.index_server_now(&server, tools)).await;
        if let Err(e) = indexed {
            tracing::error!(error = %e, "indexing a server's tools failed");
        }
    }

    /// Replaces one server's tools in the index; the engine applies the catalog policy.
    fn index_server_now(&self, server: &str, tools: Vec<Tool>) {
        let fingerprint = fingerprint(&tools);
        {
            let mut indexed = self.indexed.lock().unwrap_or_else(|e| e.into_inner());
            if indexed.get(server) == Some(&fingerprint) {
                tracing::debug!(server, "the server's tools are unchanged");
                return;
            }
            indexed.insert(server.to_string(), fingerprint);
        }
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
}

/// A hash of a tool list as the server gave it (names, descriptions, schemas, annotations).
fn fingerprint(tools: &[Tool]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for tool in tools {
        // A tool always serializes; were it not to, its name alone still tells lists apart.
        match serde_json::to_string(tool) {
            Ok(text) => text.hash(&mut hasher),
            Err(_) => tool.name().hash(&mut hasher),
        }
    }
    hasher.finish()
}
