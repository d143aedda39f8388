//! Times the embedding of queries one at a time, as a search with a cold query-vector cache does.
//!
//! ```text
//! RAYON_NUM_THREADS=2 CANDLE_NUM_THREADS=1 cargo run --release -p toolsearch-embed \
//!     --example query_latency -- ../shared/eval/datasets/*/queries.jsonl [--cut CHARS] [--model DIR]
//! ```
//!
//! Queries come from JSON-lines files with a `query` field; every few are kept so that about 500
//! are timed (20 more first, untimed). `--cut CHARS` keeps each query's words up to that many
//! characters, as the engine's `max_embedded_query_chars` does (it also drops keyword syntax
//! first). The variables are the ones the `toolsearch` binary sets: a query's matrix products on
//! every core, candle's element-wise pool off.

use std::path::PathBuf;
use std::time::Instant;
use toolsearch_core::embed::Embedder;
use toolsearch_embed::{BertEmbedder, ModelLocation};

fn cut(query: &str, max: usize) -> String {
    let mut out = String::new();
    for word in query.split_whitespace() {
        let needed = if out.is_empty() {
            word.len()
        } else {
            word.len() + 1
        };
        if out.len() + needed > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut files = Vec::new();
    let mut model: Option<PathBuf> = None;
    let mut max_chars = usize::MAX;
    let mut quantized = false;
    let mut check = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quantized" => quantized = true,
            "--no-check" => check = false,
            "--model" => model = args.next().map(PathBuf::from),
            "--cut" => {
                max_chars = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(usize::MAX)
            }
            _ => files.push(PathBuf::from(arg)),
        }
    }
    let mut queries = Vec::new();
    for file in &files {
        if !file.exists() {
            eprintln!(
                "skipped: {} does not exist (the evaluation data lives outside the repository)",
                file.display()
            );
            return Ok(());
        }
        for line in std::fs::read_to_string(file)?.lines() {
            let value: serde_json::Value = serde_json::from_str(line)?;
            if let Some(query) = value["query"].as_str() {
                queries.push(cut(query, max_chars));
            }
        }
    }
    if queries.is_empty() {
        eprintln!("usage: query_latency QUERIES.jsonl... [--cut CHARS] [--model DIR]");
        std::process::exit(2);
    }
    let step = (queries.len() / 500).max(1);
    let queries: Vec<String> = queries.into_iter().step_by(step).collect();

    let location = ModelLocation::resolve(model.as_deref())?;
    let embedder = BertEmbedder::load(&location.dir)?;
    let embed = |query: &str| -> Result<Vec<f32>, toolsearch_core::embed::EmbedError> {
        if quantized {
            embedder.embed_query(query)
        } else {
            Ok(embedder.embed(&[query])?.remove(0))
        }
    };
    for query in queries.iter().take(20) {
        embed(query)?;
    }
    let mut ms = Vec::with_capacity(queries.len());
    let mut cosines = Vec::new();
    for query in &queries {
        let started = Instant::now();
        let vector = embed(query)?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if quantized && check {
            let exact = embedder.embed(&[query.as_str()])?.remove(0);
            cosines.push(toolsearch_core::embed::dot(&vector, &exact));
        }
    }
    if !cosines.is_empty() {
        cosines.sort_by(f32::total_cmp);
        println!(
            "cosine to the f32 vector: min {:.4}, p1 {:.4}, median {:.4}",
            cosines[0],
            cosines[cosines.len() / 100],
            cosines[cosines.len() / 2]
        );
    }
    ms.sort_by(f64::total_cmp);
    let at = |p: usize| ms[(ms.len() * p / 100).min(ms.len() - 1)];
    println!(
        "{} queries, one at a time: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms.len(),
        at(50),
        at(90),
        at(99),
        ms[ms.len() - 1]
    );
    Ok(())
}
