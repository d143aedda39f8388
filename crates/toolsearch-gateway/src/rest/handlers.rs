//! The REST handlers: each reads its body with [`ApiJson`], runs the search contract on the shared
//! engine off the async workers, and answers with the contract's JSON, the same bytes the MCP
//! meta-tools and the CLI's `--json` write. Each runs in the scope of the request's token
//! ([`Grant`]): tools outside it are never found, listed or counted.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use toolsearch_core::contract::{
    self, CategoryArgs, CategoryList, CategoryTools, SearchArgs, SearchOptions, SearchResults,
    MAX_LIMIT,
};
use toolsearch_core::SearchEngine;

use super::auth::Grant;
use super::error::ApiError;
use super::extract::ApiJson;
use super::RestState;
use crate::metrics::Face;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCategoriesRequest {}

/// Runs `work` on the engine off the async workers: a search is CPU-bound and holds the read lock.
async fn with_engine<T, F>(state: &RestState, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&SearchEngine) -> Result<T, ApiError> + Send + 'static,
{
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || {
        let engine = engine
            .read()
            .map_err(|_| ApiError::Internal("the engine lock is poisoned".into()))?;
        work(&engine)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("search task failed: {e}")))?
}

fn check_limit(limit: Option<usize>) -> Result<(), ApiError> {
    match limit {
        Some(value) if !(1..=MAX_LIMIT).contains(&value) => Err(ApiError::OutOfRange {
            field: "limit",
            value,
            min: 1,
            max: MAX_LIMIT,
        }),
        _ => Ok(()),
    }
}

pub(crate) async fn search_tools(
    State(state): State<RestState>,
    grant: Grant,
    ApiJson(args): ApiJson<SearchArgs>,
) -> Result<Json<SearchResults>, ApiError> {
    // A search without criteria browses the catalog a page at a time, as every face does.
    check_limit(args.limit)?;
    let status = state.status.clone();
    let observer = state.observer.clone();
    with_engine(&state, move |engine| {
        let options = SearchOptions {
            scope: grant.scope().as_ref().clone(),
            ..SearchOptions::default()
        };
        let started = std::time::Instant::now();
        let mut results = contract::search(engine, &args, &options)?;
        let elapsed = started.elapsed();
        if let Some(status) = &status {
            contract::note_server_status(&mut results, status.as_ref(), engine, grant.scope());
        }
        tracing::debug!(target: "rest", total = results.page.total_matches, returned = results.page.returned, "search_tools");
        if let Some(observer) = &observer {
            let names: Vec<serde_json::Value> = results
                .page
                .tools
                .iter()
                .map(|t| serde_json::json!({ "name": t.name }))
                .collect();
            let summary = serde_json::json!({
                "query": results.query,
                "mode": results.mode.as_str(),
                "totalMatches": results.page.total_matches,
                "tools": names,
            });
            observer.search_result(Face::Rest, None, &summary, elapsed);
        }
        Ok(Json(results))
    })
    .await
}

pub(crate) async fn list_categories(
    State(state): State<RestState>,
    grant: Grant,
    ApiJson(_request): ApiJson<ListCategoriesRequest>,
) -> Result<Json<CategoryList>, ApiError> {
    with_engine(&state, move |engine| {
        Ok(Json(contract::list_categories(engine, grant.scope())))
    })
    .await
}

pub(crate) async fn get_tools_by_category(
    State(state): State<RestState>,
    grant: Grant,
    ApiJson(args): ApiJson<CategoryArgs>,
) -> Result<Json<CategoryTools>, ApiError> {
    check_limit(args.limit)?;
    let status = state.status.clone();
    with_engine(&state, move |engine| {
        let mut listed = contract::tools_by_category(engine, &args, true, grant.scope())?;
        if let Some(status) = &status {
            contract::mark_unavailable(&mut listed.page.tools, status.as_ref());
        }
        Ok(Json(listed))
    })
    .await
}

/// `GET /api/status`: where search stands: the default mode, the embedding model and how many
/// tools have their vector. A scoped token hears only of the servers its scope reaches.
pub(crate) async fn status(
    State(state): State<RestState>,
    grant: Grant,
) -> Result<Json<serde_json::Value>, ApiError> {
    let search = match &state.semantic {
        Some(semantic) => {
            let semantic = semantic.clone();
            tokio::task::spawn_blocking(move || serde_json::to_value(semantic.status()))
                .await
                .map_err(|e| ApiError::Internal(format!("status task failed: {e}")))?
        }
        None => {
            with_engine(&state, |engine| {
                Ok(serde_json::to_value(crate::semantic::SemanticStatus {
                    phase: crate::semantic::SemanticPhase::Off,
                    default_mode: engine.default_mode().as_str(),
                    vectors: engine.vector_status(),
                }))
            })
            .await?
        }
    }
    .map_err(|e| ApiError::Internal(format!("cannot write the status: {e}")))?;
    let (ready, mut upstreams) = upstream_readiness(&state);
    if !grant.scope().is_all() {
        let scope = grant.scope().clone();
        let shown = with_engine(&state, move |engine| {
            Ok(upstreams["notReady"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|entry| {
                    entry["server"].as_str().is_some_and(|server| {
                        crate::relay::scope_reaches_server(&scope, engine, server)
                    })
                })
                .cloned()
                .collect::<Vec<_>>())
        });
        upstreams = serde_json::json!({ "notReady": shown.await? });
    }
    let mut search = search;
    // Every tool has its vector, but the catalog is not yet all it will be.
    if !ready && search.get("state").and_then(|s| s.as_str()) == Some("ready") {
        search["state"] = serde_json::json!("waitingForUpstreams");
    }
    Ok(Json(serde_json::json!({
        "state": if ready { "ready" } else { "starting" },
        "upstreams": upstreams,
        "search": search,
    })))
}

/// Whether the upstreams' first starts have settled, and the servers that are not ready with
/// their state (none for a REST API over a catalog file). The state is its first word
/// (`starting`, `restarting`, `failed`): the probes answer without a token, and an upstream's
/// last error may hold paths or addresses the operator did not mean to publish.
fn upstream_readiness(state: &RestState) -> (bool, serde_json::Value) {
    let Some(status) = &state.status else {
        return (true, serde_json::json!({ "notReady": [] }));
    };
    let not_ready: Vec<serde_json::Value> = status
        .not_ready()
        .into_iter()
        .map(|(server, state)| {
            let word = state
                .split(|c: char| !c.is_alphabetic())
                .next()
                .unwrap_or_default();
            serde_json::json!({ "server": server, "state": word })
        })
        .collect();
    (
        !status.settling(),
        serde_json::json!({ "notReady": not_ready }),
    )
}

/// `GET /healthz`: the process is alive and serving.
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 once every upstream's first start has settled (ready, failed, or out of
/// its startup time), 503 with the servers still starting before.
pub(crate) async fn readyz(State(state): State<RestState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (ready, upstreams) = upstream_readiness(&state);
    if ready {
        (
            axum::http::StatusCode::OK,
            Json(serde_json::json!({ "status": "ready", "upstreams": upstreams })),
        )
            .into_response()
    } else {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "starting", "upstreams": upstreams })),
        )
            .into_response()
    }
}
