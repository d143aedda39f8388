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
//!
//! Every session method takes a [`Caller`]: the session's id and its [`Scope`]. A session sees,
//! finds, lists and calls only the tools of its scope; a tool outside it answers as an unknown
//! tool, and no listing, count, error or suggestion names it. A plain session id is a caller
//! with every tool in scope.

mod config;
mod guidance;
mod meta;
mod session;

pub use config::{DisclosureConfig, Preset, SelectionOrder};
pub use meta::{
    AddToolArgs, Added, CallToolArgs, MetaTool, NamesPage, NoArgs, Revealed, ShowAllArgs,
    ToolSearchArgs, ADD_TOOL, CALL_TOOL, GET_TOOLS_BY_CATEGORY, LIST_CATEGORIES, MAX_NAMES_PAGE,
    SEARCH_AVAILABLE_TOOLS, SEARCH_TOOLS, SHOW_ALL_TOOLS, TOOL_SEARCH,
};

pub use crate::contract::ServerStatus;
use crate::contract::{self, CategoryArgs, SearchArgs, SearchOptions, SearchResults};
use crate::error::{Error, Result};
use crate::scope::{self, Scope};
use crate::search::SearchEngine;
use crate::served::{parse_arguments, tool_schema_problems, Listing, ToolDecl};
use crate::tool::{DeferPolicy, Tool, ToolId};
use serde::Serialize;
use serde_json::{json, Map, Value};
pub use session::SessionSnapshot;
use session::{Session, SessionStore};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Who is asking: a session and the scope of the tools it may see. The scope is the caller's to
/// keep (the gateway keeps each session's); the disclosure never stores it, so no session falls
/// back to a wider scope when its reveals are evicted.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub session: &'a str,
    pub scope: &'a Scope,
}

impl<'a> Caller<'a> {
    pub fn new(session: &'a str, scope: &'a Scope) -> Self {
        Self { session, scope }
    }
}

/// A session id alone is a caller with every tool in scope.
impl<'a> From<&'a str> for Caller<'a> {
    fn from(session: &'a str) -> Self {
        Self::new(session, &scope::ALL)
    }
}

impl<'a> From<&'a String> for Caller<'a> {
    fn from(session: &'a String) -> Self {
        Self::new(session, &scope::ALL)
    }
}

/// A tool served beside the meta-tools by whoever embeds the disclosure (the gateway's
/// large-output tools), as numbered by [`Disclosure::serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServedId(pub usize);

/// A served tool a name resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Meta(MetaTool),
    External(ServedId),
}

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
    /// The schema of the JSON result, for served tools that declare one.
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    #[serde(skip)]
    pub exposure: Exposure,
    /// The catalog tool behind the entry; `None` for meta-tools.
    #[serde(skip)]
    pub tool: Option<Arc<Tool>>,
}

impl ExposedTool {
    fn served(decl: &ToolDecl) -> Self {
        Self {
            name: decl.name.to_string(),
            description: decl.description.clone(),
            input_schema: decl.input_schema.clone(),
            output_schema: decl.output_schema.clone(),
            annotations: decl.annotations.clone(),
            exposure: Exposure::Meta,
            tool: None,
        }
    }

