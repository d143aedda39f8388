//! Where a session's state lives between requests: the seam between the gateway and the store
//! that replicas share.
//!
//! One process keeps everything in its own maps (the disclosure's reveal sets, the offload store,
//! rmcp's sessions) and needs nothing else: that is [`InProcess`], the default. Several replicas
//! behind a load balancer keep a copy of what a session must carry from one request to the next in
//! Redis ([`RedisState`], `[state] redis = "redis://…"`): the MCP session's `initialize`
//! parameters (so that any replica can restore it), the token that opened it, its reveals and its
//! large outputs. Each replica still answers from its own maps; the store is read before a
//! request that depends on the session and written after one that changed it.
//!
//! Notifications for a session (its tool list changed) are published to every replica, because
//! the client's stream may be held by any of them.

mod redis_state;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use toolsearch_core::SessionSnapshot;

pub(crate) use redis_state::lazy_connection;
pub use redis_state::RedisState;

/// A token's identity where sessions are kept (the owner of an MCP session, in this process and
/// in the shared store): HMAC-SHA256 of the token under a key derived from `state.prefix`, in
/// hex. It depends on the token alone, so reordering, adding or removing other tokens never
/// changes it, and replicas with the same tokens agree; it never shows the token.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenId(Arc<str>);

impl TokenId {
    /// An identity as the shared store keeps it.
    pub fn from_stored(text: &str) -> Self {
        Self(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TokenId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for TokenId {
    // Enough to tell identities apart in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short: String = self.0.chars().take(12).collect();
        write!(f, "TokenId({short})")
    }
}

/// Why the shared state could not be read or written.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the shared session state ({store}) failed: {message}; check that it is running and reachable from this replica (`[state] redis`), or remove `[state] redis` to keep sessions in this process")]
pub struct SharedStateError {
    pub store: String,
    pub message: String,
}

/// A large output as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedOutput {
    pub tool: String,
    pub text: String,
}

/// Something a replica tells the others about a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The replica that sent it, which has already acted on it.
    pub from: String,
    /// The session's shared key (its `Mcp-Session-Id`).
    pub session: String,
    pub kind: NoticeKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// The session's tool list changed (a reveal): send `notifications/tools/list_changed`.
    ToolsChanged,
    /// A resource the session subscribed to (on another replica) changed: send
    /// `notifications/resources/updated` with this gateway URI.
    ResourceUpdated { uri: String },
    /// The client ended the session (`DELETE`): replicas that restored it close their copy.
    SessionEnded,
}

