//! Per-query accumulators: a score for every slot and the list of slots scored, and the pool
//! that keeps them between searches.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};

/// Dense per-slot accumulator with the list of slots it touched.
///
/// The list is a slot-long buffer and a count rather than a growing vector: a query word's
/// walk then keeps the count in a register and writes each slot without a capacity check,
/// where a push through the accumulator stored the vector's length back on every entry.
#[derive(Debug, Clone)]
pub struct Hits {
    pub scores: Vec<f32>,
    pub(super) order: Vec<u32>,
    pub(super) count: usize,
}

impl Hits {
    pub fn new(slots: usize) -> Self {
        Self {
            scores: vec![0.0; slots],
            order: vec![0; slots],
            count: 0,
        }
    }

    /// The slots with a score, in the order they were first scored.
    pub fn touched(&self) -> &[u32] {
        &self.order[..self.count]
    }

    /// The slots with a score and every slot's score, to change the scores in place.
    pub fn touched_and_scores(&mut self) -> (&[u32], &mut [f32]) {
        (&self.order[..self.count], &mut self.scores)
    }

    #[inline]
    pub fn add(&mut self, slot: u32, score: f32) {
        self.count = accumulate(&mut self.scores, &mut self.order, self.count, slot, score);
    }

    pub fn contains(&self, slot: u32) -> bool {
        self.scores[slot as usize] > 0.0
    }

    pub fn merge_from(&mut self, other: &Hits) {
        for &slot in other.touched() {
            self.add(slot, other.scores[slot as usize]);
        }
    }

    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut kept = 0;
        for at in 0..self.count {
            let slot = self.order[at];
            if keep(slot) {
                self.order[kept] = slot;
                kept += 1;
            } else {
                self.scores[slot as usize] = 0.0;
            }
        }
        self.count = kept;
    }

    pub fn clear(&mut self) {
        for &slot in &self.order[..self.count] {
            self.scores[slot as usize] = 0.0;
        }
        self.count = 0;
    }

    /// Room for `slots` slots, cleared: an accumulator taken again for a grown index.
    fn reset(&mut self, slots: usize) {
        self.clear();
        if self.scores.len() < slots {
            self.scores.resize(slots, 0.0);
            self.order.resize(slots, 0);
        }
    }
}

/// Adds `score` to `slot`'s cell and lists the slot when it is new; returns the new count.
#[inline(always)]
pub(super) fn accumulate(
    scores: &mut [f32],
    order: &mut [u32],
    count: usize,
    slot: u32,
    score: f32,
) -> usize {
    // The slot is always written and kept only when new: a branch on "new" is taken at random
    // as a query word's entries come in, and its mispredictions cost the keyword search about
    // a tenth of its time.
    let cell = &mut scores[slot as usize];
    let fresh = *cell == 0.0;
    *cell += score;
    // Scores are positive, so a slot is new once and the buffer (one cell a slot) has room for
    // every new slot; a full buffer means the slot is listed already.
    match order.get_mut(count) {
        Some(cell) => {
            *cell = slot;
            count + usize::from(fresh)
        }
        None => count,
    }
}

/// Accumulators left by finished searches, cleared, for the next ones. At most
/// [`POOLED`] are kept: enough for a few searches at once, each holding two or three.
#[derive(Default)]
pub(super) struct HitsPool(Mutex<Vec<Hits>>);

const POOLED: usize = 8;

impl HitsPool {
    pub(super) fn take(&self, slots: usize) -> PooledHits<'_> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let hits = match kept {
            Some(mut hits) => {
                hits.reset(slots);
                hits
            }
            None => Hits::new(slots),
        };
        PooledHits { hits, pool: self }
    }

    fn give_back(&self, mut hits: Hits) {
        hits.clear();
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < POOLED {
            kept.push(hits);
        }
    }
}

/// An accumulator on loan from a [`HitsPool`]; given back, cleared, when dropped.
pub struct PooledHits<'a> {
    hits: Hits,
    pool: &'a HitsPool,
}

impl Deref for PooledHits<'_> {
    type Target = Hits;
    fn deref(&self) -> &Hits {
        &self.hits
    }
}

impl DerefMut for PooledHits<'_> {
    fn deref_mut(&mut self) -> &mut Hits {
        &mut self.hits
    }
}

impl Drop for PooledHits<'_> {
    fn drop(&mut self) {
        // An empty accumulator allocates nothing.
        let hits = std::mem::replace(&mut self.hits, Hits::new(0));
        self.pool.give_back(hits);
    }
}
