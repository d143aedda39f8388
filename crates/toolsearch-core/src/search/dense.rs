//! The dense half of the index: each tool's vectors, from whichever [`Embedder`] the engine was
//! given, and the query-vector cache. Vectors arrive after the tools (a model is slow, the keyword
//! index is not), so a slot may have none yet; a search uses the vectors there are.
//!
//! A tool is embedded as two texts ([`ToolTexts`]): its purpose (names, labels, description) and
//! its parameters. Two rows are kept per tool, quantised to bytes: the purpose, and the whole tool
//! (the two vectors averaged by their texts' lengths, which is close to what the model gives for
//! the whole text, cosine 0.96–0.99 on the evaluation catalogs). A query's similarity to a tool
//! is the larger of its two cosines ([`DenseView::Max`]): a tool whose parameters dilute its
//! vector still matches by its purpose, and one described mostly by its parameters by the whole.
//! docs/EVAL.md has the measurements.

use crate::embed::{
    embed_checked, EmbedError, Embedder, QuantizedQuery, QuantizedVectorSet, QueryVectorCache,
    ToolView,
};
use crate::search::config::DenseView;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// One text of a tool that still needs its vector: the tool's slot, which of its texts, and
/// the text to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingVector {
    pub slot: u32,
    pub view: ToolView,
    pub text: String,
}

impl PendingVector {
    /// What to hand back with the vector to [`crate::SearchEngine::attach_vectors`].
    pub fn key(&self) -> (u32, ToolView) {
        (self.slot, self.view)
    }
}

/// How far the dense index has come: `ready` of `total` live tools have their vectors.
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
    /// Rows `2k` (the whole tool) and `2k + 1` (its purpose) are the tool in `row_slot[k]`.
    vectors: QuantizedVectorSet,
    row_slot: Vec<u32>,
    slot_row: FxHashMap<u32, u32>,
    /// Views of tools whose other view has not arrived yet, as the model gave them.
    partial: FxHashMap<u32, [Option<Vec<f32>>; 2]>,
    queries: QueryVectorCache,
}

const WHOLE: usize = 0;
const PURPOSE: usize = 1;

impl std::fmt::Debug for DenseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseIndex")
            .field(
                "model",
                &self.model.as_ref().map(|m| m.model_id().to_string()),
            )
            .field("tools", &self.row_slot.len())
            .field("partial", &self.partial.len())
            .finish()
    }
}

impl Default for DenseIndex {
    fn default() -> Self {
        Self {
            model: None,
            vectors: QuantizedVectorSet::new(0),
            row_slot: Vec::new(),
            slot_row: FxHashMap::default(),
            partial: FxHashMap::default(),
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
            self.vectors = QuantizedVectorSet::new(model.as_ref().map_or(0, |m| m.dimensions()));
            self.row_slot.clear();
            self.slot_row.clear();
            self.partial.clear();
            self.queries.clear();
        }
        self.model = model;
    }

    /// Tools with both their vectors.
    pub fn len(&self) -> usize {
        self.row_slot.len()
    }

    pub fn has(&self, slot: u32) -> bool {
        self.slot_row.contains_key(&slot)
    }

    /// The views of `slot` still to embed: none once it has its vectors.
    pub fn missing_views(&self, slot: u32) -> Vec<ToolView> {
        if self.has(slot) {
            return Vec::new();
        }
        let arrived = self.partial.get(&slot);
        ToolView::ALL
            .into_iter()
            .filter(|view| arrived.is_none_or(|views| views[view.index()].is_none()))
            .collect()
    }

    /// Bytes held by the vectors, those waiting for their tool's other view included.
    pub fn memory_bytes(&self) -> usize {
        let waiting: usize = self
            .partial
            .values()
            .flatten()
            .flatten()
            .map(|v| v.capacity() * std::mem::size_of::<f32>())
            .sum();
        self.vectors.memory_bytes() + waiting
    }

    /// Makes room for `views` more vectors (one stored row each), exactly.
    pub fn reserve(&mut self, views: usize) {
        self.vectors.reserve_rows(views);
    }

