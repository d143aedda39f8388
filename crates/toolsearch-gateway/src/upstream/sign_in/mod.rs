//! OAuth sign-in to HTTP upstreams, through rmcp's implementation of the MCP authorization
//! spec (discovery from the protected-resource and authorization-server metadata, dynamic client
//! registration, authorization code with PKCE and the `resource` parameter, refresh).
//!
//! Where tokens are kept ([`SignIns`]): per user, one file per server in the user's config
//! folder ([`files`]); or, for the replicas of one deployment (`[state] redis` and
//! `TOOLSEARCH_TOKEN_KEY` set), in Redis, sealed with a key from that variable ([`shared`]), so
//! that a sign-in on one replica serves all. Each is bound to the server's URL: tokens kept for
//! another URL are not used. Nothing here logs a token.

mod files;
mod shared;

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, CredentialStore, OAuthState,
    StoredCredentials,
};
use serde::{Deserialize, Serialize};

pub use files::TokenStore;
pub use shared::{MIN_KEY_CHARS, TOKEN_KEY_ENV};

use crate::config::{OAuthSettings, StateConfig};
use shared::SharedTokens;

/// The client name an authorization server shows on its consent page.
const CLIENT_NAME: &str = "toolsearch";

/// Why a sign-in, or the use of its tokens, failed.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("cannot tell where to keep sign-in tokens: neither XDG_CONFIG_HOME nor HOME is set; set one of them")]
    NoConfigFolder,

    #[error("cannot {action} `{path}`: {source}")]
    File {
        action: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the stored sign-in `{place}` is unreadable ({reason}); run `toolsearch auth logout` and sign in again")]
    Corrupt { place: String, reason: String },

    #[error("the sign-in kept at `{place}` does not open with this {TOKEN_KEY_ENV}: it was sealed with another key, or changed; give every replica the same {TOKEN_KEY_ENV}, or run `toolsearch auth logout` and sign in again")]
    Unopenable { place: String },

    #[error("{TOKEN_KEY_ENV} is {chars} characters long; use at least {MIN_KEY_CHARS} random characters, the same on every replica (for example the output of `openssl rand -base64 32`)")]
    WeakKey { chars: usize },

    #[error("cannot seal or open a sign-in: {0}")]
    Seal(String),

    #[error("the sign-ins shared through Redis at {redis} cannot be read or written ({reason}); check that Redis is running and reachable (`[state] redis`)")]
    Shared { redis: String, reason: String },

    /// rmcp's error as text: its wording names the OAuth step that failed.
    #[error("signing in to `{url}` failed: {reason}")]
    OAuth { url: String, reason: String },

    #[error("the sign-in of `{server}` has ended (expired, or revoked by the service) and cannot be renewed; run `toolsearch auth login {server}`")]
    Expired { server: String },

    #[error("`oauth.clientSecretEnv` of server `{server}` names `{variable}`, which is not set; set it where you run the sign-in")]
    SecretUnset { server: String, variable: String },
}

impl SignInError {
    fn oauth(url: &str, error: AuthError) -> Self {
        SignInError::OAuth {
            url: url.to_string(),
            reason: error.to_string(),
        }
    }
}

/// What is kept of one server: its URL and rmcp's credentials for it.
#[derive(Serialize, Deserialize)]
struct Saved {
    url: String,
    credentials: StoredCredentials,
}

/// What `auth status` says of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInStatus {
    /// No tokens are kept for the server.
    SignedOut,
    /// Tokens are kept for another URL than the server's now: they are not used.
    OtherUrl { url: String },
    /// Tokens are kept; `expires_in` seconds are left of the access token when it said.
    SignedIn {
        expires_in: Option<u64>,
        refreshable: bool,
    },
}

