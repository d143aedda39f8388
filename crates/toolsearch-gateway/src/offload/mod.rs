//! Context offloading: upstream results whose text is larger than `toolSearch.offload.thresholdBytes`
//! are stored per session and replaced by a short preview and a handle, so that one call cannot
//! flood the model's context. Three tools read a stored output back in pieces:
//!
//! - `read_large_output`: a character range;
//! - `search_large_output`: matching lines (words or a regex) with line numbers and context;
//! - `query_large_output`: a jq filter over JSON output, run with the jaq crates.
//!
//! Stores are per MCP session, bounded in bytes and count (oldest dropped first), and dropped when
//! the session ends; a handle is only ever looked up in its own session's store.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::config::OffloadConfig;

pub const READ_TOOL: &str = "read_large_output";
pub const SEARCH_TOOL: &str = "search_large_output";
pub const QUERY_TOOL: &str = "query_large_output";
/// The three tools, in the order tools/list shows them.
pub const TOOL_NAMES: [&str; 3] = [READ_TOOL, SEARCH_TOOL, QUERY_TOOL];

/// Longest search pattern or jq filter accepted, in characters.
const MAX_PATTERN_CHARS: usize = 1000;
/// Compiled-regex size cap: a short pattern can still compile into a huge automaton.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const DEFAULT_CONTEXT_LINES: usize = 2;
const MAX_CONTEXT_LINES: usize = 10;
const DEFAULT_MAX_MATCHES: usize = 20;
const MAX_MATCHES: usize = 200;
const DEFAULT_MAX_RESULTS: usize = 50;
const MAX_RESULTS: usize = 1000;
/// Characters of a matching line shown around the match, and of a context line.
const MATCH_LINE_CHARS: usize = 300;
const CONTEXT_LINE_CHARS: usize = 160;
/// Handles of dropped outputs remembered per session, to tell "dropped" from "never existed".
const REMEMBERED_DROPPED: usize = 256;
/// Top-level keys listed in a JSON outline.
const OUTLINE_KEYS: usize = 40;

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

    #[error("invalid regex `{pattern}`: {message}; fix the pattern, or set mode = \"words\" to search for plain words")]
    BadRegex { pattern: String, message: String },

    #[error("invalid jq filter `{filter}`: {message}")]
    BadFilter { filter: String, message: String },

    #[error("output `{handle}` is not JSON ({message}), so it cannot be queried with jq; use search_large_output or read_large_output")]
    NotJson { handle: String, message: String },

    #[error("the jq filter `{filter}` failed: {message}")]
    FilterFailed { filter: String, message: String },

    #[error("the jq filter `{filter}` ran longer than {}s and was abandoned; use a cheaper filter", limit.as_secs())]
    FilterTimeout { filter: String, limit: Duration },
}

/// One stored output.
#[derive(Debug)]
pub struct StoredOutput {
    pub handle: String,
    /// Public name of the tool that produced it.
    pub tool: String,
    pub text: String,
    pub chars: usize,
}

impl StoredOutput {
    fn new(handle: String, tool: String, text: String) -> Self {
        let chars = text.chars().count();
        Self {
            handle,
            tool,
            text,
            chars,
        }
    }

    /// Byte index of character `index` (the end of the text past the last character).
    fn byte_at(&self, index: usize) -> usize {
        if self.chars == self.text.len() {
            // ASCII: characters are bytes.
            return index.min(self.text.len());
        }
        self.text
            .char_indices()
            .nth(index)
            .map_or(self.text.len(), |(b, _)| b)
    }
}

#[derive(Default)]
struct SessionOutputs {
    outputs: VecDeque<Arc<StoredOutput>>,
    bytes: usize,
    dropped: VecDeque<String>,
}

/// Stored outputs of every session.
pub struct OffloadStore {
    config: OffloadConfig,
    sessions: Mutex<HashMap<String, SessionOutputs>>,
    next: AtomicU64,
    salt: RandomState,
}

impl std::fmt::Debug for OffloadStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What [`OffloadStore::put`] kept.
#[derive(Debug, Clone)]
pub struct Stored {
    pub output: Arc<StoredOutput>,
    /// Bytes of the original text, when it was cut to fit `maxBytesPerSession`.
    pub cut_from: Option<usize>,
}

impl OffloadStore {
    pub fn new(config: OffloadConfig) -> Self {
        Self {
            config,
            sessions: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            salt: RandomState::new(),
        }
    }

