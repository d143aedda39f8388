//! The tools the gateway serves itself beside the meta-tools, in one table: the large-output
//! tools and the prompt search, each declared once and registered with the disclosure, which
//! checks a call's arguments against that declaration before it dispatches the call here. Also
//! what happens to an upstream tool's answer on its way back: a large one is stored, and the
//! model gets a handle to read it by.

use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, ProgressToken};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolsearch_core::disclosure::{error_result, Caller, Disclosure, Dispatch, CALL_TOOL};
use toolsearch_core::{parse_arguments, Preset, Scope, SearchEngine, ServedId, Tool};

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::metrics::Face;
use crate::observe::Observer;
use crate::offload::{OffloadError, OffloadStore, OffloadTool};
use crate::passthrough::{upstream_list, Passthrough};
use crate::prompt_search::{self, GetPromptArgs, PromptIndex, PromptTool, SearchPromptsArgs};
use crate::relay::CallOrigin;
use crate::resources;
use crate::rest::SharedEngine;
use crate::session::{SessionRef, Sessions};
use crate::shared::NoticeKind;
use crate::upstream::supervisor::UpstreamManager;

/// What runs a tool the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServedTool {
    Offload(OffloadTool),
    Prompt(PromptTool),
}

impl ServedTool {
    fn name(self) -> &'static str {
        match self {
            ServedTool::Offload(tool) => tool.name(),
            ServedTool::Prompt(tool) => tool.name(),
        }
    }
}

/// The gateway's served tools, by the id the disclosure gave each, and what they work on.
pub(crate) struct ServedTools {
    table: Vec<(ServedId, ServedTool)>,
    /// Large outputs stored per session; `None` when `toolSearch.offload.enabled` is off.
    offload: Option<Arc<OffloadStore>>,
    /// The upstreams' prompts and resource templates, for `search_prompts`.
    prompt_index: Arc<PromptIndex>,
    upstreams: UpstreamManager,
    call_timeout: Duration,
}

impl ServedTools {
    /// Registers the tools the config turns on with `disclosure`, which lists them after the
    /// meta-tools in every session and dispatches their calls by id.
    pub fn register(
        disclosure: &mut Disclosure,
        config: &GatewayConfig,
        upstreams: UpstreamManager,
    ) -> Self {
        let mut table = Vec::new();
        let offload = &config.tool_search.offload;
        if offload.enabled {
            for tool in OffloadTool::ALL {
                table.push((
                    disclosure.serve(tool.decl(offload)),
                    ServedTool::Offload(tool),
                ));
            }
        }
        if config.tool_search.search_prompts {
            for tool in PromptTool::ALL {
                table.push((disclosure.serve(tool.decl()), ServedTool::Prompt(tool)));
            }
        }
        Self {
            table,
            offload: offload
                .enabled
                .then(|| Arc::new(OffloadStore::new(offload.clone()))),
            prompt_index: Arc::new(PromptIndex::default()),
            upstreams,
            call_timeout: config.tool_search.call_timeout(),
        }
    }

    /// Whether `name` is one of these tools.
    pub fn serves(&self, name: &str) -> bool {
        self.table.iter().any(|(_, tool)| tool.name() == name)
    }

    fn get(&self, id: ServedId) -> Option<ServedTool> {
        self.table
            .iter()
            .find(|(served, _)| *served == id)
            .map(|(_, tool)| *tool)
    }

    /// The large-output store, when offloading is on.
    pub fn offload(&self) -> Option<&Arc<OffloadStore>> {
        self.offload.as_ref()
    }

    /// An upstream (re)started or changed its prompts or resources: the prompt index is rebuilt
    /// on the next search.
    pub fn prompts_changed(&self) {
        self.prompt_index.mark_stale();
    }

    /// How many prompts `server` offers, as last indexed (the index is brought up to date
    /// first); `None` when it offers none or was not ready.
    pub async fn prompt_count(&self, server: &str) -> Option<usize> {
        self.refresh_prompt_index().await;
        self.prompt_index.prompt_count(server)
    }

    /// Runs the served tool `id` for a session, with arguments the disclosure checked against
    /// its declaration. Large outputs are kept under `shelf`.
    pub async fn call(
        &self,
        id: ServedId,
        session: &SessionRef,
        shelf: &str,
        context: Context<'_>,
        arguments: Value,
        cancel: CancellationToken,
    ) -> CallToolResult {
        match self.get(id) {
            Some(ServedTool::Prompt(tool)) => {
                self.call_prompt_tool(tool, session, context.passthrough, arguments)
                    .await
            }
            Some(ServedTool::Offload(tool)) => {
                self.call_offload(tool, shelf, context.sessions, arguments, cancel)
                    .await
            }
            None => refused("this tool is not served by this gateway".to_string()),
        }
    }

