//! Dense retrieval, the pure half: what an embedding model must provide ([`Embedder`]), vectors
//! held row-major and scanned by dot product ([`VectorSet`]), fusion of a lexical and a dense
//! ranking as plain maths ([`fusion`]), a small LRU of query vectors ([`QueryVectorCache`]), the
//! bounded text embedded per tool ([`embedding_text`]), and a deterministic stand-in model for
//! tests ([`HashEmbedder`]).
//!
//! No model lives here: loading weights is file I/O and heavy numerics, so a model is another
//! crate's implementation of [`Embedder`] (`toolsearch-embed` has the BERT one). The engine only
//! ever sees vectors.

pub mod fusion;
mod query_cache;
mod stand_in;
mod text;
mod vectors;

pub use fusion::{
    convex_combination, min_max_normalize, reciprocal_rank_fusion, z_score_combination,
    z_score_normalize,
};
pub use query_cache::QueryVectorCache;
pub use stand_in::HashEmbedder;
pub use text::{
    embedding_text, embedding_text_with, embedding_texts, EmbedTextLimits, ToolTexts, ToolView,
};
pub use vectors::{
    check_vector, dot, dot_i8, dot_i8_i8, normalize, DenseHit, QuantizedQuery, QuantizedVectorSet,
    VectorSet,
};

use thiserror::Error;

/// A sentence-embedding model: texts in, one vector per text out.
///
/// Implementations are shared between threads (an index being built and searches being served),
/// so they take `&self`; a model that needs mutable scratch space keeps it behind its own lock.
pub trait Embedder: Send + Sync {
    /// Names the vectors this embedder makes: it must change whenever the same text could get a
    /// different vector (other weights, tokenizer, pooling or truncation). Vector caches are keyed
    /// by it, so two embedders with one identity must be interchangeable.
    fn model_id(&self) -> &str;

    /// The length of every vector.
    fn dimensions(&self) -> usize;

    /// One vector per text, in order. Vectors need not be normalised: [`VectorSet`] and the
    /// query path normalise them.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// The vector of one search query. A query is embedded alone while someone waits for the
    /// answer, so an implementation may compute it another way than [`Embedder::embed`] (a
    /// faster approximation of the same model); it must then name those vectors apart with
    /// [`Embedder::query_model_id`]. The default embeds the query as a text.
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        embed_as_text(self, query)
    }

    /// Names the vectors [`Embedder::embed_query`] makes, as [`Embedder::model_id`] names the
    /// texts' vectors; caches of query vectors are keyed by it. The default is the model's id,
    /// right for an embedder that embeds a query as a text.
    fn query_model_id(&self) -> &str {
        self.model_id()
    }

    /// Says that no text is expected for a while (a gateway's catalog has its vectors): an
    /// implementation may free what only [`Embedder::embed`] needs, and load it again when next
    /// asked. Queries must still be answered. The default keeps everything.
    fn idle(&self) {}
}

/// `query` through [`Embedder::embed`], as one text: what [`Embedder::embed_query`] does by
/// default, for an implementation that computes queries its own way only sometimes.
pub fn embed_as_text<E: Embedder + ?Sized>(
    embedder: &E,
    query: &str,
) -> Result<Vec<f32>, EmbedError> {
    embedder
        .embed(&[query])?
        .pop()
        .ok_or(EmbedError::WrongCount {
            expected: 1,
            got: 0,
        })
}

/// [`Embedder::embed_query`], checked as [`embed_checked`] checks texts' vectors.
pub fn embed_query_checked(embedder: &dyn Embedder, query: &str) -> Result<Vec<f32>, EmbedError> {
    let vector = embedder.embed_query(query)?;
    check_vector(embedder.dimensions(), &vector)?;
    Ok(vector)
}

/// Calls `embedder` and checks what it returned: one vector per text, each of the embedder's
/// dimensions, every value finite. A broken model is an error here rather than wrong rankings
/// later.
pub fn embed_checked(embedder: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let vectors = embedder.embed(texts)?;
    if vectors.len() != texts.len() {
        return Err(EmbedError::WrongCount {
            expected: texts.len(),
            got: vectors.len(),
        });
    }
    let dims = embedder.dimensions();
    for vector in &vectors {
        check_vector(dims, vector)?;
    }
    Ok(vectors)
}

/// Why embedding or a dense scan failed. Every message says what was wrong and what to do.
#[derive(Debug, Error)]
pub enum EmbedError {
    #[error("the embedding model `{model}` failed: {message}")]
    Model { model: String, message: String },

    #[error("the embedding model returned {got} vectors for {expected} texts; the model implementation is broken, use another model")]
    WrongCount { expected: usize, got: usize },

    #[error("a vector has {got} dimensions where {expected} were expected; vectors of different models cannot be mixed, embed everything with one model")]
    Dimensions { expected: usize, got: usize },

    #[error("a vector holds a value that is not a finite number; the model's output is broken, use another model")]
    NotFinite,

    #[error("row {row} is out of range: the vector set has {len} rows")]
    RowOutOfRange { row: usize, len: usize },
}

impl EmbedError {
    /// A failure inside a model implementation.
    pub fn model(model: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::Model {
            model: model.into(),
            message: message.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Broken {
        vectors: Vec<Vec<f32>>,
    }

    impl Embedder for Broken {
        fn model_id(&self) -> &str {
            "broken"
        }
        fn dimensions(&self) -> usize {
            2
        }
        fn embed(&self, _texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(self.vectors.clone())
        }
    }

    #[test]
    fn checked_embedding_rejects_wrong_count_dimensions_and_nan() {
        let count = Broken {
            vectors: vec![vec![1.0, 0.0]],
        };
        assert!(matches!(
            embed_checked(&count, &["a", "b"]),
            Err(EmbedError::WrongCount {
                expected: 2,
                got: 1
            })
        ));
        let dims = Broken {
            vectors: vec![vec![1.0, 0.0, 0.0]],
        };
        assert!(matches!(
            embed_checked(&dims, &["a"]),
            Err(EmbedError::Dimensions {
                expected: 2,
                got: 3
            })
        ));
        let nan = Broken {
            vectors: vec![vec![f32::NAN, 0.0]],
        };
        assert!(matches!(
            embed_checked(&nan, &["a"]),
            Err(EmbedError::NotFinite)
        ));
        let fine = Broken {
            vectors: vec![vec![0.5, 0.5]],
        };
        assert_eq!(
            embed_checked(&fine, &["a"]).ok(),
            Some(vec![vec![0.5, 0.5]])
        );
    }

    #[test]
    fn errors_say_what_to_do() {
        let message = EmbedError::Dimensions {
            expected: 384,
            got: 768,
        }
        .to_string();
        assert!(message.contains("384") && message.contains("768"));
        assert!(message.contains("one model"));
    }
}