    pub fn config(&self) -> &OffloadConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, SessionOutputs>> {
        // Each operation leaves the map consistent, so a panic elsewhere does not poison it.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new handle: a counter (unique) and a salted hash (not guessable from another session's).
    fn new_handle(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut hasher = self.salt.build_hasher();
        hasher.write_u64(n);
        format!("out-{n}-{:08x}", hasher.finish() as u32)
    }

    /// Stores `text` for `session`, dropping the session's oldest outputs past the bounds. A text
    /// larger than `maxBytesPerSession` is cut to fit.
    pub fn put(&self, session: &str, tool: &str, mut text: String) -> Stored {
        let max_bytes = self.config.max_bytes_per_session;
        let cut_from = (text.len() > max_bytes).then(|| {
            let original = text.len();
            text.truncate(floor_char_boundary(&text, max_bytes));
            original
        });
        let output = Arc::new(StoredOutput::new(self.new_handle(), tool.to_string(), text));
        let mut sessions = self.lock();
        let store = sessions.entry(session.to_string()).or_default();
        store.bytes += output.text.len();
        store.outputs.push_back(output.clone());
        while store.outputs.len() > self.config.max_outputs_per_session || store.bytes > max_bytes {
            let Some(old) = store.outputs.pop_front() else {
                break;
            };
            store.bytes -= old.text.len();
            tracing::debug!(session, handle = %old.handle, "dropped the oldest large output");
            store.dropped.push_back(old.handle.clone());
            if store.dropped.len() > REMEMBERED_DROPPED {
                store.dropped.pop_front();
            }
        }
        Stored { output, cut_from }
    }

    /// The output `handle` of `session`; never another session's.
    pub fn get(&self, session: &str, handle: &str) -> Result<Arc<StoredOutput>, OffloadError> {
        let sessions = self.lock();
        let store = sessions.get(session);
        if let Some(found) = store.and_then(|s| s.outputs.iter().find(|o| o.handle == handle)) {
            return Ok(found.clone());
        }
        if store.is_some_and(|s| s.dropped.iter().any(|h| h == handle)) {
            return Err(OffloadError::Dropped {
                handle: handle.to_string(),
                max_outputs: self.config.max_outputs_per_session,
                max_bytes: self.config.max_bytes_per_session,
            });
        }
        let known: Vec<&str> = store
            .map(|s| s.outputs.iter().map(|o| o.handle.as_str()).collect())
            .unwrap_or_default();
        Err(OffloadError::UnknownHandle {
            handle: handle.to_string(),
            known: if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            },
        })
    }

    /// Handles a session holds, oldest first.
    pub fn handles(&self, session: &str) -> Vec<String> {
        self.lock()
            .get(session)
            .map(|s| s.outputs.iter().map(|o| o.handle.clone()).collect())
            .unwrap_or_default()
    }

    /// Bytes a session holds.
    pub fn session_bytes(&self, session: &str) -> usize {
        self.lock().get(session).map_or(0, |s| s.bytes)
    }

    /// Drops a session's outputs.
    pub fn end_session(&self, session: &str) {
        self.lock().remove(session);
    }

    /// Replaces a large result's text by a preview and a handle. Results at or under the
    /// threshold, and every non-text part, are returned unchanged.
    pub fn offload_result(
        &self,
        session: &str,
        tool: &str,
        mut result: CallToolResult,
    ) -> CallToolResult {
        if !self.config.enabled {
            return result;
        }
        let text_bytes: usize = result
            .content
            .iter()
            .filter_map(ContentBlock::as_text)
            .map(|t| t.text.len())
            .sum();
        if text_bytes <= self.config.threshold_bytes {
            return result;
        }
        // All text parts become one stored output, in order; the notice takes the place of the
        // first of them and the other parts (images, audio, resources) keep theirs.
        let mut texts = Vec::new();
        let mut first_text = None;
        let mut kept = Vec::with_capacity(result.content.len());
        for block in std::mem::take(&mut result.content) {
            match block {
                ContentBlock::Text(t) => {
                    first_text.get_or_insert(kept.len());
                    texts.push(t.text);
                }
                other => kept.push(other),
            }
        }
        let stored = self.put(session, tool, texts.join("\n"));
        let (notice, structured) = self.describe(&stored);
        tracing::info!(session, tool, handle = %stored.output.handle, bytes = text_bytes, "offloaded a large output");
        kept.insert(first_text.unwrap_or(0), ContentBlock::text(notice));
        result.content = kept;
        result.structured_content = Some(structured);
        result
    }

    /// The notice text and `structuredContent` for a stored output.
    fn describe(&self, stored: &Stored) -> (String, Value) {
        let output = &stored.output;
        let text = &output.text;
        let head_end = output.byte_at(self.config.preview_chars);
        let preview = &text[..head_end];
        let lines = text.lines().count();
        let outline = serde_json::from_str::<Value>(text)
            .ok()
            .map(|v| outline(&v));
        let mut info = Map::new();
        info.insert("handle".into(), json!(output.handle));
        info.insert("chars".into(), json!(output.chars));
        info.insert("bytes".into(), json!(text.len()));
        info.insert("lines".into(), json!(lines));
        info.insert("tool".into(), json!(output.tool));
        info.insert("preview".into(), json!(preview));
        if let Some(outline) = &outline {
            info.insert("outline".into(), outline.clone());
        }
        if let Some(original) = stored.cut_from {
            info.insert("cutFromBytes".into(), json!(original));
        }
        let mut notice = format!(
            "The output of `{tool}` is too large for the context ({chars} characters, {bytes} bytes, {lines} lines), so it was stored as handle `{handle}`.\n\
             Read it in pieces: {READ_TOOL}(handle, offset, length) returns a character range; \
             {SEARCH_TOOL}(handle, pattern) returns matching lines with line numbers and context; \
             {QUERY_TOOL}(handle, filter) runs a jq filter when the output is JSON.\n",
            tool = output.tool,
            chars = output.chars,
            bytes = text.len(),
            handle = output.handle,
        );
        if let Some(original) = stored.cut_from {
            notice.push_str(&format!(
                "Only the first {} of its {original} bytes were kept (toolSearch.offload.maxBytesPerSession).\n",
                text.len()
            ));
        }
        if let Some(outline) = &outline {
            notice.push_str(&format!("JSON outline: {outline}\n"));
        }
        let more = if head_end < text.len() { " …" } else { "" };
        notice.push_str(&format!(
            "Preview (first {} characters):\n{preview}{more}",
            preview.chars().count()
        ));
        (notice, json!({ "offloaded": Value::Object(info) }))
    }

