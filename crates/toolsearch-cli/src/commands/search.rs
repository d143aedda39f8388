use crate::catalog_file::load_engine;
use crate::model_args::{load_for_search, ModelArgs};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use toolsearch_core::contract::{self, SearchArgs as Search, SearchOptions, SearchResults};
use toolsearch_core::{Fallback, NamePattern, OneOrMany, SearchMode};
use toolsearch_embed::{embed_tools, Embedder, VectorCache};

#[derive(Args)]
pub struct SearchArgs {
    /// Catalog file (MCP tools/list, OpenAI, Anthropic, Gemini or multi-server JSON).
    #[arg(long)]
    catalog: PathBuf,
    /// Force the catalog format instead of detecting it: mcp, openai, anthropic, gemini, multi.
    #[arg(long)]
    format: Option<String>,
    /// hybrid (words and meaning; the default when the embedding model is available), keyword,
    /// semantic, regex or exact.
    #[arg(long)]
    mode: Option<String>,
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
    #[command(flatten)]
    model: ModelArgs,
    /// The query; empty lists the catalog. Several (up to 5) search several needs at once, each
    /// alone, in one answer.
    #[arg(default_value = "")]
    query: Vec<String>,
}

pub fn run(args: SearchArgs) -> Result<()> {
    let mode: Option<SearchMode> = args.mode.as_deref().map(str::parse).transpose()?;
    let mut engine = load_engine(&args.catalog, args.format.as_deref())?;
    let wants_meaning = matches!(
        mode,
        None | Some(SearchMode::Hybrid) | Some(SearchMode::Semantic)
    );
    if wants_meaning && args.query.iter().any(|q| !q.trim().is_empty()) {
        if let Some(model) = load_for_search(&args.model) {
            attach_model(&mut engine, model);
        }
    }
    let (query, queries) = match <[String; 1]>::try_from(args.query) {
        Ok([one]) => (one, Vec::new()),
        Err(several) => (String::new(), several),
    };
    let search = Search {
        query,
        queries,
        mode,
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
    } else if results.per_query.is_empty() {
        print_table(&results);
    } else {
        for (i, part) in results.per_query.iter().enumerate() {
            if i > 0 {
                println!();
            }
            println!("{}:", part.query);
            print_table(&one_query(&results, part));
        }
    }
    Ok(())
}

/// One query's part of a search of several, as a search of its own, for the table.
fn one_query(results: &SearchResults, part: &contract::QueryResults) -> SearchResults {
    let tools: Vec<contract::ToolMatch> = part
        .tools
        .iter()
        .filter_map(|name| results.page.tools.iter().find(|t| &t.name == name))
        .cloned()
        .collect();
    SearchResults {
        query: part.query.clone(),
        page: contract::Page {
            total_matches: part.total_matches,
            offset: results.page.offset,
            returned: tools.len(),
            next_offset: part.next_offset,
            tools,
        },
        nothing_fits: part.nothing_fits,
        message: part.message.clone(),
        fallback: part.fallback.clone(),
        per_query: Vec::new(),
        ..results.clone()
    }
}

/// Gives the engine the model and its tools their vectors, from the disk cache where it has them.
/// A failure is a warning: the search runs by words.
fn attach_model(
    engine: &mut toolsearch_core::SearchEngine,
    model: Arc<toolsearch_embed::BertEmbedder>,
) {
    let model_id = model.model_id().to_string();
    let dims = model.dimensions();
    engine.set_embedder(Some(model));
    let path = VectorCache::default_path(&model_id);
    let (mut cache, _) = match &path {
        Some(path) => VectorCache::open(path, &model_id, dims),
        None => VectorCache::open(
            std::env::temp_dir().join("toolsearch-vectors.bin"),
            &model_id,
            dims,
        ),
    };
    let pending = engine.pending_vectors().len();
    if pending > 200 && cache.is_empty() {
        eprintln!("embedding {pending} tools (once: their vectors are cached)");
    }
    match embed_tools(engine, &mut cache) {
        Ok(_) => {
            if let Err(error) = cache.save() {
                eprintln!("warning: the vector cache was not saved: {error}");
            }
        }
        Err(error) => {
            eprintln!("warning: searching by words only, embedding the tools failed: {error}");
            engine.set_embedder(None);
        }
    }
}

/// What the catalog offers instead, when a search found nothing that fits.
fn print_fallback(fallback: Option<&Fallback>) {
    match fallback {
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
}

fn print_table(results: &SearchResults) {
    if results.page.tools.is_empty() {
        println!("no tools match {:?}", results.query);
        print_fallback(results.fallback.as_ref());
        return;
    }
    if results.nothing_fits {
        println!(
            "no tool fits {:?} well; the closest guesses, with low scores:",
            results.query
        );
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
    if results.nothing_fits {
        print_fallback(results.fallback.as_ref());
    }
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
