pub mod bench;
pub mod bench_gateway;
pub mod bench_search;
pub mod bench_tokens;
pub mod eval;
pub mod model;
pub mod search;
pub mod serve;
