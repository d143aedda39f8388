//! A small LRU of query vectors: agents repeat and retry queries, and embedding one costs
//! milliseconds where a lookup costs nothing.

use super::{embed_query_checked, normalize, EmbedError, Embedder};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Query text → its normalised vector, for one model at a time, at most `capacity` entries; the
/// least recently used is dropped first. Shared by `&self` (a lock inside), so one cache serves
/// every search thread; the model runs outside the lock.
#[derive(Debug)]
pub struct QueryVectorCache {
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    /// The model whose vectors are held; another model's lookup clears the cache.
    model: String,
    entries: HashMap<String, (Arc<[f32]>, u64)>,
    /// Last use → query, oldest first.
    order: BTreeMap<u64, String>,
    clock: u64,
}

impl Lru {
    fn switch_model(&mut self, model: &str) {
        if self.model != model {
            self.entries.clear();
            self.order.clear();
            self.model = model.to_string();
        }
    }

    fn touch(&mut self, query: &str) -> Option<Arc<[f32]>> {
        self.clock += 1;
        let clock = self.clock;
        let (vector, used) = self.entries.get_mut(query)?;
        let old = std::mem::replace(used, clock);
        let vector = Arc::clone(vector);
        if let Some(key) = self.order.remove(&old) {
            self.order.insert(clock, key);
        }
        Some(vector)
    }
}

impl Default for QueryVectorCache {
    fn default() -> Self {
        Self::new(Self::DEFAULT_CAPACITY)
    }
}

impl QueryVectorCache {
    /// About 400 KB of 384-dimension vectors.
    pub const DEFAULT_CAPACITY: usize = 256;

    /// A cache of at most `capacity` queries; 0 caches nothing.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // A panic elsewhere cannot leave the map half-updated in a harmful way: keep using it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        let mut lru = self.lock();
        lru.entries.clear();
        lru.order.clear();
    }

    /// The cached vector of `query` under `model`, marking it recently used.
    pub fn get(&self, model: &str, query: &str) -> Option<Arc<[f32]>> {
        let mut lru = self.lock();
        if lru.model != model {
            return None;
        }
        lru.touch(query)
    }

    /// Stores `vector` (normalised here) as the vector of `query` under `model`.
    pub fn insert(&self, model: &str, query: &str, mut vector: Vec<f32>) -> Arc<[f32]> {
        normalize(&mut vector);
        let vector: Arc<[f32]> = vector.into();
        if self.capacity == 0 {
            return vector;
        }
        let mut lru = self.lock();
        lru.switch_model(model);
        if lru.touch(query).is_some() {
            if let Some(entry) = lru.entries.get_mut(query) {
                entry.0 = Arc::clone(&vector);
            }
            return vector;
        }
        while lru.entries.len() >= self.capacity {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.entries.remove(&oldest);
        }
        lru.clock += 1;
        let clock = lru.clock;
        lru.entries
            .insert(query.to_string(), (Arc::clone(&vector), clock));
        lru.order.insert(clock, query.to_string());
        vector
    }

    /// The normalised vector of `query`: from the cache, or embedded now and cached.
    pub fn get_or_embed(
        &self,
        embedder: &dyn Embedder,
        query: &str,
    ) -> Result<Arc<[f32]>, EmbedError> {
        let model = embedder.query_model_id();
        if let Some(vector) = self.get(model, query) {
            return Ok(vector);
        }
        let vector = embed_query_checked(embedder, query)?;
        Ok(self.insert(model, query, vector))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashEmbedder;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the texts it embeds.
    struct Counting {
        inner: HashEmbedder,
        calls: AtomicUsize,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dimensions(&self) -> usize {
            self.inner.dimensions()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(texts.len(), Ordering::SeqCst);
            self.inner.embed(texts)
        }
    }

    #[test]
    fn repeated_queries_are_embedded_once() {
        let model = Counting {
            inner: HashEmbedder::new(32),
            calls: AtomicUsize::new(0),
        };
        let cache = QueryVectorCache::new(4);
        let first = cache.get_or_embed(&model, "send an email").unwrap();
        let again = cache.get_or_embed(&model, "send an email").unwrap();
        assert_eq!(first, again);
        assert_eq!(model.calls.load(Ordering::SeqCst), 1);
        let norm: f32 = first.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5);
    }

    #[test]
    fn least_recently_used_is_evicted_first() {
        let cache = QueryVectorCache::new(2);
        cache.insert("m", "a", vec![1.0, 0.0]);
        cache.insert("m", "b", vec![0.0, 1.0]);
        assert!(cache.get("m", "a").is_some()); // b is now the oldest
        cache.insert("m", "c", vec![1.0, 1.0]);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("m", "b").is_none());
        assert!(cache.get("m", "a").is_some());
        assert!(cache.get("m", "c").is_some());
    }

    #[test]
    fn bounded_under_many_distinct_queries() {
        let cache = QueryVectorCache::new(8);
        for i in 0..100 {
            cache.insert("m", &format!("query {i}"), vec![i as f32 + 1.0, 1.0]);
            assert!(cache.len() <= 8);
        }
        assert!(cache.get("m", "query 99").is_some());
        assert!(cache.get("m", "query 0").is_none());
    }

    #[test]
    fn another_model_does_not_see_the_first_ones_vectors() {
        let cache = QueryVectorCache::new(4);
        cache.insert("model-a", "q", vec![1.0, 0.0]);
        assert!(cache.get("model-b", "q").is_none());
        cache.insert("model-b", "q", vec![0.0, 1.0]);
        assert!(cache.get("model-a", "q").is_none());
        assert_eq!(&*cache.get("model-b", "q").unwrap(), &[0.0, 1.0]);
        assert_eq!(cache.len(), 1);
    }

    /// Embeds a query its own way (the text's vector turned around), named apart.
    struct OwnQueries(HashEmbedder);

    impl Embedder for OwnQueries {
        fn model_id(&self) -> &str {
            self.0.model_id()
        }
        fn dimensions(&self) -> usize {
            self.0.dimensions()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.embed(texts)
        }
        fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
            let mut vector = self.0.embed(&[query])?.remove(0);
            vector.reverse();
            Ok(vector)
        }
        fn query_model_id(&self) -> &str {
            "own-queries"
        }
    }

    #[test]
    fn a_query_is_embedded_as_a_query_and_kept_under_the_query_identity() {
        let model = OwnQueries(HashEmbedder::new(16));
        let cache = QueryVectorCache::new(4);
        let vector = cache.get_or_embed(&model, "send an email").unwrap();
        let mut expected = model.embed_query("send an email").unwrap();
        normalize(&mut expected);
        assert_eq!(&*vector, expected.as_slice());
        assert!(cache.get("own-queries", "send an email").is_some());
        assert!(cache.get(model.model_id(), "send an email").is_none());
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = QueryVectorCache::new(0);
        cache.insert("m", "q", vec![1.0]);
        assert!(cache.is_empty());
    }
}
