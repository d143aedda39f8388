//! Context offloading: upstream results whose text is larger than `toolSearch.offload.thresholdBytes`
//! are stored per session and replaced by a short preview and a handle, so that one call cannot
//! flood the model's context. Three tools read a stored output back in pieces:
//!
//! - `read_large_output`: a character range (`read.rs`);
//! - `search_large_output`: matching lines (words or a regex) with line numbers and context
//!   (`search.rs`);
//! - `query_large_output`: a jq filter over JSON output, run with the jaq crates (`jq.rs`) in a
//!   child process with its own memory and time limits (`worker.rs`).
//!
//! Stores are per MCP session, bounded in bytes and count (oldest dropped first), and dropped when
//! the session ends; a handle is only ever looked up in its own session's store (`store.rs`). What
//! the model sees in place of an output is written in `notice.rs`.
//!
//! The tools are declared once, by [`OffloadTool`]: its name, its description, and an input
//! schema derived from the struct its arguments are read into.

mod jq;
mod notice;
mod output;
mod read;
mod search;
mod store;
mod worker;

use std::time::Duration;

use serde_json::{json, Value};

use crate::config::OffloadConfig;
use toolsearch_core::{schema_for, Listing, ToolDecl};

pub use notice::outline;
pub use output::{Stored, StoredOutput};
pub use read::read_range;
pub use store::OffloadStore;
pub use worker::{run_jq_worker, JqWorker, JQ_MEMORY_BYTES, JQ_WORKER_ARG};

/// Longest search pattern or jq filter accepted, in characters.
const MAX_PATTERN_CHARS: usize = 1000;

/// What went wrong with an offloaded output or a call to one of the three tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OffloadError {
    #[error("no large output `{handle}` in this session (handles are valid only in the session whose tool call returned them; this session holds: {known}); call the tool again to get a new handle")]
    UnknownHandle { handle: String, known: String },

    #[error("large output `{handle}` was dropped to make room: a session keeps at most {max_outputs} outputs and {max_bytes} bytes, oldest first; call the tool again to get it back")]
    Dropped {
        handle: String,
        max_outputs: usize,
        max_bytes: usize,
    },

    #[error("offset {offset} is out of range: output `{handle}` has {chars} characters, so offset must be between 0 and {}", chars.saturating_sub(1))]
    OffsetOutOfRange {
        handle: String,
        offset: usize,
        chars: usize,
    },

    #[error("invalid arguments for {tool}: {message}; see the tool's input schema")]
    InvalidArguments { tool: &'static str, message: String },

    /// Arguments that do not match the tool's schema, as the core says it for every served tool
    /// (its words: this enum is `Clone` and `Eq`, which the core's error is not).
    #[error("{0}")]
    Arguments(String),

    #[error("invalid regex `{pattern}`: {message}; fix the pattern, or set mode = \"words\" to search for plain words")]
    BadRegex { pattern: String, message: String },

    #[error("invalid jq filter `{filter}`: {message}")]
    BadFilter { filter: String, message: String },

    #[error("output `{handle}` is not JSON ({message}), so it cannot be queried with jq; use search_large_output or read_large_output")]
    NotJson { handle: String, message: String },

    #[error("output `{handle}` nests arrays and objects more than {limit} levels deep, too deep to query with jq; use search_large_output or read_large_output")]
    TooDeep { handle: String, limit: usize },

    #[error("the jq filter `{filter}` failed: {message}")]
    FilterFailed { filter: String, message: String },

    #[error("the jq filter `{filter}` ran longer than {}s and was stopped; use a cheaper filter, e.g. with limit(10; ...) or .[0:10]", limit.as_secs_f64())]
    FilterTimeout { filter: String, limit: Duration },

    #[error("the jq filter `{filter}` was stopped: {reason}; use a cheaper filter, e.g. with limit(10; ...) or .[0:10]")]
    FilterStopped { filter: String, reason: String },

    #[error("the call to {tool} was cancelled by the caller; call it again for an answer")]
    Cancelled { tool: &'static str },

    #[error("{tool} failed inside the gateway; call it again, and report it if it repeats")]
    Failed { tool: &'static str },

    #[error(
        "jq filters cannot run: {message}; search_large_output and read_large_output still work"
    )]
    JqUnavailable { message: String },
}

