//! The toolsearch engine: one model of a tool, a catalog grouped by server, a search index with
//! keyword, regex and exact modes, and the disclosure mechanism that decides which tool definitions
//! a model sees. No network, no async runtime: callers bring their own I/O.

pub(crate) mod analyzer;
pub mod catalog;
pub mod contract;
pub mod disclosure;
pub mod error;
pub mod formats;
pub mod policy;
pub mod scope;
pub mod search;
pub mod served;
pub mod tool;

// The tests through the public API (src/tests/) name the crate as a user does.
#[cfg(test)]
extern crate self as toolsearch_core;
#[cfg(test)]
mod tests;

pub use catalog::{
    check_name_length, validate_tools, Catalog, Rejected, ToolRejection, MAX_NAME_CHARS,
    MAX_SCHEMA_DEPTH,
};
pub use contract::{SearchArgs, SearchOptions, SearchResults, ToolMatch};
pub use disclosure::{
    error_result, Disclosure, DisclosureConfig, Dispatch, ExposedTool, Exposure, MetaOutcome,
    MetaTool, Preset, SelectionOrder, ServedId, ServerStatus, SessionSnapshot,
};
pub use error::{Error, Result};
pub use formats::{parse_catalog, CatalogFormat};
pub use policy::{CatalogPolicy, CategoryDef, CategoryInfo, NamePattern, Naming};
pub use scope::Scope;
pub use search::{
    DenseView, Fallback, Filters, Fusion, MatchedOn, PendingVector, SearchConfig, SearchEngine,
    SearchHit, SearchMode, SearchRequest, SearchResponse, VectorStatus,
};
pub use served::{output_schema_for, parse_arguments, schema_for, Listing, OneOrMany, ToolDecl};
pub use tool::{DeferPolicy, Tool, ToolId, ToolSchema, DEFAULT_SEPARATOR};
pub mod embed;
pub use embed::{
    embedding_text, embedding_texts, DenseHit, EmbedError, EmbedTextLimits, Embedder, HashEmbedder,
    QuantizedVectorSet, QueryVectorCache, ToolTexts, ToolView, VectorSet,
};
