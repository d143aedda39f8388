//! Leave-one-dataset-out ablation of the keyword engine's ranking features.
//!
//! Every feature is scored with and without it on every dataset. For each dataset held out, the
//! other four decide: the feature is on for the held-out set iff it raises their mean nDCG@10.
//! Its held-out gain is what that decision earns on the set it never saw (0 when the four turn
//! it off). A feature is kept iff its mean held-out gain over the folds is at least
//! [`KEEP_MIN_GAIN`]. A continuous setting is chosen the same way: each fold picks the value
//! with the best mean on its four sets and is scored on the fifth; the value shipped is the
//! median of the five picks, never the best mean over all five.

use crate::dataset::Dataset;
use crate::rankers::RankerKind;
use crate::run::evaluate;
use crate::EvalError;
use serde::Serialize;
use std::fmt::Write;
use toolsearch_core::SearchConfig;

/// Smallest mean held-out gain, in nDCG@10 (0..1), that keeps a feature: the tables print one
/// decimal of a percent, and a smaller gain is no evidence.
pub const KEEP_MIN_GAIN: f64 = 0.001;

/// A feature switched on and off by explicit settings (so the study does not depend on which
/// way the base configuration has it).
pub struct Switch {
    pub name: &'static str,
    pub on: &'static [(&'static str, &'static str)],
    pub off: &'static [(&'static str, &'static str)],
}

/// A continuous setting and the values tried.
pub struct Grid {
    pub name: &'static str,
    pub key: &'static str,
    pub values: &'static [&'static str],
}

/// Every switchable ranking feature of the keyword engine, with the setting it was measured at.
pub const SWITCHES: &[Switch] = &[
    Switch {
        name: "synonyms",
        on: &[("synonym_weight", "0.4")],
        off: &[("synonym_weight", "0")],
    },
    Switch {
        name: "proximity",
        on: &[("proximity", "0.4")],
        off: &[("proximity", "0")],
    },
    Switch {
        name: "name coverage",
        on: &[("name_coverage", "0.1")],
        off: &[("name_coverage", "0")],
    },
    Switch {
        name: "server aggregation",
        on: &[("server_aggregation", "0.5")],
        off: &[("server_aggregation", "0")],
    },
    Switch {
        name: "fuzzy expansion",
        on: &[("fuzzy", "true")],
        off: &[("fuzzy", "false")],
    },
    Switch {
        name: "filler words dropped",
        on: &[("drop_request_filler", "true")],
        off: &[("drop_request_filler", "false")],
    },
    Switch {
        name: "field weights",
        on: &[
            ("name.weight", "3"),
            ("description.weight", "1"),
            ("parameters.weight", "0.75"),
            ("parameter_descriptions.weight", "0.7"),
            ("server.weight", "0.5"),
            ("category.weight", "0.5"),
            ("tags.weight", "0.8"),
        ],
        off: &[
            ("name.weight", "1"),
            ("description.weight", "1"),
            ("parameters.weight", "1"),
            ("parameter_descriptions.weight", "1"),
            ("server.weight", "1"),
            ("category.weight", "1"),
            ("tags.weight", "1"),
        ],
    },
    Switch {
        name: "parameter text",
        on: &[
            ("parameters.weight", "0.75"),
            ("parameter_descriptions.weight", "0.7"),
        ],
        off: &[
            ("parameters.weight", "0"),
            ("parameter_descriptions.weight", "0"),
        ],
    },
    Switch {
        name: "server, category and tag text",
        on: &[
            ("server.weight", "0.5"),
            ("category.weight", "0.5"),
            ("tags.weight", "0.8"),
        ],
        off: &[
            ("server.weight", "0"),
            ("category.weight", "0"),
            ("tags.weight", "0"),
        ],
    },
    Switch {
        name: "exact-form boost",
        on: &[("exact_form_boost", "0.3")],
        off: &[("exact_form_boost", "0")],
    },
    Switch {
        name: "query-term repeats",
        on: &[("query_term_frequency", "0.5")],
        off: &[("query_term_frequency", "0")],
    },
    Switch {
        name: "numbers dropped from queries",
        on: &[("numeric_query_words", "false")],
        off: &[("numeric_query_words", "true")],
    },
];

