//! A deterministic stand-in for a sentence model: a hashed bag of stemmed words. Texts that
//! share words get similar vectors, so dense search, caches and fusion can be tested without any
//! weights. It knows no synonyms: it is a test double, not a model.

use super::{normalize, EmbedError, Embedder};
use crate::analyzer::Analyzer;

/// Each stemmed content word adds ±1 to one of `dims` buckets, chosen by a fixed hash (FNV-1a),
/// so the same text gives the same vector on every platform and run. Vectors are L2-normalised;
/// a text without words gives all zeros.
#[derive(Debug)]
pub struct HashEmbedder {
    dims: usize,
    id: String,
    analyzer: Analyzer,
}

impl HashEmbedder {
    /// A stand-in of `dims` dimensions (at least 1).
    pub fn new(dims: usize) -> Self {
        let dims = dims.max(1);
        Self {
            dims,
            id: format!("hash-bag-of-words-v1/{dims}"),
            analyzer: Analyzer::new(),
        }
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0f32; self.dims];
        for token in self.analyzer.content_tokens(text) {
            let hash = fnv1a(token.stem.as_bytes());
            let bucket = (hash % self.dims as u64) as usize;
            let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
            vector[bucket] += sign;
        }
        normalize(&mut vector);
        vector
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dims
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|text| self.vector(text)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::{dot, embed_checked, embedding_text, VectorSet};
    use crate::tool::Tool;

    #[test]
    fn deterministic_normalised_and_word_based() {
        let model = HashEmbedder::new(64);
        let a = model.vector("Send an email to a colleague");
        assert_eq!(a, model.vector("send emails to colleagues"));
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(model.vector("the of and").iter().all(|&x| x == 0.0));
        // Fixed hash: the vector does not depend on the process (pinned bucket of one word).
        let one = model.vector("weather");
        let bucket = (fnv1a(b"weather") % 64) as usize;
        assert_eq!(one[bucket].abs(), 1.0);
        assert_eq!(model.model_id(), "hash-bag-of-words-v1/64");
    }

    #[test]
    fn dense_search_with_the_stand_in_finds_the_tool_sharing_words() {
        let tools = [
            Tool::new("send_email", "Send an email message to a recipient"),
            Tool::new("get_weather", "Current weather forecast for a city"),
            Tool::new("create_invoice", "Create an invoice for a customer"),
        ];
        let model = HashEmbedder::new(256);
        let texts: Vec<String> = tools.iter().map(embedding_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut set = VectorSet::new(model.dimensions());
        for vector in embed_checked(&model, &refs).unwrap() {
            set.push(&vector).unwrap();
        }
        let query = model.vector("what is the weather forecast in Paris");
        let hits = set.top_k(&query, 3).unwrap();
        assert_eq!(hits[0].row, 1);
        assert!(hits[0].score > hits[1].score);
    }
}
