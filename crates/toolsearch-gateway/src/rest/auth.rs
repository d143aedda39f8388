//! Bearer tokens. Tokens are kept as SHA-256 digests and compared in constant time, every token each
//! time, so neither the content nor the length of a token leaks through response timing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::error::GatewayError;

/// The environment variable holding comma-separated tokens.
pub const TOKENS_ENV: &str = "TOOLSEARCH_API_TOKENS";

/// The accepted bearer tokens; none means the API is open.
#[derive(Clone, Default)]
pub struct ApiTokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiTokens {
    // Never print tokens or their digests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiTokens({} configured)", self.digests.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl ApiTokens {
    /// No tokens: every request is let through.
    pub fn none() -> Self {
        Self::default()
    }

    /// Tokens given directly; empty or whitespace-containing tokens are an error.
    pub fn new<I, S>(tokens: I) -> Result<Self, GatewayError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Self::default();
        for (i, token) in tokens.into_iter().enumerate() {
            let token = token.as_ref();
            if token.is_empty() || token.chars().any(char::is_whitespace) {
                return Err(GatewayError::InvalidApiToken {
                    source_name: "tokens".into(),
                    index: i,
                });
            }
            out.digests.push(digest(token.as_bytes()));
        }
        Ok(out)
    }

    /// Tokens of the config (`rest.apiTokens`) plus those of `TOOLSEARCH_API_TOKENS`.
    pub fn from_config_and_env(config_tokens: &[String]) -> Result<Self, GatewayError> {
        let mut tokens = Self::new(config_tokens)?;
        if let Ok(value) = std::env::var(TOKENS_ENV) {
            for (i, token) in value.split(',').map(str::trim).enumerate() {
                // A trailing comma or an unset-but-exported variable is harmless.
                if token.is_empty() {
                    continue;
                }
                if token.chars().any(char::is_whitespace) {
                    return Err(GatewayError::InvalidApiToken {
                        source_name: TOKENS_ENV.into(),
                        index: i,
                    });
                }
                tokens.digests.push(digest(token.as_bytes()));
            }
        }
        Ok(tokens)
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether `candidate` is one of the tokens, in time independent of which one and where it differs.
    pub fn accepts(&self, candidate: &str) -> bool {
        let wanted = digest(candidate.as_bytes());
        let mut found = subtle::Choice::from(0u8);
        for token in &self.digests {
            found |= token.ct_eq(&wanted);
        }
        found.into()
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

/// Whether a request with these headers may pass: no token is configured, or it carries one of
/// them. The one check of both edges, `/mcp` and the REST routes.
pub fn authorized(tokens: &ApiTokens, headers: &HeaderMap) -> bool {
    tokens.is_empty() || bearer(headers).is_some_and(|token| tokens.accepts(token))
}

/// Middleware of `/mcp` and the REST routes: lets an [`authorized`] request through, answers 401
/// with `WWW-Authenticate: Bearer` otherwise.
pub async fn require_token(
    State(tokens): State<Arc<ApiTokens>>,
    request: Request,
    next: Next,
) -> Response {
    if authorized(&tokens, request.headers()) {
        next.run(request).await
    } else {
        ApiError::Unauthorized.into_response()
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
}
