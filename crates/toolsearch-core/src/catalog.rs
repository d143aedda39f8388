//! The set of tools, grouped by server and versioned.

use crate::error::{Error, Result};
use crate::policy::Naming;
use crate::scope::Scope;
use crate::tool::{Tool, ToolId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Tools grouped by server. Replacing one server's tools is a single operation, and every change
/// bumps the version so that caches (indexes, sessions) can tell they are stale.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    servers: BTreeMap<String, Vec<Arc<Tool>>>,
    /// Each server's tools' places in its list, in the order of their names: a call resolves its
    /// tool by binary search, whatever the catalog's size, and no name is held twice (a map
    /// from names took a fifth of the memory of the tools themselves).
    places: HashMap<String, Box<[u32]>>,
    version: u64,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a catalog from tools of any servers. Duplicate (server, name) pairs are an error.
    pub fn from_tools(tools: impl IntoIterator<Item = Tool>) -> Result<Self> {
        // Each tool moves once, into its `Arc`; grouping moves pointers, not tools (for a large
        // catalog, grouping the tools themselves briefly held two more copies of every one).
        let mut grouped: BTreeMap<String, Vec<Arc<Tool>>> = BTreeMap::new();
        for tool in tools {
            match grouped.get_mut(tool.server()) {
                Some(list) => list.push(Arc::new(tool)),
                None => {
                    grouped.insert(tool.server().to_owned(), vec![Arc::new(tool)]);
                }
            }
        }
        let mut catalog = Self::new();
        for (server, tools) in grouped {
            catalog.replace_server_shared(&server, tools)?;
        }
        Ok(catalog)
    }

    /// Replaces every tool of `server` with `tools` (their `server` field is set to `server`).
    pub fn replace_server(&mut self, server: &str, tools: Vec<Tool>) -> Result<&[Arc<Tool>]> {
        self.replace_server_shared(server, tools.into_iter().map(Arc::new).collect())
    }

    fn replace_server_shared(
        &mut self,
        server: &str,
        mut tools: Vec<Arc<Tool>>,
    ) -> Result<&[Arc<Tool>]> {
        for tool in tools.iter_mut() {
            if tool.server() != server {
                Arc::make_mut(tool).set_server(server);
            }
            if tool.name().trim().is_empty() {
                return Err(Error::EmptyToolName {
                    server: server.to_string(),
                });
            }
        }
        let count = u32::try_from(tools.len())
            .map_err(|_| Error::Index(format!("server `{server}` lists over 4 billion tools")))?;
        let mut places: Box<[u32]> = (0..count).collect();
        // Stable: a repeated name's places stay in listing order.
        places.sort_by(|&a, &b| tools[a as usize].name().cmp(tools[b as usize].name()));
        // The first tool, in listing order, whose name an earlier tool has.
        let repeated = places
            .windows(2)
            .filter(|pair| tools[pair[0] as usize].name() == tools[pair[1] as usize].name())
            .map(|pair| pair[1])
            .min();
        if let Some(place) = repeated {
            return Err(Error::DuplicateTool {
                server: server.to_string(),
                name: tools[place as usize].name().to_owned(),
            });
        }
        self.version += 1;
        self.places.insert(server.to_string(), places);
        let slot = self.servers.entry(server.to_string()).or_default();
        *slot = tools;
        Ok(slot)
    }

    /// Removes a server and its tools; returns whether it was present.
    pub fn remove_server(&mut self, server: &str) -> bool {
        self.places.remove(server);
        let removed = self.servers.remove(server).is_some();
        if removed {
            self.version += 1;
        }
        removed
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn len(&self) -> usize {
        self.servers.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.servers.keys().map(String::as_str)
    }

    pub fn server_tools(&self, server: &str) -> &[Arc<Tool>] {
        self.servers.get(server).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every tool, by server then in the order the server listed them.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.servers.values().flatten()
    }

    pub fn get(&self, id: &ToolId) -> Option<&Arc<Tool>> {
        let tools = self.servers.get(&id.server)?;
        let places = self.places.get(&id.server)?;
        let at = places
            .binary_search_by(|&place| tools[place as usize].name().cmp(&id.name))
            .ok()?;
        tools.get(places[at] as usize)
    }

    /// Resolves a name as a client would write it: `server___name`, or a bare name that is unique
    /// in the catalog.
    pub fn resolve(&self, name: &str, naming: &Naming) -> Option<&Arc<Tool>> {
        self.resolve_in(name, naming, &Scope::all())
    }

    /// [`Catalog::resolve`] among the tools of `scope` only: a tool outside it is not found, and
    /// a bare name needs to be unique among the tools in scope.
    pub fn resolve_in(&self, name: &str, naming: &Naming, scope: &Scope) -> Option<&Arc<Tool>> {
        let id = naming.parse(name);
        if let Some(tool) = self.get(&id).filter(|t| scope.allows_tool(t, naming)) {
            return Some(tool);
        }
        let mut bare = self
            .tools()
            .filter(|t| t.name() == name && scope.allows_tool(t, naming));
        match (bare.next(), bare.next()) {
            (Some(tool), None) => Some(tool),
            _ => None,
        }
    }

    /// Up to `max` public names closest to `name`, for did-you-mean messages.
    pub fn suggest(&self, name: &str, naming: &Naming, max: usize) -> Vec<String> {
        self.suggest_in(name, naming, max, &Scope::all())
    }

    /// [`Catalog::suggest`] among the tools of `scope` only: no name outside it is ever offered.
    /// A name longer than [`MAX_NAME_CHARS`] gets no suggestion, and a catalog name is compared
    /// only when its length is near the name's: the work stays bounded whatever a caller sends.
    pub fn suggest_in(
        &self,
        name: &str,
        naming: &Naming,
        max: usize,
        scope: &Scope,
    ) -> Vec<String> {
        if name_too_long(name) {
            return Vec::new();
        }
        let wanted = name.to_lowercase();
        let wanted_chars = wanted.chars().count();
        let similarity = |candidate: &str| {
            let candidate = candidate.to_lowercase();
            if lengths_comparable(wanted_chars, candidate.chars().count()) {
                strsim::jaro_winkler(&wanted, &candidate)
            } else {
                0.0
            }
        };
        let mut scored: Vec<(f64, String)> = self
            .tools()
            .filter(|t| scope.allows_tool(t, naming))
            .map(|t| {
                let public = naming.tool_name(t);
                let score = similarity(&public).max(similarity(t.name()));
                (score, public)
            })
            .filter(|(score, _)| *score > 0.7)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.into_iter().take(max).map(|(_, n)| n).collect()
    }

    /// Categories with their tool counts, sorted by name. Tools without a category are not counted.
    pub fn categories(&self) -> Vec<(String, usize)> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for tool in self.tools() {
            if let Some(category) = tool.category() {
                *counts.entry(category.to_owned()).or_default() += 1;
            }
        }
        counts.into_iter().collect()
    }
}

