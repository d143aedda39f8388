//! The crate's integration tests, in one binary (built and linked once), a module per area.
//!
//! They use the public API only (as `toolsearch_core::...`) and live in the unit-test binary
//! rather than in an integration-test binary of their own, which would link the crate again.

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