/// The three large-output tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffloadTool {
    /// `read_large_output`: a character range.
    Read,
    /// `search_large_output`: matching lines with context.
    Search,
    /// `query_large_output`: a jq filter.
    Query,
}

impl OffloadTool {
    /// The three, in the order tools/list shows them.
    pub const ALL: [OffloadTool; 3] = [OffloadTool::Read, OffloadTool::Search, OffloadTool::Query];

    /// The tool's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            OffloadTool::Read => "read_large_output",
            OffloadTool::Search => "search_large_output",
            OffloadTool::Query => "query_large_output",
        }
    }

    /// The tool called `name`, if it is one of the three.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The tool's description, with the configured read bound.
    pub fn description(self, config: &OffloadConfig) -> String {
        let max = config.max_read_chars;
        match self {
            OffloadTool::Read => format!("Read a character range of a large tool output that was stored instead of returned (the result said `offloaded` and gave a handle). Returns the text of [offset, offset + length), the output's total `chars`, and `nextOffset` to continue from (null at the end). At most {max} characters per call."),
            OffloadTool::Search => format!("Search a large stored tool output line by line. Returns matching lines with their line number, column and character `offset` (usable with {read}), and the lines around each. `mode` = \"words\" (default): lines containing every word, case-insensitive; `mode` = \"regex\": a Rust regex (use (?i) for case-insensitive). Long lines are clipped around the match. At most about {max} characters per call.", read = OffloadTool::Read.name()),
            OffloadTool::Query => format!("Run a jq filter over a large stored tool output that is JSON, e.g. `.items | length`, `.items[0:5]`, `[.items[] | select(.status == \"open\") | .id]`, `keys`. Returns the filter's output values (at most max_results, about {max} characters in all). A filter that runs past the call's time limit or its memory limit is stopped."),
        }
    }

    /// The JSON Schema of the tool's arguments, derived from the struct they are read into.
    pub fn input_schema(self) -> Value {
        match self {
            OffloadTool::Read => schema_for::<read::ReadArgs>(),
            OffloadTool::Search => schema_for::<search::SearchArgs>(),
            OffloadTool::Query => schema_for::<jq::QueryArgs>(),
        }
    }

    /// The tool's declaration, served through the disclosure beside the meta-tools.
    pub fn decl(self, config: &OffloadConfig) -> ToolDecl {
        ToolDecl {
            name: self.name(),
            description: self.description(config),
            input_schema: self.input_schema(),
            output_schema: None,
            annotations: Some(json!({"readOnlyHint": true, "openWorldHint": false})),
            // Useless until an output is stored; the notice that stores one says how to call them.
            listing: Listing::OnDemand,
        }
    }

    /// The tool's definition as tools/list shows it.
    pub fn definition(self, config: &OffloadConfig) -> Value {
        serde_json::to_value(self.decl(config)).unwrap_or(Value::Null)
    }
}

/// The three tools' definitions, as tools/list shows them.
pub fn tool_definitions(config: &OffloadConfig) -> Vec<Value> {
    OffloadTool::ALL
        .into_iter()
        .map(|tool| tool.definition(config))
        .collect()
}

/// A call's arguments, checked against the tool's declared schema and read, by the core's one
/// rule for served tools (the meta-tools' and the prompt tools'), with its error.
fn parse_args<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    tool: OffloadTool,
    arguments: Value,
) -> Result<T, OffloadError> {
    toolsearch_core::parse_arguments(tool.name(), arguments)
        .map_err(|e| OffloadError::Arguments(e.to_string()))
}

/// A call to one of the three tools with its arguments read and checked against the bounds their
/// schema states: everything about a call that needs neither a stored output nor a jq worker.
#[derive(Debug)]
pub struct OffloadCall(Call);

