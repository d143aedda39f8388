//! Bearer tokens and what each may see. Tokens are kept as SHA-256 digests and compared in
//! constant time, every token each time, so neither the content nor the length of a token leaks
//! through response timing. Each token carries a [`Scope`]: a request that passes the check
//! carries the [`Grant`] of its token, which the REST handlers and the MCP sessions read.
//!
//! Wherever sessions are kept, a token is known by its [`TokenId`]: a keyed hash of the token,
//! the same on every replica whatever the order of its token list, and never the token itself.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use toolsearch_core::Scope;

use super::error::ApiError;
use crate::config::RestConfig;
use crate::error::GatewayError;
pub use crate::shared::TokenId;

/// The environment variable holding comma-separated tokens.
pub const TOKENS_ENV: &str = "TOOLSEARCH_API_TOKENS";

/// The HMAC key of [`TokenId`]s for a deployment whose shared keys start with `prefix`: replicas
/// that share sessions share the prefix, so they derive the same key.
fn identity_key(prefix: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"toolsearch token identity v1\0");
    hasher.update(prefix.as_bytes());
    hasher.finalize().into()
}

fn identity(key: &[u8; 32], digest: &[u8; 32]) -> TokenId {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(key) else {
        unreachable!("HMAC takes a key of any length")
    };
    mac.update(digest);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    TokenId::from_stored(&hex)
}

/// What a request that passed the token check may see: its token (by [`TokenId`], never by
/// value) and that token's scope. Without tokens configured, every request gets [`Grant::open`].
#[derive(Debug, Clone)]
pub struct Grant {
    token: Option<TokenId>,
    label: Arc<str>,
    scope: Arc<Scope>,
}

impl Grant {
    /// No token configured: every tool.
    pub fn open() -> Self {
        Self {
            token: None,
            label: "no token".into(),
            scope: Arc::new(Scope::all()),
        }
    }

    /// Which configured token this is, `None` without tokens. Two grants of the same token have
    /// the same owner, on every replica.
    pub fn owner(&self) -> Option<TokenId> {
        self.token.clone()
    }

    /// The token's name for logs (`rest.tokens[0]`, or the `name` it was given); never the token.
    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn scope(&self) -> &Arc<Scope> {
        &self.scope
    }
}

/// Handlers take the grant the token check attached to the request. A request that reached a
/// handler without one was not checked: it is refused rather than served with any scope.
impl<S: Send + Sync> FromRequestParts<S> for Grant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Grant>().cloned().ok_or_else(|| {
            ApiError::Internal("the request reached a handler without a token check".into())
        })
    }
}

#[derive(Clone)]
struct Entry {
    digest: [u8; 32],
    identity: TokenId,
    /// Where the token came from, for errors (`rest.tokens[1]`, `TOOLSEARCH_API_TOKENS #2`).
    source: String,
    label: Arc<str>,
    scope: Arc<Scope>,
}

/// The accepted bearer tokens and their scopes; none means the API is open.
#[derive(Clone)]
pub struct ApiTokens {
    entries: Vec<Entry>,
    identity_key: [u8; 32],
    in_progress: Arc<InProgressLimit>,
}

impl Default for ApiTokens {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            identity_key: identity_key(&crate::config::StateConfig::default().prefix),
            in_progress: Arc::new(InProgressLimit::new(
                crate::listener_config::DEFAULT_MAX_REQUESTS_PER_TOKEN,
            )),
        }
    }
}

/// The requests of each token in progress (`http.maxRequestsPerToken`), so that one token's
/// requests, slow or stalled, never hold every connection of the listener.
struct InProgressLimit {
    max: usize,
    counts: std::sync::Mutex<std::collections::HashMap<TokenId, usize>>,
    metrics: std::sync::OnceLock<crate::metrics::Metrics>,
}

