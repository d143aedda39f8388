//! What the gateway sees of its own use: the metrics, and the last searches with whether a call of
//! a tool they returned followed (the signal that tells an operator where search fails). Shared by
//! the MCP face, the REST API and the console. Nothing here holds a tool's output.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::metrics::{Face, Metrics};

/// How many searches the console's "recent searches" keeps.
pub const RECENT_SEARCHES: usize = 200;

/// Names of results a recent search keeps.
const KEPT_RESULTS: usize = 10;

/// One search, as the console lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchRecord {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub face: &'static str,
    /// The MCP session, for searches over MCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub query: String,
    pub mode: String,
    /// The first results' names, best first.
    pub results: Vec<String>,
    pub total_matches: u64,
    pub micros: u64,
    /// The returned tool the same session called next, if it called one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub followed_by_call: Option<String>,
}

/// The metrics and the last searches.
#[derive(Debug, Default)]
pub struct Observer {
    metrics: Metrics,
    recent: Mutex<VecDeque<SearchRecord>>,
}

impl Observer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<SearchRecord>> {
        // Every update is one push, pop or field write.
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a search from its result as the contract writes it (`query`, `mode`, `tools`,
    /// `totalMatches`); anything else is not a search and is ignored.
    pub fn search_result(
        &self,
        face: Face,
        session: Option<&str>,
        result: &Value,
        elapsed: Duration,
    ) {
        let (Some(query), Some(tools)) = (result["query"].as_str(), result["tools"].as_array())
        else {
            return;
        };
        let mode = result["mode"].as_str().unwrap_or("keyword").to_string();
        let results: Vec<String> = tools
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        // A search whose results are only guesses found nothing that fits.
        let found = if result["nothingFits"].as_bool() == Some(true) {
            0
        } else {
            results.len()
        };
        self.metrics
            .search(face, &mode, elapsed.as_secs_f64(), results.len(), found);
        let record = SearchRecord {
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            face: face.as_str(),
            session: session.map(str::to_string),
            query: query.to_string(),
            mode,
            results: results.into_iter().take(KEPT_RESULTS).collect(),
            total_matches: result["totalMatches"].as_u64().unwrap_or(0),
            micros: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            followed_by_call: None,
        };
        let mut recent = self.lock();
        if recent.len() == RECENT_SEARCHES {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    /// A session called `tool`: its latest search that returned it, if not already followed,
    /// is marked as followed by this call.
    pub fn called(&self, session: &str, tool: &str) {
        let mut recent = self.lock();
        let latest = recent
            .iter_mut()
            .rev()
            .filter(|r| r.session.as_deref() == Some(session))
            .find(|r| r.results.iter().any(|name| name == tool));
        if let Some(record) = latest {
            if record.followed_by_call.is_none() {
                record.followed_by_call = Some(tool.to_string());
            }
        }
    }

    /// The last searches, newest first.
    pub fn recent_searches(&self) -> Vec<SearchRecord> {
        self.lock().iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn searches_are_kept_newest_first_bounded_and_marked_when_a_result_is_called() {
        let observer = Observer::new();
        let result = |query: &str| {
            json!({"query": query, "mode": "keyword", "totalMatches": 2,
                   "tools": [{"name": "time___get_current_time"}, {"name": "time___convert_time"}]})
        };
        observer.search_result(
            Face::Mcp,
            Some("s1"),
            &result("what time is it"),
            Duration::from_micros(300),
        );
        observer.search_result(
            Face::Rest,
            None,
            &result("convert"),
            Duration::from_micros(200),
        );
        observer.search_result(
            Face::Mcp,
            Some("s1"),
            &json!({"categories": []}),
            Duration::ZERO,
        );
        observer.called("s1", "time___get_current_time");
        observer.called("s1", "time___convert_time");
        let recent = observer.recent_searches();
        assert_eq!(recent.len(), 2, "a listing is not a search");
        assert_eq!(recent[0].query, "convert");
        assert_eq!(recent[1].micros, 300);
        assert_eq!(
            recent[1].followed_by_call.as_deref(),
            Some("time___get_current_time"),
            "the first call after the search is the one recorded"
        );
        assert_eq!(recent[0].followed_by_call, None, "another face's search");

        for i in 0..RECENT_SEARCHES + 5 {
            observer.search_result(Face::Rest, None, &result(&format!("q{i}")), Duration::ZERO);
        }
        let recent = observer.recent_searches();
        assert_eq!(recent.len(), RECENT_SEARCHES);
        assert_eq!(recent[0].query, format!("q{}", RECENT_SEARCHES + 4));
    }
}
