//! Search by meaning in the gateway: the embedding model is loaded (installed first when it is
//! missing and the config allows it) and the tools' vectors are computed on a thread of their
//! own, while keyword search serves from the start. Vectors come from the disk cache where it has
//! them; the engine uses each as soon as it is attached. A model that cannot be had is one warning,
//! and search stays keyword-only.

use crate::config::SemanticConfig;
use serde::Serialize;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;
use toolsearch_core::{Embedder, SearchEngine, VectorStatus};
use toolsearch_embed::{
    load_model, FetchOptions, ModelLocation, PipOutput, VectorCache, WhenMissing,
};

/// The engine the searches read (the gateway's and the REST API's `SharedEngine`).
type SharedEngine = Arc<std::sync::RwLock<SearchEngine>>;

/// Tools embedded between two attachments: small enough that the first vectors serve soon, large
/// enough to batch well.
const CHUNK: usize = 32;

/// Where search by meaning stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum SemanticPhase {
    /// Turned off in the config (`toolSearch.semantic.enabled = false`).
    Off,
    /// The model is being loaded (or installed).
    Loading,
    /// The model is loaded; tools are being embedded (search is hybrid over those done).
    Embedding,
    /// Every tool has its vector.
    Ready,
    /// No model: search is keyword-only. `error` says why and what to do.
    Unavailable { error: String },
}

/// The phase and the engine's vector counts, as the REST status and logs show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SemanticStatus {
    #[serde(flatten)]
    pub phase: SemanticPhase,
    /// The mode a search without one runs in.
    pub default_mode: &'static str,
    #[serde(flatten)]
    pub vectors: VectorStatus,
}

/// Shared between the indexing thread and whoever reports status.
#[derive(Debug)]
pub struct Semantic {
    phase: Mutex<SemanticPhase>,
    engine: SharedEngine,
    /// Wakes the indexing thread when a server's tools changed.
    wake: Mutex<Option<Sender<()>>>,
}

impl Semantic {
    /// Starts loading the model and embedding on a thread of its own; `Off` when disabled.
    pub fn start(config: &SemanticConfig, engine: SharedEngine) -> Arc<Self> {
        let semantic = Arc::new(Self {
            phase: Mutex::new(if config.enabled {
                SemanticPhase::Loading
            } else {
                SemanticPhase::Off
            }),
            engine,
            wake: Mutex::new(None),
        });
        if config.enabled {
            let (sender, receiver) = std::sync::mpsc::channel();
            *semantic.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
            let weak = Arc::downgrade(&semantic);
            let config = config.clone();
            let spawned = std::thread::Builder::new()
                .name("toolsearch-embed".into())
                .spawn(move || run(weak, config, receiver));
            if let Err(error) = spawned {
                semantic.set_phase(SemanticPhase::Unavailable {
                    error: format!("cannot start the embedding thread: {error}"),
                });
            }
        }
        semantic
    }

    /// Tells the indexing thread that tools changed (a server was re-indexed).
    pub fn tools_changed(&self) {
        if let Some(sender) = self
            .wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            // A closed channel means the thread has ended (no model): nothing to wake.
            sender.send(()).ok();
        }
    }

    pub fn phase(&self) -> SemanticPhase {
        self.phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_phase(&self, phase: SemanticPhase) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = phase;
    }

    pub fn status(&self) -> SemanticStatus {
        let engine = self.engine.read().unwrap_or_else(PoisonError::into_inner);
        SemanticStatus {
            phase: self.phase(),
            default_mode: engine.default_mode().as_str(),
            vectors: engine.vector_status(),
        }
    }
}

