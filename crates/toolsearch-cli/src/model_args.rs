//! The embedding model options of the commands that search (`toolsearch search`, `eval`,
//! `serve`, and `toolsearch-bench search`, which compiles this file too so that the search it
//! measures loads its model as users' searches do).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use toolsearch_embed::{
    load_model, BertEmbedder, Embedder, FetchOptions, ModelLocation, WhenMissing,
};

/// Sets the embedding model's threads (docs/BENCHMARKS.md, "Embedding") unless the user did: a
/// lone query's matrix products are split across every core (candle's own default counts
/// physical cores, which some VMs report as one), while indexing runs one batch per core, each on
/// a one-thread pool. candle's pool for element-wise work stays off: its callers take turns on one
/// lock, which batches side by side would queue on. Called first thing, before any thread starts.
pub fn set_thread_defaults() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::set_var("RAYON_NUM_THREADS", cores.to_string());
    }
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// The embedding model options of the commands that search.
#[derive(Args, Clone, Debug, Default)]
pub struct ModelArgs {
    /// The embedding model's folder (config.json, tokenizer.json, model.safetensors of a
    /// BERT-style sentence model). Default: TOOLSEARCH_MODEL_DIR, else the user's cache folder,
    /// where the default model is installed on first use.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Never download the model; without it, search by words only.
    #[arg(long)]
    pub offline: bool,
    /// Search by words only: load no embedding model.
    #[arg(long)]
    pub no_semantic: bool,
}

/// Loads the embedding model for search: installs the default one first when it is missing
/// (progress on stderr) unless `--offline`. Any failure is one warning on stderr and `None`:
/// search goes on by words, it never fails to start for want of a model.
pub fn load_for_search(args: &ModelArgs) -> Option<Arc<BertEmbedder>> {
    if args.no_semantic {
        return None;
    }
    let attempt = || -> Result<BertEmbedder, toolsearch_embed::ModelError> {
        let location = ModelLocation::resolve(args.model.as_deref())?;
        let when = if args.offline {
            WhenMissing::Fail
        } else {
            WhenMissing::Fetch
        };
        let mut progress = |line: &str| eprintln!("{line}");
        load_model(&location, when, &FetchOptions::default(), &mut progress)
    };
    match attempt() {
        Ok(model) => {
            tracing::debug!(model = model.model_id(), "embedding model loaded");
            Some(Arc::new(model))
        }
        Err(error) => {
            eprintln!(
                "warning: searching by words only, the embedding model is not available: {error}"
            );
            None
        }
    }
}
