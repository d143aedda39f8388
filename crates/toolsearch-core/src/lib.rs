//! The toolsearch engine: one model of a tool, a catalog grouped by server, a search index with
//! keyword, regex and exact modes, and the disclosure mechanism that decides which tool definitions
//! a model sees. No network, no async runtime: callers bring their own I/O.

pub mod catalog;
pub mod error;
pub mod tool;

pub use catalog::Catalog;
pub use error::{Error, Result};
pub use tool::{DeferPolicy, Tool, ToolId, ToolSchema, DEFAULT_SEPARATOR};
pub mod search;

pub use search::{
    Fallback, Filters, MatchedOn, NamePattern, SearchConfig, SearchEngine, SearchHit, SearchMode,
    SearchRequest, SearchResponse,
};
pub mod formats;
pub use formats::{parse_catalog, CatalogFormat};
pub mod disclosure;
pub use disclosure::{
    error_result, Disclosure, DisclosureConfig, Dispatch, ExposedTool, Exposure, MetaOutcome,
    MetaTool, Preset, SelectionOrder,
};
pub mod embed;
pub use embed::{
    embedding_text, DenseHit, EmbedError, EmbedTextLimits, Embedder, HashEmbedder,
    QueryVectorCache, VectorSet,
};
