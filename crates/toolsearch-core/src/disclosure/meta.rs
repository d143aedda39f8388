//! The meta-tools: names, descriptions and JSON schemas, and the argument checks they share.
//! Descriptions are short on purpose: they are sent on every request.

use super::config::Preset;
use crate::error::{Error, Result};
use serde_json::{json, Map, Value};

pub const TOOL_SEARCH: &str = "tool_search";
pub const SEARCH_TOOLS: &str = "search_tools";
pub const ADD_TOOL: &str = "add_tool";
pub const SHOW_ALL_TOOLS: &str = "show_all_tools";
pub const SEARCH_AVAILABLE_TOOLS: &str = "search_available_tools";
pub const CALL_TOOL: &str = "call_tool";
pub const LIST_CATEGORIES: &str = "list_categories";
pub const GET_TOOLS_BY_CATEGORY: &str = "get_tools_by_category";

/// Largest page `search_tools`, `search_available_tools` and `get_tools_by_category` return.
pub const MAX_PAGE: u64 = 50;
/// Largest page of `show_all_tools` (names only, so it can be larger).
pub const MAX_NAMES_PAGE: u64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaTool {
    ToolSearch,
    SearchTools,
    AddTool,
    ShowAllTools,
    SearchAvailableTools,
    CallTool,
    ListCategories,
    GetToolsByCategory,
}

impl MetaTool {
    pub const ALL: [MetaTool; 8] = [
        MetaTool::ToolSearch,
        MetaTool::SearchTools,
        MetaTool::AddTool,
        MetaTool::ShowAllTools,
        MetaTool::SearchAvailableTools,
        MetaTool::CallTool,
        MetaTool::ListCategories,
        MetaTool::GetToolsByCategory,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MetaTool::ToolSearch => TOOL_SEARCH,
            MetaTool::SearchTools => SEARCH_TOOLS,
            MetaTool::AddTool => ADD_TOOL,
            MetaTool::ShowAllTools => SHOW_ALL_TOOLS,
            MetaTool::SearchAvailableTools => SEARCH_AVAILABLE_TOOLS,
            MetaTool::CallTool => CALL_TOOL,
            MetaTool::ListCategories => LIST_CATEGORIES,
            MetaTool::GetToolsByCategory => GET_TOOLS_BY_CATEGORY,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The meta-tools a preset offers, in the order they are listed. `with_categories` adds the
    /// two category tools.
    pub fn for_preset(preset: Preset, with_categories: bool) -> Vec<MetaTool> {
        let mut tools = match preset {
            Preset::Search => vec![MetaTool::SearchTools, MetaTool::CallTool],
            Preset::Progressive => vec![MetaTool::ToolSearch, MetaTool::CallTool],
            Preset::Add => vec![
                MetaTool::SearchTools,
                MetaTool::AddTool,
                MetaTool::ShowAllTools,
                MetaTool::CallTool,
            ],
            Preset::Limit => vec![MetaTool::SearchAvailableTools, MetaTool::CallTool],
            Preset::Passthrough => return Vec::new(),
        };
        if with_categories {
            tools.extend([MetaTool::ListCategories, MetaTool::GetToolsByCategory]);
        }
        tools
    }

    pub fn description(self, preset: Preset) -> &'static str {
        match (self, preset) {
            (MetaTool::ToolSearch, _) => {
                "Find tools by keywords or exact name and load their full definitions; matches are added to your tools."
            }
            (MetaTool::SearchTools, Preset::Add) => {
                "Search the tool catalog; returns names and descriptions. Then call add_tool with the names you need."
            }
            (MetaTool::SearchTools, _) => {
                "Search the tool catalog; returns matching tools with their input schemas. Run one with call_tool."
            }
            (MetaTool::AddTool, _) => "Add tools, by exact name, to your tools.",
            (MetaTool::ShowAllTools, _) => "List every tool name, a page at a time.",
            (MetaTool::SearchAvailableTools, _) => {
                "Replace your current tools with the best matches for a query."
            }
            (MetaTool::CallTool, _) => {
                "Run any catalog tool by exact name with arguments matching its input schema."
            }
            (MetaTool::ListCategories, _) => "List tool categories with their tool counts.",
            (MetaTool::GetToolsByCategory, _) => "List the tools of one category.",
        }
    }

    pub fn schema(self) -> Value {
        let query = json!({"type": "string", "description": "Keywords, or a tool's exact name"});
        let limit = |max: u64, default: u64| json!({"type": "integer", "minimum": 1, "maximum": max, "default": default});
        let offset = json!({"type": "integer", "minimum": 0, "default": 0});
        let strings = json!({"type": "array", "items": {"type": "string"}});
        let search = json!({
            "type": "object",
            "properties": {
                "query": query,
                "mode": {"type": "string", "enum": ["keyword", "regex"], "default": "keyword"},
                "server": strings,
                "category": strings,
                "tags": strings,
                "limit": limit(MAX_PAGE, 10)
            },
            "required": ["query"],
            "additionalProperties": false
        });
        match self {
            MetaTool::ToolSearch => json!({
                "type": "object",
                "properties": {"query": query},
                "required": ["query"],
                "additionalProperties": false
            }),
            MetaTool::SearchTools | MetaTool::SearchAvailableTools => search,
            MetaTool::AddTool => json!({
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 50}},
                "required": ["names"],
                "additionalProperties": false
            }),
            MetaTool::ShowAllTools => json!({
                "type": "object",
                "properties": {"offset": offset, "limit": limit(MAX_NAMES_PAGE, 200)},
                "additionalProperties": false
            }),
            MetaTool::CallTool => json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Exact tool name"},
                    "arguments": {"type": "object"}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            MetaTool::ListCategories => json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false
            }),
            MetaTool::GetToolsByCategory => json!({
                "type": "object",
                "properties": {"category": {"type": "string"}, "offset": offset, "limit": limit(MAX_PAGE, 20)},
                "required": ["category"],
                "additionalProperties": false
            }),
        }
    }
}

/// Checks meta-tool arguments against the meta-tool's schema; `null` counts as `{}`.
pub fn check_arguments(tool: MetaTool, arguments: Value) -> Result<Map<String, Value>> {
    let schema = tool.schema();
    let arguments = match arguments {
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    let problems = schema_problems(&schema, &arguments);
    if !problems.is_empty() {
        return Err(Error::MetaArguments {
            tool: tool.name(),
            problem: problems.join("; "),
            schema,
        });
    }
    match arguments {
        Value::Object(map) => Ok(map),
        // The schema requires an object, so this only happens if the schema failed to compile.
        _ => Err(Error::MetaArguments {
            tool: tool.name(),
            problem: "arguments must be a JSON object".to_string(),
            schema,
        }),
    }
}

/// Up to ten readable problems of `instance` against `schema`. A schema that does not compile is
/// reported once and never blocks the call: the tool's own server validates too.
pub fn schema_problems(schema: &Value, instance: &Value) -> Vec<String> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "input schema does not compile; arguments not validated");
            return Vec::new();
        }
    };
    validator
        .iter_errors(instance)
        .take(10)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at {path}: {e}")
            }
        })
        .collect()
}

pub fn str_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

pub fn usize_arg(args: &Map<String, Value>, key: &str, default: usize) -> usize {
    args.get(key)
        .and_then(Value::as_u64)
        .map_or(default, |v| usize::try_from(v).unwrap_or(usize::MAX))
}

pub fn strings_arg(args: &Map<String, Value>, key: &str) -> Vec<String> {
    match args.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}
