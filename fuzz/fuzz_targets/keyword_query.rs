//! Any text as a keyword query, through the engine's public search: the query parser, the
//! evaluation of the parsed tree, filters and explanations. A search either answers or refuses
//! the query as bad input; it never panics and never exhausts the stack.
//!
//!     cargo +nightly fuzz run keyword_query            (from fuzz/)
//!
//! New inputs go to fuzz/corpus/keyword_query/, which `cargo test -p toolsearch-core --test
//! query_corpus` replays on stable.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolsearch_core::{SearchEngine, SearchRequest, Tool};

fn engine() -> &'static SearchEngine {
    static ENGINE: OnceLock<SearchEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
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
        .expect("the fuzz catalog is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    match engine().search(&SearchRequest::new(query).limit(5)) {
        Ok(response) => assert!(response.tools.len() <= 5),
        Err(e) => assert!(e.is_bad_input(), "{e}"),
    }
});