#[derive(Debug)]
enum Call {
    Read(read::ReadArgs),
    Search(search::SearchArgs),
    Query(jq::QueryArgs),
}

impl OffloadCall {
    /// Reads `arguments` (null reads as `{}`) as the arguments of `tool`, within the bounds its
    /// schema states (a pattern or filter of 1 to [`MAX_PATTERN_CHARS`] characters). A filter is
    /// compiled in the worker, not here.
    pub fn parse(tool: OffloadTool, arguments: Value) -> Result<Self, OffloadError> {
        let call = match tool {
            OffloadTool::Read => Call::Read(parse_args(tool, arguments)?),
            OffloadTool::Search => Call::Search(parse_args(tool, arguments)?),
            OffloadTool::Query => Call::Query(parse_args(tool, arguments)?),
        };
        Ok(Self(call))
    }

    /// The tool called.
    pub fn tool(&self) -> OffloadTool {
        match self.0 {
            Call::Read(_) => OffloadTool::Read,
            Call::Search(_) => OffloadTool::Search,
            Call::Query(_) => OffloadTool::Query,
        }
    }

    /// The handle of the output it reads.
    pub fn handle(&self) -> &str {
        match &self.0 {
            Call::Read(args) => &args.handle,
            Call::Search(args) => &args.handle,
            Call::Query(args) => &args.handle,
        }
    }
}

impl OffloadStore {
    /// Runs one of the three tools for `session`. A jq query runs in a worker process that is
    /// stopped after `query_timeout`.
    pub async fn call(
        &self,
        session: &str,
        tool: OffloadTool,
        arguments: Value,
        query_timeout: Duration,
    ) -> Result<Value, OffloadError> {
        let max_chars = self.config.max_read_chars;
        match OffloadCall::parse(tool, arguments)?.0 {
            // A read finds its characters and a search scans every line of an output that may be
            // megabytes long: on the blocking pool, so that no async worker waits on them.
            Call::Read(args) => {
                let output = self.get(session, &args.handle)?;
                off_the_workers(tool, move || {
                    read_range(&output, args.offset.unwrap_or(0), args.length, max_chars)
                })
                .await
            }
            Call::Search(args) => {
                let output = self.get(session, &args.handle)?;
                off_the_workers(tool, move || search::search(&output, &args, max_chars)).await
            }
            Call::Query(args) => {
                let output = self.get(session, &args.handle)?;
                self.jq
                    .run(output, &args, self.config.max_read_chars, query_timeout)
                    .await
            }
        }
    }

    /// Answers a read or a search here and now, for `session`; `None` for a query, which runs in
    /// a jq worker ([`call`](Self::call)).
    pub fn call_in_process(
        &self,
        session: &str,
        call: &OffloadCall,
    ) -> Option<Result<Value, OffloadError>> {
        match &call.0 {
            Call::Read(args) => Some(self.read(session, args)),
            Call::Search(args) => Some(self.search(session, args)),
            Call::Query(_) => None,
        }
    }

    fn read(&self, session: &str, args: &read::ReadArgs) -> Result<Value, OffloadError> {
        let output = self.get(session, &args.handle)?;
        let max_chars = self.config.max_read_chars;
        read_range(&output, args.offset.unwrap_or(0), args.length, max_chars)
    }

    fn search(&self, session: &str, args: &search::SearchArgs) -> Result<Value, OffloadError> {
        let output = self.get(session, &args.handle)?;
        search::search(&output, args, self.config.max_read_chars)
    }
}

