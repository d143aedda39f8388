//! A session's tool list as the tool arrays of provider APIs. Every writer keeps the list's order,
//! so a reveal (which appends) leaves the prefix, and providers' prompt caches, intact.

use crate::disclosure::{ExposedTool, Exposure};
use serde_json::{json, Map, Value};

/// MCP `tools/list` result: `{"tools": [{"name", "description", "inputSchema", "annotations"?}]}`.
pub fn mcp_tools_list(tools: &[ExposedTool]) -> Value {
    json!({ "tools": serde_json::to_value(tools).unwrap_or_else(|_| json!([])) })
}

/// OpenAI Chat Completions `tools`: `[{"type": "function", "function": {...}}]`.
pub fn openai_chat_tools(tools: &[ExposedTool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": object_schema(&t.input_schema),
                    }
                })
            })
            .collect(),
    )
}

/// OpenAI Responses `tools` (flat). `strict` is set to false because the Responses API turns it
/// on by default, and strict mode rejects ordinary MCP schemas (optional fields, open objects).
pub fn openai_responses_tools(tools: &[ExposedTool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": object_schema(&t.input_schema),
                    "strict": false,
                })
            })
            .collect(),
    )
}

/// Anthropic Messages `tools`. Tools exposed as [`Exposure::Deferred`] carry
/// `defer_loading: true`: the API keeps them out of the context until a `tool_reference` to them
/// comes back from a search (see [`anthropic_tool_search_result`]).
pub fn anthropic_tools(tools: &[ExposedTool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": object_schema(&t.input_schema),
                });
                if t.exposure == Exposure::Deferred {
                    tool["defer_loading"] = json!(true);
                }
                tool
            })
            .collect(),
    )
}

/// `tool_reference` content blocks, one per tool name, in order.
pub fn anthropic_tool_references(names: &[String]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"type": "tool_reference", "tool_name": n}))
            .collect(),
    )
}

/// The `tool_result` block answering a client-side tool search: `tool_reference` blocks for the
/// matches, or a text block when nothing matched (an empty result would tell the model nothing).
pub fn anthropic_tool_search_result(tool_use_id: &str, names: &[String]) -> Value {
    let content = if names.is_empty() {
        json!([{"type": "text", "text": "No tools matched; try other keywords."}])
    } else {
        anthropic_tool_references(names)
    };
    json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content})
}

/// Gemini `tools`: `[{"functionDeclarations": [...]}]`, with schemas reduced to the subset of
/// OpenAPI that Gemini accepts (see [`gemini_schema`]). A tool without parameters has no
/// `parameters` field, since Gemini rejects an object schema without properties; a placeholder
/// schema's instructions move into the description so they are not lost.
pub fn gemini_tools(tools: &[ExposedTool]) -> Value {
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut description = t.description.clone();
            let mut declaration = Map::new();
            declaration.insert("name".into(), json!(t.name));
            let parameters = gemini_schema(&t.input_schema);
            let has_properties = parameters
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty());
            if !has_properties {
                if let Some(note) = t.input_schema.get("description").and_then(Value::as_str) {
                    if !description.is_empty() {
                        if !description.ends_with(['.', '!', '?']) {
                            description.push('.');
                        }
                        description.push(' ');
                    }
                    description.push_str(note);
                }
            }
            declaration.insert("description".into(), json!(description));
            if has_properties {
                declaration.insert("parameters".into(), parameters);
            }
            Value::Object(declaration)
        })
        .collect();
    json!([{ "functionDeclarations": declarations }])
}

/// The schema with `"type": "object"` and `"properties"`, which OpenAI and Anthropic require at
/// the top level.
fn object_schema(schema: &Value) -> Value {
    let mut schema = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Value::Object(schema)
}

/// Keywords Gemini's schema subset accepts; everything else (`$schema`, `additionalProperties`,
/// `default`, `examples`, `$defs`, ...) is dropped.
const GEMINI_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "anyOf",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
];

/// Formats Gemini accepts; others are dropped rather than rejected.
const GEMINI_FORMATS: &[&str] = &["enum", "date-time", "int32", "int64", "float", "double"];

/// Nesting depth past which `$ref`s are no longer inlined (recursive schemas).
const MAX_REF_DEPTH: usize = 8;

/// A JSON Schema reduced to what Gemini accepts: local `$ref`s inlined, `const` as a one-value
/// enum, `oneOf` as `anyOf`, `allOf` merged, `["string", "null"]` as `nullable`, non-string enums
/// and unknown formats dropped, `required` limited to declared properties.
pub fn gemini_schema(schema: &Value) -> Value {
    clean(schema, schema, 0)
}