fn run(weak: Weak<Semantic>, config: crate::config::SemanticConfig, wake: Receiver<()>) {
    let model = match load(&config) {
        Ok(model) => model,
        Err(error) => {
            tracing::warn!("search by meaning is off, searching by words only: {error}");
            if let Some(semantic) = weak.upgrade() {
                semantic.set_phase(SemanticPhase::Unavailable { error });
                // Nothing to wake any more.
                semantic
                    .wake
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
            }
            return;
        }
    };
    let model_id = model.model_id().to_string();
    let (mut cache, _) = match VectorCache::default_path(&model_id) {
        Some(path) => VectorCache::open(path, &model_id, model.dimensions()),
        None => VectorCache::open(
            std::env::temp_dir().join(format!("toolsearch-vectors-{}.bin", std::process::id())),
            &model_id,
            model.dimensions(),
        ),
    };
    {
        let Some(semantic) = weak.upgrade() else {
            return;
        };
        semantic
            .engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .set_embedder(Some(model.clone()));
        semantic.set_phase(SemanticPhase::Embedding);
    }
    loop {
        let Some(semantic) = weak.upgrade() else {
            return;
        };
        let started = Instant::now();
        let embedded = embed_pending(&semantic.engine, model.as_ref(), &mut cache);
        if let Err(error) = cache.save() {
            tracing::warn!(%error, "the vector cache was not saved; tools will be embedded again after a restart");
        }
        match embedded {
            Ok(stats) => {
                let status = semantic.status();
                semantic.set_phase(SemanticPhase::Ready);
                if stats.cached + stats.embedded > 0 {
                    tracing::info!(
                        model = %model_id,
                        tools = status.vectors.total,
                        from_cache = stats.cached,
                        embedded = stats.embedded,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "hybrid search ready: every tool has its vector"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%error, "embedding tools failed; search stays hybrid over the tools embedded so far");
                semantic.set_phase(SemanticPhase::Ready);
            }
        }
        drop(semantic);
        // Sleeps until a server's tools change; ends when the gateway is gone.
        if wake.recv().is_err() {
            return;
        }
        while wake.try_recv().is_ok() {}
        if let Some(semantic) = weak.upgrade() {
            semantic.set_phase(SemanticPhase::Embedding);
        }
    }
}

/// Loads the model, installing the default one first when it is missing unless offline.
fn load(config: &SemanticConfig) -> Result<Arc<dyn Embedder>, String> {
    let location = ModelLocation::resolve(config.model.as_deref()).map_err(|e| e.to_string())?;
    let when = if config.offline {
        WhenMissing::Fail
    } else {
        WhenMissing::Fetch
    };
    let options = FetchOptions {
        // pip's progress would interleave with the logs; its end is quoted if it fails.
        pip_output: PipOutput::Capture,
        ..FetchOptions::default()
    };
    let mut progress = |line: &str| tracing::info!("{line}");
    let model = load_model(&location, when, &options, &mut progress).map_err(|e| e.to_string())?;
    tracing::info!(model = %model.model_id(), dir = %location.dir.display(), "embedding model loaded");
    Ok(Arc::new(model))
}

/// Embeds the engine's pending tools a chunk at a time, the model running outside the engine's
/// lock; vectors of tools that left meanwhile are dropped by the engine.
fn embed_pending(
    engine: &SharedEngine,
    model: &dyn Embedder,
    cache: &mut VectorCache,
) -> Result<toolsearch_embed::EmbedStats, String> {
    let mut total = toolsearch_embed::EmbedStats::default();
    let pending = read(engine).pending_vectors();
    engine
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .reserve_vectors(pending.len());
    for chunk in pending.chunks(CHUNK) {
        let texts: Vec<&str> = chunk.iter().map(|p| p.text.as_str()).collect();
        let (vectors, stats) = cache.embed_all(model, &texts).map_err(|e| e.to_string())?;
        total.cached += stats.cached;
        total.embedded += stats.embedded;
        let pairs = chunk.iter().map(|p| p.slot).zip(vectors).collect();
        engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .attach_vectors(model.model_id(), pairs)
            .map_err(|e| e.to_string())?;
    }
    Ok(total)
}

fn read(engine: &SharedEngine) -> std::sync::RwLockReadGuard<'_, SearchEngine> {
    engine.read().unwrap_or_else(PoisonError::into_inner)
}
