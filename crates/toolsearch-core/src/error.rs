//! Errors of the engine. Every message says what was wrong and what to do about it.

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    #[error("{source_name}: invalid JSON at line {line}, column {column}: {message}; fix the JSON syntax there")]
    CatalogSyntax {
        source_name: String,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("{source_name}: not a valid {format} catalog at line {line}, column {column}: {message}; expected {expected}")]
    CatalogShape {
        source_name: String,
        format: String,
        line: usize,
        column: usize,
        message: String,
        expected: String,
    },

    #[error("{source_name}: cannot tell the catalog format: {reason}; pass --format (mcp, openai, anthropic, gemini, multi)")]
    UnknownCatalogFormat { source_name: String, reason: String },

    #[error("unknown catalog format `{0}`; use one of: mcp, openai, anthropic, gemini, multi")]
    UnknownFormatName(String),

    #[error("tool `{name}` appears twice on server `{server}`; tool names must be unique within a server")]
    DuplicateTool { server: String, name: String },

    #[error("a tool on server `{server}` has an empty name; give every tool a name")]
    EmptyToolName { server: String },

    #[error("invalid regex `{pattern}`: {message}")]
    InvalidRegex { pattern: String, message: String },

    #[error("query is {len} characters long; the limit is {max} in {mode} mode, shorten it")]
    QueryTooLong {
        len: usize,
        max: usize,
        mode: &'static str,
    },

    #[error("a search takes query or queries, not both; put every need in queries")]
    QueryAndQueries,

    #[error("queries holds {count} requests; one search takes at most {max}, so search the rest in another call")]
    TooManyQueries { count: usize, max: usize },

    #[error("unknown search mode `{0}`; use hybrid, keyword, semantic, regex or exact")]
    UnknownMode(String),

    #[error("semantic search needs an embedding model and none is loaded; run `toolsearch model fetch` (or pass --model DIR), or search in keyword or hybrid mode")]
    NoEmbeddingModel,

    #[error("embedding the query failed: {0}; search in keyword mode meanwhile")]
    QueryEmbedding(#[source] crate::embed::EmbedError),

    #[error("unknown tool `{name}`{}", did_you_mean(.suggestions))]
    UnknownTool {
        name: String,
        suggestions: Vec<String>,
    },

    #[error("a {kind} name of {chars} characters is longer than the {max} allowed, so no {kind} has it; use the exact name a search or list gave")]
    NameTooLong {
        kind: &'static str,
        chars: usize,
        max: usize,
    },

    #[error("server `{server}` is down ({state}); `{tool}` can be called once it is back: try again later, or use another tool")]
    ServerDown {
        server: String,
        tool: String,
        state: String,
    },

    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    #[error("arguments for `{tool}` do not match its input schema: {problems}")]
    InvalidArguments {
        tool: String,
        problems: String,
        schema: serde_json::Value,
    },

    #[error("index error: {0}; this is a bug in toolsearch, please report it")]
    Index(String),

    #[error("bad arguments for `{tool}`: {problem}; its input schema is {schema}")]
    MetaArguments {
        tool: &'static str,
        problem: String,
        schema: serde_json::Value,
    },

    #[error("`{name}` is not a meta-tool of the `{preset}` preset, which has: {available}")]
    NotAMetaTool {
        name: String,
        preset: &'static str,
        available: String,
    },

    #[error("`call_tool` runs a tool and needs an executor; use Disclosure::dispatch or Disclosure::call_tool")]
    ExecutorRequired,

    #[error("unknown category `{name}`; the categories are: {known}")]
    UnknownCategory { name: String, known: String },
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        "; search for it first to find its exact name".to_string()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

impl Error {
    /// Whether the error comes from the caller's input rather than from the engine.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Index(_))
    }
}
