//! Reading catalogs: every format, detection, forcing, and the errors of malformed input.

use serde_json::{json, Value};
use toolsearch_core::formats::detect_format;
use toolsearch_core::{parse_catalog, Catalog, CatalogFormat, Error, Tool};

fn parse(text: &str) -> Vec<Tool> {
    parse_catalog(text, "catalog.json", None).unwrap_or_else(|e| panic!("{e}"))
}

fn detected(text: &str) -> CatalogFormat {
    let value: Value = serde_json::from_str(text).unwrap();
    detect_format(&value).unwrap_or_else(|e| panic!("{e}"))
}

fn summary(tools: &[Tool]) -> Vec<(String, String, String)> {
    tools
        .iter()
        .map(|t| {
            (
                t.server().to_owned(),
                t.name().to_owned(),
                t.description().to_owned(),
            )
        })
        .collect()
}

fn row(server: &str, name: &str, description: &str) -> (String, String, String) {
    (server.into(), name.into(), description.into())
}

fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"]
    })
}

const MCP_WRAPPED: &str = r#"{
  "tools": [
    {
      "name": "get_weather",
      "description": "Current weather",
      "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]},
      "category": "Data",
      "tags": ["forecast", ["nested"]],
      "title": "Weather",
      "annotations": {"readOnlyHint": true}
    },
    {"name": "ping"}
  ]
}"#;

#[test]
fn mcp_tools_list_result() {
    let tools = parse(MCP_WRAPPED);
    assert_eq!(
        summary(&tools),
        vec![
            row("", "get_weather", "Current weather"),
            row("", "ping", "")
        ]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(tools[0].category(), Some("Data"));
    assert_eq!(tools[0].tags(), vec!["forecast", "nested"]);
    let annotations = tools[0].annotations().unwrap();
    assert_eq!(annotations["title"], "Weather");
    assert_eq!(annotations["readOnlyHint"], true);
    // A tool without a schema takes no arguments.
    assert_eq!(
        *tools[1].input_schema(),
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(detected(MCP_WRAPPED), CatalogFormat::Mcp);
}

#[test]
fn mcp_bare_array() {
    let text = r#"[{"name": "get_weather", "description": "Current weather",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}]"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![row("", "get_weather", "Current weather")]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(detected(text), CatalogFormat::Mcp);
    assert!(parse("[]").is_empty());
}

#[test]
fn openai_chat_completions_tools() {
    let text = r#"[
      {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}
    ]"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![
            row("", "get_weather", "Current weather"),
            row("", "now", "")
        ]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(detected(text), CatalogFormat::OpenAi);
    let wrapped = format!(r#"{{"tools": {text}}}"#);
    assert_eq!(summary(&parse(&wrapped)), summary(&tools));
    assert_eq!(detected(&wrapped), CatalogFormat::OpenAi);
}

#[test]
fn openai_responses_tools() {
    let text = r#"[{"type": "function", "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]},
        "strict": true}]"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![row("", "get_weather", "Current weather")]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(detected(text), CatalogFormat::OpenAi);
}

#[test]
fn anthropic_tools() {
    let text = r#"[{"name": "get_weather", "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}]"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![row("", "get_weather", "Current weather")]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(detected(text), CatalogFormat::Anthropic);
    let wrapped = format!(r#"{{"tools": {text}}}"#);
    assert_eq!(parse(&wrapped), tools);
    assert_eq!(detected(&wrapped), CatalogFormat::Anthropic);
}

#[test]
fn gemini_function_declarations() {
    let text = r#"{"functionDeclarations": [
      {"name": "get_weather", "description": "Current weather",
       "parameters": {"type": "OBJECT", "properties": {
         "city": {"type": "STRING", "description": "City name"},
         "days": {"type": "ARRAY", "items": {"type": "INTEGER"}}}}},
      {"name": "raw", "parametersJsonSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}
    ]}"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![
            row("", "get_weather", "Current weather"),
            row("", "raw", "")
        ]
    );
    assert_eq!(
        *tools[0].input_schema(),
        json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "array", "items": {"type": "integer"}}}})
    );
    assert_eq!(
        tools[1].input_schema().to_value()["properties"]["q"]["type"],
        "string"
    );
    assert_eq!(detected(text), CatalogFormat::Gemini);

    let array = format!("[{text}, {{\"functionDeclarations\": [{{\"name\": \"extra\"}}]}}]");
    assert_eq!(
        parse(&array).iter().map(|t| t.name()).collect::<Vec<_>>(),
        vec!["get_weather", "raw", "extra"]
    );
    assert_eq!(detected(&array), CatalogFormat::Gemini);

    let bare = r#"[{"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING", "description": "City name"}}, "required": ["city"]}}]"#;
    assert_eq!(detected(bare), CatalogFormat::Gemini);
    assert_eq!(*parse(bare)[0].input_schema(), city_schema());
}

