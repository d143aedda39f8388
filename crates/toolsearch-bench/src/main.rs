//! `toolsearch-bench`: the benchmark harness (token cost, search speed and memory, the gateway on
//! loopback), a program of its own so that none of it is linked into `toolsearch`. Users run it as
//! `toolsearch bench …`, which runs this program from its own folder; it measures through the same
//! faces users run: the engine and the gateway's libraries as `toolsearch` calls them, and the
//! gateway as `toolsearch serve`, the program next to this one.

// What it shares with `toolsearch`, compiled from the same files so that they cannot drift: the
// exit code of bad input, reading a catalog file, and the embedding model's options.
#[path = "../../toolsearch-cli/src/bad_input.rs"]
mod bad_input;
// The harness reads catalogs but never builds an engine under a config's catalog policy.
#[allow(dead_code)]
#[path = "../../toolsearch-cli/src/catalog_file.rs"]
mod catalog_file;
mod gateway;
#[path = "../../toolsearch-cli/src/model_args.rs"]
mod model;
mod search;
mod tokens;

pub use bad_input::{is_bad_input, BadInput};

use clap::{Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::process::ExitCode;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

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

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
enum LogFormat {
    /// One line of text per event (the level, the target, the message and its fields).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the fields.
    Json,
}

fn main() -> ExitCode {
    // The embedding model's threads, as `toolsearch` sets them (docs/BENCHMARKS.md, "Embedding"):
    // a lone query's matrix products split across every core, candle's element-wise pool off.
    // Values the user set are kept; `toolsearch bench` passes on those it set itself.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::set_var("RAYON_NUM_THREADS", cores.to_string());
    }
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    let cli = Cli::parse();
    init_logging(&cli);
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

/// The stderr logger, with `toolsearch`'s settings (crates/toolsearch-cli/src/logging.rs): the
/// user's `--log`, else a valid `RUST_LOG`, else warnings and errors (with or without `--quiet`:
/// none of the progress lines it turns off are written in this process); colours only for a
/// person at a terminal without `NO_COLOR`. The gateway under test logs as `toolsearch serve`.
fn init_logging(cli: &Cli) {
    let directives = cli
        .log
        .clone()
        .or_else(|| {
            std::env::var("RUST_LOG")
                .ok()
                .filter(|value| EnvFilter::try_new(value).is_ok())
        })
        .unwrap_or_else(|| "warn,rmcp::transport::worker=off".to_string());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(directives))
        .with_writer(std::io::stderr);
    let colours = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    // Fails only when a logger is already set, which leaves that one in place.
    let _ = match cli.log_format {
        LogFormat::Text => builder.with_ansi(colours).finish().try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .finish()
            .try_init(),
    };
}
