//! Disclosure settings: the preset, the activation threshold and the lists that keep tools visible.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How a session discovers tools it cannot see yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Pinned tools plus `search_tools` and `call_tool`; the list never changes.
    #[default]
    Search,
    /// Pinned tools in full, the rest as stubs; `tool_search` reveals matches.
    Progressive,
    /// Pinned tools; `search_tools` lists, `add_tool` reveals, `show_all_tools` browses.
    Add,
    /// The first N tools; `search_available_tools` replaces them with the matches.
    Limit,
    /// Every tool in full, no meta-tools.
    Passthrough,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::Search,
        Preset::Progressive,
        Preset::Add,
        Preset::Limit,
        Preset::Passthrough,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Search => "search",
            Preset::Progressive => "progressive",
            Preset::Add => "add",
            Preset::Limit => "limit",
            Preset::Passthrough => "passthrough",
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Preset::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::InvalidSetting(format!(
                    "unknown disclosure preset `{s}`; use search, progressive, add, limit or passthrough"
                ))
            })
    }
}

/// Which tools the `limit` preset shows before any search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionOrder {
    /// Servers in `server_priority` order first, then the others by name; each server's tools in
    /// the order the server listed them.
    #[default]
    ServerPriority,
    /// By public name.
    Alphabetical,
}

impl FromStr for SelectionOrder {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "server_priority" => Ok(SelectionOrder::ServerPriority),
            "alphabetical" => Ok(SelectionOrder::Alphabetical),
            _ => Err(Error::InvalidSetting(format!(
                "unknown tool selection order `{s}`; use server_priority or alphabetical"
            ))),
        }
    }
}

/// Everything that decides what a session sees, beside the catalog policy (never-defer, pinned and
/// always-visible tools are the policy's: it gives them `DeferPolicy::Never`). Field names follow
/// the gateway's config file (camelCase) so that it can be read straight from there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DisclosureConfig {
    pub preset: Preset,
    /// Catalogs of at most this many tools pass through unchanged (except `DeferPolicy::Always`).
    pub threshold: usize,
    /// `limit` preset: how many tools a session sees besides the always-visible ones.
    pub max_tools_limit: usize,
    /// `limit` preset: which tools come first before any search.
    pub tool_selection_order: SelectionOrder,
    /// `limit` preset with `server_priority`: servers in this order first.
    pub server_priority: Vec<String>,
    /// Sessions kept at once; past it the least recently used is forgotten.
    pub max_sessions: usize,
    /// Tools revealed per session; past it the oldest reveal is dropped.
    pub max_reveals_per_session: usize,
    /// Most matches `tool_search` returns (and reveals).
    pub tool_search_limit: usize,
    /// Meta-tool searches drop results below this fraction of the best score.
    pub top_band: f32,
    /// List `list_categories` and `get_tools_by_category` when the catalog has categories. They
    /// answer by name either way; unlisted, they cost the model nothing, and `search_tools` with
    /// `category` and no query lists a category's tools.
    pub category_tools: bool,
}

impl Default for DisclosureConfig {
    fn default() -> Self {
        Self {
            preset: Preset::Search,
            threshold: 15,
            max_tools_limit: 20,
            tool_selection_order: SelectionOrder::ServerPriority,
            server_priority: Vec::new(),
            max_sessions: 10_000,
            max_reveals_per_session: 256,
            tool_search_limit: 8,
            top_band: 0.5,
            category_tools: false,
        }
    }
}

impl DisclosureConfig {
    pub fn preset(mut self, preset: Preset) -> Self {
        self.preset = preset;
        self
    }

    pub fn threshold(mut self, threshold: usize) -> Self {
        self.threshold = threshold;
        self
    }

    /// Checks the values that would make disclosure misbehave rather than merely look odd.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("maxSessions", self.max_sessions),
            ("maxRevealsPerSession", self.max_reveals_per_session),
            ("toolSearchLimit", self.tool_search_limit),
            ("maxToolsLimit", self.max_tools_limit),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(Error::InvalidSetting(format!(
                    "{name} is 0; it must be at least 1"
                )));
            }
        }
        if !(0.0..=1.0).contains(&self.top_band) || self.top_band.is_nan() {
            return Err(Error::InvalidSetting(format!(
                "topBand is {}; it must be between 0 and 1",
                self.top_band
            )));
        }
        Ok(())
    }
}