#[test]
fn multi_server_object() {
    let text = r#"{"servers": {
      "weather": [{"name": "get_weather", "description": "Current weather",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}],
      "github": {"tools": [{"name": "create_issue", "description": "Open an issue", "server": "ignored"}]}
    }}"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![
            row("github", "create_issue", "Open an issue"),
            row("weather", "get_weather", "Current weather"),
        ]
    );
    assert_eq!(*tools[1].input_schema(), city_schema());
    assert_eq!(detected(text), CatalogFormat::Multi);
}

#[test]
fn multi_server_array() {
    let text = r#"[
      {"name": "get_weather", "description": "Current weather", "server": "weather",
       "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]},
       "category": "Data"},
      {"name": "create_issue", "description": "Open an issue", "server": "github"}
    ]"#;
    let tools = parse(text);
    assert_eq!(
        summary(&tools),
        vec![
            row("weather", "get_weather", "Current weather"),
            row("github", "create_issue", "Open an issue"),
        ]
    );
    assert_eq!(*tools[0].input_schema(), city_schema());
    assert_eq!(tools[0].category(), Some("Data"));
    assert_eq!(detected(text), CatalogFormat::Multi);
}

#[test]
fn the_example_catalog_reads() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/catalog.json");
    let text = std::fs::read_to_string(path).unwrap();
    let tools = parse_catalog(&text, path, None).unwrap();
    assert_eq!(tools.len(), 29);
    assert!(tools.iter().all(|t| !t.server().is_empty()));
    Catalog::from_tools(tools).unwrap();
}

#[test]
fn a_format_can_be_forced() {
    // Detected as Gemini (name + parameters), read as OpenAI's flat form when asked.
    let text = r#"[{"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}]"#;
    for format in [CatalogFormat::OpenAi, CatalogFormat::Gemini] {
        let tools = parse_catalog(text, "f.json", Some(format)).unwrap();
        assert_eq!(tools[0].name(), "get_weather");
        assert_eq!(*tools[0].input_schema(), city_schema());
    }
    // An array with servers is multi-server by detection; forced to MCP it still reads.
    let multi = r#"[{"name": "a", "server": "s"}]"#;
    assert_eq!(detected(multi), CatalogFormat::Multi);
    let tools = parse_catalog(multi, "f.json", Some(CatalogFormat::Mcp)).unwrap();
    assert_eq!(tools[0].name(), "a");
    // Forcing a format the document does not have is an error that says what was expected.
    match parse_catalog(MCP_WRAPPED, "tools.json", Some(CatalogFormat::Gemini)) {
        Err(err @ Error::CatalogShape { .. }) => {
            let text = err.to_string();
            assert!(text.contains("tools.json"), "{text}");
            assert!(text.contains("gemini"), "{text}");
            assert!(text.contains("functionDeclarations"), "{text}");
        }
        other => panic!("expected CatalogShape, got {other:?}"),
    }
}

#[test]
fn format_names_parse() {
    for (name, format) in [
        ("mcp", CatalogFormat::Mcp),
        ("OpenAI", CatalogFormat::OpenAi),
        ("anthropic", CatalogFormat::Anthropic),
        ("gemini", CatalogFormat::Gemini),
        ("multi", CatalogFormat::Multi),
    ] {
        assert_eq!(name.parse::<CatalogFormat>().unwrap(), format);
        assert_eq!(format.as_str().parse::<CatalogFormat>().unwrap(), format);
    }
    assert!(matches!(
        "yaml".parse::<CatalogFormat>(),
        Err(Error::UnknownFormatName(name)) if name == "yaml"
    ));
}

