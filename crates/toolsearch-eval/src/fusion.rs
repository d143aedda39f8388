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
            .map(|hit| hit.tool.name().to_owned())
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

/// What "nothing fits" reads of one answer: the strongest evidence of each kind among its
/// results (0 when no result has that kind).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Strongest {
    pub similarity: f32,
    pub words: f32,
}

impl Strongest {
    fn of<'a>(evidence: impl Iterator<Item = &'a Evidence>) -> Self {
        evidence.fold(Strongest::default(), |best, e| Strongest {
            similarity: best.similarity.max(e.similarity.unwrap_or(0.0)),
            words: best.words.max(e.words),
        })
    }
}

/// One query as the floor study reads it: over its catalog (a fitting request), and over the
/// catalog without its relevant tools (a request no tool fits, for free).
#[derive(Debug, Clone, Copy)]
struct Answered {
    fitting: Strongest,
    unfit: Strongest,
}

/// How deep a floor study reads each answer (no top band): the strongest evidence is among the
/// first results of the fused order; past this depth the results are too weak to matter.
const FLOOR_DEPTH: usize = 300;

/// A floor of 1 turns that kind of evidence off: it never makes a result confident.
pub const FLOOR_OFF: f32 = 1.0;

const MEANING_FLOORS: &[f32] = &[
    0.0, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.275, 0.3, 0.325, 0.35, 0.375,
    0.4, 0.45, 0.5, 0.55, 0.6, FLOOR_OFF,
];
const WORDS_FLOORS: &[f32] = &[
    0.0, 0.01, 0.02, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8,
    0.9, FLOOR_OFF,
];

/// The most fitting requests a floor may turn away on any one training dataset.
pub const MAX_FITTING_SAID: f64 = 0.01;

/// Which evidence a rule reads, and so which floors it searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloorRule {
    /// Nothing fits when the best similarity is under `meaning_floor` (words never count).
    Meaning,
    /// Nothing fits when the best keyword evidence is under `words_floor` (meaning never counts).
    Words,
    /// Nothing fits only when both are under their floors: either kind can show a fit.
    BothWeak,
    /// Keyword mode (no model): nothing fits when the best keyword evidence is under
    /// `words_floor`.
    KeywordMode,
}

impl FloorRule {
    pub const ALL: [FloorRule; 4] = [
        FloorRule::Meaning,
        FloorRule::Words,
        FloorRule::BothWeak,
        FloorRule::KeywordMode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FloorRule::Meaning => "meaning",
            FloorRule::Words => "words",
            FloorRule::BothWeak => "both-weak",
            FloorRule::KeywordMode => "keyword-mode",
        }
    }

    /// The (meaning_floor, words_floor) pairs the rule searches.
    fn pairs(self) -> Vec<(f32, f32)> {
        match self {
            FloorRule::Meaning => MEANING_FLOORS.iter().map(|&m| (m, FLOOR_OFF)).collect(),
            FloorRule::Words | FloorRule::KeywordMode => {
                WORDS_FLOORS.iter().map(|&w| (FLOOR_OFF, w)).collect()
            }
            FloorRule::BothWeak => MEANING_FLOORS
                .iter()
                .flat_map(|&m| WORDS_FLOORS.iter().map(move |&w| (m, w)))
                .collect(),
        }
    }
}

