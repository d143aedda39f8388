use crate::catalog_file::load_engine;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use toolsearch_core::contract::{self, SearchArgs as Search, SearchOptions, SearchResults};
use toolsearch_core::{Fallback, NamePattern, OneOrMany, SearchMode};

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
    /// Maximum number of results (at most 50).
    #[arg(long, default_value_t = contract::DEFAULT_LIMIT)]
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
    /// Drop results below this fraction of the best score (default 0.5; 0 keeps every match).
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
    let search = Search {
        query: args.query,
        mode: Some(mode),
        server: OneOrMany(args.server),
        category: OneOrMany(args.category),
        tags: OneOrMany(args.tag),
        limit: Some(args.limit),
        offset: Some(args.offset),
    };
    let defaults = SearchOptions::default();
    let options = SearchOptions {
        threshold: args.threshold,
        top_band: args.top_band.or(defaults.top_band),
        patterns: args
            .patterns
            .iter()
            .map(|p| NamePattern::parse(p))
            .collect(),
        ..defaults
    };
    let results = contract::search(&engine, &search, &options)?;
    if args.json {
        // The contract's JSON, byte for byte what the MCP meta-tools and the REST API write.
        println!("{}", serde_json::to_string(&results)?);
    } else {
        print_table(&results);
    }
    Ok(())
}

fn print_table(results: &SearchResults) {
    if results.page.tools.is_empty() {
        println!("no tools match {:?}", results.query);
        match &results.fallback {
            Some(Fallback::Names { names }) => {
                println!("the catalog has: {}", names.join(", "));
            }
            Some(Fallback::Categories { categories }) => {
                let list: Vec<String> = categories
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.count))
                    .collect();
                println!("categories: {}", list.join(", "));
            }
            Some(Fallback::Servers { servers }) => {
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
    let width = results
        .page
        .tools
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    println!(
        "{:>3}  {:>6}  {:<width$}  {:<24}  DESCRIPTION",
        "#", "SCORE", "NAME", "MATCHED ON"
    );
    for (i, tool) in results.page.tools.iter().enumerate() {
        let matched: Vec<&str> = tool.matched_on.iter().map(|m| m.field).collect();
        println!(
            "{:>3}  {:>6.3}  {:<width$}  {:<24}  {}",
            results.page.offset + i + 1,
            tool.score,
            truncate(&tool.name, width),
            truncate(&matched.join(","), 24),
            truncate(tool.description.lines().next().unwrap_or_default(), 80)
        );
    }
    println!(
        "{} of {} matches",
        results.page.returned, results.page.total_matches
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