    /// Runs `search_prompts` or `get_prompt` in the session's scope.
    async fn call_prompt_tool(
        &self,
        tool: PromptTool,
        session: &SessionRef,
        passthrough: &Passthrough,
        arguments: Value,
    ) -> CallToolResult {
        match tool {
            PromptTool::Search => {
                let args: SearchPromptsArgs = match parse_arguments(tool.name(), arguments) {
                    Ok(args) => args,
                    Err(e) => return refused(e.to_string()),
                };
                self.refresh_prompt_index().await;
                let (index, scope) = (self.prompt_index.clone(), session.scope.clone());
                // A search is CPU work that grows with the query: on the blocking pool.
                let searched =
                    tokio::task::spawn_blocking(move || index.search(args, &scope)).await;
                match searched {
                    Ok(Ok(results)) => match serde_json::to_value(results) {
                        Ok(value) => json_result(value, false),
                        Err(e) => refused(format!("cannot write the results: {e}")),
                    },
                    Ok(Err(e)) => refused(e.to_string()),
                    Err(e) => refused(format!(
                        "the prompt search failed inside the gateway ({e}); try again, and report it if it repeats"
                    )),
                }
            }
            PromptTool::Get => {
                let args: GetPromptArgs = match parse_arguments(tool.name(), arguments) {
                    Ok(args) => args,
                    Err(e) => return refused(e.to_string()),
                };
                match passthrough
                    .get_prompt(session, &args.name, args.arguments)
                    .await
                {
                    Ok(prompt) => match serde_json::to_value(prompt) {
                        Ok(value) => json_result(value, false),
                        Err(e) => refused(format!("cannot write the prompt: {e}")),
                    },
                    Err(e) => refused(e.to_string()),
                }
            }
        }
    }

    /// Rebuilds the prompt index when an upstream changed since it was built: every ready
    /// upstream's prompts and resource templates.
    async fn refresh_prompt_index(&self) {
        if !self.prompt_index.needs_rebuild() {
            return;
        }
        self.prompt_index.begin_rebuild();
        let mut servers = Vec::new();
        for server in self.upstreams.servers() {
            let Ok(peer) = self.upstreams.ready_peer(&server) else {
                continue;
            };
            let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
            let mut entries = Vec::new();
            if capabilities.as_ref().is_some_and(|c| c.prompts.is_some()) {
                let listed =
                    tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_prompts())
                        .await;
                for prompt in upstream_list(&server, "prompts/list", listed).unwrap_or_default() {
                    entries.push(prompt_search::prompt_as_tool(&server, &prompt));
                }
            }
            if capabilities.as_ref().is_some_and(|c| c.resources.is_some()) {
                let listed = tokio::time::timeout(
                    self.upstreams.call_timeout(),
                    peer.list_all_resource_templates(),
                )
                .await;
                for template in
                    upstream_list(&server, "resources/templates/list", listed).unwrap_or_default()
                {
                    entries.push(prompt_search::template_as_tool(&server, &template));
                }
            }
            servers.push((server, entries));
        }
        self.prompt_index.rebuild(servers);
    }

    /// Runs one of the large-output tools. A cancelled call is dropped, and a running jq worker
    /// with it.
    async fn call_offload(
        &self,
        tool: OffloadTool,
        shelf: &str,
        sessions: &Sessions,
        arguments: Value,
        cancel: CancellationToken,
    ) -> CallToolResult {
        let Some(store) = &self.offload else {
            return refused("this tool is not served by this gateway".to_string());
        };
        if let Err(e) = sessions.adopt_output(store, shelf, &arguments).await {
            return refused(e.to_string());
        }
        let call = store.call(shelf, tool, arguments, self.call_timeout);
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = cancel.cancelled() => Err(OffloadError::Cancelled { tool: tool.name() }),
        };
        match outcome {
            Ok(value) => json_result(value, false),
            Err(e) => {
                tracing::debug!(tool = tool.name(), error = %e, "large-output call refused");
                refused(e.to_string())
            }
        }
    }

    /// An upstream tool's answer on its way to the model: stored under `shelf` and replaced by
    /// a notice with its handle when it is large (and offloading is on), else unchanged.
    pub async fn keep_large(
        &self,
        shelf: &str,
        tool: &str,
        result: CallToolResult,
        sessions: &Sessions,
    ) -> CallToolResult {
        let Some(store) = self.offload.clone() else {
            return result;
        };
        if !store.would_offload(&result) {
            return result;
        }
        // Storing counts the characters of what may be megabytes, and outlines it when it is
        // JSON: on the blocking pool.
        let (key, name) = (shelf.to_string(), tool.to_string());
        let stored =
            tokio::task::spawn_blocking(move || store.offload_result_keeping(&key, &name, result))
                .await;
        match stored {
            Ok((result, stored)) => {
                if let Some(output) = stored {
                    sessions.share_output(shelf, &output).await;
                }
                result
            }
            Err(_) => {
                tracing::error!(tool, "storing a large output failed");
                error_text(&GatewayError::Downstream(format!(
                    "the large output of `{tool}` could not be stored; call the tool again, and report it if it repeats"
                )))
            }
        }
    }

    /// What a session's instructions say of these tools (empty when none applies).
    pub fn guidance(&self) -> Option<String> {
        self.table
            .iter()
            .any(|(_, tool)| matches!(tool, ServedTool::Prompt(_)))
            .then(prompt_search::guidance)
    }
}

