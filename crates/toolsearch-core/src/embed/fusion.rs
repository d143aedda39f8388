//! Fusing rankings, as plain maths over keys (tool slots, ids): reciprocal rank fusion, and a
//! convex combination of scores normalised by z-score or min-max. Results are sorted best first, equal scores
//! by key, so the same inputs always give the same order.

use std::collections::HashMap;
use std::hash::Hash;

fn sort_fused<K: Ord>(fused: &mut [(K, f32)]) {
    // Keys are distinct, so the order is total and an unstable sort gives the same list.
    fused.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
}

/// Reciprocal rank fusion: each key scores `Σ 1 / (k + rank)` over the lists it appears in, with
/// ranks counted from 1. A larger `k` flattens the advantage of the top ranks (60 is the usual
/// value); a negative or non-finite `k` is read as 0. A key listed twice in one list counts at its
/// best rank only.
pub fn reciprocal_rank_fusion<K>(lists: &[&[K]], k: f32) -> Vec<(K, f32)>
where
    K: Copy + Eq + Hash + Ord,
{
    let k = if k.is_finite() { k.max(0.0) } else { 0.0 };
    let mut scores: HashMap<K, f32> = HashMap::new();
    for list in lists {
        let mut seen: HashMap<K, ()> = HashMap::with_capacity(list.len());
        for (index, &key) in list.iter().enumerate() {
            if seen.insert(key, ()).is_some() {
                continue;
            }
            let rank = (index + 1) as f32;
            *scores.entry(key).or_insert(0.0) += 1.0 / (k + rank);
        }
    }
    let mut fused: Vec<(K, f32)> = scores.into_iter().collect();
    sort_fused(&mut fused);
    fused
}

/// Scales scores to 0..1: the lowest becomes 0, the highest 1. When every score is equal (one
/// hit, or a tie across the list), each becomes 1: the list says only that they matched.
/// Non-finite scores become 0 and do not move the range.
pub fn min_max_normalize(scores: &[f32]) -> Vec<f32> {
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let (min, max) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), s| {
        (lo.min(s), hi.max(s))
    });
    distance_from_lowest(scores, min, max - min)
}

/// Each score's distance above `lowest` in units of `spread`; every score 1 when the spread is 0
/// (one score, or a tie), and 0 for a non-finite score.
fn distance_from_lowest(scores: &[f32], lowest: f32, spread: f32) -> Vec<f32> {
    scores
        .iter()
        .map(|&s| {
            if !s.is_finite() {
                0.0
            } else if spread > 0.0 {
                (s - lowest) / spread
            } else {
                1.0
            }
        })
        .collect()
}

