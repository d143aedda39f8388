//! `toolsearch bench tokens`: what the tool payload of a request costs, in bytes and in o200k
//! tokens (counted with the tokenizer, not estimated), for full schemas and for each preset. A
//! preset's list is what a gateway with default settings returns to a new session's `tools/list`
//! (its served tools included), counted as the console counts it; its surface adds the
//! `instructions` of the session's `initialize`.

use crate::catalog_file::load_engine;
use anyhow::Result;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use toolsearch_core::{Preset, Scope};
use toolsearch_gateway::config::GatewayConfig;
use toolsearch_gateway::payload::{self, Counter, PresetCost, ProviderFormat, Size, Surface};

#[derive(Args)]
pub struct TokensArgs {
    /// Catalog file (MCP tools/list, OpenAI, Anthropic, Gemini or multi-server JSON).
    #[arg(long)]
    catalog: PathBuf,
    /// Force the catalog format instead of detecting it: mcp, openai, anthropic, gemini, multi.
    #[arg(long)]
    format: Option<String>,
    /// A task to search for; `after_query_tokens` is the cost once its results are in.
    #[arg(long, default_value = "create a new document")]
    query: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// A gateway config whose `toolSearch` settings shape the lists (threshold, the large-output
    /// tools, searchPrompts); default settings without it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    tools: usize,
    full: Size,
    presets: Vec<PresetCost>,
    /// The configured preset (the default without --config), and its first list tool by tool,
    /// in the order it is listed.
    preset: &'static str,
    first_list: Vec<ToolCost>,
}

/// One entry of a tool list.
#[derive(Serialize)]
struct ToolCost {
    name: String,
    tokens: usize,
}

pub fn run(args: TokensArgs) -> Result<()> {
    let engine = load_engine(&args.catalog, args.format.as_deref())?;
    let counter = Counter::o200k().map_err(anyhow::Error::msg)?;
    let format = ProviderFormat::OpenaiChat;
    let full = payload::full_cost(&engine, format, &Scope::all(), &counter)?;
    let config = match &args.config {
        Some(path) => GatewayConfig::load(path).map_err(|e| crate::BadInput(e.to_string()))?,
        None => GatewayConfig::default(),
    };
    let surface = Surface::of_config(&config);
    let cost = |preset, with_payload| {
        payload::preset_cost(
            &engine,
            &surface,
            preset,
            format,
            &args.query,
            &Scope::all(),
            &counter,
            with_payload,
        )
    };
    let presets = Preset::ALL
        .into_iter()
        .map(|preset| cost(preset, false))
        .collect::<Result<Vec<_>, _>>()?;
    let preset = config.disclosure_config().preset;
    let first = cost(preset, true)?;
    let first_list = first
        .payload
        .as_ref()
        .and_then(|payload| payload.as_array())
        .into_iter()
        .flatten()
        .map(|entry| ToolCost {
            name: entry["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            tokens: counter.size(entry).tokens,
        })
        .collect();
    let report = Report {
        tools: engine.catalog().len(),
        full,
        presets,
        preset: preset.as_str(),
        first_list,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, &args.query);
    }
    Ok(())
}

fn print_table(report: &Report, query: &str) {
    let percent = |tokens: usize| {
        if report.full.tokens == 0 {
            0.0
        } else {
            100.0 * tokens as f64 / report.full.tokens as f64
        }
    };
    println!(
        "{} tools; payload = OpenAI Chat Completions `tools` array (compact JSON), o200k tokens",
        report.tools
    );
    println!(
        "full schemas: {} bytes, {} tokens",
        report.full.bytes, report.full.tokens
    );
    println!();
    println!(
        "{:<12} {:>10} {:>10} {:>8} {:>13} {:>13} {:>9} {:>8}",
        "preset", "bytes", "tokens", "% full", "after query", "instructions", "surface", "% full"
    );
    for p in &report.presets {
        println!(
            "{:<12} {:>10} {:>10} {:>7.2}% {:>13} {:>13} {:>9} {:>7.2}%",
            p.preset,
            p.bytes,
            p.tokens,
            percent(p.tokens),
            p.after_query_tokens,
            p.instructions_tokens,
            p.surface_tokens,
            percent(p.surface_tokens)
        );
    }
    let listed: Vec<String> = report
        .first_list
        .iter()
        .map(|tool| format!("{} {}", tool.name, tool.tokens))
        .collect();
    println!();
    println!(
        "{} list, tool by tool (tokens of each entry alone): {}",
        report.preset,
        listed.join(", ")
    );
    println!();
    println!(
        "after query: the tools array once {query:?} has been searched (and, in the add preset, \
         its results added), plus the meta-tool results the model reads"
    );
    println!(
        "a preset's list is a new session's tools/list (with --config's settings, or the defaults): \
         the meta-tools, and the tools the gateway serves itself (large outputs, prompt search) \
         where the list has no call_tool to reach them by"
    );
    println!(
        "surface: the list and the instructions of the same session's initialize, which clients \
         put before the model too"
    );
}
