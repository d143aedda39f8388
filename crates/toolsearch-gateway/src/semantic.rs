//! Search by meaning in the gateway: the embedding model is loaded (installed first when it is
//! missing and the config allows it) and the tools' vectors are computed on a thread of their
//! own, while keyword search serves from the start. Vectors come from the disk cache where it has
//! them; the engine uses each as soon as it is attached. A model that cannot be had is one warning,
//! and search stays keyword-only.

use crate::config::SemanticConfig;
use crate::metrics::Metrics;
use crate::shared::SharedSessions;
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
    /// Whether the upstreams' first starts have settled: "ready" is said once every tool of
    /// the catalog they make has its vector, not when the first server's have.
    settled: std::sync::atomic::AtomicBool,
}

/// Where the embedding thread finds vectors other replicas computed, and counts where each came
/// from.
pub struct VectorSources {
    /// The store replicas share; `None` in process, with no other replica to read from.
    pub shared: Option<Arc<dyn SharedSessions>>,
    /// To run the store's requests from the embedding thread.
    pub runtime: Option<tokio::runtime::Handle>,
    pub metrics: Metrics,
}

impl VectorSources {
    /// No other replica: vectors come from the disk cache or the model.
    pub fn in_process(metrics: Metrics) -> Self {
        Self {
            shared: None,
            runtime: None,
            metrics,
        }
    }
}