/// Runs `work` on tokio's blocking pool.
async fn off_the_workers<F>(tool: OffloadTool, work: F) -> Result<Value, OffloadError>
where
    F: FnOnce() -> Result<Value, OffloadError> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        tracing::error!(tool = tool.name(), error = %e, "a large-output task failed");
        Err(OffloadError::Failed { tool: tool.name() })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use rmcp::model::{CallToolResult, ContentBlock};

    use super::*;

    pub(crate) fn config(threshold: usize, max_bytes: usize, max_outputs: usize) -> OffloadConfig {
        OffloadConfig {
            threshold_bytes: threshold,
            max_bytes_per_session: max_bytes,
            max_outputs_per_session: max_outputs,
            preview_chars: 20,
            max_read_chars: 100,
            ..OffloadConfig::default()
        }
    }

    pub(crate) fn text_result(text: &str) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    pub(crate) fn stored(text: &str) -> StoredOutput {
        StoredOutput::new("out-1-x".into(), "s___t".into(), text.into())
    }

    #[tokio::test]
    async fn tools_check_their_arguments() {
        let store = OffloadStore::new(config(10, 1000, 3));
        let handle = store.put("a", "t", "x".repeat(30)).output.handle.clone();
        let t = Duration::from_secs(5);
        let r = store
            .call(
                "a",
                OffloadTool::Read,
                json!({"handle": handle, "offset": 28}),
                t,
            )
            .await
            .unwrap();
        assert_eq!(r["text"], "xx");
        let err = store
            .call(
                "a",
                OffloadTool::Read,
                json!({"handle": handle, "ofset": 1}),
                t,
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("ofset"), "{err}");
        let err = store
            .call(
                "a",
                OffloadTool::Read,
                json!({"handle": handle, "length": 0}),
                t,
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
        let err = store
            .call("a", OffloadTool::Search, Value::Null, t)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("handle"), "{err}");
        let err = store
            .call(
                "b",
                OffloadTool::Query,
                json!({"handle": handle, "filter": "."}),
                t,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::UnknownHandle { .. }), "{err}");
    }

    /// Patterns and filters are held to the lengths their schemas state before anything runs:
    /// the worker program here does not exist, so a filter that got past the check would come
    /// back as "jq filters cannot run".
    #[tokio::test]
    async fn patterns_and_filters_are_checked_before_anything_runs() {
        let store = OffloadStore::with_jq_worker(
            config(10, 1000, 3),
            JqWorker::new("/nonexistent/jq-worker", Vec::new(), Vec::new()),
        );
        let handle = store.put("a", "t", "x".repeat(30)).output.handle.clone();
        let t = Duration::from_secs(5);
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        for (tool, field, value) in [
            (OffloadTool::Search, "pattern", ""),
            (OffloadTool::Search, "pattern", long.as_str()),
            (OffloadTool::Query, "filter", ""),
            (OffloadTool::Query, "filter", long.as_str()),
        ] {
            let err = store
                .call("a", tool, json!({"handle": handle, field: value}), t)
                .await
                .unwrap_err();
            // Refused by the tool's declared schema (1 to MAX_PATTERN_CHARS characters), as
            // every served tool's arguments are.
            assert!(
                matches!(err, OffloadError::Arguments(_)),
                "{tool:?} {field} of {} chars: {err}",
                value.len()
            );
            assert!(err.to_string().contains(tool.name()), "{err}");
            assert!(err.to_string().contains(field), "{err}");
        }
        let err = store
            .call(
                "a",
                OffloadTool::Query,
                json!({"handle": handle, "filter": "."}),
                t,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::JqUnavailable { .. }), "{err}");
    }

    #[test]
    fn reads_and_searches_answer_in_process_and_queries_do_not() {
        let store = OffloadStore::new(config(10, 1000, 3));
        let handle = store
            .put("a", "t", "one\ntwo\n".into())
            .output
            .handle
            .clone();
        let call = |tool, args| OffloadCall::parse(tool, args).unwrap();
        let read = call(OffloadTool::Read, json!({"handle": handle, "offset": 4}));
        assert_eq!(
            (read.tool(), read.handle()),
            (OffloadTool::Read, handle.as_str())
        );
        let answer = store.call_in_process("a", &read).unwrap().unwrap();
        assert_eq!(answer["text"], "two\n");
        let search = call(
            OffloadTool::Search,
            json!({"handle": handle, "pattern": "TWO"}),
        );
        let answer = store.call_in_process("a", &search).unwrap().unwrap();
        assert_eq!(answer["matches"][0]["line"], 2);
        let other_session = store.call_in_process("b", &search).unwrap().unwrap_err();
        assert!(matches!(other_session, OffloadError::UnknownHandle { .. }));
        let query = call(OffloadTool::Query, json!({"handle": handle, "filter": "."}));
        assert_eq!(query.tool(), OffloadTool::Query);
        assert!(store.call_in_process("a", &query).is_none());
    }

    #[test]
    fn tools_are_named_once() {
        let names: Vec<_> = OffloadTool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "read_large_output",
                "search_large_output",
                "query_large_output"
            ]
        );
        for tool in OffloadTool::ALL {
            assert_eq!(OffloadTool::from_name(tool.name()), Some(tool));
        }
        assert_eq!(OffloadTool::from_name("call_tool"), None);
    }

    #[test]
    fn definitions_are_valid_mcp_tools() {
        let config = OffloadConfig::default();
        for (tool, def) in OffloadTool::ALL.into_iter().zip(tool_definitions(&config)) {
            assert_eq!(def["name"], tool.name());
            assert!(def["description"]
                .as_str()
                .unwrap()
                .contains(&config.max_read_chars.to_string()));
            serde_json::from_value::<rmcp::model::Tool>(def).unwrap();
        }
    }

    /// The derived schemas say what the hand-written ones said: types, bounds, defaults, enums,
    /// required fields, no unknown fields, a description for every parameter.
    #[test]
    fn derived_schemas_state_every_bound() {
        let read = OffloadTool::Read.input_schema();
        assert_eq!(read["type"], "object");
        assert_eq!(read["required"], json!(["handle"]));
        assert_eq!(read["additionalProperties"], false);
        assert_eq!(read["properties"]["handle"]["type"], "string");
        assert_eq!(read["properties"]["offset"]["type"], "integer");
        assert_eq!(read["properties"]["offset"]["minimum"], 0);
        assert_eq!(read["properties"]["offset"]["default"], 0);
        assert_eq!(read["properties"]["length"]["type"], "integer");
        assert_eq!(read["properties"]["length"]["minimum"], 1);

        let search = OffloadTool::Search.input_schema();
        assert_eq!(search["required"], json!(["handle", "pattern"]));
        assert_eq!(search["additionalProperties"], false);
        let p = &search["properties"];
        assert_eq!(p["pattern"]["minLength"], 1);
        assert_eq!(p["pattern"]["maxLength"], MAX_PATTERN_CHARS);
        assert_eq!(p["mode"]["enum"], json!(["words", "regex"]));
        assert_eq!(p["mode"]["default"], "words");
        assert_eq!(p["context"]["maximum"], 10);
        assert_eq!(p["context"]["default"], 2);
        assert_eq!(p["max_matches"]["minimum"], 1);
        assert_eq!(p["max_matches"]["maximum"], 200);
        assert_eq!(p["max_matches"]["default"], 20);

        let query = OffloadTool::Query.input_schema();
        assert_eq!(query["required"], json!(["handle", "filter"]));
        assert_eq!(query["additionalProperties"], false);
        let p = &query["properties"];
        assert_eq!(p["filter"]["maxLength"], MAX_PATTERN_CHARS);
        assert_eq!(p["max_results"]["minimum"], 1);
        assert_eq!(p["max_results"]["maximum"], 1000);
        assert_eq!(p["max_results"]["default"], 50);

        assert!(
            read["properties"]["length"].get("default").is_none(),
            "{read}"
        );
        for schema in [&read, &search, &query] {
            assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
            assert!(schema.get("description").is_none(), "lean: {schema}");
            assert!(schema.get("$defs").is_none(), "inlined: {schema}");
            for (name, property) in schema["properties"].as_object().unwrap() {
                assert!(
                    property["description"]
                        .as_str()
                        .is_some_and(|d| !d.is_empty()),
                    "{name} has no description: {schema}"
                );
            }
        }
    }
}