impl SignInStatus {
    fn of(saved: Option<&Saved>, url: &str) -> Self {
        let Some(saved) = saved else {
            return SignInStatus::SignedOut;
        };
        if saved.url != url {
            return SignInStatus::OtherUrl {
                url: saved.url.clone(),
            };
        }
        let Some(tokens) = saved.credentials.token_response.as_ref() else {
            return SignInStatus::SignedOut;
        };
        use oauth2::TokenResponse;
        let expires_in = match (tokens.expires_in(), saved.credentials.token_received_at) {
            (Some(lifetime), Some(received)) => {
                let elapsed = now_secs().saturating_sub(received);
                Some(lifetime.as_secs().saturating_sub(elapsed))
            }
            _ => None,
        };
        SignInStatus::SignedIn {
            expires_in,
            refreshable: tokens.refresh_token().is_some(),
        }
    }
}

/// Where the gateway keeps sign-ins: the user's folder, and for replicas that share them, Redis.
#[derive(Debug, Clone)]
pub struct SignIns {
    /// The user's folder; `None` when neither XDG_CONFIG_HOME nor HOME is set.
    files: Option<TokenStore>,
    /// With it, every read and write goes to Redis; a sign-in found in the folder instead (made
    /// before sharing) moves there (see [`SignIns::read`]).
    shared: Option<Arc<SharedTokens>>,
}

impl SignIns {
    /// The current user's folder.
    pub fn for_user() -> Self {
        Self {
            files: TokenStore::for_user().ok(),
            shared: None,
        }
    }

    /// What the `state` section says: shared through Redis when it names Redis and
    /// `TOOLSEARCH_TOKEN_KEY` is set, else the user's folder (see [`unshared`]). Must run inside
    /// a Tokio runtime (Redis is connected lazily); fails on a key too short to be safe.
    pub fn from_state(state: &StateConfig) -> Result<Self, SignInError> {
        let mut sign_ins = Self::for_user();
        if let (Some(url), Some(secret)) = (&state.redis, token_key()) {
            sign_ins.shared = Some(Arc::new(SharedTokens::connect(url, state, &secret)?));
        }
        Ok(sign_ins)
    }

    /// Whether replicas share these sign-ins.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Where the tokens are, for what a user reads.
    pub fn place(&self) -> String {
        match (&self.shared, &self.files) {
            (Some(shared), _) => {
                format!("Redis at {} (sealed with {TOKEN_KEY_ENV})", shared.shown())
            }
            (None, Some(files)) => files.dir().display().to_string(),
            (None, None) => "nowhere (neither XDG_CONFIG_HOME nor HOME is set)".to_string(),
        }
    }

    /// What is kept for `server`. Shared: what Redis holds, else a sign-in the user made before
    /// sharing (their folder's), which moves to Redis (so that no copy outlives a sign-out).
    async fn read(&self, server: &str) -> Result<Option<Saved>, SignInError> {
        let from_files = || match &self.files {
            Some(files) => files.read(server),
            None => Ok(None),
        };
        let Some(shared) = &self.shared else {
            return from_files();
        };
        let stem = files::stem(server);
        if let Some(plain) = shared.get(&stem).await? {
            return serde_json::from_slice(&plain)
                .map(Some)
                .map_err(|e| SignInError::Corrupt {
                    place: format!("{} in Redis", server),
                    reason: e.to_string(),
                });
        }
        let earlier = from_files()?;
        if let (Some(saved), Some(files)) = (&earlier, &self.files) {
            self.write(server, saved).await?;
            files.remove(server)?;
        }
        Ok(earlier)
    }

    async fn write(&self, server: &str, saved: &Saved) -> Result<(), SignInError> {
        match (&self.shared, &self.files) {
            (Some(shared), _) => {
                let plain = serde_json::to_vec(saved).map_err(|e| SignInError::Corrupt {
                    place: format!("{server} in Redis"),
                    reason: e.to_string(),
                })?;
                shared.put(&files::stem(server), &plain).await
            }
            (None, Some(files)) => files.write(server, saved),
            (None, None) => Err(SignInError::NoConfigFolder),
        }
    }

    /// Forgets `server`'s tokens wherever they are kept; whether there were any.
    pub async fn remove(&self, server: &str) -> Result<bool, SignInError> {
        let mut removed = false;
        if let Some(shared) = &self.shared {
            removed |= shared.delete(&files::stem(server)).await?;
        }
        if let Some(files) = &self.files {
            removed |= files.remove(server)?;
        }
        Ok(removed)
    }

