//! One connection to one upstream MCP server, as an MCP client (rmcp).
//!
//! Stdio servers run as child processes (in their own process group, so a server started through a
//! wrapper such as `npx` goes down with it); their stderr goes line by line into the logs under target
//! `upstream` with field `server`. Streamable HTTP servers are reached with the configured headers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::ChildWrapper;
#[allow(deprecated)] // sampling, roots, logging: see the handler below
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    CustomNotification, ElicitRequestParams, ElicitResult, Implementation, ListRootsResult,
    LoggingMessageNotificationParam, ProgressNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService, ServiceExt};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::ClientHandler;
use rmcp::ErrorData;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use toolsearch_core::{Tool, ToolSchema};

use crate::config::Transport as ServerTransport;
use crate::relay::Relay;
use crate::upstream::child_env;
use crate::upstream::http::{HttpCalls, HttpTransport};
use crate::upstream::sign_in::{self, SignIns};
use crate::upstream::sse::SseTransport;
use crate::upstream::wire;

/// What the connection tells its supervisor.
#[derive(Debug, Clone)]
pub(crate) enum Signal {
    /// The upstream sent `notifications/tools/list_changed`.
    ToolListChanged,
    /// The upstream sent `notifications/prompts/list_changed`.
    PromptListChanged,
    /// The upstream sent `notifications/resources/list_changed`.
    ResourceListChanged,
    /// A call saw the transport fail; reconnect.
    ConnectionLost(String),
    /// Skip the rest of the backoff delay and restart now.
    RestartNow,
}

/// The gateway's side of one upstream session.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    server: Arc<str>,
    signals: mpsc::UnboundedSender<Signal>,
    /// Where the upstream's requests to the client, progress, logs and updates are routed.
    relay: Arc<Relay>,
}

// Sampling, roots and logging are deprecated in rmcp for the 2026 protocol; clients of 2025-11-25
// (all of today's) use them.
#[allow(deprecated)]
impl ClientHandler for UpstreamClient {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::debug!(target: "upstream", server = %self.server, "tools/list_changed received");
        let _ = self.signals.send(Signal::ToolListChanged);
        std::future::ready(())
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::debug!(target: "upstream", server = %self.server, "prompts/list_changed received");
        let _ = self.signals.send(Signal::PromptListChanged);
        std::future::ready(())
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::debug!(target: "upstream", server = %self.server, "resources/list_changed received");
        let _ = self.signals.send(Signal::ResourceListChanged);
        std::future::ready(())
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.resource_updated(&self.server, &params.uri).await;
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.progress(&self.server, params).await;
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.log(&self.server, params).await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay
            .custom_notification(&self.server, notification)
            .await;
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay
            .create_message(&self.server, params, context)
            .await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay
            .create_elicitation(&self.server, params, context)
            .await
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.relay.list_roots(&self.server, context).await
    }

    /// The gateway offers what it can pass on to a client session: sampling, elicitation and
    /// roots (each refused with the standard error when the session's client lacks it).
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder()
            .enable_roots()
            .enable_roots_list_changed()
            .enable_sampling()
            .enable_elicitation()
            .build();
        ClientConfig::new(
            capabilities,
            Implementation::new("toolsearch-gateway", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Last lines a child wrote to stderr, kept to explain why it went down.
#[derive(Debug, Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    const KEEP: usize = 20;

    fn push(&self, line: String) {
        let mut lines = match self.0.lock() {
            Ok(lines) => lines,
            Err(poisoned) => poisoned.into_inner(),
        };
        if lines.len() == Self::KEEP {
            lines.pop_front();
        }
        lines.push_back(crate::error::clipped_long(&line).into_owned());
    }

    /// The kept lines, oldest first.
    pub(crate) fn lines(&self) -> Vec<String> {
        let lines = match self.0.lock() {
            Ok(lines) => lines,
            Err(poisoned) => poisoned.into_inner(),
        };
        lines.iter().cloned().collect()
    }

    /// The last non-empty line, if any.
    pub(crate) fn last(&self) -> Option<String> {
        let lines = match self.0.lock() {
            Ok(lines) => lines,
            Err(poisoned) => poisoned.into_inner(),
        };
        lines.iter().rev().find(|l| !l.trim().is_empty()).cloned()
    }
}

/// Why an upstream could not be started, reached or listed. Each keeps the error it came from; its
/// message says what to do and becomes the `last_error` of the server's state.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start `{command}`: {hint}")]
    Spawn {
        command: String,
        hint: String,
        #[source]
        source: std::io::Error,
    },

    #[error("the MCP handshake with `{command}` failed: {source}")]
    Handshake {
        command: String,
        #[source]
        source: Box<rmcp::service::ClientInitializeError>,
    },

    /// `reason` is rmcp's error as text, with the URL as the config wrote it: the expanded one
    /// may hold a secret.
    #[error("cannot connect to `{url}`: {reason}; check that the server is running and the url (often ending in `/mcp`) and headers are right")]
    Connect { url: String, reason: String },

    #[error("cannot connect to the legacy SSE server at `{url}`: {reason}; check that the server is running and the url (often ending in `/sse`) and headers are right")]
    ConnectSse { url: String, reason: String },

    #[error("`{url}` {}", refused.describe(server))]
    CredentialsRefused {
        server: String,
        url: String,
        refused: CredentialsRefused,
    },

    /// The stored sign-in could not give a token (expired past renewal, unreadable).
    #[error("{0}")]
    SignIn(#[from] crate::upstream::sign_in::SignInError),

    #[error("cannot build the HTTP client for `{url}`: {source}; the system's TLS or network settings may be unusable")]
    HttpClient {
        url: String,
        #[source]
        source: reqwest::Error,
    },

    #[error("header name `{name}` is not a valid HTTP header name")]
    HeaderName {
        name: String,
        #[source]
        source: http::header::InvalidHeaderName,
    },

    #[error("the value of header `{name}` is not a valid HTTP header value")]
    HeaderValue {
        name: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },

    #[error("tools/list failed: {0}")]
    ListTools(#[source] rmcp::ServiceError),

    #[error("tools/list did not answer within {}s", .0.as_secs())]
    ListTimeout(Duration),

    #[error("did not finish starting (connect, initialize, tools/list) within {}s; check the command or url, or raise supervisor.startupTimeoutSecs", .0.as_secs())]
    StartTimeout(Duration),

    /// Any of the above, with the child's last stderr line, which usually says why.
    #[error("{source}; its last stderr line: {line}")]
    WithStderr {
        #[source]
        source: Box<UpstreamError>,
        line: String,
    },
}

/// What lies under an HTTP client's failure to reach a server, in words a user acts on: a TLS
/// refusal (and of what), a refused or timed-out connection, a name that does not resolve.
/// `None` when the error says nothing more than its own message.
pub(crate) fn network_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let causes = causes(error);
    if let Some(tls) = causes
        .iter()
        .find_map(|c| c.downcast_ref::<rustls::Error>())
    {
        return Some(tls_cause(tls));
    }
    for io in causes
        .iter()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
    {
        match io.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                return Some(
                    "the connection was refused: nothing listens at that host and port".into(),
                )
            }
            std::io::ErrorKind::TimedOut => {
                return Some("the connection timed out: the host does not answer".into())
            }
            _ => {}
        }
    }
    causes
        .iter()
        .map(|c| c.to_string())
        .any(|text| text.contains("dns error") || text.contains("failed to lookup"))
        .then(|| "the host name does not resolve".to_string())
}

