//! Disclosure: which tool definitions a session's model sees, and the meta-tools that change it.
//!
//! One mechanism: a session sees `pinned ∪ revealed` tools (plus never-defer tools and tools of
//! always-visible categories) in full, and the rest as stubs (`progressive`) or not at all. The
//! presets (`search`, `progressive`, `add`, `limit`, `passthrough`) differ only in their meta-tools
//! and in how a search changes the session. Catalogs at or below the activation threshold pass
//! through unchanged, except for tools whose policy is `DeferPolicy::Always`.
//!
//! [`Disclosure`] holds the policy and the sessions and is `Send + Sync`; every method takes the
//! [`SearchEngine`] as an argument, so the caller decides how the engine is shared and updated.

mod config;
mod guidance;
mod meta;
mod session;

pub use config::{DisclosureConfig, Preset, SelectionOrder};
pub use meta::{
    MetaTool, ADD_TOOL, CALL_TOOL, GET_TOOLS_BY_CATEGORY, LIST_CATEGORIES, SEARCH_AVAILABLE_TOOLS,
    SEARCH_TOOLS, SHOW_ALL_TOOLS, TOOL_SEARCH,
};

use crate::error::{Error, Result};
use crate::search::{Filters, SearchEngine, SearchMode, SearchRequest, SearchResponse};
use crate::tool::{DeferPolicy, Tool, ToolId};
use meta::{check_arguments, str_arg, strings_arg, usize_arg};
use serde::Serialize;
use serde_json::{json, Map, Value};
use session::{Session, SessionStore};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// How a tool appears in a session's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    /// A meta-tool of the preset.
    Meta,
    /// A catalog tool with its full schema.
    Full,
    /// A catalog tool with its name, description and a placeholder schema (`progressive`).
    Stub,
    /// A catalog tool sent in full but marked for the provider to load on demand (Anthropic's
    /// `defer_loading`).
    Deferred,
}

/// One entry of the tool list a session's model receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExposedTool {
    /// The public name (`server___name`, or the meta-tool's name).
    pub name: String,
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    #[serde(skip)]
    pub exposure: Exposure,
    /// The catalog tool behind the entry; `None` for meta-tools.
    #[serde(skip)]
    pub tool: Option<Arc<Tool>>,
}

impl ExposedTool {
    fn meta(tool: MetaTool, preset: Preset) -> Self {
        Self {
            name: tool.name().to_string(),
            description: tool.description(preset).to_string(),
            input_schema: tool.schema(),
            annotations: None,
            exposure: Exposure::Meta,
            tool: None,
        }
    }

    fn catalog(tool: &Arc<Tool>, separator: &str, exposure: Exposure) -> Self {
        let name = tool.public_name(separator);
        let input_schema = match exposure {
            Exposure::Stub => stub_schema(),
            _ => tool.input_schema.to_value(),
        };
        Self {
            name,
            description: tool.description.clone(),
            input_schema,
            annotations: tool.annotations.clone(),
            exposure,
            tool: Some(tool.clone()),
        }
    }
}

/// The placeholder schema of a deferred tool: it tells the model how to load the real one. The
/// text is the same for every tool (the name is already beside it), which keeps stubs cheap.
pub fn stub_schema() -> Value {
    json!({
        "type": "object",
        "description": format!("Not loaded: call {TOOL_SEARCH} with this tool's name first.")
    })
}

/// What a meta-tool returns.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaOutcome {
    /// The JSON result for the model.
    pub result: Value,
    /// Whether the session's tool list changed (send `notifications/tools/list_changed`).
    pub visible_changed: bool,
}

/// What to do with a tool call the model made.
#[derive(Debug, Clone)]
pub enum Dispatch {
    /// A meta-tool ran; here is its result.
    Meta(MetaOutcome),
    /// Run this catalog tool with these (validated) arguments.
    Call { tool: Arc<Tool>, arguments: Value },
}

