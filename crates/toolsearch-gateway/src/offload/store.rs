//! The per-session store: outputs kept behind handles, bounded in count and bytes (oldest dropped
//! first), and the replacement of a large upstream result by its notice.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::{CallToolResult, ContentBlock};

use super::output::{floor_char_boundary, Stored, StoredOutput};
use super::worker::JqWorker;
use super::{notice, OffloadError};
use crate::config::OffloadConfig;

/// Handles of dropped outputs remembered per session, to tell "dropped" from "never existed".
const REMEMBERED_DROPPED: usize = 256;

#[derive(Default)]
struct SessionOutputs {
    outputs: VecDeque<Arc<StoredOutput>>,
    bytes: usize,
    dropped: VecDeque<String>,
}

/// Stored outputs of every session.
pub struct OffloadStore {
    pub(super) config: OffloadConfig,
    sessions: Mutex<HashMap<String, SessionOutputs>>,
    next: AtomicU64,
    salt: RandomState,
    /// Where jq filters run: a bounded child process.
    pub(super) jq: JqWorker,
}

impl std::fmt::Debug for OffloadStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OffloadStore {
    /// A store whose jq queries run in a child process of the current executable (see
    /// [`JqWorker::current_exe`]).
    pub fn new(config: OffloadConfig) -> Self {
        Self::with_jq_worker(config, JqWorker::current_exe())
    }

    /// A store whose jq queries run in the given worker program.
    pub fn with_jq_worker(config: OffloadConfig, jq: JqWorker) -> Self {
        Self {
            config,
            sessions: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            salt: RandomState::new(),
            jq,
        }
    }

    pub fn config(&self) -> &OffloadConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, SessionOutputs>> {
        // Each operation leaves the map consistent, so a panic elsewhere does not poison it.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new handle: a counter (unique) and a salted hash (not guessable from another session's).
    fn new_handle(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut hasher = self.salt.build_hasher();
        hasher.write_u64(n);
        format!("out-{n}-{:08x}", hasher.finish() as u32)
    }

    /// Stores `text` for `session`, dropping the session's oldest outputs past the bounds. A text
    /// larger than `maxBytesPerSession` is cut to fit.
    pub fn put(&self, session: &str, tool: &str, mut text: String) -> Stored {
        let max_bytes = self.config.max_bytes_per_session;
        let cut_from = (text.len() > max_bytes).then(|| {
            let original = text.len();
            text.truncate(floor_char_boundary(&text, max_bytes));
            // The cut text alone is kept, not the allocation of the whole answer.
            text.shrink_to_fit();
            original
        });
        let output = Arc::new(StoredOutput::new(self.new_handle(), tool.to_string(), text));
        self.insert(session, output.clone());
        Stored { output, cut_from }
    }

    /// Keeps an output another replica stored under `handle` (read back from the shared state),
    /// within the same bounds as [`put`](Self::put). Keeping one it already holds changes nothing.
    pub fn adopt(&self, session: &str, handle: &str, tool: &str, text: String) {
        if self.get(session, handle).is_ok() {
            return;
        }
        let mut text = text;
        text.truncate(floor_char_boundary(
            &text,
            self.config.max_bytes_per_session,
        ));
        let output = Arc::new(StoredOutput::new(
            handle.to_string(),
            tool.to_string(),
            text,
        ));
        self.insert(session, output);
    }

    fn insert(&self, session: &str, output: Arc<StoredOutput>) {
        let max_bytes = self.config.max_bytes_per_session;
        let mut sessions = self.lock();
        let store = sessions.entry(session.to_string()).or_default();
        store.bytes += output.text.len();
        store.outputs.push_back(output);
        while store.outputs.len() > self.config.max_outputs_per_session || store.bytes > max_bytes {
            let Some(old) = store.outputs.pop_front() else {
                break;
            };
            store.bytes -= old.text.len();
            tracing::debug!(session, handle = %old.handle, "dropped the oldest large output");
            store.dropped.push_back(old.handle.clone());
            if store.dropped.len() > REMEMBERED_DROPPED {
                store.dropped.pop_front();
            }
        }
    }

    /// The output `handle` of `session`; never another session's.
    pub fn get(&self, session: &str, handle: &str) -> Result<Arc<StoredOutput>, OffloadError> {
        let sessions = self.lock();
        let store = sessions.get(session);
        if let Some(found) = store.and_then(|s| s.outputs.iter().find(|o| o.handle == handle)) {
            return Ok(found.clone());
        }
        if store.is_some_and(|s| s.dropped.iter().any(|h| h == handle)) {
            return Err(OffloadError::Dropped {
                handle: handle.to_string(),
                max_outputs: self.config.max_outputs_per_session,
                max_bytes: self.config.max_bytes_per_session,
            });
        }
        let known: Vec<&str> = store
            .map(|s| s.outputs.iter().map(|o| o.handle.as_str()).collect())
            .unwrap_or_default();
        Err(OffloadError::UnknownHandle {
            handle: handle.to_string(),
            known: if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            },
        })
    }

