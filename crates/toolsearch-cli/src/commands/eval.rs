use crate::model_args::{load_for_search, ModelArgs};
use crate::BadInput;
use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolsearch_core::{Embedder, SearchConfig};
use toolsearch_embed::{CachedEmbedder, VectorCache};
use toolsearch_eval::fusion;
use toolsearch_eval::{
    evaluate, evaluate_pooled, evaluate_requests, self_retrieval, Dataset, DatasetReport,
    PooledReport, RankerKind, RequestsReport, Spread,
};

/// Where the evaluation data lives relative to the project root.
const DEFAULT_DATASETS: &str = "../shared/eval/datasets";
/// The everyday requests kept in the repository, relative to the project root.
const EVERYDAY_DATASET: &str = "tests/data/everyday";

/// The studies `--study` runs instead of a table of rankers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Study {
    /// Hybrid fusion options, every free constant chosen by leave-one-dataset-out.
    Fusion,
    /// The two floors of "nothing fits", chosen by leave-one-dataset-out.
    Floors,
}

/// The stress checks `--stress` runs instead of the datasets' own queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Stress {
    /// Each tool's first description sentence as the query, that tool as the answer.
    #[value(name = "self")]
    SelfRetrieval,
    /// Every dataset's catalog pooled into one (a server per dataset), each set's queries on it.
    Pooled,
    /// Plain requests over everyday servers (tests/data/everyday), some that no tool fits.
    Everyday,
    /// Multi-tool queries split into their sentences and searched as `queries` at once, against
    /// the query searched whole.
    Several,
}

impl Stress {
    fn name(self) -> &'static str {
        match self {
            Stress::SelfRetrieval => "self",
            Stress::Pooled => "pooled",
            Stress::Everyday => "everyday",
            Stress::Several => "several",
        }
    }
}

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
    /// Run a stress check instead of the datasets' queries: `self` (each tool found by its first
    /// description sentence), `pooled` (every dataset's queries over all catalogs in one),
    /// `everyday` (plain requests over tests/data/everyday, some that no tool fits) or `several`
    /// (multi-tool queries split into their sentences, searched as `queries` at once).
    #[arg(long, value_name = "CHECK")]
    stress: Option<Stress>,
    /// Run a study of the hybrid ranker over the datasets instead: `fusion` (fusion options,
    /// each constant chosen on four datasets and scored on the fifth) or `floors` (the
    /// confidence floors of "nothing fits", chosen the same way). Needs the embedding model.
    #[arg(long, value_name = "STUDY", conflicts_with = "stress")]
    study: Option<Study>,
    /// Run the keyword engine's feature ablation instead: every ranking feature with and without
    /// it, and the field weights and k1 over a grid, each kept or chosen by leave-one-dataset-out
    /// (docs/EVAL.md, "Ablation"). `--set` changes the configuration it starts from.
    #[arg(long, conflicts_with_all = ["stress", "study"])]
    ablation: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// The default search settings with each `--set KEY=VALUE` applied.