    /// Whether `server` at `url` has tokens, and how long its access token has left.
    pub async fn status(&self, server: &str, url: &str) -> Result<SignInStatus, SignInError> {
        Ok(SignInStatus::of(self.read(server).await?.as_ref(), url))
    }

    /// Returns once `server`'s tokens are written or removed (checked each second); never when
    /// there is nowhere to keep them.
    pub async fn changed(&self, server: &str) {
        let stem = files::stem(server);
        let look = || async {
            match (&self.shared, &self.files) {
                (Some(shared), _) => Some(format!("{:?}", shared.sealed(&stem).await.ok())),
                (None, Some(files)) => Some(format!("{:?}", files.stamp(server))),
                (None, None) => None,
            }
        };
        let Some(before) = look().await else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if look().await.as_ref() != Some(&before) {
                return;
            }
        }
    }

    /// The credential store rmcp reads and writes for `server` at `url`.
    fn credentials(&self, server: &str, url: &str) -> Credentials {
        Credentials {
            sign_ins: self.clone(),
            server: server.to_string(),
            url: url.to_string(),
        }
    }
}

/// `TOOLSEARCH_TOKEN_KEY`, when set.
fn token_key() -> Option<String> {
    std::env::var(TOKEN_KEY_ENV).ok().filter(|v| !v.is_empty())
}

/// Why replicas of `state` do not share sign-ins though they share sessions (Redis without
/// `TOOLSEARCH_TOKEN_KEY`), for a warning; `None` when that is not the case.
pub fn unshared(state: &StateConfig) -> Option<String> {
    (state.redis.is_some() && token_key().is_none()).then(|| {
        format!(
            "sign-ins to OAuth servers are kept per replica, in each one's config folder: set {TOKEN_KEY_ENV} (at least {MIN_KEY_CHARS} random characters, the same on every replica) to share them through Redis, sealed"
        )
    })
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// rmcp's credential store over one server's sign-in. Credentials kept for another URL read as
/// none, so a changed `url` never receives the old server's tokens.
struct Credentials {
    sign_ins: SignIns,
    server: String,
    url: String,
}

fn store_error(error: SignInError) -> AuthError {
    AuthError::InternalError(error.to_string())
}

#[async_trait]
impl CredentialStore for Credentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let saved = self
            .sign_ins
            .read(&self.server)
            .await
            .map_err(store_error)?;
        Ok(saved
            .filter(|saved| saved.url == self.url)
            .map(|saved| saved.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let saved = Saved {
            url: self.url.clone(),
            credentials,
        };
        self.sign_ins
            .write(&self.server, &saved)
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.sign_ins
            .remove(&self.server)
            .await
            .map(|_| ())
            .map_err(store_error)
    }
}

/// rmcp's manager of the sign-in to `server` at `url`, keeping its credentials in `sign_ins`.
async fn manager(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
) -> Result<AuthorizationManager, SignInError> {
    // Its HTTP client needs the process's TLS provider, as the upstreams' does.
    crate::upstream::wire::ensure_crypto_provider();
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| SignInError::oauth(url, e))?;
    manager.set_credential_store(sign_ins.credentials(server, url));
    Ok(manager)
}

/// Signs in to `server` at `url`: discovers its authorization server, registers this client
/// (dynamically, unless `settings` name a client registered beforehand), hands the page to sign
/// in on to `show`, waits for `redirect` to give the URL the browser was sent back to (with the
/// code), exchanges the code and keeps the tokens.
pub async fn sign_in<F>(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    settings: Option<&OAuthSettings>,
    redirect_uri: &str,
    show: impl FnOnce(&str),
    redirect: F,
) -> Result<(), SignInError>
where
    F: std::future::Future<Output = Result<String, SignInError>>,
{
    let pending = PendingSignIn::begin(sign_ins, server, url, settings, redirect_uri).await?;
    show(pending.page());
    let redirected = redirect.await?;
    pending.finish(&redirected).await
}

/// A sign-in whose page is open, waiting for the browser to come back.
pub struct PendingSignIn {
    state: OAuthState,
    page: String,
    url: String,
}

