use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Tool payload size of the first request, in bytes and o200k tokens, per preset.
    Tokens(super::bench_tokens::TokensArgs),
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Tokens(args) => super::bench_tokens::run(args),
    }
}
