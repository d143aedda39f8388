//! The search contract: the one shape of a search's arguments and of its results, serialized the
//! same by every face (MCP meta-tools, the REST API, the CLI's `--json`, the library). Field names
//! are camelCase, as MCP writes them; scores have three decimals; one page is at most
//! [`MAX_LIMIT`] tools. Nothing a filter or the threshold removed is silent: a result says how
//! many tools matched, how many it returns, where the next page starts, and, when nothing fits,
//! what the catalog offers instead.

use crate::error::{Error, Result};
use crate::policy::{find_category, CategoryInfo, NamePattern};
use crate::scope::Scope;
use crate::search::{
    Fallback, Filters, MatchedOn, SearchEngine, SearchHit, SearchMode, SearchRequest,
    SearchResponse,
};
use crate::served::{output_schema_for, schema_for, OneOrMany};
use crate::tool::ToolId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;

/// Results per page when a search gives no `limit`.
pub const DEFAULT_LIMIT: usize = 10;
/// Largest page any search returns.
pub const MAX_LIMIT: usize = 50;
/// Searches drop results below this fraction of the best score, unless told otherwise.
pub const DEFAULT_TOP_BAND: f32 = 0.5;
/// Most needs one search takes at once (`queries`).
pub const MAX_QUERIES: usize = 5;

/// The arguments of a search, as every face accepts them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchArgs {
    /// What the tool should do, in your own words, or its exact name.
    #[serde(default)]
    pub query: String,
    /// Several needs, each searched alone (instead of query).
    #[serde(default)]
    #[schemars(length(max = 5))]
    pub queries: Vec<String>,
    /// Default: hybrid (words and meaning), or keyword without a model.
    #[serde(default)]
    #[schemars(with = "SearchMode")]
    pub mode: Option<SearchMode>,
    /// Only tools of these servers.
    #[serde(default)]
    pub server: OneOrMany,
    /// Only tools of these categories (id or name).
    #[serde(default)]
    pub category: OneOrMany,
    /// Only tools with any of these tags.
    #[serde(default)]
    pub tags: OneOrMany,
    /// Results per page (default 10).
    #[serde(default)]
    #[schemars(with = "usize", range(min = 1, max = 50))]
    pub limit: Option<usize>,
    /// Skip this many (the previous page's nextOffset).
    #[serde(default)]
    #[schemars(with = "usize")]
    pub offset: Option<usize>,
}

impl SearchArgs {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            ..Self::default()
        }
    }
}

/// What an edge decides about a search beyond its arguments.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Include each tool's input schema.
    pub schemas: bool,
    /// The page size when the arguments give none.
    pub default_limit: usize,
    /// Overrides the engine's score threshold.
    pub threshold: Option<f32>,
    /// Drop results below this fraction of the best score.
    pub top_band: Option<f32>,
    /// Only tools matching one of these, when not empty.
    pub patterns: Vec<NamePattern>,
    /// Only these tools, when set.
    pub visible: Option<HashSet<ToolId>>,
    /// The caller's scope: the search, its counts, its fallback and the categories it accepts
    /// are those of the tools in scope.
    pub scope: Scope,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            schemas: true,
            default_limit: DEFAULT_LIMIT,
            threshold: None,
            top_band: Some(DEFAULT_TOP_BAND),
            patterns: Vec::new(),
            visible: None,
            scope: Scope::all(),
        }
    }
}

/// One tool in a result.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolMatch {
    /// The exact name to call it by.
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// 0..1; 1 for an exact-name match.
    pub score: f64,
    /// Which fields matched which query words.
    pub matched_on: Vec<MatchedOn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// `false` when the tool's server is down right now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<bool>,
    /// The server's state when it is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_state: Option<String>,
}

/// One page of tools: how many matched in all, where this page starts and ends, and its tools.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// Tools that passed the filters and the threshold.
    pub total_matches: usize,
    pub offset: usize,
    /// Tools in this page.
    pub returned: usize,
    /// Where the next page starts, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    pub tools: Vec<ToolMatch>,
}

