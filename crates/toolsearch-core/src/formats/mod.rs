//! Tool catalogs in the formats users already have, read into the engine's one model of a tool,
//! and written back out as provider payloads.
//!
//! Reading: an MCP `tools/list` result or bare array, OpenAI tools (Chat Completions and the flat
//! Responses form), Anthropic tools, Gemini `functionDeclarations`, and multi-server files. The
//! format is detected from the document's shape unless the caller names it.

mod read;

pub use read::{detect_format, parse_catalog, CatalogFormat};
mod write;
pub use write::{
    anthropic_tool_references, anthropic_tool_search_result, anthropic_tools, gemini_schema,
    gemini_tools, mcp_tools_list, openai_chat_tools, openai_responses_tools,
};
