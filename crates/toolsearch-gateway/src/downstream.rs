//! The downstream MCP server: what clients (Claude Desktop, Cursor, agents) connect to, over stdio
//! or Streamable HTTP. One [`GatewayService`] per MCP session; the tools it lists and runs come
//! from the shared [`Gateway`], in the session's scope: every tool over stdio; over HTTP, the
//! scope of the API token its first request (`initialize`) carried, for its lifetime. A request
//! with another token on that session is refused.

use std::future::Future;

use futures::Stream;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
#[allow(deprecated)] // logging: still what 2025-11-25 clients speak
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientJsonRpcMessage, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, ErrorCode, Extensions, GetPromptRequestParams,
    GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ResultType,
    ServerCapabilities, ServerConfig, ServerJsonRpcMessage, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolsearch_core::Scope;

use crate::error::{GatewayError, Result};
use crate::gateway::Gateway;
use crate::http_sessions::{
    require_session_owner, session_closed_no_content, SessionOwners, SessionsToClose,
};
use crate::listener_config::HttpConfig;
use crate::rest::{self, Grant, RestState};
use crate::session::SessionRef;

pub use crate::MCP_PATH;

/// Ends the disclosure session when the last handle of an MCP session goes away.
struct SessionGuard {
    id: String,
    gateway: Arc<Gateway>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.gateway.end_session(&self.id);
    }
}

/// The MCP server handler of one downstream session.
#[derive(Clone)]
pub struct GatewayService {
    gateway: Arc<Gateway>,
    session: Arc<SessionGuard>,
}

