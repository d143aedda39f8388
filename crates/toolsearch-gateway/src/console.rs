//! The web console and `/metrics`, on the HTTP listener beside `/mcp` and the REST API.
//!
//! The console is one static page (`console/index.html`: HTML, CSS and plain JavaScript embedded
//! in the binary, no build step, nothing fetched from elsewhere). The page holds no data: every
//! figure it shows comes from the JSON routes below, which take the same bearer tokens as the REST
//! API and answer in the token's scope. The operator's views (upstreams, recent searches) need a
//! token that sees every tool.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use toolsearch_core::contract::{self, SearchArgs, SearchOptions};
use toolsearch_core::{Preset, Scope, SearchMode, Tool};

use crate::config::Transport;
use crate::gateway::Gateway;
use crate::metrics::Face;
use crate::payload::{self, Counter, ProviderFormat};
use crate::rest::{require_token, ApiError, ApiTokens, Grant};
use crate::upstream::state::ServerState;

mod actions;

const INDEX_HTML: &str = include_str!("console/index.html");

pub const CONSOLE_PATH: &str = "/";
pub const METRICS_PATH: &str = "/metrics";

/// The console's page, its JSON routes and `/metrics`; every route but the page takes a token when
/// tokens are configured.
pub fn routes(gateway: Arc<Gateway>, tokens: Arc<ApiTokens>) -> Router {
    let actions = actions::Actions::new(gateway.clone());
    let guarded = Router::new()
        .route(METRICS_PATH, get(metrics))
        .route("/api/console/overview", get(overview))
        .route("/api/console/upstreams", get(upstreams))
        .route("/api/console/catalog", get(catalog))
        .route("/api/console/search", post(search))
        .route("/api/console/payload", get(payload_view))
        .route("/api/console/searches", get(searches))
        .route_layer(middleware::from_fn_with_state(
            tokens.clone(),
            require_token,
        ))
        .with_state(gateway);
    let guarded_actions = Router::new()
        .route(
            "/api/console/upstreams/{name}/restart",
            post(actions::restart),
        )
        .route(
            "/api/console/upstreams/{name}/sign-in",
            post(actions::sign_in),
        )
        .route_layer(middleware::from_fn_with_state(tokens, require_token))
        .with_state(actions.clone());
    // The browser comes back from a sign-in page without a token; the route completes only a
    // sign-in an operator started, by its unguessable state.
    let callback = Router::new()
        .route(actions::CALLBACK_PATH, get(actions::callback))
        .with_state(actions);
    Router::new()
        .route(CONSOLE_PATH, get(|| async { Html(INDEX_HTML) }))
        .merge(guarded)
        .merge(guarded_actions)
        .merge(callback)
}

/// `/metrics`: everything to a token that sees every tool (the operator's), only the series of
/// the servers in its scope to a scoped one.
async fn metrics(State(gateway): State<Arc<Gateway>>, grant: Grant) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics_page(&gateway, grant.scope()),
    )
        .into_response()
}

/// Refuses the operator's views to a token that does not see every tool.
fn require_full_scope(grant: &Grant) -> Result<(), ApiError> {
    if grant.scope().is_all() {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "token `{}` sees only some tools; the upstream and recent-search views need a token that sees every tool",
            grant.label()
        )))
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Overview {
    version: &'static str,
    preset: &'static str,
    tools: usize,
    servers: usize,
    semantic: Value,
    full_scope: bool,
}

