//! The crate's integration tests, in one binary (built and linked once), a module per area.

mod common;

mod config_file;
mod fuzz_corpora;
mod rest;
mod upstream;
