//! The catalog policy: every rule that decides, by name, what a tool is called, whether it is in the
//! catalog at all, which category and tags it carries and whether it is ever deferred. It is
//! applied once, when a server's tools enter the engine ([`crate::SearchEngine::replace_server`]);
//! nothing downstream matches names again.
//!
//! # Name patterns
//!
//! One rule, used by every list that names tools (`selectedTools`, `neverDefer`, `pinned`,
//! category `tools`, search `pattern` filters):
//!
//! - `server:tool` matches a tool by server and name; either side may use `*` for any run of
//!   characters (`github:*`, `*:create_*`). `server:` is `server:*`.
//! - a pattern without `:` matches a tool's bare name on any server, or its public name
//!   (`github___create_issue`).
//! - matching is case-insensitive.
//!
//! Server lists (`selectedServers`, category `servers`) hold server-name globs, matched the same
//! way.

use crate::tool::{DeferPolicy, Tool, ToolId, DEFAULT_SEPARATOR};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// How a tool's public name is made from its server and name: `server___name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    separator: String,
}

impl Default for Naming {
    fn default() -> Self {
        Self {
            separator: DEFAULT_SEPARATOR.to_string(),
        }
    }
}

impl Naming {
    /// A naming with this separator; an empty separator falls back to the default (an empty one
    /// could not be split back).
    pub fn new(separator: impl Into<String>) -> Self {
        let separator = separator.into();
        if separator.is_empty() {
            Self::default()
        } else {
            Self { separator }
        }
    }

    pub fn separator(&self) -> &str {
        &self.separator
    }

    /// `server___name`, or the bare name for a tool without a server.
    pub fn public_name(&self, id: &ToolId) -> String {
        if id.server.is_empty() {
            id.name.clone()
        } else {
            format!("{}{}{}", id.server, self.separator, id.name)
        }
    }

    /// The public name of a tool.
    pub fn tool_name(&self, tool: &Tool) -> String {
        if tool.server().is_empty() {
            tool.name().to_owned()
        } else {
            format!("{}{}{}", tool.server(), self.separator, tool.name())
        }
    }

    /// Splits a public name back into server and name. A name without the separator has no server.
    pub fn parse(&self, public: &str) -> ToolId {
        match public.split_once(self.separator.as_str()) {
            Some((server, name)) => ToolId::new(server, name),
            None => ToolId::new("", public),
        }
    }
}

/// A name pattern (see the module documentation for the one matching rule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct NamePattern {
    raw: String,
    server: Option<String>,
    tool: String,
}

impl NamePattern {
    pub fn parse(pattern: &str) -> Self {
        let raw = pattern.trim().to_string();
        let (server, tool) = match raw.split_once(':') {
            Some((server, tool)) => {
                let tool = tool.trim();
                (
                    Some(server.trim().to_lowercase()),
                    if tool.is_empty() {
                        "*".to_string()
                    } else {
                        tool.to_lowercase()
                    },
                )
            }
            None => (None, raw.to_lowercase()),
        };
        Self { raw, server, tool }
    }

    /// A pattern for every tool of the servers matching `glob`.
    pub fn server(glob: &str) -> Self {
        Self::parse(&format!("{}:*", glob.trim()))
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Whether the tool `id` matches; `naming` gives the public name bare patterns also match.
    pub fn matches(&self, id: &ToolId, naming: &Naming) -> bool {
        match &self.server {
            Some(server) => glob(server, &id.server) && glob(&self.tool, &id.name),
            None => {
                glob(&self.tool, &id.name)
                    || (!id.server.is_empty() && glob(&self.tool, &naming.public_name(id)))
            }
        }
    }

    /// Whether a server-name pattern matches `server` (the tool side is ignored).
    pub fn matches_server(&self, server: &str) -> bool {
        glob(self.server.as_deref().unwrap_or(&self.tool), server)
    }
}

impl From<NamePattern> for String {
    fn from(pattern: NamePattern) -> Self {
        pattern.raw
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for NamePattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        if raw.trim().is_empty() || raw.matches(':').count() > 1 {
            return Err(serde::de::Error::custom(format!(
                "`{raw}` is not a name pattern; write `server:tool`, `server:*` or a tool name"
            )));
        }
        Ok(Self::parse(&raw))
    }
}

/// `*` matches any run of characters; everything else matches itself, case-insensitively.
/// `pattern` is already lowercase. Iterative, so no pattern can exhaust the stack.
fn glob(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
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

/// A category definition: tools join it by server (`servers`, globs) or by name pattern
/// (`tools`). The first matching definition wins.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CategoryDef {
    pub id: String,
    /// Display name; the id when absent.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub servers: Vec<NamePattern>,
    #[serde(default)]
    pub tools: Vec<NamePattern>,
}

impl CategoryDef {
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }
}

