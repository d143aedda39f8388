//! System-prompt guidance: how to find tools in this preset, and what the catalog holds.

use super::config::Preset;
use super::meta::{
    ADD_TOOL, CALL_TOOL, SEARCH_AVAILABLE_TOOLS, SEARCH_TOOLS, SHOW_ALL_TOOLS, TOOL_SEARCH,
};
use crate::tool::Tool;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Characters of the guidance's category (or server) listing, past which the rest are summed
/// up: the default surface (its tool list and these instructions) stays under 600 o200k tokens
/// however many servers or categories a catalog has. Names of words, dashes and digits run
/// about 2.5 characters a token, so the listing costs at most about 120.
pub const LISTING_CHARS: usize = 300;

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

/// `counts` as "name (count), ...", the largest first (ties by name), within [`LISTING_CHARS`];
/// what does not fit is summed up as "and N more (M tools)".
fn listing(counts: &[(String, usize)]) -> String {
    let mut order: Vec<&(String, usize)> = counts.iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut parts: Vec<String> = Vec::new();
    let mut used = 0;
    let (mut left_out, mut left_tools) = (0usize, 0usize);
    for (name, count) in order {
        let part = format!("{name} ({count})");
        let cost = part.len() + if parts.is_empty() { 0 } else { 2 };
        if used + cost <= LISTING_CHARS {
            used += cost;
            parts.push(part);
        } else {
            left_out += 1;
            left_tools += count;
        }
    }
    if left_out > 0 {
        let tools = if left_tools == 1 { "tool" } else { "tools" };
        parts.push(format!("and {left_out} more ({left_tools} {tools})"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: usize, name: impl Fn(usize) -> String) -> Vec<(String, usize)> {
        (0..n).map(|i| (name(i), i % 7 + 1)).collect()
    }

    #[test]
    fn a_listing_stays_within_its_budget_however_many_entries() {
        for n in [1, 5, 40, 41, 300, 5_000] {
            let counts = counts(n, |i| format!("internal-analytics-service-{i:04}"));
            let text = listing(&counts);
            let summary = text.rfind(", and ").map_or(text.len(), |at| at);
            assert!(summary <= LISTING_CHARS, "{n}: {} characters", summary);
            // Every tool is counted: listed, or in the summary.
            let listed: usize = text
                .split(", ")
                .filter_map(|part| part.strip_suffix(')')?.rsplit_once(" ("))
                .filter(|(name, _)| !name.starts_with("and "))
                .map(|(_, count)| count.parse::<usize>().unwrap())
                .sum();
            let summed: usize = text.rsplit_once("more (").map_or(0, |(_, rest)| {
                rest.split(' ').next().unwrap().parse().unwrap()
            });
            assert_eq!(
                listed + summed,
                counts.iter().map(|c| c.1).sum::<usize>(),
                "{n}"
            );
        }
    }

    #[test]
    fn a_cut_listing_names_the_largest_first() {
        let mut counts = counts(200, |i| format!("server-{i:03}"));
        counts.push(("zz-the-largest".to_owned(), 500));
        let text = listing(&counts);
        assert!(text.starts_with("zz-the-largest (500), "), "{text}");
        assert!(text.contains(", and "), "{text}");
        // A short listing is whole, largest first, nothing summed up.
        let text = listing(&[("web".into(), 2), ("files".into(), 3), ("mail".into(), 2)]);
        assert_eq!(text, "files (3), mail (2), web (2)");
    }

    #[test]
    fn a_name_longer_than_the_budget_is_summed_up_not_cut() {
        let long = "x".repeat(LISTING_CHARS + 1);
        let text = listing(&[(long, 9), ("files".into(), 3)]);
        assert_eq!(text, "files (3), and 1 more (9 tools)");
    }
}
