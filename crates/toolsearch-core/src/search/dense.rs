//! The dense half of the index: one vector per tool slot, from whichever [`Embedder`] the engine
//! was given, and the query-vector cache. Vectors arrive after the tools (a model is slow, the
//! keyword index is not), so a slot may have none yet; a search uses the vectors there are.

use crate::embed::{embed_checked, EmbedError, Embedder, QueryVectorCache, VectorSet};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A tool that still needs a vector: its slot and the text to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingVector {
    pub slot: u32,
    pub text: String,
}

/// How far the dense index has come: `ready` of `total` live tools have a vector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VectorStatus {
    /// The model's identity, when one is loaded.
    pub model: Option<String>,
    pub ready: usize,
    pub total: usize,
}

impl VectorStatus {
    /// Every live tool has its vector (and there is a model).
    pub fn is_complete(&self) -> bool {
        self.model.is_some() && self.ready == self.total
    }
}

pub(crate) struct DenseIndex {
    model: Option<Arc<dyn Embedder>>,
    vectors: VectorSet,
    row_slot: Vec<u32>,
    slot_row: FxHashMap<u32, u32>,
    queries: QueryVectorCache,
}

impl std::fmt::Debug for DenseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseIndex")
            .field("model", &self.model.as_ref().map(|m| m.model_id()))
            .field("vectors", &self.row_slot.len())
            .finish()
    }
}

impl Default for DenseIndex {
    fn default() -> Self {
        Self {
            model: None,
            vectors: VectorSet::new(0),
            row_slot: Vec::new(),
            slot_row: FxHashMap::default(),
            queries: QueryVectorCache::default(),
        }
    }
}

impl DenseIndex {
    pub fn model(&self) -> Option<&Arc<dyn Embedder>> {
        self.model.as_ref()
    }

    /// Uses `model` from now on. Vectors of another model are dropped (they cannot be compared
    /// with this one's); the same model keeps them.
    pub fn set_model(&mut self, model: Option<Arc<dyn Embedder>>) {
        let same = match (&self.model, &model) {
            (Some(old), Some(new)) => {
                old.model_id() == new.model_id() && old.dimensions() == new.dimensions()
            }
            _ => false,
        };
        if !same {
            self.vectors = VectorSet::new(model.as_ref().map_or(0, |m| m.dimensions()));
            self.row_slot.clear();
            self.slot_row.clear();
            self.queries.clear();
        }
        self.model = model;
    }

    pub fn len(&self) -> usize {
        self.row_slot.len()
    }

    pub fn has(&self, slot: u32) -> bool {
        self.slot_row.contains_key(&slot)
    }

    /// Bytes held by the vectors.
    pub fn memory_bytes(&self) -> usize {
        self.vectors.memory_bytes()
    }

    /// Makes room for `rows` more vectors (see [`VectorSet::reserve_rows`]).
    pub fn reserve(&mut self, rows: usize) {
        self.vectors.reserve_rows(rows);
    }

    /// Stores the vector of `slot` (replacing any); `model_id` must be the current model's.
    pub fn insert(
        &mut self,
        model_id: &str,
        slot: u32,
        vector: &[f32],
    ) -> Result<bool, EmbedError> {
        if self.model.as_ref().map(|m| m.model_id()) != Some(model_id) {
            return Ok(false);
        }
        match self.slot_row.get(&slot) {
            Some(&row) => self.vectors.set(row as usize, vector)?,
            None => {
                let row = self.vectors.push(vector)?;
                self.row_slot.push(slot);
                self.slot_row.insert(slot, row as u32);
            }
        }
        Ok(true)
    }

    /// Drops the vectors of slots that are no longer live.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        if self.row_slot.iter().all(|&slot| live(slot)) {
            return;
        }
        let mut vectors = VectorSet::with_capacity(self.vectors.dims(), self.row_slot.len());
        let mut row_slot = Vec::with_capacity(self.row_slot.len());
        for (row, &slot) in self.row_slot.iter().enumerate() {
            if !live(slot) {
                continue;
            }
            if let Some(vector) = self.vectors.row(row) {
                // Rows are already checked and unit length; pushing them again cannot fail.
                if vectors.push(vector).is_ok() {
                    row_slot.push(slot);
                }
            }
        }
        self.slot_row = row_slot
            .iter()
            .enumerate()
            .map(|(row, &slot)| (slot, row as u32))
            .collect();
        self.vectors = vectors;
        self.row_slot = row_slot;
    }

    /// The normalised vector of `query`, from the cache or the model; `None` without a model.
    pub fn query_vector(&self, query: &str) -> Option<Result<Arc<[f32]>, EmbedError>> {
        let model = self.model.as_ref()?;
        Some(self.queries.get_or_embed(model.as_ref(), query))
    }

    /// Cosine similarity of the query to every slot that has a vector and passes `keep`.
    pub fn similarities(&self, query: &[f32], keep: impl Fn(u32) -> bool) -> Vec<(u32, f32)> {
        if query.len() != self.vectors.dims() {
            return Vec::new();
        }
        (0..self.row_slot.len())
            .filter_map(|row| {
                let slot = self.row_slot[row];
                if !keep(slot) {
                    return None;
                }
                let vector = self.vectors.row(row)?;
                Some((slot, crate::embed::dot(vector, query)))
            })
            .collect()
    }

    /// Embeds `pending` with the current model, in order; for callers that embed in one go.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match &self.model {
            Some(model) => embed_checked(model.as_ref(), texts),
            None => Ok(Vec::new()),
        }
    }
}