/// `error` and every error under it, with those rmcp keeps without giving them as the source
/// (the transport's error of a failed handshake, the HTTP client's error) and the one an
/// `io::Error` carries.
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    // Deep enough for any real chain; a chain that loops stops here.
    const MAX_DEPTH: usize = 32;
    let mut found = Vec::new();
    let mut next = Some(error);
    while let Some(current) = next.filter(|_| found.len() < MAX_DEPTH) {
        found.push(current);
        next = if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
            current.downcast_ref::<rmcp::service::ClientInitializeError>()
        {
            Some(error.error.as_ref() as &(dyn std::error::Error + 'static))
        } else if let Some(StreamableHttpError::Client(client)) =
            current.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            Some(client as &(dyn std::error::Error + 'static))
        } else if let Some(carried) = current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(carried as &(dyn std::error::Error + 'static))
        } else {
            current.source()
        };
    }
    found
}

/// A TLS refusal in words: what about the server's certificate or handshake failed.
fn tls_cause(error: &rustls::Error) -> String {
    use rustls::CertificateError as Certificate;
    let what = match error {
        rustls::Error::InvalidCertificate(Certificate::UnknownIssuer) => {
            "the server's certificate is not signed by an authority this machine trusts (self-signed, or a private CA: add it to the system's trust store)".to_string()
        }
        rustls::Error::InvalidCertificate(
            Certificate::Expired | Certificate::ExpiredContext { .. },
        ) => "the server's certificate has expired".to_string(),
        rustls::Error::InvalidCertificate(Certificate::NotValidYet | Certificate::NotValidYetContext { .. }) => {
            "the server's certificate is not valid yet (check this machine's clock)".to_string()
        }
        rustls::Error::InvalidCertificate(
            Certificate::NotValidForName | Certificate::NotValidForNameContext { .. },
        ) => "the server's certificate is for another name than the url's host".to_string(),
        rustls::Error::InvalidCertificate(_) => {
            "the server's certificate was refused: it is not one this machine trusts (a self-signed certificate is refused unless its CA is in the system's trust store), or it is malformed".to_string()
        }
        other => format!("the TLS handshake failed ({other})"),
    };
    format!("TLS: {what}")
}

/// Why an HTTP upstream refused the gateway's request for its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsRefused {
    /// HTTP 401: no credentials, or ones it does not take. `oauth` when its challenge points to
    /// OAuth metadata (a sign-in server).
    Missing { oauth: bool },
    /// HTTP 403: the credentials lack a permission, the scope when the server named it.
    LacksScope { scope: Option<String> },
}

impl CredentialsRefused {
    /// What the refusal means for `server`, and what to do.
    pub fn describe(&self, server: &str) -> String {
        const HEADERS: &str = "in the entry's `headers`, from the gateway's environment (e.g. `headers = { Authorization = \"Bearer ${SERVER_TOKEN}\" }` with SERVER_TOKEN set where the gateway starts)";
        match self {
            CredentialsRefused::Missing { oauth: false } => format!(
                "answered 401 Unauthorized: the server wants credentials; give them {HEADERS}, then restart the server from the console or restart the gateway"
            ),
            CredentialsRefused::Missing { oauth: true } => format!(
                "answered 401 Unauthorized: server `{server}` needs sign-in; run `toolsearch auth login {server}`, or use \"Sign in\" in the console, and it joins as soon as the tokens are kept (or give a token the service issues for API access {HEADERS})"
            ),
            CredentialsRefused::LacksScope { scope } => {
                let mut said = "answered 403 Forbidden: the credentials lack a permission".to_string();
                if let Some(scope) = scope {
                    said.push_str(&format!(" (the server asks for scope `{scope}`)"));
                }
                said.push_str("; use a token that has it, or sign in again with `toolsearch auth login`");
                said
            }
        }
    }
}

/// The refusal of credentials that `error` (rmcp's, with its sources) reports, if that is why
/// the request failed.
pub(crate) fn credentials_refused(
    error: &(dyn std::error::Error + 'static),
) -> Option<CredentialsRefused> {
    causes(error).into_iter().find_map(refusal)
}

/// The refusal of credentials one error says, if it says one.
fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<CredentialsRefused> {
    use rmcp::transport::streamable_http_client::{
        AuthRequiredError, InsufficientScopeError, StreamableHttpError,
    };
    if let Some(required) = error.downcast_ref::<AuthRequiredError>() {
        let oauth = required
            .www_authenticate_header
            .contains("resource_metadata");
        return Some(CredentialsRefused::Missing { oauth });
    }
    if let Some(insufficient) = error.downcast_ref::<InsufficientScopeError>() {
        return Some(CredentialsRefused::LacksScope {
            scope: insufficient.required_scope.clone(),
        });
    }
    let status = match error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::UnexpectedServerResponse(text)) => text
            .strip_prefix("HTTP ")
            .and_then(|rest| rest.get(..3))?
            .parse()
            .ok()?,
        _ => error
            .downcast_ref::<reqwest::Error>()
            .and_then(reqwest::Error::status)?
            .as_u16(),
    };
    match status {
        401 => Some(CredentialsRefused::Missing { oauth: false }),
        403 => Some(CredentialsRefused::LacksScope { scope: None }),
        _ => None,
    }
}

impl UpstreamError {
    /// Whether the server refused the gateway's credentials: a state to report, not a failure
    /// to retry at once.
    pub(crate) fn needs_authorization(&self) -> bool {
        matches!(
            self,
            UpstreamError::CredentialsRefused { .. } | UpstreamError::SignIn(_)
        )
    }

    /// Adds the child's last stderr line, when it wrote one.
    pub(crate) fn with_stderr(self, tail: &StderrTail) -> Self {
        match tail.last() {
            Some(line) => UpstreamError::WithStderr {
                source: Box::new(self),
                line,
            },
            None => self,
        }
    }
}

/// A live session with an upstream.
pub(crate) struct Connection {
    pub(crate) service: RunningService<RoleClient, UpstreamClient>,
    /// Process id of a stdio server.
    pub(crate) pid: Option<u32>,
    pub(crate) stderr: StderrTail,
    /// Calls posted by the gateway itself, for a Streamable HTTP server.
    pub(crate) http_calls: Option<Arc<HttpCalls>>,
    /// When to connect again because of the sign-in's access token in the headers: shortly
    /// before it expires (the new connection carries a renewed one), or at its end when it
    /// cannot be renewed.
    pub(crate) renew_at: Option<tokio::time::Instant>,
}

/// Starts (stdio) or reaches (HTTP) the server and runs the MCP initialize handshake.
pub(crate) async fn connect(
    server: &str,
    transport: &ServerTransport,
    signals: mpsc::UnboundedSender<Signal>,
    relay: Arc<Relay>,
    tail: StderrTail,
    sign_ins: &SignIns,
) -> Result<Connection, UpstreamError> {
    let client = UpstreamClient {
        server: server.into(),
        signals,
        relay,
    };
    match transport {
        ServerTransport::Stdio {
            command,
            args,
            env,
            cwd,
            inherit_env,
            withheld_env,
            create_cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            // A minimal environment, as the official SDKs give (see crate::upstream::child_env); the depth
            // marker last, so that no entry can unset it.
            cmd.args(args)
                .env_clear()
                .envs(child_env::inherited(inherit_env, withheld_env))
                .envs(env)
                .env(child_env::GATEWAY_DEPTH_VAR, child_env::child_depth());
            if let Some(cwd) = cwd {
                if *create_cwd {
                    ensure_cwd(server, cwd);
                }
                cmd.current_dir(cwd);
            }
            connect_stdio(client, command, cmd, cwd.as_deref(), tail).await
        }
        ServerTransport::StreamableHttp {
            url,
            headers,
            shown_url,
        } => {
            connect_signed_in(sign_ins, server, url, headers, |headers| {
                let client = client.clone();
                async move { connect_http(client, url, &headers, shown_url).await }
            })
            .await
        }
        ServerTransport::Sse {
            url,
            headers,
            shown_url,
        } => {
            connect_signed_in(sign_ins, server, url, headers, |headers| {
                let client = client.clone();
                async move { connect_sse(client, url, &headers, shown_url).await }
            })
            .await
        }
    }
}

/// Connects to an HTTP server with `headers` and the user's sign-in token (see
/// [`with_sign_in`]); when the server refuses that token before its time (revoked on the
/// service's side), renews it once and connects again.
async fn connect_signed_in<F, Fut>(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    connect: F,
) -> Result<Connection, UpstreamError>
where
    F: Fn(BTreeMap<String, String>) -> Fut,
    Fut: std::future::Future<Output = Result<Connection, UpstreamError>>,
{
    let signed = with_sign_in(sign_ins, server, url, headers, false).await?;
    let connection = match connect(signed.headers).await {
        Err(UpstreamError::CredentialsRefused {
            refused: CredentialsRefused::Missing { .. },
            ..
        }) if signed.signed_in => {
            tracing::info!(target: "upstream", server, "the sign-in's access token was refused; renewing it");
            let renewed = with_sign_in(sign_ins, server, url, headers, true).await?;
            let connection = connect(renewed.headers).await?;
            return Ok(Connection {
                renew_at: renewed.renew_at,
                ..connection
            });
        }
        other => other?,
    };
    Ok(Connection {
        renew_at: signed.renew_at,
        ..connection
    })
}

/// Headers with a sign-in's token, and when to connect again because of it.
struct SignedHeaders {
    headers: BTreeMap<String, String>,
    renew_at: Option<tokio::time::Instant>,
    /// Whether the token is a sign-in's (which can be renewed).
    signed_in: bool,
}

/// `headers` with the access token of the user's sign-in to `server` at `url` (renewed first
/// when `renew`), when there is one and the entry gives no `Authorization` of its own.
async fn with_sign_in(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    renew: bool,
) -> Result<SignedHeaders, UpstreamError> {
    let mut signed = SignedHeaders {
        headers: headers.clone(),
        renew_at: None,
        signed_in: false,
    };
    if headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        return Ok(signed);
    }
    let token = if renew {
        sign_in::renewed_access_token(sign_ins, server, url).await?
    } else {
        sign_in::access_token(sign_ins, server, url).await?
    };
    let Some(token) = token else {
        return Ok(signed);
    };
    signed.headers.insert(
        "Authorization".to_string(),
        format!("Bearer {}", token.secret),
    );
    signed.renew_at = token
        .reconnect_in
        .map(|after| tokio::time::Instant::now() + after);
    signed.signed_in = true;
    Ok(signed)
}