    /// Runs one of the three tools for `session`.
    pub async fn call(
        &self,
        session: &str,
        name: &str,
        arguments: Value,
        query_timeout: Duration,
    ) -> Result<Value, OffloadError> {
        match name {
            READ_TOOL => {
                let args: ReadArgs = parse_args(READ_TOOL, arguments)?;
                let output = self.get(session, &args.handle)?;
                read_range(
                    &output,
                    args.offset.unwrap_or(0),
                    args.length,
                    self.config.max_read_chars,
                )
            }
            SEARCH_TOOL => {
                let args: SearchArgs = parse_args(SEARCH_TOOL, arguments)?;
                let output = self.get(session, &args.handle)?;
                search(&output, &args, self.config.max_read_chars)
            }
            QUERY_TOOL => {
                let args: QueryArgs = parse_args(QUERY_TOOL, arguments)?;
                let output = self.get(session, &args.handle)?;
                let max_chars = self.config.max_read_chars;
                let max_results = args
                    .max_results
                    .unwrap_or(DEFAULT_MAX_RESULTS)
                    .clamp(1, MAX_RESULTS);
                let filter = args.filter.clone();
                // jaq values are not Send and a filter may run long: it gets its own thread, and
                // the caller stops waiting after `query_timeout`.
                let task = tokio::task::spawn_blocking(move || {
                    query(&output, &args.filter, max_results, max_chars)
                });
                match tokio::time::timeout(query_timeout, task).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(join)) => Err(OffloadError::FilterFailed {
                        filter,
                        message: format!("the filter's thread stopped: {join}"),
                    }),
                    Err(_) => Err(OffloadError::FilterTimeout {
                        filter,
                        limit: query_timeout,
                    }),
                }
            }
            other => Err(OffloadError::InvalidArguments {
                tool: READ_TOOL,
                message: format!("`{other}` is not one of {}", TOOL_NAMES.join(", ")),
            }),
        }
    }
}

