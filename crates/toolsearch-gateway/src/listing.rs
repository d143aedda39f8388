//! `tools/list` answers, computed once per catalog version, scope and reveals. Every session of a
//! token that revealed nothing gets the same answer; building it (the preset's meta-tool schemas,
//! each tool's conversion to an MCP tool, the fingerprint that tells a catalog change apart) cost
//! more than the rest of the request together (docs/BENCHMARKS.md, "Many sessions").

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use toolsearch_core::disclosure::{Caller, Disclosure, ExposedTool, SessionSnapshot};
use toolsearch_core::{Scope, SearchEngine};

/// Answers kept: one per token scope and set of reveals in use; a session with reveals of its
/// own takes an entry while it lists, and the oldest entry makes room.
const KEPT: usize = 64;

/// One `tools/list` answer.
#[derive(Debug)]
pub struct Listing {
    pub tools: Vec<rmcp::model::Tool>,
    /// Tells two answers apart, to notify a session whose list a catalog change altered.
    pub fingerprint: u64,
}

impl Listing {
    pub fn new(exposed: &[ExposedTool]) -> Self {
        let tools = exposed
            .iter()
            .filter_map(|tool| {
                serde_json::to_value(tool)
                    .and_then(serde_json::from_value::<rmcp::model::Tool>)
                    .map_err(|e| tracing::warn!(tool = %tool.name, error = %e, "tool left out of tools/list: its definition is not a valid MCP tool"))
                    .ok()
            })
            .collect();
        Self {
            tools,
            fingerprint: fingerprint(exposed),
        }
    }
}

/// A fingerprint of a tool list as a client receives it: any change of a name, description,
/// schema or annotation changes it.
pub fn fingerprint(tools: &[ExposedTool]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for tool in tools {
        match serde_json::to_string(tool) {
            Ok(json) => json.hash(&mut hasher),
            Err(_) => tool.name.hash(&mut hasher),
        }
    }
    hasher.finish()
}

/// What an answer was computed from: the same inputs give the same answer.
struct Entry {
    catalog_version: u64,
    scope: Arc<Scope>,
    reveals: Option<SessionSnapshot>,
    listing: Arc<Listing>,
}

/// The latest answers, newest first.
#[derive(Default)]
pub struct Listings {
    entries: Mutex<VecDeque<Entry>>,
}

impl Listings {
    /// A caller's tools/list answer as it stands: the tools of `scope` with the reveals kept
    /// under `key`, computed once for every caller with the same catalog, scope and reveals.
    pub fn answer(
        &self,
        disclosure: &Disclosure,
        engine: &RwLock<SearchEngine>,
        key: &str,
        scope: Arc<Scope>,
    ) -> Arc<Listing> {
        let reveals = disclosure.session_snapshot(key);
        let engine = engine.read().unwrap_or_else(|e| e.into_inner());
        let version = engine.catalog().version();
        if let Some(listing) = self.get(version, &scope, &reveals) {
            return listing;
        }
        let tools = disclosure.visible_tools(Caller::new(key, &scope), &engine);
        // Converting the tools needs no lock: indexing may go on meanwhile.
        drop(engine);
        let listing = Arc::new(Listing::new(&tools));
        self.put(version, scope, reveals, listing.clone());
        listing
    }

    /// The answer computed for these inputs, if it is still kept.
    pub fn get(
        &self,
        catalog_version: u64,
        scope: &Arc<Scope>,
        reveals: &Option<SessionSnapshot>,
    ) -> Option<Arc<Listing>> {
        self.lock()
            .iter()
            .find(|e| {
                e.catalog_version == catalog_version
                    && (Arc::ptr_eq(&e.scope, scope) || *e.scope == **scope)
                    && e.reveals == *reveals
            })
            .map(|e| e.listing.clone())
    }

    /// Keeps an answer; answers of older catalog versions are dropped.
    pub fn put(
        &self,
        catalog_version: u64,
        scope: Arc<Scope>,
        reveals: Option<SessionSnapshot>,
        listing: Arc<Listing>,
    ) {
        let mut entries = self.lock();
        entries.retain(|e| e.catalog_version == catalog_version);
        entries.push_front(Entry {
            catalog_version,
            scope,
            reveals,
            listing,
        });
        entries.truncate(KEPT);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        // Every update leaves the list whole.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolsearch_core::ToolId;

    fn listing(name: &str) -> Arc<Listing> {
        Arc::new(Listing {
            tools: Vec::new(),
            fingerprint: name.len() as u64,
        })
    }

    #[test]
    fn an_answer_is_reused_only_for_the_same_version_scope_and_reveals() {
        let listings = Listings::default();
        let all = Arc::new(Scope::all());
        let none = Arc::new(Scope::none());
        let revealed = Some(SessionSnapshot {
            revealed: vec![ToolId::new("srv", "tool")],
            limit_set: None,
        });
        listings.put(1, all.clone(), None, listing("a"));
        assert!(listings.get(1, &all, &None).is_some());
        // Another Arc of an equal scope is the same scope.
        assert!(listings.get(1, &Arc::new(Scope::all()), &None).is_some());
        assert!(listings.get(1, &none, &None).is_none());
        assert!(listings.get(1, &all, &revealed).is_none());
        assert!(listings.get(2, &all, &None).is_none());
        // A new catalog version drops the answers of the old one.
        listings.put(2, all.clone(), revealed.clone(), listing("b"));
        assert!(listings.get(1, &all, &None).is_none());
        assert!(listings.get(2, &all, &revealed).is_some());
    }

    #[test]
    fn the_oldest_answer_makes_room() {
        let listings = Listings::default();
        let all = Arc::new(Scope::all());
        let snapshot = |i: usize| {
            Some(SessionSnapshot {
                revealed: vec![ToolId::new("srv", format!("t{i}").as_str())],
                limit_set: None,
            })
        };
        for i in 0..=KEPT {
            listings.put(1, all.clone(), snapshot(i), listing("x"));
        }
        assert!(listings.get(1, &all, &snapshot(0)).is_none());
        assert!(listings.get(1, &all, &snapshot(KEPT)).is_some());
        assert!(listings.get(1, &all, &snapshot(1)).is_some());
    }
}