    fn catalog(tool: &Arc<Tool>, engine: &SearchEngine, exposure: Exposure) -> Self {
        let input_schema = match exposure {
            Exposure::Stub => stub_schema(),
            _ => tool.input_schema().to_value(),
        };
        Self {
            name: engine.naming().tool_name(tool),
            description: tool.description().to_owned(),
            input_schema,
            output_schema: None,
            annotations: tool.annotations().cloned(),
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
    /// Run this tool of the embedder's ([`Disclosure::serve`]), directly or through `call_tool`,
    /// with these (unchecked) arguments.
    Served { id: ServedId, arguments: Value },
}

#[derive(Debug)]
struct State {
    sessions: SessionStore,
}

/// The disclosure policy and its sessions. Thread-safe; share it behind an `Arc`.
pub struct Disclosure {
    config: DisclosureConfig,
    state: Mutex<State>,
    /// Tools served beside the meta-tools, listed in every session after them.
    served: Vec<ToolDecl>,
    status: Option<Arc<dyn ServerStatus>>,
}

impl std::fmt::Debug for Disclosure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disclosure")
            .field("config", &self.config)
            .field("served", &self.served)
            .finish_non_exhaustive()
    }
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
        };
        Self {
            config,
            state: Mutex::new(state),
            served: Vec::new(),
            status: None,
        }
    }

    /// Serves `decl` beside the meta-tools, in every session and every preset: a call to it,
    /// direct or through `call_tool`, dispatches as [`Dispatch::Served`] with the returned id.
    pub fn serve(&mut self, decl: ToolDecl) -> ServedId {
        self.served.push(decl);
        ServedId(self.served.len() - 1)
    }

    /// The declaration of a served tool.
    pub fn served_decl(&self, id: ServedId) -> Option<&ToolDecl> {
        self.served.get(id.0)
    }

    /// Search results will mark the tools of servers that `status` reports down.
    pub fn set_server_status(&mut self, status: Arc<dyn ServerStatus>) {
        self.status = Some(status);
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

    /// Forgets a session's reveals; returns whether it existed.
    pub fn end_session(&self, session_id: &str) -> bool {
        self.lock().sessions.remove(session_id)
    }

    pub fn session_count(&self) -> usize {
        self.lock().sessions.len()
    }

    /// A session's reveals as plain data; `None` for a session that never changed anything.
    pub fn session_snapshot(&self, session_id: &str) -> Option<SessionSnapshot> {
        self.lock().sessions.get(session_id).map(Session::snapshot)
    }

    /// Replaces a session's reveals with `snapshot` (kept elsewhere, e.g. by another replica),
    /// within this disclosure's bounds: the newest `maxRevealsPerSession` reveals are kept, and creating
    /// the session may evict the least recently used one.
    pub fn restore_session(&self, session_id: &str, snapshot: SessionSnapshot) {
        let max = self.config.max_reveals_per_session;
        self.lock()
            .sessions
            .get_or_create(session_id)
            .restore(snapshot, max);
    }

    /// Whether the catalog is large enough for disclosure to defer `Automatic` tools.
    pub fn is_active(&self, engine: &SearchEngine) -> bool {
        self.is_active_in(engine, &scope::ALL)
    }

    /// Whether the tools of `scope` are enough for disclosure to defer `Automatic` tools: a
    /// caller limited to a few tools sees them in full.
    pub fn is_active_in(&self, engine: &SearchEngine, scope: &Scope) -> bool {
        let count = if scope.is_all() {
            engine.catalog().len()
        } else {
            engine
                .catalog()
                .tools()
                .filter(|t| scope.allows_tool(t, engine.naming()))
                .count()
        };
        count > self.config.threshold
    }

    /// Never-defer, pinned and always-visible tools carry `DeferPolicy::Never`: the catalog
    /// policy set it when they entered the engine.
    fn is_deferred(&self, tool: &Tool, active: bool) -> bool {
        if self.config.preset == Preset::Passthrough {
            return false;
        }
        match tool.defer() {
            DeferPolicy::Never => false,
            DeferPolicy::Automatic => active,
            DeferPolicy::Always => true,
        }
    }

    /// The tools of `scope` split into (tool, deferred?) in catalog order.
    fn classify(&self, engine: &SearchEngine, scope: &Scope) -> Vec<(Arc<Tool>, bool)> {
        let active = self.is_active_in(engine, scope);
        engine
            .catalog()
            .tools()
            .filter(|t| scope.allows_tool(t, engine.naming()))
            .map(|t| (t.clone(), self.is_deferred(t, active)))
            .collect()
    }

    /// The meta-tools listed in this preset for this catalog, then the served tools listed
    /// beside them.
    pub fn meta_tools(&self, engine: &SearchEngine) -> Vec<ExposedTool> {
        let meta = if self.classify(engine, &scope::ALL).iter().any(|(_, d)| *d) {
            self.listed_meta(engine, &scope::ALL)
        } else {
            Vec::new()
        };
        let mut out: Vec<ExposedTool> = meta
            .iter()
            .map(|m| ExposedTool::served(&m.decl(self.config.preset)))
            .collect();
        out.extend(self.listed_served(meta.contains(&MetaTool::CallTool)));
        out
    }

    /// The served tools a list carries: all of them, or, in a list with `call_tool`, those not
    /// served on demand.
    fn listed_served(&self, with_call_tool: bool) -> impl Iterator<Item = ExposedTool> + '_ {
        self.served
            .iter()
            .filter(move |d| !with_call_tool || d.listing == Listing::Always)
            .map(ExposedTool::served)
    }

    /// The preset's meta-tools; the category tools when a tool of `scope` has a category.
    fn listed_meta(&self, engine: &SearchEngine, scope: &Scope) -> Vec<MetaTool> {
        let with_categories = self.config.category_tools
            && engine
                .catalog()
                .tools()
                .any(|t| t.category().is_some() && scope.allows_tool(t, engine.naming()));
        MetaTool::for_preset(self.config.preset, with_categories)
    }

    /// Whether `name` is a meta-tool of this preset. The category tools answer whether or not
    /// they are listed.
    pub fn is_meta_tool(&self, name: &str) -> bool {
        MetaTool::from_name(name)
            .is_some_and(|m| MetaTool::for_preset(self.config.preset, true).contains(&m))
    }

    /// The served tool `name` declares, if any: a meta-tool of this preset or an embedder's tool.
    fn served_tool(&self, name: &str) -> Option<Served> {
        if self.is_meta_tool(name) {
            return MetaTool::from_name(name).map(Served::Meta);
        }
        self.served
            .iter()
            .position(|d| d.name == name)
            .map(|i| Served::External(ServedId(i)))
    }

    /// The tool list for `session_id` (what `tools/list` returns): meta-tools first, then the
    /// always-visible tools (and `progressive` stubs) in catalog order, then the session's
    /// revealed tools in the order they were revealed. Revealing only appends, so providers'
    /// prompt caches keep the prefix.
    pub fn visible_tools<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        engine: &SearchEngine,
    ) -> Vec<ExposedTool> {
        let Caller {
            session: session_id,
            scope,
        } = caller.into();
        let classified = self.classify(engine, scope);
        let preset = self.config.preset;
        if !classified.iter().any(|(_, deferred)| *deferred) {
            let mut out: Vec<ExposedTool> = classified
                .iter()
                .map(|(t, _)| ExposedTool::catalog(t, engine, Exposure::Full))
                .collect();
            out.extend(self.listed_served(false));
            return out;
        }
        let session = self
            .lock()
            .sessions
            .get(session_id)
            .cloned()
            .unwrap_or_default();
        let meta = self.listed_meta(engine, scope);
        let mut out: Vec<ExposedTool> = meta
            .iter()
            .map(|m| ExposedTool::served(&m.decl(preset)))
            .chain(self.listed_served(meta.contains(&MetaTool::CallTool)))
            .collect();
        let mut shown: HashSet<ToolId> = HashSet::new();
        let revealed: HashSet<&ToolId> = session.revealed.iter().collect();
        for (tool, deferred) in &classified {
            if !deferred {
                shown.insert(tool.id());
                out.push(ExposedTool::catalog(tool, engine, Exposure::Full));
            } else if preset == Preset::Progressive && !revealed.contains(&tool.id()) {
                shown.insert(tool.id());
                out.push(ExposedTool::catalog(tool, engine, Exposure::Stub));
            }
        }
        let extra: Vec<ToolId> = match preset {
            Preset::Progressive | Preset::Add => session.revealed.iter().cloned().collect(),
            Preset::Limit => session
                .limit_set
                .clone()
                .unwrap_or_else(|| self.default_limit_set(&classified, engine)),
            Preset::Search | Preset::Passthrough => Vec::new(),
        };
        for id in extra {
            if shown.contains(&id) {
                continue;
            }
            // A revealed tool whose server has since dropped it is skipped, not an error; so is
            // one outside the caller's scope.
            if let Some(tool) = engine
                .catalog()
                .get(&id)
                .filter(|t| scope.allows_tool(t, engine.naming()))
            {
                shown.insert(id);
                out.push(ExposedTool::catalog(tool, engine, Exposure::Full));
            }
        }
        out
    }

    /// `limit` preset before any search: the first `max_tools_limit` deferred tools in the
    /// configured order.
    fn default_limit_set(
        &self,
        classified: &[(Arc<Tool>, bool)],
        engine: &SearchEngine,
    ) -> Vec<ToolId> {
        let mut deferred: Vec<&Arc<Tool>> = classified
            .iter()
            .filter(|(_, d)| *d)
            .map(|(t, _)| t)
            .collect();
        match self.config.tool_selection_order {
            SelectionOrder::Alphabetical => {
                deferred.sort_by_cached_key(|t| engine.naming().tool_name(t).to_lowercase())
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
                deferred.sort_by_key(|t| rank(t.server()));
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
        self.guidance_in(engine, &scope::ALL)
    }

    /// [`Disclosure::guidance`] for a caller with `scope`: its tools, categories and counts only.
    pub fn guidance_in(&self, engine: &SearchEngine, scope: &Scope) -> String {
        let classified = self.classify(engine, scope);
        let active = classified.iter().any(|(_, d)| *d);
        let shown = classified.iter().filter(|(_, d)| !d).count();
        let shown = match self.config.preset {
            Preset::Limit => shown + self.config.max_tools_limit.min(classified.len() - shown),
            _ => shown,
        };
        let tools: Vec<&Tool> = classified.iter().map(|(t, _)| t.as_ref()).collect();
        guidance::guidance(self.config.preset, active, &tools, shown)
    }

    /// Runs a meta-tool for a session. `call_tool` is not handled here because it needs an
    /// executor: use [`Disclosure::dispatch`] or [`Disclosure::call_tool`].
    pub fn handle<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        tool_name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        match self.served_tool(tool_name) {
            Some(Served::Meta(meta)) => self.run_meta(caller.into(), meta, arguments, engine),
            _ => Err(self.not_a_meta_tool(tool_name)),
        }
    }

    fn run_meta(
        &self,
        caller: Caller<'_>,
        meta: MetaTool,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        tracing::debug!(session = caller.session, tool = meta.name(), "meta-tool");
        let name = meta.name();
        match meta {
            MetaTool::ToolSearch => {
                self.tool_search(caller, parse_arguments(name, arguments)?, engine)
            }
            MetaTool::SearchTools => {
                self.search_tools(caller.scope, &parse_arguments(name, arguments)?, engine)
            }
            MetaTool::AddTool => self.add_tool(caller, parse_arguments(name, arguments)?, engine),
            MetaTool::ShowAllTools => {
                Ok(self.show_all_tools(caller.scope, &parse_arguments(name, arguments)?, engine))
            }
            MetaTool::SearchAvailableTools => {
                self.search_available_tools(caller, &parse_arguments(name, arguments)?, engine)
            }
            MetaTool::ListCategories => {
                parse_arguments::<NoArgs>(name, arguments)?;
                Ok(unchanged(to_json(&contract::list_categories(
                    engine,
                    caller.scope,
                ))))
            }
            MetaTool::GetToolsByCategory => {
                let args: CategoryArgs = parse_arguments(name, arguments)?;
                let schemas = self.config.preset == Preset::Search;
                let mut listed = contract::tools_by_category(engine, &args, schemas, caller.scope)?;
                self.mark_unavailable(&mut listed.page.tools);
                Ok(unchanged(to_json(&listed)))
            }
            MetaTool::CallTool => {
                parse_arguments::<CallToolArgs>(name, arguments)?;
                Err(Error::ExecutorRequired)
            }
        }
    }

    fn not_a_meta_tool(&self, name: &str) -> Error {
        let available: Vec<&str> = MetaTool::for_preset(self.config.preset, true)
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

    /// A served tool's arguments checked against its declaration before it is dispatched, as a
    /// meta-tool's are before it runs.
    fn check_served(&self, id: ServedId, arguments: &Value) -> Result<()> {
        match self.served_decl(id) {
            Some(decl) => decl.check_arguments(arguments),
            None => Ok(()),
        }
    }

    /// Routes a tool call from the model, by the tool it names: meta-tools run here; `call_tool`
    /// is unpacked here (and only here); calls to catalog tools come back as [`Dispatch::Call`]
    /// with validated arguments, calls to served tools as [`Dispatch::Served`] with arguments checked against their
    /// declaration.
    pub fn dispatch<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        tool_name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<Dispatch> {
        let caller = caller.into();
        match self.served_tool(tool_name) {
            Some(Served::Meta(MetaTool::CallTool)) => {
                let args: CallToolArgs = parse_arguments(CALL_TOOL, arguments)?;
                let inner = args.arguments.map_or(Value::Null, Value::Object);
                if let Some(Served::External(id)) = self.served_tool(&args.name) {
                    self.check_served(id, &inner)?;
                    return Ok(Dispatch::Served {
                        id,
                        arguments: inner,
                    });
                }
                let (tool, arguments) =
                    self.prepare_call_in(&args.name, inner, engine, caller.scope)?;
                Ok(Dispatch::Call { tool, arguments })
            }
            Some(Served::Meta(meta)) => self
                .run_meta(caller, meta, arguments, engine)
                .map(Dispatch::Meta),
            Some(Served::External(id)) => {
                self.check_served(id, &arguments)?;
                Ok(Dispatch::Served { id, arguments })
            }
            None => {
                let (tool, arguments) =
                    self.prepare_call_in(tool_name, arguments, engine, caller.scope)?;
                Ok(Dispatch::Call { tool, arguments })
            }
        }
    }

    /// Resolves `name` (`server___name`, or a bare name unique in the catalog) and validates
    /// `arguments` against the tool's full schema. An unknown name fails with did-you-mean names,
    /// a name longer than [`crate::MAX_NAME_CHARS`] at once without them; bad arguments fail with
    /// the problems and the schema.
    pub fn prepare_call(
        &self,
        name: &str,
        arguments: Value,
        engine: &SearchEngine,
    ) -> Result<(Arc<Tool>, Value)> {
        self.prepare_call_in(name, arguments, engine, &scope::ALL)
    }

    /// [`Disclosure::prepare_call`] for a caller with `scope`: a tool outside it is an unknown
    /// tool, suggested names are in scope.
    pub fn prepare_call_in(
        &self,
        name: &str,
        arguments: Value,
        engine: &SearchEngine,
        scope: &Scope,
    ) -> Result<(Arc<Tool>, Value)> {
        crate::catalog::check_name_length(name, "tool")?;
        let tool = match engine.resolve_in(name, scope) {
            Some(tool) => tool.clone(),
            None => return Err(self.unresolved(name, engine, scope)),
        };
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
            problems = tool_schema_problems(tool.input_schema(), &arguments);
        }
        if !problems.is_empty() {
            return Err(Error::InvalidArguments {
                tool: engine.naming().tool_name(&tool),
                problems: problems.join("; "),
                schema: tool.input_schema().to_value(),
            });
        }
        Ok((tool, arguments))
    }

    /// Why `name` resolves to no tool: its server (the part before the separator) is down, so
    /// its tools are not in the catalog (the status says so), or it is unknown. A name outside
    /// `scope` is unknown whatever its server's state, and the suggestions are in scope.
    fn unresolved(&self, name: &str, engine: &SearchEngine, scope: &Scope) -> Error {
        let id = engine.naming().parse(name);
        let down = self
            .status
            .as_ref()
            .filter(|_| !id.server.is_empty() && scope.allows(&id, engine.naming()))
            .and_then(|status| status.unavailable(&id.server));
        match down {
            Some(state) => Error::ServerDown {
                server: id.server,
                tool: name.to_string(),
                state,
            },
            None => Error::UnknownTool {
                name: name.to_string(),
                suggestions: engine.suggest_in(name, 5, scope),
            },
        }
    }

    /// `call_tool` for library users: validates `{name, arguments}` and runs `executor` on the
    /// resolved tool with the validated arguments.
    pub fn call_tool<'a, F>(
        &self,
        caller: impl Into<Caller<'a>>,
        arguments: Value,
        engine: &SearchEngine,
        executor: F,
    ) -> Result<Value>
    where
        F: FnOnce(&Tool, Value) -> Value,
    {
        let caller = caller.into();
        let args: CallToolArgs = parse_arguments(CALL_TOOL, arguments)?;
        let inner = args.arguments.map_or(Value::Null, Value::Object);
        let (tool, arguments) = self.prepare_call_in(&args.name, inner, engine, caller.scope)?;
        tracing::debug!(session = caller.session, tool = %tool.id(), "call_tool");
        Ok(executor(&tool, arguments))
    }

    fn search_options(&self, scope: &Scope, schemas: bool, default_limit: usize) -> SearchOptions {
        SearchOptions {
            schemas,
            default_limit,
            top_band: Some(self.config.top_band),
            scope: scope.clone(),
            ..SearchOptions::default()
        }
    }

    /// Runs a search through the contract; marks tools whose server is down and names the
    /// servers that are not ready.
    fn run_search(
        &self,
        args: &SearchArgs,
        options: &SearchOptions,
        engine: &SearchEngine,
    ) -> Result<SearchResults> {
        let mut results = contract::search(engine, args, options)?;
        if let Some(status) = &self.status {
            contract::note_server_status(&mut results, status.as_ref(), engine, &options.scope);
        }
        Ok(results)
    }

    fn mark_unavailable(&self, tools: &mut [contract::ToolMatch]) {
        if let Some(status) = &self.status {
            contract::mark_unavailable(tools, status.as_ref());
        }
    }

    fn tool_search(
        &self,
        caller: Caller<'_>,
        args: ToolSearchArgs,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let limit = self.config.tool_search_limit;
        let search = SearchArgs {
            limit: Some(limit),
            ..SearchArgs::new(args.query)
        };
        let results = self.run_search(
            &search,
            &self.search_options(caller.scope, true, limit),
            engine,
        )?;
        let ids = tool_ids(&results, engine);
        let loaded = self.reveal(caller, ids, engine);
        Ok(MetaOutcome {
            visible_changed: !loaded.is_empty(),
            result: to_json(&Revealed { results, loaded }),
        })
    }

    /// Reveals `ids` for a session; returns the public names that became visible in full.
    fn reveal(&self, caller: Caller<'_>, ids: Vec<ToolId>, engine: &SearchEngine) -> Vec<String> {
        let active = self.is_active_in(engine, caller.scope);
        let catalog = engine.catalog();
        // Tools already visible in full need no reveal; revealing them would only churn the list.
        let wanted: Vec<ToolId> = ids
            .into_iter()
            .filter(|id| {
                catalog.get(id).is_some_and(|t| {
                    self.is_deferred(t, active) && caller.scope.allows_tool(t, engine.naming())
                })
            })
            .collect();
        let max = self.config.max_reveals_per_session;
        let mut state = self.lock();
        let session: &mut Session = state.sessions.get_or_create(caller.session);
        session
            .reveal(wanted, max)
            .into_iter()
            .map(|id| engine.naming().public_name(&id))
            .collect()
    }

    fn search_tools(
        &self,
        scope: &Scope,
        args: &SearchArgs,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let schemas = self.config.preset != Preset::Add;
        let mut results = self.run_search(
            args,
            &self.search_options(scope, schemas, contract::DEFAULT_LIMIT),
            engine,
        )?;
        if !schemas && !results.page.tools.is_empty() {
            results.message = Some(format!("Call {ADD_TOOL} with the names you need."));
        }
        Ok(unchanged(to_json(&results)))
    }

    fn add_tool(
        &self,
        caller: Caller<'_>,
        args: AddToolArgs,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let mut ids = Vec::new();
        // All names are checked before any is revealed: a typo must not half-apply the call.
        for name in args.names {
            crate::catalog::check_name_length(&name, "tool")?;
            match engine.resolve_in(&name, caller.scope) {
                Some(tool) => ids.push(tool.id()),
                None => return Err(self.unresolved(&name, engine, caller.scope)),
            }
        }
        let requested: Vec<String> = ids
            .iter()
            .map(|id| engine.naming().public_name(id))
            .collect();
        let added = self.reveal(caller, ids, engine);
        let already_available: Vec<String> = requested
            .into_iter()
            .filter(|n| !added.contains(n))
            .collect();
        Ok(MetaOutcome {
            visible_changed: !added.is_empty(),
            result: to_json(&Added {
                added,
                already_available,
            }),
        })
    }

    fn show_all_tools(
        &self,
        scope: &Scope,
        args: &ShowAllArgs,
        engine: &SearchEngine,
    ) -> MetaOutcome {
        let mut names: Vec<String> = engine
            .catalog()
            .tools()
            .filter(|t| scope.allows_tool(t, engine.naming()))
            .map(|t| engine.naming().tool_name(t))
            .collect();
        names.sort();
        let offset = args.offset.unwrap_or(0);
        let limit = args.limit.unwrap_or(200).clamp(1, MAX_NAMES_PAGE);
        let total = names.len();
        let page: Vec<String> = names.into_iter().skip(offset).take(limit).collect();
        let end = offset.saturating_add(page.len());
        unchanged(to_json(&NamesPage {
            total,
            offset,
            names: page,
            next_offset: (end < total).then_some(end),
        }))
    }

    fn search_available_tools(
        &self,
        caller: Caller<'_>,
        args: &SearchArgs,
        engine: &SearchEngine,
    ) -> Result<MetaOutcome> {
        let limit = self.config.max_tools_limit.min(contract::MAX_LIMIT);
        let results = self.run_search(
            args,
            &self.search_options(caller.scope, false, limit),
            engine,
        )?;
        let ids = tool_ids(&results, engine);
        let result = to_json(&results);
        // A search that finds nothing keeps the current tools: an empty set would strand the model.
        if ids.is_empty() {
            return Ok(unchanged(result));
        }
        let mut state = self.lock();
        let session = state.sessions.get_or_create(caller.session);
        let changed = session.limit_set.as_ref() != Some(&ids);
        session.limit_set = Some(ids);
        Ok(MetaOutcome {
            result,
            visible_changed: changed,
        })
    }

    /// Anthropic's native deferral: every catalog tool, with full schemas, deferred ones marked
    /// [`Exposure::Deferred`] (sent with `defer_loading: true`), after one client-side
    /// `tool_search` tool that is never deferred. The list is the same for every session: the API
    /// loads tools from the `tool_reference` blocks the search returns.
    pub fn anthropic_native_tools(&self, engine: &SearchEngine) -> Vec<ExposedTool> {
        let classified = self.classify(engine, &scope::ALL);
        let mut out = Vec::with_capacity(classified.len() + 1);
        if classified.iter().any(|(_, d)| *d) {
            let mut search = ExposedTool::served(&MetaTool::ToolSearch.decl(self.config.preset));
            search.description =
                "Find tools by keywords or exact name; matching tools become available to call."
                    .to_string();
            // The API reads tool_reference blocks, not JSON.
            search.output_schema = None;
            out.push(search);
        }
        for (tool, deferred) in &classified {
            let exposure = if *deferred {
                Exposure::Deferred
            } else {
                Exposure::Full
            };
            out.push(ExposedTool::catalog(tool, engine, exposure));
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
        let args: ToolSearchArgs = parse_arguments(TOOL_SEARCH, arguments)?;
        let deferred: HashSet<ToolId> = self
            .classify(engine, &scope::ALL)
            .into_iter()
            .filter(|(_, d)| *d)
            .map(|(t, _)| t.id())
            .collect();
        let limit = self.config.tool_search_limit;
        // Only deferred tools may be referenced; the others are loaded already.
        let options = SearchOptions {
            visible: Some(deferred),
            ..self.search_options(&scope::ALL, false, limit)
        };
        let search = SearchArgs {
            limit: Some(limit),
            ..SearchArgs::new(args.query)
        };
        Ok(contract::search(engine, &search, &options)?
            .page
            .tools
            .into_iter()
            .map(|t| t.name)
            .collect())
    }
}

/// The ids of the tools a search returned.
fn tool_ids(results: &SearchResults, engine: &SearchEngine) -> Vec<ToolId> {
    results
        .page
        .tools
        .iter()
        .map(|t| engine.naming().parse(&t.name))
        .collect()
}

fn unchanged(result: Value) -> MetaOutcome {
    MetaOutcome {
        result,
        visible_changed: false,
    }
}

/// A result as JSON. The contract's types hold only strings, numbers, lists and maps, so writing
/// them cannot fail; `null` would stand in if it ever did.
fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
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

/// An error as a JSON tool result for the model: the message, plus the did-you-mean names or the
/// schema when the error has them.
pub fn error_result(error: &Error) -> Value {
    let mut result = json!({"error": error.to_string()});
    match error {
        Error::UnknownTool { suggestions, .. } if !suggestions.is_empty() => {
            result["didYouMean"] = json!(suggestions);
        }
        Error::InvalidArguments { schema, .. } | Error::MetaArguments { schema, .. } => {
            result["schema"] = schema.clone();
        }
        _ => {}
    }
    result
}