/// The longest tool or prompt name, in characters, that a caller may name and an upstream may
/// list (MCP asks for at most 128). A longer name is refused before any matching, so resolving
/// and suggesting never grow with what a client sends.
pub const MAX_NAME_CHARS: usize = 256;

/// Whether `name` is longer than [`MAX_NAME_CHARS`] characters; reads no further than that.
pub fn name_too_long(name: &str) -> bool {
    name.len() > MAX_NAME_CHARS && name.chars().nth(MAX_NAME_CHARS).is_some()
}

/// Refuses a `kind` name (`"tool"`, `"prompt"`) longer than [`MAX_NAME_CHARS`] characters.
pub fn check_name_length(name: &str, kind: &'static str) -> Result<()> {
    if name_too_long(name) {
        return Err(Error::NameTooLong {
            kind,
            chars: name.chars().count(),
            max: MAX_NAME_CHARS,
        });
    }
    Ok(())
}

/// Whether names of these lengths (in characters) are worth comparing for a did-you-mean: a name
/// three times longer than another plus a few characters is no typo of it, and skipping it keeps
/// the comparison's cost (which grows with both lengths) small.
fn lengths_comparable(a: usize, b: usize) -> bool {
    let (shorter, longer) = (a.min(b), a.max(b));
    longer <= shorter.saturating_mul(3).saturating_add(8)
}

/// How deeply a tool's input schema may nest (objects and arrays, the outermost object counting
/// one). Real schemas stay well under 20; deeper ones are refused tool by tool, so that walking a
/// schema (validation, provider rewrites) never recurses without bound.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// Why one tool was left out of its server's tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRejection {
    #[error("its name is empty; the server must give every tool a name")]
    EmptyName,
    #[error("the server lists this name twice; the first definition is kept")]
    DuplicateName,
    #[error("its name is {chars} characters long, longer than the limit of {max}; the server must shorten it")]
    NameTooLong { chars: usize, max: usize },
    #[error("its name holds the control or bidirectional-formatting character U+{0:04X}, which can disguise a name to a reader; the server must rename it")]
    HiddenCharacter(u32),
    #[error("its input schema nests at least {depth} levels deep, deeper than the limit of {max}; the server must flatten it")]
    SchemaTooDeep { depth: usize, max: usize },
}

/// One tool left out of its server's tools, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub server: String,
    /// The name as listed (may be empty or hold the very characters that were refused).
    pub name: String,
    pub reason: ToolRejection,
}

