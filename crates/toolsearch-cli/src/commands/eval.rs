use crate::commands::model::{load_for_search, ModelArgs};
use crate::BadInput;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolsearch_core::{Embedder, SearchConfig};
use toolsearch_embed::{CachedEmbedder, VectorCache};
use toolsearch_eval::{evaluate, Dataset, DatasetReport, RankerKind};

/// Where the evaluation data lives relative to the project root.
const DEFAULT_DATASETS: &str = "../shared/eval/datasets";

#[derive(Args)]
pub struct EvalArgs {
    /// A dataset folder (tools.json + queries.jsonl); repeatable. Default: every folder under
    /// ../shared/eval/datasets.
    #[arg(long)]
    dataset: Vec<PathBuf>,
    /// A ranker to run (toolsearch, hybrid, semantic, overlap, bm25-plain, regex); repeatable.
    /// Default: all (hybrid and semantic only when the embedding model is available).
    #[arg(long)]
    ranker: Vec<String>,
    /// Put each query's instruction in front of it.
    #[arg(long)]
    with_instruction: bool,
    /// Override a ranking parameter of the engine, e.g. `name.weight=2` or `k1=1.5` (repeatable;
    /// for ablations).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// The default search settings with each `--set KEY=VALUE` applied (shared with `bench search`).
pub fn search_config(settings: &[String]) -> Result<SearchConfig> {
    let mut config = SearchConfig::default();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| BadInput(format!("--set {setting}: expected KEY=VALUE")))?;
        config.set(key.trim(), value.trim())?;
    }
    Ok(config)
}

pub fn run(args: EvalArgs) -> Result<()> {
    let chosen = !args.ranker.is_empty();
    let mut rankers: Vec<RankerKind> = if !chosen {
        RankerKind::ALL.to_vec()
    } else {
        args.ranker
            .iter()
            .map(|r| {
                r.parse()
                    .map_err(|e: toolsearch_eval::EvalError| BadInput(e.to_string()))
            })
            .collect::<Result<_, _>>()?
    };
    let config = search_config(&args.settings)?;
    let cached = if rankers.iter().any(|r| r.needs_model()) {
        load_cached_model(&args.model)
    } else {
        None
    };
    let embedder: Option<Arc<dyn Embedder>> = cached.clone().map(|c| c as Arc<dyn Embedder>);
    if embedder.is_none() {
        if chosen && rankers.iter().any(|r| r.needs_model()) {
            return Err(BadInput(
                "the hybrid and semantic rankers need the embedding model; see the warning above"
                    .into(),
            )
            .into());
        }
        rankers.retain(|r| !r.needs_model());
    }
    let dirs = if args.dataset.is_empty() {
        let root = Path::new(DEFAULT_DATASETS);
        if !root.is_dir() {
            return Err(BadInput(format!(
                "no evaluation data at {DEFAULT_DATASETS} (it sits beside the project, not in it); \
                 pass --dataset DIR with a folder holding tools.json and queries.jsonl"
            ))
            .into());
        }
        Dataset::discover(root)?
    } else {
        args.dataset
    };
    let mut reports = Vec::new();
    for dir in &dirs {
        let dataset = Dataset::load(dir).map_err(|e| BadInput(e.to_string()))?;
        if dataset.skipped_unnamed > 0 {
            eprintln!(
                "{}: left out {} tool(s) without a name",
                dataset.name, dataset.skipped_unnamed
            );
        }
        let report = evaluate(
            &dataset,
            &rankers,
            args.with_instruction,
            &config,
            embedder.as_ref(),
        )?;
        if let Some(cached) = &cached {
            // Saved after each dataset, so an interrupted run keeps what it embedded.
            if let Err(error) = cached.save() {
                eprintln!("warning: the evaluation's vector cache was not saved: {error}");
            }
        }
        if !args.json {
            print_table(&report);
        }
        reports.push(report);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "datasets": reports }))?
        );
    } else if reports.len() > 1 {
        print_average(&reports);
    }
    Ok(())
}

/// The model behind a vector cache of its own (tools and queries of the evaluation sets, kept
/// apart from the tools' cache of `serve` and `search`).
fn load_cached_model(args: &ModelArgs) -> Option<Arc<CachedEmbedder>> {
    let model = load_for_search(args)?;
    let root = toolsearch_embed::cache_root(&|key| std::env::var_os(key))
        .unwrap_or_else(std::env::temp_dir)
        .join("eval");
    let (cache, _) = VectorCache::open(
        VectorCache::path_in(&root, model.model_id()),
        model.model_id(),
        model.dimensions(),
    );
    match CachedEmbedder::new(model, cache) {
        Ok(cached) => Some(Arc::new(cached)),
        Err(error) => {
            eprintln!("warning: leaving out the hybrid and semantic rankers: {error}");
            None
        }
    }
}

fn print_table(report: &DatasetReport) {
    println!(
        "{} ({} tools, {} queries)",
        report.name, report.tools, report.queries
    );
    println!(
        "  {:<12} {:>9} {:>8} {:>7} {:>11} {:>9} {:>9}",
        "ranker", "Recall@5", "nDCG@10", "MRR", "Complete@5", "p50 µs", "p99 µs"
    );
    for r in &report.rankers {
        println!(
            "  {:<12} {:>9.1} {:>8.1} {:>7.1} {:>11.1} {:>9.0} {:>9.0}",
            r.ranker,
            percent(r.recall_at_5),
            percent(r.ndcg_at_10),
            percent(r.mrr),
            percent(r.complete_at_5),
            r.p50_us,
            r.p99_us
        );
    }
    println!();
}

/// As a percentage; `+ 0.0` turns a negative zero into a plain one.
fn percent(fraction: f64) -> f64 {
    100.0 * fraction + 0.0
}

fn print_average(reports: &[DatasetReport]) {
    println!("mean nDCG@10 over {} datasets", reports.len());
    let Some(first) = reports.first() else {
        return;
    };
    for (i, r) in first.rankers.iter().enumerate() {
        let mean: f64 = reports
            .iter()
            .filter_map(|d| d.rankers.get(i))
            .map(|x| x.ndcg_at_10)
            .sum::<f64>()
            / reports.len() as f64;
        println!("  {:<12} {:>8.1}", r.ranker, percent(mean));
    }
}
