//! Any bytes as an HTTP request to the REST API (request line, headers, body), through the
//! listener's Host/Origin rules and the API's router in process: every answer is JSON, a refusal
//! is a documented client error, never a server error or a panic.
//!
//! The properties are in `fuzz/harness/rest_requests.rs`, which `cargo test -p toolsearch-gateway --test
//! fuzz_corpora` also runs over fuzz/corpus/rest_requests/ on stable.
//!
//!     cargo +nightly fuzz run rest_requests            (from fuzz/)

#![no_main]

#[path = "../harness/rest_requests.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::check(data);
});