impl InProgressLimit {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            counts: Default::default(),
            metrics: Default::default(),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<TokenId, usize>> {
        // Plain counters: a panic elsewhere cannot leave them inconsistent.
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for one more request of `token`, held until the returned guard drops; `None` when
    /// the token is at its limit.
    fn enter(self: &Arc<Self>, token: &TokenId) -> Option<InProgressSlot> {
        let mut counts = self.counts();
        let count = counts.entry(token.clone()).or_insert(0);
        if *count >= self.max {
            drop(counts);
            if let Some(metrics) = self.metrics.get() {
                metrics.limit_refused("requests");
            }
            return None;
        }
        *count += 1;
        Some(InProgressSlot {
            limit: self.clone(),
            token: token.clone(),
        })
    }
}

/// One request of a token in progress; its end frees the slot.
struct InProgressSlot {
    limit: Arc<InProgressLimit>,
    token: TokenId,
}

impl Drop for InProgressSlot {
    fn drop(&mut self) {
        let mut counts = self.limit.counts();
        if let Some(count) = counts.get_mut(&self.token) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.token);
            }
        }
    }
}

/// A response body that holds `guard` until the body is done or dropped: a streamed answer
/// keeps what it holds (a request slot, a stream slot) for as long as it streams.
pub(crate) fn hold_until_sent<G: Send + Unpin + 'static>(response: Response, guard: G) -> Response {
    response.map(|inner| {
        axum::body::Body::new(Holding {
            inner,
            _guard: guard,
        })
    })
}

