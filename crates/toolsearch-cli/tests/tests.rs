//! The crate's integration tests, in one binary (built and linked once), a module per area.

mod peers;

mod auth_cli;
mod bench_cli;
mod console_cli;
mod contract_cli;
mod crossing_cli;
mod eval_cli;
mod gateway_cli;
mod hardening_cli;
mod hybrid_cli;
mod model_cli;
mod offload_cli;
mod passthrough_cli;
mod replicas_cli;
mod rest_cli;
mod scopes_cli;
mod search_cli;