/// `alpha * dense + (1 - alpha) * lexical` over scores already on one scale; a key missing from a
/// list gets 0 from it. `alpha` is clamped to 0..1 (non-finite reads as 0). A key listed twice in
/// one list keeps its best score. Sorted best first, equal scores by key.
pub fn weighted_sum<K>(lexical: &[(K, f32)], dense: &[(K, f32)], alpha: f32) -> Vec<(K, f32)>
where
    K: Copy + Eq + Hash + Ord,
{
    let alpha = if alpha.is_finite() {
        alpha.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mut parts: HashMap<K, (f32, f32)> = HashMap::new();
    for &(key, score) in lexical {
        let entry = parts.entry(key).or_insert((0.0, 0.0));
        entry.0 = entry.0.max(score);
    }
    for &(key, score) in dense {
        let entry = parts.entry(key).or_insert((0.0, 0.0));
        entry.1 = entry.1.max(score);
    }
    let mut fused: Vec<(K, f32)> = parts
        .into_iter()
        .map(|(key, (l, d))| (key, (1.0 - alpha) * l + alpha * d))
        .collect();
    sort_fused(&mut fused);
    fused
}

/// A keyed list with its scores put through `normalize`, keys in place.
pub(crate) fn rescaled<K: Copy>(
    list: &[(K, f32)],
    normalize: fn(&[f32]) -> Vec<f32>,
) -> Vec<(K, f32)> {
    let raw: Vec<f32> = list.iter().map(|&(_, s)| s).collect();
    list.iter()
        .map(|&(key, _)| key)
        .zip(normalize(&raw))
        .collect()
}

/// Convex combination: `alpha * dense + (1 - alpha) * lexical`, each list's scores min-max
/// normalised first ([`min_max_normalize`]); a key missing from a list gets 0 from it. `alpha` is
/// clamped to 0..1 (0: lexical only, 1: dense only; non-finite reads as 0). A key listed twice in
/// one list keeps its best score.
pub fn convex_combination<K>(lexical: &[(K, f32)], dense: &[(K, f32)], alpha: f32) -> Vec<(K, f32)>
where
    K: Copy + Eq + Hash + Ord,
{
    let normalised = |list: &[(K, f32)]| rescaled(list, min_max_normalize);
    weighted_sum(&normalised(lexical), &normalised(dense), alpha)
}

/// Puts scores in standard deviations above the list's lowest: a z-score, shifted so that the
/// lowest is 0 (and a key missing from a list, which counts as 0, ranks with its worst). Unlike
/// min-max, the scale is the whole list's spread, so one outlier at either end does not squeeze
/// the rest. When every score is equal (one hit, or a tie), each becomes 1, as with min-max.
/// Non-finite scores become 0 and do not count. The mean and the spread are summed in f64, so
/// that they come out the same whatever order the scores are in (a caller need not sort first).
pub fn z_score_normalize(scores: &[f32]) -> Vec<f32> {
    let finite = || scores.iter().copied().filter(|s| s.is_finite());
    let count = finite().count().max(1) as f64;
    let mean = finite().map(f64::from).sum::<f64>() / count;
    let deviation =
        (finite().map(|s| (f64::from(s) - mean).powi(2)).sum::<f64>() / count).sqrt() as f32;
    let lowest = finite().fold(f32::INFINITY, f32::min);
    distance_from_lowest(scores, lowest, deviation)
}

/// `alpha * dense + (1 - alpha) * lexical` over [`z_score_normalize`]d lists, divided by the best
/// sum so that the result is in 0..1 (the best is 1). A key missing from a list gets 0 from it;
/// `alpha` is clamped to 0..1 (non-finite reads as 0). A key listed twice in one list keeps its
/// best score.
pub fn z_score_combination<K>(lexical: &[(K, f32)], dense: &[(K, f32)], alpha: f32) -> Vec<(K, f32)>
where
    K: Copy + Eq + Hash + Ord,
{
    let normalised = |list: &[(K, f32)]| rescaled(list, z_score_normalize);
    let mut fused = weighted_sum(&normalised(lexical), &normalised(dense), alpha);
    let best = fused.first().map_or(0.0, |&(_, s)| s);
    if best > 0.0 {
        for (_, score) in &mut fused {
            *score /= best;
        }
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn rrf_sums_reciprocal_ranks() {
        let lexical = [10u32, 20, 30];
        let dense = [30u32, 10, 40];
        let fused = reciprocal_rank_fusion(&[&lexical, &dense], 60.0);
        let score = |key: u32| fused.iter().find(|(k, _)| *k == key).map(|&(_, s)| s);
        assert!(close(score(10).unwrap(), 1.0 / 61.0 + 1.0 / 62.0));
        assert!(close(score(30).unwrap(), 1.0 / 63.0 + 1.0 / 61.0));
        assert!(close(score(20).unwrap(), 1.0 / 62.0));
        assert!(close(score(40).unwrap(), 1.0 / 63.0));
        let order: Vec<u32> = fused.iter().map(|&(k, _)| k).collect();
        assert_eq!(order, vec![10, 30, 20, 40]);
    }

    #[test]
    fn rrf_k_changes_how_much_the_top_rank_weighs() {
        // With k = 0, first place in one list (1) beats second place in both (1/2 + 1/2 = 1, tie
        // broken by key); with k = 60 being in both lists wins clearly.
        let a = [1u32, 2];
        let b = [3u32, 2];
        let sharp = reciprocal_rank_fusion(&[&a, &b], 0.0);
        assert!(close(sharp[0].1, 1.0));
        assert_eq!(
            sharp.iter().map(|&(k, _)| k).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        let flat = reciprocal_rank_fusion(&[&a, &b], 60.0);
        assert_eq!(flat[0].0, 2);
        // A negative k is read as 0 rather than dividing by zero.
        assert_eq!(reciprocal_rank_fusion(&[&a, &b], -5.0), sharp);
    }

    #[test]
    fn rrf_counts_a_repeated_key_once_per_list_and_breaks_ties_by_key() {
        let a = [7u32, 7, 5];
        let fused = reciprocal_rank_fusion(&[&a], 1.0);
        assert!(close(fused[0].1, 0.5));
        let tie = reciprocal_rank_fusion(&[&[9u32][..], &[4u32][..]], 60.0);
        assert_eq!(tie.iter().map(|&(k, _)| k).collect::<Vec<_>>(), vec![4, 9]);
        assert!(reciprocal_rank_fusion::<u32>(&[], 60.0).is_empty());
    }

    #[test]
    fn min_max_maps_to_unit_range() {
        let n = min_max_normalize(&[2.0, 4.0, 3.0]);
        assert!(close(n[0], 0.0) && close(n[1], 1.0) && close(n[2], 0.5));
        assert_eq!(min_max_normalize(&[0.3, 0.3]), vec![1.0, 1.0]);
        assert_eq!(min_max_normalize(&[5.0]), vec![1.0]);
        assert!(min_max_normalize(&[]).is_empty());
        let with_nan = min_max_normalize(&[1.0, f32::NAN, 3.0]);
        assert!(close(with_nan[0], 0.0) && with_nan[1] == 0.0 && close(with_nan[2], 1.0));
    }

    #[test]
    fn convex_combination_weighs_normalised_scores() {
        // Lexical scores 10, 5, 0 → 1, 0.5, 0; dense 0.9, 0.1 → 1, 0.
        let lexical = [(1u32, 10.0), (2, 5.0), (3, 0.0)];
        let dense = [(3u32, 0.9), (4, 0.1)];
        let fused = convex_combination(&lexical, &dense, 0.25);
        let score = |key: u32| fused.iter().find(|(k, _)| *k == key).map(|&(_, s)| s);
        assert!(close(score(1).unwrap(), 0.75));
        assert!(close(score(2).unwrap(), 0.375));
        assert!(close(score(3).unwrap(), 0.25));
        assert!(close(score(4).unwrap(), 0.0));
        assert_eq!(
            fused.iter().map(|&(k, _)| k).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }

    #[test]
    fn convex_combination_alpha_ends_and_clamping() {
        let lexical = [(1u32, 3.0), (2, 1.0)];
        let dense = [(2u32, 0.8), (1, 0.2)];
        let lex_only = convex_combination(&lexical, &dense, 0.0);
        assert_eq!(lex_only[0], (1, 1.0));
        let dense_only = convex_combination(&lexical, &dense, 1.0);
        assert_eq!(dense_only[0], (2, 1.0));
        assert_eq!(convex_combination(&lexical, &dense, 7.0), dense_only);
        assert_eq!(convex_combination(&lexical, &dense, f32::NAN), lex_only);
        // Equal fused scores come out in key order.
        let half = convex_combination(&lexical, &dense, 0.5);
        assert!(close(half[0].1, 0.5) && close(half[1].1, 0.5));
        assert_eq!(half[0].0, 1);
    }

    #[test]
    fn z_score_measures_distance_from_the_lowest_in_deviations() {
        // Mean 2, population deviation sqrt(2/3).
        let z = z_score_normalize(&[1.0, 2.0, 3.0]);
        let deviation = (2.0f32 / 3.0).sqrt();
        assert!(close(z[0], 0.0) && close(z[1], 1.0 / deviation) && close(z[2], 2.0 / deviation));
        assert_eq!(z_score_normalize(&[0.4, 0.4]), vec![1.0, 1.0]);
        assert_eq!(z_score_normalize(&[f32::NAN, 1.0]), vec![0.0, 1.0]);
        assert!(z_score_normalize(&[]).is_empty());
    }

    #[test]
    fn z_score_is_not_squeezed_by_one_outlier() {
        // Min-max puts the middle scores near 0 next to an outlier; z-scores keep them apart
        // from the lowest by their own spread.
        let scores = [0.0, 0.1, 0.2, 10.0];
        let minmax = min_max_normalize(&scores);
        let z = z_score_normalize(&scores);
        assert!(minmax[2] - minmax[0] < 0.03);
        assert!(z[2] - z[0] > 0.04);
        assert!(z[3] > z[2]);
    }

    #[test]
    fn z_score_combination_is_in_unit_range_best_first() {
        let lexical = [(1u32, 10.0), (2, 5.0), (3, 1.0)];
        let dense = [(3u32, 0.9), (2, 0.6), (4, 0.5)];
        let fused = z_score_combination(&lexical, &dense, 0.5);
        assert_eq!(fused.len(), 4);
        assert!(close(fused[0].1, 1.0));
        assert!(fused.iter().all(|&(_, s)| (0.0..=1.0).contains(&s)));
        assert!(fused.windows(2).all(|w| w[0].1 >= w[1].1));
        // Alpha 0 is the lexical order; alpha 1 the dense one.
        let words: Vec<u32> = z_score_combination(&lexical, &dense, 0.0)
            .iter()
            .take(3)
            .map(|&(k, _)| k)
            .collect();
        assert_eq!(words, [1, 2, 3]);
        let meaning = z_score_combination(&lexical, &dense, 1.0);
        let order: Vec<u32> = meaning.iter().take(2).map(|&(k, _)| k).collect();
        assert_eq!(order, [3, 2]);
        // The dense list's lowest counts as much as missing from it.
        assert!(meaning[2..].iter().all(|&(_, s)| s == 0.0));
    }
}
