//! The meta-tools, each declared once: a typed argument struct (its JSON Schema is derived from
//! it), a description, and the shape of its result. Descriptions are short on purpose: they are
//! sent on every request.

use super::config::Preset;
use crate::contract::{CategoryArgs, CategoryList, CategoryTools, SearchArgs, SearchResults};
use crate::served::ToolDecl;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const TOOL_SEARCH: &str = "tool_search";
pub const SEARCH_TOOLS: &str = "search_tools";
pub const ADD_TOOL: &str = "add_tool";
pub const SHOW_ALL_TOOLS: &str = "show_all_tools";
pub const SEARCH_AVAILABLE_TOOLS: &str = "search_available_tools";
pub const CALL_TOOL: &str = "call_tool";
pub const LIST_CATEGORIES: &str = "list_categories";
pub const GET_TOOLS_BY_CATEGORY: &str = "get_tools_by_category";

/// Largest page of `show_all_tools` (names only, so it can be larger than a search's).
pub const MAX_NAMES_PAGE: usize = 500;

/// `tool_search`: a query whose matches are loaded.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchArgs {
    /// Keywords, or a tool's exact name.
    pub query: String,
}

/// `add_tool`: the names to add.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddToolArgs {
    /// Exact tool names, as search results give them.
    #[schemars(length(min = 1, max = 50))]
    pub names: Vec<String>,
}

/// `show_all_tools`: one page of names.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowAllArgs {
    /// Skip this many names (the previous page's nextOffset).
    #[serde(default)]
    #[schemars(with = "usize")]
    pub offset: Option<usize>,
    /// Names per page (default 200).
    #[serde(default)]
    #[schemars(with = "usize", range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

/// `call_tool`: which tool, with which arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallToolArgs {
    /// As a search result gives it.
    pub name: String,
    /// Matching the tool's input schema.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
}

/// `list_categories` takes no arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// What `tool_search` returns: the search, and the tools it loaded into the session.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Revealed {
    #[serde(flatten)]
    pub results: SearchResults,
    /// Tools that became available to call directly.
    pub loaded: Vec<String>,
}

/// What `add_tool` returns.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Added {
    pub added: Vec<String>,
    pub already_available: Vec<String>,
}

/// What `show_all_tools` returns.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamesPage {
    pub total: usize,
    pub offset: usize,
    pub names: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaTool {
    ToolSearch,
    SearchTools,
    AddTool,
    ShowAllTools,
    SearchAvailableTools,
    CallTool,
    ListCategories,
    GetToolsByCategory,
}

impl MetaTool {
    pub const ALL: [MetaTool; 8] = [
        MetaTool::ToolSearch,
        MetaTool::SearchTools,
        MetaTool::AddTool,
        MetaTool::ShowAllTools,
        MetaTool::SearchAvailableTools,
        MetaTool::CallTool,
        MetaTool::ListCategories,
        MetaTool::GetToolsByCategory,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MetaTool::ToolSearch => TOOL_SEARCH,
            MetaTool::SearchTools => SEARCH_TOOLS,
            MetaTool::AddTool => ADD_TOOL,
            MetaTool::ShowAllTools => SHOW_ALL_TOOLS,
            MetaTool::SearchAvailableTools => SEARCH_AVAILABLE_TOOLS,
            MetaTool::CallTool => CALL_TOOL,
            MetaTool::ListCategories => LIST_CATEGORIES,
            MetaTool::GetToolsByCategory => GET_TOOLS_BY_CATEGORY,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The meta-tools a preset offers, in the order they are listed. `with_categories` adds the
    /// two category tools.
    pub fn for_preset(preset: Preset, with_categories: bool) -> Vec<MetaTool> {
        let mut tools = match preset {
            Preset::Search => vec![MetaTool::SearchTools, MetaTool::CallTool],
            Preset::Progressive => vec![MetaTool::ToolSearch, MetaTool::CallTool],
            Preset::Add => vec![
                MetaTool::SearchTools,
                MetaTool::AddTool,
                MetaTool::ShowAllTools,
                MetaTool::CallTool,
            ],
            Preset::Limit => vec![MetaTool::SearchAvailableTools, MetaTool::CallTool],
            Preset::Passthrough => return Vec::new(),
        };
        if with_categories {
            tools.extend([MetaTool::ListCategories, MetaTool::GetToolsByCategory]);
        }
        tools
    }

    pub fn description(self, preset: Preset) -> &'static str {
        match (self, preset) {
            (MetaTool::ToolSearch, _) => {
                "Find tools by keywords or exact name and load their full definitions; matches are added to your tools."
            }
            (MetaTool::SearchTools, Preset::Add) => {
                "Search the tool catalog; returns names and descriptions. Then call add_tool with the names you need."
            }
            (MetaTool::SearchTools, _) => {
                "Find tools by what they do; returns matches with their input schemas, to run with call_tool. Without a query, lists the tools of `server` or `category`."
            }
            (MetaTool::AddTool, _) => "Add tools, by exact name, to your tools.",
            (MetaTool::ShowAllTools, _) => "List every tool name, a page at a time.",
            (MetaTool::SearchAvailableTools, _) => {
                "Replace your current tools with the best matches for a query."
            }
            (MetaTool::CallTool, _) => "Run a tool by its exact name.",
            (MetaTool::ListCategories, _) => "List tool categories with their tool counts.",
            (MetaTool::GetToolsByCategory, _) => "List the tools of one category.",
        }
    }

    /// The declaration clients see: arguments and result schemas derived from the types.
    pub fn decl(self, preset: Preset) -> ToolDecl {
        let description = self.description(preset);
        let name = self.name();
        match self {
            MetaTool::ToolSearch => {
                ToolDecl::new::<ToolSearchArgs>(name, description).returns::<Revealed>()
            }
            MetaTool::SearchTools | MetaTool::SearchAvailableTools => {
                ToolDecl::new::<SearchArgs>(name, description).returns::<SearchResults>()
            }
            MetaTool::AddTool => ToolDecl::new::<AddToolArgs>(name, description).returns::<Added>(),
            MetaTool::ShowAllTools => {
                ToolDecl::new::<ShowAllArgs>(name, description).returns::<NamesPage>()
            }
            // Its result is the called tool's, whatever that is.
            MetaTool::CallTool => ToolDecl::new::<CallToolArgs>(name, description),
            MetaTool::ListCategories => {
                ToolDecl::new::<NoArgs>(name, description).returns::<CategoryList>()
            }
            MetaTool::GetToolsByCategory => {
                ToolDecl::new::<CategoryArgs>(name, description).returns::<CategoryTools>()
            }
        }
    }
}
