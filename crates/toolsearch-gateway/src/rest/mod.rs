//! The REST face: `POST /api/mcp-standard/{search_tools, list_categories, get_tools_by_category}` and
//! `GET /api/openapi.json`, over a shared [`SearchEngine`].
//!
//! [`routes`] gives the API without a catch-all, to merge beside other routes (the MCP endpoint) on
//! one listener; [`router`] adds JSON 404s for a listener of its own. Tokens guard the
//! `/api/mcp-standard/` routes; the OpenAPI document is public, since it describes the API and
//! reveals nothing of the catalog.

mod auth;
mod error;
mod extract;
mod handlers;
mod listener;
mod openapi;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{middleware, Json, Router};
use toolsearch_core::contract::ServerStatus;
use toolsearch_core::SearchEngine;

pub(crate) use auth::{at_limit, hold_until_sent};
pub use auth::{authorized, grant_for, require_token, ApiTokens, Grant, TokenId, TOKENS_ENV};
pub use error::ApiError;
pub use listener::{serve_with, BodyReadTimeout};
pub use openapi::document as openapi_document;
pub use toolsearch_core::contract::{DEFAULT_LIMIT, MAX_LIMIT};

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::listener_config::HttpConfig;

/// The engine as the gateway shares it: searches take the read lock, catalog updates the write lock.
pub type SharedEngine = Arc<RwLock<SearchEngine>>;

pub const SEARCH_TOOLS_PATH: &str = "/api/mcp-standard/search_tools";
pub const LIST_CATEGORIES_PATH: &str = "/api/mcp-standard/list_categories";
pub const TOOLS_BY_CATEGORY_PATH: &str = "/api/mcp-standard/get_tools_by_category";
pub const OPENAPI_PATH: &str = "/api/openapi.json";
pub const STATUS_PATH: &str = "/api/status";
/// Liveness: the process answers. No token, no catalog data.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness: the upstreams' first starts have settled (503 with the pending servers before).
/// No token, no catalog data.
pub const READYZ_PATH: &str = "/readyz";

/// Every route the API serves, as (method, path).
pub const ROUTES: [(&str, &str); 7] = [
    ("POST", SEARCH_TOOLS_PATH),
    ("POST", LIST_CATEGORIES_PATH),
    ("POST", TOOLS_BY_CATEGORY_PATH),
    ("GET", OPENAPI_PATH),
    ("GET", STATUS_PATH),
    ("GET", HEALTHZ_PATH),
    ("GET", READYZ_PATH),
];

/// What the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct RestState {
    pub(crate) engine: SharedEngine,
    /// Marks results whose server is down, when the API serves a gateway's upstreams.
    pub(crate) status: Option<Arc<dyn ServerStatus>>,
    pub(crate) tokens: Arc<ApiTokens>,
    pub(crate) max_body_bytes: usize,
    /// Search by meaning, when something embeds the tools in the background.
    pub(crate) semantic: Option<Arc<crate::semantic::Semantic>>,
    /// Where searches are counted and kept for the console.
    pub(crate) observer: Option<Arc<crate::observe::Observer>>,
}

