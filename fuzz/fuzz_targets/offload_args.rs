//! Any upstream output and any arguments of the large-output tools: the output is offloaded, the
//! arguments read and checked, and a read or a search runs on the stored output. jq filters run in
//! a child process in the gateway and are not run here.
//!
//! The properties are in `fuzz/harness/offload_args.rs`, which `cargo test -p toolsearch-gateway --test
//! fuzz_corpora` also runs over fuzz/corpus/offload_args/ on stable.
//!
//!     cargo +nightly fuzz run offload_args            (from fuzz/)

#![no_main]

#[path = "../harness/offload_args.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::check(data);
});
