//! `toolsearch bench tokens`: what the tool payload of a request costs, in bytes and in o200k
//! tokens (counted with the tokenizer, not estimated), for full schemas and for each preset.

use crate::catalog_file::load_engine;
use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use tiktoken_rs::CoreBPE;
use toolsearch_core::formats::openai_chat_tools;
use toolsearch_core::{Disclosure, DisclosureConfig, Preset, SearchEngine};

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
}

#[derive(Serialize)]
struct Size {
    bytes: usize,
    tokens: usize,
}

#[derive(Serialize)]
struct PresetCost {
    preset: &'static str,
    bytes: usize,
    tokens: usize,
    after_query_tokens: usize,
}

#[derive(Serialize)]
struct Report {
    tools: usize,
    full: Size,
    presets: Vec<PresetCost>,
}

const SESSION: &str = "bench";

pub fn run(args: TokensArgs) -> Result<()> {
    let engine = load_engine(&args.catalog, args.format.as_deref())?;
    let bpe = tiktoken_rs::o200k_base().context("loading the o200k tokenizer")?;
    let count = |value: &Value| -> Size {
        // Compact JSON: what an HTTP client sends.
        let text = value.to_string();
        Size {
            bytes: text.len(),
            tokens: tokens(&bpe, &text),
        }
    };
    let passthrough = Disclosure::new(DisclosureConfig::default().preset(Preset::Passthrough))?;
    let full = count(&openai_chat_tools(
        &passthrough.visible_tools(SESSION, &engine),
    ));
    let mut presets = Vec::new();
    for preset in Preset::ALL {
        let disclosure = Disclosure::new(DisclosureConfig::default().preset(preset))?;
        let first = count(&openai_chat_tools(
            &disclosure.visible_tools(SESSION, &engine),
        ));
        let read = apply_query(&disclosure, &engine, &args.query)?;
        let after = count(&openai_chat_tools(
            &disclosure.visible_tools(SESSION, &engine),
        ));
        presets.push(PresetCost {
            preset: preset.as_str(),
            bytes: first.bytes,
            tokens: first.tokens,
            after_query_tokens: after.tokens + read.iter().map(|r| count(r).tokens).sum::<usize>(),
        });
    }
    let report = Report {
        tools: engine.catalog().len(),
        full,
        presets,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, &args.query);
    }
    Ok(())
}

fn tokens(bpe: &CoreBPE, text: &str) -> usize {
    bpe.encode_with_special_tokens(text).len()
}

/// Runs `query` the way a model would in this preset and returns the meta-tool results it reads.
/// The session's tool list is changed as a side effect (reveals, the `limit` set).
fn apply_query(disclosure: &Disclosure, engine: &SearchEngine, query: &str) -> Result<Vec<Value>> {
    let run = |tool: &str, args: Value| -> Result<Value> {
        Ok(disclosure.handle(SESSION, tool, args, engine)?.result)
    };
    Ok(match disclosure.preset() {
        Preset::Search => vec![run("search_tools", json!({ "query": query }))?],
        Preset::Progressive => vec![run("tool_search", json!({ "query": query }))?],
        Preset::Add => {
            let found = run("search_tools", json!({ "query": query, "limit": 5 }))?;
            let names: Vec<Value> = found["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["name"].clone())
                .collect();
            let mut read = vec![found];
            if !names.is_empty() {
                read.push(run("add_tool", json!({ "names": names }))?);
            }
            read
        }
        Preset::Limit => vec![run("search_available_tools", json!({ "query": query }))?],
        Preset::Passthrough => Vec::new(),
    })
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
        "{:<12} {:>10} {:>10} {:>8} {:>13}",
        "preset", "bytes", "tokens", "% full", "after query"
    );
    for p in &report.presets {
        println!(
            "{:<12} {:>10} {:>10} {:>7.2}% {:>13}",
            p.preset,
            p.bytes,
            p.tokens,
            percent(p.tokens),
            p.after_query_tokens
        );
    }
    println!();
    println!(
        "after query: the tools array once {query:?} has been searched (and, in the add preset, \
         its results added), plus the meta-tool results the model reads"
    );
}
