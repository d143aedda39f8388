//! What the model sees instead of a large output: the notice text (size, handle, the three tools,
//! the head of the text) and `structuredContent.offloaded`, with a JSON outline when the text is
//! JSON.

use serde_json::{json, Map, Value};

use super::output::Stored;
use super::OffloadTool;

/// Top-level keys listed in a JSON outline.
const OUTLINE_KEYS: usize = 40;

/// The notice text and `structuredContent` for a stored output, with a preview of
/// `preview_chars` characters.
pub(super) fn describe(stored: &Stored, preview_chars: usize) -> (String, Value) {
    let output = &stored.output;
    let text = &output.text;
    let head_end = output.byte_at(preview_chars);
    let preview = &text[..head_end];
    let lines = text.lines().count();
    // serde_json refuses documents nested deeper than 128 levels (no recursion past that), so a
    // deeper output simply gets no outline.
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
         Read it in pieces with these tools (through `call_tool` {{\"name\", \"arguments\"}} when they are not in your tool list): \
         {read} {{handle, offset?, length?}} returns a character range; \
         {search} {{handle, pattern, mode?: \"words\"|\"regex\", context?, max_matches?}} returns matching lines with line numbers and context; \
         {query} {{handle, filter, max_results?}} runs a jq filter when the output is JSON.\n",
        tool = output.tool,
        chars = output.chars,
        bytes = text.len(),
        handle = output.handle,
        read = OffloadTool::Read.name(),
        search = OffloadTool::Search.name(),
        query = OffloadTool::Query.name(),
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

/// The shape of a JSON value, one level deep (two for arrays of objects): type, keys with
/// their types, array lengths, string lengths. It never descends further, so it is bounded
/// whatever the nesting of `value`.
pub fn outline(value: &Value) -> Value {
    fn kind(value: &Value) -> &'static str {
        match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    fn shape(value: &Value) -> Value {
        match value {
            Value::String(s) => json!({"type": "string", "chars": s.chars().count()}),
            Value::Array(items) => json!({"type": "array", "length": items.len()}),
            Value::Object(map) => json!({"type": "object", "keys": map.len()}),
            other => json!({"type": kind(other)}),
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
            let mut types: Vec<&str> = items.iter().map(kind).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::tests::{config, text_result};
    use crate::offload::OffloadStore;

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

    /// Nesting far past any stack's worth of recursion: offloaded like any text, outlined only as
    /// deep as the outline looks, and without overflowing the stack.
    #[test]
    fn deeply_nested_json_is_offloaded_without_recursing() {
        let store = OffloadStore::new(config(10, 1_000_000, 3));
        for depth in [100, 300, 100_000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let out = store.offload_result("a", "t", text_result(&text));
            let info = &out.structured_content.unwrap()["offloaded"];
            assert_eq!(info["chars"], 2 * depth, "depth {depth}");
            if depth <= 128 {
                assert_eq!(
                    info["outline"],
                    json!({"type": "array", "length": 1, "itemTypes": ["array"]})
                );
            } else {
                assert!(info.get("outline").is_none(), "depth {depth}: {info}");
            }
        }
    }
}
