//! Text analysis shared by indexing and querying: identifier splitting, lowercasing, stopwords and
//! English stemming, keeping the unstemmed form beside the stem.

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::{FxHashMap, FxHashSet};
use std::ops::ControlFlow;
use std::sync::OnceLock;

/// One analysed token: its lowercased surface form, its stem, and its position in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub raw: String,
    pub stem: String,
    pub position: u32,
    pub offset_from: usize,
    pub offset_to: usize,
}

/// Splits identifiers and prose the same way, so that `getWeather`, `get_weather` and
/// "get the weather" meet in the index.
pub struct Analyzer {
    stemmer: Stemmer,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Analyzer(english)")
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    pub fn new() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
        }
    }

    /// All tokens of `text`, stopwords included.
    pub fn tokens(&self, text: &str) -> Vec<Token> {
        self.tokens_where(text, |_| true)
    }

    /// Tokens of `text` without stopwords; positions keep their gaps so phrases stay exact.
    pub fn content_tokens(&self, text: &str) -> Vec<Token> {
        self.tokens_where(text, |raw| !is_stopword(raw))
    }

    /// The tokens whose lowercased form passes `keep`, checked before stemming (a stopword
    /// costs no stem lookup).
    fn tokens_where(&self, text: &str, keep: impl Fn(&str) -> bool) -> Vec<Token> {
        split_words(text)
            .into_iter()
            .zip(0u32..)
            .filter_map(|((from, to), position)| {
                let raw = text[from..to].to_lowercase();
                if !keep(&raw) {
                    return None;
                }
                let stem = self.stem(&raw);
                Some(Token {
                    raw,
                    stem,
                    position,
                    offset_from: from,
                    offset_to: to,
                })
            })
            .collect()
    }

    /// Tokens of a natural-language query: stopwords dropped unless the query is nothing but
    /// stopwords ("how to" still searches for something).
    #[cfg(test)]
    pub fn query_tokens(&self, text: &str) -> Vec<Token> {
        let all = self.tokens(text);
        if all.iter().all(|t| is_stopword(&t.raw)) {
            return all;
        }
        all.into_iter().filter(|t| !is_stopword(&t.raw)).collect()
    }

    pub fn stem(&self, lowercase_word: &str) -> String {
        if lowercase_word.chars().any(|c| !c.is_ascii_alphabetic()) {
            return lowercase_word.to_string();
        }
        // A catalog's vocabulary is small and every search re-stems the same words: a per-thread
        // memo turns the stemmer (the costliest step of analysis) into a lookup.
        STEMS.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some(stem) = cache.get(lowercase_word) {
                return stem.clone();
            }
            let stem = self.stemmer.stem(lowercase_word).into_owned();
            if cache.len() >= STEM_CACHE_MAX {
                cache.clear();
            }
            cache.insert(lowercase_word.to_string(), stem.clone());
            stem
        })
    }
}

const STEM_CACHE_MAX: usize = 200_000;

thread_local! {
    static STEMS: std::cell::RefCell<FxHashMap<String, String>> =
        std::cell::RefCell::new(FxHashMap::default());
}

/// `word.to_lowercase()` into a reused buffer (no allocation for ASCII words).
pub fn lowercase_into(word: &str, out: &mut String) {
    out.clear();
    if word.is_ascii() {
        out.push_str(word);
        out.make_ascii_lowercase();
    } else {
        out.push_str(&word.to_lowercase());
    }
}

/// Byte ranges of the words in `text`: runs of letters and digits, split further at camelCase
/// humps, letter/digit boundaries, and around every CJK ideograph (each is a word of its own).
pub fn split_words(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for_each_word(text, |from, to| {
        out.push((from, to));
        ControlFlow::Continue(())
    });
    out
}

/// Where the `n`-th word of `text` (counting from 0) begins, as [`split_words`] reads it;
/// `None` when `text` has no more than `n` words. Reads no further than that word.
pub fn nth_word_start(text: &str, n: usize) -> Option<usize> {
    // Words are disjoint and never empty: a text has at most as many words as bytes.
    if text.len() <= n {
        return None;
    }
    let mut seen = 0;
    let mut found = None;
    for_each_word(text, |from, _| {
        if seen == n {
            found = Some(from);
            return ControlFlow::Break(());
        }
        seen += 1;
        ControlFlow::Continue(())
    });
    found
}