/// Starts a stdio server from `cmd` (its environment and folder set) in a process group of its
/// own, follows its stderr, and runs the MCP handshake over its stdin and stdout.
async fn connect_stdio(
    client: UpstreamClient,
    command: &str,
    cmd: tokio::process::Command,
    cwd: Option<&std::path::Path>,
    tail: StderrTail,
) -> Result<Connection, UpstreamError> {
    let server = client.server.clone();
    let server: &str = &server;
    let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
    #[cfg(unix)]
    wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
    let (child, stderr) =
        ChildTransport::spawn(server, wrapped).map_err(|source| UpstreamError::Spawn {
            command: command.to_string(),
            hint: spawn_hint(cwd, &source),
            source,
        })?;
    let pid = child.id();
    if let Some(stderr) = stderr {
        tokio::spawn(follow_stderr(server.to_string(), stderr, tail.clone()));
    }
    tracing::info!(target: "upstream", server, pid, command = %command, "started stdio server");
    match client.serve(child).await {
        Ok(service) => Ok(Connection {
            service,
            pid,
            stderr: tail,
            http_calls: None,
            renew_at: None,
        }),
        Err(source) => Err(UpstreamError::Handshake {
            command: command.to_string(),
            source: Box::new(source),
        }
        .with_stderr(&tail)),
    }
}

