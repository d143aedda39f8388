//! A small catalog of 18 tools on six servers, above the default activation threshold (15).

#![allow(dead_code)]

use serde_json::json;
use toolsearch_core::{
    Disclosure, DisclosureConfig, ExposedTool, Exposure, Preset, SearchEngine, Tool,
};

fn tool(server: &str, name: &str, description: &str, category: &str) -> Tool {
    Tool::new(name, description)
        .with_server(server)
        .with_category(category)
}

fn path_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"path": {"type": "string", "description": "File path"}},
        "required": ["path"]
    })
}

pub fn tools() -> Vec<Tool> {
    vec![
        tool("files", "read_file", "Read a text file from disk", "Files")
            .with_schema(path_schema()),
        tool(
            "files",
            "write_file",
            "Write text to a file on disk",
            "Files",
        )
        .with_schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })),
        tool(
            "files",
            "list_directory",
            "List the entries of a directory",
            "Files",
        )
        .with_schema(path_schema()),
        tool("files", "delete_file", "Delete a file", "Files").with_schema(path_schema()),
        tool(
            "github",
            "create_issue",
            "Create a GitHub issue in a repository",
            "Development",
        )
        .with_schema(json!({
            "type": "object",
            "properties": {
                "repo": {"type": "string", "description": "owner/name"},
                "title": {"type": "string"},
                "body": {"type": "string"}
            },
            "required": ["repo", "title"]
        })),
        tool(
            "github",
            "list_issues",
            "List the issues of a GitHub repository",
            "Development",
        ),
        tool(
            "github",
            "create_pull_request",
            "Open a GitHub pull request",
            "Development",
        ),
        tool(
            "github",
            "merge_pull_request",
            "Merge a GitHub pull request",
            "Development",
        ),
        tool(
            "slack",
            "send_message",
            "Send a message to a Slack channel",
            "Communication",
        )
        .with_schema(json!({
            "type": "object",
            "properties": {"channel": {"type": "string"}, "text": {"type": "string"}},
            "required": ["channel", "text"]
        })),
        tool(
            "slack",
            "list_channels",
            "List Slack channels",
            "Communication",
        ),
        tool(
            "slack",
            "read_messages",
            "Read recent messages of a Slack channel",
            "Communication",
        ),
        tool(
            "weather",
            "get_weather",
            "Current weather for a city",
            "Weather",
        )
        .with_schema(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "units": {"type": "string", "enum": ["metric", "imperial"]}
            },
            "required": ["city"]
        })),
        tool(
            "weather",
            "get_forecast",
            "Weather forecast for the next days",
            "Weather",
        ),
        tool(
            "calendar",
            "create_event",
            "Create a calendar event",
            "Productivity",
        ),
        tool(
            "calendar",
            "list_events",
            "List upcoming calendar events",
            "Productivity",
        ),
        tool(
            "calendar",
            "delete_event",
            "Delete a calendar event",
            "Productivity",
        ),
        tool(
            "db",
            "run_query",
            "Run a SQL query against the database",
            "Development",
        ),
        tool(
            "db",
            "list_tables",
            "List the tables of the database",
            "Development",
        ),
    ]
}

/// The test catalog entered through `policy` (never-defer, pinned, always-visible categories).
#[allow(dead_code)]
pub fn engine_with(policy: toolsearch_core::CatalogPolicy) -> SearchEngine {
    SearchEngine::build(tools(), toolsearch_core::SearchConfig::default(), policy).unwrap()
}

pub fn engine() -> SearchEngine {
    SearchEngine::from_tools(tools()).unwrap()
}

pub fn disclosure(preset: Preset) -> Disclosure {
    Disclosure::new(DisclosureConfig::default().preset(preset)).unwrap()
}

pub fn names(tools: &[ExposedTool]) -> Vec<String> {
    tools.iter().map(|t| t.name.clone()).collect()
}

pub fn names_with(tools: &[ExposedTool], exposure: Exposure) -> Vec<String> {
    tools
        .iter()
        .filter(|t| t.exposure == exposure)
        .map(|t| t.name.clone())
        .collect()
}
