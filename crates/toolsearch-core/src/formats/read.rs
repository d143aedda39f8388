use crate::error::{Error, Result};
use crate::tool::{empty_object_schema, DeferPolicy, Tool, ToolSchema};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The catalog formats toolsearch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogFormat {
    /// `{"tools": [...]}` (an MCP tools/list result) or a bare array of MCP tools.
    Mcp,
    /// `[{"type": "function", "function": {...}}]`, or the flat Responses form.
    OpenAi,
    /// `[{"name", "description", "input_schema"}]`, bare or under `"tools"`.
    Anthropic,
    /// `{"functionDeclarations": [...]}`, an array of those, or bare declarations.
    Gemini,
    /// `{"servers": {"name": [tools]}}` or an array of tools that each carry a `server`.
    Multi,
}

impl CatalogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogFormat::Mcp => "mcp",
            CatalogFormat::OpenAi => "openai",
            CatalogFormat::Anthropic => "anthropic",
            CatalogFormat::Gemini => "gemini",
            CatalogFormat::Multi => "multi",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            CatalogFormat::Mcp => {
                r#"{"tools": [{"name", "description", "inputSchema"}]} or an array of such tools"#
            }
            CatalogFormat::OpenAi => {
                r#"[{"type": "function", "function": {"name", "description", "parameters"}}] or [{"type": "function", "name", "description", "parameters"}]"#
            }
            CatalogFormat::Anthropic => {
                r#"[{"name", "description", "input_schema"}] or {"tools": [...]}"#
            }
            CatalogFormat::Gemini => {
                r#"{"functionDeclarations": [{"name", "description", "parameters"}]}, an array of those, or bare declarations"#
            }
            CatalogFormat::Multi => {
                r#"{"servers": {"<server>": [tools]}} or an array of tools each with a "server""#
            }
        }
    }
}

impl FromStr for CatalogFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "mcp" => CatalogFormat::Mcp,
            "openai" => CatalogFormat::OpenAi,
            "anthropic" => CatalogFormat::Anthropic,
            "gemini" => CatalogFormat::Gemini,
            "multi" | "servers" => CatalogFormat::Multi,
            _ => return Err(Error::UnknownFormatName(s.to_string())),
        })
    }
}

