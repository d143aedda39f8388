//! An [`Embedder`] that reads and fills a [`VectorCache`]: texts embedded before (by this model)
//! come from the disk file, only new ones run the model.

use crate::cache::{EmbedStats, VectorCache};
use crate::error::ModelError;
use std::sync::{Arc, Mutex, PoisonError};
use toolsearch_core::embed::{embed_as_text, embed_query_checked, EmbedError, Embedder};
use toolsearch_core::SearchEngine;

/// `inner` behind a vector cache. Hand it to a search engine in place of the model when every text
/// it will see is worth keeping on disk (tools; an evaluation's fixed queries), then
/// [`CachedEmbedder::save`].
pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    cache: Mutex<(VectorCache, EmbedStats)>,
}

impl CachedEmbedder {
    /// Fails when the cache holds another model's vectors.
    pub fn new(inner: Arc<dyn Embedder>, cache: VectorCache) -> Result<Self, EmbedError> {
        if cache.model_id() != inner.model_id() {
            return Err(EmbedError::model(
                inner.model_id(),
                format!(
                    "the vector cache {} belongs to `{}`; open the cache for this model",
                    cache.path().display(),
                    cache.model_id()
                ),
            ));
        }
        Ok(Self {
            inner,
            cache: Mutex::new((cache, EmbedStats::default())),
        })
    }

    /// Texts found in the cache and texts embedded so far.
    pub fn stats(&self) -> EmbedStats {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// Writes the cache file if anything was added.
    pub fn save(&self) -> Result<(), ModelError> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .save()
    }
}

impl Embedder for CachedEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn idle(&self) {
        self.inner.idle();
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut guard = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let (cache, total) = &mut *guard;
        let (vectors, stats) = cache.embed_all(self.inner.as_ref(), texts)?;
        total.cached += stats.cached;
        total.embedded += stats.embedded;
        Ok(vectors)
    }

    /// A query embedded as a text is cached as one; a query the model computes its own way is
    /// cached under its query identity and the query, so that it never stands for a text.
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let query_model = self.inner.query_model_id();
        if query_model == self.inner.model_id() {
            return embed_as_text(self, query);
        }
        let key = format!("{query_model}\u{0}{query}");
        let mut guard = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let (cache, total) = &mut *guard;
        if let Some(vector) = cache.get(&key) {
            total.cached += 1;
            return Ok(vector.to_vec());
        }
        let vector = embed_query_checked(self.inner.as_ref(), query)?;
        cache.insert(&key, &vector)?;
        total.embedded += 1;
        Ok(vector)
    }

    fn query_model_id(&self) -> &str {
        self.inner.query_model_id()
    }
}

/// Gives every tool of `engine` that lacks one its vector, from `cache` or from the engine's
/// model (new vectors are added to the cache, which the caller saves). Does nothing without a
/// model.
pub fn embed_tools(
    engine: &mut SearchEngine,
    cache: &mut VectorCache,
) -> Result<EmbedStats, EmbedError> {
    let Some(model) = engine.embedder().cloned() else {
        return Ok(EmbedStats::default());
    };
    let pending = engine.pending_vectors();
    let texts: Vec<&str> = pending.iter().map(|p| p.text.as_str()).collect();
    let (vectors, stats) = cache.embed_all(model.as_ref(), &texts)?;
    let pairs = pending
        .iter()
        .map(toolsearch_core::PendingVector::key)
        .zip(vectors)
        .collect();
    engine
        .attach_vectors(model.model_id(), pairs)
        .map_err(|e| EmbedError::model(model.model_id(), e))?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use toolsearch_core::embed::HashEmbedder;

    struct Counting {
        inner: HashEmbedder,
        texts: AtomicUsize,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            "counting"
        }
        fn dimensions(&self) -> usize {
            self.inner.dimensions()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            self.inner.embed(texts)
        }
    }

    #[test]
    fn a_text_is_embedded_once_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.bin");
        let model = Arc::new(Counting {
            inner: HashEmbedder::new(8),
            texts: AtomicUsize::new(0),
        });
        let (cache, _) = VectorCache::open(&path, "counting", 8);
        let cached = CachedEmbedder::new(model.clone(), cache).unwrap();
        let first = cached.embed(&["a", "b"]).unwrap();
        cached.embed(&["a"]).unwrap();
        assert_eq!(model.texts.load(Ordering::SeqCst), 2);
        assert_eq!(
            cached.stats(),
            EmbedStats {
                cached: 1,
                embedded: 2
            }
        );
        cached.save().unwrap();

        let (cache, _) = VectorCache::open(&path, "counting", 8);
        let again = CachedEmbedder::new(model.clone(), cache).unwrap();
        assert_eq!(again.embed(&["a", "b"]).unwrap(), first);
        assert_eq!(model.texts.load(Ordering::SeqCst), 2, "read from disk");
    }

    /// Embeds a query its own way: the text's vector turned around.
    struct OwnQueries {
        inner: Counting,
        queries: AtomicUsize,
    }

    impl Embedder for OwnQueries {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dimensions(&self) -> usize {
            self.inner.dimensions()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.inner.embed(texts)
        }
        fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
            self.queries.fetch_add(1, Ordering::SeqCst);
            let mut vector = self.inner.inner.embed(&[query])?.remove(0);
            vector.reverse();
            Ok(vector)
        }
        fn query_model_id(&self) -> &str {
            "counting/own-queries"
        }
    }

    #[test]
    fn a_query_computed_its_own_way_is_cached_apart_from_the_same_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.bin");
        let model = Arc::new(OwnQueries {
            inner: Counting {
                inner: HashEmbedder::new(8),
                texts: AtomicUsize::new(0),
            },
            queries: AtomicUsize::new(0),
        });
        let (cache, _) = VectorCache::open(&path, "counting", 8);
        let cached = CachedEmbedder::new(model.clone(), cache).unwrap();
        assert_eq!(cached.query_model_id(), "counting/own-queries");
        let text = cached.embed(&["send an email"]).unwrap().remove(0);
        let query = cached.embed_query("send an email").unwrap();
        assert_ne!(
            query, text,
            "the text's cached vector does not stand for the query"
        );
        assert_eq!(cached.embed_query("send an email").unwrap(), query);
        assert_eq!(model.queries.load(Ordering::SeqCst), 1, "embedded once");
        assert_eq!(cached.embed(&["send an email"]).unwrap().remove(0), text);
        cached.save().unwrap();

        let (cache, _) = VectorCache::open(&path, "counting", 8);
        let again = CachedEmbedder::new(model.clone(), cache).unwrap();
        assert_eq!(again.embed_query("send an email").unwrap(), query);
        assert_eq!(model.queries.load(Ordering::SeqCst), 1, "read from disk");
    }

    #[test]
    fn another_models_cache_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = VectorCache::open(dir.path().join("v.bin"), "other", 8);
        let model: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(8));
        let error = CachedEmbedder::new(model, cache).err().unwrap();
        assert!(error.to_string().contains("other"));
    }
}