impl GatewayService {
    /// A session over HTTP: it sees no tool until a request binds it to the token that request
    /// passed the token check with ([`Grant`]); the first one, `initialize`, does.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        let id = gateway.sessions().open();
        Self::with_id(gateway, id)
    }

    /// A session over stdio: no token, every tool.
    pub fn stdio(gateway: Arc<Gateway>) -> Self {
        let id = gateway.sessions().open_with_scope(Arc::new(Scope::all()));
        Self::with_id(gateway, id)
    }

    fn with_id(gateway: Arc<Gateway>, id: String) -> Self {
        tracing::debug!(session = %id, "session started");
        Self {
            session: Arc::new(SessionGuard {
                id,
                gateway: gateway.clone(),
            }),
            gateway,
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session.id
    }

    /// Binds the session to the token of a request that came over HTTP (the [`Grant`] the token
    /// check attached to it); refuses a request with another token than the session's. A request
    /// without `Mcp-Session-Id` after initialize is one of a client on protocol 2026-07-28, which
    /// has no sessions: the session is marked so ([`Gateway::mark_sessionless`]).
    fn bind(&self, extensions: &Extensions) -> Result<(), ErrorData> {
        let Some(parts) = extensions.get::<http::request::Parts>() else {
            return Ok(());
        };
        if is_sessionless(parts) {
            self.gateway.sessions().mark_sessionless(self.session_id());
        }
        let Some(grant) = parts.extensions.get::<Grant>() else {
            return Ok(());
        };
        self.gateway
            .sessions()
            .bind(self.session_id(), grant.owner(), grant.scope().clone())
            .map_err(|e| {
                tracing::warn!(session = self.session_id(), token = grant.label(), error = %e, "request refused");
                ErrorData::invalid_request(e.to_string(), None)
            })
    }

    /// The preamble of every request: binds the session to the request's token, tells the
    /// gateway how to reach it, and resolves what it may see, once.
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<SessionRef, ErrorData> {
        self.bind(&context.extensions)?;
        self.gateway.attach_peer(self.session_id(), &context.peer);
        Ok(self.gateway.sessions().get(self.session_id()))
    }

    /// [`GatewayService::session`] for a request whose answer lists what every upstream offers:
    /// like tools/list, a client that lists once at start sees every upstream that could start.
    async fn listing_session(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<SessionRef, ErrorData> {
        let session = self.session(context)?;
        self.gateway.first_starts_settled().await;
        Ok(session)
    }
}

impl ServerHandler for GatewayService {
    #[allow(deprecated)] // logging: still what 2025-11-25 clients speak
    fn get_info(&self) -> ServerConfig {
        // What the gateway can honour whatever its upstreams offer: lists of an upstream that
        // offers none are empty, and a subscription to one that cannot is refused with a reason.
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toolsearch", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.gateway.guidance(self.session_id()))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // Bound before the answer is written: its instructions list the session's tools.
        self.bind(&context.extensions)?;
        if let Some(McpSessionName(id)) = context.extensions.get::<McpSessionName>() {
            self.gateway
                .sessions()
                .name(self.session_id(), id)
                .map_err(|e| {
                    tracing::warn!(session = self.session_id(), error = %e, "initialize refused");
                    ErrorData::invalid_request(e.to_string(), None)
                })?;
            self.gateway
                .sessions()
                .remember_peer(self.session_id(), &context.peer);
        }
        let restored = context
            .extensions
            .get::<rmcp::transport::streamable_http_server::session::SessionRestoreMarker>()
            .is_some();
        self.gateway.observer().metrics().session_started(restored);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.bind(&context.extensions).is_ok() {
            self.gateway.attach_peer(self.session_id(), &context.peer);
            // Upstreams asked for roots before this client was there: tell them to ask again.
            // A session coming back from rest brings no new roots.
            let restored = context
                .extensions
                .get::<rmcp::transport::streamable_http_server::session::SessionRestoreMarker>()
                .is_some();
            let offers_roots = context
                .peer
                .peer_info()
                .is_some_and(|info| info.capabilities.roots.is_some());
            if offers_roots && !restored {
                self.gateway.passthrough().roots_changed().await;
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.session(&context)?;
        let listing = self
            .gateway
            .list_tools(self.session_id())
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let tools = listing.tools.clone();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.session(&context)?;
        let progress_token = context.meta.get_progress_token();
        let arguments = request.arguments.map_or(Value::Null, Value::Object);
        let result = self
            .gateway
            .call_tool(
                self.session_id(),
                &request.name,
                arguments,
                context.ct,
                progress_token,
            )
            .await;
        Ok(complete_call(result).into())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let session = self.listing_session(&context).await?;
        let prompts = self.gateway.passthrough().list_prompts(&session).await;
        let (prompts, next_cursor) = page(prompts, request.as_ref())?;
        let mut result = ListPromptsResult::with_all_items(prompts);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.bind(&context.extensions)?;
        let session = self.gateway.sessions().get(self.session_id());
        match self
            .gateway
            .passthrough()
            .get_prompt(&session, &request.name, request.arguments)
            .await
        {
            Ok(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                Ok(result.into())
            }
            Err(e) => Err(request_error(e)),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.bind(&context.extensions)?;
        let session = self.gateway.sessions().get(self.session_id());
        self.gateway
            .passthrough()
            .complete(&session, request)
            .await
            .map(|mut result| {
                result.result_type = Some(ResultType::COMPLETE);
                result
            })
            .map_err(request_error)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let session = self.listing_session(&context).await?;
        let resources = self.gateway.passthrough().list_resources(&session).await;
        let (resources, next_cursor) = page(resources, request.as_ref())?;
        let mut result = ListResourcesResult::with_all_items(resources);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let session = self.listing_session(&context).await?;
        let templates = self
            .gateway
            .passthrough()
            .list_resource_templates(&session)
            .await;
        let (templates, next_cursor) = page(templates, request.as_ref())?;
        let mut result = ListResourceTemplatesResult::with_all_items(templates);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let session = self.session(&context)?;
        match self
            .gateway
            .passthrough()
            .read_resource(&session, &request.uri)
            .await
        {
            Ok(mut result) => {
                result.result_type = Some(ResultType::COMPLETE);
                Ok(result.into())
            }
            Err(e) => Err(request_error(e)),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let session = self.session(&context)?;
        self.gateway
            .passthrough()
            .subscribe(&session, &request.uri)
            .await
            .map_err(request_error)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.bind(&context.extensions)?;
        let session = self.gateway.sessions().get(self.session_id());
        self.gateway
            .passthrough()
            .unsubscribe(&session, &request.uri)
            .await
            .map_err(request_error)
    }

    #[allow(deprecated)] // logging: still what 2025-11-25 clients speak
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let session = self.session(&context)?;
        self.gateway
            .passthrough()
            .set_log_level(&session, request.level)
            .await;
        Ok(())
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        if self.bind(&context.extensions).is_ok() {
            self.gateway.passthrough().roots_changed().await;
        }
    }

    /// rmcp hands over as "custom" every request whose params do not fit its method, so a
    /// `tools/call` without a `name` arrives here: that is invalid params (-32602), not an unknown
    /// method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(custom_request_error(&request.method, request.params))
    }
}

/// Whether an HTTP request belongs to no MCP session: a request of protocol 2026-07-28 (which
/// names its version in `MCP-Protocol-Version` and carries no `Mcp-Session-Id`).
fn is_sessionless(parts: &http::request::Parts) -> bool {
    let version = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    parts
        .headers
        .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
        .is_none()
        && version.is_some_and(|v| v >= "2026-07-28")
}

/// A result as every client version reads it. An upstream on protocol 2025-11-25 sends no
/// `resultType`; clients on 2026-07-28 require `"complete"`, which rmcp removes again for older
/// clients.
fn complete_call(mut result: rmcp::model::CallToolResult) -> rmcp::model::CallToolResult {
    result.result_type = Some(ResultType::COMPLETE);
    result
}

/// Items per page of the aggregated lists (prompts, resources, templates).
const PAGE_SIZE: usize = 100;

/// One page of an aggregated list: the cursor is the position of the page's first item, and the
/// next page's cursor is given while items remain. A cursor that is not one is invalid params.
fn page<T>(
    items: Vec<T>,
    request: Option<&PaginatedRequestParams>,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    page_of(items, request.and_then(|r| r.cursor.as_deref()), PAGE_SIZE)
}

fn page_of<T>(
    items: Vec<T>,
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|&start| start <= items.len())
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("cursor `{cursor}` is not one this server gave; list again without a cursor"),
                    None,
                )
            })?,
    };
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    let page = items.into_iter().skip(start).take(end - start).collect();
    Ok((page, next))
}