/// Checks a server's tools one by one and keeps the good ones, in their order: a tool with an
/// empty name, a name longer than [`MAX_NAME_CHARS`] characters, a control or
/// bidirectional-formatting character in its name, a name already kept
/// (the first is kept), or an input schema nested deeper than [`MAX_SCHEMA_DEPTH`] is left out,
/// and only that tool. Each tool's `server` is set to `server`.
pub fn validate_tools(server: &str, tools: Vec<Tool>) -> (Vec<Tool>, Vec<Rejected>) {
    let mut seen: HashSet<String> = HashSet::new();
    let mut kept = Vec::with_capacity(tools.len());
    let mut rejected = Vec::new();
    for mut tool in tools {
        tool.set_server(server);
        let reason = if tool.name().trim().is_empty() {
            Some(ToolRejection::EmptyName)
        } else if name_too_long(tool.name()) {
            Some(ToolRejection::NameTooLong {
                chars: tool.name().chars().count(),
                max: MAX_NAME_CHARS,
            })
        } else if let Some(c) = tool.name().chars().find(|&c| is_hidden_character(c)) {
            Some(ToolRejection::HiddenCharacter(u32::from(c)))
        } else if seen.contains(tool.name()) {
            Some(ToolRejection::DuplicateName)
        } else {
            let depth = json_depth(tool.input_schema().text());
            (depth > MAX_SCHEMA_DEPTH).then_some(ToolRejection::SchemaTooDeep {
                depth,
                max: MAX_SCHEMA_DEPTH,
            })
        };
        match reason {
            Some(reason) => rejected.push(Rejected {
                server: server.to_string(),
                name: tool.name().to_owned(),
                reason,
            }),
            None => {
                seen.insert(tool.name().to_owned());
                kept.push(tool);
            }
        }
    }
    (kept, rejected)
}

/// Control characters, and the Unicode characters that reorder or hide text: the bidirectional
/// embeddings, overrides, isolates and marks, zero-width characters and the byte-order mark.
pub fn is_hidden_character(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}'
        )
}

