//! The shared state in Redis. Keys (under the configured prefix `P`, per session key `S`):
//!
//! | key | holds |
//! |---|---|
//! | `P:sessions` | sorted set: every session by last use (ms), for the session bound and TTL |
//! | `P:mcp:S` | the MCP session's `initialize` parameters (JSON), for restoring it anywhere |
//! | `P:owner:S` | the token that opened it (`-` without tokens, else its identity, a keyed hash) |
//! | `P:tokensessions:T` | sorted set: the sessions of the token of identity `T` by last use, for the per-token bound |
//! | `P:reveals:S` | its reveal sets ([`SessionSnapshot`], JSON) |
//! | `P:outs:S`, `P:outbytes:S` | its large outputs' handles (oldest first) and their bytes |
//! | `P:out:S:H` | one large output (hash: `tool`, `text`) |
//!
//! Every key of a session expires `sessionTtlSecs` after its last use. The scripts touch keys they
//! compute from the prefix, so the store is one Redis (or a primary with replicas), not a cluster.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use rmcp::transport::streamable_http_server::session::SessionState;
use tokio::sync::broadcast;
use toolsearch_core::SessionSnapshot;

use super::TokenId;
use super::{redacted, Limits, Notice, SharedOutput, SharedSessions, SharedStateError};
use crate::config::StateConfig;

/// Marks a session used (and every key of it, for the TTL), evicts the least recently used past
/// the session bound, and returns the session's reveals.
const TOUCH: &str = r"
local p, id, now, ttl, max = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local zs = p .. ':sessions'
local function forget(s)
  for _, h in ipairs(redis.call('LRANGE', p .. ':outs:' .. s, 0, -1)) do
    redis.call('DEL', p .. ':out:' .. s .. ':' .. h)
  end
  local o = redis.call('GET', p .. ':owner:' .. s)
  if o and o ~= '-' then redis.call('ZREM', p .. ':tokensessions:' .. o, s) end
  redis.call('DEL', p .. ':reveals:' .. s, p .. ':mcp:' .. s, p .. ':owner:' .. s,
    p .. ':outs:' .. s, p .. ':outbytes:' .. s)
end
redis.call('ZREMRANGEBYSCORE', zs, '-inf', now - ttl * 1000)
redis.call('ZADD', zs, now, id)
local owner = redis.call('GET', p .. ':owner:' .. id)
if owner and owner ~= '-' then
  local zt = p .. ':tokensessions:' .. owner
  redis.call('ZADD', zt, now, id)
  redis.call('EXPIRE', zt, ttl)
end
local over = redis.call('ZCARD', zs) - max
if over > 0 then
  local old = redis.call('ZPOPMIN', zs, over)
  for i = 1, #old, 2 do forget(old[i]) end
end
for _, k in ipairs({'reveals', 'mcp', 'owner', 'outs', 'outbytes'}) do
  redis.call('EXPIRE', p .. ':' .. k .. ':' .. id, ttl)
end
for _, h in ipairs(redis.call('LRANGE', p .. ':outs:' .. id, 0, -1)) do
  redis.call('EXPIRE', p .. ':out:' .. id .. ':' .. h, ttl)
end
return redis.call('GET', p .. ':reveals:' .. id)
";

/// Stores one output and drops the session's oldest past the count and byte bounds.
const PUT_OUTPUT: &str = r"
local p, id, handle, tool, text = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local max_outputs, max_bytes, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local list, bytes_key = p .. ':outs:' .. id, p .. ':outbytes:' .. id
local key = p .. ':out:' .. id .. ':' .. handle
redis.call('HSET', key, 'tool', tool, 'text', text)
redis.call('EXPIRE', key, ttl)
redis.call('RPUSH', list, handle)
local bytes = redis.call('INCRBY', bytes_key, string.len(text))
while redis.call('LLEN', list) > max_outputs or bytes > max_bytes do
  local old = redis.call('LPOP', list)
  if not old then break end
  local old_key = p .. ':out:' .. id .. ':' .. old
  bytes = redis.call('DECRBY', bytes_key, redis.call('HSTRLEN', old_key, 'text'))
  redis.call('DEL', old_key)
end
redis.call('EXPIRE', list, ttl)
redis.call('EXPIRE', bytes_key, ttl)
return bytes
";

