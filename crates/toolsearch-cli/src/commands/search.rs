use crate::catalog_file::load_engine;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use toolsearch_core::{Filters, NamePattern, SearchMode, SearchRequest, SearchResponse};

#[derive(Args)]
pub struct SearchArgs {
    /// Catalog file (MCP tools/list, OpenAI, Anthropic, Gemini or multi-server JSON).
    #[arg(long)]
    catalog: PathBuf,
    /// Force the catalog format instead of detecting it: mcp, openai, anthropic, gemini, multi.
    #[arg(long)]
    format: Option<String>,
    /// keyword (default), regex or exact.
    #[arg(long, default_value = "keyword")]
    mode: String,
    /// Maximum number of results.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Skip this many results (pagination).
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// Only tools of this server (repeatable).
    #[arg(long)]
    server: Vec<String>,
    /// Only tools of this category (repeatable).
    #[arg(long)]
    category: Vec<String>,
    /// Only tools with any of these tags (repeatable).
    #[arg(long)]
    tag: Vec<String>,
    /// Only tools matching `server:*` or `server:tool` patterns (repeatable).
    #[arg(long = "pattern")]
    patterns: Vec<String>,
    /// Drop results whose normalised score (0..1) is below this.
    #[arg(long)]
    threshold: Option<f32>,
    /// Drop results below this fraction of the best score.
    #[arg(long)]
    top_band: Option<f32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The query; empty lists the catalog.
    #[arg(default_value = "")]
    query: String,
}

pub fn run(args: SearchArgs) -> Result<()> {
    let mode: SearchMode = args.mode.parse()?;
    let engine = load_engine(&args.catalog, args.format.as_deref())?;
    let mut request = SearchRequest::new(args.query)
        .mode(mode)
        .limit(args.limit)
        .offset(args.offset)
        .filters(Filters {
            servers: args.server,
            categories: args.category,
            tags: args.tag,
            visible: None,
            patterns: args
                .patterns
                .iter()
                .map(|p| NamePattern::parse(p))
                .collect(),
        });
    request.threshold = args.threshold;
    request.top_band = args.top_band;
    let response = engine.search(&request)?;
    let separator = &engine.config().separator;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&response, separator))?
        );
    } else {
        print_table(&response, separator);
    }
    Ok(())
}

fn to_json(response: &SearchResponse, separator: &str) -> serde_json::Value {
    json!({
        "query": response.query,
        "mode": response.mode,
        "total_matches": response.total_matches,
        "fallback": response.fallback,
        "tools": response.tools.iter().map(|hit| json!({
            "name": hit.tool.public_name(separator),
            "server": hit.tool.server,
            "description": hit.tool.description,
            "score": round(hit.score),
            "matched_on": hit.matched_on,
            "input_schema": hit.tool.input_schema.to_value(),
        })).collect::<Vec<_>>(),
    })
}

fn round(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}

fn print_table(response: &SearchResponse, separator: &str) {
    if response.tools.is_empty() {
        println!("no tools match {:?}", response.query);
        match &response.fallback {
            Some(toolsearch_core::Fallback::Names { names }) => {
                println!("the catalog has: {}", names.join(", "));
            }
            Some(toolsearch_core::Fallback::Categories { categories }) => {
                let list: Vec<String> = categories
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.count))
                    .collect();
                println!("categories: {}", list.join(", "));
            }
            Some(toolsearch_core::Fallback::Servers { servers }) => {
                let list: Vec<String> = servers
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.count))
                    .collect();
                println!("servers: {}", list.join(", "));
            }
            None => {}
        }
        return;
    }
    let names: Vec<String> = response
        .tools
        .iter()
        .map(|h| h.tool.public_name(separator))
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    println!(
        "{:>3}  {:>6}  {:<width$}  {:<24}  DESCRIPTION",
        "#", "SCORE", "NAME", "MATCHED ON"
    );
    for (i, (hit, name)) in response.tools.iter().zip(&names).enumerate() {
        let matched: Vec<&str> = hit.matched_on.iter().map(|m| m.field).collect();
        println!(
            "{:>3}  {:>6.3}  {:<width$}  {:<24}  {}",
            i + 1,
            hit.score,
            truncate(name, width),
            truncate(&matched.join(","), 24),
            truncate(hit.tool.description.lines().next().unwrap_or_default(), 80)
        );
    }
    println!(
        "{} of {} matches",
        response.tools.len(),
        response.total_matches
    );
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}
