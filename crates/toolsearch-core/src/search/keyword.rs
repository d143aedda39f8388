//! Keyword mode: evaluates a parsed query against the index with BM25F.

use super::config::SearchConfig;
use super::explain::{Form, QueryTerm};
use super::field::Field;
use super::fuzzy;
use super::hits::PooledHits;
use super::index::{Hits, Source, ToolIndex};
use super::query::{FieldScope, Query};
use crate::analyzer::{is_request_filler, is_stopword, nth_word_start, Token};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Queries with at most this many content words get fuzzy expansion word by word; longer ones
/// only when nothing matches at all (in a long question one odd word is noise, not a typo).
const FUZZY_PER_WORD_MAX_WORDS: usize = 3;
const FUZZY_EXPANSIONS: usize = 3;
const PREFIX_EXPANSIONS: usize = 32;
/// A query is read up to this many words. Longer input is a pasted document or data (a base64
/// blob splits into thousands of words), not a request; reading all of it made one search cost
/// as much as a thousand ordinary ones.
const MAX_QUERY_WORDS: usize = 256;
/// Fields whose words fuzzy matching and prefixes draw from.
const VOCABULARY_FIELDS: [Field; 4] = [
    Field::Name,
    Field::Description,
    Field::ParamNames,
    Field::Tags,
];

/// What a query's words found.
pub struct Evaluation<'a> {
    /// The score of every matching slot.
    pub hits: PooledHits<'a>,
    /// The highest score a tool could reach for this query (to normalise).
    pub max: f32,
    /// The terms used (to explain the results).
    pub terms: Vec<QueryTerm>,
    /// The share of the query's content words the catalog knows ([`query_coverage`]).
    pub coverage: f32,
}

/// Scores the catalog's tools against `query`, read up to its first [`MAX_QUERY_WORDS`] words.
pub fn evaluate<'a>(index: &'a ToolIndex, config: &SearchConfig, query: &str) -> Evaluation<'a> {
    evaluate_as(index, config, query, true)
}

/// [`evaluate`], reading a query of words only from its words when `from_words` (as it does)
/// or term by term (as any other query is read).
fn evaluate_as<'a>(
    index: &'a ToolIndex,
    config: &SearchConfig,
    query: &str,
    from_words: bool,
) -> Evaluation<'a> {
    let query = first_words(query, MAX_QUERY_WORDS);
    let (parsed, words_only) = Query::parse_words(query);
    let all_words = index.analyzer().tokens(query);
    let coverage = coverage(index, &all_words);
    let keep_stopwords = all_words.iter().all(|t| is_stopword(&t.raw));
    let content_words = all_words.iter().filter(|t| !is_stopword(&t.raw)).count();
    let mut evaluator = Evaluator {
        index,
        config,
        scratch: index.hits(),
        terms: Vec::new(),
        keep_stopwords,
        fuzzy_per_word: config.fuzzy && content_words <= FUZZY_PER_WORD_MAX_WORDS,
        fuzzy_now: false,
        seen: HashSet::default(),
        repeats: HashMap::default(),
        idf: HashMap::default(),
    };
    // The query's scoring words, read once for repeats and proximity.
    let query_words = evaluator.scoring(all_words);
    if config.query_term_frequency > 0.0 {
        for token in &query_words {
            *evaluator.repeats.entry(token.stem.clone()).or_insert(0.0) += 1.0;
        }
        for weight in evaluator.repeats.values_mut() {
            *weight = weight.powf(config.query_term_frequency);
        }
    }
    // A query of words only is its words, already analysed: evaluating its terms would analyse
    // each again, a tenth of a long request's time.
    let evaluate_all = |evaluator: &mut Evaluator, hits: &mut Hits| {
        if words_only && from_words {
            evaluator.eval_words(&query_words, hits)
        } else {
            evaluator.eval_into(&parsed, hits)
        }
    };
    let mut hits = index.hits();
    let mut max = evaluate_all(&mut evaluator, &mut hits);
    if hits.touched().is_empty() && config.fuzzy && !evaluator.fuzzy_per_word {
        evaluator.fuzzy_now = true;
        evaluator.seen.clear();
        evaluator.terms.clear();
        max = evaluate_all(&mut evaluator, &mut hits);
    }
    // `max` stays an upper bound of every score through the bonuses below, so that normalised
    // scores remain below 1 and keep their order (an exact-name match alone scores 1).
    if config.proximity > 0.0 && parsed.is_plain() {
        max += evaluator.reward_proximity(&query_words, &mut hits);
    }
    if config.name_coverage > 0.0 {
        evaluator.reward_name_coverage(&mut hits);
        max *= 1.0 + config.name_coverage;
    }
    if config.server_aggregation > 0.0 {
        aggregate_servers(index, config.server_aggregation, &mut hits);
        max *= 1.0 + config.server_aggregation;
    }
    Evaluation {
        hits,
        max,
        terms: evaluator.terms,
        coverage,
    }
}

