//! Small catalogs and helpers shared by the search tests.

#![allow(dead_code)]

use serde_json::{json, Value};
use toolsearch_core::{SearchEngine, SearchRequest, SearchResponse, Tool};

pub fn tool(server: &str, name: &str, description: &str) -> Tool {
    Tool::new(name, description).with_server(server)
}

pub fn schema(params: &[(&str, &str)]) -> Value {
    let properties: serde_json::Map<String, Value> = params
        .iter()
        .map(|(name, description)| {
            (
                name.to_string(),
                json!({"type": "string", "description": description}),
            )
        })
        .collect();
    json!({"type": "object", "properties": properties})
}

pub fn engine(tools: Vec<Tool>) -> SearchEngine {
    SearchEngine::from_tools(tools).expect("the test catalog is valid")
}

pub fn run(engine: &SearchEngine, request: &SearchRequest) -> SearchResponse {
    engine
        .search(request)
        .unwrap_or_else(|e| panic!("search {:?} failed: {e}", request.query))
}

pub fn search(engine: &SearchEngine, query: &str) -> SearchResponse {
    run(engine, &SearchRequest::new(query).limit(100))
}

/// Tool names of a response, best first.
pub fn names(response: &SearchResponse) -> Vec<String> {
    response
        .tools
        .iter()
        .map(|h| h.tool.name().to_owned())
        .collect()
}

/// `server/name` of a response's tools, best first.
pub fn ids(response: &SearchResponse) -> Vec<String> {
    response
        .tools
        .iter()
        .map(|h| format!("{}/{}", h.tool.server(), h.tool.name()))
        .collect()
}

pub fn found(engine: &SearchEngine, query: &str) -> Vec<String> {
    names(&search(engine, query))
}

pub fn position(names: &[String], name: &str) -> Option<usize> {
    names.iter().position(|n| n == name)
}

/// Messaging, files and weather tools on four servers, with categories, tags and parameters.
pub fn mixed_catalog() -> Vec<Tool> {
    vec![
        tool("mail", "send_email", "Send an email to a recipient")
            .with_category("Communication")
            .with_tags(["outbox", "urgent"])
            .with_schema(schema(&[
                ("recipient", "Address of the person"),
                ("subject", "Title line"),
            ])),
        tool("mail", "read_email", "Read email from the inbox")
            .with_category("Communication")
            .with_tags(["inbox"])
            .with_schema(schema(&[("folder", "Mailbox folder")])),
        tool("phone", "send_sms", "Send a text to a phone number")
            .with_category("Communication")
            .with_tags(["mobile"])
            .with_schema(schema(&[("number", "Phone number")])),
        tool("files", "read_file", "Read a file from disk")
            .with_category("Storage")
            .with_tags(["disk"])
            .with_schema(schema(&[("path", "Location on disk")])),
        tool("files", "open_log", "Read the log and file a report")
            .with_category("Storage")
            .with_tags(["disk", "audit"]),
        tool("weather", "get_weather", "Current conditions for a city")
            .with_category("Data")
            .with_tags(["forecast"])
            .with_schema(schema(&[("city", "City name")])),
    ]
}
