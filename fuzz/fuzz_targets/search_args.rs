//! Any bytes as the arguments of a search, read both ways the faces read them: as a REST body
//! (serde, `SearchArgs`) and as MCP meta-tool arguments (checked against the derived schema
//! first), then run through the search contract. Every input is answered or refused as bad input;
//! nothing panics.
//!
//!     cargo +nightly fuzz run search_args            (from fuzz/)
//!
//! New inputs go to fuzz/corpus/search_args/, which `cargo test -p toolsearch-core --test
//! fuzz_corpora` replays on stable.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolsearch_core::contract::{self, CategoryArgs, SearchArgs, SearchOptions};
use toolsearch_core::{parse_arguments, Scope, SearchEngine, Tool};

fn engine() -> &'static SearchEngine {
    static ENGINE: OnceLock<SearchEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let tools = [
            ("github", "create_issue", "Open a new issue in a repository", "code"),
            ("files", "read_file", "Read the contents of a file", "files"),
            ("slack", "post_message", "Post a message to a channel", "chat"),
        ];
        SearchEngine::from_tools(tools.into_iter().map(|(server, name, description, category)| {
            Tool::new(name, description)
                .with_server(server)
                .with_category(category)
        }))
        .expect("the fuzz catalog is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut parsed: Vec<SearchArgs> = Vec::new();
    if let Ok(args) = serde_json::from_value::<SearchArgs>(value.clone()) {
        parsed.push(args);
    }
    if let Ok(args) = parse_arguments::<SearchArgs>("search_tools", value.clone()) {
        parsed.push(args);
    }
    for args in parsed {
        match contract::search(engine(), &args, &SearchOptions::default()) {
            Ok(results) => assert!(results.page.returned <= contract::MAX_LIMIT),
            Err(e) => assert!(e.is_bad_input(), "{e}"),
        }
    }
    if let Ok(args) = serde_json::from_value::<CategoryArgs>(value) {
        if let Err(e) = contract::tools_by_category(engine(), &args, true, &Scope::all()) {
            assert!(e.is_bad_input(), "{e}");
        }
    }
});