impl std::fmt::Debug for PendingSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSignIn")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PendingSignIn {
    /// Discovers, registers, and makes the page to sign in on, which sends the browser back to
    /// `redirect_uri`.
    pub async fn begin(
        sign_ins: &SignIns,
        server: &str,
        url: &str,
        settings: Option<&OAuthSettings>,
        redirect_uri: &str,
    ) -> Result<Self, SignInError> {
        let request = authorization_request(server, redirect_uri, settings)?;
        let mut state = OAuthState::Unauthorized(manager(sign_ins, server, url).await?);
        let oauth = |e| SignInError::oauth(url, e);
        state.start_authorization(request).await.map_err(oauth)?;
        let page = state.get_authorization_url().await.map_err(oauth)?;
        Ok(Self {
            state,
            page,
            url: url.to_string(),
        })
    }

    /// The page to sign in on.
    pub fn page(&self) -> &str {
        &self.page
    }

    /// The page's `state` parameter, which the browser brings back: what a callback is matched
    /// by.
    pub fn key(&self) -> Option<String> {
        url::Url::parse(&self.page)
            .ok()?
            .query_pairs()
            .find(|(name, _)| name == "state")
            .map(|(_, value)| value.into_owned())
    }

    /// Exchanges the code of `redirected` (the address the browser came back to) and keeps the
    /// tokens.
    pub async fn finish(mut self, redirected: &str) -> Result<(), SignInError> {
        let url = self.url.clone();
        self.state
            .handle_callback_url(redirected)
            .await
            .map_err(|e| SignInError::oauth(&url, e))
    }
}

/// What the sign-in asks for: the client (registered dynamically, or the configured one with
/// its secret from the environment) and the scopes (the configured ones, else the server's).
fn authorization_request(
    server: &str,
    redirect_uri: &str,
    settings: Option<&OAuthSettings>,
) -> Result<AuthorizationRequest, SignInError> {
    let mut request = AuthorizationRequest::new(redirect_uri).with_client_name(CLIENT_NAME);
    let Some(settings) = settings else {
        return Ok(request);
    };
    if let Some(client_id) = &settings.client_id {
        request = request.with_preregistered_client(client_id.clone());
    }
    if let Some(variable) = &settings.client_secret_env {
        let secret = std::env::var(variable)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SignInError::SecretUnset {
                server: server.to_string(),
                variable: variable.clone(),
            })?;
        request = request.with_client_secret(secret);
    }
    if !settings.scopes.is_empty() {
        request = request.with_scopes(settings.scopes.iter().cloned());
    }
    Ok(request)
}

/// How long before its expiry a renewable access token is renewed.
pub const RENEW_BEFORE: std::time::Duration = std::time::Duration::from_secs(60);

/// An access token, and when the connection that carries it must be made again: shortly
/// before it expires when it can be renewed (the new connection carries the renewed one), at
/// its expiry when it cannot (the server then needs sign-in again).
pub struct AccessToken {
    pub secret: String,
    pub reconnect_in: Option<std::time::Duration>,
}

/// When to connect again with a token that has `left` to live.
pub fn reconnect_in(left: std::time::Duration, renewable: bool) -> std::time::Duration {
    let at = if renewable {
        left.saturating_sub(RENEW_BEFORE)
    } else {
        left
    };
    // Never a tight loop, whatever the server's clock says.
    at.max(std::time::Duration::from_secs(5))
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("reconnect_in", &self.reconnect_in)
            .finish_non_exhaustive()
    }
}

/// The access token kept for `server` at `url`, renewed first when it is about to expire;
/// `None` when the user never signed in to it (or signed in to another URL).
pub async fn access_token(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
) -> Result<Option<AccessToken>, SignInError> {
    token(sign_ins, server, url, false).await
}

/// [`access_token`], renewed whatever its expiry says: for a token the server refused before
/// its time (revoked on the service's side). `None` without a sign-in.
pub async fn renewed_access_token(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
) -> Result<Option<AccessToken>, SignInError> {
    token(sign_ins, server, url, true).await
}