fn search_config(settings: &[String]) -> Result<SearchConfig> {
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
    if args.study.is_some() {
        rankers = vec![RankerKind::Hybrid];
    }
    if args.ablation {
        rankers = vec![RankerKind::Toolsearch];
    }
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
    let dirs = if !args.dataset.is_empty() {
        args.dataset.clone()
    } else if args.stress == Some(Stress::Everyday) {
        let dir = Path::new(EVERYDAY_DATASET);
        if !dir.join("tools.json").is_file() {
            return Err(BadInput(format!(
                "no everyday requests at {EVERYDAY_DATASET} (run from the project root); \
                 pass --dataset DIR with a folder holding tools.json and queries.jsonl"
            ))
            .into());
        }
        vec![dir.to_path_buf()]
    } else {
        let root = Path::new(DEFAULT_DATASETS);
        if !root.is_dir() {
            return Err(BadInput(format!(
                "no evaluation data at {DEFAULT_DATASETS} (it sits beside the project, not in it); \
                 pass --dataset DIR with a folder holding tools.json and queries.jsonl"
            ))
            .into());
        }
        Dataset::discover(root)?
    };
    let mut datasets = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        let dataset = Dataset::load(dir).map_err(|e| BadInput(e.to_string()))?;
        if dataset.skipped_unnamed > 0 {
            eprintln!(
                "{}: left out {} tool(s) without a name",
                dataset.name, dataset.skipped_unnamed
            );
        }
        datasets.push(dataset);
    }
    if let (Some(study), Some(embedder)) = (args.study, embedder.as_ref()) {
        let result = run_study(study, &datasets, &config, embedder, args.json);
        if let Some(cached) = cached.as_deref() {
            if let Err(error) = cached.save() {
                eprintln!("warning: the evaluation's vector cache was not saved: {error}");
            }
        }
        return result;
    }
    if args.ablation {
        let report = toolsearch_eval::ablation::ablation_study(&datasets, &config, |line| {
            eprintln!("{line}")
        })?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.markdown());
        }
        return Ok(());
    }
    let run = Run {
        rankers: &rankers,
        with_instruction: args.with_instruction,
        config: &config,
        embedder: embedder.as_ref(),
        cached: cached.as_deref(),
        json: args.json,
    };
    match args.stress {
        None => run.queries(datasets, None),
        Some(Stress::SelfRetrieval) => {
            let generated = datasets
                .iter()
                .map(|dataset| {
                    let (set, skipped) = self_retrieval(dataset);
                    if skipped > 0 {
                        eprintln!(
                            "{}: left out {skipped} tool(s) without a description",
                            dataset.name
                        );
                    }
                    set
                })
                .collect();
            run.queries(generated, Some(Stress::SelfRetrieval))
        }
        Some(Stress::Pooled) => run.pooled(&datasets),
        Some(Stress::Everyday) => run.requests(&datasets),
        Some(Stress::Several) => run.several(&datasets),
    }
}

fn run_study(
    study: Study,
    datasets: &[Dataset],
    config: &SearchConfig,
    embedder: &Arc<dyn Embedder>,
    json: bool,
) -> Result<()> {
    let progress = |line: &str| eprintln!("{line}");
    match study {
        Study::Fusion => {
            let reports = fusion::fusion_study(datasets, config, embedder, progress)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({ "study": "fusion", "methods": reports })
                    )?
                );
                return Ok(());
            }
            for report in &reports {
                println!(
                    "{}: chosen on all datasets: {}",
                    report.method, report.chosen_on_all
                );
                println!(
                    "  {:<18} {:>8} {:>11}  chosen on the other datasets",
                    "held out", "nDCG@10", "Complete@5"
                );
                for fold in &report.folds {
                    println!(
                        "  {:<18} {:>8.1} {:>11.1}  {}",
                        fold.held_out,
                        percent(fold.ndcg_at_10),
                        percent(fold.complete_at_5),
                        fold.chosen
                    );
                }
                println!(
                    "  {:<18} {:>8.2} {:>11.2}",
                    "held-out mean",
                    percent(report.held_out_ndcg_at_10),
                    percent(report.held_out_complete_at_5)
                );
                println!();
            }
        }
        Study::Floors => {
            let report = fusion::floor_study(datasets, config, embedder, progress)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "study": "floors", "report": report }))?
                );
                return Ok(());
            }
            print!("{}", report.table());
        }
    }
    Ok(())
}

/// What every kind of run shares.
struct Run<'a> {
    rankers: &'a [RankerKind],
    with_instruction: bool,
    config: &'a SearchConfig,
    embedder: Option<&'a Arc<dyn Embedder>>,
    cached: Option<&'a CachedEmbedder>,
    json: bool,
}