/// Calls `visit` with the byte range of each word of `text` in order (see [`split_words`]),
/// until it breaks.
fn for_each_word(text: &str, mut visit: impl FnMut(usize, usize) -> ControlFlow<()>) {
    let mut start: Option<usize> = None;
    let mut prev: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        if is_cjk(c) {
            if let Some(s) = start.take() {
                if visit(s, offset).is_break() {
                    return;
                }
            }
            if visit(offset, offset + c.len_utf8()).is_break() {
                return;
            }
            prev = None;
            continue;
        }
        if !c.is_alphanumeric() {
            if let Some(s) = start.take() {
                if visit(s, offset).is_break() {
                    return;
                }
            }
            prev = None;
            continue;
        }
        if let (Some(s), Some(p)) = (start, prev) {
            let next = chars.peek().map(|&(_, n)| n);
            if is_boundary(p, c, next) {
                if visit(s, offset).is_break() {
                    return;
                }
                start = Some(offset);
            }
        }
        if start.is_none() {
            start = Some(offset);
        }
        prev = Some(c);
    }
    if let Some(s) = start {
        let _ = visit(s, text.len());
    }
}

fn is_boundary(prev: char, cur: char, next: Option<char>) -> bool {
    // fooBar | foo2 | 2foo
    (prev.is_lowercase() && cur.is_uppercase())
        || (prev.is_alphabetic() && cur.is_numeric())
        || (prev.is_numeric() && cur.is_alphabetic())
        // HTTPServer: split before the last capital of a run followed by lowercase
        || (prev.is_uppercase() && cur.is_uppercase() && next.is_some_and(char::is_lowercase))
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // kana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF)
}

/// Words that requests are full of but tools never are about ("I want to", "can you help me
/// use"): dropped from natural-language queries only, never from tool text.
pub fn is_request_filler(word: &str) -> bool {
    static SET: OnceLock<FxHashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| REQUEST_FILLER.iter().copied().collect())
        .contains(word)
}

// Sorted, to keep the list easy to read and check.
const REQUEST_FILLER: &[&str] = &[
    "able",
    "also",
    "anyone",
    "help",
    "know",
    "let",
    "like",
    "need",
    "needs",
    "provide",
    "someone",
    "something",
    "tell",
    "us",
    "use",
    "using",
    "want",
    "wants",
    "way",
];

/// English stopwords: function words that carry no meaning for choosing a tool.
pub fn is_stopword(word: &str) -> bool {
    static SET: OnceLock<FxHashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| STOPWORDS.iter().copied().collect())
        .contains(word)
}

// Sorted, to keep the list easy to read and check.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn raws(text: &str) -> Vec<String> {
        Analyzer::new()
            .tokens(text)
            .into_iter()
            .map(|t| t.raw)
            .collect()
    }

    #[test]
    fn stopwords_are_sorted() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
        let mut sorted = REQUEST_FILLER.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, REQUEST_FILLER);
    }

    #[test]
    fn the_nth_word_starts_where_the_split_says() {
        for text in [
            "",
            "a",
            "getWeatherNow 2 days, HTTPServer",
            "  send mail  ",
            "東京の天気 weather",
            "aBcDeF",
        ] {
            let words = split_words(text);
            for n in 0..=words.len() + 1 {
                assert_eq!(
                    nth_word_start(text, n),
                    words.get(n).map(|&(from, _)| from),
                    "{text:?} word {n}"
                );
            }
        }
    }

    #[test]
    fn splits_identifiers_at_every_boundary() {
        assert_eq!(raws("get_weather"), ["get", "weather"]);
        assert_eq!(
            raws("get-weather.now/v2"),
            ["get", "weather", "now", "v", "2"]
        );
        assert_eq!(raws("getWeatherForecast"), ["get", "weather", "forecast"]);
        assert_eq!(raws("HTTPServer"), ["http", "server"]);
        assert_eq!(raws("utf8Decode"), ["utf", "8", "decode"]);
        assert_eq!(raws("github___create_issue"), ["github", "create", "issue"]);
    }

    #[test]
    fn cjk_ideographs_are_words_of_their_own() {
        assert_eq!(raws("搜索abc"), ["搜", "索", "abc"]);
    }

    #[test]
    fn stems_but_keeps_the_raw_form() {
        let tokens = Analyzer::new().tokens("Creating documents");
        assert_eq!(tokens[0].raw, "creating");
        assert_eq!(tokens[0].stem, "creat");
        assert_eq!(tokens[1].stem, "document");
        assert_eq!((tokens[1].offset_from, tokens[1].offset_to), (9, 18));
    }

    #[test]
    fn query_tokens_drop_stopwords_unless_nothing_else_is_left() {
        let a = Analyzer::new();
        let q: Vec<_> = a
            .query_tokens("create a new word document")
            .into_iter()
            .map(|t| t.raw)
            .collect();
        assert_eq!(q, ["create", "new", "word", "document"]);
        let positions: Vec<_> = a
            .query_tokens("list of files")
            .into_iter()
            .map(|t| t.position)
            .collect();
        assert_eq!(positions, [0, 2]);
        let only: Vec<_> = a
            .query_tokens("how to")
            .into_iter()
            .map(|t| t.raw)
            .collect();
        assert_eq!(only, ["how", "to"]);
    }
}