async fn token(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    renew: bool,
) -> Result<Option<AccessToken>, SignInError> {
    let seen = sign_ins.read(server).await?;
    let SignInStatus::SignedIn {
        expires_in,
        refreshable,
    } = SignInStatus::of(seen.as_ref(), url)
    else {
        return Ok(None);
    };
    if renew && !refreshable {
        return Err(SignInError::Expired {
            server: server.to_string(),
        });
    }
    // Renewed here once it is within RENEW_BEFORE of its end (rmcp renews by itself only in its
    // last 30 s), so that a connection made now lasts. The supervisor comes back RENEW_BEFORE
    // ahead, give or take its timer: a little slack.
    let due = expires_in.is_some_and(|left| {
        std::time::Duration::from_secs(left) <= RENEW_BEFORE + std::time::Duration::from_secs(5)
    });
    let renewing = refreshable && (due || renew);
    let seen = seen.as_ref().and_then(access_secret);
    // Replicas sharing the sign-in renew it one at a time; the others then take the new token.
    let Some(shared) = sign_ins.shared.as_ref().filter(|_| renewing) else {
        return current_token(sign_ins, server, url, renewing, seen).await;
    };
    let renewal = shared.begin_renewal(&files::stem(server)).await?;
    let token = current_token(sign_ins, server, url, renewing, seen).await;
    if let Some(renewal) = renewal {
        shared.release(renewal).await;
    }
    token
}

/// The access token of a kept sign-in.
fn access_secret(saved: &Saved) -> Option<String> {
    use oauth2::TokenResponse;
    saved
        .credentials
        .token_response
        .as_ref()
        .map(|tokens| tokens.access_token().secret().clone())
}

/// The kept access token, renewed first when `renew` and it is still the one `seen` before
/// (another process may have renewed it meanwhile: a replica, or a sign-in).
async fn current_token(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    renew: bool,
    seen: Option<String>,
) -> Result<Option<AccessToken>, SignInError> {
    let oauth = |e| SignInError::oauth(url, e);
    let mut manager = manager(sign_ins, server, url).await?;
    if !manager.initialize_from_store().await.map_err(oauth)? {
        return Ok(None);
    }
    let now = sign_ins.read(server).await?;
    if renew && now.as_ref().and_then(access_secret) == seen {
        match manager.refresh_token().await {
            Ok(_) => {}
            Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => {
                return Err(SignInError::Expired {
                    server: server.to_string(),
                })
            }
            Err(e) => return Err(oauth(e)),
        }
    }
    match manager.get_access_token().await {
        Ok(secret) => {
            let reconnect_in = match sign_ins.status(server, url).await? {
                SignInStatus::SignedIn {
                    expires_in: Some(left),
                    refreshable,
                } => Some(reconnect_in(
                    std::time::Duration::from_secs(left),
                    refreshable,
                )),
                _ => None,
            };
            Ok(Some(AccessToken {
                secret,
                reconnect_in,
            }))
        }
        Err(AuthError::AuthorizationRequired) => Err(SignInError::Expired {
            server: server.to_string(),
        }),
        Err(e) => Err(oauth(e)),
    }
}

/// What signing out did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignedOut {
    /// No tokens were kept for the server.
    NotSignedIn,
    /// The tokens were revoked at the authorization server (RFC 7009) and forgotten.
    Revoked,
    /// The tokens were forgotten; the authorization server was not told, for the reason given.
    Forgotten(String),
}

/// Signs out of `server`: revokes its tokens at the authorization server when it offers
/// revocation (the refresh token, which ends the grant, then the access token), then removes the
/// file whatever the server said.
pub async fn sign_out(sign_ins: &SignIns, server: &str) -> Result<SignedOut, SignInError> {
    let Some(saved) = sign_ins.read(server).await? else {
        return Ok(SignedOut::NotSignedIn);
    };
    let outcome = match revoke(sign_ins, server, &saved).await {
        Ok(()) => SignedOut::Revoked,
        Err(why) => SignedOut::Forgotten(why),
    };
    sign_ins.remove(server).await?;
    Ok(outcome)
}