struct Holding<G> {
    inner: axum::body::Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for Holding<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The answer to a request refused because its token is at one of its limits: 429 with a
/// `Retry-After`, as a JSON-RPC error on `/mcp` (what MCP clients read) and as the REST API's
/// error elsewhere. `message` names the limit and the setting that raises it.
pub(crate) fn at_limit(mcp: bool, message: &str) -> Response {
    let body = if mcp {
        serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}})
    } else {
        serde_json::json!({"error": {"code": "too_many_requests", "message": message}})
    };
    let mut response =
        (axum::http::StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

impl std::fmt::Debug for ApiTokens {
    // Never print tokens or their digests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiTokens({} configured)", self.entries.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn usable(token: &str) -> bool {
    !token.is_empty() && !token.chars().any(char::is_whitespace)
}

impl ApiTokens {
    /// No tokens: every request is let through.
    pub fn none() -> Self {
        Self::default()
    }

    /// Tokens given directly, each allowed every tool; empty or whitespace-containing tokens are
    /// an error.
    pub fn new<I, S>(tokens: I) -> Result<Self, GatewayError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Self::default();
        for (i, token) in tokens.into_iter().enumerate() {
            out.add(
                token.as_ref(),
                format!("tokens #{}", i + 1),
                None,
                Scope::all(),
            )
            .map_err(|e| invalid_at(e, "tokens", i))?;
        }
        Ok(out)
    }

    /// Adds one token. The same token twice is one token, unless the two scopes differ: then
    /// which scope applies would be a guess, so it is an error.
    fn add(
        &mut self,
        token: &str,
        source: String,
        name: Option<String>,
        scope: Scope,
    ) -> Result<(), GatewayError> {
        if !usable(token) {
            return Err(GatewayError::InvalidApiToken {
                source_name: source,
                index: 0,
            });
        }
        let digest = digest(token.as_bytes());
        if let Some(same) = self.entries.iter().find(|e| e.digest == digest) {
            if *same.scope != scope {
                return Err(GatewayError::ConflictingApiToken {
                    first: same.source.clone(),
                    second: source,
                });
            }
            return Ok(());
        }
        let label: Arc<str> = name.unwrap_or_else(|| source.clone()).into();
        self.entries.push(Entry {
            identity: identity(&self.identity_key, &digest),
            digest,
            source,
            label,
            scope: Arc::new(scope),
        });
        Ok(())
    }

    /// The tokens of the config (`rest.apiTokens`, every tool; `[[rest.tokens]]`, each with its
    /// tools, the secret given or read from its `tokenEnv` variable) plus those of
    /// `TOOLSEARCH_API_TOKENS` (every tool).
    pub fn from_config_and_env(rest: &RestConfig) -> Result<Self, GatewayError> {
        let mut tokens = Self::default();
        for (i, token) in rest.api_tokens.iter().enumerate() {
            tokens
                .add(token, format!("rest.apiTokens[{i}]"), None, Scope::all())
                .map_err(|e| invalid_at(e, "rest.apiTokens", i))?;
        }
        for (i, entry) in rest.tokens.iter().enumerate() {
            let source = format!("rest.tokens[{i}]");
            let secret = match (&entry.token, &entry.token_env) {
                (Some(token), _) => token.clone(),
                (None, Some(var)) => {
                    let unusable = |why: &str| GatewayError::TokenEnv {
                        key: format!("{source}.tokenEnv"),
                        var: var.clone(),
                        why: why.to_string(),
                    };
                    let value = std::env::var(var).map_err(|e| match e {
                        std::env::VarError::NotPresent => unusable("it is not set"),
                        std::env::VarError::NotUnicode(_) => {
                            unusable("its value is not valid UTF-8")
                        }
                    })?;
                    if !usable(value.trim()) {
                        return Err(unusable("its value is empty or contains whitespace"));
                    }
                    value
                }
                (None, None) => {
                    return Err(GatewayError::InvalidApiToken {
                        source_name: source,
                        index: 0,
                    })
                }
            };
            let scope = match &entry.tools {
                Some(patterns) => Scope::only(patterns.iter().cloned()),
                None => Scope::all(),
            };
            let described = match &entry.token_env {
                Some(var) if entry.token.is_none() => {
                    format!("{source} (environment variable {var})")
                }
                _ => source,
            };
            tokens
                .add(secret.trim(), described, entry.name.clone(), scope)
                .map_err(|e| invalid_at(e, "rest.tokens", i))?;
        }
        if let Ok(value) = std::env::var(TOKENS_ENV) {
            for (i, token) in value.split(',').map(str::trim).enumerate() {
                // A trailing comma or an unset-but-exported variable is harmless.
                if token.is_empty() {
                    continue;
                }
                tokens
                    .add(
                        token,
                        format!("{TOKENS_ENV} #{}", i + 1),
                        None,
                        Scope::all(),
                    )
                    .map_err(|e| invalid_at(e, TOKENS_ENV, i))?;
            }
        }
        Ok(tokens)
    }

    /// Keys the tokens' identities for the deployment whose shared keys start with `prefix`
    /// (`state.prefix`), so that every replica of it names each token alike.
    pub fn keyed_for(mut self, prefix: &str) -> Self {
        self.identity_key = identity_key(prefix);
        for entry in &mut self.entries {
            entry.identity = identity(&self.identity_key, &entry.digest);
        }
        self
    }

    /// Caps each token's requests in progress at `max` (`http.maxRequestsPerToken`).
    pub fn with_request_limit(mut self, max: usize) -> Self {
        self.in_progress = Arc::new(InProgressLimit::new(max));
        self
    }

    /// Counts the requests refused at the limit in `metrics`.
    pub fn count_refusals_in(&self, metrics: &crate::metrics::Metrics) {
        let _ = self.in_progress.metrics.set(metrics.clone());
    }

    /// Whether `owner` is one of the configured tokens (`None`: no tokens are configured). A
    /// session whose token was removed from the config ends.
    pub fn knows(&self, owner: Option<&TokenId>) -> bool {
        match owner {
            None => self.is_empty(),
            Some(owner) => self.entries.iter().any(|e| &e.identity == owner),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `candidate` is one of the tokens, in time independent of which one and where it differs.
    pub fn accepts(&self, candidate: &str) -> bool {
        self.grant(candidate).is_some()
    }

    /// The grant of `candidate` when it is one of the tokens. Every token is compared, in time
    /// independent of which one matches and where the others differ.
    pub fn grant(&self, candidate: &str) -> Option<Grant> {
        let wanted = digest(candidate.as_bytes());
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u64;
        for (i, entry) in self.entries.iter().enumerate() {
            let same = entry.digest.ct_eq(&wanted);
            index = u64::conditional_select(&index, &(i as u64), same);
            found |= same;
        }
        if !bool::from(found) {
            return None;
        }
        let i = usize::try_from(index).ok()?;
        let entry = self.entries.get(i)?;
        Some(Grant {
            token: Some(entry.identity.clone()),
            label: entry.label.clone(),
            scope: entry.scope.clone(),
        })
    }
}

/// An invalid-token error as the position in its list.
fn invalid_at(error: GatewayError, source_name: &str, index: usize) -> GatewayError {
    match error {
        GatewayError::InvalidApiToken { .. } => GatewayError::InvalidApiToken {
            source_name: source_name.to_string(),
            index,
        },
        other => other,
    }
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive
/// (RFC 7235 §2.1), so `bearer` and `BEARER` are accepted as well.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// What a request with these headers may see: everything when no token is configured, its
/// token's grant when it carries one of them, `None` (refused) otherwise. The one check of both
/// edges, `/mcp` and the REST routes.
pub fn grant_for(tokens: &ApiTokens, headers: &HeaderMap) -> Option<Grant> {
    if tokens.is_empty() {
        return Some(Grant::open());
    }
    bearer(headers).and_then(|token| tokens.grant(token))
}

/// Whether a request with these headers may pass ([`grant_for`]).
pub fn authorized(tokens: &ApiTokens, headers: &HeaderMap) -> bool {
    grant_for(tokens, headers).is_some()
}

/// Middleware of `/mcp` and the REST routes: lets a request with a [`grant_for`] through, with
/// the [`Grant`] attached; answers 401 with `WWW-Authenticate: Bearer` otherwise.
pub async fn require_token(
    State(tokens): State<Arc<ApiTokens>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(grant) = grant_for(&tokens, request.headers()) else {
        return ApiError::Unauthorized.into_response();
    };
    let slot = match grant.owner() {
        Some(token) => match tokens.in_progress.enter(&token) {
            Some(slot) => Some(slot),
            None => {
                tracing::debug!(
                    token = grant.label(),
                    "request refused: the token is at http.maxRequestsPerToken"
                );
                let mcp = request.uri().path().starts_with(crate::MCP_PATH);
                return at_limit(
                    mcp,
                    &format!(
                        "this token already has {} requests in progress, its limit; wait for some to finish and retry (the operator can raise http.maxRequestsPerToken)",
                        tokens.in_progress.max
                    ),
                );
            }
        },
        // Without tokens every client is the same caller: nothing to share fairly.
        None => None,
    };
    request.extensions_mut().insert(grant);
    let response = next.run(request).await;
    match slot {
        Some(slot) => hold_until_sent(response, slot),
        None => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_configured_tokens() {
        let tokens = ApiTokens::new(["alpha-token", "beta"]).unwrap();
        assert!(tokens.accepts("alpha-token"));
        assert!(tokens.accepts("beta"));
        assert!(!tokens.accepts("alpha-toke"));
        assert!(!tokens.accepts("alpha-tokenx"));
        assert!(!tokens.accepts(""));
        assert!(!ApiTokens::none().accepts("x"));
        assert!(ApiTokens::new([""]).is_err());
        assert!(ApiTokens::new(["a b"]).is_err());
        assert_eq!(format!("{tokens:?}"), "ApiTokens(2 configured)");
    }

    #[test]
    fn a_tokens_identity_depends_on_the_token_alone() {
        let owner = |tokens: &ApiTokens, token: &str| tokens.grant(token).unwrap().owner();
        let ab = ApiTokens::new(["alpha", "beta"]).unwrap();
        let ba = ApiTokens::new(["beta", "alpha"]).unwrap();
        assert_eq!(owner(&ab, "alpha"), owner(&ba, "alpha"));
        assert_ne!(owner(&ab, "alpha"), owner(&ab, "beta"));
        let id = owner(&ab, "alpha").unwrap();
        assert_eq!(id.as_str().len(), 64);
        assert!(!id.as_str().contains("alpha"));
        // Another deployment (another `state.prefix`) names the same token otherwise.
        let elsewhere = ApiTokens::new(["alpha"]).unwrap().keyed_for("elsewhere");
        assert_ne!(owner(&elsewhere, "alpha"), Some(id.clone()));
        // Revoked: a list without the token does not know its identity.
        let bc = ApiTokens::new(["beta", "gamma"]).unwrap();
        assert!(ab.knows(Some(&id)) && !bc.knows(Some(&id)));
        assert!(ApiTokens::none().knows(None) && !ab.knows(None));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let tokens = ApiTokens::new(["alpha-token"]).unwrap();
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, value.parse().unwrap());
            authorized(&tokens, &headers)
        };
        for ok in [
            "Bearer alpha-token",
            "bearer alpha-token",
            "BEARER alpha-token",
            "Bearer  alpha-token ",
        ] {
            assert!(with(ok), "{ok}");
        }
        for refused in [
            "Bearer alpha-toke",
            "Basic alpha-token",
            "Bearer",
            "alpha-token",
            "Bearer: alpha-token",
        ] {
            assert!(!with(refused), "{refused}");
        }
        assert!(!authorized(&tokens, &HeaderMap::new()));
        assert!(authorized(&ApiTokens::none(), &HeaderMap::new()));
    }

    fn config(text: &str) -> RestConfig {
        crate::config::GatewayConfig::parse(text, crate::config::Format::Toml, "test.toml")
            .unwrap()
            .rest
    }

    #[test]
    fn each_token_grants_its_own_scope() {
        let naming = toolsearch_core::Naming::default();
        let rest = config(
            r#"
            [rest]
            apiTokens = ["everything-token"]
            [[rest.tokens]]
            name = "github only"
            token = "github-token"
            tools = ["github:*"]
            [[rest.tokens]]
            tokenEnv = "CARGO_PKG_NAME"
            tools = ["weather:get_*"]
            "#,
        );
        let tokens = ApiTokens::from_config_and_env(&rest).unwrap();
        let id = |server: &str, name: &str| toolsearch_core::ToolId::new(server, name);
        let all = tokens.grant("everything-token").unwrap();
        assert!(all.scope().is_all());
        let github = tokens.grant("github-token").unwrap();
        assert_eq!(github.label(), "github only");
        assert!(github
            .scope()
            .allows(&id("github", "create_issue"), &naming));
        assert!(!github
            .scope()
            .allows(&id("weather", "get_forecast"), &naming));
        // The secret of a `tokenEnv` entry is read from the environment (cargo sets this one).
        let from_env = tokens.grant(env!("CARGO_PKG_NAME")).unwrap();
        assert!(from_env
            .scope()
            .allows(&id("weather", "get_forecast"), &naming));
        assert!(!from_env
            .scope()
            .allows(&id("github", "create_issue"), &naming));
        assert_ne!(all.owner(), github.owner());
        assert_eq!(
            github.owner(),
            tokens.grant("github-token").unwrap().owner()
        );
        assert!(tokens.grant("github-toke").is_none());
        assert!(Grant::open().scope().is_all() && Grant::open().owner().is_none());
    }

    #[test]
    fn unusable_or_conflicting_tokens_are_refused_by_name() {
        let err = ApiTokens::from_config_and_env(&config(
            "[[rest.tokens]]\ntokenEnv = \"TOOLSEARCH_TEST_VARIABLE_THAT_IS_NOT_SET\"\n",
        ))
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("rest.tokens[0].tokenEnv")
                && message.contains("TOOLSEARCH_TEST_VARIABLE_THAT_IS_NOT_SET")
                && message.contains("not set"),
            "{message}"
        );
        let err = ApiTokens::from_config_and_env(&config(
            "[rest]\napiTokens = [\"dup-token-x7\"]\n[[rest.tokens]]\ntoken = \"dup-token-x7\"\ntools = [\"github:*\"]\n",
        ))
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("rest.apiTokens[0]") && message.contains("rest.tokens[0]"),
            "{message}"
        );
        assert!(
            !message.contains("dup-token-x7"),
            "never the token: {message}"
        );
        // The same token with the same scope twice is one token.
        let tokens = ApiTokens::new(["a", "a"]).unwrap();
        assert_eq!(tokens.len(), 1);
    }
}
