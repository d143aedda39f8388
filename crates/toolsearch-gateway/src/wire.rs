//! What the gateway reads from a stdio upstream, line by line, before the MCP library parses it.
//!
//! The JSON parser stops at 128 levels of nesting, and the MCP library then drops the whole message:
//! one tool with a schema nested 200 levels hid every tool of its server (tools/list never
//! answered), and a result nested 300 levels became a timeout. Here every line is measured without
//! parsing it (any depth is safe) and a line nested deeper than [`MAX_WIRE_DEPTH`] is rewritten:
//! an answer to `tools/list` keeps its shape with the too-deep values replaced by a marker (the
//! tools holding them are then left out one by one, for their schema's depth), any other answer
//! becomes a JSON-RPC error for its request saying why, and anything else is dropped with a warning.

use std::borrow::Cow;

use serde_json::{json, Value};
use toolsearch_core::catalog::json_depth;

/// Nesting read from an upstream, below the JSON parser's own limit of 128.
pub(crate) const MAX_WIRE_DEPTH: usize = 100;

/// Stands in for a value nested deeper than [`MAX_WIRE_DEPTH`].
const MARKER: &str = "\"(nested too deep)\"";

/// The line the MCP library may read in place of `line` (without its newline), or `None` to drop it.
pub(crate) fn guard_line<'a>(server: &str, line: &'a [u8]) -> Option<Cow<'a, [u8]>> {
    let depth = json_depth(line);
    if depth <= MAX_WIRE_DEPTH {
        return Some(Cow::Borrowed(line));
    }
    let pruned = prune(line, MAX_WIRE_DEPTH);
    let Ok(message) = serde_json::from_slice::<Value>(&pruned) else {
        tracing::warn!(target: "upstream", server, depth, "dropped a message nested {depth} levels deep that is not valid JSON either");
        return None;
    };
    let id = message.get("id").filter(|id| !id.is_null()).cloned();
    let is_answer = message.get("result").is_some() || message.get("error").is_some();
    match (id, is_answer) {
        (Some(_), true)
            if message
                .pointer("/result/tools")
                .is_some_and(Value::is_array) =>
        {
            tracing::debug!(target: "upstream", server, depth, "tools/list nested {depth} levels deep; its deepest values are cut");
            Some(Cow::Owned(pruned))
        }
        (Some(id), true) => {
            tracing::warn!(target: "upstream", server, depth, "an answer nested {depth} levels deep was refused");
            let error = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": -32603,
                    "message": format!(
                        "the answer of server `{server}` nests {depth} levels deep, more than the {MAX_WIRE_DEPTH} the gateway reads; the server must return flatter JSON"
                    ),
                },
            });
            Some(Cow::Owned(error.to_string().into_bytes()))
        }
        _ => {
            tracing::warn!(target: "upstream", server, depth, "dropped a message nested {depth} levels deep, more than the {MAX_WIRE_DEPTH} the gateway reads");
            None
        }
    }
}

/// `text` with every object or array that opens deeper than `max` replaced by [`MARKER`].
fn prune(text: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Depth at which the value being skipped opened; nothing is copied while it is set.
    let mut skipping: Option<usize> = None;
    for &b in text {
        let copy = skipping.is_none();
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    if skipping.is_none() && depth > max {
                        skipping = Some(depth);
                        out.extend_from_slice(MARKER.as_bytes());
                        continue;
                    }
                }
                b'}' | b']' => {
                    if skipping == Some(depth) {
                        skipping = None;
                        depth = depth.saturating_sub(1);
                        continue;
                    }
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            }
        }
        if copy && skipping.is_none() {
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn shallow_lines_pass_unchanged() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert!(matches!(guard_line("s", line), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn a_deep_answer_becomes_an_error_for_its_request() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"structuredContent":{{"a":{}}}}}}}"#,
            nested(300)
        );
        let out = guard_line("deep", line.as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 7);
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("server `deep` nests 303 levels"),
            "{message}"
        );
    }

    #[test]
    fn a_deep_tool_list_keeps_its_other_tools() {
        let deep_schema = format!(r#"{{"type":"object","x":{}}}"#, nested(200));
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"tools":[{{"name":"ok","inputSchema":{{"type":"object"}}}},{{"name":"deep","inputSchema":{deep_schema}}}]}}}}"#
        );
        let out = guard_line("s", line.as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let tools = v["result"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(
            tools[0],
            json!({"name":"ok","inputSchema":{"type":"object"}})
        );
        assert_eq!(tools[1]["name"], "deep");
        assert!(json_depth(tools[1]["inputSchema"].to_string().as_bytes()) > 64);
        assert!(out.len() < line.len());
    }

    #[test]
    fn brackets_in_strings_are_not_nesting() {
        let text = format!(r#"["{}",[[1]]]"#, "[".repeat(500));
        assert_eq!(
            prune(text.as_bytes(), 2),
            format!(r#"["{}",[{MARKER}]]"#, "[".repeat(500)).into_bytes()
        );
    }

    #[test]
    fn a_deep_notification_is_dropped() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}}}"#,
            nested(150)
        );
        assert!(guard_line("s", line.as_bytes()).is_none());
    }
}
