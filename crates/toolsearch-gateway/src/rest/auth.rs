//! Bearer tokens and what each may see. Tokens are kept as SHA-256 digests and compared in
//! constant time, every token each time, so neither the content nor the length of a token leaks
//! through response timing. Each token carries a [`Scope`]: a request that passes the check
//! carries the [`Grant`] of its token, which the REST handlers and the MCP sessions read.

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

/// The environment variable holding comma-separated tokens.
pub const TOKENS_ENV: &str = "TOOLSEARCH_API_TOKENS";

/// What a request that passed the token check may see: its token (by position, never by value)
/// and that token's scope. Without tokens configured, every request gets [`Grant::open`].
#[derive(Debug, Clone)]
pub struct Grant {
    token: Option<usize>,
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

    /// Which configured token this is (its position), `None` without tokens. Two grants of the
    /// same token have the same owner.
    pub fn owner(&self) -> Option<usize> {
        self.token
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
    /// Where the token came from, for errors (`rest.tokens[1]`, `TOOLSEARCH_API_TOKENS #2`).
    source: String,
    label: Arc<str>,
    scope: Arc<Scope>,
}

/// The accepted bearer tokens and their scopes; none means the API is open.
#[derive(Clone, Default)]
pub struct ApiTokens {
    entries: Vec<Entry>,
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
            token: Some(i),
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
    match grant_for(&tokens, request.headers()) {
        Some(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        None => ApiError::Unauthorized.into_response(),
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
