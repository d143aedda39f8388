use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Tool payload size of the first request, in bytes and o200k tokens, per preset.
    Tokens(super::bench_tokens::TokensArgs),
    /// Index build time, query latency, peak memory and server replacement, by catalog size,
    /// against the reference rankers.
    Search(super::bench_search::SearchBenchArgs),
    /// The gateway on loopback: MCP search_tools latency (one session and many), REST search
    /// throughput, and what the gateway adds to a tool call; or, with --many-sessions, what many
    /// sessions cost in memory and how many requests 200 sessions get answered.
    Gateway(super::bench_gateway::GatewayBenchArgs),
    /// The upstream `bench gateway` runs as a process of its own.
    #[command(hide = true)]
    Upstream(super::bench_gateway::UpstreamArgs),
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Tokens(args) => super::bench_tokens::run(args),
        BenchCommand::Search(args) => super::bench_search::run(args),
        BenchCommand::Gateway(args) => super::bench_gateway::run(args),
        BenchCommand::Upstream(args) => super::bench_gateway::run_upstream(args),
    }
}
