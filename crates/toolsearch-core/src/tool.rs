//! The one model of a tool that every part of the engine shares.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// The separator between server and tool name in a public (namespaced) name.
pub const DEFAULT_SEPARATOR: &str = "___";

/// Identity of a tool: the server it belongs to (possibly empty) and its name on that server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ToolId {
    pub server: String,
    pub name: String,
}

impl ToolId {
    pub fn new(server: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            name: name.into(),
        }
    }

    /// `server___name`, or the bare name for a tool without a server.
    pub fn public_name(&self, separator: &str) -> String {
        if self.server.is_empty() {
            self.name.clone()
        } else {
            format!("{}{}{}", self.server, separator, self.name)
        }
    }

    /// Splits a public name back into server and name. A name without the separator has no server.
    pub fn parse_public(public: &str, separator: &str) -> Self {
        match public.split_once(separator) {
            Some((server, name)) if !separator.is_empty() => Self::new(server, name),
            _ => Self::new("", public),
        }
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.public_name(DEFAULT_SEPARATOR))
    }
}

/// When a tool's full definition is withheld from the model until a search asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeferPolicy {
    /// Always sent in full.
    Never,
    /// Deferred when disclosure is active (the catalog is above the threshold).
    #[default]
    Automatic,
    /// Deferred even below the threshold.
    Always,
}

/// A callable tool with its JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The server that owns the tool; empty when the catalog has no servers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(rename = "inputSchema", default = "empty_object_schema")]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default)]
    pub defer: DeferPolicy,
    /// MCP annotations (readOnlyHint, title, ...), kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// The schema of a tool that takes no arguments.
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl Tool {
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            server: String::new(),
            name: name.into(),
            description: description.into(),
            input_schema: empty_object_schema(),
            category: None,
            tags: Vec::new(),
            defer: DeferPolicy::Automatic,
            annotations: None,
        }
    }

    pub fn with_server(mut self, server: impl Into<String>) -> Self {
        self.server = server.into();
        self
    }

    pub fn with_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    pub fn with_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    pub fn with_defer(mut self, defer: DeferPolicy) -> Self {
        self.defer = defer;
        self
    }

    pub fn id(&self) -> ToolId {
        ToolId::new(self.server.clone(), self.name.clone())
    }

    pub fn public_name(&self, separator: &str) -> String {
        self.id().public_name(separator)
    }

    /// The schema's parameters as (name, description) pairs, top level and nested objects alike.
    pub fn parameters(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        collect_parameters(&self.input_schema, &mut out, 0);
        out
    }
}

fn collect_parameters(schema: &Value, out: &mut Vec<(String, String)>, depth: usize) {
    // Deeply nested schemas add noise, not signal; two levels cover real tools.
    if depth > 2 {
        return;
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        if let Some(items) = schema.get("items") {
            collect_parameters(items, out, depth + 1);
        }
        return;
    };
    for (name, prop) in props {
        let description = prop
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        out.push((name.clone(), description));
        collect_parameters(prop, out, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn public_name_round_trips() {
        let id = ToolId::new("github", "create_issue");
        assert_eq!(id.public_name("___"), "github___create_issue");
        assert_eq!(ToolId::parse_public("github___create_issue", "___"), id);
        assert_eq!(
            ToolId::parse_public("plain", "___"),
            ToolId::new("", "plain")
        );
        assert_eq!(ToolId::new("", "plain").public_name("___"), "plain");
    }

    #[test]
    fn parameters_include_nested_properties() {
        let tool = Tool::new("t", "d").with_schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path"},
                "options": {"type": "object", "properties": {"recursive": {"type": "boolean"}}}
            }
        }));
        let names: Vec<_> = tool.parameters().into_iter().map(|p| p.0).collect();
        assert_eq!(names, vec!["path", "options", "recursive"]);
    }
}
