//! Search over what is not a tool: the upstreams' prompts and resource templates, found by a
//! request in words ("the prompt that writes release notes") the way tools are.
//!
//! They are served as a sibling of the search meta-tool, `search_prompts`, with `get_prompt` to
//! render what it found, rather than as a `kind` filter on `search_tools`: every result of
//! `search_tools` is a tool that `call_tool` runs, and a prompt is not callable. Both answer in
//! the search contract's shape. A model that never needs a prompt pays for two short
//! definitions; `toolSearch.searchPrompts = false` removes them.
//!
//! The index is a second [`SearchEngine`] of the core (one model of a tool: a prompt becomes a
//! tool whose parameters are its arguments, tagged `prompt`; a template one whose parameters are
//! its URI variables, tagged `resource_template`). It is rebuilt from the upstreams on the first
//! search after one of them listed, restarted or said its prompts or resources changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use toolsearch_core::contract::{self, SearchArgs, SearchOptions, SearchResults};
use toolsearch_core::{
    Fallback, Scope, SearchConfig, SearchEngine, SearchMode, Tool, ToolDecl, ToolSchema,
};

/// The two served tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptTool {
    Search,
    Get,
}

/// Results per page of `search_prompts` when the call gives no `limit`.
pub const DEFAULT_PROMPT_LIMIT: usize = 5;
/// Largest page of `search_prompts`.
pub const MAX_PROMPT_LIMIT: usize = 20;

/// Arguments of `search_prompts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchPromptsArgs {
    /// What it should do.
    pub query: String,
    /// Results, 1-20 (default 5).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Skip this many (the previous page's nextOffset).
    #[serde(default)]
    pub offset: Option<usize>,
}

/// Arguments of `get_prompt`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetPromptArgs {
    /// As search_prompts gave it.
    pub name: String,
    /// String values.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
}

const PROMPT_TAG: &str = "prompt";
const TEMPLATE_TAG: &str = "resource_template";

impl PromptTool {
    pub const ALL: [PromptTool; 2] = [PromptTool::Search, PromptTool::Get];

    pub fn name(self) -> &'static str {
        match self {
            PromptTool::Search => "search_prompts",
            PromptTool::Get => "get_prompt",
        }
    }

    /// The tool's declaration, served through the disclosure beside the meta-tools.
    pub fn decl(self) -> ToolDecl {
        match self {
            PromptTool::Search => ToolDecl::new::<SearchPromptsArgs>(
                self.name(),
                "Find the servers' prompts (ready-made instructions) and resource templates by what they do.",
            )
            .returns::<SearchResults>(),
            PromptTool::Get => ToolDecl::new::<GetPromptArgs>(
                self.name(),
                "Get a prompt's messages, its arguments filled in.",
            ),
        }
        .annotated(json!({"readOnlyHint": true, "openWorldHint": false}))
        .on_demand()
    }
}

/// What a session's instructions say of the prompt tools, which a list with `call_tool` does not
/// carry.
pub fn guidance() -> String {
    format!(
        "The servers' prompts (ready-made instructions): `{}` {{\"query\"}} finds them, `{}` {{\"name\", \"arguments\"}} fetches one; through `call_tool` when they are not in your tool list.",
        PromptTool::Search.name(),
        PromptTool::Get.name(),
    )
}

/// A prompt as the index's tool: its arguments as string parameters.
pub fn prompt_as_tool(server: &str, prompt: &rmcp::model::Prompt) -> Tool {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for argument in prompt.arguments.iter().flatten() {
        let mut property = json!({"type": "string"});
        if let Some(description) = &argument.description {
            property["description"] = json!(description);
        }
        properties.insert(argument.name.clone(), property);
        if argument.required == Some(true) {
            required.push(json!(argument.name));
        }
    }
    let description = prompt
        .description
        .clone()
        .or_else(|| prompt.title.clone())
        .unwrap_or_default();
    let mut tool = Tool::new(prompt.name.clone(), description);
    tool.set_server(server);
    tool.set_input_schema(schema(properties, required));
    tool.set_tags(vec![PROMPT_TAG.to_string()]);
    tool
}

