//! Per-session reveal sets, bounded in both directions: the number of sessions (least recently
//! used evicted) and the reveals of each session (oldest dropped).

use crate::tool::ToolId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What a session has changed, as plain data: what an embedder keeps outside the process (a
/// store shared by several gateway replicas) and gives back with
/// [`Disclosure::restore_session`](super::Disclosure::restore_session).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSnapshot {
    /// Revealed tools, oldest first.
    pub revealed: Vec<ToolId>,
    /// `limit` preset: the exposed set chosen by the last search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_set: Option<Vec<ToolId>>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Session {
    /// Revealed tools, oldest first.
    pub revealed: VecDeque<ToolId>,
    /// `limit` preset: the exposed set chosen by the last search; `None` until then.
    pub limit_set: Option<Vec<ToolId>>,
    tick: u64,
}

impl Session {
    pub fn snapshot(&self) -> SessionSnapshot {
        SessionSnapshot {
            revealed: self.revealed.iter().cloned().collect(),
            limit_set: self.limit_set.clone(),
        }
    }

    /// Takes the reveals of `snapshot`, keeping at most the newest `max`.
    pub fn restore(&mut self, snapshot: SessionSnapshot, max: usize) {
        let skip = snapshot.revealed.len().saturating_sub(max);
        self.revealed = snapshot.revealed.into_iter().skip(skip).collect();
        self.limit_set = snapshot.limit_set;
    }

    /// Adds `ids` not yet revealed, dropping the oldest past `max`; returns the ones added.
    pub fn reveal(&mut self, ids: impl IntoIterator<Item = ToolId>, max: usize) -> Vec<ToolId> {
        let mut added = Vec::new();
        for id in ids {
            if self.revealed.contains(&id) {
                continue;
            }
            self.revealed.push_back(id.clone());
            added.push(id);
        }
        while self.revealed.len() > max {
            if let Some(dropped) = self.revealed.pop_front() {
                tracing::debug!(tool = %dropped, "reveal limit reached, oldest reveal dropped");
            }
        }
        added
    }
}

#[derive(Debug)]
pub(crate) struct SessionStore {
    sessions: HashMap<String, Session>,
    /// Last-use tick → session id, so the least recently used is found in O(log n).
    by_use: BTreeMap<u64, String>,
    tick: u64,
    cap: usize,
}

impl SessionStore {
    pub fn new(cap: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    fn touch(&mut self, id: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(session) = self.sessions.get_mut(id) {
            self.by_use.remove(&session.tick);
            session.tick = tick;
            self.by_use.insert(tick, id.to_string());
        }
    }

    /// The session, marked as used; `None` when it does not exist (reading never creates one).
    pub fn get(&mut self, id: &str) -> Option<&Session> {
        self.touch(id);
        self.sessions.get(id)
    }

    /// The session, created when missing; creating one may evict the least recently used.
    pub fn get_or_create(&mut self, id: &str) -> &mut Session {
        if !self.sessions.contains_key(id) {
            while self.sessions.len() >= self.cap {
                let Some((_, oldest)) = self.by_use.pop_first() else {
                    break;
                };
                self.sessions.remove(&oldest);
                tracing::debug!(session = %oldest, "session cap reached, least recently used evicted");
            }
            self.sessions.insert(id.to_string(), Session::default());
        }
        self.touch(id);
        self.sessions.entry(id.to_string()).or_default()
    }

    pub fn remove(&mut self, id: &str) -> bool {
        match self.sessions.remove(id) {
            Some(session) => {
                self.by_use.remove(&session.tick);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_is_evicted() {
        let mut store = SessionStore::new(2);
        store.get_or_create("a");
        store.get_or_create("b");
        store.get("a");
        store.get_or_create("c");
        assert_eq!(store.len(), 2);
        assert!(store.get("a").is_some());
        assert!(store.get("b").is_none());
        assert!(store.get("c").is_some());
        assert!(store.remove("c"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn reveals_are_bounded_oldest_first() {
        let mut session = Session::default();
        let ids: Vec<_> = (0..5).map(|i| ToolId::new("s", format!("t{i}"))).collect();
        let added = session.reveal(ids.clone(), 3);
        assert_eq!(added.len(), 5);
        assert_eq!(
            session.revealed.iter().cloned().collect::<Vec<_>>(),
            ids[2..].to_vec()
        );
        assert!(session.reveal([ids[4].clone()], 3).is_empty());
    }
}