/// Parses `text` (named `source_name` in errors) as a catalog, detecting the format unless given.
pub fn parse_catalog(
    text: &str,
    source_name: &str,
    format: Option<CatalogFormat>,
) -> Result<Vec<Tool>> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::CatalogSyntax {
        source_name: source_name.to_string(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let format = match format {
        Some(f) => f,
        None => detect_format(&value).map_err(|reason| Error::UnknownCatalogFormat {
            source_name: source_name.to_string(),
            reason,
        })?,
    };
    let shape_error = |e: serde_json::Error| Error::CatalogShape {
        source_name: source_name.to_string(),
        format: format.as_str().to_string(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
        expected: format.expected().to_string(),
    };
    let wrapped = value.get("tools").is_some();
    let tools = match format {
        CatalogFormat::Mcp | CatalogFormat::Anthropic => {
            let list: Vec<McpTool> = if wrapped {
                serde_json::from_str::<Wrapped<McpTool>>(text)
                    .map_err(shape_error)?
                    .tools
            } else {
                serde_json::from_str(text).map_err(shape_error)?
            };
            list.into_iter().map(McpTool::into_tool).collect()
        }
        CatalogFormat::OpenAi => {
            let list: Vec<OpenAiTool> = if wrapped {
                serde_json::from_str::<Wrapped<OpenAiTool>>(text)
                    .map_err(shape_error)?
                    .tools
            } else {
                serde_json::from_str(text).map_err(shape_error)?
            };
            list.into_iter().map(OpenAiTool::into_tool).collect()
        }
        CatalogFormat::Gemini => parse_gemini(text, &value).map_err(shape_error)?,
        CatalogFormat::Multi => {
            if value.is_array() {
                let list: Vec<McpTool> = serde_json::from_str(text).map_err(shape_error)?;
                list.into_iter().map(McpTool::into_tool).collect()
            } else {
                let doc: MultiServer = serde_json::from_str(text).map_err(shape_error)?;
                doc.servers
                    .into_iter()
                    .flat_map(|(server, tools)| {
                        let list = match tools {
                            ServerTools::Bare(list) => list,
                            ServerTools::Wrapped { tools } => tools,
                        };
                        list.into_iter().map(move |t| {
                            let mut tool = t.into_tool();
                            tool.set_server(&server);
                            tool
                        })
                    })
                    .collect()
            }
        }
    };
    Ok(tools)
}

/// Tells the format from the document's shape; the error says what was seen.
pub fn detect_format(value: &Value) -> std::result::Result<CatalogFormat, String> {
    let elements: &[Value] = match value {
        Value::Object(map) if map.contains_key("servers") => return Ok(CatalogFormat::Multi),
        Value::Object(map) if map.contains_key("functionDeclarations") => {
            return Ok(CatalogFormat::Gemini)
        }
        Value::Object(map) => match map.get("tools") {
            Some(Value::Array(tools)) => tools,
            Some(_) => return Err("`tools` is not an array".into()),
            None => {
                return Err(format!(
                    "an object with keys {:?}, but no `tools`, `servers` or `functionDeclarations`",
                    map.keys().take(5).collect::<Vec<_>>()
                ))
            }
        },
        Value::Array(items) => items,
        _ => return Err("the document is neither an object nor an array".into()),
    };
    let Some(first) = elements.first() else {
        return Ok(CatalogFormat::Mcp);
    };
    let Some(obj) = first.as_object() else {
        return Err("the first tool is not an object".into());
    };
    let has = |k: &str| obj.contains_key(k);
    Ok(if has("functionDeclarations") {
        CatalogFormat::Gemini
    } else if has("function") || (has("type") && has("parameters")) {
        CatalogFormat::OpenAi
    } else if has("server") && value.is_array() {
        CatalogFormat::Multi
    } else if has("input_schema") {
        CatalogFormat::Anthropic
    } else if has("inputSchema") || has("name") && !has("parameters") {
        CatalogFormat::Mcp
    } else if has("name") && has("parameters") {
        CatalogFormat::Gemini
    } else {
        return Err(format!(
            "the first tool has keys {:?}, which match no known format",
            obj.keys().take(6).collect::<Vec<_>>()
        ));
    })
}

/// serde_json appends " at line L column C"; the error carries those separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[derive(Deserialize)]
struct Wrapped<T> {
    tools: Vec<T>,
}

#[derive(Deserialize)]
struct MultiServer {
    servers: BTreeMap<String, ServerTools>,
}

/// A server's tools: a bare array or `{"tools": [...]}`. Deserialised by hand rather than as an
/// untagged enum, which would replace a tool's own error (and its position) with a generic one.
enum ServerTools {
    Bare(Vec<McpTool>),
    Wrapped { tools: Vec<McpTool> },
}

impl<'de> Deserialize<'de> for ServerTools {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Tools;
        impl<'de> serde::de::Visitor<'de> for Tools {
            type Value = ServerTools;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of tools or {\"tools\": [...]} for each server")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<ServerTools, A::Error> {
                let mut tools = Vec::new();
                while let Some(tool) = seq.next_element::<McpTool>()? {
                    tools.push(tool);
                }
                Ok(ServerTools::Bare(tools))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<ServerTools, A::Error> {
                let mut tools = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "tools" {
                        tools = Some(map.next_value::<Vec<McpTool>>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                let tools = tools.ok_or_else(|| serde::de::Error::missing_field("tools"))?;
                Ok(ServerTools::Wrapped { tools })
            }
        }
        d.deserialize_any(Tools)
    }
}

/// MCP and Anthropic tools, and the tools of multi-server files (MCP-shaped, with a `server`).
#[derive(Deserialize)]
struct McpTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    // Read straight into the compact form, so a large file never holds every schema as a tree.
    #[serde(rename = "inputSchema", alias = "input_schema", default)]
    input_schema: Option<ToolSchema>,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default, deserialize_with = "lenient_tags")]
    tags: Option<Vec<String>>,
    #[serde(default)]
    defer: Option<DeferPolicy>,
    #[serde(default)]
    defer_loading: Option<bool>,
    #[serde(default)]
    annotations: Option<Value>,
    #[serde(default)]
    title: Option<String>,
}

impl McpTool {
    fn into_tool(self) -> Tool {
        let defer = match (self.defer, self.defer_loading) {
            (Some(d), _) => d,
            (None, Some(true)) => DeferPolicy::Always,
            _ => DeferPolicy::Automatic,
        };
        let mut tool = Tool::from_mcp(self.name, self.description, self.title, self.annotations)
            .with_server(self.server.unwrap_or_default())
            .with_input_schema(self.input_schema.unwrap_or_default())
            .with_defer(defer);
        tool.set_category(self.category);
        tool.set_tags(self.tags.unwrap_or_default());
        tool
    }
}

/// Tags as written in the wild: strings, nested lists of strings, or a single string.
fn lenient_tags<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<String>>, D::Error> {
    fn flatten(v: Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
            Value::Number(n) => out.push(n.to_string()),
            Value::Bool(b) => out.push(b.to_string()),
            Value::Null | Value::Object(_) => {}
        }
    }
    let value = Value::deserialize(d)?;
    let mut out = Vec::new();
    flatten(value, &mut out);
    Ok(Some(out))
}