/// Posts each kept token to the revocation endpoint the server's metadata names.
async fn revoke(sign_ins: &SignIns, server: &str, saved: &Saved) -> Result<(), String> {
    use oauth2::TokenResponse;
    let Some(tokens) = saved.credentials.token_response.as_ref() else {
        return Err("no tokens were kept".into());
    };
    let manager = manager(sign_ins, server, &saved.url)
        .await
        .map_err(|e| e.to_string())?;
    let metadata = manager
        .resolve_metadata()
        .await
        .map_err(|e| format!("its metadata could not be read ({e})"))?
        .metadata;
    let Some(endpoint) = metadata
        .additional_fields
        .get("revocation_endpoint")
        .and_then(|v| v.as_str())
    else {
        return Err("its authorization server offers no revocation".into());
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())?;
    let refresh = tokens
        .refresh_token()
        .map(|t| (t.secret(), "refresh_token"));
    let access = Some((tokens.access_token().secret(), "access_token"));
    for (token, hint) in refresh.into_iter().chain(access) {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", hint)
            .append_pair("client_id", &saved.credentials.client_id)
            // A public client's secret is the empty string, which RFC 6749 (2.3.1) lets a
            // client send or omit; some servers (the Python SDK's) want the field.
            .append_pair("client_secret", "")
            .finish();
        let answer = client
            .post(endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| format!("the revocation request failed ({e})"))?;
        if !answer.status().is_success() {
            return Err(format!(
                "its revocation endpoint answered {}",
                answer.status()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(token_received_at: Option<u64>) -> StoredCredentials {
        let tokens: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": "a-secret", "token_type": "bearer", "expires_in": 3600, "refresh_token": "r"}),
        )
        .unwrap();
        StoredCredentials::new("client-1".into(), Some(tokens), vec![], token_received_at)
    }

    fn status(store: &TokenStore, server: &str, url: &str) -> SignInStatus {
        SignInStatus::of(store.read(server).unwrap().as_ref(), url)
    }

    #[test]
    fn tokens_are_kept_per_server_for_one_url_and_readable_by_the_user_alone() {
        let dir = std::env::temp_dir().join(format!("toolsearch-sign-in-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TokenStore::at(dir.join("auth"));
        assert_eq!(
            status(&store, "linear", "https://mcp.example/mcp"),
            SignInStatus::SignedOut
        );
        let saved = Saved {
            url: "https://mcp.example/mcp".into(),
            credentials: credentials(Some(now_secs())),
        };
        store.write("linear", &saved).unwrap();
        match status(&store, "linear", "https://mcp.example/mcp") {
            SignInStatus::SignedIn {
                expires_in: Some(left),
                refreshable: true,
            } => assert!((3500..=3600).contains(&left), "{left}"),
            other => panic!("{other:?}"),
        }
        // Another URL, another server: neither gets these tokens.
        assert!(matches!(
            status(&store, "linear", "https://elsewhere.example/mcp"),
            SignInStatus::OtherUrl { .. }
        ));
        assert_eq!(
            status(&store, "linear/", "https://mcp.example/mcp"),
            SignInStatus::SignedOut
        );
        assert_ne!(store.path("a/b"), store.path("a_b"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode =
                |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&store.path("linear")), 0o600);
            assert_eq!(mode(store.dir()), 0o700);
        }
        assert!(store.remove("linear").unwrap());
        assert!(!store.remove("linear").unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_renewable_token_is_renewed_a_minute_early_and_another_at_its_end() {
        let secs = std::time::Duration::from_secs;
        assert_eq!(reconnect_in(secs(3600), true), secs(3540));
        assert_eq!(reconnect_in(secs(3600), false), secs(3600));
        assert_eq!(reconnect_in(secs(30), true), secs(5));
        assert_eq!(reconnect_in(secs(0), false), secs(5));
    }

    #[test]
    fn no_message_carries_a_token() {
        let saved = Saved {
            url: "u".into(),
            credentials: credentials(None),
        };
        assert!(!format!("{:?}", saved.credentials).contains("a-secret"));
    }
}
