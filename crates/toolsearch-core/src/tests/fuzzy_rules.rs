//! Fuzzy expansion (off by default; `fuzzy=true`) only for query words the catalog does not
//! know, never onto stop-like words, and only onto words with the query word's first letter.

use super::search_common;

use search_common::*;
use toolsearch_core::{Catalog, SearchConfig, SearchEngine, Tool};

fn fuzzy_engine(tools: Vec<Tool>) -> SearchEngine {
    let mut config = SearchConfig::default();
    config.set("fuzzy", "true").unwrap();
    SearchEngine::from_catalog(Catalog::from_tools(tools).unwrap(), config).unwrap()
}

fn everyday() -> Vec<Tool> {
    vec![
        tool(
            "files",
            "gzip_file",
            "Compresses a file and returns either the data or a link to it",
        ),
        tool(
            "files",
            "search_files",
            "Search for files matching a pattern. Use pattern like '*.ext' to match files",
        ),
        tool("memory", "add_observations", "Add observations to entities"),
        tool("travel", "get_forecast", "The forecast for a city"),
    ]
}

/// Every matched term of every result, as `matched_on` names them.
fn matched_terms(engine: &SearchEngine, query: &str) -> Vec<String> {
    search(engine, query)
        .tools
        .iter()
        .flat_map(|hit| hit.matched_on.iter().flat_map(|m| m.terms.clone()))
        .collect()
}

#[test]
fn fuzzy_expansion_is_off_by_default() {
    let e = engine(everyday());
    assert_eq!(search(&e, "forcast").total_matches, 0);
    assert_eq!(
        found(&fuzzy_engine(everyday()), "forcast"),
        vec!["get_forecast"]
    );
}

#[test]
fn an_unknown_word_is_not_expanded_onto_a_word_with_another_first_letter() {
    // "weather" is two edits from "either" (in the gzip tool), but not a typo of it.
    let e = fuzzy_engine(everyday());
    assert_eq!(search(&e, "weather in Paris").total_matches, 0);
    assert!(!matched_terms(&e, "weather").iter().any(|t| t.contains('~')));
    // A typo that keeps its first letter still finds its word.
    assert_eq!(found(&e, "forcast"), vec!["get_forecast"]);
    assert!(matched_terms(&e, "forcast").contains(&"forcast~forecast".to_string()));
}

#[test]
fn request_filler_is_no_target() {
    // "likr" is one edit from "like", which "Use pattern like" holds: a filler word.
    let e = fuzzy_engine(everyday());
    assert_eq!(search(&e, "likr").total_matches, 0);
}

#[test]
fn a_word_the_catalog_knows_gets_no_near_matches() {
    let tools = vec![
        tool("a", "get_weather", "Conditions outside"),
        tool("b", "feather_count", "Counts feathers"),
    ];
    let e = fuzzy_engine(tools);
    assert_eq!(found(&e, "weather"), vec!["get_weather"]);
    assert!(matched_terms(&e, "weather")
        .iter()
        .all(|t| !t.contains('~')));
}

#[test]
fn a_word_common_in_the_catalog_is_no_target() {
    // "report" is in ten of eleven descriptions: a near match onto it would find them all.
    let mut tools: Vec<Tool> = (0..10)
        .map(|i| tool("r", &format!("tool_{i}"), "Writes a report"))
        .collect();
    tools.push(tool("r", "reorder", "Changes the order of items"));
    let e = fuzzy_engine(tools);
    assert!(!matched_terms(&e, "reprot")
        .iter()
        .any(|t| t == "reprot~report"));
    // The same word held by one tool of eleven is a fine target.
    let mut tools: Vec<Tool> = (0..10)
        .map(|i| tool("r", &format!("tool_{i}"), "Changes an order"))
        .collect();
    tools.push(tool("r", "write", "Writes a report"));
    let e = fuzzy_engine(tools);
    assert_eq!(found(&e, "reprot"), vec!["write"]);
}