/// What a session must keep across requests, wherever it is kept. Every method is keyed by a
/// session's shared key: its `Mcp-Session-Id`, or a token's shelf for clients without sessions.
#[async_trait]
pub trait SharedSessions: Send + Sync + 'static {
    /// `memory` or `redis`, for logs and metrics.
    fn kind(&self) -> &'static str;

    /// Whether other processes see what this one writes (false for [`InProcess`], whose own maps
    /// are the whole state, so there is nothing to read back).
    fn is_shared(&self) -> bool;

    /// Whether the store answered its last request (always true in process).
    fn is_up(&self) -> bool;

    /// Whether the store answers now; checked before a session is opened, so that a client
    /// learns at once that sessions cannot be kept rather than on its first tool call.
    async fn check(&self) -> Result<(), SharedStateError>;

    /// The session's reveals, marking it used; `None` when it changed nothing yet.
    async fn load_reveals(&self, key: &str) -> Result<Option<SessionSnapshot>, SharedStateError>;

    async fn save_reveals(
        &self,
        key: &str,
        snapshot: &SessionSnapshot,
    ) -> Result<(), SharedStateError>;

    /// Stores a large output behind `handle`, within the per-session bounds.
    async fn put_output(
        &self,
        key: &str,
        handle: &str,
        output: &SharedOutput,
    ) -> Result<(), SharedStateError>;

    async fn get_output(
        &self,
        key: &str,
        handle: &str,
    ) -> Result<Option<SharedOutput>, SharedStateError>;

    /// Records the token (its identity, `None` without tokens) that opened an MCP session. A
    /// token then holding more than `per_token` sessions loses its least recently used ones,
    /// which are forgotten and returned (never another token's); without a token there is no
    /// such bound.
    async fn set_owner(
        &self,
        session: &str,
        owner: Option<&TokenId>,
        per_token: usize,
    ) -> Result<Vec<String>, SharedStateError>;

    /// The token that opened an MCP session: `None` for a session the store does not know.
    async fn owner(&self, session: &str) -> Result<Option<Option<TokenId>>, SharedStateError>;

    /// Forgets everything of a session that its client ended.
    async fn end_session(&self, session: &str) -> Result<(), SharedStateError>;

    /// Tells every other replica; in process there is no other.
    async fn publish(&self, notice: &Notice) -> Result<(), SharedStateError>;

    /// What the other replicas publish.
    fn notices(&self) -> broadcast::Receiver<Notice>;

    /// Tells the other replicas `kind` about the session `session` (its shared key).
    async fn tell(&self, session: &str, kind: NoticeKind) -> Result<(), SharedStateError> {
        let notice = Notice {
            from: self.replica().to_string(),
            session: session.to_string(),
            kind,
        };
        self.publish(&notice).await
    }

    /// This replica's name in its notices.
    fn replica(&self) -> &str;

    /// Tool vectors another replica computed, by `key` (a hash of the embedded text), for the
    /// model `model`: each as little-endian `f32`s, `None` where there is none. In process there
    /// is no other replica: nothing.
    async fn get_vectors(
        &self,
        _model: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>, SharedStateError> {
        Ok(vec![None; keys.len()])
    }

    /// Shares tool vectors this replica computed (see [`get_vectors`](Self::get_vectors)).
    async fn put_vectors(
        &self,
        _model: &str,
        _entries: Vec<(String, Vec<u8>)>,
    ) -> Result<(), SharedStateError> {
        Ok(())
    }

    /// rmcp's hook for restoring an MCP session another replica opened; `None` in process.
    fn mcp_session_store(
        self: Arc<Self>,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::SessionStore>> {
        None
    }
}

/// The default: this process's own maps are the whole state.
pub struct InProcess {
    notices: broadcast::Sender<Notice>,
}

impl Default for InProcess {
    fn default() -> Self {
        Self {
            notices: broadcast::channel(1).0,
        }
    }
}

#[async_trait]
impl SharedSessions for InProcess {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn is_up(&self) -> bool {
        true
    }

    async fn check(&self) -> Result<(), SharedStateError> {
        Ok(())
    }

    async fn load_reveals(&self, _: &str) -> Result<Option<SessionSnapshot>, SharedStateError> {
        Ok(None)
    }

    async fn save_reveals(&self, _: &str, _: &SessionSnapshot) -> Result<(), SharedStateError> {
        Ok(())
    }

    async fn put_output(&self, _: &str, _: &str, _: &SharedOutput) -> Result<(), SharedStateError> {
        Ok(())
    }

    async fn get_output(&self, _: &str, _: &str) -> Result<Option<SharedOutput>, SharedStateError> {
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

    async fn publish(&self, _: &Notice) -> Result<(), SharedStateError> {
        Ok(())
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    fn replica(&self) -> &str {
        "local"
    }
}

/// The store the `state` section asks for. Redis is connected lazily: a replica starts (and says
/// so when Redis does not answer) and serves as soon as Redis does.
pub fn from_config(
    config: &crate::config::StateConfig,
    limits: Limits,
) -> Result<Arc<dyn SharedSessions>, SharedStateError> {
    match &config.redis {
        None => Ok(Arc::new(InProcess::default())),
        Some(url) => Ok(RedisState::connect(url, config, limits)?),
    }
}

/// The bounds the in-process maps keep, kept by the shared store too.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_sessions: usize,
    pub max_outputs_per_session: usize,
    pub max_bytes_per_session: usize,
}

/// rmcp's hook for restoring an MCP session on a replica that did not open it: the client's
/// `initialize` parameters, kept in the shared store.
pub struct McpSessionStore(pub Arc<RedisState>);

#[async_trait]
impl rmcp::transport::streamable_http_server::session::SessionStore for McpSessionStore {
    async fn load(
        &self,
        session_id: &str,
    ) -> Result<
        Option<rmcp::transport::streamable_http_server::session::SessionState>,
        rmcp::transport::streamable_http_server::session::SessionStoreError,
    > {
        Ok(self.0.load_mcp_session(session_id).await?)
    }

    async fn store(
        &self,
        session_id: &str,
        state: &rmcp::transport::streamable_http_server::session::SessionState,
    ) -> Result<(), rmcp::transport::streamable_http_server::session::SessionStoreError> {
        Ok(self.0.store_mcp_session(session_id, state).await?)
    }

    async fn delete(
        &self,
        session_id: &str,
    ) -> Result<(), rmcp::transport::streamable_http_server::session::SessionStoreError> {
        Ok(self.0.end_session(session_id).await?)
    }
}

/// rmcp's hook for bringing back a session that rests, in process: each open MCP session's
/// client `initialize`, from its answer until the session ends.
#[derive(Default)]
pub struct InProcessMcpSessions {
    states: std::sync::Mutex<
        std::collections::HashMap<
            String,
            Box<rmcp::transport::streamable_http_server::session::SessionState>,
        >,
    >,
}

impl InProcessMcpSessions {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<
            String,
            Box<rmcp::transport::streamable_http_server::session::SessionState>,
        >,
    > {
        // Every update is one insert or remove.
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a session that ended.
    pub fn remove(&self, session_id: &str) {
        let mut states = self.lock();
        states.remove(session_id);
        crate::memory::shrink_when_sparse(&mut states);
    }
}

#[async_trait]
impl rmcp::transport::streamable_http_server::session::SessionStore for InProcessMcpSessions {
    async fn load(
        &self,
        session_id: &str,
    ) -> Result<
        Option<rmcp::transport::streamable_http_server::session::SessionState>,
        rmcp::transport::streamable_http_server::session::SessionStoreError,
    > {
        Ok(self.lock().get(session_id).map(|state| (**state).clone()))
    }

    async fn store(
        &self,
        session_id: &str,
        state: &rmcp::transport::streamable_http_server::session::SessionState,
    ) -> Result<(), rmcp::transport::streamable_http_server::session::SessionStoreError> {
        self.lock()
            .insert(session_id.to_string(), Box::new(state.clone()));
        Ok(())
    }

    async fn delete(
        &self,
        session_id: &str,
    ) -> Result<(), rmcp::transport::streamable_http_server::session::SessionStoreError> {
        self.remove(session_id);
        Ok(())
    }
}

/// A URL with its password hidden, for messages.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_in_messages() {
        assert_eq!(
            redacted("redis://:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