async fn overview(State(gateway): State<Arc<Gateway>>, grant: Grant) -> Json<Overview> {
    let scope = grant.scope().clone();
    let tools = in_scope(&gateway, &scope).len();
    // A scoped token counts only the servers it reaches.
    let servers = {
        let engine = gateway.engine().read().unwrap_or_else(|e| e.into_inner());
        gateway
            .upstreams()
            .servers()
            .iter()
            .filter(|server| crate::relay::scope_reaches_server(&scope, &engine, server))
            .count()
    };
    Json(Overview {
        version: env!("CARGO_PKG_VERSION"),
        preset: gateway.preset().as_str(),
        tools,
        servers,
        semantic: serde_json::to_value(gateway.semantic().status()).unwrap_or(Value::Null),
        full_scope: scope.is_all(),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UpstreamView {
    name: String,
    transport: &'static str,
    /// `starting`, `ready`, `restarting`, `failed`, `needs_authorization` or `stopped`.
    state: &'static str,
    /// The state in words, with the attempt, the next try and the last error.
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_in_ms: Option<u64>,
    tools: usize,
    prompts: Option<usize>,
    restarts: u64,
    /// A stdio server's last lines on stderr, oldest first.
    stderr_tail: Vec<String>,
}

async fn upstreams(
    State(gateway): State<Arc<Gateway>>,
    grant: Grant,
) -> Result<Json<Vec<UpstreamView>>, ApiError> {
    require_full_scope(&grant)?;
    let config = gateway.config();
    let mut views = Vec::new();
    for (name, state) in gateway.upstreams().states() {
        let transport = match config.mcp_servers.get(&name).map(|s| s.transport()) {
            Some(Ok(Transport::Stdio { .. })) => "stdio",
            Some(Ok(Transport::StreamableHttp { .. })) => "http",
            Some(Ok(Transport::Sse { .. })) => "sse",
            _ => "unknown",
        };
        let (last_error, retry_in_ms) = match &state {
            ServerState::Starting { last_error, .. } => (last_error.clone(), None),
            ServerState::Restarting {
                last_error,
                retry_in,
                ..
            } => (
                Some(last_error.clone()),
                Some(u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX)),
            ),
            ServerState::Failed { last_error, .. } => (Some(last_error.clone()), None),
            ServerState::NeedsAuthorization { reason } => (Some(reason.clone()), None),
            _ => (None, None),
        };
        views.push(UpstreamView {
            transport,
            state: state.label(),
            detail: state.to_string(),
            last_error,
            retry_in_ms,
            tools: gateway.upstreams().tool_count(&name),
            prompts: gateway.served().prompt_count(&name).await,
            restarts: gateway.observer().metrics().restarts(&name),
            stderr_tail: gateway.upstreams().stderr_tail(&name),
            name,
        });
    }
    Ok(Json(views))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CatalogTool {
    name: String,
    server: String,
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    category: Option<String>,
    tags: Vec<String>,
    input_schema: Value,
    /// What the model is sent for this tool when its schema is deferred (`progressive`).
    stub: Value,
}

fn in_scope(gateway: &Gateway, scope: &Scope) -> Vec<Tool> {
    let engine = gateway.engine().read().unwrap_or_else(|e| e.into_inner());
    let naming = engine.naming().clone();
    engine
        .catalog()
        .tools()
        .filter(|tool| scope.allows_tool(tool, &naming))
        .map(|tool| tool.as_ref().clone())
        .collect()
}

async fn catalog(State(gateway): State<Arc<Gateway>>, grant: Grant) -> Json<Vec<CatalogTool>> {
    let naming = gateway
        .engine()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .naming()
        .clone();
    let tools = in_scope(&gateway, grant.scope())
        .into_iter()
        .map(|tool| {
            let name = naming.tool_name(&tool);
            CatalogTool {
                stub: json!({
                    "name": name,
                    "description": tool.description(),
                    "inputSchema": toolsearch_core::disclosure::stub_schema(),
                }),
                name,
                server: tool.server().to_owned(),
                description: tool.description().to_owned(),
                category: tool.category().map(str::to_owned),
                tags: tool.tags().to_vec(),
                input_schema: tool.input_schema().to_value(),
            }
        })
        .collect();
    Json(tools)
}

/// A playground search: the contract's results for the mode asked, and, for each result, the
/// score each signal gives it alone (words, meaning) when both exist.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlaygroundResults {
    results: contract::SearchResults,
    /// Per result name: `{"keyword": score, "semantic": score}` (a signal that did not find it is
    /// absent).
    signals: serde_json::Map<String, Value>,
    micros: u64,
}

async fn search(
    State(gateway): State<Arc<Gateway>>,
    grant: Grant,
    Json(args): Json<SearchArgs>,
) -> Result<Json<PlaygroundResults>, ApiError> {
    let scope = grant.scope().as_ref().clone();
    let status = gateway.server_status();
    let observer = gateway.observer().clone();
    let engine = gateway.engine().clone();
    tokio::task::spawn_blocking(move || {
        let engine = engine.read().unwrap_or_else(|e| e.into_inner());
        let options = SearchOptions {
            scope,
            ..SearchOptions::default()
        };
        let started = Instant::now();
        let mut results = contract::search(&engine, &args, &options)?;
        let elapsed = started.elapsed();
        contract::note_server_status(&mut results, status.as_ref(), &engine, &options.scope);
        let mut signals = serde_json::Map::new();
        for signal in [SearchMode::Keyword, SearchMode::Semantic] {
            let mut alone = args.clone();
            alone.mode = Some(signal);
            alone.limit = Some(contract::MAX_LIMIT);
            alone.offset = None;
            let Ok(found) = contract::search(&engine, &alone, &options) else {
                continue;
            };
            for hit in found.page.tools {
                if results.page.tools.iter().any(|t| t.name == hit.name) {
                    let entry = signals.entry(hit.name).or_insert_with(|| json!({}));
                    entry[signal.as_str()] = json!(hit.score);
                }
            }
        }
        if let Ok(value) = serde_json::to_value(&results) {
            observer.search_result(Face::Console, None, &value, elapsed);
        }
        Ok(Json(PlaygroundResults {
            results,
            signals,
            micros: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        }))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("search task failed: {e}")))?
}

#[derive(Deserialize)]
struct PayloadQuery {
    #[serde(default)]
    preset: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    query: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PayloadView {
    preset: &'static str,
    format: &'static str,
    query: String,
    full: payload::Size,
    first: payload::PresetCost,
}

async fn payload_view(
    State(gateway): State<Arc<Gateway>>,
    grant: Grant,
    Query(request): Query<PayloadQuery>,
) -> Result<Json<PayloadView>, ApiError> {
    let preset = match request.preset.as_deref() {
        None | Some("") => gateway.preset(),
        Some(name) => Preset::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| ApiError::BadQuery(format!("unknown preset `{name}`")))?,
    };
    let format: ProviderFormat = request
        .format
        .as_deref()
        .unwrap_or("openai-chat")
        .parse()
        .map_err(ApiError::BadQuery)?;
    let query = request
        .query
        .unwrap_or_else(|| "create a new document".to_string());
    let scope = grant.scope().as_ref().clone();
    let engine = gateway.engine().clone();
    // The gateway's own settings and served tools: the list a new session's tools/list returns.
    let surface = payload::Surface::of_disclosure(gateway.disclosure(), gateway.served_guidance());
    tokio::task::spawn_blocking(move || {
        let counter = Counter::o200k().map_err(ApiError::Internal)?;
        let engine = engine.read().unwrap_or_else(|e| e.into_inner());
        let full = payload::full_cost(&engine, format, &scope, &counter)?;
        let first = payload::preset_cost(
            &engine, &surface, preset, format, &query, &scope, &counter, true,
        )?;
        Ok(Json(PayloadView {
            preset: preset.as_str(),
            format: format.as_str(),
            query,
            full,
            first,
        }))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("payload task failed: {e}")))?
}

async fn searches(
    State(gateway): State<Arc<Gateway>>,
    grant: Grant,
) -> Result<Json<Vec<crate::observe::SearchRecord>>, ApiError> {
    require_full_scope(&grant)?;
    Ok(Json(gateway.observer().recent_searches()))
}

/// The `/metrics` page: the counters, with the gauges of state read now; for a scoped
/// caller, only the series of servers its scope reaches.
fn metrics_page(gateway: &Gateway, scope: &Scope) -> String {
    let metrics = gateway.observer().metrics();
    for (server, state) in gateway.upstreams().states() {
        metrics.upstream(
            &server,
            state.label(),
            gateway.upstreams().tool_count(&server),
        );
    }
    metrics.sessions(gateway.sessions().len());
    let store = gateway.sessions().store();
    metrics.state_store(store.kind(), store.is_up());
    if let Some(store) = gateway.offload() {
        let (outputs, bytes) = store.totals();
        metrics.offloaded(outputs, bytes);
    }
    if scope.is_all() {
        return metrics.render();
    }
    let engine = gateway.engine().read().unwrap_or_else(|e| e.into_inner());
    metrics.render_servers(|server| crate::relay::scope_reaches_server(scope, &engine, server))
}