/// The share of a query's content words (not stopwords or request filler) that some tool of
/// the catalog holds, as written or as a stem; 1 for a query without content words. Read over
/// the words a search reads ([`MAX_QUERY_WORDS`]).
pub fn query_coverage(index: &ToolIndex, query: &str) -> f32 {
    coverage(
        index,
        &index.analyzer().tokens(first_words(query, MAX_QUERY_WORDS)),
    )
}

fn coverage(index: &ToolIndex, tokens: &[Token]) -> f32 {
    let mut content = 0;
    let mut known = 0;
    for token in tokens {
        if is_stopword(&token.raw) || is_request_filler(&token.raw) {
            continue;
        }
        content += 1;
        if index.term_id(&token.stem).is_some() || index.term_id(&token.raw).is_some() {
            known += 1;
        }
    }
    if content == 0 {
        1.0
    } else {
        known as f32 / content as f32
    }
}

/// `text` up to the end of its `max`-th word.
fn first_words(text: &str, max: usize) -> &str {
    match nth_word_start(text, max) {
        // Cut where the first word left out begins.
        Some(start) => &text[..start],
        None => text,
    }
}

/// Tools of a server that matches strongly gain a share of that server's best score: a request
/// that needs one tool of a server often needs its siblings too.
fn aggregate_servers(index: &ToolIndex, share: f32, hits: &mut Hits) {
    // Dense per-server maxima by server number: this runs once per matching tool.
    let mut best = vec![0.0f32; index.server_count()];
    for &slot in hits.touched() {
        if let Some(server) = index.server_number(slot) {
            let cell = &mut best[server as usize];
            *cell = cell.max(hits.scores[slot as usize]);
        }
    }
    let (touched, scores) = hits.touched_and_scores();
    for &slot in touched {
        if let Some(server) = index.server_number(slot) {
            scores[slot as usize] += share * best[server as usize];
        }
    }
}

/// The `k`-th largest of `values` by `f32::total_cmp` (`f32::MIN` when there are fewer):
/// selecting over plain floats is far cheaper than over slots compared through the score array.
pub fn kth_largest(values: impl Iterator<Item = f32>, k: usize) -> f32 {
    if k == 0 {
        return f32::MIN;
    }
    // The best `k` so far, their smallest at hand: a long request touches most of the catalog,
    // and nearly every value is below the smallest of them, one comparison each, where
    // collecting every value to select among them cost about 7% of such a search.
    if k > SMALL_K {
        // A heap, so that values in ascending order cost log k each, not k.
        let mut best: BinaryHeap<Reverse<Total>> = BinaryHeap::with_capacity(k);
        for value in values {
            if best.len() < k {
                best.push(Reverse(Total(value)));
            } else if best
                .peek()
                .is_some_and(|smallest| value.total_cmp(&smallest.0 .0).is_gt())
            {
                if let Some(mut smallest) = best.peek_mut() {
                    *smallest = Reverse(Total(value));
                }
            }
        }
        return match best.peek() {
            Some(smallest) if best.len() == k => smallest.0 .0,
            _ => f32::MIN,
        };
    }
    let mut best: Vec<f32> = Vec::with_capacity(k);
    for value in values {
        if best.len() < k {
            let at = best.partition_point(|b| b.total_cmp(&value).is_lt());
            best.insert(at, value);
        } else if value.total_cmp(&best[0]).is_gt() {
            let at = best.partition_point(|b| b.total_cmp(&value).is_lt());
            best.copy_within(1..at, 0);
            best[at - 1] = value;
        }
    }
    if best.len() < k {
        f32::MIN
    } else {
        best[0]
    }
}

