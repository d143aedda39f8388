//! Fusing one search's keyword and dense lists: how far each list's best stands out, the dense
//! share of a query, and the fusions the config names. Lists hold tool slots; a fusion reads its
//! two sides by slot, in vectors as long as the index, not through hash maps: a long request over
//! a large catalog brings thousands of keyword hits, and hashing them was a sixth of a search.

use super::config::Fusion;
use crate::embed::fusion::{min_max_normalize, rescaled, z_score_normalize};

/// How many of a list's best scores `standout` reads.
pub(super) const STANDOUT_DEPTH: usize = 10;

/// How far the best of `scores` stands out of the best `STANDOUT_DEPTH`: its distance above
/// their mean in standard deviations of them. `None` with fewer than three scores or no spread:
/// such a list says nothing about itself.
pub(super) fn standout(scores: impl Iterator<Item = f32>) -> Option<f32> {
    let mut top: Vec<f32> = scores.filter(|s| s.is_finite()).collect();
    if top.len() > STANDOUT_DEPTH {
        top.select_nth_unstable_by(STANDOUT_DEPTH - 1, |a, b| b.total_cmp(a));
        top.truncate(STANDOUT_DEPTH);
    }
    // In order, so that the sums below do not depend on the order the scores came in.
    top.sort_unstable_by(|a, b| b.total_cmp(a));
    if top.len() < 3 {
        return None;
    }
    let n = top.len() as f32;
    let mean = top.iter().sum::<f32>() / n;
    let deviation = (top.iter().map(|s| (s - mean).powi(2)).sum::<f32>() / n).sqrt();
    let best = top.iter().copied().fold(f32::MIN, f32::max);
    (deviation > f32::EPSILON).then(|| (best - mean) / deviation)
}

/// The dense share when the prior `prior` meets evidence for each side: `prior × meaning`
/// against `(1 − prior) × words`; the prior itself when neither side has any.
pub(super) fn share(prior: f32, meaning: f32, words: f32) -> f32 {
    let (meaning, words) = (prior * meaning.max(0.0), (1.0 - prior) * words.max(0.0));
    if meaning + words > 0.0 && (meaning + words).is_finite() {
        meaning / (meaning + words)
    } else {
        prior
    }
}

pub(super) fn finite_or(value: f32, default: f32) -> f32 {
    if value.is_finite() {
        value
    } else {
        default
    }
}

/// Reciprocal rank fusion with a share per list: `(1 − alpha) / (k + keyword rank) + alpha /
/// (k + dense rank)`, ranks from 1, scaled so that first in both scores 1. Both lists best first.
pub(super) fn weighted_rrf(
    lexical: &[(u32, f32)],
    dense: &[(u32, f32)],
    alpha: f32,
    k: f32,
) -> Vec<(u32, f32)> {
    let k = finite_or(k, 0.0).max(0.0);
    let mut fused: rustc_hash::FxHashMap<u32, f32> = Default::default();
    for (list, weight) in [(lexical, 1.0 - alpha), (dense, alpha)] {
        for (rank, &(slot, _)) in list.iter().enumerate() {
            let entry = fused.entry(slot).or_insert(0.0);
            *entry += weight / (k + rank as f32 + 1.0) * (k + 1.0);
        }
    }
    sorted_best_first(fused.into_iter().collect())
}

/// CombMNZ over z-scores: the weighted z-score sum (as `Fusion::ZScore`) times one plus the
/// number of lists holding the tool among their first `STANDOUT_DEPTH`, divided by the best.
/// Both lists best first.
pub(super) fn comb_mnz(
    lexical: &[(u32, f32)],
    dense: &[(u32, f32)],
    alpha: f32,
) -> Vec<(u32, f32)> {
    let head = |list: &[(u32, f32)]| -> rustc_hash::FxHashSet<u32> {
        list.iter()
            .take(STANDOUT_DEPTH)
            .map(|&(slot, _)| slot)
            .collect()
    };
    let (words, meaning) = (head(lexical), head(dense));
    let mut fused: Vec<(u32, f32)> = crate::embed::z_score_combination(lexical, dense, alpha)
        .into_iter()
        .map(|(slot, score)| {
            let lists =
                1 + usize::from(words.contains(&slot)) + usize::from(meaning.contains(&slot));
            (slot, score * lists as f32)
        })
        .collect();
    let best = fused.iter().map(|&(_, s)| s).fold(0.0, f32::max);
    if best > 0.0 {
        fused.iter_mut().for_each(|(_, s)| *s /= best);
    }
    sorted_best_first(fused)
}

