//! What the model is sent: a preset's tool list in a provider's format, and its cost in bytes and
//! o200k tokens (counted with the tokenizer, not estimated), before and after a search, and the
//! `instructions` a new session's `initialize` carries. Used by `toolsearch bench tokens` and the
//! console's "what the model sees". Both count the list a new session's `tools/list` returns: the
//! preset's meta-tools and the tools the gateway serves itself that the list carries (the
//! large-output tools, `search_prompts` and `get_prompt`, only where there is no `call_tool`),
//! through a [`Surface`] with the gateway's disclosure settings; the instructions are made by [`instructions`], which the gateway answers with.

use std::str::FromStr;

use serde::Serialize;
use serde_json::{json, Value};
use tiktoken_rs::CoreBPE;
use toolsearch_core::disclosure::Caller;
use toolsearch_core::disclosure::ExposedTool;
use toolsearch_core::disclosure::ServedId;
use toolsearch_core::formats::{
    anthropic_tools, gemini_tools, mcp_tools_list, openai_chat_tools, openai_responses_tools,
};
use toolsearch_core::served::ToolDecl;
use toolsearch_core::{Disclosure, DisclosureConfig, Preset, Scope, SearchEngine};

use crate::config::GatewayConfig;
use crate::offload::OffloadTool;
use crate::prompt_search::PromptTool;

/// A provider's tool payload format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderFormat {
    OpenaiChat,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Mcp,
}

impl ProviderFormat {
    pub const ALL: [ProviderFormat; 5] = [
        ProviderFormat::OpenaiChat,
        ProviderFormat::OpenaiResponses,
        ProviderFormat::Anthropic,
        ProviderFormat::Gemini,
        ProviderFormat::Mcp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderFormat::OpenaiChat => "openai-chat",
            ProviderFormat::OpenaiResponses => "openai-responses",
            ProviderFormat::Anthropic => "anthropic",
            ProviderFormat::Gemini => "gemini",
            ProviderFormat::Mcp => "mcp",
        }
    }

    /// The tool list as this provider's request carries it.
    pub fn write(self, tools: &[ExposedTool]) -> Value {
        match self {
            ProviderFormat::OpenaiChat => openai_chat_tools(tools),
            ProviderFormat::OpenaiResponses => openai_responses_tools(tools),
            ProviderFormat::Anthropic => anthropic_tools(tools),
            ProviderFormat::Gemini => gemini_tools(tools),
            ProviderFormat::Mcp => mcp_tools_list(tools),
        }
    }
}

impl FromStr for ProviderFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ProviderFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = ProviderFormat::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown format `{s}`; use one of {}", known.join(", "))
            })
    }
}

/// Bytes and tokens of one payload (compact JSON: what an HTTP client sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Size {
    pub bytes: usize,
    pub tokens: usize,
}

/// What one preset costs: its first request, and the same once a query's results are in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PresetCost {
    pub preset: &'static str,
    pub bytes: usize,
    pub tokens: usize,
    /// The tool list after the query, plus the meta-tool results the model read.
    pub after_query_tokens: usize,
    /// The `instructions` of the same new session's `initialize` answer, which clients put
    /// before the model with the tools.
    pub instructions_tokens: usize,
    /// The whole first surface: the tool list and the instructions.
    pub surface_tokens: usize,
    /// The first request's tool payload itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// Counts the bytes and o200k tokens of payloads.
pub struct Counter {
    bpe: CoreBPE,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counter(o200k)")
    }
}

impl Counter {
    /// The o200k tokenizer (embedded in the binary; nothing is downloaded).
    pub fn o200k() -> Result<Self, String> {
        tiktoken_rs::o200k_base()
            .map(|bpe| Self { bpe })
            .map_err(|e| format!("cannot load the o200k tokenizer: {e}"))
    }

    /// The o200k tokens of plain text.
    pub fn tokens(&self, text: &str) -> usize {
        self.bpe.encode_with_special_tokens(text).len()
    }

    pub fn size(&self, value: &Value) -> Size {
        let text = value.to_string();
        Size {
            bytes: text.len(),
            tokens: self.bpe.encode_with_special_tokens(&text).len(),
        }
    }
}

const SESSION: &str = "payload";

