//! Provider payload shapes, as committed snapshots, and the order they keep across a reveal.

use super::disclosure_common;

use disclosure_common::{disclosure, engine, engine_with, names};
use insta::assert_json_snapshot;
use serde_json::{json, Value};
use toolsearch_core::formats::{
    anthropic_tool_search_result, anthropic_tools, gemini_schema, gemini_tools, mcp_tools_list,
    openai_chat_tools, openai_responses_tools,
};
use toolsearch_core::{
    CatalogPolicy, Disclosure, DisclosureConfig, ExposedTool, NamePattern, Preset,
};

/// A progressive session with one pinned tool and one revealed tool: meta-tools, full tools,
/// stubs and a reveal, trimmed to a few entries to keep the snapshots readable.
fn sample() -> Vec<ExposedTool> {
    let d = Disclosure::new(DisclosureConfig::default().preset(Preset::Progressive)).unwrap();
    let engine = engine_with(CatalogPolicy {
        pinned: vec![NamePattern::parse("files___read_file")],
        ..CatalogPolicy::default()
    });
    d.handle(
        "s",
        "tool_search",
        json!({"query": "weather___get_weather"}),
        &engine,
    )
    .unwrap();
    let all = d.visible_tools("s", &engine);
    let keep = [
        "tool_search",
        "files___read_file",
        "slack___send_message",
        "weather___get_weather",
    ];
    all.into_iter()
        .filter(|t| keep.contains(&t.name.as_str()))
        .collect()
}

#[test]
fn sample_order_is_meta_then_catalog_then_revealed() {
    assert_eq!(
        names(&sample()),
        [
            "tool_search",
            "files___read_file",
            "slack___send_message",
            "weather___get_weather"
        ]
    );
}

#[test]
fn openai_chat_payload() {
    assert_json_snapshot!(openai_chat_tools(&sample()));
}

#[test]
fn openai_responses_payload() {
    assert_json_snapshot!(openai_responses_tools(&sample()));
}

#[test]
fn anthropic_payload() {
    assert_json_snapshot!(anthropic_tools(&sample()));
}

#[test]
fn gemini_payload() {
    assert_json_snapshot!(gemini_tools(&sample()));
}

#[test]
fn mcp_tools_list_payload() {
    assert_json_snapshot!(mcp_tools_list(&sample()));
}

#[test]
fn anthropic_native_payload_defers_and_references() {
    let d = Disclosure::new(DisclosureConfig::default()).unwrap();
    let engine = engine_with(CatalogPolicy {
        pinned: vec![NamePattern::parse("weather___get_weather")],
        ..CatalogPolicy::default()
    });
    let tools: Vec<ExposedTool> = d
        .anthropic_native_tools(&engine)
        .into_iter()
        .filter(|t| {
            ["tool_search", "files___read_file", "weather___get_weather"].contains(&t.name.as_str())
        })
        .collect();
    assert_json_snapshot!("anthropic_native_tools", anthropic_tools(&tools));
    let found = d
        .anthropic_native_search(json!({"query": "slack___send_message"}), &engine)
        .unwrap();
    assert_eq!(found[0], "slack___send_message");
    assert_json_snapshot!(
        "anthropic_tool_search_result",
        anthropic_tool_search_result("toolu_01", &found[..1])
    );
    assert_json_snapshot!(
        "anthropic_tool_search_no_match",
        anthropic_tool_search_result("toolu_02", &[])
    );
}

#[test]
fn gemini_schema_cleanup() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": false,
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "properties": {
            "name": {"type": ["string", "null"], "default": "a", "examples": ["b"]},
            "kind": {"const": "fixed"},
            "level": {"type": "integer", "enum": [1, 2, 3], "format": "uint8"},
            "when": {"type": "string", "format": "date-time"},
            "at": {"$ref": "#/$defs/Point", "description": "Where"},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "merged": {"allOf": [
                {"properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}}
            ]}
        },
        "required": ["name", "missing"]
    });
    assert_json_snapshot!(gemini_schema(&schema));
}

#[test]
fn recursive_refs_terminate() {
    let schema = json!({
        "type": "object",
        "properties": {"node": {"$ref": "#"}}
    });
    let cleaned = gemini_schema(&schema);
    let text = serde_json::to_string(&cleaned).unwrap();
    assert!(text.len() < 10_000);
    assert!(!text.contains("$ref"));
}

#[test]
fn every_payload_keeps_the_prefix_across_a_reveal() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    let before = d.visible_tools("s", &engine);
    d.handle("s", "add_tool", json!({"names": ["get_weather"]}), &engine)
        .unwrap();
    d.handle("s", "add_tool", json!({"names": ["read_file"]}), &engine)
        .unwrap();
    let after = d.visible_tools("s", &engine);
    let writers: [fn(&[ExposedTool]) -> Value; 4] = [
        openai_chat_tools,
        openai_responses_tools,
        anthropic_tools,
        |t| gemini_tools(t)[0]["functionDeclarations"].clone(),
    ];
    for write in writers {
        let old = write(&before);
        let new = write(&after);
        let (old, new) = (old.as_array().unwrap(), new.as_array().unwrap());
        assert_eq!(new.len(), old.len() + 2);
        assert_eq!(&new[..old.len()], &old[..]);
        let text = serde_json::to_string(&new[old.len()..]).unwrap();
        let weather = text.find("weather___get_weather").unwrap();
        let file = text.find("files___read_file").unwrap();
        assert!(weather < file, "reveal order kept");
    }
}

#[test]
fn writers_add_the_object_shape_providers_require() {
    let tool = ExposedTool {
        name: "bare".into(),
        description: "No schema".into(),
        input_schema: json!({}),
        output_schema: None,
        annotations: None,
        exposure: toolsearch_core::Exposure::Full,
        tool: None,
    };
    let chat = openai_chat_tools(std::slice::from_ref(&tool));
    assert_eq!(
        chat[0]["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    let gemini = gemini_tools(&[tool]);
    assert!(gemini[0]["functionDeclarations"][0]
        .get("parameters")
        .is_none());
}