/// Logs a stdio server's stderr, line by line, and keeps its last lines for error messages.
async fn follow_stderr(server: String, stderr: tokio::process::ChildStderr, tail: StderrTail) {
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                tracing::info!(target: "upstream", server = %server, "{}", crate::error::clipped_long(&line));
                tail.push(line);
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(target: "upstream", server = %server, "stderr closed: {e}");
                break;
            }
        }
    }
}

/// Reaches a Streamable HTTP server through the guarded client and runs the MCP handshake;
/// its calls are then posted by the gateway itself ([`HttpCalls`]).
async fn connect_http(
    client: UpstreamClient,
    url: &str,
    headers: &BTreeMap<String, String>,
    shown_url: &str,
) -> Result<Connection, UpstreamError> {
    let server = client.server.clone();
    let server: &str = &server;
    let headers = header_map(headers)?;
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .max_sse_event_size(wire::MAX_SSE_EVENT);
    let http =
        wire::GuardedHttpClient::new(server).map_err(|source| UpstreamError::HttpClient {
            url: shown_url.to_string(),
            source,
        })?;
    let (hand_over, handed_over) = mpsc::unbounded_channel();
    let calls = HttpCalls::new(server, http.clone(), hand_over, client.relay.clone());
    let transport = HttpTransport::new(
        StreamableHttpClientTransport::with_client(http, config),
        handed_over,
    );
    match client.serve(transport).await {
        Ok(service) => {
            tracing::info!(target: "upstream", server, url = %shown_url, "connected to Streamable HTTP server");
            Ok(Connection {
                service,
                pid: None,
                stderr: StderrTail::default(),
                http_calls: Some(Arc::new(calls)),
                renew_at: None,
            })
        }
        Err(source) => Err(match credentials_refused(&source) {
            Some(refused) => UpstreamError::CredentialsRefused {
                server: server.to_string(),
                url: shown_url.to_string(),
                refused,
            },
            None => UpstreamError::Connect {
                url: shown_url.to_string(),
                reason: with_cause(&source, url, shown_url),
            },
        }),
    }
}