/// A resource template as the index's tool: its URI variables as parameters; named by its gateway
/// URI template.
pub fn template_as_tool(server: &str, template: &rmcp::model::ResourceTemplate) -> Tool {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for variable in template_variables(&template.uri_template) {
        properties.insert(variable.clone(), json!({"type": "string"}));
        required.push(json!(variable));
    }
    let mut description = template.name.clone();
    if let Some(more) = template.description.as_ref().or(template.title.as_ref()) {
        description = format!("{description}: {more}");
    }
    let mut tool = Tool::new(template.uri_template.clone(), description);
    tool.set_server(server);
    tool.set_input_schema(schema(properties, required));
    tool.set_tags(vec![TEMPLATE_TAG.to_string()]);
    tool
}

fn schema(properties: Map<String, Value>, required: Vec<Value>) -> ToolSchema {
    ToolSchema::from(json!({"type": "object", "properties": properties, "required": required}))
}

/// The variable names of an RFC 6570 template (`{id}`, `{+path}`, `{?q,lang}`).
fn template_variables(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let inner =
            rest[open + 1..open + close].trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for name in inner.split(',') {
            let name = name.trim_end_matches('*');
            let name = name.split(':').next().unwrap_or(name);
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        rest = &rest[open + close + 1..];
    }
    names
}

/// The prompts and templates of every upstream, indexed; rebuilt when marked stale.
#[derive(Debug, Default)]
pub struct PromptIndex {
    engine: Mutex<Option<SearchEngine>>,
    stale: AtomicBool,
}

impl PromptIndex {
    /// The index no longer matches the upstreams: the next search rebuilds it.
    pub fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// Whether the next search must rebuild the index first.
    pub fn needs_rebuild(&self) -> bool {
        self.stale.load(Ordering::Acquire)
            || self
                .engine
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
    }