/// Records a session's token and keeps that token within its bound of sessions: past it, the
/// token's least recently used sessions are forgotten (and returned), never another token's.
const CLAIM: &str = r"
local p, id, owner, now, ttl, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local zs = p .. ':sessions'
redis.call('SET', p .. ':owner:' .. id, owner, 'EX', ttl)
local evicted = {}
if owner ~= '-' then
  local zt = p .. ':tokensessions:' .. owner
  redis.call('ZREMRANGEBYSCORE', zt, '-inf', now - ttl * 1000)
  redis.call('ZREM', zt, id)
  local over = redis.call('ZCARD', zt) - (limit - 1)
  if over > 0 then
    local old = redis.call('ZPOPMIN', zt, over)
    for i = 1, #old, 2 do
      local s = old[i]
      for _, h in ipairs(redis.call('LRANGE', p .. ':outs:' .. s, 0, -1)) do
        redis.call('DEL', p .. ':out:' .. s .. ':' .. h)
      end
      redis.call('DEL', p .. ':reveals:' .. s, p .. ':mcp:' .. s, p .. ':owner:' .. s,
        p .. ':outs:' .. s, p .. ':outbytes:' .. s)
      redis.call('ZREM', zs, s)
      table.insert(evicted, s)
    end
  end
  redis.call('ZADD', zt, now, id)
  redis.call('EXPIRE', zt, ttl)
end
return evicted
";

/// How long a shared tool vector is kept: a catalog that changes leaves vectors nobody reads,
/// and a replica that misses one embeds it again.
const VECTOR_TTL_SECS: u64 = 7 * 24 * 3600;

/// Forgets a session.
const FORGET: &str = r"
local p, id = ARGV[1], ARGV[2]
for _, h in ipairs(redis.call('LRANGE', p .. ':outs:' .. id, 0, -1)) do
  redis.call('DEL', p .. ':out:' .. id .. ':' .. h)
end
local o = redis.call('GET', p .. ':owner:' .. id)
if o and o ~= '-' then redis.call('ZREM', p .. ':tokensessions:' .. o, id) end
redis.call('DEL', p .. ':reveals:' .. id, p .. ':mcp:' .. id, p .. ':owner:' .. id,
  p .. ':outs:' .. id, p .. ':outbytes:' .. id)
return redis.call('ZREM', p .. ':sessions', id)
";

pub struct RedisState {
    url: String,
    prefix: String,
    ttl_secs: u64,
    timeout: Duration,
    limits: Limits,
    connection: ConnectionManager,
    up: AtomicBool,
    replica: String,
    notices: broadcast::Sender<Notice>,
    touch: Script,
    put_output: Script,
    forget: Script,
    claim: Script,
}

impl RedisState {
    /// A store on `url`, connected lazily: this returns at once, a background task says whether
    /// Redis answers, and another follows the other replicas' notices.
    pub fn connect(
        url: &str,
        config: &StateConfig,
        limits: Limits,
    ) -> Result<Arc<Self>, SharedStateError> {
        let shown = redacted(url);
        let fail = |e: redis::RedisError| SharedStateError {
            store: format!("Redis at {shown}"),
            message: e.to_string(),
        };
        let client = redis::Client::open(url).map_err(fail)?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let connection = lazy_connection(client.clone(), timeout).map_err(fail)?;
        let state = Arc::new(Self {
            url: shown,
            prefix: config.prefix.clone(),
            ttl_secs: config.session_ttl_secs,
            timeout,
            limits,
            connection,
            up: AtomicBool::new(false),
            replica: format!("{:016x}", rand_u64()),
            notices: broadcast::channel(256).0,
            touch: Script::new(TOUCH),
            put_output: Script::new(PUT_OUTPUT),
            forget: Script::new(FORGET),
            claim: Script::new(CLAIM),
        });
        tokio::spawn(watch(Arc::downgrade(&state)));
        tokio::spawn(follow_notices(Arc::downgrade(&state), client));
        Ok(state)
    }

    fn error(&self, message: impl std::fmt::Display) -> SharedStateError {
        SharedStateError {
            store: format!("Redis at {}", self.url),
            message: message.to_string(),
        }
    }