/// What builds the tool list and instructions a new session receives: the disclosure settings
/// (threshold, category tools, limits), the tools served beside the meta-tools, in their order,
/// and what the served tools add to the instructions.
#[derive(Debug, Clone)]
pub struct Surface {
    config: DisclosureConfig,
    served: Vec<ToolDecl>,
    served_guidance: Option<String>,
}

impl Surface {
    /// The surface of a gateway started with `config` (what `Gateway::start` builds).
    pub fn of_config(config: &GatewayConfig) -> Self {
        Self {
            config: config.disclosure_config(),
            served: served_tools(config),
            served_guidance: config
                .tool_search
                .search_prompts
                .then(crate::prompt_search::guidance),
        }
    }

    /// The surface of a running gateway: its disclosure's settings and served tools, and what
    /// its served tools add to the instructions (`Gateway::served_guidance`).
    pub fn of_disclosure(disclosure: &Disclosure, served_guidance: Option<String>) -> Self {
        let served = (0..)
            .map_while(|i| disclosure.served_decl(ServedId(i)).cloned())
            .collect();
        Self {
            config: disclosure.config().clone(),
            served,
            served_guidance,
        }
    }

    /// A fresh disclosure with these settings in `preset`, serving the same tools.
    pub fn disclosure(&self, preset: Preset) -> Result<Disclosure, toolsearch_core::Error> {
        let mut disclosure = Disclosure::new(self.config.clone().preset(preset))?;
        for decl in &self.served {
            disclosure.serve(decl.clone());
        }
        Ok(disclosure)
    }
}

/// A session's `instructions`: the disclosure's guidance for what it sees, then what the served
/// tools add. The gateway answers `initialize` with it; the counts here use it too.
pub fn instructions(guidance: String, served_guidance: Option<&str>) -> String {
    let mut instructions = guidance;
    if let Some(served) = served_guidance {
        if !instructions.is_empty() {
            instructions.push_str("\n\n");
        }
        instructions.push_str(served);
    }
    instructions
}

/// The tools a gateway with `config` serves itself, in the order it serves them: the large-output
/// tools when offloading is on, then `search_prompts` and `get_prompt` when they are on.
pub fn served_tools(config: &GatewayConfig) -> Vec<ToolDecl> {
    let ts = &config.tool_search;
    let offload = ts
        .offload
        .enabled
        .then(|| OffloadTool::ALL.map(|tool| tool.decl(&ts.offload)))
        .into_iter()
        .flatten();
    let prompts = ts
        .search_prompts
        .then(|| PromptTool::ALL.map(PromptTool::decl))
        .into_iter()
        .flatten();
    offload.chain(prompts).collect()
}

/// Every tool with its full schema, in `format`, within `scope`.
pub fn full_cost(
    engine: &SearchEngine,
    format: ProviderFormat,
    scope: &Scope,
    counter: &Counter,
) -> Result<Size, toolsearch_core::Error> {
    let passthrough = Disclosure::new(DisclosureConfig::default().preset(Preset::Passthrough))?;
    let tools = passthrough.visible_tools(Caller::new(SESSION, scope), engine);
    Ok(counter.size(&format.write(&tools)))
}

/// What `preset` of `surface` sends first (a new session's `tools/list`), in `format`, and what
/// it costs once `query` has been searched the way a model would in that preset.
#[allow(clippy::too_many_arguments)]
pub fn preset_cost(
    engine: &SearchEngine,
    surface: &Surface,
    preset: Preset,
    format: ProviderFormat,
    query: &str,
    scope: &Scope,
    counter: &Counter,
    keep_payload: bool,
) -> Result<PresetCost, toolsearch_core::Error> {
    let disclosure = surface.disclosure(preset)?;
    let caller = || Caller::new(SESSION, scope);
    let first = format.write(&disclosure.visible_tools(caller(), engine));
    let first_size = counter.size(&first);
    let instructions = instructions(
        disclosure.guidance_in(engine, scope),
        surface.served_guidance.as_deref(),
    );
    let instructions_tokens = counter.tokens(&instructions);
    let read = apply_query(&disclosure, engine, query, scope)?;
    let after = counter.size(&format.write(&disclosure.visible_tools(caller(), engine)));
    Ok(PresetCost {
        preset: preset.as_str(),
        bytes: first_size.bytes,
        tokens: first_size.tokens,
        after_query_tokens: after.tokens
            + read.iter().map(|r| counter.size(r).tokens).sum::<usize>(),
        instructions_tokens,
        surface_tokens: first_size.tokens + instructions_tokens,
        payload: keep_payload.then_some(first),
    })
}

