//! Fuzzy expansion only for query words the catalog does not know, never onto stop-like words,
//! and request filler dropped in any inflection.

mod search_common;

use search_common::*;
use toolsearch_core::{Catalog, SearchConfig, SearchEngine, Tool};

fn engine_with(tools: Vec<Tool>, settings: &[(&str, &str)]) -> SearchEngine {
    let mut config = SearchConfig::default();
    for (key, value) in settings {
        config.set(key, value).unwrap();
    }
    SearchEngine::from_catalog(Catalog::from_tools(tools).unwrap(), config).unwrap()
}

const GUARDED: &[(&str, &str)] = &[("fuzzy_guard", "true"), ("filler_inflections", "true")];
const UNGUARDED: &[(&str, &str)] = &[("fuzzy_guard", "false"), ("filler_inflections", "false")];

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
fn an_unknown_word_is_not_expanded_onto_a_word_with_another_first_letter() {
    // "weather" is two edits from "either": without the guard that finds the gzip tool.
    let loose = engine_with(everyday(), UNGUARDED);
    assert!(matched_terms(&loose, "weather in Paris").contains(&"weather~either".to_string()));
    let guarded = engine_with(everyday(), GUARDED);
    assert_eq!(search(&guarded, "weather in Paris").total_matches, 0);
    // A typo that keeps its first letter still finds its word.
    assert_eq!(found(&guarded, "forcast"), vec!["get_forecast"]);
}

#[test]
fn a_filler_word_in_another_inflection_matches_nothing() {
    // "likes" stems to "like", a filler word, and "Use pattern like" holds it.
    let loose = engine_with(everyday(), UNGUARDED);
    assert_eq!(
        found(&loose, "remember that Alice likes tea"),
        vec!["search_files"]
    );
    let guarded = engine_with(everyday(), GUARDED);
    assert!(!matched_terms(&guarded, "remember that Alice likes tea")
        .iter()
        .any(|t| t.starts_with("like")));
}

#[test]
fn a_word_the_catalog_knows_gets_no_near_matches() {
    let tools = vec![
        tool("a", "get_weather", "Conditions outside"),
        tool("b", "feather_count", "Counts feathers"),
    ];
    let e = engine_with(tools, GUARDED);
    assert_eq!(found(&e, "weather"), vec!["get_weather"]);
    assert!(matched_terms(&e, "weather")
        .iter()
        .all(|t| !t.contains('~')));
}

#[test]
fn a_word_common_in_the_catalog_is_no_target() {
    // "report" is in every tool's description: a near match onto it would find them all.
    let mut tools: Vec<Tool> = (0..10)
        .map(|i| tool("r", &format!("tool_{i}"), "Writes a report"))
        .collect();
    tools.push(tool("r", "reorder", "Changes the order of items"));
    let e = engine_with(tools.clone(), GUARDED);
    assert!(!matched_terms(&e, "reprot")
        .iter()
        .any(|t| t == "reprot~report"));
    let loose = engine_with(tools, UNGUARDED);
    assert!(matched_terms(&loose, "reprot").contains(&"reprot~report".to_string()));
}
