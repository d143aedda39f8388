//! Filters applied to search results: server, category, tags, a visible set, name patterns and the
//! caller's scope.

use crate::policy::{NamePattern, Naming};
use crate::scope::Scope;
use crate::tool::{Tool, ToolId};
use std::collections::HashSet;

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
    /// The caller's scope: tools outside it are never matched (nor counted, nor offered in a
    /// fallback).
    pub scope: Scope,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
            && self.categories.is_empty()
            && self.tags.is_empty()
            && self.visible.is_none()
            && self.patterns.is_empty()
            && self.scope.is_all()
    }

    /// Whether `tool` passes; `naming` is the catalog's, for patterns that name public names.
    pub fn matches(&self, tool: &Tool, naming: &Naming) -> bool {
        (self.servers.is_empty() || self.servers.iter().any(|s| s == tool.server()))
            && (self.categories.is_empty()
                || tool
                    .category()
                    .as_ref()
                    .is_some_and(|c| self.categories.iter().any(|w| w.eq_ignore_ascii_case(c))))
            && (self.tags.is_empty()
                || tool
                    .tags()
                    .iter()
                    .any(|t| self.tags.iter().any(|w| w.eq_ignore_ascii_case(t))))
            && self.visible.as_ref().is_none_or(|v| {
                v.contains(&ToolId::new(
                    tool.server().to_owned(),
                    tool.name().to_owned(),
                ))
            })
            && (self.patterns.is_empty()
                || self.patterns.iter().any(|p| p.matches(&tool.id(), naming)))
            && self.scope.allows_tool(tool, naming)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_combine_with_and_values_with_or() {
        let tool = Tool::new("read_file", "Read")
            .with_server("fs")
            .with_category("Files")
            .with_tags(["io", "disk"]);
        assert!(Filters::default().matches(&tool, &Naming::default()));
        let f = |f: Filters| f.matches(&tool, &Naming::default());
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
        let scoped = |pattern: &str| Filters {
            scope: Scope::only([NamePattern::parse(pattern)]),
            ..Default::default()
        };
        assert!(!scoped("fs:read_*").is_empty());
        assert!(f(scoped("fs:read_*")));
        assert!(!f(scoped("fs:write_*")));
        assert!(!f(Filters {
            scope: Scope::none(),
            ..Default::default()
        }));
    }
}
