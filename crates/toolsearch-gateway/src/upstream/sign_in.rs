//! OAuth sign-in to HTTP upstreams, through rmcp's implementation of the MCP authorization
//! spec (discovery from the protected-resource and authorization-server metadata, dynamic client
//! registration, authorization code with PKCE and the `resource` parameter, refresh).
//!
//! Tokens are kept per user, one file per server in the user's config folder
//! (`$XDG_CONFIG_HOME/toolsearch/auth`, else `~/.config/toolsearch/auth`), readable by the user
//! alone (0600 in a 0700 folder), each bound to the server's URL: a file written for another URL
//! is not used. Nothing here logs a token.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, CredentialStore, OAuthState,
    StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::OAuthSettings;

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
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the stored sign-in `{path}` is unreadable ({reason}); run `toolsearch auth logout` and sign in again")]
    Corrupt { path: PathBuf, reason: String },

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

/// What one file holds: the server's URL and rmcp's credentials for it.
#[derive(Serialize, Deserialize)]
struct Saved {
    url: String,
    credentials: StoredCredentials,
}

/// The user's sign-in tokens, one file per server.
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
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

impl TokenStore {
    /// The current user's store.
    pub fn for_user() -> Result<Self, SignInError> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| Path::new(&home).join(".config"))
            })
            .ok_or(SignInError::NoConfigFolder)?;
        Ok(Self::at(base.join("toolsearch").join("auth")))
    }

    /// A store in `dir`.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server`: its name made safe for a file name, and a hash of the name so that
    /// two names that read alike once made safe do not share a file.
    pub fn path(&self, server: &str) -> PathBuf {
        let safe: String = server
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let hash = Sha256::digest(server.as_bytes());
        let short: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{safe}-{short}.json"))
    }

    fn read(&self, server: &str) -> Result<Option<Saved>, SignInError> {
        let path = self.path(server);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SignInError::File {
                    action: "read",
                    path,
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SignInError::Corrupt {
                path,
                reason: e.to_string(),
            })
    }

    /// Writes the file readable by the user alone, through a temporary file renamed into place.
    fn write(&self, server: &str, saved: &Saved) -> Result<(), SignInError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| SignInError::File {
                action,
                path,
                source,
            }
        };
        create_private_dir(&self.dir).map_err(io("create the folder", &self.dir))?;
        let path = self.path(server);
        let temporary = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(saved).map_err(|e| SignInError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let mut file = private_file(&temporary).map_err(io("write", &temporary))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(io("write", &temporary))?;
        std::fs::rename(&temporary, &path).map_err(io("write", &path))
    }

    /// Forgets `server`'s tokens; whether there were any.
    pub fn remove(&self, server: &str) -> Result<bool, SignInError> {
        let path = self.path(server);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(SignInError::File {
                action: "remove",
                path,
                source,
            }),
        }
    }

    /// Whether `server` at `url` has tokens, and how long its access token has left.
    pub fn status(&self, server: &str, url: &str) -> Result<SignInStatus, SignInError> {
        let Some(saved) = self.read(server)? else {
            return Ok(SignInStatus::SignedOut);
        };
        if saved.url != url {
            return Ok(SignInStatus::OtherUrl { url: saved.url });
        }
        let Some(tokens) = saved.credentials.token_response.as_ref() else {
            return Ok(SignInStatus::SignedOut);
        };
        use oauth2::TokenResponse;
        let expires_in = match (tokens.expires_in(), saved.credentials.token_received_at) {
            (Some(lifetime), Some(received)) => {
                let elapsed = now_secs().saturating_sub(received);
                Some(lifetime.as_secs().saturating_sub(elapsed))
            }
            _ => None,
        };
        Ok(SignInStatus::SignedIn {
            expires_in,
            refreshable: tokens.refresh_token().is_some(),
        })
    }

    /// The credential store rmcp reads and writes for `server` at `url`.
    fn credentials(&self, server: &str, url: &str) -> FileCredentials {
        FileCredentials {
            store: self.clone(),
            server: server.to_string(),
            url: url.to_string(),
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

/// rmcp's credential store over one server's file. Credentials kept for another URL read as
/// none, so a changed `url` never receives the old server's tokens.
struct FileCredentials {
    store: TokenStore,
    server: String,
    url: String,
}

fn store_error(error: SignInError) -> AuthError {
    AuthError::InternalError(error.to_string())
}

#[async_trait]
impl CredentialStore for FileCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let saved = self.store.read(&self.server).map_err(store_error)?;
        Ok(saved
            .filter(|saved| saved.url == self.url)
            .map(|saved| saved.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let saved = Saved {
            url: self.url.clone(),
            credentials,
        };
        self.store.write(&self.server, &saved).map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .remove(&self.server)
            .map(|_| ())
            .map_err(store_error)
    }
}

/// rmcp's manager of the sign-in to `server` at `url`, keeping its credentials in `store`.
async fn manager(
    store: &TokenStore,
    server: &str,
    url: &str,
) -> Result<AuthorizationManager, SignInError> {
    // Its HTTP client needs the process's TLS provider, as the upstreams' does.
    crate::upstream::wire::ensure_crypto_provider();
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| SignInError::oauth(url, e))?;
    manager.set_credential_store(store.credentials(server, url));
    Ok(manager)
}

/// Signs in to `server` at `url`: discovers its authorization server, registers this client
/// (dynamically, unless `settings` name a client registered beforehand), hands the page to sign
/// in on to `show`, waits for `redirect` to give the URL the browser was sent back to (with the
/// code), exchanges the code and keeps the tokens.
pub async fn sign_in<F>(
    store: &TokenStore,
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
    let pending = PendingSignIn::begin(store, server, url, settings, redirect_uri).await?;
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
        store: &TokenStore,
        server: &str,
        url: &str,
        settings: Option<&OAuthSettings>,
        redirect_uri: &str,
    ) -> Result<Self, SignInError> {
        let request = authorization_request(server, redirect_uri, settings)?;
        let mut state = OAuthState::Unauthorized(manager(store, server, url).await?);
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
    store: &TokenStore,
    server: &str,
    url: &str,
) -> Result<Option<AccessToken>, SignInError> {
    token(store, server, url, false).await
}

/// [`access_token`], renewed whatever its expiry says: for a token the server refused before
/// its time (revoked on the service's side). `None` without a sign-in.
pub async fn renewed_access_token(
    store: &TokenStore,
    server: &str,
    url: &str,
) -> Result<Option<AccessToken>, SignInError> {
    token(store, server, url, true).await
}

async fn token(
    store: &TokenStore,
    server: &str,
    url: &str,
    renew: bool,
) -> Result<Option<AccessToken>, SignInError> {
    if !matches!(store.status(server, url)?, SignInStatus::SignedIn { .. }) {
        return Ok(None);
    }
    let oauth = |e| SignInError::oauth(url, e);
    let mut manager = manager(store, server, url).await?;
    if !manager.initialize_from_store().await.map_err(oauth)? {
        return Ok(None);
    }
    // Renewed here once it is within RENEW_BEFORE of its end (rmcp renews by itself only in its
    // last 30 s), so that a connection made now lasts.
    if let SignInStatus::SignedIn {
        expires_in,
        refreshable,
    } = store.status(server, url)?
    {
        // The supervisor comes back RENEW_BEFORE ahead, give or take its timer: a little slack.
        let due = expires_in.is_some_and(|left| {
            std::time::Duration::from_secs(left) <= RENEW_BEFORE + std::time::Duration::from_secs(5)
        });
        if renew && !refreshable {
            return Err(SignInError::Expired {
                server: server.to_string(),
            });
        }
        if refreshable && (due || renew) {
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
    }
    match manager.get_access_token().await {
        Ok(secret) => {
            let reconnect_in = match store.status(server, url)? {
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
pub async fn sign_out(store: &TokenStore, server: &str) -> Result<SignedOut, SignInError> {
    let Some(saved) = store.read(server)? else {
        return Ok(SignedOut::NotSignedIn);
    };
    let outcome = match revoke(store, server, &saved).await {
        Ok(()) => SignedOut::Revoked,
        Err(why) => SignedOut::Forgotten(why),
    };
    store.remove(server)?;
    Ok(outcome)
}

/// Posts each kept token to the revocation endpoint the server's metadata names.
async fn revoke(store: &TokenStore, server: &str, saved: &Saved) -> Result<(), String> {
    use oauth2::TokenResponse;
    let Some(tokens) = saved.credentials.token_response.as_ref() else {
        return Err("no tokens were kept".into());
    };
    let manager = manager(store, server, &saved.url)
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

/// Returns once the user's token file of `server` is written or removed (polled each second);
/// never when there is no config folder.
pub async fn changed(server: &str) {
    let Ok(store) = TokenStore::for_user() else {
        return std::future::pending().await;
    };
    let path = store.path(server);
    let stamp = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let before = stamp(&path);
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if stamp(&path) != before {
            return;
        }
    }
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

    #[test]
    fn tokens_are_kept_per_server_for_one_url_and_readable_by_the_user_alone() {
        let dir = std::env::temp_dir().join(format!("toolsearch-sign-in-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TokenStore::at(dir.join("auth"));
        assert_eq!(
            store.status("linear", "https://mcp.example/mcp").unwrap(),
            SignInStatus::SignedOut
        );
        let saved = Saved {
            url: "https://mcp.example/mcp".into(),
            credentials: credentials(Some(now_secs())),
        };
        store.write("linear", &saved).unwrap();
        match store.status("linear", "https://mcp.example/mcp").unwrap() {
            SignInStatus::SignedIn {
                expires_in: Some(left),
                refreshable: true,
            } => assert!((3500..=3600).contains(&left), "{left}"),
            other => panic!("{other:?}"),
        }
        // Another URL, another server: neither gets these tokens.
        assert!(matches!(
            store
                .status("linear", "https://elsewhere.example/mcp")
                .unwrap(),
            SignInStatus::OtherUrl { .. }
        ));
        assert_eq!(
            store.status("linear/", "https://mcp.example/mcp").unwrap(),
            SignInStatus::SignedOut
        );
        assert_ne!(store.path("a/b"), store.path("a_b"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
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