/// Up to this `k`, [`kth_largest`] keeps the best `k` in a sorted list rather than a heap.
const SMALL_K: usize = 32;

/// An `f32` ordered by `f32::total_cmp`, for the heap of [`kth_largest`].
struct Total(f32);

impl PartialEq for Total {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Total {}

impl PartialOrd for Total {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Total {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

struct Evaluator<'a> {
    index: &'a ToolIndex,
    config: &'a SearchConfig,
    scratch: PooledHits<'a>,
    terms: Vec<QueryTerm>,
    keep_stopwords: bool,
    fuzzy_per_word: bool,
    fuzzy_now: bool,
    seen: HashSet<(String, Option<FieldScope>)>,
    /// How often each stem occurs in the query: a word a long request repeats matters more.
    repeats: HashMap<String, f32>,
    /// Inverse document frequency of each stem the query matched.
    idf: HashMap<String, f32>,
}

impl Evaluator<'_> {
    /// Consecutive query words that stand close together in a name or description ("word
    /// cloud", "stock price") say more than the same words apart.
    /// Returns the most any tool can gain from it.
    fn reward_proximity(&self, words: &[Token], hits: &mut Hits) -> f32 {
        const WINDOW: u32 = 3;
        let mut done = HashSet::default();
        let mut most = 0.0;
        for pair in words.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if a.stem == b.stem || !done.insert((a.stem.clone(), b.stem.clone())) {
                continue;
            }
            let (Some(&ia), Some(&ib)) = (self.idf.get(&a.stem), self.idf.get(&b.stem)) else {
                continue;
            };
            let bonus = self.config.proximity * 0.5 * (ia + ib);
            most += bonus;
            const FIELDS: [Field; 3] = [Field::Name, Field::Description, Field::ParamDescriptions];
            for slot in self.index.pair_slots(&FIELDS, &a.stem, &b.stem, WINDOW) {
                if hits.contains(slot) {
                    hits.scores[slot as usize] += bonus;
                }
            }
        }
        most
    }

    /// A tool whose name the query spells out almost word for word is very likely the one meant:
    /// the best candidates gain in proportion to how much of their name the query covers.
    fn reward_name_coverage(&self, hits: &mut Hits) {
        const CANDIDATES: usize = 100;
        // The candidates are those scoring at least the 100th best score (ties included).
        let cutoff = kth_largest(
            hits.touched()
                .iter()
                .map(|&slot| hits.scores[slot as usize]),
            CANDIDATES,
        );
        let top: Vec<u32> = hits
            .touched()
            .iter()
            .copied()
            .filter(|&slot| hits.scores[slot as usize] >= cutoff)
            .collect();
        let best = top
            .iter()
            .map(|&s| hits.scores[s as usize])
            .fold(0.0, f32::max);
        let mut used: Vec<u32> = self
            .seen
            .iter()
            .filter_map(|(stem, _)| self.index.term_id(stem))
            .collect();
        used.sort_unstable();
        for slot in top {
            let words = self.index.name_words(slot);
            if words.is_empty() {
                continue;
            }
            let covered = words
                .iter()
                .filter(|id| used.binary_search(id).is_ok())
                .count();
            let coverage = covered as f32 / words.len() as f32;
            hits.scores[slot as usize] += self.config.name_coverage * coverage * best;
        }
    }

    fn words(&self, text: &str) -> Vec<Token> {
        self.scoring(self.index.analyzer().tokens(text))
    }

