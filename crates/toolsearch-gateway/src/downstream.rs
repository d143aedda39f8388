//! The downstream MCP server: what clients (Claude Desktop, Cursor, agents) connect to, over stdio
//! or Streamable HTTP. One [`GatewayService`] per MCP session; the tools it lists and runs come
//! from the shared [`Gateway`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{GatewayError, Result};
use crate::gateway::Gateway;
use crate::rest::{self, ApiTokens, RestState};

/// Where the MCP endpoint is mounted on the HTTP listener.
pub const MCP_PATH: &str = "/mcp";

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
    pub fn new(gateway: Arc<Gateway>) -> Self {
        let id = gateway.new_session();
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
}

impl ServerHandler for GatewayService {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toolsearch", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.gateway.guidance())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.gateway.attach_peer(self.session_id(), &context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.gateway.attach_peer(self.session_id(), &context.peer);
        let tools = self
            .gateway
            .list_tools(self.session_id())
            .into_iter()
            .filter_map(|tool| {
                let name = tool.name.clone();
                serde_json::to_value(&tool)
                    .and_then(serde_json::from_value::<rmcp::model::Tool>)
                    .map_err(|e| tracing::warn!(tool = %name, error = %e, "tool left out of tools/list: its definition is not a valid MCP tool"))
                    .ok()
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gateway.attach_peer(self.session_id(), &context.peer);
        let arguments = request.arguments.map_or(Value::Null, Value::Object);
        let result = self
            .gateway
            .call_tool(self.session_id(), &request.name, arguments, context.ct)
            .await;
        Ok(result.into())
    }
}

/// Serves one MCP session over stdin/stdout until the client closes it or `shutdown` fires.
pub async fn serve_stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> Result<()> {
    let service = GatewayService::new(gateway);
    let running = service
        .serve_with_ct(rmcp::transport::stdio(), shutdown)
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

/// The HTTP app: the MCP endpoint at [`MCP_PATH`] beside the REST API, JSON 404s elsewhere.
/// When API tokens are configured they guard `/mcp` as they guard the REST routes.
pub fn http_app(
    gateway: Arc<Gateway>,
    rest_state: RestState,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Router {
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(shutdown);
    // Host checks stop DNS rebinding against a loopback listener; on any other address the
    // operator decides who may connect (tokens, network).
    if !addr.ip().is_loopback() {
        config = config.disable_allowed_hosts();
    }
    let factory_gateway = gateway.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(GatewayService::new(factory_gateway.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let tokens = rest_state.tokens().clone();
    let mcp_router = Router::new()
        .route_service(MCP_PATH, mcp)
        .route_layer(middleware::from_fn_with_state(tokens, require_token));
    mcp_router
        .merge(rest::routes(rest_state))
        .fallback(rest::not_found)
}

/// Bearer-token check for `/mcp`, the same tokens as the REST API.
async fn require_token(State(tokens): State<ApiTokens>, request: Request, next: Next) -> Response {
    if tokens.is_empty() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(token) if tokens.accepts(token) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or invalid bearer token; send `Authorization: Bearer <token>` with one of rest.apiTokens",
        )
            .into_response(),
    }
}

/// Serves [`http_app`] on `listener` until `shutdown` completes.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    rest::serve(listener, app, shutdown)
        .await
        .map_err(|e| GatewayError::Downstream(format!("the HTTP server failed: {e}")))
}