/// Opens a legacy SSE server's event stream and runs the MCP handshake over it; its calls go
/// through rmcp's service like a stdio server's.
async fn connect_sse(
    client: UpstreamClient,
    url: &str,
    headers: &BTreeMap<String, String>,
    shown_url: &str,
) -> Result<Connection, UpstreamError> {
    let server = client.server.clone();
    let headers = header_map(headers)?;
    let http =
        wire::GuardedHttpClient::new(&server).map_err(|source| UpstreamError::HttpClient {
            url: shown_url.to_string(),
            source,
        })?;
    let failed = |error: &(dyn std::error::Error + 'static)| match credentials_refused(error) {
        Some(refused) => UpstreamError::CredentialsRefused {
            server: server.to_string(),
            url: shown_url.to_string(),
            refused,
        },
        None => UpstreamError::ConnectSse {
            url: shown_url.to_string(),
            reason: with_cause(error, url, shown_url),
        },
    };
    let transport = SseTransport::connect(&server, http, url, headers)
        .await
        .map_err(|e| failed(&e))?;
    match client.serve(transport).await {
        Ok(service) => {
            tracing::info!(target: "upstream", server = %server, url = %shown_url, "connected to legacy SSE server");
            Ok(Connection {
                service,
                pid: None,
                stderr: StderrTail::default(),
                http_calls: None,
                renew_at: None,
            })
        }
        Err(source) => Err(failed(&source)),
    }
}

/// `error`'s message with what lies under it ([`network_cause`]), the expanded `url` shown as
/// written, without Rust type names.
fn with_cause(error: &(dyn std::error::Error + 'static), url: &str, shown_url: &str) -> String {
    let mut text = error.to_string();
    if let Some(cause) = network_cause(error) {
        text = format!("{cause} ({text})");
    }
    without_type_names(&text.replace(url, shown_url))
}

/// `text` without the Rust type paths rmcp writes into its errors (`Transport
/// [some::module::Type] error`): they mean nothing to the user who reads the message.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        let inside = &rest[open + 1..open + close];
        out.push_str(&rest[..open]);
        let type_path = inside.contains("::") && !inside.contains(' ');
        if !type_path {
            out.push_str(&rest[open..=open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out.replace("  ", " ")
}

/// Creates a stdio server's working directory when it is missing (a `cwd` written relative to the
/// config file: the config names a folder beside itself, which a fresh copy may lack).
fn ensure_cwd(server: &str, cwd: &Path) {
    if cwd.exists() {
        return;
    }
    match std::fs::create_dir_all(cwd) {
        Ok(()) => {
            tracing::info!(target: "upstream", server, cwd = %cwd.display(), "created the working directory named by `cwd`")
        }
        Err(e) => {
            tracing::warn!(target: "upstream", server, cwd = %cwd.display(), "cannot create the working directory named by `cwd`: {e}; create it or fix `cwd`")
        }
    }
}

/// Before a stdio server's first start: creates its `cwd` when the config asks for it, and warns
/// about each argument that reads as a path (`.`, `..`, `./x`, `../x`, `~/x`, `/x`) and names
/// nothing, taken from the server's working directory, where the server will look for it.
pub(crate) fn check_paths(server: &str, transport: &ServerTransport) {
    let ServerTransport::Stdio {
        args,
        cwd,
        create_cwd,
        ..
    } = transport
    else {
        return;
    };
    if let (Some(cwd), true) = (cwd, *create_cwd) {
        ensure_cwd(server, cwd);
    }
    for arg in args {
        let Some(path) = path_argument(arg, cwd.as_deref()) else {
            continue;
        };
        if !path.exists() {
            tracing::warn!(target: "upstream", server, argument = %arg, path = %path.display(), "a path argument names a folder or file that does not exist; create it or fix the argument (relative paths are taken from the server's `cwd`, by default the config file's folder)");
        }
    }
}

/// The path an argument names, when it reads as one.
fn path_argument(arg: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    let relative = arg == "." || arg == ".." || arg.starts_with("./") || arg.starts_with("../");
    if relative {
        return Some(match cwd {
            Some(cwd) => cwd.join(arg),
            None => PathBuf::from(arg),
        });
    }
    if let Some(rest) = arg.strip_prefix("~/") {
        return std::env::var_os("HOME").map(|home| Path::new(&home).join(rest));
    }
    arg.starts_with('/').then(|| PathBuf::from(arg))
}

/// A stdio server as an MCP transport. What it writes to stdout is read here line by line
/// ([`read_stdout`]): each line passes through [`wire::guard_line`] and is parsed before the MCP
/// library sees it, so that a message nested too deep for the JSON parser, larger than
/// [`wire::MAX_MESSAGE_BYTES`], or not MCP at all is answered for its request or dropped with a
/// reason instead of being lost (its call would otherwise wait for its timeout). Closing it closes
/// the server's stdin, waits for it to exit, then sends SIGTERM, then kills it; dropping it kills it.
pub(crate) struct ChildTransport {
    child: Option<Box<dyn ChildWrapper>>,
    /// Writes to the server's stdin; its reading half is never used (see `incoming`).
    transport: AsyncRwTransport<RoleClient, tokio::io::Empty, tokio::process::ChildStdin>,
    /// The server's messages, read and parsed by [`read_stdout`].
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
}

/// How long closing waits for a stdio server to exit before it signals, then kills it.
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// Messages read ahead of the MCP library.
const READ_AHEAD: usize = 16;

/// A line buffer grown past this by a large message is given back after it.
const KEEP_LINE_CAPACITY: usize = 1024 * 1024;

impl ChildTransport {
    fn spawn(
        server: &str,
        mut command: process_wrap::tokio::CommandWrap,
    ) -> std::io::Result<(Self, Option<tokio::process::ChildStderr>)> {
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let stdin = child.inner_mut().stdin().take();
        let stdout = child.inner_mut().stdout().take();
        let stderr = child.inner_mut().stderr().take();
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(std::io::Error::other(
                "the child's stdin or stdout is not a pipe",
            ));
        };
        let (to_client, incoming) = mpsc::channel(READ_AHEAD);
        tokio::spawn(read_stdout(server.to_string(), stdout, to_client));
        Ok((
            Self {
                child: Some(child),
                transport: AsyncRwTransport::new(tokio::io::empty(), stdin),
                incoming,
            },
            stderr,
        ))
    }

    fn id(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        self.transport.close().await?;
        if let Ok(Ok(_)) = tokio::time::timeout(EXIT_WAIT, child.wait()).await {
            self.child = None;
            return Ok(());
        }
        #[cfg(unix)]
        if child.signal(libc::SIGTERM).is_ok() {
            if let Ok(Ok(_)) = tokio::time::timeout(EXIT_WAIT, child.wait()).await {
                self.child = None;
                return Ok(());
            }
        }
        let killed = Box::into_pin(child.kill()).await;
        self.child = None;
        killed
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Only inside a runtime, which is where transports live.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = Box::into_pin(child.kill()).await;
                });
            } else {
                let _ = child.start_kill();
            }
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        // Cancel-safe, as the MCP library's service loop needs.
        self.incoming.recv()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.shutdown()
    }
}

