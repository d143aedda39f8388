//! Stress checks on visible data: each tool found by its own first sentence (self-retrieval),
//! every dataset's queries over all catalogs pooled into one, and plain requests over a small
//! catalog of everyday servers, some of which no tool fits.

use crate::dataset::{Dataset, EvalQuery};
use crate::rankers::RankerKind;
use crate::run::{score_ranker, scored_queries, DatasetReport, RANK_DEPTH};
use crate::EvalError;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use toolsearch_core::{Embedder, SearchConfig, Tool};

/// A first sentence shorter than this (in characters) runs on to the next boundary, so that
/// "e.g." or "v1." does not end it.
const MIN_SENTENCE_CHARS: usize = 12;
/// A self-retrieval query is cut to this many characters (at a word when there is one): a long
/// first sentence would otherwise be most of the description.
pub const MAX_SELF_QUERY_CHARS: usize = 300;

/// The first sentence of `description`: up to the first `.`, `!`, `?` followed by white space,
/// a line break, or a full-width `。！？`, once at least `MIN_SENTENCE_CHARS` characters are in;
/// cut to `MAX_SELF_QUERY_CHARS`. `None` when the description is blank.
pub fn first_sentence(description: &str) -> Option<String> {
    let text = description.trim();
    let mut chars = text.char_indices().peekable();
    let mut end = text.len();
    let mut count = 0;
    while let Some((i, c)) = chars.next() {
        count += 1;
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let boundary = match c {
            '\n' | '\r' => Some(i),
            '.' | '!' | '?' if next_is_space => Some(i + c.len_utf8()),
            '。' | '！' | '？' => Some(i + c.len_utf8()),
            _ => None,
        };
        if let Some(at) = boundary {
            if count >= MIN_SENTENCE_CHARS {
                end = at;
                break;
            }
        }
    }
    let sentence = cut_at_word(text[..end].trim(), MAX_SELF_QUERY_CHARS);
    (!sentence.is_empty()).then(|| sentence.to_string())
}

/// `text` cut to at most `max` characters, at the last white space before the cut when there is
/// one.
fn cut_at_word(text: &str, max: usize) -> &str {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let head = &text[..cut];
    match head.rfind(char::is_whitespace) {
        Some(space) if space > 0 => head[..space].trim_end(),
        _ => head,
    }
}

/// The self-retrieval set of `dataset`: its catalog, and for each tool with a description its
/// first sentence as the query and the tool as the one relevant answer. Returns the set and the
/// number of tools left out for having no description.
pub fn self_retrieval(dataset: &Dataset) -> (Dataset, usize) {
    let mut queries = Vec::with_capacity(dataset.tools.len());
    let mut skipped = 0;
    for (i, tool) in dataset.tools.iter().enumerate() {
        match first_sentence(tool.description()) {
            Some(query) => queries.push(EvalQuery {
                id: format!("self-{i}"),
                query,
                instruction: None,
                relevant: vec![tool.name().to_owned()],
            }),
            None => skipped += 1,
        }
    }
    let set = Dataset {
        name: dataset.name.clone(),
        tools: dataset.tools.clone(),
        queries,
        skipped_unnamed: dataset.skipped_unnamed,
    };
    (set, skipped)
}

/// Every dataset's catalog in one, each tool tagged with the dataset it came from.
pub struct Pool {
    pub tools: Vec<Tool>,
    /// The dataset (its position in the pooled list) of each tool.
    pub origin: Vec<usize>,
}

/// Pools the catalogs. A dataset whose tools name no server becomes one server named after the
/// dataset; a dataset's own server keeps its name unless another dataset uses it too (as a
/// server or as its name), when it becomes `<dataset>-<server>`. Equal tool names of different
/// datasets so never meet on one server.
pub fn pool(datasets: &[Dataset]) -> Pool {
    let mut owners: HashMap<&str, HashSet<usize>> = HashMap::new();
    for (d, dataset) in datasets.iter().enumerate() {
        for tool in &dataset.tools {
            let server = if tool.server().is_empty() {
                dataset.name.as_str()
            } else {
                tool.server()
            };
            owners.entry(server).or_default().insert(d);
        }
    }
    let mut tools = Vec::new();
    let mut origin = Vec::new();
    for (d, dataset) in datasets.iter().enumerate() {
        for tool in &dataset.tools {
            let mut tool = tool.clone();
            let server = if tool.server().is_empty() {
                dataset.name.clone()
            } else if owners.get(tool.server()).is_some_and(|o| o.len() > 1) {
                format!("{}-{}", dataset.name, tool.server())
            } else {
                tool.server().to_owned()
            };
            tool.set_server(server);
            tools.push(tool);
            origin.push(d);
        }
    }
    Pool { tools, origin }
}