impl Page {
    /// The page of `response` that starts at `offset`.
    fn of(engine: &SearchEngine, response: &SearchResponse, offset: usize, schemas: bool) -> Self {
        let tools: Vec<ToolMatch> = response
            .tools
            .iter()
            .map(|hit| tool_match(engine, hit, schemas))
            .collect();
        let end = offset.saturating_add(tools.len());
        Self {
            total_matches: response.total_matches,
            offset,
            returned: tools.len(),
            next_offset: (end < response.total_matches).then_some(end),
            tools,
        }
    }
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchResults {
    pub query: String,
    pub mode: SearchMode,
    #[serde(flatten)]
    pub page: Page,
    /// True when the search read meaning (hybrid or semantic) and no result is a confident
    /// match: the tools listed are the closest guesses (scores under 0.5), and fallback lists
    /// what the catalog offers instead. Keyword search never says it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nothing_fits: bool,
    /// What to do next, when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When nothing matched: the nearest names, or the categories or servers to refine with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// Servers not ready now, whose tools a search may lack.
    // Only servers in the caller's scope: a miss while one starts is not the query's fault.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers_not_ready: Vec<ServerNotReady>,
    /// For queries: each query's results by name, best first; tools lists each tool once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_query: Vec<QueryResults>,
}

// One query's part of a search of several (`queries`). Its tools are named, not repeated: the
// answer's `tools` lists every tool the queries found once, so a tool two needs share costs its
// schema once. (Comments, not docs: a doc would be written into every tools/list.)
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueryResults {
    pub query: String,
    pub total_matches: usize,
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nothing_fits: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    // Its schema is the answer's fallback; written here as any object, so that the tool's output
    // schema does not carry that part twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub fallback: Option<Fallback>,
}

/// A server a search may be missing tools of, because it is not ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerNotReady {
    pub server: String,
    // `starting, attempt 1`, `restarting in 4s: ...`, `failed after 3 attempts: ...`.
    pub state: String,
    /// False while it has never been ready.
    // True when its tools are in the catalog from an earlier start.
    pub searchable: bool,
}

/// Every category with its tool count.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CategoryList {
    pub categories: Vec<CategoryInfo>,
}

/// The arguments of a listing of one category's tools.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CategoryArgs {
    /// The category's id or name.
    pub category: String,
    /// Skip this many tools (the previous page's nextOffset).
    #[serde(default)]
    #[schemars(with = "usize")]
    pub offset: Option<usize>,
    /// Tools per page (default 10).
    #[serde(default)]
    #[schemars(with = "usize", range(min = 1, max = 50))]
    pub limit: Option<usize>,
}

/// One category's tools, by server and name.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CategoryTools {
    pub category: CategoryInfo,
    #[serde(flatten)]
    pub page: Page,
}

/// Tells which servers cannot take calls right now, so that results can say so. The gateway
/// implements it over its upstreams; a library user without servers needs none.
pub trait ServerStatus: Send + Sync {
    /// The server's state when it is not ready (`restarting in 4s: ...`), `None` when it is.
    fn unavailable(&self, server: &str) -> Option<String>;