/// One line read from a stdio server.
enum StdoutLine {
    /// A whole line (with its newline) is in the buffer.
    Line,
    /// A line longer than [`wire::MAX_MESSAGE_BYTES`], read past and not kept: its head.
    TooLarge(wire::MessageHead),
    /// The server closed its stdout.
    Closed,
}

/// Reads the next line of `reader` into `line` (cleared first). A line over
/// [`wire::MAX_MESSAGE_BYTES`] is read to its end without being kept, only its head is (its id and
/// kind), so that memory stays bounded whatever the server writes.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<StdoutLine> {
    line.clear();
    let mut too_large: Option<wire::MessageHead> = None;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // An unfinished last line is no message.
            return Ok(StdoutLine::Closed);
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        match too_large.as_mut() {
            Some(head) => head.feed(&available[..take]),
            None if line.len() + take > wire::MAX_MESSAGE_BYTES + 1 => {
                let mut head = wire::MessageHead::of(line);
                head.feed(&available[..take]);
                too_large = Some(head);
                line.clear();
            }
            None => line.extend_from_slice(&available[..take]),
        }
        reader.consume(take);
        if newline.is_some() {
            return Ok(match too_large {
                Some(head) => StdoutLine::TooLarge(head),
                None => StdoutLine::Line,
            });
        }
    }
}

/// Reads a server's stdout line by line and hands each message to the MCP library, through
/// [`wire::guard_line`]; a line that is no MCP message but answers a request, or is too large to
/// read, becomes an error for that request. Ends when either side closes.
async fn read_stdout(
    server: String,
    stdout: tokio::process::ChildStdout,
    to_client: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        let message = match next_line(&mut reader, &mut line).await {
            Ok(StdoutLine::Line) => parse_line(&server, &line),
            Ok(StdoutLine::TooLarge(head)) => {
                let bytes = head.bytes().saturating_sub(1);
                let limit = wire::MAX_MESSAGE_BYTES;
                match head.answered_id() {
                    Some(id) => {
                        tracing::warn!(target: "upstream", server = %server, bytes, limit, "an answer larger than the gateway reads became an error for its call");
                        Some(wire::refused_answer(
                            wire::too_large(&server, bytes, limit),
                            id,
                        ))
                    }
                    None => {
                        tracing::warn!(target: "upstream", server = %server, bytes, limit, "dropped a message of {bytes} bytes, more than the {limit} the gateway reads");
                        None
                    }
                }
            }
            Ok(StdoutLine::Closed) => break,
            Err(e) => {
                tracing::debug!(target: "upstream", server = %server, "stdout closed: {e}");
                break;
            }
        };
        if line.capacity() > KEEP_LINE_CAPACITY {
            line = Vec::new();
        }
        if let Some(message) = message {
            if to_client.send(message).await.is_err() {
                break;
            }
        }
    }
}

/// A line longer than this is first read as the answer to a `tools/call` ([`call_answer`]).
const LARGE_ANSWER: usize = 1024 * 1024;

/// The fields of an answer, its result left unparsed.
#[derive(serde::Deserialize)]
struct AnswerEnvelope<'a> {
    jsonrpc: &'a str,
    id: rmcp::model::RequestId,
    #[serde(borrow)]
    result: &'a serde_json::value::RawValue,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

/// `line` read as the successful answer to a `tools/call`, or `None` when it is not one.
///
/// The MCP library reads a message whole into an intermediate form, and the result again for
/// each kind of result it could be: a 50 MB answer took about six copies of itself at once. Read
/// here, the result is parsed once, straight into a tool call's result; any other message, or
/// a result no call returns, is left to the library.
fn call_answer(line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    let envelope = serde_json::from_slice::<AnswerEnvelope>(line).ok()?;
    if envelope.jsonrpc != "2.0" || envelope.method.is_some() || envelope.error.is_some() {
        return None;
    }
    let result = serde_json::from_str::<rmcp::model::CallToolResult>(envelope.result.get()).ok()?;
    Some(RxJsonRpcMessage::<RoleClient>::response(
        rmcp::model::ServerResult::CallToolResult(result),
        envelope.id,
    ))
}

