//! Any text as a gateway config file, read as TOML and as JSON: a config or a positioned error, and a
//! config that reads is one the gateway can start from.
//!
//! The properties are in `fuzz/harness/gateway_config.rs`, which `cargo test -p toolsearch-gateway --test
//! fuzz_corpora` also runs over fuzz/corpus/gateway_config/ on stable.
//!
//!     cargo +nightly fuzz run gateway_config            (from fuzz/)

#![no_main]

#[path = "../harness/gateway_config.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::check(data);
});