fn sorted_best_first(mut list: Vec<(u32, f32)>) -> Vec<(u32, f32)> {
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

/// `alpha * dense + (1 - alpha) * lexical` over lists whose scores are already on one scale, as
/// [`crate::embed::fusion::weighted_sum`] computes it (the same sums, bit for bit), over slots
/// below `slots`, in no order: the search puts its page in order itself.
pub(super) fn weighted_sum(
    lexical: &[(u32, f32)],
    dense: &[(u32, f32)],
    alpha: f32,
    slots: usize,
) -> Vec<(u32, f32)> {
    let alpha = finite_or(alpha, 0.0).clamp(0.0, 1.0);
    let mut parts: Vec<Option<(f32, f32)>> = vec![None; slots];
    let mut order = Vec::with_capacity(lexical.len() + dense.len());
    for (list, side) in [(lexical, 0), (dense, 1)] {
        for &(slot, score) in list {
            let Some(cell) = parts.get_mut(slot as usize) else {
                continue;
            };
            let part = cell.get_or_insert_with(|| {
                order.push(slot);
                (0.0, 0.0)
            });
            // A slot listed twice in one list keeps its best score.
            if side == 0 {
                part.0 = part.0.max(score);
            } else {
                part.1 = part.1.max(score);
            }
        }
    }
    order
        .into_iter()
        .filter_map(|slot| {
            let (l, d) = parts.get(slot as usize).copied().flatten()?;
            Some((slot, (1.0 - alpha) * l + alpha * d))
        })
        .collect()
}

/// [`weighted_sum`] of the lists' z-scores, divided by the best sum:
/// [`crate::embed::z_score_combination`]'s scores, in no order, from lists in any order (the
/// z-scores' sums do not depend on it).
pub(super) fn z_score(
    lexical: &[(u32, f32)],
    dense: &[(u32, f32)],
    alpha: f32,
    slots: usize,
) -> Vec<(u32, f32)> {
    let mut fused = weighted_sum(
        &rescaled(lexical, z_score_normalize),
        &rescaled(dense, z_score_normalize),
        alpha,
        slots,
    );
    let best = fused
        .iter()
        .map(|&(_, s)| s)
        .max_by(f32::total_cmp)
        .unwrap_or(0.0);
    if best > 0.0 {
        for (_, score) in &mut fused {
            *score /= best;
        }
    }
    fused
}

/// Whether `fusion` reads the lists' order (ranks, or each list's first few), not only their
/// scores: only then are they sorted before it.
pub(super) fn reads_order(fusion: Fusion) -> bool {
    matches!(fusion, Fusion::Rrf | Fusion::CombMnz)
}

/// [`weighted_sum`] of the lists' min-max rescaled scores:
/// [`crate::embed::convex_combination`]'s scores, in no order.
pub(super) fn convex(
    lexical: &[(u32, f32)],
    dense: &[(u32, f32)],
    alpha: f32,
    slots: usize,
) -> Vec<(u32, f32)> {
    weighted_sum(
        &rescaled(lexical, min_max_normalize),
        &rescaled(dense, min_max_normalize),
        alpha,
        slots,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::fusion;

    fn by_slot(mut list: Vec<(u32, f32)>) -> Vec<(u32, u32)> {
        list.sort_unstable_by_key(|&(slot, _)| slot);
        list.into_iter()
            .map(|(slot, s)| (slot, s.to_bits()))
            .collect()
    }

    #[test]
    fn the_fusions_by_slot_give_the_library_fusions_scores() {
        // Overlapping lists, a repeated slot, a tie, and a slot past the index's end.
        let lexical = [(4u32, 3.5), (1, 2.0), (7, 2.0), (4, 1.0), (2, 0.25)];
        let dense = [(7u32, 0.61), (3, 0.58), (1, 0.2), (9, 0.1)];
        for alpha in [0.0, 0.35, 0.65, 1.0, f32::NAN] {
            let ours = by_slot(z_score(&lexical, &dense, alpha, 10));
            let library = by_slot(fusion::z_score_combination(&lexical, &dense, alpha));
            assert_eq!(ours.len(), library.len());
            for ((slot, a), (other, b)) in ours.iter().zip(&library) {
                assert_eq!(slot, other);
                assert!((f32::from_bits(*a) - f32::from_bits(*b)).abs() < 1e-6);
            }
            // The same scores from the lists in another order.
            let (mut l, mut d) = (lexical.to_vec(), dense.to_vec());
            l.reverse();
            d.rotate_left(1);
            assert_eq!(by_slot(z_score(&l, &d, alpha, 10)), ours);
            assert_eq!(
                by_slot(convex(&lexical, &dense, alpha, 10)),
                by_slot(fusion::convex_combination(&lexical, &dense, alpha))
            );
            assert_eq!(
                by_slot(weighted_sum(&lexical, &dense, alpha, 10)),
                by_slot(fusion::weighted_sum(&lexical, &dense, alpha))
            );
        }
        // A slot the index does not hold is left out rather than read past the end.
        let fused = weighted_sum(&lexical, &dense, 0.5, 8);
        assert!(fused.iter().all(|&(slot, _)| slot < 8));
        assert_eq!(fused.len(), 5);
    }
}