/// One line of a stdio server (with its newline) as the message the MCP library reads, or `None`
/// to skip it: blank lines, notifications the library does not know, and text that is not JSON
/// (as the official SDKs do). A line that answers a request but is no MCP answer becomes an error
/// for that request.
fn parse_line(server: &str, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let guarded = wire::guard_line(server, line)?;
    if guarded.len() > LARGE_ANSWER {
        if let Some(answer) = call_answer(&guarded) {
            return Some(answer);
        }
    }
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(&guarded) {
        Ok(message) => return Some(message),
        Err(error) => error,
    };
    let head = wire::MessageHead::of(&guarded);
    match head.answered_id() {
        Some(id) if !error.is_syntax() && !error.is_eof() => {
            tracing::warn!(target: "upstream", server, "an answer that is not an MCP message became an error for its call: {error}");
            Some(wire::refused_answer(
                format!("the answer of server `{server}` is not a valid MCP message ({error}); the server must answer as MCP says"),
                id,
            ))
        }
        _ => {
            tracing::debug!(target: "upstream", server, "skipped a line that is not an MCP message: {error}");
            None
        }
    }
}

/// Appends the child's last stderr line, which usually says why the connection was lost.
pub(crate) fn with_stderr(message: String, tail: &StderrTail) -> String {
    match tail.last() {
        Some(line) => format!("{message}; its last stderr line: {line}"),
        None => message,
    }
}

/// What to do about a program that would not start.
fn spawn_hint(cwd: Option<&std::path::Path>, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => match cwd {
            Some(cwd) if !cwd.is_dir() => format!(
                "the working directory `{}` does not exist; fix `cwd`",
                cwd.display()
            ),
            _ => {
                "program not found; install it, put it on PATH, or give its full path in `command`"
                    .to_string()
            }
        },
        std::io::ErrorKind::PermissionDenied => {
            "permission denied; make it executable (chmod +x) or fix `command`".to_string()
        }
        _ => e.to_string(),
    }
}

fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, UpstreamError> {
    headers
        .iter()
        .map(|(name, value)| {
            let n = http::HeaderName::from_bytes(name.as_bytes()).map_err(|source| {
                UpstreamError::HeaderName {
                    name: name.clone(),
                    source,
                }
            })?;
            let v = http::HeaderValue::from_str(value).map_err(|source| {
                UpstreamError::HeaderValue {
                    name: name.clone(),
                    source,
                }
            })?;
            Ok((n, v))
        })
        .collect()
}

/// HTTPS needs a process-wide rustls crypto provider; installs ring's unless one is set already.
/// For an embedder that makes its own clients (rmcp's Streamable HTTP client, reqwest).
pub fn ensure_crypto_provider() {
    crate::upstream::wire::ensure_crypto_provider();
}

/// Fetches the server's whole tool list, following `nextCursor` pages.
pub(crate) async fn list_tools(
    peer: &rmcp::Peer<RoleClient>,
    timeout: Duration,
) -> Result<Vec<rmcp::model::Tool>, UpstreamError> {
    match tokio::time::timeout(timeout, peer.list_all_tools()).await {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(e)) => Err(UpstreamError::ListTools(e)),
        Err(_) => Err(UpstreamError::ListTimeout(timeout)),
    }
}