/// `tools/call` for every session: meta-tools through the core's disclosure, the served tools
/// above, and catalog tools forwarded to their upstream.
pub(crate) struct ToolCalls {
    pub disclosure: Arc<Disclosure>,
    pub engine: SharedEngine,
    pub upstreams: UpstreamManager,
    pub observer: Arc<Observer>,
    pub sessions: Arc<Sessions>,
    pub passthrough: Arc<Passthrough>,
    pub served: ServedTools,
    pub call_timeout: Duration,
}

impl ToolCalls {
    fn read_engine(&self) -> RwLockReadGuard<'_, SearchEngine> {
        // Every engine update is one replace_server; a panic mid-way leaves the previous index.
        self.engine.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a tools/call for a session, in its scope: a meta-tool, a served tool, or anything
    /// else on its upstream. Errors the model can act on come back as results with `isError`; a
    /// tool outside the scope is an unknown tool.
    pub async fn call(
        self: &Arc<Self>,
        session: &str,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress_token: Option<ProgressToken>,
    ) -> CallToolResult {
        let caller = self.sessions.get(session);
        let started = std::time::Instant::now();
        let (key, kept) = self.sessions.reveal_key(session);
        if kept {
            if let Err(e) = self.sessions.load_reveals(&key, &self.disclosure).await {
                tracing::warn!(session, tool = name, error = %e, "call refused");
                return error_text(&GatewayError::SharedState(Box::new(e)));
            }
        }
        let before = kept
            .then(|| self.sessions.reveals_before(&key, &self.disclosure))
            .flatten();
        let dispatch = match self.dispatch(&caller, &key, name, arguments).await {
            Ok(dispatch) => dispatch,
            Err(refusal) => return refusal,
        };
        if let Err(e) = self
            .sessions
            .save_reveals_if_changed(&key, before, &self.disclosure)
            .await
        {
            tracing::warn!(session, tool = name, error = %e, "reveals not shared");
            return error_text(&GatewayError::SharedState(Box::new(e)));
        }
        match dispatch {
            Err(e) => {
                tracing::debug!(session, tool = name, error = %e, "call refused");
                json_result(error_result(&e), true)
            }
            Ok(Dispatch::Meta(outcome)) => {
                self.observer.search_result(
                    Face::Mcp,
                    Some(session),
                    &outcome.result,
                    started.elapsed(),
                );
                if outcome.visible_changed {
                    self.sessions.tools_changed(session).await;
                    self.publish_tools_changed(&key).await;
                }
                json_result(outcome.result, false)
            }
            Ok(Dispatch::Served { id, arguments }) => {
                let shelf = self.sessions.state_key(session);
                let context = crate::tools::Context {
                    sessions: &self.sessions,
                    passthrough: &self.passthrough,
                };
                self.served
                    .call(id, &caller, &shelf, context, arguments, cancel)
                    .await
            }
            Ok(Dispatch::Call { tool, arguments }) => {
                let origin = CallOrigin::new(session, progress_token);
                self.forward(&tool, arguments, cancel, &origin).await
            }
        }
    }