    /// Takes the vector of one view of `slot`; `model_id` must be the current model's. When the
    /// tool's other view is there too, its rows are stored (replacing any); `text_chars` gives
    /// the lengths of its two texts in [`ToolView`] order, which weigh the views in the whole.
    /// Returns whether the vector was taken.
    pub fn insert(
        &mut self,
        model_id: &str,
        (slot, view): (u32, ToolView),
        vector: Vec<f32>,
        text_chars: impl FnOnce() -> [usize; 2],
    ) -> Result<bool, EmbedError> {
        if self.model.as_ref().map(|m| m.model_id()) != Some(model_id) {
            return Ok(false);
        }
        crate::embed::check_vector(self.vectors.dims(), &vector)?;
        let views = self.partial.entry(slot).or_default();
        views[view.index()] = Some(vector);
        let [Some(_), Some(_)] = views else {
            return Ok(true);
        };
        let Some([Some(mut purpose), Some(mut parameters)]) = self.partial.remove(&slot) else {
            return Ok(true);
        };
        crate::embed::normalize(&mut purpose);
        crate::embed::normalize(&mut parameters);
        let [purpose_chars, parameter_chars] = text_chars();
        let (a, b) = match (purpose_chars, parameter_chars) {
            (0, 0) => (1.0, 1.0),
            (a, b) => (a as f32, b as f32),
        };
        let whole: Vec<f32> = purpose
            .iter()
            .zip(&parameters)
            .map(|(p, q)| a * p + b * q)
            .collect();
        let row = match self.slot_row.get(&slot) {
            Some(&row) => row as usize,
            None => self.row_slot.len(),
        };
        self.vectors.set(2 * row + WHOLE, &whole)?;
        self.vectors.set(2 * row + PURPOSE, &purpose)?;
        if row == self.row_slot.len() {
            self.row_slot.push(slot);
            self.slot_row.insert(slot, row as u32);
        }
        Ok(true)
    }

