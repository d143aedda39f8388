//! Near matches for query words that match nothing: typos (`wether` → `weather`), abbreviations
//! (`msg` → `message`) and truncations (`calc` → `calculate`).

use crate::analyzer::{is_request_filler, is_stopword};

/// A catalog word held by more than this share of the tools (and by more than one) is
/// stop-like: it says little about any tool, and a near match onto it finds tools by accident.
pub const STOP_LIKE_SHARE: f32 = 0.1;

/// Whether an unknown query word may be expanded onto `candidate`, a catalog word that
/// `holders` of the catalog's `tools` hold: neither may be a stopword or request filler, the
/// candidate may not be stop-like in the catalog, and both must start with the same letter
/// (writers rarely get the first letter wrong; without it "weather" reaches "either").
pub fn may_expand_onto(word: &str, candidate: &str, holders: u32, tools: usize) -> bool {
    let stop = |w: &str| is_stopword(w) || is_request_filler(w);
    !stop(word)
        && !stop(candidate)
        && (holders <= 1 || holders as f32 <= STOP_LIKE_SHARE * tools as f32)
        && word.chars().next() == candidate.chars().next()
}

/// Longest query word, in characters, that gets near matches. No typo, abbreviation or
/// truncation of a catalog word is longer, and [`similarity`] runs against the whole vocabulary:
/// its cost per catalog word must not grow with what a caller typed.
pub const MAX_WORD_CHARS: usize = 64;

/// How similar `word` (as typed) is to `candidate` (a catalog word), in 0..1; `None` when not close.
pub fn similarity(word: &str, candidate: &str) -> Option<f32> {
    // Bytes first: a character is at most four, so this bounds the count below.
    if word.len() > 4 * MAX_WORD_CHARS {
        return None;
    }
    let (word_len, candidate_len) = (word.chars().count(), candidate.chars().count());
    if word == candidate || !(3..=MAX_WORD_CHARS).contains(&word_len) || candidate_len < 2 {
        return None;
    }
    let max_edits = if word_len <= 5 { 1 } else { 2 };
    // Lengths further apart than the edits allowed cannot be within them: this runs against
    // the whole vocabulary, and most words are ruled out here without computing a distance.
    if word_len.abs_diff(candidate_len) <= max_edits {
        // Optimal string alignment: Damerau-Levenshtein without editing a substring twice, which
        // for one or two edits finds the same typos and needs no per-call hash map.
        let distance = strsim::osa_distance(word, candidate);
        if distance <= max_edits {
            return Some(1.0 - distance as f32 / word_len.max(candidate_len) as f32);
        }
    }
    if candidate.starts_with(word) {
        return Some(0.5 + 0.4 * word.len() as f32 / candidate.len() as f32);
    }
    if is_abbreviation(word, candidate) {
        return Some(0.6);
    }
    None
}

/// `msg` abbreviates `message`: same first letter, every letter in order, and not much shorter.
fn is_abbreviation(word: &str, candidate: &str) -> bool {
    let mut w = word.chars();
    let mut c = candidate.chars();
    if w.next() != c.next() || word.len() * 3 < candidate.len() {
        return false;
    }
    let mut rest = c;
    w.all(|wc| rest.any(|cc| cc == wc))
}

/// The best `max` candidates for `word` among `terms`, most similar first, ties by term.
pub fn best_matches<'a>(
    word: &str,
    terms: impl Iterator<Item = &'a str>,
    max: usize,
) -> Vec<(String, f32)> {
    let mut found: Vec<(String, f32)> = Vec::new();
    for term in terms {
        if let Some(sim) = similarity(word, term) {
            if !found.iter().any(|(t, _)| t == term) {
                found.push((term.to_string(), sim));
            }
        }
    }
    found.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    found.truncate(max);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_abbreviations_and_truncations() {
        assert!(similarity("wether", "weather").is_some());
        assert!(similarity("msg", "message").is_some());
        assert!(similarity("calc", "calculate").is_some());
        assert!(similarity("weather", "weather").is_none());
        assert!(similarity("msg", "mongodb").is_none());
        assert!(similarity("ab", "abc").is_none());
    }

    #[test]
    fn overlong_words_get_no_near_match() {
        let long = "a".repeat(MAX_WORD_CHARS + 1);
        assert!(similarity(&long, &format!("{long}b")).is_none());
        let at_limit = "a".repeat(MAX_WORD_CHARS);
        assert!(similarity(&at_limit, &format!("{at_limit}b")).is_some());
    }

    #[test]
    fn never_onto_stop_like_words_or_another_first_letter() {
        // A typo keeps its first letter: "weather" is two edits from "either", not a typo of it.
        assert!(similarity("weather", "either").is_some());
        assert!(!may_expand_onto("weather", "either", 1, 40));
        assert!(may_expand_onto("wether", "weather", 1, 40));
        // Stopwords and request filler are never a target, nor a word to expand.
        assert!(!may_expand_onto("likes", "like", 1, 40));
        assert!(!may_expand_onto("whith", "with", 1, 40));
        assert!(!may_expand_onto("like", "likes", 1, 40));
        // A word a tenth of the catalog holds is stop-like there.
        assert!(may_expand_onto("flie", "file", 4, 40));
        assert!(!may_expand_onto("flie", "file", 5, 40));
        // A word one tool holds is never common, however small the catalog.
        assert!(may_expand_onto("flie", "file", 1, 4));
    }

    #[test]
    fn best_matches_prefers_the_closest() {
        let terms = ["weather", "whether", "wetter", "message"];
        let found = best_matches("wether", terms.into_iter(), 2);
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|(t, _)| t != "message"));
    }
}