#[derive(Debug, Clone, Serialize)]
pub struct PooledReport {
    /// Tools in the pooled catalog.
    pub tools: usize,
    /// Each dataset's queries, scored on the pool (`tools` in each is the pool's size).
    pub datasets: Vec<DatasetReport>,
}

/// Each dataset's queries over the pooled catalog of all of them. A result counts only when it
/// is a relevant tool of the query's own dataset.
pub fn evaluate_pooled(
    datasets: &[Dataset],
    rankers: &[RankerKind],
    with_instruction: bool,
    config: &SearchConfig,
    embedder: Option<&Arc<dyn Embedder>>,
) -> Result<PooledReport, EvalError> {
    let pool = pool(datasets);
    // A key no tool of another dataset can take: the dataset's position, a separator no name
    // holds, the name.
    let key = |d: usize, name: &str| format!("{d}\u{1f}{name}");
    let keys: Vec<String> = pool
        .tools
        .iter()
        .zip(&pool.origin)
        .map(|(tool, &d)| key(d, tool.name()))
        .collect();
    let queries: Vec<_> = datasets
        .iter()
        .enumerate()
        .map(|(d, dataset)| scored_queries(dataset, with_instruction, |name| key(d, name)))
        .collect();
    let mut reports: Vec<DatasetReport> = datasets
        .iter()
        .zip(&queries)
        .map(|(dataset, queries)| DatasetReport {
            name: dataset.name.clone(),
            tools: pool.tools.len(),
            queries: queries.len(),
            rankers: Vec::new(),
        })
        .collect();
    for kind in rankers {
        let ranker = kind.build(&pool.tools, config, embedder)?;
        for (report, queries) in reports.iter_mut().zip(&queries) {
            report
                .rankers
                .push(score_ranker(ranker.as_ref(), &keys, queries)?);
        }
    }
    Ok(PooledReport {
        tools: pool.tools.len(),
        datasets: reports,
    })
}

/// Minimum, median and maximum of a list of scores (0 for each when the list is empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n == 0 {
            return Self::default();
        }
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Self {
            min: sorted[0],
            median,
            max: sorted[n - 1],
        }
    }
}