    /// The tokens that score: stopwords, request filler and bare numbers left out as configured.
    fn scoring(&self, tokens: Vec<Token>) -> Vec<Token> {
        let skip_numbers = !self.config.numeric_query_words;
        tokens
            .into_iter()
            .filter(|t| self.keep_stopwords || !is_stopword(&t.raw))
            .filter(|t| {
                self.keep_stopwords
                    || !self.config.drop_request_filler
                    || !is_request_filler(&t.raw)
            })
            .filter(|t| !(skip_numbers && t.raw.chars().all(|c| c.is_ascii_digit())))
            .collect()
    }

    /// What [`Evaluator::eval_into`] gives for an OR of these words' terms, from the words.
    fn eval_words(&mut self, words: &[Token], out: &mut Hits) -> f32 {
        let mut max = 0.0;
        for token in words {
            if self.seen.insert((token.stem.clone(), None)) {
                max += self.score_word(token, None, out);
            }
        }
        max
    }

    fn eval_into(&mut self, query: &Query, out: &mut Hits) -> f32 {
        match query {
            Query::Or(items) => {
                let mut max = 0.0;
                for item in items {
                    max += self.eval_into(item, out);
                }
                max
            }
            Query::And(items) => {
                let mut parts = Vec::with_capacity(items.len());
                let mut max = 0.0;
                for item in items {
                    let mut part = self.index.hits();
                    max += self.eval_into(item, &mut part);
                    parts.push(part);
                }
                if let Some((first, rest)) = parts.split_first() {
                    for &slot in first.touched() {
                        if rest.iter().all(|p| p.contains(slot)) {
                            let sum: f32 = parts.iter().map(|p| p.scores[slot as usize]).sum();
                            out.add(slot, sum);
                        }
                    }
                }
                max
            }
            Query::Term { field, text } => {
                let mut max = 0.0;
                for token in self.words(text) {
                    if self.seen.insert((token.stem.clone(), *field)) {
                        max += self.score_word(&token, *field, out);
                    }
                }
                max
            }
            Query::Phrase { field, text } => {
                let tokens = self.words(text);
                if tokens.len() <= 1 {
                    return self.eval_into(
                        &Query::Term {
                            field: *field,
                            text: text.clone(),
                        },
                        out,
                    );
                }
                let mut allowed = HashSet::default();
                for &f in Field::in_scope(*field) {
                    allowed.extend(self.index.phrase_slots(f, &tokens));
                }
                let mut part = self.index.hits();
                let mut max = 0.0;
                for token in &tokens {
                    max += self.score_word(token, *field, &mut part);
                }
                part.retain(|slot| allowed.contains(&slot));
                out.merge_from(&part);
                max
            }
            Query::Prefix { field, prefix } => {
                let mut tokens = self.index.analyzer().tokens(prefix);
                let Some(last) = tokens.pop() else {
                    return 0.0;
                };
                let mut max = 0.0;
                for token in &tokens {
                    max += self.score_word(token, *field, out);
                }
                let fields = Field::in_scope(*field);
                let expansions = self
                    .index
                    .terms_with_prefix(fields, &last.raw, PREFIX_EXPANSIONS);
                let mut best: f32 = 0.0;
                for expansion in &expansions {
                    let (idf, _) = self.score_raw(fields, expansion, 1.0, out);
                    best = best.max(idf);
                }
                if !expansions.is_empty() {
                    self.terms.push(QueryTerm {
                        label: format!("{}*", last.raw),
                        fields,
                        forms: expansions.into_iter().map(Form::Raw).collect(),
                    });
                }
                max + best
            }
        }
    }

