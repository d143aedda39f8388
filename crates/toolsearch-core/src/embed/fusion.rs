//! Fusing rankings, as plain maths over keys (tool slots, ids): reciprocal rank fusion, and a
//! convex combination of min-max-normalised scores. Results are sorted best first, equal scores
//! by key, so the same inputs always give the same order.

use std::collections::HashMap;
use std::hash::Hash;

fn sort_fused<K: Ord>(fused: &mut [(K, f32)]) {
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
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
    let range = max - min;
    scores
        .iter()
        .map(|&s| {
            if !s.is_finite() {
                0.0
            } else if range > 0.0 {
                (s - min) / range
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

/// Convex combination: `alpha * dense + (1 - alpha) * lexical`, each list's scores min-max
/// normalised first ([`min_max_normalize`]); a key missing from a list gets 0 from it. `alpha` is
/// clamped to 0..1 (0: lexical only, 1: dense only; non-finite reads as 0). A key listed twice in
/// one list keeps its best score.
pub fn convex_combination<K>(lexical: &[(K, f32)], dense: &[(K, f32)], alpha: f32) -> Vec<(K, f32)>
where
    K: Copy + Eq + Hash + Ord,
{
    let normalised = |list: &[(K, f32)]| -> Vec<(K, f32)> {
        let raw: Vec<f32> = list.iter().map(|&(_, s)| s).collect();
        list.iter()
            .map(|&(key, _)| key)
            .zip(min_max_normalize(&raw))
            .collect()
    };
    weighted_sum(&normalised(lexical), &normalised(dense), alpha)
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
}