fn clean(node: &Value, root: &Value, depth: usize) -> Value {
    let Some(map) = node.as_object() else {
        return json!({"type": "string"});
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        return match resolve_ref(root, reference) {
            Some(target) if depth < MAX_REF_DEPTH => {
                let mut inlined = clean(target, root, depth + 1);
                if let (Some(d), Some(obj)) = (map.get("description"), inlined.as_object_mut()) {
                    obj.insert("description".into(), d.clone());
                }
                inlined
            }
            _ => json!({"type": "object"}),
        };
    }
    let merged;
    let map = match map.get("allOf").and_then(Value::as_array) {
        Some(parts) => {
            merged = merge_all_of(map, parts, root);
            &merged
        }
        None => map,
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    let non_null: Vec<&Value> = types
                        .iter()
                        .filter(|t| t.as_str() != Some("null"))
                        .collect();
                    if non_null.len() < types.len() {
                        out.insert("nullable".into(), json!(true));
                    }
                    if let Some(first) = non_null.first() {
                        out.insert("type".into(), (*first).clone());
                    }
                }
                Value::String(t) if t == "null" => {
                    out.insert("nullable".into(), json!(true));
                }
                other => {
                    out.insert("type".into(), other.clone());
                }
            },
            "const" => {
                if let Some(s) = value.as_str() {
                    out.insert("enum".into(), json!([s]));
                }
            }
            "enum" => {
                if let Some(values) = value.as_array() {
                    if values.iter().all(Value::is_string) {
                        out.insert("enum".into(), value.clone());
                    }
                }
            }
            "format" if value.as_str().is_some_and(|f| GEMINI_FORMATS.contains(&f)) => {
                out.insert("format".into(), value.clone());
            }
            "format" => {}
            "properties" => {
                if let Some(props) = value.as_object() {
                    let cleaned: Map<String, Value> = props
                        .iter()
                        .map(|(k, v)| (k.clone(), clean(v, root, depth)))
                        .collect();
                    out.insert("properties".into(), Value::Object(cleaned));
                }
            }
            "items" => {
                let item = match value {
                    Value::Array(tuple) => tuple.first().cloned().unwrap_or(json!({})),
                    other => other.clone(),
                };
                out.insert("items".into(), clean(&item, root, depth));
            }
            "anyOf" | "oneOf" => {
                if let Some(options) = value.as_array() {
                    let cleaned: Vec<Value> =
                        options.iter().map(|o| clean(o, root, depth)).collect();
                    out.insert("anyOf".into(), Value::Array(cleaned));
                }
            }
            "required" => {}
            k if GEMINI_KEYS.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    if let (Some(required), Some(props)) = (
        map.get("required").and_then(Value::as_array),
        out.get("properties").and_then(Value::as_object),
    ) {
        let kept: Vec<Value> = required
            .iter()
            .filter(|r| r.as_str().is_some_and(|r| props.contains_key(r)))
            .cloned()
            .collect();
        if !kept.is_empty() {
            out.insert("required".into(), Value::Array(kept));
        }
    }
    if !out.contains_key("type") && !out.contains_key("anyOf") {
        // Gemini enums are string enums and need their type.
        if out.contains_key("enum") {
            out.insert("type".into(), json!("string"));
        } else if out.contains_key("properties") {
            out.insert("type".into(), json!("object"));
        } else if out.contains_key("items") {
            out.insert("type".into(), json!("array"));
        }
    }
    Value::Object(out)
}

fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

/// `allOf` folded into its parent: properties and `required` are unions, other keys first wins.
fn merge_all_of(parent: &Map<String, Value>, parts: &[Value], root: &Value) -> Map<String, Value> {
    let mut merged: Map<String, Value> = parent
        .iter()
        .filter(|(k, _)| k.as_str() != "allOf")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for part in parts {
        let part = match part.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve_ref(root, r).unwrap_or(part),
            None => part,
        };
        let Some(part) = part.as_object() else {
            continue;
        };
        for (key, value) in part {
            match key.as_str() {
                "properties" => {
                    let into = merged.entry("properties").or_insert_with(|| json!({}));
                    if let (Some(into), Some(from)) = (into.as_object_mut(), value.as_object()) {
                        for (k, v) in from {
                            into.entry(k.clone()).or_insert_with(|| v.clone());
                        }
                    }
                }
                "required" => {
                    let mut all: Vec<Value> = merged
                        .get("required")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    for r in value.as_array().into_iter().flatten() {
                        if !all.contains(r) {
                            all.push(r.clone());
                        }
                    }
                    merged.insert("required".into(), Value::Array(all));
                }
                _ => {
                    merged.entry(key.clone()).or_insert_with(|| value.clone());
                }
            }
        }
    }
    merged
}
