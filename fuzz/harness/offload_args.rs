//! One input of the `offload_args` fuzz target, shared with its replay on stable
//! (`crates/toolsearch-gateway/tests/fuzz_corpora.rs`): an upstream's large output and a call to
//! one of the large-output tools on it, written as three parts:
//!
//! ```text
//! search_large_output
//! {"handle": "h", "pattern": "error", "context": 1}
//! ...the output, any text, to the end...
//! ```
//!
//! The tool's name, its arguments (JSON; a `handle` of `"h"` stands for the stored output's
//! handle), then the output. The output goes through the offloading of a result (notice, preview,
//! JSON outline, cut to the session budget); the arguments through `OffloadCall::parse`, which
//! refuses them as invalid or reads them; a read or a search then runs on the stored output and
//! answers or refuses. A query stops before its jq worker: filters run in a child process, never
//! here. Reads return the characters asked for, within the bound.

use serde_json::Value;
use toolsearch_gateway::config::OffloadConfig;
use toolsearch_gateway::offload::{OffloadCall, OffloadError, OffloadStore, OffloadTool};
use toolsearch_gateway::rmcp::model::{CallToolResult, ContentBlock};

const SESSION: &str = "fuzz";
/// Small bounds, so that inputs reach them.
const CONFIG: OffloadConfig = OffloadConfig {
    enabled: true,
    threshold_bytes: 32,
    max_bytes_per_session: 4096,
    max_outputs_per_session: 2,
    preview_chars: 40,
    max_read_chars: 256,
};

/// How far one input went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not a tool name, arguments and an output.
    Skipped,
    /// The arguments were refused by `OffloadCall::parse`.
    Invalid,
    /// The call was read; a query stops here.
    Parsed(OffloadTool),
    /// The call ran and was refused (unknown handle, offset out of range, bad regex).
    Refused(OffloadTool),
    /// The call ran and answered.
    Answered(OffloadTool),
}

/// Checks one input; panics when a property does not hold.
pub fn check(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Skipped;
    };
    let mut parts = text.splitn(3, '\n');
    let (Some(tool), Some(arguments)) = (parts.next(), parts.next()) else {
        return Outcome::Skipped;
    };
    let Some(tool) = OffloadTool::from_name(tool.trim()) else {
        return Outcome::Skipped;
    };
    let Ok(mut arguments) = serde_json::from_str::<Value>(arguments) else {
        return Outcome::Skipped;
    };
    let output = parts.next().unwrap_or_default();

    let store = OffloadStore::new(CONFIG);
    let result = store.offload_result(
        SESSION,
        "server___tool",
        CallToolResult::success(vec![ContentBlock::text(output)]),
    );
    let handles = store.handles(SESSION);
    let stored = match handles.first() {
        Some(handle) => {
            assert!(output.len() > CONFIG.threshold_bytes);
            let info = &result.structured_content.as_ref().expect("a notice")["offloaded"];
            assert_eq!(info["handle"].as_str(), Some(handle.as_str()), "{info}");
            let kept = store.get(SESSION, handle).expect("the handle just given");
            assert!(kept.text.len() <= CONFIG.max_bytes_per_session);
            assert!(output.starts_with(kept.text.as_str()));
            Some(kept)
        }
        None => {
            assert!(output.len() <= CONFIG.threshold_bytes);
            assert_eq!(
                result.content[0].as_text().map(|t| t.text.as_str()),
                Some(output)
            );
            None
        }
    };
    if let (Some(stored), Some(handle)) = (&stored, arguments.get_mut("handle")) {
        if handle == "h" {
            *handle = Value::String(stored.handle.clone());
        }
    }
    let offset = arguments.get("offset").and_then(Value::as_u64);

    let call = match OffloadCall::parse(tool, arguments) {
        Ok(call) => call,
        Err(e) => {
            // Refused by the tool's schema (the core's check), or by a bound the schema does
            // not state.
            assert!(
                matches!(
                    e,
                    OffloadError::Arguments(_) | OffloadError::InvalidArguments { .. }
                ),
                "{e}"
            );
            return Outcome::Invalid;
        }
    };
    assert_eq!(call.tool(), tool);
    let Some(answer) = store.call_in_process(SESSION, &call) else {
        assert_eq!(tool, OffloadTool::Query, "only queries leave the process");
        return Outcome::Parsed(tool);
    };
    let value = match answer {
        Ok(value) => value,
        Err(e) => {
            assert!(
                matches!(
                    e,
                    OffloadError::InvalidArguments { .. }
                        | OffloadError::OffsetOutOfRange { .. }
                        | OffloadError::UnknownHandle { .. }
                        | OffloadError::BadRegex { .. }
                ),
                "{e}"
            );
            assert!(!e.to_string().is_empty());
            return Outcome::Refused(tool);
        }
    };
    let stored = stored.expect("an answer reads a stored output");
    match tool {
        OffloadTool::Read => {
            let text = value["text"].as_str().expect("a read's text");
            let length = text.chars().count();
            assert!((1..=CONFIG.max_read_chars).contains(&length), "{value}");
            let offset = offset.unwrap_or(0) as usize;
            let expected: String = stored.text.chars().skip(offset).take(length).collect();
            assert_eq!(text, expected);
            match value["nextOffset"].as_u64() {
                Some(next) => assert_eq!(next as usize, offset + length),
                None => assert_eq!(offset + length, stored.chars),
            }
        }
        OffloadTool::Search => {
            let returned = value["returned"].as_u64().expect("a search's count") as usize;
            assert!(returned <= 200, "{value}");
            assert!(value["totalMatches"]
                .as_u64()
                .is_some_and(|t| t as usize >= returned));
        }
        OffloadTool::Query => unreachable!("queries leave the process"),
    }
    Outcome::Answered(tool)
}