    /// One analysed query word: its stem in every field, plus its exact form with a boost.
    fn score_word(&mut self, token: &Token, scope: Option<FieldScope>, out: &mut Hits) -> f32 {
        let fields = Field::in_scope(scope);
        let mut sources = Vec::with_capacity(fields.len() * 2);
        for &field in fields {
            let weight = self.config.field(field).weight;
            sources.push(Source {
                field,
                raw: false,
                text: &token.stem,
                weight,
            });
            sources.push(Source {
                field,
                raw: true,
                text: &token.raw,
                weight: weight * self.config.exact_form_boost,
            });
        }
        let repeats = self.repeats.get(&token.stem).copied().unwrap_or(1.0);
        let (idf, df) =
            self.index
                .score_term(self.config, &sources, &mut self.scratch, out, repeats);
        if self.config.synonym_weight > 0.0 {
            for synonym in self.index.synonyms().of(&token.stem) {
                if self.repeats.contains_key(synonym) || self.idf.contains_key(synonym) {
                    continue;
                }
                let sources: Vec<Source> = fields
                    .iter()
                    .map(|&field| Source {
                        field,
                        raw: false,
                        text: synonym,
                        weight: self.config.field(field).weight,
                    })
                    .collect();
                self.index.score_term(
                    self.config,
                    &sources,
                    &mut self.scratch,
                    out,
                    repeats * self.config.synonym_weight,
                );
            }
        }
        if df > 0 {
            self.idf.insert(token.stem.clone(), idf / repeats);
            self.terms.push(QueryTerm {
                label: token.raw.clone(),
                fields,
                forms: vec![Form::Stem(token.stem.clone()), Form::Raw(token.raw.clone())],
            });
            return idf;
        }
        if !(self.fuzzy_per_word || self.fuzzy_now) {
            return 0.0;
        }
        let vocabulary: Vec<&Field> = VOCABULARY_FIELDS
            .iter()
            .filter(|f| fields.contains(f))
            .collect();
        let vocabulary: Vec<Field> = vocabulary.into_iter().copied().collect();
        let mut words = Vec::new();
        // Only here does a word reach fuzzy expansion: no field in scope knows it.
        let tools = self.index.len();
        self.index.for_each_term(&vocabulary, |term, holders| {
            if fuzzy::may_expand_onto(&token.raw, term, holders, tools)
                && fuzzy::similarity(&token.raw, term).is_some()
            {
                words.push(term.to_string());
            }
        });
        let mut best: f32 = 0.0;
        for (word, similarity) in fuzzy::best_matches(
            &token.raw,
            words.iter().map(String::as_str),
            FUZZY_EXPANSIONS,
        ) {
            let (idf, df) = self.score_raw(fields, &word, similarity, out);
            if df > 0 {
                best = best.max(idf);
                self.terms.push(QueryTerm {
                    label: format!("{}~{}", token.raw, word),
                    fields,
                    forms: vec![Form::Raw(word)],
                });
            }
        }
        best
    }

