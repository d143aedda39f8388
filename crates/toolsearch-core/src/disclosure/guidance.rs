//! System-prompt guidance: how to find tools in this preset, and what the catalog holds.

use super::config::Preset;
use super::meta::{
    ADD_TOOL, CALL_TOOL, SEARCH_AVAILABLE_TOOLS, SEARCH_TOOLS, SHOW_ALL_TOOLS, TOOL_SEARCH,
};
use crate::tool::Tool;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Categories (or servers) listed in the guidance before the rest are summarised.
const MAX_LISTED: usize = 40;

/// The guidance text over `tools` (the caller's, in catalog order). `active` is whether any tool
/// is deferred; when none is, every tool is already visible and the text says only that.
pub fn guidance(preset: Preset, active: bool, tools: &[&Tool], shown: usize) -> String {
    let total = tools.len();
    let mut text = String::new();
    if !active || preset == Preset::Passthrough {
        let _ = write!(
            text,
            "All {total} tools are available to you directly, with their full definitions."
        );
        return text;
    }
    let loaded = match shown {
        0 => "none is".to_string(),
        1 => "1 is".to_string(),
        n => format!("{n} are"),
    };
    let _ = write!(
        text,
        "You have access to {total} tools; {loaded} loaded in full. "
    );
    let how = match preset {
        Preset::Search => format!(
            "For any other, call `{SEARCH_TOOLS}` with what you need, then run a result with \
             `{CALL_TOOL}` {{\"name\", \"arguments\"}}."
        ),
        Preset::Progressive => format!(
            "Tools shown with a placeholder schema are not loaded yet: call `{TOOL_SEARCH}` with keywords or \
             the tool's exact name to load it, then call it directly (or through `{CALL_TOOL}`)."
        ),
        Preset::Add => format!(
            "Call `{SEARCH_TOOLS}` to find tools (names and descriptions), then `{ADD_TOOL}` with their names \
             to add them to your tools. `{SHOW_ALL_TOOLS}` lists every name. `{CALL_TOOL}` runs any tool by name."
        ),
        Preset::Limit => format!(
            "Call `{SEARCH_AVAILABLE_TOOLS}` with what you need: your loaded tools are replaced by the best \
             matches. `{CALL_TOOL}` runs any tool by name."
        ),
        Preset::Passthrough => String::new(),
    };
    text.push_str(&how);
    let categories = categories(tools);
    if !categories.is_empty() {
        text.push_str("\nTool categories (tool count): ");
        text.push_str(&listing(&categories));
        text.push('.');
    } else {
        let mut servers: BTreeMap<String, usize> = BTreeMap::new();
        for tool in tools.iter().filter(|t| !t.server().is_empty()) {
            *servers.entry(tool.server().to_owned()).or_default() += 1;
        }
        if servers.len() > 1 {
            let servers: Vec<(String, usize)> = servers.into_iter().collect();
            text.push_str("\nServers (tool count): ");
            text.push_str(&listing(&servers));
            text.push('.');
        }
    }
    text
}

/// Categories with their tool counts, sorted by name; tools without a category are not counted.
fn categories(tools: &[&Tool]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for tool in tools {
        if let Some(category) = tool.category() {
            *counts.entry(category.to_owned()).or_default() += 1;
        }
    }
    counts.into_iter().collect()
}

fn listing(counts: &[(String, usize)]) -> String {
    let mut parts: Vec<String> = counts
        .iter()
        .take(MAX_LISTED)
        .map(|(name, count)| format!("{name} ({count})"))
        .collect();
    if counts.len() > MAX_LISTED {
        parts.push(format!("and {} more", counts.len() - MAX_LISTED));
    }
    parts.join(", ")
}