/// Whether `name` is one of the three tools.
pub fn is_offload_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn parse_args<T: for<'de> Deserialize<'de>>(
    tool: &'static str,
    arguments: Value,
) -> Result<T, OffloadError> {
    let arguments = if arguments.is_null() {
        json!({})
    } else {
        arguments
    };
    serde_json::from_value(arguments).map_err(|e| OffloadError::InvalidArguments {
        tool,
        message: e.to_string(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    handle: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    length: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SearchMode {
    #[default]
    Words,
    Regex,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    handle: String,
    pattern: String,
    #[serde(default)]
    mode: SearchMode,
    #[serde(default)]
    context: Option<usize>,
    #[serde(default)]
    max_matches: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    handle: String,
    filter: String,
    #[serde(default)]
    max_results: Option<usize>,
}

/// Characters `[offset, offset + length)` of an output, at most `max_chars`.
pub fn read_range(
    output: &StoredOutput,
    offset: usize,
    length: Option<usize>,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    if offset >= output.chars {
        return Err(OffloadError::OffsetOutOfRange {
            handle: output.handle.clone(),
            offset,
            chars: output.chars,
        });
    }
    let wanted = length.unwrap_or(max_chars);
    let length = wanted.min(max_chars).min(output.chars - offset);
    let start = output.byte_at(offset);
    let end = output.byte_at(offset + length);
    let end_offset = offset + length;
    let mut out = json!({
        "handle": output.handle,
        "offset": offset,
        "length": length,
        "chars": output.chars,
        "nextOffset": if end_offset < output.chars { json!(end_offset) } else { Value::Null },
        "text": &output.text[start..end],
    });
    if wanted > max_chars {
        out["note"] = json!(format!(
            "length was capped at {max_chars} characters (toolSearch.offload.maxReadChars); continue at nextOffset"
        ));
    }
    Ok(out)
}

/// Matches of a line: the char column of the first match, or `None`.
enum Matcher {
    Regex(regex::Regex),
    /// Every word must occur (case-insensitive); the column is the first word's.
    Words(Vec<regex::Regex>),
}

impl Matcher {
    fn new(args: &SearchArgs) -> Result<Self, OffloadError> {
        let pattern = args.pattern.as_str();
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(OffloadError::InvalidArguments {
                tool: SEARCH_TOOL,
                message: format!("the pattern is longer than {MAX_PATTERN_CHARS} characters"),
            });
        }
        let build = |p: &str, case_insensitive: bool| {
            regex::RegexBuilder::new(p)
                .case_insensitive(case_insensitive)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
        };
        match args.mode {
            SearchMode::Regex => {
                build(pattern, false)
                    .map(Matcher::Regex)
                    .map_err(|e| OffloadError::BadRegex {
                        pattern: pattern.to_string(),
                        // The regex crate's message spans lines with a caret under the problem.
                        message: e.to_string(),
                    })
            }
            SearchMode::Words => {
                let words: Vec<_> = pattern
                    .split_whitespace()
                    .map(|w| build(&regex::escape(w), true))
                    .collect::<Result<_, _>>()
                    .map_err(|e| OffloadError::InvalidArguments {
                        tool: SEARCH_TOOL,
                        message: e.to_string(),
                    })?;
                if words.is_empty() {
                    return Err(OffloadError::InvalidArguments {
                        tool: SEARCH_TOOL,
                        message: "the pattern has no words; give at least one".into(),
                    });
                }
                Ok(Matcher::Words(words))
            }
        }
    }

    /// Byte position of the first match in `line`.
    fn find(&self, line: &str) -> Option<usize> {
        match self {
            Matcher::Regex(re) => re.find(line).map(|m| m.start()),
            Matcher::Words(words) => {
                let mut first = None;
                for word in words {
                    let at = word.find(line)?.start();
                    first.get_or_insert(at);
                }
                first
            }
        }
    }
}

/// Up to `max` characters of `line` starting near byte `around`, with `…` where it is cut.
fn clip(line: &str, around: usize, max: usize) -> String {
    let chars_before = line[..floor_char_boundary(line, around)].chars().count();
    let skip = chars_before.saturating_sub(max / 4);
    let mut out = String::new();
    if skip > 0 {
        out.push('…');
    }
    let mut taken = line.chars().skip(skip);
    out.extend(taken.by_ref().take(max));
    if taken.next().is_some() {
        out.push('…');
    }
    out
}

fn search(
    output: &StoredOutput,
    args: &SearchArgs,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    let matcher = Matcher::new(args)?;
    let context = args
        .context
        .unwrap_or(DEFAULT_CONTEXT_LINES)
        .min(MAX_CONTEXT_LINES);
    let max_matches = args
        .max_matches
        .unwrap_or(DEFAULT_MAX_MATCHES)
        .clamp(1, MAX_MATCHES);
    let lines: Vec<&str> = output
        .text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let line_entry =
        |i: usize| json!({ "line": i + 1, "text": clip(lines[i], 0, CONTEXT_LINE_CHARS) });
    let mut matches = Vec::new();
    let mut total = 0usize;
    let mut used = 0usize;
    let mut truncated = false;
    // Character offset of the current line's start, for read_large_output.
    let mut line_offset = 0usize;
    for (i, line) in lines.iter().enumerate() {
        if let Some(at) = matcher.find(line) {
            total += 1;
            if !truncated {
                let column = line[..at].chars().count();
                let entry = json!({
                    "line": i + 1,
                    "column": column + 1,
                    "offset": line_offset + column,
                    "text": clip(line, at, MATCH_LINE_CHARS),
                    "before": (i.saturating_sub(context)..i).map(line_entry).collect::<Vec<_>>(),
                    "after": (i + 1..(i + 1 + context).min(lines.len())).map(line_entry).collect::<Vec<_>>(),
                });
                let size = entry.to_string().chars().count();
                if matches.len() >= max_matches || (used + size > max_chars && !matches.is_empty())
                {
                    truncated = true;
                } else {
                    used += size;
                    matches.push(entry);
                }
            }
        }
        // Lines were split on '\n': count it back, and a stripped '\r'.
        line_offset += output.text_line_chars(line);
    }
    Ok(json!({
        "handle": output.handle,
        "pattern": args.pattern,
        "mode": match args.mode { SearchMode::Words => "words", SearchMode::Regex => "regex" },
        "totalMatches": total,
        "returned": matches.len(),
        "truncated": truncated,
        "matches": matches,
    }))
}

impl StoredOutput {
    /// Characters a line took in the text, with its line break.
    fn text_line_chars(&self, line: &str) -> usize {
        let line_chars = if self.chars == self.text.len() {
            line.len()
        } else {
            line.chars().count()
        };
        // The '\n' and, when the line ended "\r\n", the '\r' that was stripped. The `line` slice
        // points into `text`, so what follows it is there to look at.
        let end = line.as_ptr() as usize - self.text.as_ptr() as usize + line.len();
        let rest = &self.text.as_bytes()[end.min(self.text.len())..];
        line_chars
            + match rest {
                [b'\r', b'\n', ..] => 2,
                [b'\n', ..] => 1,
                _ => 0,
            }
    }
}

/// Runs a jq filter over a JSON output with jaq; at most `max_results` values and about
/// `max_chars` characters.
pub fn query(
    output: &StoredOutput,
    filter: &str,
    max_results: usize,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    use jaq_core::load::{Arena, File, Loader};
    use jaq_core::{data, Compiler, Ctx, Vars};
    use jaq_json::Val;

    if filter.chars().count() > MAX_PATTERN_CHARS {
        return Err(OffloadError::InvalidArguments {
            tool: QUERY_TOOL,
            message: format!("the filter is longer than {MAX_PATTERN_CHARS} characters"),
        });
    }
    let bad = |message: String| OffloadError::BadFilter {
        filter: filter.to_string(),
        message,
    };
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    // `env` would hand the gateway's environment (tokens, keys) to the model.
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| *name != "env");
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let program = File {
        code: filter,
        path: (),
    };
    let modules = loader
        .load(&arena, program)
        .map_err(|errors| bad(describe_load_errors(filter, errors)))?;
    let compiled = Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| {
            let parts: Vec<String> = errors
                .into_iter()
                .flat_map(|(_, errs)| errs)
                .map(|(name, undefined)| {
                    format!(
                        "undefined {} `{name}` at {}",
                        undefined.as_str(),
                        position(filter, name)
                    )
                })
                .collect();
            bad(parts.join("; "))
        })?;
    let input = jaq_json::read::parse_single(output.text.as_bytes()).map_err(|e| {
        OffloadError::NotJson {
            handle: output.handle.clone(),
            message: e.to_string(),
        }
    })?;
    let ctx = Ctx::<data::JustLut<Val>>::new(&compiled.lut, Vars::new([]));
    let mut results = Vec::new();
    let mut used = 0usize;
    let mut truncated = false;
    let mut halted = None;
    for item in compiled.id.run((ctx, input)) {
        // Not `jaq_core::unwrap_valr`: it exits the process on `halt`.
        let value = match item {
            Ok(value) => value,
            Err(exn) => match exn.get_err() {
                Ok(err) => {
                    return Err(OffloadError::FilterFailed {
                        filter: filter.to_string(),
                        message: err.to_string(),
                    })
                }
                Err(exn) => {
                    halted = Some(exn.get_halt().unwrap_or(-1));
                    break;
                }
            },
        };
        if results.len() >= max_results {
            truncated = true;
            break;
        }
        let text = value.to_string();
        let size = text.chars().count();
        if used + size > max_chars {
            truncated = true;
            if results.is_empty() {
                // One huge value: its head, as text, so the caller sees what it is.
                let cut: String = text.chars().take(max_chars).collect();
                results.push(json!(cut));
            }
            break;
        }
        used += size;
        // jaq values are a superset of JSON (byte strings, NaN); what JSON cannot hold stays text.
        results.push(serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)));
    }
    let mut out = json!({
        "handle": output.handle,
        "filter": filter,
        "returned": results.len(),
        "truncated": truncated,
        "results": results,
    });
    if truncated {
        out["note"] = json!(format!(
            "more results than fit (at most {max_results} values and {max_chars} characters); narrow the filter, e.g. with .[0:10] or limit(10; ...)"
        ));
    }
    if let Some(code) = halted {
        out["halted"] = json!(code);
    }
    Ok(out)
}