    /// Replaces the index with `servers`' prompts and templates (as tools).
    pub fn rebuild(&self, servers: Vec<(String, Vec<Tool>)>) {
        // Cleared before listing: a change that arrives while the lists are read marks it again.
        let mut engine = match SearchEngine::new(SearchConfig::default()) {
            Ok(engine) => engine,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the prompt index");
                return;
            }
        };
        let mut count = 0;
        for (server, tools) in servers {
            count += tools.len();
            if tools.is_empty() {
                continue;
            }
            if let Err(e) = engine.replace_server(&server, tools) {
                tracing::warn!(server, error = %e, "prompts and templates of this server left out of their index");
            }
        }
        tracing::debug!(entries = count, "prompt index rebuilt");
        *self.engine.lock().unwrap_or_else(|e| e.into_inner()) = Some(engine);
    }

    /// Clears the stale mark; call before reading the upstreams for [`rebuild`](Self::rebuild).
    pub fn begin_rebuild(&self) {
        self.stale.store(false, Ordering::Release);
    }

    /// How many prompts of `server` the index holds; `None` before it is built or when the
    /// server has none.
    pub fn prompt_count(&self, server: &str) -> Option<usize> {
        let guard = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let count = guard
            .as_ref()?
            .catalog()
            .tools()
            .filter(|t| t.server() == server && t.tags().iter().any(|tag| tag == PROMPT_TAG))
            .count();
        (count > 0).then_some(count)
    }

    /// The best matches for `query` within `scope`, in the search contract's shape (the same
    /// as `search_tools` answers): each result tagged `prompt` or `resource_template`, its
    /// arguments or variables as its input schema, prompts named as `get_prompt` takes them and
    /// templates by their gateway URI template.
    pub fn search(
        &self,
        args: SearchPromptsArgs,
        scope: &Scope,
    ) -> Result<SearchResults, toolsearch_core::Error> {
        let guard = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let empty;
        let engine = match guard.as_ref() {
            Some(engine) => engine,
            None => {
                empty = SearchEngine::new(SearchConfig::default())?;
                &empty
            }
        };
        let request = SearchArgs {
            query: args.query,
            mode: Some(SearchMode::Keyword),
            limit: Some(
                args.limit
                    .unwrap_or(DEFAULT_PROMPT_LIMIT)
                    .clamp(1, MAX_PROMPT_LIMIT),
            ),
            offset: args.offset,
            ..SearchArgs::default()
        };
        let options = SearchOptions {
            default_limit: DEFAULT_PROMPT_LIMIT,
            // Every match counts: a prompt is not crowded out by a better one.
            top_band: None,
            scope: scope.clone(),
            ..SearchOptions::default()
        };
        let mut results = contract::search(engine, &request, &options)?;
        // A template is read by its gateway URI, not by a tool-like name.
        let public = |name: &mut String| {
            let naming = engine.naming();
            if let Some(tool) = engine.catalog().resolve(name, naming) {
                if tool.tags().iter().any(|t| t == TEMPLATE_TAG) {
                    *name = crate::resources::public_uri(tool.server(), tool.name());
                }
            }
        };
        for found in &mut results.page.tools {
            public(&mut found.name);
        }
        if let Some(Fallback::Names { names }) = &mut results.fallback {
            names.iter_mut().for_each(public);
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_variables_of_every_operator() {
        assert_eq!(
            template_variables("demo://resource/dynamic/text/{resourceId}"),
            ["resourceId"]
        );
        assert_eq!(
            template_variables("file:///{+path}{?q,lang}{#frag}"),
            ["path", "q", "lang", "frag"]
        );
        assert_eq!(
            template_variables("x://{a}/{a}/{b*}/{c:3}"),
            ["a", "b", "c"]
        );
        assert!(template_variables("x://plain").is_empty());
        assert!(template_variables("x://{unclosed").is_empty());
    }

    #[test]
    fn prompts_and_templates_are_found_by_what_they_do() {
        let prompt: rmcp::model::Prompt = serde_json::from_value(json!({
            "name": "release-notes",
            "description": "Write release notes from the merged pull requests",
            "arguments": [{"name": "version", "description": "The version to release", "required": true}]
        }))
        .unwrap();
        let other: rmcp::model::Prompt = serde_json::from_value(json!({
            "name": "greet", "description": "Say hello to a person"
        }))
        .unwrap();
        let template: rmcp::model::ResourceTemplate = serde_json::from_value(json!({
            "uriTemplate": "file:///logs/{day}", "name": "Daily logs", "description": "The server log of one day"
        }))
        .unwrap();
        let index = PromptIndex::default();
        assert!(index.needs_rebuild());
        index.begin_rebuild();
        index.rebuild(vec![(
            "repo".into(),
            vec![
                prompt_as_tool("repo", &prompt),
                prompt_as_tool("repo", &other),
                template_as_tool("repo", &template),
            ],
        )]);
        assert!(!index.needs_rebuild());

        let search = |query: &str, limit: usize, offset: usize, scope: &Scope| {
            let args = SearchPromptsArgs {
                query: query.into(),
                limit: Some(limit),
                offset: Some(offset),
            };
            index.search(args, scope).unwrap()
        };
        let found = search("write the release notes", 5, 0, &Scope::all());
        let first = &found.page.tools[0];
        assert_eq!(first.tags, ["prompt"]);
        assert_eq!(first.name, "repo___release-notes");
        let schema = first.input_schema.as_ref().unwrap();
        assert_eq!(
            schema["properties"]["version"]["description"],
            "The version to release"
        );
        assert_eq!(schema["required"], json!(["version"]));

        let found = search("server logs of a day", 5, 0, &Scope::all());
        let first = &found.page.tools[0];
        assert_eq!(first.tags, ["resource_template"]);
        assert_eq!(first.name, "toolsearch://repo/file:///logs/{day}");
        assert!(first.input_schema.as_ref().unwrap()["properties"]["day"].is_object());

        // Pages are counted as tool searches count theirs; scores have three decimals.
        let all = search("release notes logs", 5, 0, &Scope::all());
        assert!(all.page.total_matches >= 2, "{all:?}");
        let first = search("release notes logs", 1, 0, &Scope::all());
        assert_eq!((first.page.returned, first.page.next_offset), (1, Some(1)));
        assert_eq!(first.page.total_matches, all.page.total_matches);
        let second = search("release notes logs", 1, 1, &Scope::all());
        assert_eq!(second.page.offset, 1);
        assert_eq!(second.page.tools[0], all.page.tools[1]);
        for found in &all.page.tools {
            assert_eq!(found.score, (found.score * 1000.0).round() / 1000.0);
        }

        // Outside the caller's scope, nothing is found; before any rebuild, nothing either.
        assert!(search("release notes", 5, 0, &Scope::none())
            .page
            .tools
            .is_empty());
        let unbuilt = PromptIndex::default()
            .search(
                SearchPromptsArgs {
                    query: "release notes".into(),
                    limit: None,
                    offset: None,
                },
                &Scope::all(),
            )
            .unwrap();
        assert!(unbuilt.page.tools.is_empty());

        index.mark_stale();
        assert!(index.needs_rebuild());
    }
}