/// The engine's verdict on evidence this strong, with these floors: no result is confident
/// (a kind whose floor is off never makes one confident).
pub fn says_nothing_fits(best: Strongest, meaning_floor: f32, words_floor: f32) -> bool {
    let sure = |value: f32, floor: f32| floor < FLOOR_OFF && value >= floor;
    !(sure(best.similarity, meaning_floor) || sure(best.words, words_floor))
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorFold {
    pub held_out: String,
    pub meaning_floor: f32,
    pub words_floor: f32,
    /// Share of the held-out queries, over the catalog without their relevant tools, answered
    /// "nothing fits" (right).
    pub unfit_said: f64,
    /// Share of the held-out queries over the whole catalog answered "nothing fits" (wrong).
    pub fitting_said: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorRuleReport {
    pub rule: FloorRule,
    pub folds: Vec<FloorFold>,
    pub held_out_unfit_said: f64,
    pub held_out_fitting_said: f64,
    /// The floors chosen on all datasets: what would ship.
    pub chosen_on_all: (f32, f32),
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    /// The most fitting requests a floor may turn away on each training dataset.
    pub max_fitting_said: f64,
    pub rules: Vec<FloorRuleReport>,
    /// Per dataset, the lowest, and the 1st, 5th and 50th percentiles, of the fitting requests'
    /// strongest similarity and keyword evidence (hybrid): what a conservative floor is read
    /// from.
    pub fitting_percentiles: Vec<FittingPercentiles>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FittingPercentiles {
    pub dataset: String,
    pub similarity: [f32; 4],
    pub words: [f32; 4],
}

fn percentiles(mut values: Vec<f32>) -> [f32; 4] {
    values.sort_by(f32::total_cmp);
    let at = |p: f64| {
        if values.is_empty() {
            return 0.0;
        }
        values[((values.len() - 1) as f64 * p).round() as usize]
    };
    [at(0.0), at(0.01), at(0.05), at(0.5)]
}

/// Each rate is (unfit said, fitting said) per dataset for one floor pair.
type Rates = Vec<(f64, f64)>;

/// The pair that says "nothing fits" for the most unfit requests on the datasets in `on`
/// (their mean), among pairs that turn away at most `MAX_FITTING_SAID` of the fitting requests
/// on each of them; ties go to fewer fitting requests turned away, then to the lower floors.
/// The pair that never says it (both floors 0) always qualifies.
fn choose_floors(pairs: &[(f32, f32)], rates: &[Rates], on: &[usize]) -> usize {
    let mean = |p: usize, pick: fn(&(f64, f64)) -> f64| {
        on.iter().map(|&d| pick(&rates[p][d])).sum::<f64>() / on.len().max(1) as f64
    };
    let allowed = |p: usize| {
        on.iter()
            .all(|&d| rates[p][d].1 <= MAX_FITTING_SAID + 1e-12)
    };
    let key = |p: usize| {
        (
            mean(p, |r| r.0),
            -mean(p, |r| r.1),
            -(pairs[p].0 + pairs[p].1) as f64,
        )
    };
    let mut best: Option<usize> = None;
    for p in (0..pairs.len()).filter(|&p| allowed(p)) {
        best = match best {
            Some(b) if key(b).partial_cmp(&key(p)) != Some(std::cmp::Ordering::Less) => Some(b),
            _ => Some(p),
        };
    }
    best.unwrap_or(0)
}

/// Leave-one-dataset-out over one rule's floors: `answered[d]` is dataset `d`'s queries.
fn floor_rule_report(
    rule: FloorRule,
    names: &[String],
    answered: &[Vec<Answered>],
) -> FloorRuleReport {
    let pairs = rule.pairs();
    let rates: Vec<Rates> = pairs
        .iter()
        .map(|&(m, w)| {
            answered
                .iter()
                .map(|queries| {
                    let n = queries.len().max(1) as f64;
                    let said = |pick: fn(&Answered) -> Strongest| {
                        queries
                            .iter()
                            .filter(|q| says_nothing_fits(pick(q), m, w))
                            .count() as f64
                            / n
                    };
                    (said(|q| q.unfit), said(|q| q.fitting))
                })
                .collect()
        })
        .collect();
    let all: Vec<usize> = (0..names.len()).collect();
    let folds: Vec<FloorFold> = all
        .iter()
        .map(|&held| {
            let others: Vec<usize> = all.iter().copied().filter(|&d| d != held).collect();
            let p = choose_floors(&pairs, &rates, &others);
            FloorFold {
                held_out: names[held].clone(),
                meaning_floor: pairs[p].0,
                words_floor: pairs[p].1,
                unfit_said: rates[p][held].0,
                fitting_said: rates[p][held].1,
            }
        })
        .collect();
    let n = folds.len().max(1) as f64;
    FloorRuleReport {
        rule,
        held_out_unfit_said: folds.iter().map(|f| f.unfit_said).sum::<f64>() / n,
        held_out_fitting_said: folds.iter().map(|f| f.fitting_said).sum::<f64>() / n,
        chosen_on_all: pairs[choose_floors(&pairs, &rates, &all)],
        folds,
    }
}

/// The floors of "nothing fits", chosen by leave-one-dataset-out for each rule: on four
/// datasets, the floors that say it for the most unfit requests while turning away at most
/// `MAX_FITTING_SAID` of the fitting ones on each; scored on the fifth.
pub fn floor_study(
    datasets: &[Dataset],
    config: &SearchConfig,
    embedder: &Arc<dyn Embedder>,
    mut progress: impl FnMut(&str),
) -> Result<FloorReport, EvalError> {
    let mut hybrid: Vec<Vec<Answered>> = Vec::new();
    let mut keyword: Vec<Vec<Answered>> = Vec::new();
    let mut fitting_percentiles = Vec::new();
    // Every tool the dense side ranks enters the answer, so that the strongest similarity read
    // here is the one any floor would meet in the engine (which lets tools in from the floor).
    let config = SearchConfig {
        min_similarity: 0.0,
        ..config.clone()
    };
    for dataset in datasets {
        let engine = hybrid_engine(&dataset.tools, &config, embedder)?;
        let (mut by_meaning, mut by_words) = (Vec::new(), Vec::new());
        for query in dataset.queries.iter().filter(|q| !q.relevant.is_empty()) {
            let relevant: HashSet<&str> = query.relevant.iter().map(String::as_str).collect();
            let answer = |mode: SearchMode| -> Result<Answered, EvalError> {
                let response = engine.search(
                    &SearchRequest::new(query.query.as_str())
                        .mode(mode)
                        .limit(FLOOR_DEPTH),
                )?;
                Ok(Answered {
                    fitting: Strongest::of(response.tools.iter().map(|hit| &hit.evidence)),
                    unfit: Strongest::of(
                        response
                            .tools
                            .iter()
                            .filter(|hit| !relevant.contains(hit.tool.name()))
                            .map(|hit| &hit.evidence),
                    ),
                })
            };
            by_meaning.push(answer(SearchMode::Hybrid)?);
            by_words.push(answer(SearchMode::Keyword)?);
        }
        fitting_percentiles.push(FittingPercentiles {
            dataset: dataset.name.clone(),
            similarity: percentiles(by_meaning.iter().map(|a| a.fitting.similarity).collect()),
            words: percentiles(by_meaning.iter().map(|a| a.fitting.words).collect()),
        });
        progress(&format!("{}: answered", dataset.name));
        hybrid.push(by_meaning);
        keyword.push(by_words);
    }
    let names: Vec<String> = datasets.iter().map(|d| d.name.clone()).collect();
    let rules = FloorRule::ALL
        .iter()
        .map(|&rule| {
            let answered = if rule == FloorRule::KeywordMode {
                &keyword
            } else {
                &hybrid
            };
            floor_rule_report(rule, &names, answered)
        })
        .collect();
    Ok(FloorReport {
        max_fitting_said: MAX_FITTING_SAID,
        rules,
        fitting_percentiles,
    })
}

fn spread(values: &[f32; 4]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.3}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

impl FloorReport {
    /// The report as the CLI prints it.
    pub fn table(&self) -> String {
        let floor = |f: f32| {
            if f >= FLOOR_OFF {
                "off".to_string()
            } else {
                format!("{f}")
            }
        };
        let mut out = format!(
            "floors chosen on four datasets (the most unfit requests said \"nothing fits\", at most \
             {:.0}% of the fitting ones on each), scored on the fifth\n",
            100.0 * self.max_fitting_said
        );
        for rule in &self.rules {
            out += &format!(
                "{}: chosen on all datasets: meaning_floor={} words_floor={}\n",
                rule.rule.as_str(),
                floor(rule.chosen_on_all.0),
                floor(rule.chosen_on_all.1)
            );
            out += &format!(
                "  {:<18} {:>14} {:>12} {:>18} {:>20}\n",
                "held out",
                "meaning_floor",
                "words_floor",
                "unfit: nothing %",
                "fitting: nothing %"
            );
            for fold in &rule.folds {
                out += &format!(
                    "  {:<18} {:>14} {:>12} {:>18.1} {:>20.1}\n",
                    fold.held_out,
                    floor(fold.meaning_floor),
                    floor(fold.words_floor),
                    100.0 * fold.unfit_said,
                    100.0 * fold.fitting_said
                );
            }
            out += &format!(
                "  {:<18} {:>14} {:>12} {:>18.2} {:>20.2}\n\n",
                "held-out mean",
                "",
                "",
                100.0 * rule.held_out_unfit_said,
                100.0 * rule.held_out_fitting_said
            );
        }
        out += "fitting requests' strongest evidence (hybrid): lowest, percentiles 1 / 5 / 50\n";
        out += &format!(
            "  {:<18} {:>30} {:>30}\n",
            "dataset", "similarity", "keyword"
        );
        for p in &self.fitting_percentiles {
            out += &format!(
                "  {:<18} {:>30} {:>30}\n",
                p.dataset,
                spread(&p.similarity),
                spread(&p.words)
            );
        }
        out
    }
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
