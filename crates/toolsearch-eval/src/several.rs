//! Several needs in one search (`queries`), measured on the datasets' multi-tool queries: a query
//! whose relevant tools are more than one and whose text has more than one sentence is split into
//! its sentences (the asker's own words, cut where a sentence ends, the same rule for every query),
//! and the sentences are searched as `queries` through the search contract. It is compared with the
//! same query searched whole, at 5 results and at as many results as the split answer lists.

use std::collections::HashSet;

use serde::Serialize;
use toolsearch_core::contract::{self, SearchArgs, SearchOptions, MAX_QUERIES};
use toolsearch_core::SearchEngine;

use crate::{Dataset, EvalError};

/// Results per query in the split search (the `limit` a model would pass).
pub const PER_QUERY: usize = 5;

/// The sentences of `text`, cut after `.`, `!` or `?` followed by white space; at most
/// [`MAX_QUERIES`], the rest joined into the last.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        if matches!(c, '.' | '!' | '?') && chars.peek().is_some_and(|n| n.is_whitespace()) {
            let sentence = current.trim();
            if !sentence.is_empty() {
                out.push(sentence.to_string());
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    if out.len() > MAX_QUERIES {
        let tail = out.split_off(MAX_QUERIES - 1).join(" ");
        out.push(tail);
    }
    out
}

/// How one way of searching did over the queries measured.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Outcome {
    /// Share of queries whose every relevant tool is in the answer.
    pub complete: f64,
    /// Mean share of a query's relevant tools in the answer.
    pub recall: f64,
    /// Mean number of tools the answer lists.
    pub listed: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SeveralReport {
    pub dataset: String,
    /// Multi-tool queries of more than one sentence: the ones measured.
    pub queries: usize,
    /// Their mean number of sentences (queries searched at once).
    pub mean_sentences: f64,
    /// The sentences as `queries`, [`PER_QUERY`] results each.
    pub split: Outcome,
    /// The query whole, 5 results.
    pub whole_5: Outcome,
    /// The query whole, as many results as the split answer listed (at most 50).
    pub whole_same: Outcome,
}

/// The tool names (without servers: the datasets judge by name) an answer lists.
fn listed_names(engine: &SearchEngine, results: &contract::SearchResults) -> HashSet<String> {
    results
        .page
        .tools
        .iter()
        .map(|t| engine.naming().parse(&t.name).name)
        .collect()
}

#[derive(Default)]
struct Sum {
    complete: f64,
    recall: f64,
    listed: f64,
}

impl Sum {
    fn add(&mut self, relevant: &[String], listed: &HashSet<String>) {
        let found = relevant.iter().filter(|r| listed.contains(*r)).count();
        if found == relevant.len() {
            self.complete += 1.0;
        }
        self.recall += found as f64 / relevant.len().max(1) as f64;
        self.listed += listed.len() as f64;
    }

    fn outcome(&self, n: usize) -> Outcome {
        let n = n.max(1) as f64;
        Outcome {
            complete: self.complete / n,
            recall: self.recall / n,
            listed: self.listed / n,
        }
    }
}

/// Runs the comparison over `dataset` with `engine` (its default mode), as a caller of the
/// contract with default options.
pub fn evaluate_several(
    dataset: &Dataset,
    engine: &SearchEngine,
) -> Result<SeveralReport, EvalError> {
    let options = SearchOptions::default();
    let (mut split, mut whole_5, mut whole_same) = (Sum::default(), Sum::default(), Sum::default());
    let (mut measured, mut parts) = (0usize, 0usize);
    for query in &dataset.queries {
        let relevant: Vec<String> = {
            let mut seen = HashSet::new();
            query
                .relevant
                .iter()
                .filter(|r| seen.insert(r.as_str()))
                .cloned()
                .collect()
        };
        let pieces = sentences(&query.query);
        if relevant.len() < 2 || pieces.len() < 2 {
            continue;
        }
        measured += 1;
        parts += pieces.len();
        let several = SearchArgs {
            queries: pieces,
            limit: Some(PER_QUERY),
            ..SearchArgs::default()
        };
        let answer = listed_names(engine, &contract::search(engine, &several, &options)?);
        split.add(&relevant, &answer);
        let whole = |limit: usize| -> Result<HashSet<String>, EvalError> {
            let args = SearchArgs {
                limit: Some(limit.clamp(1, contract::MAX_LIMIT)),
                ..SearchArgs::new(query.query.as_str())
            };
            Ok(listed_names(
                engine,
                &contract::search(engine, &args, &options)?,
            ))
        };
        whole_5.add(&relevant, &whole(5)?);
        whole_same.add(&relevant, &whole(answer.len())?);
    }
    Ok(SeveralReport {
        dataset: dataset.name.clone(),
        queries: measured,
        mean_sentences: parts as f64 / measured.max(1) as f64,
        split: split.outcome(measured),
        whole_5: whole_5.outcome(measured),
        whole_same: whole_same.outcome(measured),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_are_cut_where_a_sentence_ends() {
        assert_eq!(
            sentences("Find the file. Then mail it to Bob! Done?"),
            vec!["Find the file.", "Then mail it to Bob!", "Done?"]
        );
        // A dot inside a word or a number is no end.
        assert_eq!(
            sentences("Open v1.2 of report.pdf now"),
            vec!["Open v1.2 of report.pdf now"]
        );
        assert_eq!(sentences("  "), Vec::<String>::new());
        let seven = "A. B. C. D. E. F. G.";
        let cut = sentences(seven);
        assert_eq!(cut.len(), MAX_QUERIES);
        assert_eq!(cut[MAX_QUERIES - 1], "E. F. G.");
    }
}