    /// Runs one Redis operation within the configured timeout, recording whether Redis answered.
    async fn run<T, F>(&self, what: &str, operation: F) -> Result<T, SharedStateError>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let outcome = tokio::time::timeout(self.timeout, operation).await;
        let result = match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.error(format_args!("{what}: {e}"))),
            Err(_) => Err(self.error(format_args!(
                "{what}: no answer within {} ms (`state.timeoutMs`)",
                self.timeout.as_millis()
            ))),
        };
        let up = result.is_ok();
        if self.up.swap(up, Ordering::Relaxed) != up {
            if up {
                tracing::info!(redis = %self.url, "the shared state answers");
            } else if let Err(e) = &result {
                tracing::error!(error = %e, "the shared state does not answer; requests that need it fail until it does");
            }
        }
        result
    }

    /// A tool vector's key: the model's and the text's hashes.
    fn vector_key(&self, model: &str, text_key: &str) -> String {
        use sha2::Digest;
        let model_hash = sha2::Sha256::digest(model.as_bytes());
        let short: String = model_hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:vec:{short}:{text_key}", self.prefix)
    }

    fn key(&self, kind: &str, session: &str) -> String {
        format!("{}:{kind}:{session}", self.prefix)
    }

    async fn touch(&self, session: &str) -> Result<Option<String>, SharedStateError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.touch.prepare_invoke();
        invocation
            .arg(&self.prefix)
            .arg(session)
            .arg(now_ms())
            .arg(self.ttl_secs)
            .arg(self.limits.max_sessions);
        self.run(
            "mark the session used",
            invocation.invoke_async(&mut connection),
        )
        .await
    }

    pub async fn load_mcp_session(
        &self,
        session: &str,
    ) -> Result<Option<SessionState>, SharedStateError> {
        let mut connection = self.connection.clone();
        let key = self.key("mcp", session);
        let stored: Option<String> = self
            .run("read the MCP session", connection.get(&key))
            .await?;
        let Some(text) = stored else {
            return Ok(None);
        };
        self.touch(session).await?;
        serde_json::from_str(&text).map(Some).map_err(|e| {
            self.error(format_args!(
                "the stored MCP session `{session}` is unreadable: {e}"
            ))
        })
    }

    pub async fn store_mcp_session(
        &self,
        session: &str,
        state: &SessionState,
    ) -> Result<(), SharedStateError> {
        let text = serde_json::to_string(state)
            .map_err(|e| self.error(format_args!("cannot write the MCP session: {e}")))?;
        let mut connection = self.connection.clone();
        let key = self.key("mcp", session);
        self.run(
            "store the MCP session",
            connection.set_ex::<_, _, ()>(&key, text, self.ttl_secs),
        )
        .await?;
        self.touch(session).await.map(drop)
    }

    /// Pings Redis, for tests and the start-up message.
    pub async fn ping(&self) -> Result<(), SharedStateError> {
        let mut connection = self.connection.clone();
        self.run(
            "ping",
            redis::cmd("PING").query_async::<String>(&mut connection),
        )
        .await
        .map(drop)
    }
}

#[async_trait]
impl SharedSessions for RedisState {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    async fn check(&self) -> Result<(), SharedStateError> {
        self.ping().await
    }

    async fn load_reveals(&self, key: &str) -> Result<Option<SessionSnapshot>, SharedStateError> {
        let Some(text) = self.touch(key).await? else {
            return Ok(None);
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            self.error(format_args!(
                "the stored reveals of `{key}` are unreadable: {e}"
            ))
        })
    }

    async fn save_reveals(
        &self,
        key: &str,
        snapshot: &SessionSnapshot,
    ) -> Result<(), SharedStateError> {
        let text = serde_json::to_string(snapshot)
            .map_err(|e| self.error(format_args!("cannot write the reveals: {e}")))?;
        let mut connection = self.connection.clone();
        let redis_key = self.key("reveals", key);
        self.run(
            "store the reveals",
            connection.set_ex::<_, _, ()>(&redis_key, text, self.ttl_secs),
        )
        .await
    }

    async fn put_output(
        &self,
        key: &str,
        handle: &str,
        output: &SharedOutput,
    ) -> Result<(), SharedStateError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.put_output.prepare_invoke();
        invocation
            .arg(&self.prefix)
            .arg(key)
            .arg(handle)
            .arg(&output.tool)
            .arg(&output.text)
            .arg(self.limits.max_outputs_per_session)
            .arg(self.limits.max_bytes_per_session)
            .arg(self.ttl_secs);
        self.run::<i64, _>(
            "store a large output",
            invocation.invoke_async(&mut connection),
        )
        .await
        .map(drop)
    }

    async fn get_output(
        &self,
        key: &str,
        handle: &str,
    ) -> Result<Option<SharedOutput>, SharedStateError> {
        let mut connection = self.connection.clone();
        let redis_key = format!("{}:out:{key}:{handle}", self.prefix);
        let (tool, text): (Option<String>, Option<String>) = self
            .run(
                "read a large output",
                redis::cmd("HMGET")
                    .arg(&redis_key)
                    .arg("tool")
                    .arg("text")
                    .query_async(&mut connection),
            )
            .await?;
        Ok(tool
            .zip(text)
            .map(|(tool, text)| SharedOutput { tool, text }))
    }

    async fn set_owner(
        &self,
        session: &str,
        owner: Option<&TokenId>,
        per_token: usize,
    ) -> Result<Vec<String>, SharedStateError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.claim.prepare_invoke();
        invocation
            .arg(&self.prefix)
            .arg(session)
            .arg(owner.map_or("-", TokenId::as_str))
            .arg(now_ms())
            .arg(self.ttl_secs)
            .arg(per_token.max(1));
        self.run(
            "record the session's token",
            invocation.invoke_async(&mut connection),
        )
        .await
    }

    async fn owner(&self, session: &str) -> Result<Option<Option<TokenId>>, SharedStateError> {
        let mut connection = self.connection.clone();
        let value: Option<String> = self
            .run(
                "read the session's token",
                connection.get(self.key("owner", session)),
            )
            .await?;
        Ok(value.map(|v| (v != "-").then(|| TokenId::from_stored(&v))))
    }

    async fn end_session(&self, session: &str) -> Result<(), SharedStateError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.forget.prepare_invoke();
        invocation.arg(&self.prefix).arg(session);
        self.run::<i64, _>(
            "forget the session",
            invocation.invoke_async(&mut connection),
        )
        .await
        .map(drop)
    }

    async fn publish(&self, notice: &Notice) -> Result<(), SharedStateError> {
        let text = serde_json::to_string(notice)
            .map_err(|e| self.error(format_args!("cannot write a notice: {e}")))?;
        let mut connection = self.connection.clone();
        let channel = format!("{}:notices", self.prefix);
        self.run::<i64, _>("publish a notice", connection.publish(channel, text))
            .await
            .map(drop)
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    fn replica(&self) -> &str {
        &self.replica
    }

    async fn get_vectors(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>, SharedStateError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.connection.clone();
        let redis_keys: Vec<String> = keys.iter().map(|k| self.vector_key(model, k)).collect();
        self.run(
            "read shared tool vectors",
            redis::cmd("MGET")
                .arg(redis_keys)
                .query_async(&mut connection),
        )
        .await
    }

    async fn put_vectors(
        &self,
        model: &str,
        entries: Vec<(String, Vec<u8>)>,
    ) -> Result<(), SharedStateError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (key, bytes) in entries {
            pipe.cmd("SET")
                .arg(self.vector_key(model, &key))
                .arg(bytes)
                .arg("EX")
                .arg(VECTOR_TTL_SECS)
                .ignore();
        }
        let mut connection = self.connection.clone();
        self.run(
            "share tool vectors",
            pipe.query_async::<()>(&mut connection),
        )
        .await
    }

    fn mcp_session_store(
        self: Arc<Self>,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::SessionStore>> {
        Some(Arc::new(super::McpSessionStore(self)))
    }
}