    /// Handles a session holds, oldest first.
    pub fn handles(&self, session: &str) -> Vec<String> {
        self.lock()
            .get(session)
            .map(|s| s.outputs.iter().map(|o| o.handle.clone()).collect())
            .unwrap_or_default()
    }

    /// Bytes a session holds.
    pub fn session_bytes(&self, session: &str) -> usize {
        self.lock().get(session).map_or(0, |s| s.bytes)
    }

    /// Outputs and bytes held across every session, for the metrics.
    pub fn totals(&self) -> (usize, usize) {
        let sessions = self.lock();
        sessions.values().fold((0, 0), |(outputs, bytes), s| {
            (outputs + s.outputs.len(), bytes + s.bytes)
        })
    }

    /// Drops a session's outputs.
    pub fn end_session(&self, session: &str) {
        self.lock().remove(session);
    }

    /// Replaces a large result's text by a preview and a handle. Results at or under the
    /// threshold, and every non-text part, are returned unchanged.
    pub fn offload_result(
        &self,
        session: &str,
        tool: &str,
        result: CallToolResult,
    ) -> CallToolResult {
        self.offload_result_keeping(session, tool, result).0
    }

    /// Whether [`offload_result`](Self::offload_result) would store `result`: its text is over
    /// the threshold. Cheap; storing is not (counting characters, an outline of the JSON).
    pub fn would_offload(&self, result: &CallToolResult) -> bool {
        self.config.enabled && text_bytes(result) > self.config.threshold_bytes
    }

    /// [`offload_result`](Self::offload_result), with the output it stored, if any (for a copy
    /// in the shared state).
    pub fn offload_result_keeping(
        &self,
        session: &str,
        tool: &str,
        mut result: CallToolResult,
    ) -> (CallToolResult, Option<Arc<StoredOutput>>) {
        if !self.would_offload(&result) {
            return (result, None);
        }
        let text_bytes = text_bytes(&result);
        // All text parts become one stored output, in order; the notice takes the place of the
        // first of them and the other parts (images, audio, resources) keep theirs.
        let mut texts = Vec::new();
        let mut first_text = None;
        let mut kept = Vec::with_capacity(result.content.len());
        for block in std::mem::take(&mut result.content) {
            match block {
                ContentBlock::Text(t) => {
                    first_text.get_or_insert(kept.len());
                    texts.push(t.text);
                }
                other => kept.push(other),
            }
        }
        // One text part (the usual case) is stored as it is, without a copy.
        let text = match texts.len() {
            1 => texts.pop().unwrap_or_default(),
            _ => texts.join("\n"),
        };
        let stored = self.put(session, tool, text);
        let (notice, structured) = notice::describe(&stored, self.config.preview_chars);
        tracing::info!(session, tool, handle = %stored.output.handle, bytes = text_bytes, "offloaded a large output");
        kept.insert(first_text.unwrap_or(0), ContentBlock::text(notice));
        result.content = kept;
        result.structured_content = Some(structured);
        (result, Some(stored.output))
    }
}

