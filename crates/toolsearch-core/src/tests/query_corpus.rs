//! Replays the fuzz corpus of keyword queries (fuzz/corpus/keyword_query, grown by
//! `cargo +nightly fuzz run keyword_query`) on stable: every input is searched as the fuzz target
//! searches it, and must either answer or be refused as bad input, never panic or overflow the
//! stack.

use std::path::PathBuf;

use toolsearch_core::{SearchEngine, SearchRequest, Tool};

fn engine() -> SearchEngine {
    let tools = [
        ("github", "create_issue", "Open a new issue in a repository"),
        ("github", "list_pull_requests", "List open pull requests"),
        ("files", "read_file", "Read the contents of a file"),
        ("files", "write_file", "Write text to a file"),
        ("slack", "post_message", "Post a message to a channel"),
    ];
    SearchEngine::from_tools(
        tools
            .into_iter()
            .map(|(server, name, description)| Tool::new(name, description).with_server(server)),
    )
    .expect("the corpus catalog is valid")
}

#[test]
fn every_corpus_query_answers_or_is_refused_as_bad_input() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/keyword_query");
    let engine = engine();
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let Ok(query) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match engine.search(&SearchRequest::new(query).limit(5)) {
            Ok(response) => assert!(response.tools.len() <= 5, "{}", path.display()),
            Err(e) => assert!(e.is_bad_input(), "{}: {e}", path.display()),
        }
        replayed += 1;
    }
    assert!(replayed >= 9, "the corpus at {} is missing", dir.display());
}

#[test]
fn deep_nesting_in_the_corpus_still_finds_the_tool() {
    let engine = engine();
    for query in [
        format!("{}issue{}", "(".repeat(33), ")".repeat(33)),
        format!("{}open issue", "(".repeat(16_000)),
    ] {
        let response = engine
            .search(&SearchRequest::new(query.as_str()).limit(5))
            .unwrap();
        assert_eq!(response.tools[0].tool.name(), "create_issue");
    }
}