    /// What the disclosure makes of a call: a meta-tool's outcome, or where the call goes. A
    /// meta-tool searches (and in hybrid mode embeds the query), an unknown name is matched
    /// against the catalog for a did-you-mean, and arguments are checked against a schema: CPU
    /// work that grows with the catalog or with what the client sent, and must not hold an async
    /// worker, which the other sessions' I/O needs. Only a call whose tool resolves at once, with
    /// small arguments, is dispatched inline. `Err` is a refusal to answer as it is.
    async fn dispatch(
        self: &Arc<Self>,
        caller: &SessionRef,
        key: &str,
        name: &str,
        arguments: Value,
    ) -> std::result::Result<toolsearch_core::Result<Dispatch>, CallToolResult> {
        let searches = self.disclosure.is_meta_tool(name) && name != CALL_TOOL;
        if !searches && self.dispatch_is_cheap(name, &arguments, &caller.scope) {
            let engine = self.read_engine();
            return Ok(self.disclosure.dispatch(
                Caller::new(key, &caller.scope),
                name,
                arguments,
                &engine,
            ));
        }
        let calls = self.clone();
        let (key, scope, tool) = (key.to_string(), caller.scope.clone(), name.to_string());
        let dispatched = tokio::task::spawn_blocking(move || {
            let engine = calls.read_engine();
            calls
                .disclosure
                .dispatch(Caller::new(&key, &scope), &tool, arguments, &engine)
        })
        .await;
        dispatched.map_err(|e| {
            tracing::error!(session = %caller.id, tool = name, error = %e, "a meta-tool's task failed");
            error_text(&GatewayError::Downstream(format!(
                "`{name}` failed inside the gateway ({e}); try the call again, and report it if it repeats"
            )))
        })
    }

    /// A catalog tool's call, on its upstream, with checked arguments: timed, counted, its
    /// resource URIs made gateway URIs, and a large answer stored for the session.
    async fn forward(
        &self,
        tool: &Tool,
        arguments: Value,
        cancel: CancellationToken,
        origin: &CallOrigin,
    ) -> CallToolResult {
        let session = origin.session.as_str();
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let public = self.read_engine().naming().tool_name(tool);
        self.observer.called(session, &public);
        let started = std::time::Instant::now();
        let outcome = self
            .upstreams
            .call_with_timeout(
                tool.server(),
                tool.name(),
                arguments,
                cancel,
                self.call_timeout,
                Some(origin),
            )
            .await
            .map(|mut result| {
                resources::rewrite_call_result(&mut result, tool.server());
                result
            });
        let failed = outcome
            .as_ref()
            .map_or(true, |result| result.is_error == Some(true));
        self.observer
            .metrics()
            .call(tool.server(), started.elapsed().as_secs_f64(), failed);
        match outcome {
            Ok(result) => {
                let shelf = self.sessions.state_key(session);
                self.served
                    .keep_large(&shelf, &public, result, &self.sessions)
                    .await
            }
            Err(e) => {
                tracing::warn!(session, server = %tool.server(), tool = %tool.name(), error = %e, "call failed");
                error_text(&e)
            }
        }
    }

    /// Whether dispatching a call to `name` is cheap whatever the client sent: the tool it runs
    /// (or the one `call_tool` names) is served here or resolves in `scope`, and its arguments
    /// are small. Anything else is dispatched on the blocking pool.
    fn dispatch_is_cheap(&self, name: &str, arguments: &Value, scope: &Scope) -> bool {
        // `call_tool` unpacks only where the preset serves it; elsewhere it is just a name.
        let (target, arguments) = if name == CALL_TOOL && self.disclosure.is_meta_tool(CALL_TOOL) {
            match arguments.get("name").and_then(Value::as_str) {
                Some(target) => (target, arguments.get("arguments")),
                None => return false,
            }
        } else {
            (name, Some(arguments))
        };
        if target.len() > toolsearch_core::MAX_NAME_CHARS
            || !arguments.is_none_or(|a| json_within(a, INLINE_ARGUMENT_BYTES))
        {
            return false;
        }
        self.served.serves(target) || self.read_engine().resolve_in(target, scope).is_some()
    }

    /// Tells the other replicas that a session's tool list changed: the client's stream may be
    /// held by any of them.
    async fn publish_tools_changed(&self, key: &str) {
        if self.disclosure.preset() != Preset::Search {
            self.sessions.tell(key, NoticeKind::ToolsChanged).await;
        }
    }
}