/// How deeply a JSON text nests objects and arrays (`{}` is 1, a scalar 0), read without building
/// a tree, so any depth is safe. Brackets inside strings do not count.
pub fn json_depth(text: impl AsRef<[u8]>) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in text.as_ref() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(server: &str, name: &str) -> Tool {
        Tool::new(name, format!("{name} tool")).with_server(server)
    }

    #[test]
    fn replace_server_replaces_only_that_server() {
        let mut c =
            Catalog::from_tools(vec![tool("a", "x"), tool("a", "y"), tool("b", "z")]).unwrap();
        let v = c.version();
        c.replace_server("a", vec![tool("ignored", "w")]).unwrap();
        assert!(c.version() > v);
        let names: Vec<_> = c.tools().map(|t| t.id().to_string()).collect();
        assert_eq!(names, vec!["a___w", "b___z"]);
    }

    #[test]
    fn get_follows_replacements_and_removals() {
        let id = |server: &str, name: &str| ToolId {
            server: server.into(),
            name: name.into(),
        };
        let mut c =
            Catalog::from_tools(vec![tool("a", "x"), tool("a", "y"), tool("b", "z")]).unwrap();
        assert_eq!(c.get(&id("a", "y")).unwrap().name(), "y");
        c.replace_server("a", vec![tool("a", "y"), tool("a", "w")])
            .unwrap();
        assert_eq!(c.get(&id("a", "y")).unwrap().name(), "y");
        assert_eq!(c.get(&id("a", "w")).unwrap().name(), "w");
        assert!(c.get(&id("a", "x")).is_none());
        // A rejected replacement leaves the server's tools as they were.
        assert!(c
            .replace_server("a", vec![tool("a", "v"), tool("a", "v")])
            .is_err());
        assert_eq!(c.get(&id("a", "w")).unwrap().name(), "w");
        assert!(c.get(&id("a", "v")).is_none());
        assert!(c.remove_server("b"));
        assert!(c.get(&id("b", "z")).is_none());
        assert!(c.get(&id("c", "z")).is_none());
    }

    #[test]
    fn duplicates_and_empty_names_are_rejected() {
        assert!(matches!(
            Catalog::from_tools(vec![tool("a", "x"), tool("a", "x")]),
            Err(Error::DuplicateTool { .. })
        ));
        assert!(matches!(
            Catalog::from_tools(vec![tool("a", " ")]),
            Err(Error::EmptyToolName { .. })
        ));
        // The same name on two servers is fine.
        assert!(Catalog::from_tools(vec![tool("a", "x"), tool("b", "x")]).is_ok());
    }

    #[test]
    fn resolve_and_suggest() {
        let c =
            Catalog::from_tools(vec![tool("gh", "create_issue"), tool("fs", "read_file")]).unwrap();
        let naming = Naming::default();
        assert_eq!(
            c.resolve("gh___create_issue", &naming).unwrap().name(),
            "create_issue"
        );
        assert_eq!(c.resolve("read_file", &naming).unwrap().server(), "fs");
        assert!(c.resolve("nope", &naming).is_none());
        assert_eq!(c.suggest("create_isue", &naming, 3)[0], "gh___create_issue");
    }

    #[test]
    fn overlong_names_get_no_suggestion_and_a_clear_refusal() {
        let c = Catalog::from_tools(vec![tool("gh", "create_issue")]).unwrap();
        let naming = Naming::default();
        let at_limit = "c".repeat(MAX_NAME_CHARS);
        let over = format!("{at_limit}é");
        assert!(check_name_length(&at_limit, "tool").is_ok());
        assert!(c.suggest(&over, &naming, 3).is_empty());
        let refused = check_name_length(&over, "tool").unwrap_err();
        assert!(matches!(
            refused,
            Error::NameTooLong {
                chars: 257,
                max: MAX_NAME_CHARS,
                kind: "tool"
            }
        ));
        let message = refused.to_string();
        assert!(message.contains("257 characters"), "{message}");
        assert!(
            !message.contains(&at_limit),
            "the name is not echoed: {message}"
        );
    }

    #[test]
    fn suggestions_skip_names_of_far_other_lengths() {
        let c = Catalog::from_tools(vec![
            tool("gh", "create_issue"),
            tool("gh", &format!("create_issue_{}", "x".repeat(100))),
        ])
        .unwrap();
        let naming = Naming::default();
        assert_eq!(c.suggest("create_isue", &naming, 3), ["gh___create_issue"]);
        // A name at the limit is still compared with names of comparable length.
        let long = format!("create_issue_{}", "x".repeat(99));
        assert_eq!(c.suggest(&long, &naming, 3).len(), 1);
    }

    #[test]
    fn validate_tools_leaves_out_overlong_names() {
        let long = "n".repeat(MAX_NAME_CHARS + 1);
        let (kept, rejected) = validate_tools("s", vec![tool("s", &long), tool("s", "ok")]);
        assert_eq!(kept.len(), 1);
        assert_eq!(
            rejected[0].reason,
            ToolRejection::NameTooLong {
                chars: MAX_NAME_CHARS + 1,
                max: MAX_NAME_CHARS
            }
        );
    }

    fn deep_schema(name: &str, levels: usize) -> Tool {
        let mut text = String::new();
        for _ in 0..levels - 1 {
            text.push_str(r#"{"type":"object","properties":{"a":"#);
        }
        text.push_str(r#"{"type":"string"}"#);
        for _ in 0..levels - 1 {
            text.push_str("}}");
        }
        let mut t = tool("s", name);
        t.set_input_schema(crate::ToolSchema::from_value(
            serde_json::from_str(&text).unwrap(),
        ));
        t
    }

    #[test]
    fn validation_drops_only_the_bad_tools_and_says_why() {
        let tools = vec![
            tool("x", "good"),
            tool("x", ""),
            tool("x", "good"),
            tool("x", "evil\u{202E}txt"),
            tool("x", "bell\u{7}"),
            deep_schema("deep", 32),
            deep_schema("deeper", 40),
            tool("x", "other"),
        ];
        let (kept, rejected) = validate_tools("s", tools);
        let names: Vec<&str> = kept.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["good", "deep", "other"]);
        assert!(kept.iter().all(|t| t.server() == "s"));
        let reasons: Vec<(&str, &ToolRejection)> = rejected
            .iter()
            .map(|r| (r.name.as_str(), &r.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                ("", &ToolRejection::EmptyName),
                ("good", &ToolRejection::DuplicateName),
                ("evil\u{202E}txt", &ToolRejection::HiddenCharacter(0x202E)),
                ("bell\u{7}", &ToolRejection::HiddenCharacter(7)),
                (
                    "deeper",
                    &ToolRejection::SchemaTooDeep {
                        depth: 79,
                        max: MAX_SCHEMA_DEPTH
                    }
                ),
            ]
        );
        assert!(rejected[4].reason.to_string().contains("79 levels"));
    }

    #[test]
    fn depth_ignores_brackets_in_strings() {
        assert_eq!(json_depth(r#"{"a":"{[{[\"{"}"#), 1);
        assert_eq!(json_depth(r#"[[1],{"b":[]}]"#), 3);
        assert_eq!(json_depth("3"), 0);
        assert_eq!(json_depth("[".repeat(100_000)), 100_000);
    }
}