/// A prompt or resource request's failure on the wire: a name or URI the session cannot use is
/// invalid params (for resources, the spec's -32002 "resource not found").
fn request_error(error: GatewayError) -> ErrorData {
    match error {
        GatewayError::UnknownPrompt { .. }
        | GatewayError::Core(toolsearch_core::Error::NameTooLong { .. }) => {
            ErrorData::invalid_params(error.to_string(), None)
        }
        GatewayError::UnknownResource { .. } => {
            ErrorData::resource_not_found(error.to_string(), None)
        }
        _ => ErrorData::internal_error(error.to_string(), None),
    }
}

/// Request methods of MCP that rmcp parses into typed requests.
const KNOWN_METHODS: [&str; 21] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
    "subscriptions/listen",
    "resources/directory/read",
];

/// The answer to a request rmcp could not type: invalid params for a known method, method not
/// found otherwise.
fn custom_request_error(method: &str, params: Option<Value>) -> ErrorData {
    if !KNOWN_METHODS.contains(&method) {
        return ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method `{}` not found; this server answers the MCP methods of tools, prompts, resources, completion and logging", crate::error::clipped(method)),
            None,
        );
    }
    let why = match (method, params) {
        ("tools/call", Some(params)) => serde_json::from_value::<CallToolRequestParams>(params)
            .err()
            .map(|e| e.to_string()),
        ("tools/call", None) => Some("params are missing".to_string()),
        _ => None,
    }
    .unwrap_or_else(|| "they do not match the method's schema".to_string());
    let hint = if method == "tools/call" {
        "; send {\"name\": \"<tool>\", \"arguments\": {...}}"
    } else {
        ""
    };
    ErrorData::invalid_params(format!("invalid params for `{method}`: {why}{hint}"), None)
}

/// Serves one MCP session over stdin/stdout until the client closes it or `shutdown` fires. A
/// malformed input line is answered with a JSON-RPC error and the session goes on
/// (`stdio.rs`).
pub async fn serve_stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> Result<()> {
    let service = GatewayService::stdio(gateway);
    let running = service
        .serve_with_ct(crate::stdio::stdio(), shutdown)
        .await
        .map_err(|e| {
            GatewayError::Downstream(format!("the stdio client did not initialize: {e}"))
        })?;
    let reason = running
        .waiting()
        .await
        .map_err(|e| GatewayError::Downstream(format!("the stdio session failed: {e}")))?;
    tracing::info!(?reason, "stdio session ended");
    Ok(())
}

/// The `Mcp-Session-Id` of the session an `initialize` opens (or restores), put in its extensions
/// by [`NamingSessionManager`]: the key of what the session keeps, on every replica.
#[derive(Debug, Clone)]
struct McpSessionName(String);

/// rmcp's in-memory session manager, which also tells the handler's `initialize` the id of the
/// session it opens. Without it a replica that only holds a session's `GET` stream (every request
/// went elsewhere) would never learn which shared session its own is.
struct NamingSessionManager(Arc<LocalSessionManager>);

impl SessionManager for NamingSessionManager {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.0.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        message.insert_extension(McpSessionName(id.to_string()));
        self.0.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.0.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.0.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.0.event_store()
    }
}