/// Runs `query` the way a model would in this preset and returns the meta-tool results it reads.
/// The session's tool list is changed as a side effect (reveals, the `limit` set).
fn apply_query(
    disclosure: &Disclosure,
    engine: &SearchEngine,
    query: &str,
    scope: &Scope,
) -> Result<Vec<Value>, toolsearch_core::Error> {
    let run = |tool: &str, args: Value| -> Result<Value, toolsearch_core::Error> {
        Ok(disclosure
            .handle(Caller::new(SESSION, scope), tool, args, engine)?
            .result)
    };
    Ok(match disclosure.preset() {
        Preset::Search => vec![run("search_tools", json!({ "query": query }))?],
        Preset::Progressive => vec![run("tool_search", json!({ "query": query }))?],
        Preset::Add => {
            let found = run("search_tools", json!({ "query": query, "limit": 5 }))?;
            let names: Vec<Value> = found["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["name"].clone())
                .collect();
            let mut read = vec![found];
            if !names.is_empty() {
                read.push(run("add_tool", json!({ "names": names }))?);
            }
            read
        }
        Preset::Limit => vec![run("search_available_tools", json!({ "query": query }))?],
        Preset::Passthrough => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolsearch_core::Tool;

    /// The default surface (the `search` list and its instructions, as `bench tokens` counts
    /// them) of a catalog past the threshold stays under 600 o200k tokens whatever the number of
    /// servers or categories.
    #[test]
    fn the_default_surface_stays_under_600_tokens_however_many_servers() {
        let counter = Counter::o200k().unwrap();
        let surface = Surface::of_config(&GatewayConfig::default());
        let name = |i: usize| format!("acme-internal-analytics-{i:04}-mcp");
        for servers in [2, 10, 40, 63, 400] {
            for with_categories in [false, true] {
                // Ten tools a server: past the default threshold (15) from two servers on.
                let tools = (0..servers * 10).map(|i| {
                    let tool =
                        Tool::new(format!("tool_{i}"), "Does one thing.").with_server(name(i / 10));
                    if with_categories {
                        tool.with_category(format!("{} tools", name(i / 10)))
                    } else {
                        tool
                    }
                });
                let engine = SearchEngine::from_tools(tools).unwrap();
                let cost = preset_cost(
                    &engine,
                    &surface,
                    Preset::Search,
                    ProviderFormat::OpenaiChat,
                    "create a new document",
                    &Scope::all(),
                    &counter,
                    false,
                )
                .unwrap();
                assert!(
                    cost.surface_tokens <= 600,
                    "{servers} servers, categories {with_categories}: {} tokens",
                    cost.surface_tokens
                );
            }
        }
    }

    /// `bench tokens` builds the surface from a config; it must be the one a gateway started with
    /// that config serves, whatever the served tools' switches say.
    #[tokio::test]
    async fn a_configs_surface_is_the_started_gateways() {
        for (offload, prompts) in [(true, true), (false, true), (true, false), (false, false)] {
            let mut config = GatewayConfig::default();
            config.tool_search.offload.enabled = offload;
            config.tool_search.search_prompts = prompts;
            config.tool_search.semantic.enabled = false;
            let gateway = crate::Gateway::start(config.clone()).unwrap();
            let running = Surface::of_disclosure(gateway.disclosure(), gateway.served_guidance());
            let built = Surface::of_config(&config);
            assert_eq!(
                running.served, built.served,
                "offload {offload}, prompts {prompts}"
            );
            assert_eq!(running.config, built.config);
            assert_eq!(running.served_guidance, built.served_guidance);
            // The instructions counted are those a new session gets.
            let session = gateway
                .sessions()
                .open_with_scope(std::sync::Arc::new(Scope::all()));
            let counted = {
                let engine = gateway.engine().read().unwrap();
                instructions(
                    built
                        .disclosure(gateway.preset())
                        .unwrap()
                        .guidance_in(&engine, &Scope::all()),
                    built.served_guidance.as_deref(),
                )
            };
            assert_eq!(gateway.guidance(&session), counted);
            assert!(!counted.is_empty(), "offload {offload}, prompts {prompts}");
            gateway.shutdown().await;
        }
    }
}