/// `line L, column C` of a slice of `code` (jaq reports errors as slices of the filter).
fn position(code: &str, part: &str) -> String {
    let start = (part.as_ptr() as usize).wrapping_sub(code.as_ptr() as usize);
    if start > code.len() {
        return "an unknown position".into();
    }
    let before = &code[..floor_char_boundary(code, start)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {column}")
}

fn describe_load_errors(code: &str, errors: jaq_core::load::Errors<&str, ()>) -> String {
    use jaq_core::load::{lex, Error};
    let found = |s: &str| {
        let token: String = s.chars().take(20).collect();
        if token.is_empty() {
            "the end of the filter".to_string()
        } else {
            format!("`{token}`")
        }
    };
    let mut parts = Vec::new();
    for (_, error) in errors {
        match error {
            Error::Io(errs) => {
                for (path, message) in errs {
                    parts.push(format!("cannot load module `{path}`: {message}"));
                }
            }
            Error::Lex(errs) => {
                for (expect, at) in errs {
                    // `Expect::as_str` panics on delimiters it does not know.
                    let expected = match &expect {
                        lex::Expect::Delim(d) if !["(", "[", "{", "\""].contains(d) => {
                            format!("closing `{d}`")
                        }
                        other => other.as_str().to_string(),
                    };
                    parts.push(format!(
                        "expected {expected}, found {} at {}",
                        found(at),
                        position(code, at)
                    ));
                }
            }
            Error::Parse(errs) => {
                for (expect, at) in errs {
                    parts.push(format!(
                        "expected {}, found {} at {}",
                        expect.as_str(),
                        found(at),
                        position(code, at)
                    ));
                }
            }
        }
    }
    if parts.is_empty() {
        "the filter cannot be parsed".into()
    } else {
        parts.join("; ")
    }
}

/// The shape of a JSON value, one level deep (two for arrays of objects): type, keys with
/// their types, array lengths, string lengths.
pub fn outline(value: &Value) -> Value {
    fn shape(value: &Value) -> Value {
        match value {
            Value::Null => json!({"type": "null"}),
            Value::Bool(_) => json!({"type": "boolean"}),
            Value::Number(_) => json!({"type": "number"}),
            Value::String(s) => json!({"type": "string", "chars": s.chars().count()}),
            Value::Array(items) => json!({"type": "array", "length": items.len()}),
            Value::Object(map) => json!({"type": "object", "keys": map.len()}),
        }
    }
    fn keys(map: &Map<String, Value>) -> Value {
        let mut out = Map::new();
        for (key, value) in map.iter().take(OUTLINE_KEYS) {
            out.insert(key.clone(), shape(value));
        }
        if map.len() > OUTLINE_KEYS {
            out.insert(
                "…".into(),
                json!(format!("{} more keys", map.len() - OUTLINE_KEYS)),
            );
        }
        Value::Object(out)
    }
    match value {
        Value::Object(map) => json!({"type": "object", "keys": keys(map)}),
        Value::Array(items) => {
            let mut out = json!({"type": "array", "length": items.len()});
            let mut types: Vec<&str> = items
                .iter()
                .map(|v| match v {
                    Value::Null => "null",
                    Value::Bool(_) => "boolean",
                    Value::Number(_) => "number",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                })
                .collect();
            types.sort_unstable();
            types.dedup();
            out["itemTypes"] = json!(types);
            if let Some(Value::Object(first)) = items.first() {
                out["firstItemKeys"] = keys(first);
            }
            out
        }
        other => shape(other),
    }
}

/// The three tools' definitions, as tools/list shows them.
pub fn tool_definitions(config: &OffloadConfig) -> Vec<Value> {
    let max = config.max_read_chars;
    vec![
        json!({
            "name": READ_TOOL,
            "description": format!("Read a character range of a large tool output that was stored instead of returned (the result said `offloaded` and gave a handle). Returns the text of [offset, offset + length), the output's total `chars`, and `nextOffset` to continue from (null at the end). At most {max} characters per call."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "handle": {"type": "string", "description": "The handle from the offloaded result, e.g. `out-3-1a2b3c4d`."},
                    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "First character to return (0-based, in characters, not bytes); must be less than the output's `chars`."},
                    "length": {"type": "integer", "minimum": 1, "maximum": max, "default": max, "description": format!("Number of characters to return; capped at {max}.")}
                },
                "required": ["handle"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        json!({
            "name": SEARCH_TOOL,
            "description": format!("Search a large stored tool output line by line. Returns matching lines with their line number, column and character `offset` (usable with {READ_TOOL}), and the lines around each. `mode` = \"words\" (default): lines containing every word, case-insensitive; `mode` = \"regex\": a Rust regex (use (?i) for case-insensitive). Long lines are clipped around the match."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "handle": {"type": "string", "description": "The handle from the offloaded result."},
                    "pattern": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS, "description": "Words to find (all must occur in a line), or a regex when mode is \"regex\"."},
                    "mode": {"type": "string", "enum": ["words", "regex"], "default": "words", "description": "How to read `pattern`."},
                    "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT_LINES, "default": DEFAULT_CONTEXT_LINES, "description": "Lines shown before and after each match."},
                    "max_matches": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES, "default": DEFAULT_MAX_MATCHES, "description": "Most matches returned; `totalMatches` counts them all."}
                },
                "required": ["handle", "pattern"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        json!({
            "name": QUERY_TOOL,
            "description": format!("Run a jq filter over a large stored tool output that is JSON, e.g. `.items | length`, `.items[0:5]`, `[.items[] | select(.status == \"open\") | .id]`, `keys`. Returns the filter's output values (at most max_results, about {max} characters in all)."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "handle": {"type": "string", "description": "The handle from the offloaded result."},
                    "filter": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS, "description": "A jq filter (jq 1.7 syntax, as implemented by jaq)."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": DEFAULT_MAX_RESULTS, "description": "Most output values returned."}
                },
                "required": ["handle", "filter"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
    ]
}

/// A sentence for the client's instructions.
pub fn guidance(config: &OffloadConfig) -> String {
    format!(
        "Tool outputs larger than {} bytes are stored instead of returned: the result gives a handle, a preview and (for JSON) an outline. Read them with {READ_TOOL}, {SEARCH_TOOL} or {QUERY_TOOL} (jq).",
        config.threshold_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(threshold: usize, max_bytes: usize, max_outputs: usize) -> OffloadConfig {
        OffloadConfig {
            threshold_bytes: threshold,
            max_bytes_per_session: max_bytes,
            max_outputs_per_session: max_outputs,
            preview_chars: 20,
            max_read_chars: 100,
            ..OffloadConfig::default()
        }
    }

    fn text_result(text: &str) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    fn stored(text: &str) -> StoredOutput {
        StoredOutput::new("out-1-x".into(), "s___t".into(), text.into())
    }

    #[test]
    fn store_drops_oldest_past_count_and_bytes() {
        let store = OffloadStore::new(config(10, 100, 3));
        let handles: Vec<String> = (0..4)
            .map(|i| {
                store
                    .put("a", "t", format!("{i}").repeat(20))
                    .output
                    .handle
                    .clone()
            })
            .collect();
        assert_eq!(store.handles("a"), handles[1..]);
        assert!(matches!(
            store.get("a", &handles[0]),
            Err(OffloadError::Dropped { .. })
        ));
        // 3 × 20 bytes held; 70 more: one goes for the count, one for the bytes.
        let big = store.put("a", "t", "x".repeat(70)).output.handle.clone();
        assert_eq!(store.handles("a"), [handles[3].clone(), big]);
        assert_eq!(store.session_bytes("a"), 90);
    }

    #[test]
    fn store_cuts_an_output_larger_than_the_session_budget() {
        let store = OffloadStore::new(config(10, 100, 3));
        let s = store.put("a", "t", "é".repeat(80));
        assert_eq!(s.cut_from, Some(160));
        assert_eq!(s.output.text.len(), 100);
        assert_eq!(s.output.chars, 50);
    }

    #[test]
    fn handles_never_cross_sessions_and_session_end_drops_them() {
        let store = OffloadStore::new(config(10, 100, 3));
        let a = store.put("a", "t", "x".repeat(20)).output.handle.clone();
        let b = store.put("b", "t", "y".repeat(20)).output.handle.clone();
        assert_ne!(a, b);
        let err = store.get("b", &a).unwrap_err();
        assert!(matches!(err, OffloadError::UnknownHandle { .. }), "{err}");
        assert!(
            err.to_string().contains(&b),
            "lists the session's own: {err}"
        );
        assert!(store.get("a", &a).is_ok());
        store.end_session("a");
        assert!(store.get("a", &a).is_err());
        assert!(store.get("b", &b).is_ok());
    }

    #[test]
    fn small_and_non_text_results_pass_unchanged() {
        let store = OffloadStore::new(config(10, 100, 3));
        let small = store.offload_result("a", "t", text_result("short"));
        assert_eq!(small.content[0].as_text().unwrap().text, "short");
        assert!(small.structured_content.is_none());

        let image = ContentBlock::image("AAAA".repeat(100), "image/png");
        let mixed = CallToolResult::success(vec![
            image.clone(),
            ContentBlock::text("a".repeat(30)),
            ContentBlock::text("b".repeat(30)),
        ]);
        let out = store.offload_result("a", "s___t", mixed);
        assert_eq!(out.content.len(), 2);
        assert_eq!(out.content[0], image, "non-text parts keep their place");
        let info = &out.structured_content.as_ref().unwrap()["offloaded"];
        assert_eq!(info["chars"], 61);
        assert_eq!(info["tool"], "s___t");
        let handle = info["handle"].as_str().unwrap();
        let notice = &out.content[1].as_text().unwrap().text;
        assert!(
            notice.contains(handle) && notice.contains(READ_TOOL),
            "{notice}"
        );
        let text = &store.get("a", handle).unwrap().text;
        assert_eq!(text, &format!("{}\n{}", "a".repeat(30), "b".repeat(30)));

        let off = OffloadStore::new(OffloadConfig {
            enabled: false,
            ..config(10, 100, 3)
        });
        let big = off.offload_result("a", "t", text_result(&"z".repeat(50)));
        assert_eq!(big.content[0].as_text().unwrap().text.len(), 50);
    }

    #[test]
    fn json_outputs_get_an_outline() {
        let value = json!({"items": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], "next": "abc", "total": 2});
        assert_eq!(
            outline(&value),
            json!({"type": "object", "keys": {
                "items": {"type": "array", "length": 2},
                "next": {"type": "string", "chars": 3},
                "total": {"type": "number"}
            }})
        );
        assert_eq!(
            outline(&json!([{"id": 1}, 2])),
            json!({"type": "array", "length": 2, "itemTypes": ["number", "object"], "firstItemKeys": {"id": {"type": "number"}}})
        );
        let wide: Map<String, Value> = (0..50).map(|i| (format!("k{i}"), json!(i))).collect();
        let o = outline(&Value::Object(wide));
        assert_eq!(o["keys"]["…"], "10 more keys");

        let store = OffloadStore::new(config(10, 1000, 3));
        let out = store.offload_result("a", "t", text_result(&value.to_string()));
        let info = &out.structured_content.unwrap()["offloaded"];
        assert_eq!(info["outline"]["keys"]["items"]["length"], 2);
        assert_eq!(info["preview"].as_str().unwrap().chars().count(), 20);
    }

    #[test]
    fn read_ranges_in_characters() {
        let output = stored("héllo wörld, and more");
        let r = read_range(&output, 1, Some(4), 100).unwrap();
        assert_eq!(r["text"], "éllo");
        assert_eq!(r["nextOffset"], 5);
        let r = read_range(&output, 17, None, 100).unwrap();
        assert_eq!(r["text"], "more");
        assert_eq!(r["nextOffset"], Value::Null);
        let r = read_range(&output, 0, Some(50), 5).unwrap();
        assert_eq!(r["length"], 5);
        assert!(r["note"].as_str().unwrap().contains("capped"));
        let err = read_range(&output, 21, None, 100).unwrap_err();
        assert!(
            matches!(err, OffloadError::OffsetOutOfRange { chars: 21, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("between 0 and 20"), "{err}");
    }

    fn search_args(pattern: &str, mode: SearchMode, context: usize) -> SearchArgs {
        SearchArgs {
            handle: "out-1-x".into(),
            pattern: pattern.into(),
            mode,
            context: Some(context),
            max_matches: None,
        }
    }

    #[test]
    fn search_lines_with_context_and_offsets() {
        let output = stored("alphä\r\nbeta gamma\ngamma delta\nepsilon\nGamma beta");
        let r = search(
            &output,
            &search_args("GAMMA beta", SearchMode::Words, 1),
            10_000,
        )
        .unwrap();
        assert_eq!(r["totalMatches"], 2, "{r}");
        let first = &r["matches"][0];
        assert_eq!(first["line"], 2);
        assert_eq!(first["before"], json!([{"line": 1, "text": "alphä"}]));
        assert_eq!(first["after"], json!([{"line": 3, "text": "gamma delta"}]));
        // "gamma" starts at character 5 of line 2, which starts at character 7.
        assert_eq!(first["offset"], 12);
        assert_eq!(
            read_range(&output, 12, Some(5), 100).unwrap()["text"],
            "gamma"
        );
        assert_eq!(r["matches"][1]["line"], 5);
        assert_eq!(r["matches"][1]["after"], json!([]));

        let r = search(
            &output,
            &search_args(r"^\w+ a$|delta$", SearchMode::Regex, 0),
            10_000,
        )
        .unwrap();
        assert_eq!(r["totalMatches"], 1);
        assert_eq!(r["matches"][0]["column"], 7);

        let err = search(
            &output,
            &search_args("(unclosed", SearchMode::Regex, 0),
            10_000,
        )
        .unwrap_err();
        assert!(matches!(err, OffloadError::BadRegex { .. }));
        assert!(err.to_string().contains("unclosed group"), "{err}");
    }

    #[test]
    fn search_is_bounded() {
        let text: String = (0..500).map(|i| format!("line {i} needle\n")).collect();
        let output = stored(&text);
        let mut args = search_args("needle", SearchMode::Words, 0);
        args.max_matches = Some(7);
        let r = search(&output, &args, 100_000).unwrap();
        assert_eq!(r["totalMatches"], 500);
        assert_eq!(r["returned"], 7);
        assert_eq!(r["truncated"], true);
        let r = search(&output, &search_args("needle", SearchMode::Words, 0), 300).unwrap();
        assert!(r.to_string().len() < 600, "{r}");
        assert_eq!(r["truncated"], true);
        // A single long line is clipped around the match.
        let long = format!("{}needle{}", "x".repeat(5000), "y".repeat(5000));
        let r = search(
            &stored(&long),
            &search_args("needle", SearchMode::Words, 0),
            10_000,
        )
        .unwrap();
        let shown = r["matches"][0]["text"].as_str().unwrap();
        assert!(shown.contains("needle") && shown.chars().count() <= MATCH_LINE_CHARS + 2);
    }

    #[test]
    fn jq_queries_and_their_errors() {
        let output = stored(
            r#"{"items": [{"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}, {"id": 3, "tag": "a"}]}"#,
        );
        let r = query(
            &output,
            r#"[.items[] | select(.tag == "a") | .id]"#,
            10,
            1000,
        )
        .unwrap();
        assert_eq!(r["results"], json!([[1, 3]]));
        let r = query(&output, ".items[].id", 2, 1000).unwrap();
        assert_eq!(r["results"], json!([1, 2]));
        assert_eq!(r["truncated"], true);
        let r = query(&output, "(.items | length), (keys | length)", 10, 1000).unwrap();
        assert_eq!(r["results"], json!([3, 1]));
        let r = query(&output, ".items", 10, 10).unwrap();
        assert_eq!(r["truncated"], true);
        assert_eq!(r["results"][0].as_str().unwrap().chars().count(), 10);

        let err = query(&output, ".items[", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::BadFilter { .. }), "{err}");
        assert!(err.to_string().contains("column"), "{err}");
        let err = query(&output, "nosuchfunction(1)", 10, 1000).unwrap_err();
        assert!(
            err.to_string()
                .contains("undefined filter `nosuchfunction`"),
            "{err}"
        );
        let err = query(&output, "env", 10, 1000).unwrap_err();
        assert!(
            err.to_string().contains("undefined"),
            "env is not offered: {err}"
        );
        let err = query(&output, ".items + 1", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::FilterFailed { .. }), "{err}");
        // halt ends the query instead of the process.
        let r = query(&output, "1, halt", 10, 1000).unwrap();
        assert_eq!(r["results"], json!([1]));
        assert_eq!(r["halted"], 0);

        let err = query(&stored("not json"), ".", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::NotJson { .. }), "{err}");
    }

    #[tokio::test]
    async fn tools_check_their_arguments() {
        let store = OffloadStore::new(config(10, 1000, 3));
        let handle = store.put("a", "t", "x".repeat(30)).output.handle.clone();
        let t = Duration::from_secs(5);
        let r = store
            .call("a", READ_TOOL, json!({"handle": handle, "offset": 28}), t)
            .await
            .unwrap();
        assert_eq!(r["text"], "xx");
        let err = store
            .call("a", READ_TOOL, json!({"handle": handle, "ofset": 1}), t)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("ofset"), "{err}");
        let err = store
            .call("a", SEARCH_TOOL, Value::Null, t)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("handle"), "{err}");
        let err = store
            .call("b", QUERY_TOOL, json!({"handle": handle, "filter": "."}), t)
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::UnknownHandle { .. }), "{err}");
    }

    #[test]
    fn definitions_are_valid_mcp_tools() {
        let defs = tool_definitions(&OffloadConfig::default());
        let names: Vec<_> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(names, TOOL_NAMES);
        for def in defs {
            serde_json::from_value::<rmcp::model::Tool>(def).unwrap();
        }
    }
}