/// An MCP tool as the engine's [`Tool`], owned by `server`, by the core's one rule for MCP tools
/// ([`Tool::from_mcp`]), so a live server's tool equals the same tool read from a file.
pub fn to_core_tool(server: &str, tool: &rmcp::model::Tool) -> Tool {
    let annotations = tool
        .annotations
        .as_ref()
        .and_then(|a| serde_json::to_value(a).ok());
    let mut out = Tool::from_mcp(
        tool.name.to_string(),
        tool.description.as_deref().map(str::to_string),
        tool.title.clone(),
        annotations,
    )
    .with_server(server);
    // Written straight to compact text; no copy of the schema tree.
    out.set_input_schema(ToolSchema::from_object(&tool.input_schema));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_name_no_rust_type() {
        assert_eq!(
            without_type_names(
                "Send message error Transport [toolsearch_gateway::upstream::http::HttpTransport] error: refused"
            ),
            "Send message error Transport error: refused"
        );
        assert_eq!(without_type_names("a [b c] d [x::y]"), "a [b c] d ");
    }

    /// The refusals rmcp reports, with a challenge or without, are told apart from other
    /// failures wherever they sit in the error's sources.
    #[test]
    fn refused_credentials_are_read_from_rmcps_errors() {
        use rmcp::transport::streamable_http_client::{
            AuthRequiredError, InsufficientScopeError, StreamableHttpError,
        };
        type HttpError = StreamableHttpError<reqwest::Error>;
        let read =
            |e: HttpError| credentials_refused(&crate::upstream::sse::SseTransportError::from(e));
        assert_eq!(
            read(HttpError::UnexpectedServerResponse(
                "HTTP 401 Unauthorized: no".into()
            )),
            Some(CredentialsRefused::Missing { oauth: false })
        );
        assert_eq!(
            read(HttpError::AuthRequired(AuthRequiredError::new(
                r#"Bearer resource_metadata="https://x/.well-known/oauth-protected-resource""#
                    .into()
            ))),
            Some(CredentialsRefused::Missing { oauth: true })
        );
        assert_eq!(
            read(HttpError::InsufficientScope(InsufficientScopeError::new(
                r#"Bearer error="insufficient_scope", scope="repo""#.into(),
                Some("repo".into())
            ))),
            Some(CredentialsRefused::LacksScope {
                scope: Some("repo".into())
            })
        );
        assert_eq!(
            read(HttpError::UnexpectedServerResponse(
                "HTTP 403 Forbidden".into()
            )),
            Some(CredentialsRefused::LacksScope { scope: None })
        );
        assert_eq!(
            read(HttpError::UnexpectedServerResponse(
                "HTTP 404 Not Found".into()
            )),
            None
        );
        let said = CredentialsRefused::Missing { oauth: true }.describe("linear");
        assert!(
            said.contains("needs sign-in")
                && said.contains("`toolsearch auth login linear`")
                && said.contains("`headers`"),
            "{said}"
        );
    }
    use serde_json::json;

    #[test]
    fn converts_mcp_tool() {
        let raw: rmcp::model::Tool = serde_json::from_value(json!({
            "name": "echo",
            "description": "Echoes back the input",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        let tool = to_core_tool("everything", &raw);
        assert_eq!(tool.server(), "everything");
        assert_eq!(tool.name(), "echo");
        assert_eq!(tool.description(), "Echoes back the input");
        assert_eq!(
            tool.input_schema().to_value()["properties"]["message"]["type"],
            "string"
        );
        assert_eq!(tool.annotations(), Some(&json!({"readOnlyHint": true})));
    }

    #[test]
    fn title_stands_in_for_missing_description() {
        let raw: rmcp::model::Tool = serde_json::from_value(json!({
            "name": "t", "title": "A title", "inputSchema": {"type": "object"}
        }))
        .unwrap();
        let tool = to_core_tool("s", &raw);
        assert_eq!(tool.description(), "A title");
        assert_eq!(tool.annotations(), Some(&json!({"title": "A title"})));
    }

    /// The same MCP tool from a live server and from a catalog file is the same tool.
    #[test]
    fn a_live_tool_equals_the_same_tool_read_from_a_file() {
        let listed = json!([
            {"name": "a", "title": "A title", "inputSchema": {"type": "object"}},
            {"name": "b", "description": "Bees", "title": "B title",
             "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
             "annotations": {"readOnlyHint": true}},
            {"name": "c", "description": "Sees", "inputSchema": {"type": "object"},
             "annotations": {}},
            {"name": "d", "description": "", "inputSchema": {"type": "object"},
             "annotations": {"title": "Own title", "destructiveHint": false}}
        ]);
        let from_file = toolsearch_core::parse_catalog(
            &json!({"servers": {"s": listed}}).to_string(),
            "tools.json",
            None,
        )
        .unwrap();
        let live: Vec<Tool> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                to_core_tool(
                    "s",
                    &serde_json::from_value::<rmcp::model::Tool>(t.clone()).unwrap(),
                )
            })
            .collect();
        assert_eq!(live, from_file);
    }

    #[tokio::test]
    async fn stdout_lines_over_the_limit_are_read_past_and_answered() {
        let big = "x".repeat(wire::MAX_MESSAGE_BYTES);
        let text = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{}}}}\n{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"t\":\"{big}\"}}}}\nnot json\n\n{{\"jsonrpc\":\"1.0\",\"id\":3,\"result\":{{}}}}\n"
        );
        let mut reader = BufReader::new(text.as_bytes());
        let mut line = Vec::new();
        let mut seen = Vec::new();
        loop {
            match next_line(&mut reader, &mut line).await.unwrap() {
                StdoutLine::Line => {
                    seen.push(parse_line("s", &line).map(|m| serde_json::to_value(m).unwrap()))
                }
                StdoutLine::TooLarge(head) => {
                    assert_eq!(
                        head.bytes(),
                        big.len() + 43,
                        "the whole line, newline included"
                    );
                    assert_eq!(head.answered_id(), Some(rmcp::model::RequestId::Number(2)));
                    assert!(line.is_empty(), "nothing of it is kept");
                    seen.push(None);
                }
                StdoutLine::Closed => break,
            }
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        assert_eq!(seen[0].as_ref().unwrap()["id"], 1);
        assert_eq!(seen[2], None, "text that is not JSON is skipped");
        assert_eq!(seen[3], None, "a blank line is skipped");
        let error = seen[4].as_ref().unwrap();
        assert_eq!(error["id"], 3);
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("not a valid MCP message"), "{message}");
    }

    #[test]
    fn large_answers_read_the_same_as_the_library_reads_them() {
        let big = "line\n".repeat(LARGE_ANSWER / 4);
        let lines = [
            json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": big}], "isError": false}}),
            json!({"jsonrpc": "2.0", "id": "s", "result": {"content": [], "structuredContent": {"t": big}}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {"tools": [{"name": "t", "description": big, "inputSchema": {"type": "object"}}]}}),
            json!({"jsonrpc": "2.0", "id": 6, "result": {"contents": [{"uri": "file:///a", "text": big}]}}),
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": big}}),
        ];
        for (i, value) in lines.iter().enumerate() {
            let line = format!("{value}\n");
            let ours = serde_json::to_value(parse_line("s", line.as_bytes()).unwrap()).unwrap();
            let library: RxJsonRpcMessage<RoleClient> =
                serde_json::from_value(value.clone()).unwrap();
            assert_eq!(ours, serde_json::to_value(library).unwrap(), "line {i}");
            assert_eq!(call_answer(line.as_bytes()).is_some(), i < 2, "line {i}");
        }
    }

    #[test]
    fn spawn_errors_say_what_to_do() {
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(spawn_hint(None, &e).contains("install it"));
        let msg = spawn_hint(Some(std::path::Path::new("/no/such/dir")), &e);
        assert!(msg.contains("working directory"), "{msg}");
        let error = UpstreamError::Spawn {
            command: "nope".into(),
            hint: spawn_hint(None, &e),
            source: e,
        };
        assert!(error
            .to_string()
            .starts_with("cannot start `nope`: program not found"));
        assert!(
            std::error::Error::source(&error).is_some(),
            "the io error is kept"
        );
    }
}