/// One category with its member count, as every face lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CategoryInfo {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub tool_count: usize,
}

/// Every name rule of a catalog. The default keeps every tool as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogPolicy {
    pub naming: Naming,
    /// Only servers matching one of these; empty means all.
    pub selected_servers: Vec<NamePattern>,
    /// Only tools matching one of these; empty means all.
    pub selected_tools: Vec<NamePattern>,
    /// Category definitions, in order of precedence.
    pub category_defs: Vec<CategoryDef>,
    /// Category per server name, for tools no definition claims.
    pub server_categories: BTreeMap<String, String>,
    /// Tags added to every tool of a server.
    pub server_tags: BTreeMap<String, Vec<String>>,
    /// Tools always sent in full.
    pub never_defer: Vec<NamePattern>,
    /// Tools visible in full in every session from the start.
    pub pinned: Vec<NamePattern>,
    /// Categories whose tools are always sent in full (by id or name).
    pub always_visible_categories: Vec<String>,
}

impl CatalogPolicy {
    /// Whether a server passes `selected_servers`.
    pub fn server_selected(&self, server: &str) -> bool {
        self.selected_servers.is_empty()
            || self
                .selected_servers
                .iter()
                .any(|p| p.matches_server(server))
    }

    /// Whether a tool passes `selected_servers` and `selected_tools`.
    pub fn tool_selected(&self, id: &ToolId) -> bool {
        self.server_selected(&id.server)
            && (self.selected_tools.is_empty()
                || self
                    .selected_tools
                    .iter()
                    .any(|p| p.matches(id, &self.naming)))
    }

    /// A server's tools as the engine keeps them: the unselected dropped, the rest with their
    /// server, category, tags and defer policy set.
    pub fn apply(&self, server: &str, tools: Vec<Tool>) -> Vec<Tool> {
        let always_visible: Vec<String> = self
            .always_visible_categories
            .iter()
            .map(|c| self.canonical_category(c).to_lowercase())
            .collect();
        tools
            .into_iter()
            .filter_map(|mut tool| {
                tool.set_server(server);
                let id = tool.id();
                if !self.tool_selected(&id) {
                    return None;
                }
                tool.set_category(self.category_of(&id, tool.category()));
                if let Some(tags) = self.server_tags.get(server) {
                    let mut all = tool.tags().to_vec();
                    for tag in tags {
                        if !all.iter().any(|t| t.eq_ignore_ascii_case(tag)) {
                            all.push(tag.clone());
                        }
                    }
                    tool.set_tags(all);
                }
                let listed = |patterns: &[NamePattern]| {
                    patterns.iter().any(|p| p.matches(&id, &self.naming))
                };
                if listed(&self.never_defer)
                    || listed(&self.pinned)
                    || tool
                        .category()
                        .is_some_and(|c| always_visible.contains(&c.to_lowercase()))
                {
                    tool.set_defer(DeferPolicy::Never);
                }
                Some(tool)
            })
            .collect()
    }