/// Bytes of a result's text parts.
fn text_bytes(result: &CallToolResult) -> usize {
    result
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.text.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::tests::{config, text_result};
    use crate::offload::OffloadTool;

    #[test]
    fn store_drops_oldest_past_count_and_bytes() {
        let store = OffloadStore::new(config(10, 100, 3));
        let handles: Vec<String> = (0..4)
            .map(|i| {
                store
                    .put("a", "t", format!("{i}").repeat(20))
                    .output
                    .handle
                    .clone()
            })
            .collect();
        assert_eq!(store.handles("a"), handles[1..]);
        assert!(matches!(
            store.get("a", &handles[0]),
            Err(OffloadError::Dropped { .. })
        ));
        // 3 × 20 bytes held; 70 more: one goes for the count, one for the bytes.
        let big = store.put("a", "t", "x".repeat(70)).output.handle.clone();
        assert_eq!(store.handles("a"), [handles[3].clone(), big]);
        assert_eq!(store.session_bytes("a"), 90);
    }

    #[test]
    fn store_cuts_an_output_larger_than_the_session_budget() {
        let store = OffloadStore::new(config(10, 100, 3));
        let s = store.put("a", "t", "é".repeat(80));
        assert_eq!(s.cut_from, Some(160));
        assert_eq!(s.output.text.len(), 100);
        assert_eq!(s.output.chars, 50);
    }

    #[test]
    fn handles_never_cross_sessions_and_session_end_drops_them() {
        let store = OffloadStore::new(config(10, 100, 3));
        let a = store.put("a", "t", "x".repeat(20)).output.handle.clone();
        let b = store.put("b", "t", "y".repeat(20)).output.handle.clone();
        assert_ne!(a, b);
        let err = store.get("b", &a).unwrap_err();
        assert!(matches!(err, OffloadError::UnknownHandle { .. }), "{err}");
        assert!(
            err.to_string().contains(&b),
            "lists the session's own: {err}"
        );
        assert!(store.get("a", &a).is_ok());
        store.end_session("a");
        assert!(store.get("a", &a).is_err());
        assert!(store.get("b", &b).is_ok());
    }

    #[test]
    fn small_and_non_text_results_pass_unchanged() {
        let store = OffloadStore::new(config(10, 100, 3));
        let small = store.offload_result("a", "t", text_result("short"));
        assert_eq!(small.content[0].as_text().unwrap().text, "short");
        assert!(small.structured_content.is_none());

        let image = ContentBlock::image("AAAA".repeat(100), "image/png");
        let mixed = CallToolResult::success(vec![
            image.clone(),
            ContentBlock::text("a".repeat(30)),
            ContentBlock::text("b".repeat(30)),
        ]);
        let out = store.offload_result("a", "s___t", mixed);
        assert_eq!(out.content.len(), 2);
        assert_eq!(out.content[0], image, "non-text parts keep their place");
        let info = &out.structured_content.as_ref().unwrap()["offloaded"];
        assert_eq!(info["chars"], 61);
        assert_eq!(info["tool"], "s___t");
        let handle = info["handle"].as_str().unwrap();
        let notice = &out.content[1].as_text().unwrap().text;
        assert!(
            notice.contains(handle) && notice.contains(OffloadTool::Read.name()),
            "{notice}"
        );
        let text = &store.get("a", handle).unwrap().text;
        assert_eq!(text, &format!("{}\n{}", "a".repeat(30), "b".repeat(30)));

        let off = OffloadStore::new(OffloadConfig {
            enabled: false,
            ..config(10, 100, 3)
        });
        let big = off.offload_result("a", "t", text_result(&"z".repeat(50)));
        assert_eq!(big.content[0].as_text().unwrap().text.len(), 50);
    }
}