impl Run<'_> {
    /// Saved after each dataset, so an interrupted run keeps what it embedded.
    fn save_vectors(&self) {
        if let Some(cached) = self.cached {
            if let Err(error) = cached.save() {
                eprintln!("warning: the evaluation's vector cache was not saved: {error}");
            }
        }
    }

    /// Each dataset's queries (its own, or the self-retrieval ones) over its own catalog.
    fn queries(&self, datasets: Vec<Dataset>, stress: Option<Stress>) -> Result<()> {
        let mut reports = Vec::new();
        for dataset in datasets {
            let unfit = dataset
                .queries
                .iter()
                .filter(|q| q.relevant.is_empty())
                .count();
            if unfit > 0 {
                eprintln!(
                    "{}: left out {unfit} request(s) no tool fits (`--stress everyday` reports them)",
                    dataset.name
                );
            }
            let report = evaluate(
                &dataset,
                self.rankers,
                self.with_instruction,
                self.config,
                self.embedder,
            )?;
            self.save_vectors();
            if !self.json {
                if stress.is_some() {
                    print!("self-retrieval: ");
                }
                print_table(&report);
            }
            reports.push(report);
        }
        if self.json {
            let mut out = json!({ "datasets": reports });
            if let Some(stress) = stress {
                out["stress"] = json!(stress.name());
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else if reports.len() > 1 {
            print_average(&reports);
        }
        Ok(())
    }

    /// Every dataset's queries over the pool of all the datasets' catalogs.
    fn pooled(&self, datasets: &[Dataset]) -> Result<()> {
        if datasets.len() < 2 {
            return Err(BadInput(
                "--stress pooled needs at least two datasets to pool; pass --dataset more than once"
                    .into(),
            )
            .into());
        }
        // One ranker at a time, the vectors saved after each: the pool is the largest catalog
        // this embeds, and a later ranker's failure must not lose that work.
        let mut report: Option<PooledReport> = None;
        for kind in self.rankers {
            let one = evaluate_pooled(
                datasets,
                std::slice::from_ref(kind),
                self.with_instruction,
                self.config,
                self.embedder,
            )?;
            self.save_vectors();
            match &mut report {
                None => report = Some(one),
                Some(all) => {
                    for (set, more) in all.datasets.iter_mut().zip(one.datasets) {
                        set.rankers.extend(more.rankers);
                    }
                }
            }
        }
        let Some(report) = report else {
            return Err(BadInput("choose at least one ranker".into()).into());
        };
        if self.json {
            let out =
                json!({ "stress": "pooled", "tools": report.tools, "datasets": report.datasets });
            println!("{}", serde_json::to_string_pretty(&out)?);
            return Ok(());
        }
        println!(
            "pooled: {} catalogs in one, {} tools",
            datasets.len(),
            report.tools
        );
        println!();
        for dataset in &report.datasets {
            print!("pooled: ");
            print_table(dataset);
        }
        print_average(&report.datasets);
        Ok(())
    }

    /// Multi-tool queries split into sentences and searched at once, against the query whole,
    /// through the contract with the engine's default mode (hybrid with the model).
    fn several(&self, datasets: &[Dataset]) -> Result<()> {
        let mut reports = Vec::new();
        for dataset in datasets {
            let engine = match self.embedder {
                Some(embedder) => fusion::hybrid_engine(&dataset.tools, self.config, embedder)?,
                None => toolsearch_core::SearchEngine::from_catalog(
                    toolsearch_core::Catalog::from_tools(dataset.tools.iter().cloned())?,
                    self.config.clone(),
                )?,
            };
            let report = toolsearch_eval::several::evaluate_several(dataset, &engine)?;
            self.save_vectors();
            reports.push(report);
        }
        if self.json {
            let out = json!({ "stress": "several", "datasets": reports });
            println!("{}", serde_json::to_string_pretty(&out)?);
            return Ok(());
        }
        println!(
            "multi-tool queries of more than one sentence: the sentences as `queries` ({} results each), or the query whole",
            toolsearch_eval::several::PER_QUERY
        );
        println!(
            "  {:<18} {:>7} {:>9}   {:>28}   {:>28}   {:>28}",
            "dataset",
            "queries",
            "sentences",
            "split: complete/recall/listed",
            "whole@5: complete/recall",
            "whole@same: complete/recall"
        );
        for r in &reports {
            println!(
                "  {:<18} {:>7} {:>9.2}   {:>14.1} / {:>5.1} / {:>4.1}   {:>21.1} / {:>4.1}   {:>21.1} / {:>4.1}",
                r.dataset,
                r.queries,
                r.mean_sentences,
                100.0 * r.split.complete,
                100.0 * r.split.recall,
                r.split.listed,
                100.0 * r.whole_5.complete,
                100.0 * r.whole_5.recall,
                100.0 * r.whole_same.complete,
                100.0 * r.whole_same.recall,
            );
        }
        Ok(())
    }

    /// Plain requests, fitting and unfit: top-1, top-3 and the first result's scores.
    fn requests(&self, datasets: &[Dataset]) -> Result<()> {
        let mut reports = Vec::new();
        for dataset in datasets {
            let report = evaluate_requests(
                dataset,
                self.rankers,
                self.with_instruction,
                self.config,
                self.embedder,
            )?;
            self.save_vectors();
            if !self.json {
                print_requests(&report);
            }
            reports.push(report);
        }
        if self.json {
            let out = json!({ "stress": "everyday", "datasets": reports });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Ok(())
    }
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
    println!("mean over {} datasets", reports.len());
    println!("  {:<12} {:>8} {:>11}", "ranker", "nDCG@10", "Complete@5");
    let Some(first) = reports.first() else {
        return;
    };
    for (i, r) in first.rankers.iter().enumerate() {
        let mean = |metric: fn(&toolsearch_eval::RankerReport) -> f64| {
            reports
                .iter()
                .filter_map(|d| d.rankers.get(i))
                .map(metric)
                .sum::<f64>()
                / reports.len() as f64
        };
        println!(
            "  {:<12} {:>8.1} {:>11.1}",
            r.ranker,
            percent(mean(|x| x.ndcg_at_10)),
            percent(mean(|x| x.complete_at_5))
        );
    }
}

fn print_requests(report: &RequestsReport) {
    println!(
        "everyday: {} ({} tools, {} fitting and {} unfit requests)",
        report.name, report.tools, report.fitting, report.unfit
    );
    println!(
        "  {:<12} {:>6} {:>6} {:>22} {:>22} {:>9} {:>8} {:>9} {:>16}",
        "ranker",
        "top-1",
        "top-3",
        "fitting top score",
        "unfit top score",
        "unfit",
        "floor",
        "unfit",
        "nothing fits"
    );
    println!(
        "  {:<12} {:>6} {:>6} {:>22} {:>22} {:>9} {:>8} {:>9} {:>16}",
        "",
        "%",
        "%",
        "min / median / max",
        "min / median / max",
        "no result",
        "",
        "≥ floor",
        "unfit / fitting"
    );
    for r in &report.rankers {
        println!(
            "  {:<12} {:>6.1} {:>6.1} {:>22} {:>22} {:>9} {:>8.3} {:>9} {:>16}",
            r.ranker,
            percent(r.top_1),
            percent(r.top_3),
            spread(&r.fitting_top_score),
            spread(&r.unfit_top_score),
            format!("{} of {}", r.unfit_nothing_returned, report.unfit),
            r.lowest_right_top_score,
            format!("{} of {}", r.unfit_at_or_above_floor, report.unfit),
            format!("{} / {}", r.unfit_nothing_fits, r.fitting_nothing_fits),
        );
    }
    println!(
        "  (floor: the lowest top score of a request answered right first; scores are each \
         ranker's own scale)"
    );
    println!();
}

fn spread(s: &Spread) -> String {
    format!("{:.3} / {:.3} / {:.3}", s.min, s.median, s.max)
}