    /// The category id of a tool: the first definition that claims it, else its server's
    /// category, else its own; labels naming a definition (by id or name) become its id.
    fn category_of(&self, id: &ToolId, own: Option<&str>) -> Option<String> {
        let claimed = self.category_defs.iter().find(|d| {
            d.servers.iter().any(|s| s.matches_server(&id.server))
                || d.tools.iter().any(|p| p.matches(id, &self.naming))
        });
        if let Some(def) = claimed {
            return Some(def.id.clone());
        }
        let label = self
            .server_categories
            .get(&id.server)
            .map(String::as_str)
            .or(own)?
            .trim();
        (!label.is_empty()).then(|| self.canonical_category(label).to_string())
    }

    /// A defined category named by `label` (id or name, any case), as its id; other labels as they
    /// are.
    fn canonical_category<'a>(&'a self, label: &'a str) -> &'a str {
        let label = label.trim();
        self.category_defs
            .iter()
            .find(|d| {
                d.id.eq_ignore_ascii_case(label) || d.display_name().eq_ignore_ascii_case(label)
            })
            .map_or(label, |d| d.id.as_str())
    }

    /// Every category with its count over `tools`: definitions in order (listed even when empty),
    /// then the categories only tools name, by id.
    pub fn categories<'a>(&self, tools: impl IntoIterator<Item = &'a Tool>) -> Vec<CategoryInfo> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for tool in tools {
            if let Some(id) = tool.category() {
                *counts.entry(id).or_default() += 1;
            }
        }
        let mut out: Vec<CategoryInfo> = self
            .category_defs
            .iter()
            .map(|d| CategoryInfo {
                id: d.id.clone(),
                name: d.display_name().to_string(),
                description: d.description.clone(),
                tool_count: counts.remove(d.id.as_str()).unwrap_or(0),
            })
            .collect();
        let mut rest: Vec<(&str, usize)> = counts.into_iter().collect();
        rest.sort();
        out.extend(rest.into_iter().map(|(id, tool_count)| CategoryInfo {
            id: id.to_string(),
            name: id.to_string(),
            description: String::new(),
            tool_count,
        }));
        out
    }
}