/// What one ranker made of one request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestOutcome {
    pub id: String,
    pub query: String,
    /// Whether the request names a tool that fits it.
    pub fits: bool,
    /// The rank (from 1) of the first fitting tool among the first ten, if any.
    pub rank: Option<usize>,
    /// The first result's score on the ranker's own scale; 0 when nothing was returned.
    pub top_score: f64,
    /// The first three results' names.
    pub top: Vec<String>,
    /// The ranker said that no tool fits (the engine's `nothingFits`; an answer with no result
    /// at all is counted apart, as "no result").
    pub nothing_fits: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestsRankerReport {
    pub ranker: String,
    /// Share of the fitting requests whose first result fits.
    pub top_1: f64,
    /// Share of the fitting requests with a fitting tool among the first three.
    pub top_3: f64,
    /// Fitting requests answered with no result at all.
    pub fitting_nothing_returned: usize,
    pub fitting_top_score: Spread,
    pub unfit_top_score: Spread,
    /// Unfit requests answered with no result at all.
    pub unfit_nothing_returned: usize,
    /// Unfit requests answered "nothing fits" (results or not): the right answer.
    pub unfit_nothing_fits: usize,
    /// Fitting requests answered "nothing fits": each one a wrong answer.
    pub fitting_nothing_fits: usize,
    /// The lowest top score among the fitting requests whose first result fits: the highest
    /// confidence floor that keeps every right first answer (0 when there is none).
    pub lowest_right_top_score: f64,
    /// Unfit requests whose top score is at least `lowest_right_top_score`: those that floor
    /// could not turn away.
    pub unfit_at_or_above_floor: usize,
    pub requests: Vec<RequestOutcome>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestsReport {
    pub name: String,
    pub tools: usize,
    /// Requests with at least one fitting tool.
    pub fitting: usize,
    /// Requests no tool fits (an empty `relevant` list).
    pub unfit: usize,
    pub rankers: Vec<RequestsRankerReport>,
}

/// Plain requests, some fitting a tool and some fitting none: top-1 and top-3 over the fitting
/// ones, and the first result's score of both kinds (what a "nothing fits" floor would read).
pub fn evaluate_requests(
    dataset: &Dataset,
    rankers: &[RankerKind],
    with_instruction: bool,
    config: &SearchConfig,
    embedder: Option<&Arc<dyn Embedder>>,
) -> Result<RequestsReport, EvalError> {
    let fitting = dataset
        .queries
        .iter()
        .filter(|q| !q.relevant.is_empty())
        .count();
    let mut reports = Vec::new();
    for kind in rankers {
        let ranker = kind.build(&dataset.tools, config, embedder)?;
        let mut requests = Vec::with_capacity(dataset.queries.len());
        for query in &dataset.queries {
            let (ranked, nothing_fits) =
                ranker.rank_with_verdict(&query.text(with_instruction), RANK_DEPTH)?;
            let names: Vec<&str> = ranked
                .iter()
                .filter_map(|r| dataset.tools.get(r.tool).map(|t| t.name()))
                .collect();
            let rank = names
                .iter()
                .position(|name| query.relevant.iter().any(|r| r == name))
                .map(|i| i + 1);
            requests.push(RequestOutcome {
                id: query.id.clone(),
                query: query.query.clone(),
                fits: !query.relevant.is_empty(),
                rank,
                top_score: ranked.first().map_or(0.0, |r| r.score),
                top: names.iter().take(3).map(|n| n.to_string()).collect(),
                nothing_fits,
            });
        }
        let scores = |fits: bool| -> Vec<f64> {
            requests
                .iter()
                .filter(|r| r.fits == fits)
                .map(|r| r.top_score)
                .collect()
        };
        let (fit_scores, unfit_scores) = (scores(true), scores(false));
        let share = |depth: usize| {
            let hits = requests
                .iter()
                .filter(|r| r.rank.is_some_and(|rank| rank <= depth))
                .count();
            hits as f64 / fitting.max(1) as f64
        };
        let nothing = |fits: bool| {
            requests
                .iter()
                .filter(|r| r.fits == fits && r.top.is_empty())
                .count()
        };
        let said_nothing_fits = |fits: bool| {
            requests
                .iter()
                .filter(|r| r.fits == fits && r.nothing_fits)
                .count()
        };
        let right: Vec<f64> = requests
            .iter()
            .filter(|r| r.rank == Some(1))
            .map(|r| r.top_score)
            .collect();
        let floor = right.iter().copied().min_by(f64::total_cmp);
        reports.push(RequestsRankerReport {
            ranker: ranker.name().to_string(),
            top_1: share(1),
            top_3: share(3),
            fitting_nothing_returned: nothing(true),
            fitting_top_score: Spread::of(&fit_scores),
            unfit_top_score: Spread::of(&unfit_scores),
            unfit_nothing_returned: nothing(false),
            unfit_nothing_fits: said_nothing_fits(false),
            fitting_nothing_fits: said_nothing_fits(true),
            lowest_right_top_score: floor.unwrap_or(0.0),
            unfit_at_or_above_floor: floor.map_or(0, |floor| {
                unfit_scores.iter().filter(|&&s| s >= floor).count()
            }),
            requests,
        });
    }
    Ok(RequestsReport {
        name: dataset.name.clone(),
        tools: dataset.tools.len(),
        fitting,
        unfit: dataset.queries.len() - fitting,
        rankers: reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn first_sentences() {
        assert_eq!(
            first_sentence("Read a file. Then more.").as_deref(),
            Some("Read a file.")
        );
        // A short first piece runs on: "e.g." does not end a sentence.
        assert_eq!(
            first_sentence("Times, e.g. 10:00, in a zone. More.").as_deref(),
            Some("Times, e.g. 10:00, in a zone.")
        );
        assert_eq!(
            first_sentence("Get current time in a timezone\nUse IANA names").as_deref(),
            Some("Get current time in a timezone")
        );
        assert_eq!(
            first_sentence("version 1.2 of the parser is used here").as_deref(),
            Some("version 1.2 of the parser is used here")
        );
        assert_eq!(
            first_sentence("使用必应搜索指定的关键词。返回结果").as_deref(),
            Some("使用必应搜索指定的关键词。")
        );
        assert_eq!(first_sentence("   "), None);
        let long = "word ".repeat(200);
        let cut = first_sentence(&long).unwrap();
        assert!(cut.chars().count() <= MAX_SELF_QUERY_CHARS, "{cut}");
        assert!(cut.ends_with("word"), "{cut}");
    }

    fn tool(server: &str, name: &str) -> Tool {
        let mut tool = Tool::new(name, format!("Does {name} things."));
        tool.set_server(server);
        tool
    }

    fn dataset(name: &str, tools: Vec<Tool>) -> Dataset {
        Dataset {
            name: name.to_string(),
            tools,
            queries: Vec::new(),
            skipped_unnamed: 0,
        }
    }

    #[test]
    fn pooled_servers_keep_equal_names_apart() {
        let a = dataset("alpha", vec![tool("", "search"), tool("", "read")]);
        let b = dataset("beta", vec![tool("", "search")]);
        let c = dataset("gamma", vec![tool("web", "search"), tool("alpha", "x")]);
        let d = dataset("delta", vec![tool("web", "get")]);
        let pool = pool(&[a, b, c, d]);
        let ids: Vec<(&str, &str, usize)> = pool
            .tools
            .iter()
            .zip(&pool.origin)
            .map(|(t, &o)| (t.server(), t.name(), o))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("alpha", "search", 0),
                ("alpha", "read", 0),
                ("beta", "search", 1),
                ("gamma-web", "search", 2),
                ("gamma-alpha", "x", 2),
                ("delta-web", "get", 3),
            ]
        );
    }

    /// A result counts only for its own dataset: beta's query finds alpha's `search` first, which
    /// shares the name of beta's relevant tool but is not it.
    #[test]
    fn pooled_results_count_only_for_their_own_dataset() {
        let query = |relevant: &str| EvalQuery {
            id: "q".into(),
            query: "search the web for pages".into(),
            instruction: None,
            relevant: vec![relevant.into()],
        };
        let mut alpha = dataset(
            "alpha",
            vec![Tool::new("search", "Search the web for pages")],
        );
        alpha.queries.push(query("search"));
        let mut beta = dataset(
            "beta",
            vec![Tool::new("search", "Search the library for books")],
        );
        beta.queries.push(query("search"));
        let report = evaluate_pooled(
            &[alpha, beta],
            &[RankerKind::Overlap],
            false,
            &SearchConfig::default(),
            None,
        )
        .unwrap();
        assert_eq!(report.tools, 2);
        let mrr: Vec<f64> = report.datasets.iter().map(|d| d.rankers[0].mrr).collect();
        assert_eq!(mrr, vec![1.0, 0.5]);
    }

    #[test]
    fn self_retrieval_asks_for_each_described_tool() {
        let mut blank = tool("", "blank");
        blank.set_description(String::new());
        let set = dataset("s", vec![tool("", "read"), blank]);
        let (generated, skipped) = self_retrieval(&set);
        assert_eq!(skipped, 1);
        assert_eq!(generated.queries.len(), 1);
        assert_eq!(generated.queries[0].query, "Does read things.");
        assert_eq!(generated.queries[0].relevant, vec!["read".to_string()]);
    }

    #[test]
    fn spread_of_scores() {
        assert_eq!(Spread::of(&[]), Spread::default());
        let s = Spread::of(&[0.5, 0.1, 0.9, 0.3]);
        assert_eq!((s.min, s.median, s.max), (0.1, 0.4, 0.9));
        assert_eq!(Spread::of(&[0.2, 0.7, 0.4]).median, 0.4);
    }

    /// The repository's everyday set: it loads, holds at least 40 fitting and 10 unfit requests,
    /// and every tool a request names is in its catalog.
    #[test]
    fn everyday_set_names_only_tools_of_its_catalog() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/everyday");
        let set = Dataset::load(&dir).expect("tests/data/everyday loads");
        let names: HashSet<&str> = set.tools.iter().map(|t| t.name()).collect();
        assert_eq!(names.len(), set.tools.len(), "tool names are unique");
        let servers: HashSet<&str> = set.tools.iter().map(|t| t.server()).collect();
        for server in ["everything", "memory", "filesystem", "time", "fetch"] {
            assert!(servers.contains(server), "no tool of {server}");
        }
        let mut ids = HashSet::new();
        for query in &set.queries {
            assert!(ids.insert(query.id.as_str()), "id {} repeats", query.id);
            for name in &query.relevant {
                assert!(
                    names.contains(name.as_str()),
                    "{}: no tool {name}",
                    query.id
                );
            }
        }
        let fitting = set
            .queries
            .iter()
            .filter(|q| !q.relevant.is_empty())
            .count();
        assert!(fitting >= 40, "{fitting} fitting requests");
        assert!(set.queries.len() - fitting >= 10, "unfit requests");
    }
}
