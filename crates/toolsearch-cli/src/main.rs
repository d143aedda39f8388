//! The `toolsearch` binary: a thin shell over the engine and the gateway.

mod bad_input;
mod catalog_file;
mod commands;
mod logging;
mod model_args;

pub use bad_input::{is_bad_input, BadInput};

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "toolsearch",
    version,
    about = "Search large tool catalogs; serve them to LLM agents through one small MCP surface"
)]
struct Cli {
    /// Log filter, e.g. `debug` or `toolsearch_core=debug` (also RUST_LOG).
    #[arg(long, global = true)]
    log: Option<String>,
    /// Only warnings and errors on stderr: no progress lines (upstreams starting, ready or
    /// failing, the model's install, the console's address).
    #[arg(long, global = true)]
    quiet: bool,
    /// How log lines are written on stderr: `text`, or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Search a catalog file.
    Search(commands::search::SearchArgs),
    /// Measure retrieval quality over evaluation datasets.
    Eval(commands::eval::EvalArgs),
    /// Benchmarks: token cost, search speed and memory.
    ///
    /// The benchmark harness is a separate program, toolsearch-bench, installed next to
    /// toolsearch: `toolsearch bench ARGS` runs it with ARGS (`toolsearch bench --help` lists
    /// its commands).
    #[command(disable_help_flag = true)]
    Bench {
        /// The harness's command and its options.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<OsString>,
    },
    /// Run the MCP gateway (and REST API) over upstream MCP servers.
    Serve(commands::serve::ServeArgs),
    /// Print the JSON Schemas of the search contract every face answers with.
    Schema,
    /// The embedding model: install it, see where it is.
    #[command(subcommand)]
    Model(commands::model::ModelCommand),
    /// Write a gateway config (a starter, or the servers of a Claude Desktop, Cursor or VS Code
    /// file) and print the entry that makes the client start the gateway.
    Init(commands::init::InitArgs),
    /// Sign in to the config's OAuth-protected HTTP servers, see which are signed in, sign out.
    #[command(subcommand)]
    Auth(commands::auth::AuthCommand),
}

fn main() -> ExitCode {
    // The gateway runs jq filters over large outputs in a child process of this binary.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == toolsearch_gateway::offload::JQ_WORKER_ARG)
    {
        return toolsearch_gateway::offload::run_jq_worker();
    }
    model_args::set_thread_defaults();
    let cli = Cli::parse();
    logging::init(logging::LogSettings::from_args(
        cli.log.as_deref(),
        cli.quiet,
        cli.log_format,
    ));
    let result = match cli.command {
        Command::Search(args) => commands::search::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Bench { args } => {
            return commands::bench::run(global_args(&cli.log, cli.quiet, cli.log_format), args)
        }
        Command::Serve(args) => commands::serve::run(args),
        Command::Schema => serde_json::to_string_pretty(&toolsearch_core::contract::schemas())
            .map(|text| println!("{text}"))
            .map_err(Into::into),
        Command::Model(command) => commands::model::run(command),
        Command::Init(args) => commands::init::run(args),
        Command::Auth(command) => commands::auth::run(command),
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

/// The global options given before `bench`, for the harness (which takes the same ones).
fn global_args(log: &Option<String>, quiet: bool, format: logging::LogFormat) -> Vec<OsString> {
    let mut args = Vec::new();
    if let Some(log) = log {
        args.extend(["--log".into(), log.into()]);
    }
    if quiet {
        args.push("--quiet".into());
    }
    if format == logging::LogFormat::Json {
        args.extend(["--log-format".into(), "json".into()]);
    }
    args
}