/// Finds a category among `known` by id, then by name, any case.
pub fn find_category<'a>(known: &'a [CategoryInfo], wanted: &str) -> Option<&'a CategoryInfo> {
    let wanted = wanted.trim();
    known
        .iter()
        .find(|c| c.id.eq_ignore_ascii_case(wanted))
        .or_else(|| known.iter().find(|c| c.name.eq_ignore_ascii_case(wanted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(server: &str, name: &str) -> ToolId {
        ToolId::new(server, name)
    }

    #[test]
    fn glob_matches_wildcards_case_insensitively() {
        assert!(glob("*", "anything"));
        assert!(glob("get_*", "get_weather"));
        assert!(glob("*_file", "read_file"));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("get_*", "set_weather"));
        assert!(glob("github", "GitHub"));
        assert!(glob("**", ""));
        assert!(!glob("a", ""));
    }

    #[test]
    fn name_patterns_follow_one_rule() {
        let naming = Naming::default();
        let m = |p: &str, server: &str, name: &str| {
            NamePattern::parse(p).matches(&id(server, name), &naming)
        };
        assert!(m("github:*", "github", "create_issue"));
        assert!(!m("github:*", "gitlab", "create_issue"));
        assert!(m("GitHub:Create_Issue", "github", "create_issue"));
        assert!(m("github:", "github", "x"));
        assert!(m("read_*", "fs", "read_file"));
        assert!(m("fs___read_file", "fs", "read_file"));
        assert!(m("fs___*", "fs", "write_file"));
        assert!(!m("fs___*", "db", "write_file"));
        assert!(NamePattern::server("git*").matches_server("GitHub"));
        assert!(NamePattern::parse("git*").matches_server("github"));
    }

    #[test]
    fn naming_round_trips() {
        let naming = Naming::new("__");
        assert_eq!(naming.public_name(&id("gh", "x")), "gh__x");
        assert_eq!(naming.parse("gh__x"), id("gh", "x"));
        assert_eq!(naming.parse("plain"), id("", "plain"));
        assert_eq!(naming.public_name(&id("", "plain")), "plain");
        assert_eq!(Naming::new("").separator(), DEFAULT_SEPARATOR);
    }

    fn def(id: &str, servers: &[&str], tools: &[&str]) -> CategoryDef {
        CategoryDef {
            id: id.into(),
            name: Some(format!("{id} name")),
            description: format!("{id} tools"),
            servers: servers.iter().map(|s| NamePattern::parse(s)).collect(),
            tools: tools.iter().map(|s| NamePattern::parse(s)).collect(),
        }
    }

    #[test]
    fn categories_definitions_then_server_map_then_own() {
        let policy = CatalogPolicy {
            category_defs: vec![
                def("code", &["git*"], &["*:create_issue"]),
                def("chat", &[], &["slack:*"]),
            ],
            server_categories: [("fs".to_string(), "Files".to_string())].into(),
            ..CatalogPolicy::default()
        };
        let t = |server: &str, name: &str, cat: Option<&str>| {
            let mut tool = Tool::new(name, "d");
            tool.set_category(cat.map(String::from));
            policy.apply(server, vec![tool]).remove(0)
        };
        let tools = [
            t("github", "list_prs", Some("Development")),
            t("jira", "create_issue", None),
            t("slack", "post", None),
            t("fs", "read", Some("Other")),
            t("mail", "send", Some("CHAT NAME")),
            t("misc", "x", Some("Misc")),
            t("misc", "y", None),
        ];
        let of: Vec<_> = tools.iter().map(|t| t.category()).collect();
        assert_eq!(
            of,
            [
                Some("code"),
                Some("code"),
                Some("chat"),
                Some("Files"),
                Some("chat"),
                Some("Misc"),
                None
            ]
        );
        let list = policy.categories(tools.iter());
        let summary: Vec<_> = list.iter().map(|c| (c.id.as_str(), c.tool_count)).collect();
        assert_eq!(
            summary,
            [("code", 2), ("chat", 2), ("Files", 1), ("Misc", 1)]
        );
        assert_eq!(find_category(&list, "CODE NAME").unwrap().id, "code");
        assert_eq!(find_category(&list, "misc").unwrap().id, "Misc");
        assert!(find_category(&list, "nope").is_none());
    }

    #[test]
    fn selection_tags_and_defer_are_applied_once() {
        let policy = CatalogPolicy {
            selected_servers: vec![NamePattern::parse("fs"), NamePattern::parse("g*")],
            selected_tools: vec![
                NamePattern::parse("fs:*"),
                NamePattern::parse("gh___list_*"),
            ],
            server_tags: [("fs".to_string(), vec!["disk".to_string()])].into(),
            never_defer: vec![NamePattern::parse("read_file")],
            pinned: vec![NamePattern::parse("gh:list_prs")],
            server_categories: [("fs".to_string(), "Files".to_string())].into(),
            always_visible_categories: vec!["files".into()],
            ..CatalogPolicy::default()
        };
        assert!(policy.server_selected("fs") && policy.server_selected("gh"));
        assert!(!policy.server_selected("db"));
        let fs = policy.apply(
            "fs",
            vec![Tool::new("read_file", "r"), Tool::new("write_file", "w")],
        );
        assert_eq!(fs.len(), 2);
        assert!(fs.iter().all(|t| t.tags() == ["disk"]));
        assert!(fs.iter().all(|t| t.defer() == DeferPolicy::Never));
        let gh = policy.apply(
            "gh",
            vec![
                Tool::new("list_prs", "l"),
                Tool::new("list_issues", "l"),
                Tool::new("create_issue", "c"),
            ],
        );
        let names: Vec<_> = gh.iter().map(|t| (t.name(), t.defer())).collect();
        assert_eq!(
            names,
            [
                ("list_prs", DeferPolicy::Never),
                ("list_issues", DeferPolicy::Automatic)
            ]
        );
        assert!(policy.apply("db", vec![Tool::new("q", "q")]).is_empty());
    }
}
