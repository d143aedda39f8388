//! Recall@5, nDCG@10 (binary gains), MRR and Complete@5, per query then averaged.

use std::collections::HashSet;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueryMetrics {
    pub recall_at_5: f64,
    pub ndcg_at_10: f64,
    pub mrr: f64,
    pub complete_at_5: f64,
}

/// Scores one ranking against the relevant names. Repeats of a name already ranked are dropped
/// first, since a name on several servers counts once.
pub fn score(ranked: &[String], relevant: &[String]) -> QueryMetrics {
    let relevant: HashSet<&str> = relevant.iter().map(String::as_str).collect();
    if relevant.is_empty() {
        return QueryMetrics::default();
    }
    let mut seen = HashSet::new();
    let ranked: Vec<&str> = ranked
        .iter()
        .map(String::as_str)
        .filter(|name| seen.insert(*name))
        .collect();
    let hits_at_5 = ranked
        .iter()
        .take(5)
        .filter(|n| relevant.contains(*n))
        .count();
    // fold from +0.0: an empty f64 sum is -0.0, which prints as "-0.0".
    let dcg: f64 = ranked
        .iter()
        .take(10)
        .enumerate()
        .filter(|(_, n)| relevant.contains(*n))
        .fold(0.0, |acc, (i, _)| acc + 1.0 / ((i + 2) as f64).log2());
    let idcg: f64 = (0..relevant.len().min(10))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let mrr = ranked
        .iter()
        .position(|n| relevant.contains(*n))
        .map_or(0.0, |i| 1.0 / (i + 1) as f64);
    QueryMetrics {
        recall_at_5: hits_at_5 as f64 / relevant.len() as f64,
        ndcg_at_10: dcg / idcg,
        mrr,
        complete_at_5: if hits_at_5 == relevant.len() {
            1.0
        } else {
            0.0
        },
    }
}

/// Averages over queries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    pub recall_at_5: f64,
    pub ndcg_at_10: f64,
    pub mrr: f64,
    pub complete_at_5: f64,
}

impl Metrics {
    pub fn mean(per_query: &[QueryMetrics]) -> Self {
        let n = per_query.len().max(1) as f64;
        let sum = |f: fn(&QueryMetrics) -> f64| per_query.iter().map(f).sum::<f64>() / n;
        Self {
            recall_at_5: sum(|m| m.recall_at_5),
            ndcg_at_10: sum(|m| m.ndcg_at_10),
            mrr: sum(|m| m.mrr),
            complete_at_5: sum(|m| m.complete_at_5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hand_made_example() {
        // Relevant: a, b. Ranked: x, a, a (repeat, dropped), y, z, w, b.
        let ranked = names(&["x", "a", "a", "y", "z", "w", "b"]);
        let m = score(&ranked, &names(&["a", "b"]));
        // After dropping the repeat: x a y z w b → a at rank 2, b at rank 6.
        assert!((m.recall_at_5 - 0.5).abs() < 1e-12);
        assert!((m.mrr - 0.5).abs() < 1e-12);
        assert_eq!(m.complete_at_5, 0.0);
        let dcg = 1.0 / 3f64.log2() + 1.0 / 7f64.log2();
        let idcg = 1.0 + 1.0 / 3f64.log2();
        assert!((m.ndcg_at_10 - dcg / idcg).abs() < 1e-12);
    }

    #[test]
    fn perfect_and_empty_rankings() {
        let m = score(&names(&["a", "b", "c"]), &names(&["b", "a"]));
        assert_eq!(m.recall_at_5, 1.0);
        assert_eq!(m.complete_at_5, 1.0);
        assert_eq!(m.mrr, 1.0);
        assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12);
        let none = score(&[], &names(&["a"]));
        assert_eq!(none, QueryMetrics::default());
    }

    #[test]
    fn idcg_is_capped_at_ten() {
        let relevant: Vec<String> = (0..12).map(|i| i.to_string()).collect();
        let m = score(&relevant, &relevant);
        assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12);
        assert!((m.recall_at_5 - 5.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn mean_averages_each_metric() {
        let a = QueryMetrics {
            recall_at_5: 1.0,
            ndcg_at_10: 0.5,
            mrr: 1.0,
            complete_at_5: 1.0,
        };
        let b = QueryMetrics::default();
        let m = Metrics::mean(&[a, b]);
        assert_eq!(
            (m.recall_at_5, m.ndcg_at_10, m.mrr, m.complete_at_5),
            (0.5, 0.25, 0.5, 0.5)
        );
    }
}