impl std::fmt::Debug for RestState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestState")
            .field("tokens", &self.tokens)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl RestState {
    /// An open API (no tokens) over `engine`, with the default limits. Categories, selection and
    /// names are the engine's catalog policy.
    pub fn new(engine: SharedEngine) -> Self {
        Self {
            engine,
            status: None,
            semantic: None,
            observer: None,
            tokens: Arc::new(ApiTokens::none()),
            max_body_bytes: crate::config::RestConfig::default().max_body_bytes,
        }
    }

    /// Body limit and tokens from the config, plus tokens from `TOOLSEARCH_API_TOKENS`.
    pub fn from_config(engine: SharedEngine, config: &GatewayConfig) -> Result<Self, GatewayError> {
        Ok(Self::new(engine)
            .with_tokens(
                ApiTokens::from_config_and_env(&config.rest)?
                    .keyed_for(&config.state.prefix)
                    .with_request_limit(config.http.max_requests_per_token),
            )
            .with_max_body_bytes(config.rest.max_body_bytes))
    }

    /// Search results will mark the tools of servers `status` reports down.
    pub fn with_server_status(mut self, status: Arc<dyn ServerStatus>) -> Self {
        self.status = Some(status);
        self
    }

    /// Reports (at `/api/status`) how far search by meaning has come.
    pub fn with_semantic(mut self, semantic: Arc<crate::semantic::Semantic>) -> Self {
        self.semantic = Some(semantic);
        self
    }

    /// Counts searches in the metrics and keeps them for the console.
    pub fn with_observer(mut self, observer: Arc<crate::observe::Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn with_tokens(mut self, tokens: ApiTokens) -> Self {
        self.tokens = Arc::new(tokens);
        self
    }

    pub fn with_max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    pub fn engine(&self) -> &SharedEngine {
        &self.engine
    }

    pub fn tokens(&self) -> &ApiTokens {
        &self.tokens
    }

    /// The tokens as [`require_token`] takes them, to guard other routes (`/mcp`) the same way.
    pub fn shared_tokens(&self) -> Arc<ApiTokens> {
        self.tokens.clone()
    }
}

fn with_405(route: MethodRouter<RestState>, allowed: &'static str) -> MethodRouter<RestState> {
    route.fallback(move |request: Request| async move {
        ApiError::MethodNotAllowed {
            method: request.method().to_string(),
            path: request.uri().path().to_string(),
            allowed: allowed.to_string(),
        }
    })
}

/// The API's routes with their auth, body limit and JSON errors, but no catch-all: merge it beside
/// other routes (`Router::new().route("/mcp", ...).merge(rest::routes(state))`).
pub fn routes(state: RestState) -> Router {
    let api = Router::new()
        .route(
            SEARCH_TOOLS_PATH,
            with_405(post(handlers::search_tools), "POST"),
        )
        .route(
            LIST_CATEGORIES_PATH,
            with_405(post(handlers::list_categories), "POST"),
        )
        .route(
            TOOLS_BY_CATEGORY_PATH,
            with_405(post(handlers::get_tools_by_category), "POST"),
        )
        .route(STATUS_PATH, with_405(get(handlers::status), "GET"))
        .route_layer(middleware::from_fn_with_state(
            state.shared_tokens(),
            auth::require_token,
        ));
    Router::new()
        .route(
            OPENAPI_PATH,
            with_405(get(|| async { Json(openapi::document()) }), "GET"),
        )
        .route(HEALTHZ_PATH, with_405(get(handlers::healthz), "GET"))
        .route(READYZ_PATH, with_405(get(handlers::readyz), "GET"))
        .merge(api)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .with_state(state)
}

/// [`routes`] plus a JSON 404 for every other path: the router of a REST-only listener.
pub fn router(state: RestState) -> Router {
    routes(state).fallback(not_found)
}

/// The JSON 404 of [`router`], for a combined router that wants the same answer.
pub async fn not_found(method: Method, request: Request) -> Response {
    ApiError::NotFound {
        method: method.to_string(),
        path: request.uri().path().to_string(),
    }
    .into_response()
}

/// Refuses a listener that anyone beyond this machine could reach when no token guards it.
pub fn check_bind(
    addr: SocketAddr,
    tokens: &ApiTokens,
    insecure_no_auth: bool,
) -> Result<(), GatewayError> {
    if tokens.is_empty() && !addr.ip().is_loopback() && !insecure_no_auth {
        return Err(GatewayError::UnauthenticatedBind { addr });
    }
    if tokens.is_empty() && !addr.ip().is_loopback() {
        tracing::warn!(target: "rest", %addr, "serving the REST API without authentication (--insecure-no-auth)");
    }
    Ok(())
}

/// Binds a listener for [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves `app` on `listener` with the default `http` limits and rules ([`serve_with`]) until
/// `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, HttpConfig::default(), shutdown).await
}
