//! The crate's integration tests, in one binary (built and linked once), a module per area.

mod disclosure_common;
mod search_common;

mod disclosure;
mod disclosure_formats;
mod formats;
mod fuzz_corpora;
mod fuzzy_rules;
mod hybrid;
mod query_corpus;
mod scope;
mod search;