#[test]
fn malformed_json_reports_line_and_column() {
    let text = "{\n  \"tools\": [\n    {\"name\": \"a\",}\n  ]\n}\n";
    match parse_catalog(text, "broken.json", None) {
        Err(err @ Error::CatalogSyntax { .. }) => {
            let Error::CatalogSyntax {
                ref source_name,
                line,
                column,
                ..
            } = err
            else {
                unreachable!()
            };
            assert_eq!(source_name, "broken.json");
            assert_eq!(line, 3);
            assert_eq!(column, 18);
            let message = err.to_string();
            assert!(message.contains("broken.json"), "{message}");
            assert!(message.contains("line 3, column 18"), "{message}");
            assert!(err.is_bad_input());
        }
        other => panic!("expected CatalogSyntax, got {other:?}"),
    }
    match parse_catalog("", "empty.json", None) {
        Err(Error::CatalogSyntax { line, .. }) => assert_eq!(line, 1),
        other => panic!("expected CatalogSyntax, got {other:?}"),
    }
}

#[test]
fn a_tool_without_a_name_is_a_shape_error_with_position() {
    let text =
        "{\n  \"tools\": [\n    {\"name\": \"ok\"},\n    {\"description\": \"nameless\"}\n  ]\n}\n";
    match parse_catalog(text, "nameless.json", None) {
        Err(err @ Error::CatalogShape { .. }) => {
            let message = err.to_string();
            let Error::CatalogShape {
                source_name,
                format,
                line,
                column,
                message: detail,
                expected,
            } = err
            else {
                unreachable!()
            };
            assert_eq!(source_name, "nameless.json");
            assert_eq!(format, "mcp");
            assert_eq!(line, 4);
            assert!(column > 0);
            assert!(detail.contains("missing field `name`"), "{detail}");
            assert!(expected.contains("inputSchema"), "{expected}");
            assert!(message.starts_with("nameless.json"), "{message}");
            assert!(message.contains("line 4"), "{message}");
        }
        other => panic!("expected CatalogShape, got {other:?}"),
    }
    // The same in a multi-server array.
    let multi = "[\n  {\"name\": \"a\", \"server\": \"s\"},\n  {\"server\": \"s\"}\n]";
    match parse_catalog(multi, "multi.json", None) {
        Err(Error::CatalogShape {
            line,
            format,
            message,
            ..
        }) => {
            assert_eq!(format, "multi");
            assert_eq!(line, 3);
            assert!(message.contains("missing field `name`"), "{message}");
        }
        other => panic!("expected CatalogShape, got {other:?}"),
    }
}

#[test]
fn a_nameless_tool_in_a_multi_server_object_is_located() {
    let multi = "{\"servers\": {\"s\": [\n  {\"name\": \"a\"},\n  {\"title\": \"x\"}\n]}}";
    match parse_catalog(multi, "multi.json", None) {
        Err(Error::CatalogShape {
            line,
            format,
            message,
            ..
        }) => {
            assert_eq!(format, "multi");
            assert_eq!(line, 3, "the line of the nameless tool");
            assert!(message.contains("missing field `name`"), "{message}");
        }
        other => panic!("expected CatalogShape, got {other:?}"),
    }
}

#[test]
fn an_unknown_shape_says_what_it_saw() {
    for (text, seen) in [
        (r#"{"items": []}"#, "items"),
        ("42", "neither an object nor an array"),
        (r#"{"tools": 3}"#, "not an array"),
        (r#"[{"foo": 1}]"#, "foo"),
        ("[1, 2]", "not an object"),
    ] {
        match parse_catalog(text, "odd.json", None) {
            Err(err @ Error::UnknownCatalogFormat { .. }) => {
                let message = err.to_string();
                assert!(message.contains("odd.json"), "{message}");
                assert!(message.contains(seen), "{text}: {message}");
                assert!(message.contains("--format"), "{message}");
            }
            other => panic!("{text}: expected UnknownCatalogFormat, got {other:?}"),
        }
    }
}

#[test]
fn duplicate_names_on_one_server_are_rejected() {
    let text = r#"{"servers": {"s": [{"name": "a"}, {"name": "a"}], "t": [{"name": "b"}]}}"#;
    let tools = parse(text);
    match Catalog::from_tools(tools) {
        Err(err @ Error::DuplicateTool { .. }) => {
            let message = err.to_string();
            assert!(
                message.contains("`a`") && message.contains("`s`"),
                "{message}"
            );
        }
        other => panic!("expected DuplicateTool, got {other:?}"),
    }
    let text = r#"{"servers": {"s": [{"name": "a"}], "t": [{"name": "a"}]}}"#;
    assert_eq!(Catalog::from_tools(parse(text)).unwrap().len(), 2);
}