    /// Every server that is not ready, with its state, in a stable order. A status that knows
    /// only of tools in the catalog may leave it empty.
    fn not_ready(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Whether some server is still on its first start, so that the catalog is not yet all it
    /// will be.
    fn settling(&self) -> bool {
        false
    }
}

/// Marks the tools whose server is down and says which servers in `scope` a search may be
/// missing; when nothing matched and some of them have never been ready, the message says to
/// search again once they are, rather than to refine the query.
pub fn note_server_status(
    results: &mut SearchResults,
    status: &dyn ServerStatus,
    engine: &SearchEngine,
    scope: &Scope,
) {
    mark_unavailable(&mut results.page.tools, status);
    results.servers_not_ready = status
        .not_ready()
        .into_iter()
        .filter(|(server, _)| scope_reaches_server(scope, server, engine.naming().separator()))
        .map(|(server, state)| ServerNotReady {
            searchable: !engine.catalog().server_tools(&server).is_empty(),
            server,
            state,
        })
        .collect();
    let missing: Vec<String> = results
        .servers_not_ready
        .iter()
        .filter(|s| !s.searchable)
        .map(|s| format!("{} ({})", s.server, s.state))
        .collect();
    if missing.is_empty() {
        return;
    }
    let missing = missing.join(", ");
    results.message = Some(if results.page.tools.is_empty() {
        format!(
            "No tool matched among the servers that are ready. Not searchable yet: {missing}. Search again once they are ready (see serversNotReady)."
        )
    } else {
        format!(
            "Results cover the servers that are ready. Not searchable yet: {missing}; search again once they are ready if nothing here fits."
        )
    });
}

/// Whether `scope` may see a tool of `server`: a scoped caller hears only of its servers. A
/// pattern without a server part reaches every server when it names a bare tool, and the server
/// its public name starts with otherwise.
fn scope_reaches_server(scope: &Scope, server: &str, separator: &str) -> bool {
    let Some(patterns) = scope.patterns() else {
        return true;
    };
    patterns.iter().any(|pattern| {
        let raw = pattern.as_str().trim();
        if raw.contains(':') {
            return pattern.matches_server(server);
        }
        match raw.split_once(separator) {
            Some((prefix, _)) => NamePattern::server(prefix).matches_server(server),
            None => true,
        }
    })
}

/// Marks the tools whose server `status` reports down: `available: false` and the state.
pub fn mark_unavailable(tools: &mut [ToolMatch], status: &dyn ServerStatus) {
    for tool in tools {
        if let Some(state) = status.unavailable(&tool.server) {
            tool.available = Some(false);
            tool.server_state = Some(state);
        }
    }
}

/// Three decimals: readable, stable across platforms, and enough to rank by.
pub fn round_score(score: f32) -> f64 {
    (f64::from(score) * 1000.0).round() / 1000.0
}

/// Runs a search through the contract: one query, or each of `queries` alone
/// ([`SearchResults::per_query`]).
pub fn search(
    engine: &SearchEngine,
    args: &SearchArgs,
    options: &SearchOptions,
) -> Result<SearchResults> {
    let queries: Vec<&String> = args
        .queries
        .iter()
        .filter(|q| !q.trim().is_empty())
        .collect();
    if queries.is_empty() {
        return search_one(engine, args, options);
    }
    if !args.query.trim().is_empty() {
        return Err(Error::QueryAndQueries);
    }
    if queries.len() > MAX_QUERIES {
        return Err(Error::TooManyQueries {
            count: queries.len(),
            max: MAX_QUERIES,
        });
    }
    let mut each = Vec::with_capacity(queries.len());
    for query in &queries {
        let one = SearchArgs {
            query: query.to_string(),
            queries: Vec::new(),
            ..args.clone()
        };
        each.push(search_one(engine, &one, options)?);
    }
    Ok(merge(each, args.offset.unwrap_or(0)))
}

/// The answer to several queries: every tool they found once (in the order of the queries, each
/// query's best first), and each query's own results by name.
fn merge(each: Vec<SearchResults>, offset: usize) -> SearchResults {
    let mode = each.first().map_or(SearchMode::Keyword, |r| r.mode);
    let query = each
        .iter()
        .map(|r| r.query.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let nothing_fits = each.iter().all(|r| r.nothing_fits);
    let mut seen = HashSet::new();
    let mut tools = Vec::new();
    let mut per_query = Vec::with_capacity(each.len());
    for results in each {
        let names = results.page.tools.iter().map(|t| t.name.clone()).collect();
        for tool in results.page.tools {
            if seen.insert((tool.server.clone(), tool.name.clone())) {
                tools.push(tool);
            }
        }
        per_query.push(QueryResults {
            query: results.query,
            total_matches: results.page.total_matches,
            tools: names,
            next_offset: results.page.next_offset,
            nothing_fits: results.nothing_fits,
            message: results.message,
            fallback: results.fallback,
        });
    }
    SearchResults {
        query,
        mode,
        page: Page {
            total_matches: tools.len(),
            offset,
            returned: tools.len(),
            next_offset: None,
            tools,
        },
        nothing_fits,
        message: None,
        fallback: None,
        servers_not_ready: Vec::new(),
        per_query,
    }
}

fn search_one(
    engine: &SearchEngine,
    args: &SearchArgs,
    options: &SearchOptions,
) -> Result<SearchResults> {
    let mut categories = Vec::new();
    let wanted = args.category.clone().into_values();
    if !wanted.is_empty() {
        let known = engine.categories_in(&options.scope);
        for label in wanted {
            categories.push(resolve_category(&known, &label)?.id.clone());
        }
    }
    let limit = args
        .limit
        .unwrap_or(options.default_limit)
        .clamp(1, MAX_LIMIT);
    let offset = args.offset.unwrap_or(0);
    let mut request = SearchRequest::new(args.query.clone())
        .mode(args.mode.unwrap_or_else(|| engine.default_mode()))
        .limit(limit)
        .offset(offset)
        .filters(Filters {
            servers: args.server.clone().into_values(),
            categories,
            tags: args.tags.clone().into_values(),
            visible: options.visible.clone(),
            patterns: options.patterns.clone(),
            scope: options.scope.clone(),
        });
    request.threshold = options.threshold;
    request.top_band = options.top_band;
    let response = engine.search(&request)?;
    Ok(results(engine, response, offset, options.schemas))
}

fn results(
    engine: &SearchEngine,
    response: SearchResponse,
    offset: usize,
    schemas: bool,
) -> SearchResults {
    let page = Page::of(engine, &response, offset, schemas);
    let message = match (&response.fallback, page.tools.is_empty()) {
        (Some(_), false) if response.nothing_fits => Some(
            "No tool fits this request well: the results are the closest guesses, with low scores. Refine the query, or use the names, categories or servers in fallback."
                .to_string(),
        ),
        (Some(_), _) => Some(
            "No tool matched. Refine the query with the names, categories or servers in fallback."
                .to_string(),
        ),
        (None, true) if response.total_matches > 0 => Some(format!(
            "No tools past offset {offset}; {} matched in all.",
            response.total_matches
        )),
        _ => None,
    };
    SearchResults {
        query: response.query,
        mode: response.mode,
        page,
        nothing_fits: response.nothing_fits,
        message,
        fallback: response.fallback,
        servers_not_ready: Vec::new(),
        per_query: Vec::new(),
    }
}

/// A search hit as the contract shows it.
pub fn tool_match(engine: &SearchEngine, hit: &SearchHit, schemas: bool) -> ToolMatch {
    let tool = &hit.tool;
    ToolMatch {
        name: engine.naming().tool_name(tool),
        server: tool.server().to_owned(),
        description: tool.description().to_owned(),
        category: tool.category().map(str::to_owned),
        tags: tool.tags().to_vec(),
        score: round_score(hit.score),
        matched_on: hit.matched_on.clone(),
        input_schema: schemas.then(|| tool.input_schema().to_value()),
        available: None,
        server_state: None,
    }
}

/// Every category of the catalog with its count, as a caller with `scope` sees them
/// ([`SearchEngine::categories_in`]).
pub fn list_categories(engine: &SearchEngine, scope: &Scope) -> CategoryList {
    CategoryList {
        categories: engine.categories_in(scope),
    }
}

fn resolve_category<'a>(known: &'a [CategoryInfo], wanted: &str) -> Result<&'a CategoryInfo> {
    find_category(known, wanted).ok_or_else(|| Error::UnknownCategory {
        name: wanted.to_string(),
        known: if known.is_empty() {
            "none (give tools a category, or define categories in the config)".to_string()
        } else {
            known
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

/// One category's tools in `scope`, a page at a time; a category without tools in scope is
/// unknown to the caller.
pub fn tools_by_category(
    engine: &SearchEngine,
    args: &CategoryArgs,
    schemas: bool,
    scope: &Scope,
) -> Result<CategoryTools> {
    let known = engine.categories_in(scope);
    let category = resolve_category(&known, &args.category)?.clone();
    let offset = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let response = engine.search(&SearchRequest::new("").offset(offset).limit(limit).filters(
        Filters {
            categories: vec![category.id.clone()],
            scope: scope.clone(),
            ..Filters::default()
        },
    ))?;
    Ok(CategoryTools {
        category,
        page: Page::of(engine, &response, offset, schemas),
    })
}

/// The contract's JSON Schemas, by name: what searches and category listings accept and return.
/// `toolsearch schema` prints them; docs/CONTRACT.md shows them.
pub fn schemas() -> Value {
    serde_json::json!({
        "SearchArgs": schema_for::<SearchArgs>(),
        "SearchResults": output_schema_for::<SearchResults>(),
        "CategoryList": output_schema_for::<CategoryList>(),
        "CategoryArgs": schema_for::<CategoryArgs>(),
        "CategoryTools": output_schema_for::<CategoryTools>(),
    })
}