    /// Drops the vectors of slots that are no longer live.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.partial.retain(|&slot, _| live(slot));
        if self.row_slot.iter().all(|&slot| live(slot)) {
            return;
        }
        let row_slot = &self.row_slot;
        self.vectors.retain_rows(|row| live(row_slot[row / 2]));
        self.row_slot.retain(|&slot| live(slot));
        self.slot_row = self
            .row_slot
            .iter()
            .enumerate()
            .map(|(row, &slot)| (slot, row as u32))
            .collect();
    }

    /// The normalised vector of `query`, from the cache or the model; `None` without a model.
    pub fn query_vector(&self, query: &str) -> Option<Result<Arc<[f32]>, EmbedError>> {
        let model = self.model.as_ref()?;
        Some(self.queries.get_or_embed(model.as_ref(), query))
    }

    /// The similarity of the query to every tool that has its vectors and passes `keep`: the
    /// cosine of the row(s) `view` says (by default the larger of the two).
    pub fn similarities(
        &self,
        query: &[f32],
        view: DenseView,
        keep: impl Fn(u32) -> bool,
    ) -> Vec<(u32, f32)> {
        if query.len() != self.vectors.dims() {
            return Vec::new();
        }
        let query = QuantizedQuery::new(query);
        // Every row in one scan: its loop is compiled for the processor's vector instructions.
        let dots = self.vectors.dot_quantized_all(&query);
        let dot = |row: usize| dots.get(row).copied().unwrap_or(0.0);
        self.row_slot
            .iter()
            .enumerate()
            .filter(|&(_, &slot)| keep(slot))
            .map(|(row, &slot)| {
                let whole = || dot(2 * row + WHOLE);
                let purpose = || dot(2 * row + PURPOSE);
                let similarity = match view {
                    DenseView::Max => whole().max(purpose()),
                    DenseView::Whole => whole(),
                    DenseView::Purpose => purpose(),
                };
                (slot, similarity)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashEmbedder;

    fn index() -> (DenseIndex, String) {
        let model = Arc::new(HashEmbedder::new(4));
        let id = model.model_id().to_string();
        let mut index = DenseIndex::default();
        index.set_model(Some(model));
        (index, id)
    }

    #[test]
    fn a_tool_is_searchable_once_both_views_are_in_and_scores_its_better_cosine() {
        let (mut index, id) = index();
        let purpose = vec![1.0, 0.0, 0.0, 0.0];
        let parameters = vec![0.0, 1.0, 0.0, 0.0];
        let mut asked = 0;
        assert!(index
            .insert(&id, (7, ToolView::Purpose), purpose, || {
                asked += 1;
                [10, 30]
            })
            .unwrap());
        assert_eq!(asked, 0, "lengths are read only when the tool is complete");
        assert_eq!((index.len(), index.has(7)), (0, false));
        assert_eq!(index.missing_views(7), vec![ToolView::Parameters]);
        assert!(index
            .insert(&id, (7, ToolView::Parameters), parameters, || [10, 30])
            .unwrap());
        assert_eq!((index.len(), index.has(7)), (1, true));
        assert!(index.missing_views(7).is_empty());

        // The whole is the views weighed 10 : 30, so it leans to the parameters.
        let by = |query: [f32; 4], view| index.similarities(&query, view, |_| true)[0].1;
        let whole_on_purpose = 10.0 / (10.0f32 * 10.0 + 30.0 * 30.0).sqrt();
        assert!((by([1.0, 0.0, 0.0, 0.0], DenseView::Whole) - whole_on_purpose).abs() < 0.01);
        assert!((by([1.0, 0.0, 0.0, 0.0], DenseView::Purpose) - 1.0).abs() < 0.01);
        assert!((by([1.0, 0.0, 0.0, 0.0], DenseView::Max) - 1.0).abs() < 0.01);
        let whole_on_parameters = 30.0 / (10.0f32 * 10.0 + 30.0 * 30.0).sqrt();
        assert!((by([0.0, 1.0, 0.0, 0.0], DenseView::Max) - whole_on_parameters).abs() < 0.01);
        assert!(by([0.0, 1.0, 0.0, 0.0], DenseView::Purpose).abs() < 0.01);
    }

    #[test]
    fn wrong_vectors_are_refused_and_dead_slots_dropped() {
        let (mut index, id) = index();
        assert!(!index
            .insert("another", (1, ToolView::Purpose), vec![1.0; 4], || [1, 1])
            .unwrap());
        assert!(index
            .insert(&id, (1, ToolView::Purpose), vec![1.0; 3], || [1, 1])
            .is_err());
        assert!(index
            .insert(&id, (1, ToolView::Purpose), vec![f32::NAN; 4], || [1, 1])
            .is_err());
        for slot in [1, 2, 3] {
            for view in ToolView::ALL {
                index
                    .insert(&id, (slot, view), vec![slot as f32, 1.0, 0.0, 0.0], || {
                        [1, 1]
                    })
                    .unwrap();
            }
        }
        index
            .insert(&id, (4, ToolView::Purpose), vec![1.0; 4], || [1, 1])
            .unwrap();
        assert_eq!(index.memory_bytes(), index.vectors.memory_bytes() + 4 * 4);
        index.retain(|slot| slot != 2 && slot != 4);
        assert_eq!(index.len(), 2);
        assert_eq!(index.missing_views(4), ToolView::ALL.to_vec());
        let slots: Vec<u32> = index
            .similarities(&[1.0, 0.0, 0.0, 0.0], DenseView::Max, |_| true)
            .into_iter()
            .map(|(slot, _)| slot)
            .collect();
        assert_eq!(slots, vec![1, 3]);
        // Each kept tool still scores against its own rows.
        let three =
            index.similarities(&[0.948_683, 0.316_228, 0.0, 0.0], DenseView::Purpose, |s| {
                s == 3
            });
        assert!((three[0].1 - 1.0).abs() < 0.01, "{three:?}");
    }
}
