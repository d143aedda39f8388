//! Retrieval-quality evaluation: datasets of queries with relevant tools, the metrics, the
//! engine's ranker and the reference rankers it is measured against.

pub mod ablation;
pub mod dataset;
pub mod fusion;
pub mod metrics;
pub mod rankers;
pub mod run;
pub mod several;
pub mod stress;
pub mod synthetic;

pub use dataset::{Dataset, EvalQuery};
pub use metrics::{Metrics, QueryMetrics};
pub use rankers::{Ranked, Ranker, RankerKind};
pub use run::{evaluate, DatasetReport, RankerReport};
pub use stress::{
    evaluate_pooled, evaluate_requests, self_retrieval, PooledReport, RequestsReport, Spread,
};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} line {line}: {message}; each line must be {{\"id\", \"query\", \"relevant\": [names]}}")]
    Query {
        path: String,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Engine(#[from] toolsearch_core::Error),
    #[error(
        "unknown ranker `{0}`; use toolsearch, hybrid, semantic, overlap, bm25-plain or regex"
    )]
    UnknownRanker(String),
    #[error("the {0} ranker needs an embedding model; run `toolsearch model fetch`, pass --model DIR, or leave that ranker out")]
    NoModel(&'static str),
    #[error("reference ranker failed: {0}")]
    Reference(String),
}