/// The HTTP app: the MCP endpoint at [`MCP_PATH`] beside the REST API, JSON 404s elsewhere.
/// When API tokens are configured they guard `/mcp` as they guard the REST routes, by the same
/// check ([`rest::require_token`]), and each MCP session belongs to the token that opened it.
/// `Host` and `Origin` are checked for every route by the listener ([`rest::serve_with`]), so
/// serve this app with [`serve_http`].
pub fn http_app(
    gateway: Arc<Gateway>,
    rest_state: RestState,
    _addr: SocketAddr,
    shutdown: CancellationToken,
) -> Router {
    // rmcp's own Host list would disagree with the listener's rules (`http.allowedHosts`, every
    // 127.x address); the listener applies them to /mcp and the REST routes alike.
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .disable_allowed_hosts();
    // Replicas sharing sessions: a session another replica opened is restored here from the
    // client's `initialize`, kept in the shared store.
    config.session_store = gateway.sessions().store().clone().mcp_session_store();
    let factory_gateway = gateway.clone();
    let http = &gateway.config().http;
    let mut manager = LocalSessionManager::default();
    // rmcp's idle timeout, a documented setting (`http.sessionIdleTimeoutSecs`).
    manager.session_config.keep_alive = Some(http.session_idle_timeout);
    let manager = Arc::new(manager);
    // In process, the sessions' `initialize` kept here lets a resting session come back; a
    // shared store keeps them for every replica.
    let restorable = match &config.session_store {
        Some(_) => None,
        None => {
            let store = Arc::new(crate::shared::InProcessMcpSessions::default());
            config.session_store = Some(store.clone());
            Some(store)
        }
    };
    let tokens = rest_state.shared_tokens();
    tokens.count_refusals_in(gateway.observer().metrics());
    let owners = SessionOwners::new(gateway.clone(), manager.clone(), restorable, tokens, http);
    let mcp = StreamableHttpService::new(
        move || Ok(GatewayService::new(factory_gateway.clone())),
        Arc::new(NamingSessionManager(manager.clone())),
        config,
    );
    // Layers run outside in: the token check first, then the session's owner.
    let mcp_router = Router::new()
        .route_service(MCP_PATH, mcp)
        .route_layer(middleware::from_fn_with_state(
            SessionsToClose {
                manager,
                sessions: gateway.sessions().clone(),
            },
            session_closed_no_content,
        ))
        .route_layer(middleware::from_fn(request_work_first))
        .route_layer(middleware::from_fn_with_state(
            owners,
            require_session_owner,
        ))
        .route_layer(middleware::from_fn_with_state(
            rest_state.shared_tokens(),
            rest::require_token,
        ));
    let console = crate::console::routes(gateway, rest_state.shared_tokens());
    mcp_router
        .merge(console)
        .merge(rest::routes(rest_state))
        .fallback(rest::not_found)
}

/// rmcp answers a POST with an SSE stream whose first event (the priming event, an id for a
/// client that reconnects) is ready at once. Written at once, it went out before the request's
/// own work had started: a forwarded call's write to its upstream waited for it. Yielding once
/// lets the tasks the request woke run first (on one async worker they run until they wait on
/// I/O); the priming event then goes out while the upstream works. Measured in
/// docs/BENCHMARKS.md ("Gateway").
async fn request_work_first(request: Request, next: Next) -> Response {
    let post = request.method() == Method::POST;
    let response = next.run(request).await;
    if post {
        tokio::task::yield_now().await;
    }
    response
}

/// Serves [`http_app`] on `listener` with the limits and rules of `http` until `shutdown`
/// completes.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    http: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    rest::serve_with(listener, app, http, shutdown)
        .await
        .map_err(|e| GatewayError::Downstream(format!("the HTTP server failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_lists_are_paged_by_position() {
        let items: Vec<u32> = (0..250).collect();
        let (first, next) = page_of(items.clone(), None, 100).unwrap();
        assert_eq!(
            (first.len(), first[0], next.as_deref()),
            (100, 0, Some("100"))
        );
        let (second, next) = page_of(items.clone(), next.as_deref(), 100).unwrap();
        assert_eq!((second[0], next.as_deref()), (100, Some("200")));
        let (last, next) = page_of(items.clone(), next.as_deref(), 100).unwrap();
        assert_eq!((last.len(), last[49], next), (50, 249, None));
        let (whole, next) = page_of(vec![1, 2], None, 100).unwrap();
        assert_eq!((whole, next), (vec![1, 2], None));
        for bad in ["x", "-1", "251"] {
            let e = page_of(items.clone(), Some(bad), 100).unwrap_err();
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn requests_rmcp_cannot_type_are_invalid_params_or_unknown_methods() {
        let e = custom_request_error("tools/call", Some(serde_json::json!({"arguments": {}})));
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("name"), "{}", e.message);
        let e = custom_request_error("tools/call", None);
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        let e = custom_request_error("tools/frobnicate", None);
        assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(e.message.contains("tools/frobnicate"), "{}", e.message);
    }
}
