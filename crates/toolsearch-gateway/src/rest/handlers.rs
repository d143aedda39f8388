//! The endpoints of `/api/mcp-standard/`.

use std::collections::HashSet;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolsearch_core::{Filters, SearchEngine, SearchMode, SearchRequest, Tool, ToolId};

use super::categories::{Categories, CategoryInfo};
use super::error::ApiError;
use super::extract::ApiJson;
use super::RestState;

/// Results per search when the request gives no `limit`.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit` a search accepts.
pub const MAX_LIMIT: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchToolsRequest {
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub mode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCategoriesRequest {}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsByCategoryRequest {
    pub category: String,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// Runs `work` on the engine off the async workers: a search is CPU-bound and holds the read lock.
async fn with_engine<T, F>(state: &RestState, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&SearchEngine, &Categories) -> Result<T, ApiError> + Send + 'static,
{
    let engine = state.engine.clone();
    let categories = state.categories.clone();
    tokio::task::spawn_blocking(move || {
        let engine = engine
            .read()
            .map_err(|_| ApiError::Internal("the engine lock is poisoned".into()))?;
        work(&engine, &categories)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("search task failed: {e}")))?
}

fn tool_json(tool: &Tool, categories: &Categories, separator: &str) -> Value {
    json!({
        "name": tool.public_name(separator),
        "description": tool.description,
        "inputSchema": tool.input_schema.to_value(),
        "category": categories.category_of(tool),
        "tags": tool.tags,
        "server": tool.server,
    })
}

fn category_json(c: &CategoryInfo, with_description: bool) -> Value {
    if with_description {
        json!({"id": c.id, "name": c.name, "description": c.description, "toolCount": c.tool_count})
    } else {
        json!({"id": c.id, "name": c.name, "toolCount": c.tool_count})
    }
}

fn all_categories(engine: &SearchEngine, categories: &Categories) -> Vec<CategoryInfo> {
    categories.list(engine.catalog().tools().map(|t| t.as_ref()))
}

fn resolve_category(
    engine: &SearchEngine,
    categories: &Categories,
    wanted: &str,
) -> Result<CategoryInfo, ApiError> {
    let known = all_categories(engine, categories);
    Categories::find(&known, wanted)
        .cloned()
        .ok_or_else(|| ApiError::UnknownCategory {
            category: wanted.to_string(),
            known: if known.is_empty() {
                "none (give tools a category, or define [[categories]] in the config)".into()
            } else {
                known
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
}

/// The ids of the tools in category `id`.
fn members(engine: &SearchEngine, categories: &Categories, id: &str) -> HashSet<ToolId> {
    engine
        .catalog()
        .tools()
        .filter(|t| categories.category_of(t) == Some(id))
        .map(|t| t.id())
        .collect()
}

fn check_range(
    field: &'static str,
    value: usize,
    min: usize,
    max: usize,
) -> Result<usize, ApiError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::OutOfRange {
            field,
            value,
            min,
            max,
        })
    }
}

pub(crate) async fn search_tools(
    State(state): State<RestState>,
    ApiJson(request): ApiJson<SearchToolsRequest>,
) -> Result<Json<Value>, ApiError> {
    let query = request.query.unwrap_or_default();
    let tags: Vec<String> = request
        .tags
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    let category = request.category.filter(|c| !c.trim().is_empty());
    if query.trim().is_empty() && category.is_none() && tags.is_empty() {
        return Err(ApiError::MissingCriteria);
    }
    let limit = check_range(
        "limit",
        request.limit.unwrap_or(DEFAULT_LIMIT),
        1,
        MAX_LIMIT,
    )?;
    let offset = request.offset.unwrap_or(0);
    let mode: SearchMode = match request.mode.as_deref() {
        Some(mode) => mode.parse()?,
        None => SearchMode::Keyword,
    };
    with_engine(&state, move |engine, categories| {
        let separator = &engine.config().separator;
        let mut filters = Filters {
            tags,
            ..Filters::default()
        };
        if let Some(wanted) = &category {
            let info = resolve_category(engine, categories, wanted)?;
            filters.visible = Some(members(engine, categories, &info.id));
        }
        // Every match is fetched so the category counts cover all of them, not just this page.
        let search = SearchRequest::new(query)
            .mode(mode)
            .limit(engine.catalog().len())
            .filters(filters);
        let response = engine.search(&search)?;
        let matched: Vec<&Tool> = response.tools.iter().map(|h| h.tool.as_ref()).collect();
        let facets = if matched.is_empty() {
            // Nothing matched: every category, so the caller can refine instead of stopping.
            all_categories(engine, categories)
        } else {
            categories.list(matched.iter().copied())
        };
        let tools: Vec<Value> = response
            .tools
            .iter()
            .skip(offset)
            .take(limit)
            .map(|hit| {
                json!({
                    "tool": tool_json(&hit.tool, categories, separator),
                    // f32 → f64 would print float noise (0.68659257888...); 4 decimals rank the same.
                    "score": (f64::from(hit.score) * 10_000.0).round() / 10_000.0,
                    "matchedOn": hit.matched_on,
                })
            })
            .collect();
        tracing::debug!(target: "rest", total = response.total_matches, returned = tools.len(), "search_tools");
        Ok(Json(json!({
            "tools": tools,
            "totalMatches": response.total_matches,
            "categories": facets
                .iter()
                .filter(|c| c.tool_count > 0)
                .map(|c| category_json(c, false))
                .collect::<Vec<_>>(),
        })))
    })
    .await
}

pub(crate) async fn list_categories(
    State(state): State<RestState>,
    ApiJson(_request): ApiJson<ListCategoriesRequest>,
) -> Result<Json<Value>, ApiError> {
    with_engine(&state, |engine, categories| {
        let list: Vec<Value> = all_categories(engine, categories)
            .iter()
            .map(|c| category_json(c, true))
            .collect();
        Ok(Json(json!({ "categories": list })))
    })
    .await
}

pub(crate) async fn get_tools_by_category(
    State(state): State<RestState>,
    ApiJson(request): ApiJson<ToolsByCategoryRequest>,
) -> Result<Json<Value>, ApiError> {
    let offset = request.offset.unwrap_or(0);
    let limit = match request.limit {
        Some(limit) => Some(check_range("limit", limit, 1, usize::MAX)?),
        None => None,
    };
    with_engine(&state, move |engine, categories| {
        let separator = &engine.config().separator;
        let info = resolve_category(engine, categories, &request.category)?;
        let mut tools: Vec<&Tool> = engine
            .catalog()
            .tools()
            .map(|t| t.as_ref())
            .filter(|t| categories.category_of(t) == Some(info.id.as_str()))
            .collect();
        tools.sort_by(|a, b| (&a.server, &a.name).cmp(&(&b.server, &b.name)));
        let tools: Vec<Value> = tools
            .into_iter()
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .map(|t| tool_json(t, categories, separator))
            .collect();
        Ok(Json(json!({
            "category": category_json(&info, true),
            "tools": tools,
        })))
    })
    .await
}