    /// A catalog word in its exact form only (prefix and fuzzy expansions).
    fn score_raw(
        &mut self,
        fields: &[Field],
        word: &str,
        weight: f32,
        out: &mut Hits,
    ) -> (f32, usize) {
        let sources: Vec<Source> = fields
            .iter()
            .map(|&field| Source {
                field,
                raw: true,
                text: word,
                weight: self.config.field(field).weight * (1.0 + self.config.exact_form_boost),
            })
            .collect();
        self.index
            .score_term(self.config, &sources, &mut self.scratch, out, weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kth_largest_is_the_one_selection_finds() {
        let select = |values: &[f32], k: usize| {
            let mut values = values.to_vec();
            if k == 0 || values.len() < k {
                return f32::MIN;
            }
            *values
                .select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a))
                .1
        };
        // Seeded values with many ties, negative zero and both signs.
        let mut state = 7u64;
        let values: Vec<f32> = (0..3_000)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let v = ((state >> 33) % 200) as f32 / 8.0 - 5.0;
                if v == 0.0 {
                    -0.0
                } else {
                    v
                }
            })
            .collect();
        for len in [0, 1, 5, 99, 100, 101, 3_000] {
            let values = &values[..len];
            for k in [0, 1, 2, 10, 31, 32, 33, 99, 100, 101, 500, 3_000, 3_001] {
                let found = kth_largest(values.iter().copied(), k);
                let expected = select(values, k);
                assert_eq!(found.to_bits(), expected.to_bits(), "len {len}, k {k}");
            }
        }
        // In ascending order every value replaces one kept, in the list and in the heap.
        let ascending: Vec<f32> = (0..1_000).map(|i| i as f32).collect();
        assert_eq!(kth_largest(ascending.iter().copied(), 10), 990.0);
        assert_eq!(kth_largest(ascending.iter().copied(), 100), 900.0);
    }

    #[test]
    fn coverage_is_read_over_the_words_a_search_reads() {
        let mut index = ToolIndex::new();
        let tools = [std::sync::Arc::new(crate::tool::Tool::new(
            "send_mail",
            "Sends mail",
        ))];
        index.rebuild(tools.iter()).unwrap();
        assert_eq!(query_coverage(&index, "send zyxw"), 0.5);
        // Past the word limit a known word is not read, and does not count.
        let long = format!(
            "mail{}{}",
            " zyxw".repeat(MAX_QUERY_WORDS - 1),
            " mail".repeat(MAX_QUERY_WORDS)
        );
        assert_eq!(query_coverage(&index, &long), 1.0 / MAX_QUERY_WORDS as f32);
    }

    #[test]
    fn a_query_of_words_reads_the_same_from_its_words_as_term_by_term() {
        use crate::tool::Tool;
        use std::sync::Arc;
        let tools: Vec<Arc<Tool>> = [
            (
                "send_mail",
                "Sends an e-mail to a contact, with files attached",
            ),
            (
                "read_files",
                "Reads the files of a folder: lists them by date",
            ),
            (
                "getWeatherNow",
                "Looks the weather up for a city (HTTPServer based)",
            ),
            ("how_to", "How to do things"),
        ]
        .iter()
        .map(|&(name, description)| Arc::new(Tool::new(name, description).with_server("s")))
        .collect();
        let mut index = ToolIndex::new();
        index.rebuild(tools.iter()).unwrap();
        let config = SearchConfig::default();
        let read = |query: &str, from_words: bool| {
            let found = evaluate_as(&index, &config, query, from_words);
            let scores: Vec<(u32, u32)> = found
                .hits
                .touched()
                .iter()
                .map(|&slot| (slot, found.hits.scores[slot as usize].to_bits()))
                .collect();
            let labels: Vec<String> = found.terms.iter().map(|t| t.label.clone()).collect();
            (
                scores,
                found.max.to_bits(),
                labels,
                found.coverage.to_bits(),
            )
        };
        let mut words_only = 0;
        for query in [
            "send mail",
            "send the mail, then read files files",
            "getWeatherNow in Paris: weather? e-mail",
            "how to",
            "how or to",
            "weathr",
            "http://example.com/files mail:me",
            "a*b folder",
            "Sends SENDS sending sent",
            "",
            "   ",
            "天気 weather",
        ] {
            if Query::parse_words(query).1 {
                words_only += 1;
            }
            assert_eq!(read(query, true), read(query, false), "{query:?}");
        }
        // Most of them take the words' path; a query with syntax never does.
        assert!(words_only >= 9, "{words_only}");
        assert!(!Query::parse_words("send OR mail").1);
        assert!(!Query::parse_words("(send mail)").1);
        assert!(!Query::parse_words("name:send").1);
        assert!(!Query::parse_words("sen*").1);
        assert!(!Query::parse_words("\"send mail\"").1);
    }

    #[test]
    fn a_query_is_read_up_to_its_word_limit() {
        assert_eq!(
            first_words("send an email, then log it", 3),
            "send an email, "
        );
        assert_eq!(first_words("getWeatherNow", 2), "getWeather");
        assert_eq!(first_words("two words", 5), "two words");
        let long = format!("{} weather", "filler ".repeat(MAX_QUERY_WORDS));
        assert!(!first_words(&long, MAX_QUERY_WORDS).contains("weather"));
    }
}
