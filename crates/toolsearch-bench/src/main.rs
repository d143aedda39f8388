//! `toolsearch-bench`: the benchmark harness (token cost, search speed and memory, the gateway on
//! loopback), a program of its own so that none of it is linked into `toolsearch`. Users run it as
//! `toolsearch bench …`, which runs this program from its own folder; it measures through the same
//! faces users run: the engine and the gateway's libraries as `toolsearch` calls them, and the
//! gateway as `toolsearch serve`, the program next to this one.

// What it shares with `toolsearch`, compiled from the same files so that they cannot drift: the
// exit code of bad input, reading a catalog file, the embedding model's options and threads, and
// the logger.
#[path = "../../toolsearch-cli/src/bad_input.rs"]
mod bad_input;
// The harness reads catalogs but never builds an engine under a config's catalog policy.
#[allow(dead_code)]
#[path = "../../toolsearch-cli/src/catalog_file.rs"]
mod catalog_file;
mod gateway;
// The harness logs as `toolsearch` does but announces no address and adds no directives.
#[allow(dead_code)]
#[path = "../../toolsearch-cli/src/logging.rs"]
mod logging;
#[path = "../../toolsearch-cli/src/model_args.rs"]
mod model;
mod search;
mod tokens;

pub use bad_input::{is_bad_input, BadInput};

use clap::{Parser, Subcommand};
use logging::LogFormat;
use std::process::ExitCode;

/// Benchmarks: token cost, search speed and memory.
#[derive(Parser)]
// Its usage lines read as users type it, through `toolsearch`.
#[command(name = "toolsearch-bench", bin_name = "toolsearch bench")]
struct Cli {
    /// Log filter, e.g. `debug` or `toolsearch_core=debug` (also RUST_LOG).
    #[arg(long, global = true)]
    log: Option<String>,
    /// Only warnings and errors on stderr: no progress lines (upstreams starting, ready or
    /// failing, the model's install, the console's address).
    #[arg(long, global = true)]
    quiet: bool,
    /// How log lines are written on stderr: `text`, or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tool payload size of the first request, in bytes and o200k tokens, per preset.
    Tokens(tokens::TokensArgs),
    /// Index build time, query latency, peak memory and server replacement, by catalog size,
    /// against the reference rankers.
    Search(search::SearchBenchArgs),
    /// The gateway on loopback: MCP search_tools latency (one session and many), REST search
    /// throughput, and what the gateway adds to a tool call; or, with --many-sessions, what many
    /// sessions cost in memory and how many requests 200 sessions get answered.
    Gateway(gateway::GatewayBenchArgs),
    /// The upstream `bench gateway` runs as a process of its own.
    #[command(hide = true)]
    Upstream(gateway::UpstreamArgs),
}

fn main() -> ExitCode {
    // As `toolsearch` sets them; `toolsearch bench` passes on those it set itself.
    model::set_thread_defaults();
    let cli = Cli::parse();
    logging::init(logging::LogSettings::from_args(
        cli.log.as_deref(),
        cli.quiet,
        cli.log_format,
    ));
    let result = match cli.command {
        Command::Tokens(args) => tokens::run(args),
        Command::Search(args) => search::run(args),
        Command::Gateway(args) => gateway::run(args),
        Command::Upstream(args) => gateway::run_upstream(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            if is_bad_input(&err) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
