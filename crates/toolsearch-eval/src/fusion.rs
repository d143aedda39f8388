//! The fusion study behind docs/EVAL.md: hybrid fusion options compared with every free constant
//! chosen by leave-one-dataset-out (chosen on the other datasets, scored on the one left out),
//! and the confidence floors of "nothing fits" chosen the same way.
//!
//! One engine per dataset is built and embedded once; each setting is applied with
//! `SearchEngine::set_config`, so a grid costs searches only.

use crate::dataset::Dataset;
use crate::metrics::{score, Metrics};
use crate::run::RANK_DEPTH;
use crate::EvalError;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use toolsearch_core::search::Evidence;
use toolsearch_core::{
    Catalog, Embedder, SearchConfig, SearchEngine, SearchMode, SearchRequest, Tool,
};

/// One fusion option and the grid of its free constants.
pub struct Method {
    pub name: &'static str,
    /// Fixed settings of the option.
    pub settings: Vec<(&'static str, String)>,
    /// Each point of the grid: its settings.
    pub grid: Vec<Vec<(&'static str, String)>>,
}

fn grid(axes: &[(&'static str, &[f32])]) -> Vec<Vec<(&'static str, String)>> {
    let mut points: Vec<Vec<(&'static str, String)>> = vec![Vec::new()];
    for (key, values) in axes {
        points = points
            .into_iter()
            .flat_map(|point| {
                values.iter().map(move |v| {
                    let mut p = point.clone();
                    p.push((*key, format!("{v}")));
                    p
                })
            })
            .collect();
    }
    points
}

const WEIGHTS: &[f32] = &[0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8];
const SHARPNESS: &[f32] = &[0.5, 1.0, 2.0];

/// The options compared: today's fixed weight, and three that adapt per query.
pub fn methods() -> Vec<Method> {
    let set = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    };
    vec![
        Method {
            name: "fixed",
            settings: set(&[("fusion", "zscore"), ("fusion_weighting", "fixed")]),
            grid: grid(&[("dense_weight", WEIGHTS)]),
        },
        Method {
            name: "standout",
            settings: set(&[("fusion", "zscore"), ("fusion_weighting", "standout")]),
            grid: grid(&[("dense_weight", WEIGHTS), ("fusion_sharpness", SHARPNESS)]),
        },
        Method {
            name: "coverage-combmnz",
            settings: set(&[("fusion", "combmnz"), ("fusion_weighting", "coverage")]),
            grid: grid(&[("dense_weight", WEIGHTS), ("fusion_sharpness", &[1.0, 2.0])]),
        },
        Method {
            name: "rrf-standout",
            settings: set(&[("fusion", "rrf"), ("fusion_weighting", "standout")]),
            grid: grid(&[
                ("rrf_k", &[5.0, 20.0, 60.0]),
                ("dense_weight", &[0.4, 0.5, 0.6, 0.7]),
                ("fusion_sharpness", &[1.0]),
            ]),
        },
    ]
}

fn label(point: &[(&'static str, String)]) -> String {
    point
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `base` with `settings` then `point` applied.
pub fn configured(
    base: &SearchConfig,
    settings: &[(&'static str, String)],
    point: &[(&'static str, String)],
) -> Result<SearchConfig, EvalError> {
    let mut config = base.clone();
    for (key, value) in settings.iter().chain(point) {
        config.set(key, value)?;
    }
    Ok(config)
}

/// A hybrid engine over `tools`, every tool embedded.
pub fn hybrid_engine(
    tools: &[Tool],
    config: &SearchConfig,
    embedder: &Arc<dyn Embedder>,
) -> Result<SearchEngine, EvalError> {
    let catalog = Catalog::from_tools(tools.iter().cloned())?;
    let mut engine = SearchEngine::from_catalog(catalog, config.clone())?;
    engine.set_embedder(Some(embedder.clone()));
    engine.embed_pending()?;
    Ok(engine)
}

/// nDCG@10 and Complete@5 of `engine` (hybrid mode) over `dataset`'s queries that name a tool.
pub fn hybrid_metrics(
    engine: &SearchEngine,
    dataset: &Dataset,
    mode: SearchMode,
) -> Result<Metrics, EvalError> {
    let mut per_query = Vec::new();
    for query in dataset.queries.iter().filter(|q| !q.relevant.is_empty()) {
        let response = engine.search(
            &SearchRequest::new(query.query.as_str())
                .mode(mode)
                .limit(RANK_DEPTH),
        )?;
        let names: Vec<String> = response
            .tools
            .iter()
            .map(|hit| hit.tool.name.clone())
            .collect();
        per_query.push(score(&names, &query.relevant));
    }
    Ok(Metrics::mean(&per_query))
}

#[derive(Debug, Clone, Serialize)]
pub struct PointScores {
    pub label: String,
    /// Per dataset, in the study's order.
    pub ndcg_at_10: Vec<f64>,
    pub complete_at_5: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fold {
    pub held_out: String,
    /// The grid point chosen on the other datasets (best mean nDCG@10 there).
    pub chosen: String,
    pub ndcg_at_10: f64,
    pub complete_at_5: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MethodReport {
    pub method: String,
    pub folds: Vec<Fold>,
    pub held_out_ndcg_at_10: f64,
    pub held_out_complete_at_5: f64,
    /// The point chosen on all datasets: what would ship.
    pub chosen_on_all: String,
    pub points: Vec<PointScores>,
}

/// The index of the point with the best mean of `values` over the datasets in `on` (the first
/// of equal ones).
fn best_point(points: &[PointScores], on: &[usize]) -> usize {
    let mean = |p: &PointScores| on.iter().map(|&d| p.ndcg_at_10[d]).sum::<f64>() / on.len() as f64;
    let mut best = 0;
    for (i, p) in points.iter().enumerate() {
        if mean(p) > mean(&points[best]) + 1e-12 {
            best = i;
        }
    }
    best
}

/// Leave-one-dataset-out over the points of one method.
pub fn leave_one_out(method: &str, names: &[String], points: Vec<PointScores>) -> MethodReport {
    let all: Vec<usize> = (0..names.len()).collect();
    let folds: Vec<Fold> = (0..names.len())
        .map(|held| {
            let others: Vec<usize> = all.iter().copied().filter(|&d| d != held).collect();
            let chosen = &points[best_point(&points, &others)];
            Fold {
                held_out: names[held].clone(),
                chosen: chosen.label.clone(),
                ndcg_at_10: chosen.ndcg_at_10[held],
                complete_at_5: chosen.complete_at_5[held],
            }
        })
        .collect();
    let n = folds.len().max(1) as f64;
    MethodReport {
        method: method.to_string(),
        held_out_ndcg_at_10: folds.iter().map(|f| f.ndcg_at_10).sum::<f64>() / n,
        held_out_complete_at_5: folds.iter().map(|f| f.complete_at_5).sum::<f64>() / n,
        chosen_on_all: points[best_point(&points, &all)].label.clone(),
        folds,
        points,
    }
}

/// Every method's grid over every dataset, and its leave-one-dataset-out report. `progress` is
/// told each point as it is done.
pub fn fusion_study(
    datasets: &[Dataset],
    base: &SearchConfig,
    embedder: &Arc<dyn Embedder>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<MethodReport>, EvalError> {
    let mut engines = Vec::with_capacity(datasets.len());
    for dataset in datasets {
        engines.push(hybrid_engine(&dataset.tools, base, embedder)?);
        progress(&format!("{}: embedded", dataset.name));
    }
    let names: Vec<String> = datasets.iter().map(|d| d.name.clone()).collect();
    let mut reports = Vec::new();
    for method in methods() {
        let mut points = Vec::new();
        for point in &method.grid {
            let config = configured(base, &method.settings, point)?;
            let mut scores = PointScores {
                label: label(point),
                ndcg_at_10: Vec::new(),
                complete_at_5: Vec::new(),
            };
            for (engine, dataset) in engines.iter_mut().zip(datasets) {
                engine.set_config(config.clone());
                let m = hybrid_metrics(engine, dataset, SearchMode::Hybrid)?;
                scores.ndcg_at_10.push(m.ndcg_at_10);
                scores.complete_at_5.push(m.complete_at_5);
            }
            progress(&format!(
                "{} {}: mean nDCG@10 {:.2}",
                method.name,
                scores.label,
                100.0 * scores.ndcg_at_10.iter().sum::<f64>() / datasets.len() as f64
            ));
            points.push(scores);
        }
        reports.push(leave_one_out(method.name, &names, points));
    }
    Ok(reports)
}

/// One query's results as "nothing fits" reads them: the evidence of each result.
struct Answered {
    /// Evidence of every result but the relevant tools (the query over a catalog without its
    /// answers: a request no tool fits, for free).
    without_relevant: Vec<Evidence>,
    /// Evidence of every result.
    all: Vec<Evidence>,
}

/// How deep a floor study reads each answer; the engine reads every candidate, and the ones
/// past this are too weak to matter.
const FLOOR_DEPTH: usize = 50;

const MEANING_FLOORS: &[f32] = &[
    0.3, 0.325, 0.35, 0.375, 0.4, 0.425, 0.45, 0.475, 0.5, 0.525, 0.55, 0.575, 0.6, 0.65, 0.7,
];
const WORDS_FLOORS: &[f32] = &[
    0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0,
];

fn confident(evidence: &[Evidence], meaning_floor: f32, words_floor: f32) -> bool {
    evidence
        .iter()
        .any(|e| e.similarity.is_some_and(|s| s >= meaning_floor) || e.words >= words_floor)
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorFold {
    pub held_out: String,
    pub meaning_floor: f32,
    pub words_floor: f32,
    /// Share of the queries, over the catalog without their relevant tools, answered "nothing
    /// fits" (right).
    pub unfit_said: f64,
    /// Share of the queries over the whole catalog answered "nothing fits" (wrong).
    pub fitting_said: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    pub folds: Vec<FloorFold>,
    pub held_out_unfit_said: f64,
    pub held_out_fitting_said: f64,
    pub chosen_on_all: (f32, f32),
}

/// The two floors of "nothing fits", chosen by leave-one-dataset-out: for each pair, each
/// dataset's balanced accuracy (the mean of the share of unfit queries answered "nothing fits"
/// and the share of fitting ones not so answered); the pair with the best mean over the other
/// datasets is scored on the one left out.
pub fn floor_study(
    datasets: &[Dataset],
    config: &SearchConfig,
    embedder: &Arc<dyn Embedder>,
    mut progress: impl FnMut(&str),
) -> Result<FloorReport, EvalError> {
    let mut answered: Vec<Vec<Answered>> = Vec::new();
    for dataset in datasets {
        let engine = hybrid_engine(&dataset.tools, config, embedder)?;
        let mut per_query = Vec::new();
        for query in dataset.queries.iter().filter(|q| !q.relevant.is_empty()) {
            let response = engine.search(
                &SearchRequest::new(query.query.as_str())
                    .mode(SearchMode::Hybrid)
                    .limit(FLOOR_DEPTH),
            )?;
            let relevant: HashSet<&str> = query.relevant.iter().map(String::as_str).collect();
            per_query.push(Answered {
                without_relevant: response
                    .tools
                    .iter()
                    .filter(|hit| !relevant.contains(hit.tool.name.as_str()))
                    .map(|hit| hit.evidence)
                    .collect(),
                all: response.tools.iter().map(|hit| hit.evidence).collect(),
            });
        }
        progress(&format!("{}: answered", dataset.name));
        answered.push(per_query);
    }
    // rates[d][pair] = (unfit said, fitting said)
    let pairs: Vec<(f32, f32)> = MEANING_FLOORS
        .iter()
        .flat_map(|&m| WORDS_FLOORS.iter().map(move |&w| (m, w)))
        .collect();
    let rates: Vec<Vec<(f64, f64)>> = answered
        .iter()
        .map(|queries| {
            let n = queries.len().max(1) as f64;
            pairs
                .iter()
                .map(|&(m, w)| {
                    let unfit = queries
                        .iter()
                        .filter(|q| !confident(&q.without_relevant, m, w))
                        .count() as f64;
                    let fitting =
                        queries.iter().filter(|q| !confident(&q.all, m, w)).count() as f64;
                    (unfit / n, fitting / n)
                })
                .collect()
        })
        .collect();
    let balanced = |d: usize, p: usize| (rates[d][p].0 + 1.0 - rates[d][p].1) / 2.0;
    let choose = |on: &[usize]| {
        let mean = |p: usize| on.iter().map(|&d| balanced(d, p)).sum::<f64>() / on.len() as f64;
        let mut best = 0;
        for p in 0..pairs.len() {
            if mean(p) > mean(best) + 1e-12 {
                best = p;
            }
        }
        best
    };
    let all: Vec<usize> = (0..datasets.len()).collect();
    let folds: Vec<FloorFold> = all
        .iter()
        .map(|&held| {
            let others: Vec<usize> = all.iter().copied().filter(|&d| d != held).collect();
            let p = choose(&others);
            FloorFold {
                held_out: datasets[held].name.clone(),
                meaning_floor: pairs[p].0,
                words_floor: pairs[p].1,
                unfit_said: rates[held][p].0,
                fitting_said: rates[held][p].1,
            }
        })
        .collect();
    let n = folds.len().max(1) as f64;
    Ok(FloorReport {
        held_out_unfit_said: folds.iter().map(|f| f.unfit_said).sum::<f64>() / n,
        held_out_fitting_said: folds.iter().map(|f| f.fitting_said).sum::<f64>() / n,
        chosen_on_all: pairs[choose(&all)],
        folds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(label: &str, ndcg: [f64; 3]) -> PointScores {
        PointScores {
            label: label.into(),
            ndcg_at_10: ndcg.to_vec(),
            complete_at_5: ndcg.to_vec(),
        }
    }

    /// Each fold chooses on the other datasets only: the point best on a dataset alone is not
    /// chosen for it when the others disagree.
    #[test]
    fn leave_one_out_chooses_on_the_other_datasets() {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let report = leave_one_out(
            "m",
            &names,
            vec![point("x", [0.9, 0.1, 0.1]), point("y", [0.2, 0.5, 0.5])],
        );
        let chosen: Vec<&str> = report.folds.iter().map(|f| f.chosen.as_str()).collect();
        assert_eq!(chosen, ["y", "x", "x"]);
        let held: Vec<f64> = report.folds.iter().map(|f| f.ndcg_at_10).collect();
        assert_eq!(held, [0.2, 0.1, 0.1]);
        assert_eq!(report.chosen_on_all, "y");
    }

    #[test]
    fn grids_cross_their_axes() {
        let g = grid(&[("a", &[1.0, 2.0]), ("b", &[0.5])]);
        assert_eq!(g.len(), 2);
        assert_eq!(label(&g[1]), "a=2 b=0.5");
    }
}
