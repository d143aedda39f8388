//! A caller's scope: which tools one caller (an API token, and every session opened with it) may
//! find, list, be told about and call. It is a list of [`NamePattern`]s, matched by the catalog
//! policy's one rule (`server:tool` globs, or a bare pattern matching the bare or public name, any
//! case). Every face filters by it the same way: searches and their fallbacks, category listings
//! and counts, name resolution and did-you-mean suggestions, and what a disclosure session sees.
//! A tool outside the scope behaves as if it were not in the catalog.

use crate::policy::{NamePattern, Naming};
use crate::tool::{Tool, ToolId};

/// The tools a caller may see. [`Scope::all`] (the default) is every tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every tool. `Some(patterns)`: only the tools matching one of them; no tool when
    /// the list is empty.
    only: Option<Vec<NamePattern>>,
}

/// Every tool: the scope of a caller without a token (stdio, the CLI, a library user).
pub static ALL: Scope = Scope::all();

impl Scope {
    /// Every tool.
    pub const fn all() -> Self {
        Self { only: None }
    }

    /// Only the tools matching one of `patterns`; an empty list allows no tool.
    pub fn only(patterns: impl IntoIterator<Item = NamePattern>) -> Self {
        Self {
            only: Some(patterns.into_iter().collect()),
        }
    }

    /// No tool at all: what a caller gets before anything says what it may see.
    pub fn none() -> Self {
        Self::only([])
    }

    /// Whether every tool is in scope.
    pub fn is_all(&self) -> bool {
        self.only.is_none()
    }

    /// The patterns of a limited scope; `None` for every tool.
    pub fn patterns(&self) -> Option<&[NamePattern]> {
        self.only.as_deref()
    }

    /// Whether the tool `id` is in scope; `naming` gives the public name bare patterns match.
    pub fn allows(&self, id: &ToolId, naming: &Naming) -> bool {
        match &self.only {
            None => true,
            Some(patterns) => patterns.iter().any(|p| p.matches(id, naming)),
        }
    }

    /// Whether `tool` is in scope.
    pub fn allows_tool(&self, tool: &Tool, naming: &Naming) -> bool {
        self.is_all() || self.allows(&tool.id(), naming)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.only {
            None => f.write_str("every tool"),
            Some(patterns) if patterns.is_empty() => f.write_str("no tool"),
            Some(patterns) => {
                let list: Vec<&str> = patterns.iter().map(NamePattern::as_str).collect();
                write!(f, "{}", list.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_follows_the_name_pattern_rule() {
        let naming = Naming::default();
        let scope = Scope::only([
            NamePattern::parse("github:*"),
            NamePattern::parse("fs:READ_*"),
        ]);
        let id = |server: &str, name: &str| ToolId::new(server, name);
        assert!(scope.allows(&id("github", "create_issue"), &naming));
        assert!(scope.allows(&id("FS", "read_file"), &naming));
        assert!(!scope.allows(&id("fs", "write_file"), &naming));
        assert!(!scope.allows(&id("gitlab", "create_issue"), &naming));
        let public = Scope::only([NamePattern::parse("fs___write_*")]);
        assert!(public.allows(&id("fs", "write_file"), &naming));
        assert!(!public.allows(&id("db", "write_file"), &naming));
        assert!(Scope::all().allows(&id("any", "thing"), &naming));
        assert!(!Scope::none().allows(&id("any", "thing"), &naming));
        assert!(ALL.is_all() && !Scope::none().is_all());
        assert_eq!(scope.to_string(), "github:*, fs:READ_*");
    }
}
