//! Measures the embedding model on a catalog: load time, tools embedded per second, bytes of
//! vectors per tool, the disk cache's reload, and per-query latency.
//!
//! ```text
//! cargo run --release -p toolsearch-embed --example embed_catalog -- \
//!     ../shared/eval/datasets/toolret-apigen/tools.json [queries.jsonl] [--model DIR]
//! ```
//!
//! The model folder is resolved as everywhere (`--model`, `TOOLSEARCH_MODEL_DIR`, the cache).
//! Queries are read from a JSON-lines file with a `query` field (the catalog's sibling
//! `queries.jsonl` when not given); the first 200 are timed one at a time. `--limit N` embeds only
//! the first N tools; `--batch TEXTS,TOKENS` changes the model's batch limits.

use std::path::{Path, PathBuf};
use std::time::Instant;
use toolsearch_core::embed::{embedding_texts, Embedder, ToolView, VectorSet};
use toolsearch_embed::{BertEmbedder, ModelLocation, VectorCache};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut positional = Vec::new();
    let mut model: Option<PathBuf> = None;
    let mut batch: Option<(usize, usize)> = None;
    let mut limit = usize::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--model" {
            model = args.next().map(PathBuf::from);
        } else if arg == "--batch" {
            // TEXTS,TOKENS
            let value = args.next().unwrap_or_default();
            let mut parts = value.split(',').filter_map(|p| p.parse().ok());
            batch = parts.next().zip(parts.next());
        } else if arg == "--limit" {
            limit = args
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(usize::MAX);
        } else {
            positional.push(PathBuf::from(arg));
        }
    }
    let Some(catalog) = positional.first().cloned() else {
        eprintln!("usage: embed_catalog CATALOG.json [QUERIES.jsonl] [--model DIR]");
        std::process::exit(2);
    };
    if !catalog.exists() {
        eprintln!(
            "skipped: {} does not exist (the evaluation data lives outside the repository)",
            catalog.display()
        );
        return Ok(());
    }
    let queries_path = positional.get(1).cloned().unwrap_or_else(|| {
        catalog
            .parent()
            .unwrap_or(Path::new("."))
            .join("queries.jsonl")
    });

    let location = ModelLocation::resolve(model.as_deref())?;
    let started = Instant::now();
    let mut embedder = BertEmbedder::load(&location.dir)?;
    if let Some((texts, tokens)) = batch {
        embedder = embedder.with_batch_limits(texts, tokens);
    }
    let load_ms = started.elapsed().as_secs_f64() * 1e3;

    let text = std::fs::read_to_string(&catalog)?;
    let mut tools = toolsearch_core::parse_catalog(&text, &catalog.to_string_lossy(), None)?;
    tools.truncate(limit);
    // As the engine embeds a tool: two texts, its purpose and its parameters.
    let texts: Vec<String> = tools
        .iter()
        .flat_map(|tool| {
            let texts = embedding_texts(tool);
            ToolView::ALL.map(|view| texts.get(view).to_string())
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mean_chars =
        texts.iter().map(|t| t.chars().count()).sum::<usize>() as f64 / texts.len().max(1) as f64;

    // Cold: every tool embedded, through the cache as the engine would.
    let scratch =
        std::env::temp_dir().join(format!("toolsearch-embed-bench-{}", std::process::id()));
    let cache_path = VectorCache::path_in(&scratch, embedder.model_id());
    let (mut cache, _) = VectorCache::open(&cache_path, embedder.model_id(), embedder.dimensions());
    let started = Instant::now();
    let (vectors, stats) = cache.embed_all(&embedder, &refs)?;
    let embed_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    cache.save()?;
    let save_ms = started.elapsed().as_secs_f64() * 1e3;
    let file_bytes = std::fs::metadata(&cache_path)?.len();

    // Warm: a restart reads the file and embeds nothing.
    let started = Instant::now();
    let (mut reopened, opened) =
        VectorCache::open(&cache_path, embedder.model_id(), embedder.dimensions());
    let (_, warm) = reopened.embed_all(&embedder, &refs)?;
    let reload_ms = started.elapsed().as_secs_f64() * 1e3;
    let _ = std::fs::remove_dir_all(&scratch);

    let mut set = VectorSet::with_capacity(embedder.dimensions(), vectors.len());
    for vector in &vectors {
        set.push(vector)?;
    }

    let queries: Vec<String> = std::fs::read_to_string(&queries_path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| v["query"].as_str().map(str::to_string))
        .take(200)
        .collect();
    let mut embed_us = Vec::new();
    let mut scan_us = Vec::new();
    for query in &queries {
        let started = Instant::now();
        let vector = embedder.embed(&[query.as_str()])?.remove(0);
        embed_us.push(started.elapsed().as_secs_f64() * 1e6);
        let started = Instant::now();
        let hits = set.top_k(&vector, 10)?;
        scan_us.push(started.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(hits);
    }

    println!(
        "model: {} ({})",
        location.dir.display(),
        embedder.model_id()
    );
    println!("model load: {load_ms:.0} ms");
    println!(
        "catalog: {} tools, embedded texts {mean_chars:.0} chars on average (two per tool)",
        tools.len()
    );
    println!(
        "cold embedding: {} tools ({} texts embedded, {} cached) in {embed_s:.2} s = {:.1} tools/s",
        tools.len(),
        stats.embedded,
        stats.cached,
        tools.len() as f64 / embed_s
    );
    println!(
        "vectors: {} bytes per text as f32; cache file {file_bytes} bytes ({:.0} per tool), saved in {save_ms:.0} ms",
        set.memory_bytes() / set.len().max(1),
        file_bytes as f64 / tools.len().max(1) as f64
    );
    println!(
        "restart: cache {opened:?}, {} embedded, {} reused, {reload_ms:.0} ms",
        warm.embedded, warm.cached
    );
    if !queries.is_empty() {
        println!(
            "queries ({}): embed p50 {:.1} ms, p95 {:.1} ms; dense top-10 scan p50 {:.0} µs",
            queries.len(),
            percentile(&mut embed_us, 0.5) / 1e3,
            percentile(&mut embed_us, 0.95) / 1e3,
            percentile(&mut scan_us, 0.5)
        );
    }
    Ok(())
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let index = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(index).copied().unwrap_or(0.0)
}
