//! Runs rankers over datasets: metrics and per-search latency.

use crate::dataset::Dataset;
use crate::metrics::{score, Metrics};
use crate::rankers::{Ranker, RankerKind};
use crate::EvalError;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use toolsearch_core::{Embedder, SearchConfig};

/// Results are ranked this deep: every metric reads the first 10 (MRR too, so a first relevant
/// name below rank 10 counts as not returned, for every ranker alike).
pub const RANK_DEPTH: usize = 10;

#[derive(Debug, Clone, Serialize)]
pub struct RankerReport {
    pub ranker: String,
    pub recall_at_5: f64,
    pub ndcg_at_10: f64,
    pub mrr: f64,
    pub complete_at_5: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatasetReport {
    pub name: String,
    pub tools: usize,
    /// The queries scored: those that name at least one relevant tool.
    pub queries: usize,
    pub rankers: Vec<RankerReport>,
}

pub fn evaluate(
    dataset: &Dataset,
    rankers: &[RankerKind],
    with_instruction: bool,
    config: &SearchConfig,
    embedder: Option<&Arc<dyn Embedder>>,
) -> Result<DatasetReport, EvalError> {
    let names: Vec<String> = dataset.tools.iter().map(|t| t.name().to_owned()).collect();
    let queries = scored_queries(dataset, with_instruction, |name| name.to_string());
    let mut reports = Vec::new();
    for kind in rankers {
        let ranker = kind.build(&dataset.tools, config, embedder)?;
        reports.push(score_ranker(ranker.as_ref(), &names, &queries)?);
    }
    Ok(DatasetReport {
        name: dataset.name.clone(),
        tools: dataset.tools.len(),
        queries: queries.len(),
        rankers: reports,
    })
}

/// A query as it is scored: the text searched and the keys of its relevant tools.
pub(crate) struct ScoredQuery {
    pub text: String,
    pub relevant: Vec<String>,
}

/// The dataset's queries that name a relevant tool (a request no tool fits has no ranking to
/// score; `crate::stress::evaluate_requests` reports those), each relevant name turned into a key.
pub(crate) fn scored_queries(
    dataset: &Dataset,
    with_instruction: bool,
    key: impl Fn(&str) -> String,
) -> Vec<ScoredQuery> {
    dataset
        .queries
        .iter()
        .filter(|q| !q.relevant.is_empty())
        .map(|q| ScoredQuery {
            text: q.text(with_instruction),
            relevant: q.relevant.iter().map(|name| key(name)).collect(),
        })
        .collect()
}

/// Runs `queries` through `ranker` and averages the metrics; `keys[i]` is what tool `i` of the
/// ranker's list is scored as (its name, or its name within its dataset in a pooled catalog).
pub(crate) fn score_ranker(
    ranker: &dyn Ranker,
    keys: &[String],
    queries: &[ScoredQuery],
) -> Result<RankerReport, EvalError> {
    let mut per_query = Vec::with_capacity(queries.len());
    let mut latencies = Vec::with_capacity(queries.len());
    for query in queries {
        let started = Instant::now();
        let ranked = ranker.rank(&query.text, RANK_DEPTH)?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
        let ranked: Vec<String> = ranked
            .iter()
            .filter_map(|r| keys.get(r.tool).cloned())
            .collect();
        per_query.push(score(&ranked, &query.relevant));
    }
    let m = Metrics::mean(&per_query);
    latencies.sort_by(f64::total_cmp);
    Ok(RankerReport {
        ranker: ranker.name().to_string(),
        recall_at_5: m.recall_at_5,
        ndcg_at_10: m.ndcg_at_10,
        mrr: m.mrr,
        complete_at_5: m.complete_at_5,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
    })
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