/// OpenAI Chat Completions (`function` nested) or Responses (flat) tool.
#[derive(Deserialize)]
struct OpenAiTool {
    #[serde(rename = "type", default)]
    _kind: Option<String>,
    #[serde(default)]
    function: Option<FunctionDeclaration>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

impl OpenAiTool {
    fn into_tool(self) -> Tool {
        match self.function {
            Some(f) => f.into_tool(),
            None => FunctionDeclaration {
                name: self.name.unwrap_or_default(),
                description: self.description,
                parameters: self.parameters,
                parameters_json_schema: None,
            }
            .into_tool(),
        }
    }
}

/// A function declaration as OpenAI and Gemini write it.
#[derive(Deserialize)]
struct FunctionDeclaration {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(rename = "parametersJsonSchema", default)]
    parameters_json_schema: Option<Value>,
}

impl FunctionDeclaration {
    fn into_tool(self) -> Tool {
        let schema = self
            .parameters_json_schema
            .or(self.parameters.map(lowercase_types))
            .unwrap_or_else(empty_object_schema);
        Tool::new(self.name, self.description.unwrap_or_default()).with_schema(schema)
    }
}

#[derive(Deserialize)]
struct GeminiTool {
    #[serde(rename = "functionDeclarations")]
    function_declarations: Vec<FunctionDeclaration>,
}

fn parse_gemini(text: &str, value: &Value) -> std::result::Result<Vec<Tool>, serde_json::Error> {
    let declarations: Vec<FunctionDeclaration> = match value {
        Value::Object(_) => serde_json::from_str::<GeminiTool>(text)?.function_declarations,
        Value::Array(items)
            if items
                .first()
                .is_some_and(|v| v.get("functionDeclarations").is_some()) =>
        {
            serde_json::from_str::<Vec<GeminiTool>>(text)?
                .into_iter()
                .flat_map(|t| t.function_declarations)
                .collect()
        }
        _ => serde_json::from_str(text)?,
    };
    Ok(declarations
        .into_iter()
        .map(FunctionDeclaration::into_tool)
        .collect())
}

/// Gemini's OpenAPI subset writes types in capitals (`STRING`); JSON Schema wants them lowercase.
fn lowercase_types(mut schema: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    if key == "type" {
                        if let Value::String(s) = child {
                            *s = s.to_lowercase();
                        }
                    } else {
                        walk(child);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}