impl Semantic {
    /// Starts loading the model and embedding on a thread of its own; `Off` when disabled.
    pub fn start(
        config: &SemanticConfig,
        engine: SharedEngine,
        sources: VectorSources,
    ) -> Arc<Self> {
        let semantic = Arc::new(Self {
            phase: Mutex::new(if config.enabled {
                SemanticPhase::Loading
            } else {
                SemanticPhase::Off
            }),
            engine,
            wake: Mutex::new(None),
            settled: std::sync::atomic::AtomicBool::new(false),
        });
        if config.enabled {
            let (sender, receiver) = std::sync::mpsc::channel();
            *semantic.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
            let weak = Arc::downgrade(&semantic);
            let config = config.clone();
            let spawned = std::thread::Builder::new()
                .name("toolsearch-embed".into())
                .spawn(move || run(weak, config, receiver, sources));
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

    /// Tells the indexing thread that the upstreams' first starts have settled.
    pub fn upstreams_settled(&self) {
        self.settled
            .store(true, std::sync::atomic::Ordering::Release);
        self.tools_changed();
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
        let vectors = engine.vector_status();
        let phase = match self.phase() {
            // Tools indexed since the thread's last round wait for it to wake: until they have
            // their vectors, hybrid search is not ready, whatever the thread last said.
            SemanticPhase::Ready if !vectors.is_complete() => SemanticPhase::Embedding,
            phase => phase,
        };
        SemanticStatus {
            phase,
            default_mode: engine.default_mode().as_str(),
            vectors,
        }
    }
}

fn run(
    weak: Weak<Semantic>,
    config: crate::config::SemanticConfig,
    wake: Receiver<()>,
    sources: VectorSources,
) {
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
    let mut cache = open_cache(model.as_ref());
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
    let mut announced = Announcement::default();
    loop {
        let Some(semantic) = weak.upgrade() else {
            return;
        };
        catch_up(
            &semantic,
            model.as_ref(),
            &mut cache,
            &sources,
            &mut announced,
        );
        drop(semantic);
        // Once the catalog is whole and every tool has its vector, only queries run the model
        // until a server's tools change, so what only tools need (the f32 encoder, about 40 MB)
        // goes back to the system. Not before: servers still starting would each read it again.
        if announced.done {
            model.idle();
            crate::memory::release_freed_memory();
        }
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

/// The model's vector cache on disk (in the temporary folder when the user has no cache folder).
fn open_cache(model: &dyn Embedder) -> VectorCache {
    let model_id = model.model_id();
    let path = VectorCache::default_path(model_id).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("toolsearch-vectors-{}.bin", std::process::id()))
    });
    VectorCache::open(path, model_id, model.dimensions()).0
}

/// What the rounds before "ready" was said did, to say it with their sum.
#[derive(Default)]
struct Announcement {
    done: bool,
    cached: usize,
    shared: usize,
    embedded: usize,
    elapsed_ms: u64,
}

/// Gives every tool without a vector its vector (from the cache, the other replicas or the
/// model) and saves the cache. The first time every tool has its vector once the upstreams'
/// first starts have settled is announced, with what the rounds up to then did; later rounds (a
/// server re-listed, a late one joining) are logged at debug level, so that the log says
/// "ready" once, after the catalog is whole.
fn catch_up(
    semantic: &Semantic,
    model: &dyn Embedder,
    cache: &mut VectorCache,
    sources: &VectorSources,
    announced: &mut Announcement,
) {
    let started = Instant::now();
    let embedded = embed_pending(&semantic.engine, model, cache, sources);
    if let Err(error) = cache.save() {
        tracing::warn!(%error, "the vector cache was not saved; tools will be embedded again after a restart");
    }
    let stats = match embedded {
        Ok(stats) => stats,
        Err(error) => {
            tracing::warn!(%error, "embedding tools failed; search stays hybrid over the tools embedded so far");
            semantic.set_phase(SemanticPhase::Ready);
            return;
        }
    };
    sources
        .metrics
        .tool_vectors(stats.embedded, stats.cached, stats.shared);
    let status = semantic.status();
    semantic.set_phase(SemanticPhase::Ready);
    let (tools, elapsed_ms) = (status.vectors.total, started.elapsed().as_millis() as u64);
    let model = model.model_id();
    if !announced.done {
        announced.cached += stats.cached;
        announced.shared += stats.shared;
        announced.embedded += stats.embedded;
        announced.elapsed_ms += elapsed_ms;
        let settled = semantic.settled.load(std::sync::atomic::Ordering::Acquire);
        if settled && tools > 0 && status.vectors.is_complete() {
            announced.done = true;
            tracing::info!(
                model,
                tools,
                from_cache = announced.cached,
                from_replicas = announced.shared,
                embedded = announced.embedded,
                elapsed_ms = announced.elapsed_ms,
                "hybrid search ready: every tool has its vector"
            );
        }
    } else if stats.cached + stats.shared + stats.embedded > 0 {
        tracing::debug!(
            model,
            tools,
            from_cache = stats.cached,
            from_replicas = stats.shared,
            embedded = stats.embedded,
            elapsed_ms,
            "tool vectors up to date"
        );
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

/// How many vectors came from where in one pass.
#[derive(Debug, Default, Clone, Copy)]
struct Sourced {
    /// This replica's disk cache.
    cached: usize,
    /// Other replicas, through the shared store.
    shared: usize,
    /// The model, here.
    embedded: usize,
}

/// Embeds the engine's pending tools a chunk at a time, the model running outside the engine's
/// lock; vectors of tools that left meanwhile are dropped by the engine. With a shared store,
/// vectors other replicas computed are taken from it and the ones computed here are given to it.
fn embed_pending(
    engine: &SharedEngine,
    model: &dyn Embedder,
    cache: &mut VectorCache,
    sources: &VectorSources,
) -> Result<Sourced, String> {
    let mut total = Sourced::default();
    let pending = read(engine).pending_vectors();
    engine
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .reserve_vectors(pending.len());
    for chunk in pending.chunks(CHUNK) {
        let texts: Vec<&str> = chunk.iter().map(|p| p.text.as_str()).collect();
        let missing: Vec<&str> = texts
            .iter()
            .copied()
            .filter(|t| cache.get(t).is_none())
            .collect();
        let from_replicas = take_shared(&missing, model, cache, sources);
        let (vectors, stats) = cache.embed_all(model, &texts).map_err(|e| e.to_string())?;
        total.shared += from_replicas;
        total.cached += stats.cached.saturating_sub(from_replicas);
        total.embedded += stats.embedded;
        if stats.embedded > 0 {
            give_shared(&missing, model, cache, sources);
        }
        let pairs = chunk
            .iter()
            .map(toolsearch_core::PendingVector::key)
            .zip(vectors)
            .collect();
        engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .attach_vectors(model.model_id(), pairs)
            .map_err(|e| e.to_string())?;
    }
    Ok(total)
}

/// A text's key in the shared store.
fn text_key(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Puts into `cache` the vectors of `texts` other replicas shared; returns how many.
fn take_shared(
    texts: &[&str],
    model: &dyn Embedder,
    cache: &mut VectorCache,
    sources: &VectorSources,
) -> usize {
    let (Some(runtime), Some(shared)) = (&sources.runtime, &sources.shared) else {
        return 0;
    };
    if texts.is_empty() {
        return 0;
    }
    let keys: Vec<String> = texts.iter().map(|t| text_key(t)).collect();
    let found = runtime.block_on(shared.get_vectors(model.model_id(), &keys));
    let found = match found {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%error, "no vectors from the other replicas; embedding here");
            return 0;
        }
    };
    let mut taken = 0;
    for (text, bytes) in texts.iter().zip(found) {
        let Some(bytes) = bytes else { continue };
        if bytes.len() != model.dimensions() * 4 {
            continue;
        }
        let vector: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if cache.insert(text, &vector).is_ok() {
            taken += 1;
        }
    }
    taken
}

/// Gives the other replicas the vectors of `texts` now in `cache`.
fn give_shared(texts: &[&str], model: &dyn Embedder, cache: &VectorCache, sources: &VectorSources) {
    let (Some(runtime), Some(shared)) = (&sources.runtime, &sources.shared) else {
        return;
    };
    let entries: Vec<(String, Vec<u8>)> = texts
        .iter()
        .filter_map(|t| {
            let vector = cache.get(t)?;
            Some((
                text_key(t),
                vector.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ))
        })
        .collect();
    if let Err(error) = runtime.block_on(shared.put_vectors(model.model_id(), entries)) {
        tracing::warn!(%error, "vectors not shared; other replicas embed these tools themselves");
    }
}

fn read(engine: &SharedEngine) -> std::sync::RwLockReadGuard<'_, SearchEngine> {
    engine.read().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolsearch_core::embed::HashEmbedder;
    use toolsearch_core::{SearchEngine, Tool};

    fn semantic_over(tools: Vec<Tool>, phase: SemanticPhase) -> Semantic {
        let mut engine = SearchEngine::from_tools(tools).unwrap();
        engine.set_embedder(Some(Arc::new(HashEmbedder::new(8))));
        Semantic {
            phase: Mutex::new(phase),
            engine: Arc::new(std::sync::RwLock::new(engine)),
            wake: Mutex::new(None),
            settled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    #[test]
    fn tools_without_their_vectors_are_not_ready_whatever_the_thread_last_said() {
        let semantic = semantic_over(
            vec![Tool::new("send_email", "Send an email")],
            SemanticPhase::Ready,
        );
        let status = semantic.status();
        assert_eq!(status.phase, SemanticPhase::Embedding, "{status:?}");
        assert_eq!((status.vectors.ready, status.vectors.total), (0, 1));

        semantic.engine.write().unwrap().embed_pending().unwrap();
        assert_eq!(semantic.status().phase, SemanticPhase::Ready);
    }
}
