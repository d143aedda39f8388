//! A small table of words that tools and the people who call them use for the same thing
//! ("fetch" a page that a tool "gets"). A query word also searches its synonyms, at a discount.

use crate::analyzer::Analyzer;
use std::collections::HashMap;

/// Groups of interchangeable words, as written (they are stemmed when the table is built).
const GROUPS: &[&[&str]] = &[
    &["get", "fetch", "retrieve", "obtain", "lookup"],
    &["create", "add", "new", "make", "generate", "insert"],
    &["delete", "remove", "erase", "destroy"],
    &["list", "show", "enumerate", "display"],
    &["send", "post", "publish", "submit"],
    &["update", "modify", "edit", "change"],
    &["search", "find", "query", "look"],
    &["doc", "docs", "document"],
    &["image", "picture", "photo", "img"],
    &["message", "msg"],
    &["email", "mail"],
    &["run", "execute", "exec", "invoke"],
    &["start", "launch", "begin"],
    &["stop", "terminate", "kill", "halt"],
    &["convert", "transform"],
    &["summarize", "summarise", "summary"],
    &["calculate", "compute", "calc"],
    &["repo", "repository"],
    &["dir", "directory", "folder"],
    &["speech", "audio", "voice"],
    &["analyze", "analyse", "analysis"],
    &["chart", "graph", "plot"],
    &["music", "song", "track"],
    &["news", "headline", "article"],
    &["video", "movie", "film"],
    &["picture", "image"],
    &["web", "internet", "online"],
    &["download", "fetch"],
    &["price", "cost"],
];

/// Stem → the stems it also stands for.
#[derive(Debug, Default)]
pub struct Synonyms {
    map: HashMap<String, Vec<String>>,
}

impl Synonyms {
    pub fn new(analyzer: &Analyzer) -> Self {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for group in GROUPS {
            let stems: Vec<String> = group.iter().map(|w| analyzer.stem(w)).collect();
            for stem in &stems {
                let entry = map.entry(stem.clone()).or_default();
                for other in &stems {
                    if other != stem && !entry.contains(other) {
                        entry.push(other.clone());
                    }
                }
            }
        }
        Self { map }
    }

    pub fn of(&self, stem: &str) -> &[String] {
        self.map.get(stem).map(Vec::as_slice).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_symmetric_and_stemmed() {
        let analyzer = Analyzer::new();
        let synonyms = Synonyms::new(&analyzer);
        assert!(synonyms.of("fetch").contains(&"get".to_string()));
        assert!(synonyms.of("get").contains(&"fetch".to_string()));
        assert!(synonyms
            .of(&analyzer.stem("deleting"))
            .contains(&analyzer.stem("remove")));
        assert!(synonyms.of("weather").is_empty());
    }
}