/// Says at start whether Redis answers (an error a deployment sees at once when it does not),
/// then pings it every few seconds so that `/metrics` tells when it stops answering even while
/// no request needs it.
/// A connection to `client`'s Redis, made on first use and again after a failure, every command
/// answered within `timeout` (`state.timeoutMs`) or failed.
pub(crate) fn lazy_connection(
    client: redis::Client,
    timeout: Duration,
) -> redis::RedisResult<ConnectionManager> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config)
}

async fn watch(state: std::sync::Weak<RedisState>) {
    let mut first = true;
    loop {
        let Some(state) = state.upgrade() else {
            return;
        };
        let outcome = state.ping().await;
        if first {
            match outcome {
                Ok(()) => {
                    tracing::info!(redis = %state.url, "sessions are kept in Redis, shared with every replica on it")
                }
                Err(e) => {
                    tracing::error!(error = %e, "Redis does not answer at start; MCP sessions cannot start or continue until it does (see /metrics: toolsearch_state_store_up)")
                }
            }
            first = false;
        }
        drop(state);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Follows the other replicas' notices until the store is dropped, reconnecting when the
/// subscription breaks.
async fn follow_notices(state: std::sync::Weak<RedisState>, client: redis::Client) {
    use futures::StreamExt;
    loop {
        let Some((channel, replica, sender)) = state.upgrade().map(|s| {
            (
                format!("{}:notices", s.prefix),
                s.replica.clone(),
                s.notices.clone(),
            )
        }) else {
            return;
        };
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        let Ok(text) = message.get_payload::<String>() else {
                            continue;
                        };
                        match serde_json::from_str::<Notice>(&text) {
                            Ok(notice) if notice.from != replica => {
                                let _ = sender.send(notice);
                            }
                            Ok(_) => {}
                            Err(e) => tracing::debug!(error = %e, "ignored an unreadable notice"),
                        }
                    }
                    tracing::debug!("the notice subscription ended; subscribing again");
                }
                Err(e) => tracing::debug!(error = %e, "cannot subscribe to notices"),
            },
            Err(e) => tracing::debug!(error = %e, "cannot open the notice subscription"),
        }
        drop(sender);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A replica's name: distinct across processes started at once on one or several hosts.
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now_ms() as u128);
    hasher.write_u32(std::process::id());
    hasher.finish()
}
