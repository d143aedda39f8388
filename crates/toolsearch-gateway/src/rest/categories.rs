//! Categories as the REST API shows them: defined in the config (`[[categories]]`, tools assigned by
//! server or name pattern), assigned per server (`toolSearch.categories`), or the tools' own
//! `category` field, in that order of precedence. Resolved at request time, so they follow the live
//! catalog without re-indexing.

use std::collections::{BTreeMap, HashMap};

use toolsearch_core::{NamePattern, Tool};

use crate::config::{glob, CategoryDef, GatewayConfig};

/// One category with its member count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CategoryInfo {
    pub id: String,
    pub name: String,
    pub description: String,
    pub tool_count: usize,
}

#[derive(Debug, Clone)]
struct Def {
    id: String,
    name: String,
    description: String,
    servers: Vec<String>,
    tools: Vec<NamePattern>,
}

/// Category definitions and assignment rules.
#[derive(Debug, Clone, Default)]
pub struct Categories {
    defs: Vec<Def>,
    /// Server name → category id or name (`toolSearch.categories`).
    by_server: BTreeMap<String, String>,
}

impl Categories {
    /// No definitions: tools' own `category` fields only.
    pub fn from_tools_only() -> Self {
        Self::default()
    }

    pub fn new(defs: &[CategoryDef], by_server: BTreeMap<String, String>) -> Self {
        Self {
            defs: defs
                .iter()
                .map(|d| Def {
                    id: d.id.clone(),
                    name: d.display_name().to_string(),
                    description: d.description.clone(),
                    servers: d.servers.clone(),
                    tools: d.tools.iter().map(|p| NamePattern::parse(p)).collect(),
                })
                .collect(),
            by_server,
        }
    }

    pub fn from_config(config: &GatewayConfig) -> Self {
        Self::new(&config.categories, config.tool_search.categories.clone())
    }

    /// A defined category named by `label` (id or name, any case), as its id.
    fn canonical<'a>(&'a self, label: &'a str) -> &'a str {
        self.defs
            .iter()
            .find(|d| d.id.eq_ignore_ascii_case(label) || d.name.eq_ignore_ascii_case(label))
            .map_or(label, |d| d.id.as_str())
    }

    /// The id of the category a tool belongs to, if any.
    pub fn category_of<'a>(&'a self, tool: &'a Tool) -> Option<&'a str> {
        let claimed = self.defs.iter().find(|d| {
            d.servers.iter().any(|s| glob(s, &tool.server))
                || d.tools.iter().any(|p| p.matches(&tool.server, &tool.name))
        });
        if let Some(def) = claimed {
            return Some(&def.id);
        }
        let label = self
            .by_server
            .get(&tool.server)
            .or(tool.category.as_ref())?;
        let label = label.trim();
        (!label.is_empty()).then(|| self.canonical(label))
    }

    /// Every category with its count over `tools`: definitions in config order (listed even when
    /// empty), then categories that only tools name, by id.
    pub fn list<'a>(&self, tools: impl IntoIterator<Item = &'a Tool>) -> Vec<CategoryInfo> {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for tool in tools {
            if let Some(id) = self.category_of(tool) {
                *counts.entry(id.to_string()).or_default() += 1;
            }
        }
        let mut out: Vec<CategoryInfo> = self
            .defs
            .iter()
            .map(|d| CategoryInfo {
                id: d.id.clone(),
                name: d.name.clone(),
                description: d.description.clone(),
                tool_count: counts.remove(&d.id).unwrap_or(0),
            })
            .collect();
        let mut rest: Vec<(String, usize)> = counts.into_iter().collect();
        rest.sort();
        out.extend(rest.into_iter().map(|(id, tool_count)| CategoryInfo {
            name: id.clone(),
            id,
            description: String::new(),
            tool_count,
        }));
        out
    }

    /// Finds a category among `known` by id or name, any case.
    pub fn find<'a>(known: &'a [CategoryInfo], wanted: &str) -> Option<&'a CategoryInfo> {
        let wanted = wanted.trim();
        known
            .iter()
            .find(|c| c.id.eq_ignore_ascii_case(wanted))
            .or_else(|| known.iter().find(|c| c.name.eq_ignore_ascii_case(wanted)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(id: &str, servers: &[&str], tools: &[&str]) -> CategoryDef {
        CategoryDef {
            id: id.into(),
            name: Some(format!("{id} name")),
            description: format!("{id} tools"),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn precedence_is_definitions_then_server_map_then_tool_field() {
        let cats = Categories::new(
            &[
                def("code", &["git*"], &["*:create_issue"]),
                def("chat", &[], &["slack:*"]),
            ],
            [("fs".to_string(), "Files".to_string())].into(),
        );
        let t = |server: &str, name: &str, cat: Option<&str>| {
            let mut tool = Tool::new(name, "d").with_server(server);
            tool.category = cat.map(String::from);
            tool
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
        let of: Vec<_> = tools.iter().map(|t| cats.category_of(t)).collect();
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
        let list = cats.list(tools.iter());
        let summary: Vec<_> = list.iter().map(|c| (c.id.as_str(), c.tool_count)).collect();
        assert_eq!(
            summary,
            [("code", 2), ("chat", 2), ("Files", 1), ("Misc", 1)]
        );
        assert_eq!(Categories::find(&list, "CODE NAME").unwrap().id, "code");
        assert_eq!(Categories::find(&list, "misc").unwrap().id, "Misc");
        assert!(Categories::find(&list, "nope").is_none());
    }
}