#[derive(Debug)]
struct State {
    sessions: SessionStore,
    never_defer: HashSet<String>,
    pinned: HashSet<String>,
}

/// The disclosure policy and its sessions. Thread-safe; share it behind an `Arc`.
#[derive(Debug)]
pub struct Disclosure {
    config: DisclosureConfig,
    categories: HashSet<String>,
    state: Mutex<State>,
}

impl Default for Disclosure {
    fn default() -> Self {
        Self::build(DisclosureConfig::default())
    }
}

impl Disclosure {
    pub fn new(config: DisclosureConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self::build(config))
    }

    fn build(config: DisclosureConfig) -> Self {
        let state = State {
            sessions: SessionStore::new(config.max_sessions),
            never_defer: config.never_defer.iter().cloned().collect(),
            pinned: config.pinned.iter().cloned().collect(),
        };
        Self {
            categories: config
                .always_visible_categories
                .iter()
                .map(|c| c.to_lowercase())
                .collect(),
            config,
            state: Mutex::new(state),
        }
    }

    pub fn config(&self) -> &DisclosureConfig {
        &self.config
    }

    pub fn preset(&self) -> Preset {
        self.config.preset
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the sets consistent (every update is one insert or
        // remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Always sends this tool (public or bare name) in full from now on.
    pub fn add_never_defer(&self, name: impl Into<String>) {
        self.lock().never_defer.insert(name.into());
    }

    pub fn remove_never_defer(&self, name: &str) -> bool {
        self.lock().never_defer.remove(name)
    }

    /// Pins a tool (public or bare name): visible in full in every session.
    pub fn pin(&self, name: impl Into<String>) {
        self.lock().pinned.insert(name.into());
    }

    pub fn unpin(&self, name: &str) -> bool {
        self.lock().pinned.remove(name)
    }

    /// Forgets a session's reveals; returns whether it existed.
    pub fn end_session(&self, session_id: &str) -> bool {
        self.lock().sessions.remove(session_id)
    }

    pub fn session_count(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether the catalog is large enough for disclosure to defer `Automatic` tools.
    pub fn is_active(&self, engine: &SearchEngine) -> bool {
        engine.catalog().len() > self.config.threshold
    }

    fn always_full(&self, tool: &Tool, state: &State, separator: &str) -> bool {
        let listed = |set: &HashSet<String>| {
            !set.is_empty()
                && (set.contains(&tool.name) || set.contains(&tool.public_name(separator)))
        };
        tool.defer == DeferPolicy::Never
            || listed(&state.never_defer)
            || listed(&state.pinned)
            || tool
                .category
                .as_ref()
                .is_some_and(|c| self.categories.contains(&c.to_lowercase()))
    }

    fn is_deferred(&self, tool: &Tool, active: bool, state: &State, separator: &str) -> bool {
        if self.config.preset == Preset::Passthrough || self.always_full(tool, state, separator) {
            return false;
        }
        match tool.defer {
            DeferPolicy::Never => false,
            DeferPolicy::Automatic => active,
            DeferPolicy::Always => true,
        }
    }

    /// The catalog split into (tool, deferred?) in catalog order.
    fn classify(&self, engine: &SearchEngine, state: &State) -> Vec<(Arc<Tool>, bool)> {
        let active = self.is_active(engine);
        let separator = &engine.config().separator;
        engine
            .catalog()
            .tools()
            .map(|t| (t.clone(), self.is_deferred(t, active, state, separator)))
            .collect()
    }

    /// The meta-tools listed in this preset for this catalog.
    pub fn meta_tools(&self, engine: &SearchEngine) -> Vec<ExposedTool> {
        let state = self.lock();
        if !self.classify(engine, &state).iter().any(|(_, d)| *d) {
            return Vec::new();
        }
        self.listed_meta(engine)
            .into_iter()
            .map(|m| ExposedTool::meta(m, self.config.preset))
            .collect()
    }

    fn listed_meta(&self, engine: &SearchEngine) -> Vec<MetaTool> {
        let with_categories =
            self.config.category_tools && engine.catalog().tools().any(|t| t.category.is_some());
        MetaTool::for_preset(self.config.preset, with_categories)
    }

    /// Whether `name` is a meta-tool of this preset (the category tools count when enabled).
    pub fn is_meta_tool(&self, name: &str) -> bool {
        MetaTool::from_name(name).is_some_and(|m| {
            MetaTool::for_preset(self.config.preset, self.config.category_tools).contains(&m)
        })
    }

    /// The tool list for `session_id` (what `tools/list` returns): meta-tools first, then the
    /// always-visible tools (and `progressive` stubs) in catalog order, then the session's
    /// revealed tools in the order they were revealed. Revealing only appends, so providers'
    /// prompt caches keep the prefix.
    pub fn visible_tools(&self, session_id: &str, engine: &SearchEngine) -> Vec<ExposedTool> {
        let mut state = self.lock();
        let classified = self.classify(engine, &state);
        let separator = engine.config().separator.as_str();
        let preset = self.config.preset;
        if !classified.iter().any(|(_, deferred)| *deferred) {
            return classified
                .iter()
                .map(|(t, _)| ExposedTool::catalog(t, separator, Exposure::Full))
                .collect();
        }
        let session = state.sessions.get(session_id).cloned().unwrap_or_default();
        let mut out: Vec<ExposedTool> = self
            .listed_meta(engine)
            .into_iter()
            .map(|m| ExposedTool::meta(m, preset))
            .collect();
        let mut shown: HashSet<ToolId> = HashSet::new();
        let revealed: HashSet<&ToolId> = session.revealed.iter().collect();
        for (tool, deferred) in &classified {
            if !deferred {
                shown.insert(tool.id());
                out.push(ExposedTool::catalog(tool, separator, Exposure::Full));
            } else if preset == Preset::Progressive && !revealed.contains(&tool.id()) {
                shown.insert(tool.id());
                out.push(ExposedTool::catalog(tool, separator, Exposure::Stub));
            }
        }
        let extra: Vec<ToolId> = match preset {
            Preset::Progressive | Preset::Add => session.revealed.iter().cloned().collect(),
            Preset::Limit => session
                .limit_set
                .clone()
                .unwrap_or_else(|| self.default_limit_set(&classified, separator)),
            Preset::Search | Preset::Passthrough => Vec::new(),
        };
        for id in extra {
            if shown.contains(&id) {
                continue;
            }
            // A revealed tool whose server has since dropped it is skipped, not an error.
            if let Some(tool) = engine.catalog().get(&id) {
                shown.insert(id);
                out.push(ExposedTool::catalog(tool, separator, Exposure::Full));
            }
        }
        out
    }

    /// `limit` preset before any search: the first `max_tools_limit` deferred tools in the
    /// configured order.
    fn default_limit_set(&self, classified: &[(Arc<Tool>, bool)], separator: &str) -> Vec<ToolId> {
        let mut deferred: Vec<&Arc<Tool>> = classified
            .iter()
            .filter(|(_, d)| *d)
            .map(|(t, _)| t)
            .collect();
        match self.config.tool_selection_order {
            SelectionOrder::Alphabetical => {
                deferred.sort_by_cached_key(|t| t.public_name(separator).to_lowercase())
            }
            SelectionOrder::ServerPriority => {
                let rank = |server: &str| {
                    self.config
                        .server_priority
                        .iter()
                        .position(|s| s == server)
                        .unwrap_or(usize::MAX)
                };
                // Stable sort: within a rank, catalog order (servers by name, tools as listed).
                deferred.sort_by_key(|t| rank(&t.server));
            }
        }
        deferred
            .into_iter()
            .take(self.config.max_tools_limit)
            .map(|t| t.id())
            .collect()
    }

    /// System-prompt guidance for this preset, listing the catalog's categories with counts.
    pub fn guidance(&self, engine: &SearchEngine) -> String {
        let state = self.lock();
        let classified = self.classify(engine, &state);
        let active = classified.iter().any(|(_, d)| *d);
        let shown = classified.iter().filter(|(_, d)| !d).count();
        let shown = match self.config.preset {
            Preset::Limit => shown + self.config.max_tools_limit.min(classified.len() - shown),
            _ => shown,
        };
        guidance::guidance(self.config.preset, active, engine.catalog(), shown)
    }

    /// Runs a meta-tool for a session. `call_tool` is not handled here because it needs an
    /// executor: use [`Disclosure::dispatch`] or [`Disclosure::call_tool`].
    pub fn handle(
        &self,
        session_id: &str,
        tool_name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let meta = MetaTool::from_name(tool_name)
            .filter(|_| self.is_meta_tool(tool_name))
            .ok_or_else(|| self.not_a_meta_tool(tool_name))?;
        let args = check_arguments(meta, arguments)?;
        tracing::debug!(session = session_id, tool = tool_name, "meta-tool");
        match meta {
            MetaTool::ToolSearch => self.tool_search(session_id, &args, engine),
            MetaTool::SearchTools => self.search_tools(&args, engine),
            MetaTool::AddTool => self.add_tool(session_id, &args, engine),
            MetaTool::ShowAllTools => Ok(self.show_all_tools(&args, engine)),
            MetaTool::SearchAvailableTools => {
                self.search_available_tools(session_id, &args, engine)
            }
            MetaTool::ListCategories => Ok(unchanged(list_categories(engine))),
            MetaTool::GetToolsByCategory => self.get_tools_by_category(&args, engine),
            MetaTool::CallTool => Err(Error::ExecutorRequired),
        }
    }

    fn not_a_meta_tool(&self, name: &str) -> Error {
        let available: Vec<&str> =
            MetaTool::for_preset(self.config.preset, self.config.category_tools)
                .into_iter()
                .map(MetaTool::name)
                .collect();
        Error::NotAMetaTool {
            name: name.to_string(),
            preset: self.config.preset.as_str(),
            available: if available.is_empty() {
                "none".to_string()
            } else {
                available.join(", ")
            },
        }
    }

    /// Routes a tool call from the model: meta-tools run here, `call_tool` and direct calls to
    /// catalog tools come back as [`Dispatch::Call`] with validated arguments.
    pub fn dispatch(
        &self,
        session_id: &str,
        tool_name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<Dispatch> {
        if tool_name == CALL_TOOL && self.is_meta_tool(CALL_TOOL) {
            let (tool, arguments) = self.prepare_meta_call(arguments, engine)?;
            return Ok(Dispatch::Call { tool, arguments });
        }
        if self.is_meta_tool(tool_name) {
            return self
                .handle(session_id, tool_name, arguments, engine)
                .map(Dispatch::Meta);
        }
        let (tool, arguments) = self.prepare_call(tool_name, arguments, engine)?;
        Ok(Dispatch::Call { tool, arguments })
    }

    /// Unpacks `call_tool`'s `{name, arguments}` and prepares the call.
    pub fn prepare_meta_call(
        &self,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<(Arc<Tool>, Value)> {
        let mut args = check_arguments(MetaTool::CallTool, arguments)?;
        let name = str_arg(&args, "name").unwrap_or_default().to_string();
        let inner = args.remove("arguments").unwrap_or(Value::Null);
        self.prepare_call(&name, inner, engine)
    }

    /// Resolves `name` (`server___name`, or a bare name unique in the catalog) and validates
    /// `arguments` against the tool's full schema. An unknown name fails with did-you-mean names;
    /// bad arguments fail with the problems and the schema.
    pub fn prepare_call(
        &self,
        name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<(Arc<Tool>, Value)> {
        let separator = &engine.config().separator;
        let catalog = engine.catalog();
        let tool = catalog
            .resolve(name, separator)
            .cloned()
            .ok_or_else(|| Error::UnknownTool {
                name: name.to_string(),
                suggestions: catalog.suggest(name, separator, 5),
            })?;
        let arguments = match arguments {
            Value::Null => Value::Object(Map::new()),
            other => other,
        };
        let mut problems = Vec::new();
        if !arguments.is_object() {
            problems.push(format!(
                "arguments must be a JSON object, got {}",
                json_kind(&arguments)
            ));
        } else {
            problems = meta::schema_problems(&tool.input_schema.to_value(), &arguments);
        }
        if !problems.is_empty() {
            return Err(Error::InvalidArguments {
                tool: tool.public_name(separator),
                problems: problems.join("; "),
                schema: tool.input_schema.to_value(),
            });
        }
        Ok((tool, arguments))
    }

    /// `call_tool` for library users: validates `{name, arguments}` and runs `executor` on the
    /// resolved tool with the validated arguments.
    pub fn call_tool<F>(
        &self,
        session_id: &str,
        arguments: Value,
        engine: &SearchEngine,
        executor: F,
    ) -> Result<Value>
    where
        F: FnOnce(&Tool, Value) -> Value,
    {
        let (tool, arguments) = self.prepare_meta_call(arguments, engine)?;
        tracing::debug!(session = session_id, tool = %tool.id(), "call_tool");
        Ok(executor(&tool, arguments))
    }

    fn search_request(
        &self,
        args: &Map<String, Value>,
        default_limit: usize,
    ) -> Result<SearchRequest> {
        let mode: SearchMode = str_arg(args, "mode").unwrap_or("keyword").parse()?;
        let limit = usize_arg(args, "limit", default_limit).min(meta::MAX_PAGE as usize);
        Ok(
            SearchRequest::new(str_arg(args, "query").unwrap_or_default())
                .mode(mode)
                .limit(limit)
                .top_band(self.config.top_band)
                .filters(Filters {
                    servers: strings_arg(args, "server"),
                    categories: strings_arg(args, "category"),
                    tags: strings_arg(args, "tags"),
                    ..Filters::default()
                }),
        )
    }

    fn tool_search(
        &self,
        session_id: &str,
        args: &Map<String, Value>,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let request = self.search_request(args, self.config.tool_search_limit)?;
        let response = engine.search(&request.limit(self.config.tool_search_limit))?;
        let ids: Vec<ToolId> = response.tools.iter().map(|h| h.tool.id()).collect();
        let added = self.reveal(session_id, ids, engine);
        let mut result = search_result(&response, engine, true);
        result["loaded"] = json!(added);
        Ok(MetaOutcome {
            result,
            visible_changed: !added.is_empty(),
        })
    }

    /// Reveals `ids` for a session; returns the public names that became visible in full.
    fn reveal(&self, session_id: &str, ids: Vec<ToolId>, engine: &SearchEngine) -> Vec<String> {
        let mut state = self.lock();
        let active = self.is_active(engine);
        let separator = engine.config().separator.clone();
        let catalog = engine.catalog();
        // Tools already visible in full need no reveal; revealing them would only churn the list.
        let wanted: Vec<ToolId> = ids
            .into_iter()
            .filter(|id| {
                catalog
                    .get(id)
                    .is_some_and(|t| self.is_deferred(t, active, &state, &separator))
            })
            .collect();
        let max = self.config.max_reveals_per_session;
        let session: &mut Session = state.sessions.get_or_create(session_id);
        session
            .reveal(wanted, max)
            .into_iter()
            .map(|id| id.public_name(&separator))
            .collect()
    }

    fn search_tools(
        &self,
        args: &Map<String, Value>,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let response = engine.search(&self.search_request(args, 10)?)?;
        let schemas = self.config.preset != Preset::Add;
        let mut result = search_result(&response, engine, schemas);
        if !schemas && !response.tools.is_empty() {
            result["next"] = json!(format!("Call {ADD_TOOL} with the names you need."));
        }
        Ok(unchanged(result))
    }

    fn add_tool(
        &self,
        session_id: &str,
        args: &Map<String, Value>,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let separator = &engine.config().separator;
        let catalog = engine.catalog();
        let mut ids = Vec::new();
        // All names are checked before any is revealed: a typo must not half-apply the call.
        for name in strings_arg(args, "names") {
            match catalog.resolve(&name, separator) {
                Some(tool) => ids.push(tool.id()),
                None => {
                    return Err(Error::UnknownTool {
                        suggestions: catalog.suggest(&name, separator, 5),
                        name,
                    })
                }
            }
        }
        let requested: Vec<String> = ids.iter().map(|id| id.public_name(separator)).collect();
        let added = self.reveal(session_id, ids, engine);
        let already: Vec<&String> = requested.iter().filter(|n| !added.contains(n)).collect();
        Ok(MetaOutcome {
            visible_changed: !added.is_empty(),
            result: json!({"added": added, "already_available": already}),
        })
    }

    fn show_all_tools(&self, args: &Map<String, Value>, engine: &SearchEngine) -> MetaOutcome {
        let separator = &engine.config().separator;
        let mut names: Vec<String> = engine
            .catalog()
            .tools()
            .map(|t| t.public_name(separator))
            .collect();
        names.sort();
        let offset = usize_arg(args, "offset", 0);
        let limit = usize_arg(args, "limit", 200).min(meta::MAX_NAMES_PAGE as usize);
        let total = names.len();
        let page: Vec<String> = names.into_iter().skip(offset).take(limit).collect();
        let end = offset.saturating_add(page.len());
        let mut result = json!({"total": total, "offset": offset, "names": page});
        if end < total {
            result["next_offset"] = json!(end);
        }
        unchanged(result)
    }

    fn search_available_tools(
        &self,
        session_id: &str,
        args: &Map<String, Value>,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let limit = self.config.max_tools_limit.min(meta::MAX_PAGE as usize);
        let request = self.search_request(args, limit)?;
        let response = engine.search(&request)?;
        let ids: Vec<ToolId> = response.tools.iter().map(|h| h.tool.id()).collect();
        let result = search_result(&response, engine, false);
        // A search that finds nothing keeps the current tools: an empty set would strand the model.
        if ids.is_empty() {
            return Ok(unchanged(result));
        }
        let mut state = self.lock();
        let session = state.sessions.get_or_create(session_id);
        let changed = session.limit_set.as_ref() != Some(&ids);
        session.limit_set = Some(ids);
        Ok(MetaOutcome {
            result,
            visible_changed: changed,
        })
    }

    fn get_tools_by_category(
        &self,
        args: &Map<String, Value>,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let category = str_arg(args, "category").unwrap_or_default();
        let known = engine.catalog().categories();
        if !known.iter().any(|(c, _)| c.eq_ignore_ascii_case(category)) {
            let names: Vec<&str> = known.iter().map(|(c, _)| c.as_str()).collect();
            return Err(Error::UnknownCategory {
                name: category.to_string(),
                known: names.join(", "),
            });
        }
        let request = SearchRequest::new("")
            .offset(usize_arg(args, "offset", 0))
            .limit(usize_arg(args, "limit", 20).min(meta::MAX_PAGE as usize))
            .filters(Filters {
                categories: vec![category.to_string()],
                ..Filters::default()
            });
        let response = engine.search(&request)?;
        let mut result = search_result(&response, engine, self.config.preset == Preset::Search);
        if let Some(map) = result.as_object_mut() {
            map.remove("query");
            map.insert("category".into(), json!(category));
        }
        Ok(unchanged(result))
    }

    /// Anthropic's native deferral: every catalog tool, with full schemas, deferred ones marked
    /// [`Exposure::Deferred`] (sent with `defer_loading: true`), after one client-side
    /// `tool_search` tool that is never deferred. The list is the same for every session: the API
    /// loads tools from the `tool_reference` blocks the search returns.
    pub fn anthropic_native_tools(&self, engine: &SearchEngine) -> Vec<ExposedTool> {
        let state = self.lock();
        let classified = self.classify(engine, &state);
        let separator = engine.config().separator.as_str();
        let mut out = Vec::with_capacity(classified.len() + 1);
        if classified.iter().any(|(_, d)| *d) {
            let mut search = ExposedTool::meta(MetaTool::ToolSearch, self.config.preset);
            search.description =
                "Find tools by keywords or exact name; matching tools become available to call."
                    .to_string();
            out.push(search);
        }
        for (tool, deferred) in &classified {
            let exposure = if *deferred {
                Exposure::Deferred
            } else {
                Exposure::Full
            };
            out.push(ExposedTool::catalog(tool, separator, exposure));
        }
        out
    }

    /// The client-side search of [`Disclosure::anthropic_native_tools`]: the public names of the
    /// matching deferred tools, to return as `tool_reference` blocks
    /// ([`crate::formats::anthropic_tool_search_result`]).
    pub fn anthropic_native_search(
        &self,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<Vec<String>> {
        let args = check_arguments(MetaTool::ToolSearch, arguments)?;
        let deferred: HashSet<ToolId> = {
            let state = self.lock();
            self.classify(engine, &state)
                .into_iter()
                .filter(|(_, d)| *d)
                .map(|(t, _)| t.id())
                .collect()
        };
        let mut request = self.search_request(&args, self.config.tool_search_limit)?;
        // Only deferred tools may be referenced; the others are loaded already.
        request.filters.visible = Some(deferred);
        let separator = &engine.config().separator;
        Ok(engine
            .search(&request)?
            .tools
            .iter()
            .map(|h| h.tool.public_name(separator))
            .collect())
    }
}

fn unchanged(result: Value) -> MetaOutcome {
    MetaOutcome {
        result,
        visible_changed: false,
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Search results as the model reads them. Scores are rounded so results stay readable and
/// stable across platforms.
fn search_result(response: &SearchResponse, engine: &SearchEngine, schemas: bool) -> Value {
    let separator = &engine.config().separator;
    let tools: Vec<Value> = response
        .tools
        .iter()
        .map(|hit| {
            let mut entry = json!({
                "name": hit.tool.public_name(separator),
                "description": hit.tool.description,
                "score": (f64::from(hit.score) * 1000.0).round() / 1000.0,
            });
            if schemas {
                entry["inputSchema"] = hit.tool.input_schema.to_value();
            }
            entry
        })
        .collect();
    let mut result = json!({
        "query": response.query,
        "total_matches": response.total_matches,
        "tools": tools,
    });
    if let Some(fallback) = &response.fallback {
        result["hint"] = json!("Nothing matched; refine the query with these.");
        result["fallback"] = serde_json::to_value(fallback).unwrap_or(Value::Null);
    }
    result
}

fn list_categories(engine: &SearchEngine) -> Value {
    let categories: Vec<Value> = engine
        .catalog()
        .categories()
        .into_iter()
        .map(|(name, count)| json!({"name": name, "count": count}))
        .collect();
    json!({ "categories": categories })
}

/// An error as a JSON tool result for the model: the message, plus the did-you-mean names or the
/// schema when the error has them.
pub fn error_result(error: &Error) -> Value {
    let mut result = json!({"error": error.to_string()});
    match error {
        Error::UnknownTool { suggestions, .. } if !suggestions.is_empty() => {
            result["did_you_mean"] = json!(suggestions);
        }
        Error::InvalidArguments { schema, .. } | Error::MetaArguments { schema, .. } => {
            result["schema"] = schema.clone();
        }
        _ => {}
    }
    result
}