/// The field weights and BM25's saturation, one at a time from the base configuration.
pub const GRIDS: &[Grid] = &[
    Grid {
        name: "name weight",
        key: "name.weight",
        values: &["1", "2", "3", "4", "5"],
    },
    Grid {
        name: "parameter name weight",
        key: "parameters.weight",
        values: &["0", "0.25", "0.5", "0.75", "1"],
    },
    Grid {
        name: "parameter description weight",
        key: "parameter_descriptions.weight",
        values: &["0", "0.35", "0.7", "1", "1.4"],
    },
    Grid {
        name: "server weight",
        key: "server.weight",
        values: &["0", "0.25", "0.5", "1"],
    },
    Grid {
        name: "tags weight",
        key: "tags.weight",
        values: &["0", "0.4", "0.8", "1.2"],
    },
    Grid {
        name: "k1",
        key: "k1",
        values: &["0.8", "1.2", "1.6", "2"],
    },
];

#[derive(Debug, Clone, Serialize)]
pub struct SwitchReport {
    pub feature: String,
    /// The settings that turn it off.
    pub off: String,
    /// nDCG@10 per dataset, with and without it.
    pub with: Vec<f64>,
    pub without: Vec<f64>,
    /// Per held-out dataset: whether the other four turn it on.
    pub chosen: Vec<bool>,
    /// Per held-out dataset: what that choice earns there over the feature off.
    pub held_out_gain: Vec<f64>,
    pub mean_held_out_gain: f64,
    /// On how many datasets removing it lowers nDCG@10.
    pub removal_lowers: usize,
    pub kept: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridReport {
    pub setting: String,
    pub key: String,
    pub values: Vec<String>,
    /// nDCG@10, one row per value, one column per dataset.
    pub scores: Vec<Vec<f64>>,
    /// Per held-out dataset: the value the other four pick, and its score there.
    pub chosen: Vec<String>,
    pub held_out: Vec<f64>,
    pub mean_held_out: f64,
    /// The median of the five picks: the value to ship.
    pub median_choice: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AblationReport {
    pub datasets: Vec<String>,
    /// nDCG@10 of the base configuration and of `bm25-plain`, per dataset.
    pub base: Vec<f64>,
    pub bm25_plain: Vec<f64>,
    pub switches: Vec<SwitchReport>,
    pub grids: Vec<GridReport>,
}

/// `base` with `settings` applied.
fn with(base: &SearchConfig, settings: &[(&str, &str)]) -> Result<SearchConfig, EvalError> {
    let mut config = base.clone();
    for (key, value) in settings {
        config.set(key, value)?;
    }
    Ok(config)
}

/// nDCG@10 of `kind` on each dataset.
fn ndcg(
    datasets: &[Dataset],
    kind: RankerKind,
    config: &SearchConfig,
) -> Result<Vec<f64>, EvalError> {
    datasets
        .iter()
        .map(|dataset| {
            let report = evaluate(dataset, &[kind], false, config, None)?;
            Ok(report.rankers.first().map_or(0.0, |r| r.ndcg_at_10))
        })
        .collect()
}

fn mean_without(values: &[f64], left_out: usize) -> f64 {
    let others: Vec<f64> = values
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != left_out)
        .map(|(_, v)| *v)
        .collect();
    others.iter().sum::<f64>() / others.len().max(1) as f64
}

/// The leave-one-dataset-out decision for a feature, from its scores with and without it.
pub fn decide_switch(with: &[f64], without: &[f64]) -> (Vec<bool>, Vec<f64>, f64, bool) {
    let delta: Vec<f64> = with.iter().zip(without).map(|(a, b)| a - b).collect();
    let chosen: Vec<bool> = (0..delta.len())
        .map(|d| mean_without(&delta, d) > 0.0)
        .collect();
    let gain: Vec<f64> = delta
        .iter()
        .zip(&chosen)
        .map(|(&d, &on)| if on { d } else { 0.0 })
        .collect();
    let mean = gain.iter().sum::<f64>() / gain.len().max(1) as f64;
    (chosen, gain, mean, mean >= KEEP_MIN_GAIN)
}

/// The leave-one-dataset-out picks of a grid (`scores[value][dataset]`): per held-out dataset the
/// value index with the best mean on the others (the first on ties), and the median pick.
pub fn decide_grid(scores: &[Vec<f64>]) -> (Vec<usize>, usize) {
    let datasets = scores.first().map_or(0, Vec::len);
    let picks: Vec<usize> = (0..datasets)
        .map(|d| {
            let mut best = 0;
            for (v, row) in scores.iter().enumerate() {
                if mean_without(row, d) > mean_without(&scores[best], d) {
                    best = v;
                }
            }
            best
        })
        .collect();
    let mut sorted = picks.clone();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    (picks, median)
}

/// Runs the whole study from `base`; `progress` hears of each step.
pub fn ablation_study(
    datasets: &[Dataset],
    base: &SearchConfig,
    mut progress: impl FnMut(&str),
) -> Result<AblationReport, EvalError> {
    let base_scores = ndcg(datasets, RankerKind::Toolsearch, base)?;
    let bm25_plain = ndcg(datasets, RankerKind::Bm25Plain, base)?;
    let mut switches = Vec::new();
    for switch in SWITCHES {
        progress(&format!("ablation: {}", switch.name));
        let on = ndcg(datasets, RankerKind::Toolsearch, &with(base, switch.on)?)?;
        let off = ndcg(datasets, RankerKind::Toolsearch, &with(base, switch.off)?)?;
        let (chosen, held_out_gain, mean_held_out_gain, kept) = decide_switch(&on, &off);
        let removal_lowers = on.iter().zip(&off).filter(|(a, b)| a > b).count();
        switches.push(SwitchReport {
            feature: switch.name.to_string(),
            off: settings_text(switch.off),
            with: on,
            without: off,
            chosen,
            held_out_gain,
            mean_held_out_gain,
            removal_lowers,
            kept,
        });
    }
    let mut grids = Vec::new();
    for grid in GRIDS {
        progress(&format!("ablation: {}", grid.name));
        let scores = grid
            .values
            .iter()
            .map(|value| {
                ndcg(
                    datasets,
                    RankerKind::Toolsearch,
                    &with(base, &[(grid.key, value)])?,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (picks, median) = decide_grid(&scores);
        let held_out: Vec<f64> = picks
            .iter()
            .enumerate()
            .map(|(d, &v)| scores[v][d])
            .collect();
        grids.push(GridReport {
            setting: grid.name.to_string(),
            key: grid.key.to_string(),
            values: grid.values.iter().map(|v| v.to_string()).collect(),
            chosen: picks.iter().map(|&v| grid.values[v].to_string()).collect(),
            mean_held_out: held_out.iter().sum::<f64>() / held_out.len().max(1) as f64,
            held_out,
            scores,
            median_choice: grid.values[median].to_string(),
        });
    }
    Ok(AblationReport {
        datasets: datasets.iter().map(|d| d.name.clone()).collect(),
        base: base_scores,
        bm25_plain,
        switches,
        grids,
    })
}

fn settings_text(settings: &[(&str, &str)]) -> String {
    settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(v: f64) -> f64 {
    100.0 * v + 0.0
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

impl AblationReport {
    /// The study as Markdown tables (nDCG@10 in %), as docs/EVAL.md shows it.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let head = self.datasets.join(" | ");
        let rule = "---:|".repeat(self.datasets.len());
        let row = |values: &[f64]| {
            values
                .iter()
                .map(|v| format!("{:.1}", pct(*v)))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let _ = writeln!(out, "| configuration | {head} | mean |");
        let _ = writeln!(out, "|---|{rule}---:|");
        let _ = writeln!(
            out,
            "| base | {} | {:.2} |",
            row(&self.base),
            pct(mean(&self.base))
        );
        let _ = writeln!(
            out,
            "| bm25-plain | {} | {:.2} |",
            row(&self.bm25_plain),
            pct(mean(&self.bm25_plain))
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| feature | off | Δ nDCG@10 with − without: {head} | removal lowers | chosen by the other four | mean held-out gain | kept |"
        );
        let _ = writeln!(
            out,
            "|---|---|{}---:|---|---:|---|",
            "---:|".repeat(self.datasets.len())
        );
        for s in &self.switches {
            let delta: Vec<f64> = s.with.iter().zip(&s.without).map(|(a, b)| a - b).collect();
            let deltas = delta
                .iter()
                .map(|d| format!("{:+.1}", pct(*d)))
                .collect::<Vec<_>>()
                .join(" | ");
            let chosen: String = s
                .chosen
                .iter()
                .map(|&c| if c { '+' } else { '-' })
                .collect();
            let _ = writeln!(
                out,
                "| {} | `{}` | {} | {} of {} | {} | {:+.2} | {} |",
                s.feature,
                s.off,
                deltas,
                s.removal_lowers,
                s.with.len(),
                chosen,
                pct(s.mean_held_out_gain),
                if s.kept { "yes" } else { "**no**" }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| setting | {head} | mean | picked with each set held out | shipped (median pick) |"
        );
        let _ = writeln!(out, "|---|{rule}---:|---|---|");
        for g in &self.grids {
            for (value, scores) in g.values.iter().zip(&g.scores) {
                let _ = writeln!(
                    out,
                    "| `{}={}` | {} | {:.2} | | |",
                    g.key,
                    value,
                    row(scores),
                    pct(mean(scores))
                );
            }
            let _ = writeln!(
                out,
                "| **{}, held out** | {} | **{:.2}** | {} | `{}={}` |",
                g.setting,
                row(&g.held_out),
                pct(g.mean_held_out),
                g.chosen.join(", "),
                g.key,
                g.median_choice
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_kept_only_for_what_it_earns_on_sets_it_never_saw() {
        // Helps four sets a little: every fold turns it on, and it earns on each.
        let (chosen, _, gain, kept) = decide_switch(
            &[0.52, 0.52, 0.52, 0.52, 0.50],
            &[0.50, 0.50, 0.50, 0.50, 0.50],
        );
        assert_eq!(chosen, [true; 5]);
        assert!(kept && (gain - 0.016).abs() < 1e-9);
        // One set's large win carries the others' folds, but loses on each of them.
        let (chosen, gains, _, kept) = decide_switch(
            &[0.70, 0.49, 0.49, 0.49, 0.49],
            &[0.50, 0.50, 0.50, 0.50, 0.50],
        );
        assert_eq!(chosen, [false, true, true, true, true]);
        assert!(gains[1..].iter().all(|g| *g < 0.0));
        assert!(!kept);
        // No effect outside one set: the other four never see a reason to turn it on there.
        let (chosen, _, _, kept) = decide_switch(
            &[0.55, 0.50, 0.50, 0.50, 0.50],
            &[0.50, 0.50, 0.50, 0.50, 0.50],
        );
        assert!(!chosen[0]);
        assert!(!kept);
    }

    #[test]
    fn a_grid_value_is_picked_on_the_other_sets_and_shipped_as_the_median_pick() {
        // Value 1 is best everywhere but on set 0, where value 2 shines.
        let scores = vec![
            vec![0.40, 0.40, 0.40, 0.40, 0.40],
            vec![0.41, 0.45, 0.45, 0.45, 0.45],
            vec![0.48, 0.42, 0.42, 0.42, 0.42],
        ];
        let (picks, median) = decide_grid(&scores);
        // Set 0 alone prefers value 2, but it is never scored by its own preference.
        assert_eq!(picks, [1, 1, 1, 1, 1]);
        assert_eq!(median, 1);
    }
}
