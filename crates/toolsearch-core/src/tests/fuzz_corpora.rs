//! Replays the corpora of the catalog-format and search-argument fuzz targets (fuzz/corpus/,
//! grown by `cargo +nightly fuzz run catalog_formats` and `... search_args`) on stable, the way
//! the targets run them: every input is answered or refused as bad input, never a panic.

use std::path::PathBuf;

use toolsearch_core::contract::{self, CategoryArgs, SearchArgs, SearchOptions};
use toolsearch_core::{
    parse_arguments, parse_catalog, CatalogPolicy, Scope, SearchConfig, SearchEngine, Tool,
};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let inputs: Vec<_> = entries
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    assert!(
        inputs.len() >= 6,
        "the corpus at {} is missing",
        dir.display()
    );
    inputs
}

#[test]
fn every_catalog_input_reads_or_is_refused_as_bad_input() {
    let mut read = 0;
    for (path, bytes) in corpus("catalog_formats") {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match parse_catalog(text, "fuzz.json", None) {
            Ok(tools) => {
                read += 1;
                if let Err(e) =
                    SearchEngine::build(tools, SearchConfig::default(), CatalogPolicy::default())
                {
                    assert!(e.is_bad_input(), "{}: {e}", path.display());
                }
            }
            Err(e) => assert!(e.is_bad_input(), "{}: {e}", path.display()),
        }
    }
    // The seeds hold one valid catalog of each format.
    assert!(read >= 5, "only {read} corpus inputs were valid catalogs");
}

fn engine() -> SearchEngine {
    let tools = [
        (
            "github",
            "create_issue",
            "Open a new issue in a repository",
            "code",
        ),
        ("files", "read_file", "Read the contents of a file", "files"),
        (
            "slack",
            "post_message",
            "Post a message to a channel",
            "chat",
        ),
    ];
    SearchEngine::from_tools(
        tools
            .into_iter()
            .map(|(server, name, description, category)| {
                Tool::new(name, description)
                    .with_server(server)
                    .with_category(category)
            }),
    )
    .unwrap()
}

#[test]
fn every_search_argument_input_answers_or_is_refused_as_bad_input() {
    let engine = engine();
    let mut answered = 0;
    for (path, bytes) in corpus("search_args") {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let mut parsed = Vec::new();
        if let Ok(args) = serde_json::from_value::<SearchArgs>(value.clone()) {
            parsed.push(args);
        }
        if let Ok(args) = parse_arguments::<SearchArgs>("search_tools", value.clone()) {
            parsed.push(args);
        }
        for args in parsed {
            match contract::search(&engine, &args, &SearchOptions::default()) {
                Ok(results) => {
                    answered += 1;
                    assert!(results.page.returned <= contract::MAX_LIMIT);
                }
                Err(e) => assert!(e.is_bad_input(), "{}: {e}", path.display()),
            }
        }
        if let Ok(args) = serde_json::from_value::<CategoryArgs>(value) {
            if let Err(e) = contract::tools_by_category(&engine, &args, true, &Scope::all()) {
                assert!(e.is_bad_input(), "{}: {e}", path.display());
            }
        }
    }
    assert!(answered >= 4, "only {answered} corpus searches answered");
}
