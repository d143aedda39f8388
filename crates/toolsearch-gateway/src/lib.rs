//! The gateway face of toolsearch: MCP clients to many upstream servers, supervised, with their tools
//! converted to the engine's [`Tool`](toolsearch_core::Tool) model and calls routed back to them.
//!
//! - [`upstream`]: each upstream's connection (a child process with the environment it inherits,
//!   or a Streamable HTTP client), the guards on what it sends, its state, and the supervisor
//!   ([`UpstreamManager`]) that starts, watches and restarts them and forwards `tools/call`.
//! - [`config`]: the config file (`mcpServers` as Claude Desktop / Cursor write it, plus `toolSearch`).
//! - [`Gateway`]: start-up and composition of the parts below, and the loop that follows the
//!   upstreams.
//! - `session`: every downstream session, its scope and keys, and its sync with the shared store.
//! - `tools`: `tools/call`, and the gateway's own served tools in one table.
//! - `passthrough`: prompts, resources, subscriptions, logging and roots.
//! - `startup`, `indexing`: the upstreams' first starts, and their tools in the engine.
//! - `console`: the web console at `/` (one embedded static page) with its JSON routes, and
//!   `/metrics`.
//! - [`downstream`]: the MCP server clients connect to (stdio, Streamable HTTP at `/mcp`).
//! - [`metrics`], `observe`: the Prometheus metrics at `/metrics`, and the last searches with
//!   whether a call of a returned tool followed.
//! - [`payload`]: a preset's tool list in a provider's format and its cost in o200k tokens.
//! - [`offload`]: large upstream outputs stored per session and read back in pieces.
//! - [`listener_config`]: the `http` config section: the HTTP listener's limits and its `Host`/`Origin`
//!   rules.
//! - [`semantic`]: the embedding model loaded and the tools' vectors computed in the background.
//! - `prompt_search`: `search_prompts` and `get_prompt`, the upstreams' prompts and resource
//!   templates found by what they do.
//! - `resources`: upstream resource URIs made unique (`toolsearch://<server>/<uri>`) and mapped back.
//! - `relay`: what flows between sessions and upstreams besides requests: upstream requests to the
//!   client (sampling, elicitation, roots), progress, log messages and resource updates.
//! - [`rest`]: the REST API (`/api/mcp-standard/...`, `/api/openapi.json`) as an axum router.

pub mod config;
mod console;
pub mod downstream;
mod error;
mod gateway;
mod http_sessions;
mod indexing;
pub mod listener_config;
mod listing;
mod memory;
pub mod metrics;
mod observe;
pub mod offload;
mod passthrough;
pub mod payload;
mod prompt_search;
mod relay;
mod resources;
pub mod rest;
pub mod semantic;
mod session;
mod shared;
mod startup;
mod stdio;
mod tools;
pub mod upstream;

pub use config::{
    ConfigError, GatewayConfig, OffloadConfig, RestConfig, SemanticConfig, ServerConfig,
    ToolSearchConfig, Transport,
};
pub use downstream::GatewayService;

/// Where the MCP endpoint is mounted on the HTTP listener. Here, below every module, because
/// both the MCP side and the REST side's auth read it.
pub const MCP_PATH: &str = "/mcp";
pub use error::{GatewayError, Result};
pub use gateway::Gateway;
pub use memory::release_freed_memory;
pub use upstream::supervisor::{ServerState, SupervisorOptions, UpstreamEvent, UpstreamManager};
pub use upstream::to_core_tool;

/// The MCP SDK the gateway is built on, for callers that handle its types (`CallToolResult`, ...).
pub use rmcp;
pub use tokio_util::sync::CancellationToken;
