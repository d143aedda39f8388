//! Any text as a catalog file: format detection and every reader (MCP, OpenAI, Anthropic, Gemini,
//! multi-server), then the catalog and index built from what was read. Reading either gives tools
//! or a positioned error; building either gives an engine or a bad-input error; nothing panics.
//!
//!     cargo +nightly fuzz run catalog_formats            (from fuzz/)
//!
//! New inputs go to fuzz/corpus/catalog_formats/, which `cargo test -p toolsearch-core --test
//! fuzz_corpora` replays on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use toolsearch_core::{parse_catalog, CatalogPolicy, SearchConfig, SearchEngine};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tools) = parse_catalog(text, "fuzz.json", None) {
        if let Err(e) = SearchEngine::build(tools, SearchConfig::default(), CatalogPolicy::default())
        {
            assert!(e.is_bad_input(), "{e}");
        }
    }
});
