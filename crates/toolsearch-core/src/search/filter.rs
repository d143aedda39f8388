//! Filters applied to search results: server, category, tags, a visible set and name patterns.

use crate::tool::{Tool, ToolId};
use std::collections::HashSet;

/// A `server:tool` pattern; either side may use `*` as a wildcard. A pattern without `:` matches
/// the tool name on any server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern {
    server: String,
    tool: String,
}

impl NamePattern {
    pub fn parse(pattern: &str) -> Self {
        match pattern.split_once(':') {
            Some((server, tool)) => Self {
                server: server.trim().to_string(),
                tool: if tool.trim().is_empty() {
                    "*".into()
                } else {
                    tool.trim().to_string()
                },
            },
            None => Self {
                server: "*".into(),
                tool: pattern.trim().to_string(),
            },
        }
    }

    pub fn matches(&self, server: &str, tool: &str) -> bool {
        glob(&self.server, server) && glob(&self.tool, tool)
    }
}

/// `*` matches any run of characters; everything else matches itself, case-insensitively.
fn glob(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.to_lowercase().chars().collect();
    let text: Vec<char> = text.to_lowercase().chars().collect();
    let (mut p, mut t) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while t < text.len() {
        if p < pattern.len() && pattern[p] != '*' && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            mark = t;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Every set filter must hold; within one filter any value may match.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub servers: Vec<String>,
    pub categories: Vec<String>,
    /// Any of these tags.
    pub tags: Vec<String>,
    /// Only these tools (an allowlist), when set.
    pub visible: Option<HashSet<ToolId>>,
    /// Any of these name patterns, when not empty.
    pub patterns: Vec<NamePattern>,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
            && self.categories.is_empty()
            && self.tags.is_empty()
            && self.visible.is_none()
            && self.patterns.is_empty()
    }

    pub fn matches(&self, tool: &Tool) -> bool {
        (self.servers.is_empty() || self.servers.iter().any(|s| s == &tool.server))
            && (self.categories.is_empty()
                || tool
                    .category
                    .as_ref()
                    .is_some_and(|c| self.categories.iter().any(|w| w.eq_ignore_ascii_case(c))))
            && (self.tags.is_empty()
                || tool
                    .tags
                    .iter()
                    .any(|t| self.tags.iter().any(|w| w.eq_ignore_ascii_case(t))))
            && self
                .visible
                .as_ref()
                .is_none_or(|v| v.contains(&ToolId::new(tool.server.clone(), tool.name.clone())))
            && (self.patterns.is_empty()
                || self
                    .patterns
                    .iter()
                    .any(|p| p.matches(&tool.server, &tool.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_wildcards() {
        assert!(glob("*", "anything"));
        assert!(glob("get_*", "get_weather"));
        assert!(glob("*_file", "read_file"));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("get_*", "set_weather"));
        assert!(glob("GitHub", "github"));
    }

    #[test]
    fn name_patterns() {
        assert!(NamePattern::parse("github:*").matches("github", "create_issue"));
        assert!(!NamePattern::parse("github:*").matches("gitlab", "create_issue"));
        assert!(NamePattern::parse("github:create_issue").matches("github", "create_issue"));
        assert!(NamePattern::parse("github:").matches("github", "x"));
        assert!(NamePattern::parse("read_*").matches("fs", "read_file"));
    }

    #[test]
    fn filters_combine_with_and_values_with_or() {
        let tool = Tool::new("read_file", "Read")
            .with_server("fs")
            .with_category("Files")
            .with_tags(["io", "disk"]);
        assert!(Filters::default().matches(&tool));
        let f = |f: Filters| f.matches(&tool);
        assert!(f(Filters {
            servers: vec!["x".into(), "fs".into()],
            ..Default::default()
        }));
        assert!(!f(Filters {
            servers: vec!["x".into()],
            ..Default::default()
        }));
        assert!(f(Filters {
            categories: vec!["files".into()],
            ..Default::default()
        }));
        assert!(f(Filters {
            tags: vec!["net".into(), "disk".into()],
            ..Default::default()
        }));
        assert!(!f(Filters {
            tags: vec!["net".into()],
            ..Default::default()
        }));
        let visible: HashSet<_> = [ToolId::new("fs", "read_file")].into();
        assert!(f(Filters {
            visible: Some(visible),
            ..Default::default()
        }));
        assert!(!f(Filters {
            visible: Some(HashSet::new()),
            ..Default::default()
        }));
        assert!(!f(Filters {
            servers: vec!["fs".into()],
            categories: vec!["web".into()],
            ..Default::default()
        }));
    }
}