/// What a served tool may need of the rest of the gateway.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub sessions: &'a Sessions,
    pub passthrough: &'a Passthrough,
}

/// A refusal the model can act on, as a tool result with `isError`.
fn refused(message: String) -> CallToolResult {
    json_result(serde_json::json!({ "error": message }), true)
}

/// A JSON value as a tool result: compact text (what models read) plus the same structure.
pub(crate) fn json_result(value: Value, is_error: bool) -> CallToolResult {
    let text = value.to_string();
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(value);
    result
}

/// A gateway error as a tool result with `isError`.
pub(crate) fn error_text(error: &GatewayError) -> CallToolResult {
    json_result(serde_json::json!({ "error": error.to_string() }), true)
}

/// Arguments up to about this many bytes of JSON are checked against a tool's schema inline.
pub(crate) const INLINE_ARGUMENT_BYTES: usize = 64 << 10;

/// Whether `value` takes about `budget` bytes of JSON or fewer (strings and keys by their
/// length, every other value as a few bytes); walks no more of it than that.
pub(crate) fn json_within(value: &Value, budget: usize) -> bool {
    let mut left = budget;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        // Containers are charged a byte per member before any member is looked at.
        let size = match value {
            Value::String(text) => text.len() + 2,
            Value::Array(items) => items.len() + 2,
            Value::Object(map) => 3 * map.len() + 2,
            _ => 8,
        };
        left = match left.checked_sub(size) {
            Some(left) => left,
            None => return false,
        };
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    left = match left.checked_sub(key.len()) {
                        Some(left) => left,
                        None => return false,
                    };
                    pending.push(item);
                }
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_within_counts_strings_keys_and_values() {
        assert!(json_within(&serde_json::json!({"city": "Oslo"}), 64));
        assert!(!json_within(&serde_json::json!({"x": "a".repeat(100)}), 64));
        assert!(!json_within(&serde_json::json!([[["a".repeat(100)]]]), 64));
        let wide: Vec<Value> = (0..100).map(Value::from).collect();
        assert!(!json_within(&Value::Array(wide), 64));
    }

    #[tokio::test]
    async fn the_served_tools_are_one_table_the_disclosure_dispatches_by_id() {
        use std::sync::RwLock;
        use toolsearch_core::Scope;

        let config = GatewayConfig::parse("", crate::config::Format::Toml, "gateway.toml").unwrap();
        let upstreams =
            UpstreamManager::start(&config, crate::upstream::sign_in::SignIns::for_user());
        let mut disclosure = Disclosure::new(config.disclosure_config()).unwrap();
        let served = ServedTools::register(&mut disclosure, &config, upstreams.clone());
        for name in [
            "read_large_output",
            "search_large_output",
            "query_large_output",
            "search_prompts",
            "get_prompt",
        ] {
            assert!(served.serves(name), "{name}");
        }
        assert!(!served.serves("search_tools"), "meta-tools are the core's");

        let engine = SearchEngine::from_tools(Vec::new()).unwrap();
        let sessions = Arc::new(Sessions::new(Arc::new(crate::shared::InProcess::default())));
        let passthrough = Passthrough::new(&upstreams, &Arc::new(RwLock::new(engine)), &sessions);
        let session = SessionRef {
            id: "s1".into(),
            scope: Arc::new(Scope::all()),
        };
        let context = Context {
            sessions: &sessions,
            passthrough: &passthrough,
        };
        let engine = SearchEngine::from_tools(Vec::new()).unwrap();
        let dispatched = disclosure
            .dispatch(
                "s1",
                "read_large_output",
                serde_json::json!({"handle": "out-9"}),
                &engine,
            )
            .unwrap();
        let Dispatch::Served { id, arguments } = dispatched else {
            panic!("the large-output tool is served here: {dispatched:?}");
        };
        let result = served
            .call(
                id,
                &session,
                "s1",
                context,
                arguments,
                CancellationToken::new(),
            )
            .await;
        assert_eq!(result.is_error, Some(true));
        let error = result.structured_content.unwrap()["error"].to_string();
        assert!(error.contains("out-9"), "names the unknown handle: {error}");

        // Arguments that do not fit never reach the table: the core refuses them.
        let refused = disclosure.dispatch("s1", "search_prompts", serde_json::json!({}), &engine);
        assert!(refused.is_err(), "{refused:?}");
    }
}
