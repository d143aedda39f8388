//! `toolsearch bench search`: index build time, warm single-thread query latency, peak memory and
//! the cost of replacing one server's tools, at several catalog sizes, for the engine and the
//! reference rankers on the same catalogs and queries.
//!
//! Each (size, ranker) pair runs in a child process (this binary, re-run with a hidden flag), so
//! the peak RSS it reports belongs to that size alone: a process's high-water mark never goes down.
//!
//! When a Python that can import bm25s and PyStemmer is at hand (`--reference-python`, else
//! `$TOOLSEARCH_PYTHON`, else the test peers' venv; `scripts/install-bench-peers.sh` installs them
//! there), the BM25 library reference runs too, on the same catalog and queries at each size:
//! `bm25s_reference.py` in that Python, under a child of its own like every ranker, and the report
//! gives toolsearch's keyword latency over the library's.

use crate::catalog_file::read_tools;
use crate::model::{load_for_search, ModelArgs};
use crate::BadInput;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use toolsearch_core::{Catalog, SearchConfig, SearchEngine, SearchMode, SearchRequest, Tool};
use toolsearch_embed::{embed_tools, Embedder, VectorCache, PYTHON_ENV};
use toolsearch_eval::synthetic::{self, Pool, Source, SERVER_SIZE};
use toolsearch_eval::{Dataset, RankerKind};

const DEFAULT_DATASETS: &str = "../shared/eval/datasets";
const SEED: u64 = 0x7005_5EA2_C4B3_0001;
/// Results asked for per search, as an agent's search tool would.
const LIMIT: usize = 10;
/// Timed replacements of one server; the figure is their median (segment merges make a few slow).
const REPLACEMENTS: usize = 10;
/// The linear scan is timed on at most this many tool×query pairs per size.
const OVERLAP_BUDGET: usize = 10_000_000;
const OVERLAP_MIN_QUERIES: usize = 50;
const RANKERS: [&str; 3] = ["toolsearch", "overlap", "bm25-plain"];
/// The BM25 library reference: bm25s, run by `BM25S_SCRIPT` in a Python that has it.
const BM25S: &str = "bm25s";
const BM25S_SCRIPT: &str = include_str!("bm25s_reference.py");
const BM25S_INSTALL: &str = "install bm25s and PyStemmer into the test peers' venv with \
     `bash scripts/install-bench-peers.sh`, or point --reference-python (or TOOLSEARCH_PYTHON) at \
     a Python that has them";

#[derive(Args)]
pub struct SearchBenchArgs {
    /// Catalog file to start from instead of the pooled evaluation datasets; grown with synthetic
    /// tools past its size.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Force the catalog format: mcp, openai, anthropic, gemini, multi.
    #[arg(long)]
    format: Option<String>,
    /// Queries, one a line: plain text, or JSON objects with a `query` field (queries.jsonl).
    #[arg(long)]
    queries: Option<PathBuf>,
    /// Catalog sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "500,5000,50000,100000")]
    sizes: Vec<usize>,
    /// At most this many queries (a fixed, deterministic subset).
    #[arg(long, default_value_t = 500)]
    max_queries: usize,
    /// Where the evaluation datasets are (used when --catalog or --queries is not given).
    #[arg(long, default_value = DEFAULT_DATASETS)]
    datasets: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Change one search setting of the toolsearch ranker (repeatable), as `eval --set` does, to
    /// see what a ranking feature costs, e.g. `--set proximity=0`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Catalog size for the hybrid measurement (model load, embedding throughput, restart from the
    /// vector cache, hybrid latency with a cold query-vector cache); 0 skips it. Needs the
    /// embedding model (installed on first use unless --offline).
    #[arg(long, default_value_t = 5000)]
    hybrid_size: usize,
    /// Python that runs the BM25 library reference (bm25s with PyStemmer) on the same catalog and
    /// queries [default: $TOOLSEARCH_PYTHON, else .test-peers/venv/bin/python]; the reference is
    /// left out, with a note, when it cannot import them.
    #[arg(long, value_name = "PYTHON")]
    reference_python: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    /// Measure one size with one ranker in this process and print one JSON line (internal).
    #[arg(long, hide = true)]
    one_size: Option<usize>,
    #[arg(long, hide = true, default_value = "toolsearch")]
    ranker: String,
    /// With --one-size: run the queries this many more times, untimed, so that a profiler
    /// attached to the process sees mostly the search path (internal).
    #[arg(long, hide = true, default_value_t = 0)]
    repeat: usize,
}

/// What one child process measures.
#[derive(Debug, Serialize, Deserialize)]
struct Measurement {
    tools: usize,
    source: String,
    queries: usize,
    build_ms: f64,
    replace_server_ms: Option<f64>,
    replace_server_max_ms: Option<f64>,
    /// The program and the queries, before any tool exists.
    #[serde(default)]
    rss_at_start_mb: Option<f64>,
    rss_before_build_mb: Option<f64>,
    peak_rss_mb: Option<f64>,
    catalog_json_mb: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    errors: usize,
    /// The library and its version, for a reference run in another program (bm25s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    library: Option<String>,
}

#[derive(Serialize)]
struct Report {
    sizes: Vec<SizeReport>,
    /// Absent when skipped or when the embedding model is not available.
    hybrid: Option<HybridMeasurement>,
}

const HYBRID: &str = "hybrid";

/// What the hybrid child measures, in the order it happens.
#[derive(Debug, Serialize, Deserialize)]
struct HybridMeasurement {
    tools: usize,
    source: String,
    queries: usize,
    model: String,
    /// Files read and hashed, weights built.
    model_load_ms: f64,
    /// Every tool embedded with no cache, as the gateway's first start does.
    embed_seconds: f64,
    /// Tools with both their vectors, per second of `embed_seconds`.
    tools_per_second: f64,
    /// Texts the model embedded: two per tool (`embedding_texts`).
    texts_embedded: usize,
    vector_bytes_per_tool: f64,
    cache_save_ms: f64,
    /// A second start over the same tools: model load, keyword index build, vectors from the
    /// disk cache; hybrid-ready at the end.
    restart_model_load_ms: f64,
    restart_build_ms: f64,
    restart_vectors_ms: f64,
    restart_total_ms: f64,
    restart_embedded: usize,
    /// Hybrid search, each query's first search (its vector not cached: embedding included).
    cold: Latency,
    /// The same queries again (their vectors cached): keyword, dense scan and fusion.
    warm: Latency,
    /// The query encoder alone on the text each search embeds: the rest of `cold` is `warm`.
    #[serde(default)]
    encoder: Latency,
    /// Keyword mode on the same engine, warm.
    keyword: Latency,
    /// Searches that did not run as hybrid or failed, and encodings (`encoder`) that failed.
    errors: usize,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Latency {
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

impl Latency {
    fn of(values: Vec<f64>) -> Self {
        let (p50_us, p99_us, max_us) = percentiles(values);
        Self {
            p50_us,
            p99_us,
            max_us,
        }
    }
}

#[derive(Serialize)]
struct SizeReport {
    tools: usize,
    source: String,
    build_ms: f64,
    replace_server_ms: Option<f64>,
    peak_rss_mb: Option<f64>,
    rss_at_start_mb: Option<f64>,
    rss_before_build_mb: Option<f64>,
    catalog_json_mb: f64,
    rankers: Vec<RankerLatency>,
    /// toolsearch's keyword p50 (and p99) over the BM25 library's (bm25s) on the same catalog and
    /// queries; null when the library was not measured.
    keyword_p50_over_bm25s: Option<f64>,
    keyword_p99_over_bm25s: Option<f64>,
}

#[derive(Serialize)]
struct RankerLatency {
    ranker: String,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    build_ms: f64,
    peak_rss_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    library: Option<String>,
}

pub fn run(args: SearchBenchArgs) -> Result<()> {
    // Settings are checked here, before any child runs, so a typo fails fast.
    search_config(&args)?;
    if let Some(size) = args.one_size {
        if args.ranker == HYBRID {
            println!("{}", serde_json::to_string(&measure_hybrid(&args, size)?)?);
            return Ok(());
        }
        if args.ranker == BM25S {
            println!("{}", serde_json::to_string(&measure_bm25s(&args, size)?)?);
            return Ok(());
        }
        let measurement = measure(&args, size)?;
        println!("{}", serde_json::to_string(&measurement)?);
        return Ok(());
    }
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        return Err(BadInput("--sizes needs positive catalog sizes, e.g. 500,5000".into()).into());
    }
    if (args.catalog.is_none() || args.queries.is_none()) && !args.datasets.is_dir() {
        eprintln!(
            "note: {} not found; measuring synthetic tools and queries only (source `synthetic`)",
            args.datasets.display()
        );
    }
    let exe = std::env::current_exe().context("finding this program to run each size")?;
    let mut reference = reference_python(&args);
    let mut sizes = Vec::new();
    let mut details = Vec::new();
    for &size in &args.sizes {
        let mut per_ranker = Vec::new();
        for ranker in RANKERS {
            if !args.json {
                eprintln!("measuring {ranker} at {size} tools ...");
            }
            per_ranker.push((ranker, child(&exe, &args, size, ranker)?));
        }
        if let Some(python) = &reference {
            if !args.json {
                eprintln!("measuring {BM25S} at {size} tools ...");
            }
            match child_bm25s(&exe, &args, size, python) {
                Ok(m) => per_ranker.push((BM25S, m)),
                Err(e) => {
                    eprintln!("note: the BM25 library reference is left out from here on: {e:#}");
                    reference = None;
                }
            }
        }
        let engine = &per_ranker[0].1;
        let bm25s = per_ranker
            .iter()
            .find(|(name, _)| *name == BM25S)
            .map(|(_, m)| m);
        sizes.push(SizeReport {
            tools: engine.tools,
            source: engine.source.clone(),
            build_ms: engine.build_ms,
            replace_server_ms: engine.replace_server_ms,
            peak_rss_mb: engine.peak_rss_mb,
            rss_at_start_mb: engine.rss_at_start_mb,
            rss_before_build_mb: engine.rss_before_build_mb,
            catalog_json_mb: engine.catalog_json_mb,
            rankers: per_ranker
                .iter()
                .map(|(name, m)| RankerLatency {
                    ranker: name.to_string(),
                    p50_us: m.p50_us,
                    p99_us: m.p99_us,
                    max_us: m.max_us,
                    build_ms: m.build_ms,
                    peak_rss_mb: m.peak_rss_mb,
                    library: m.library.clone(),
                })
                .collect(),
            keyword_p50_over_bm25s: bm25s.map(|b| ratio(engine.p50_us, b.p50_us)),
            keyword_p99_over_bm25s: bm25s.map(|b| ratio(engine.p99_us, b.p99_us)),
        });
        details.push(per_ranker);
    }
    let hybrid = if args.hybrid_size == 0 || args.model.no_semantic {
        None
    } else {
        if !args.json {
            eprintln!("measuring hybrid at {} tools ...", args.hybrid_size);
        }
        child_hybrid(&exe, &args)?
    };
    let report = Report { sizes, hybrid };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, &details);
        if let Some(hybrid) = &report.hybrid {
            print_hybrid(hybrid);
        }
    }
    Ok(())
}

/// This program, re-run to measure one size with one ranker, with the workload's options.
fn child_command(exe: &Path, args: &SearchBenchArgs, size: usize, ranker: &str) -> Command {
    let mut command = Command::new(exe);
    command.args(["search", "--one-size", &size.to_string()]);
    command.args(["--ranker", ranker]);
    command.args(["--max-queries", &args.max_queries.to_string()]);
    command.arg("--datasets").arg(&args.datasets);
    if let Some(catalog) = &args.catalog {
        command.arg("--catalog").arg(catalog);
    }
    if let Some(format) = &args.format {
        command.args(["--format", format]);
    }
    if let Some(queries) = &args.queries {
        command.arg("--queries").arg(queries);
    }
    for setting in &args.settings {
        command.args(["--set", setting]);
    }
    command
}

fn child(exe: &Path, args: &SearchBenchArgs, size: usize, ranker: &str) -> Result<Measurement> {
    run_child(child_command(exe, args, size, ranker), exe, size, ranker)
}

/// The BM25 library reference at one size, in a child that runs it in `python`.
fn child_bm25s(
    exe: &Path,
    args: &SearchBenchArgs,
    size: usize,
    python: &Path,
) -> Result<Measurement> {
    let mut command = child_command(exe, args, size, BM25S);
    command.arg("--reference-python").arg(python);
    run_child(command, exe, size, BM25S)
}

fn run_child(mut command: Command, exe: &Path, size: usize, ranker: &str) -> Result<Measurement> {
    let output = command
        .output()
        .with_context(|| format!("running {} for {size} tools", exe.display()))?;
    if !output.status.success() {
        bail!(
            "measuring {ranker} at {size} tools failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .with_context(|| format!("reading the measurement of {ranker} at {size} tools: {line}"))
}

/// Runs the hybrid measurement in a child; `None` (with a note) when the model is not available.
fn child_hybrid(exe: &Path, args: &SearchBenchArgs) -> Result<Option<HybridMeasurement>> {
    let mut command = child_command(exe, args, args.hybrid_size, HYBRID);
    if let Some(model) = &args.model.model {
        command.arg("--model").arg(model);
    }
    if args.model.offline {
        command.arg("--offline");
    }
    // Model install progress and warnings go straight to the terminal.
    command.stderr(std::process::Stdio::inherit());
    let output = command
        .output()
        .with_context(|| format!("running {} for the hybrid measurement", exe.display()))?;
    if !output.status.success() {
        bail!("measuring hybrid at {} tools failed", args.hybrid_size);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    if line == "null" {
        eprintln!("note: hybrid not measured: the embedding model is not available");
        return Ok(None);
    }
    serde_json::from_str(line)
        .map(Some)
        .with_context(|| format!("reading the hybrid measurement: {line}"))
}

/// The Python that runs the BM25 library reference: `--reference-python`, else
/// `$TOOLSEARCH_PYTHON`, else the test peers' venv (`$TOOLSEARCH_TEST_PEERS`, else `.test-peers`,
/// from the current folder), when it can import bm25s and Stemmer. Otherwise `None`, after one
/// line saying why and how to install them.
fn reference_python(args: &SearchBenchArgs) -> Option<PathBuf> {
    let from_env = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
    let python = args
        .reference_python
        .clone()
        .or_else(|| from_env(PYTHON_ENV).map(PathBuf::from))
        .unwrap_or_else(|| {
            from_env("TOOLSEARCH_TEST_PEERS")
                .map_or_else(|| PathBuf::from(".test-peers"), PathBuf::from)
                .join("venv/bin/python")
        });
    let why = match Command::new(&python)
        .args(["-c", "import bm25s, Stemmer"])
        .output()
    {
        Ok(output) if output.status.success() => return Some(python),
        Ok(_) => format!("{} cannot import bm25s and Stemmer", python.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("no Python at {}", python.display())
        }
        Err(e) => format!("cannot run {}: {e}", python.display()),
    };
    eprintln!("note: the BM25 library reference (bm25s) is not measured: {why}; {BM25S_INSTALL}");
    None
}

/// The BM25 library at one size: the workload's tools as the published reference's texts and
/// its queries, handed to `BM25S_SCRIPT` in `--reference-python` through a temporary file.
fn measure_bm25s(args: &SearchBenchArgs, size: usize) -> Result<Measurement> {
    let Some(python) = &args.reference_python else {
        return Err(BadInput(format!("--ranker {BM25S} needs --reference-python")).into());
    };
    let Workload {
        tools,
        source,
        queries,
    } = workload(args, size)?;
    let catalog_json_mb = catalog_json_bytes(&tools)? as f64 / MIB;
    #[derive(Serialize)]
    struct Input<'a> {
        k: usize,
        texts: Vec<String>,
        queries: &'a [String],
    }
    let input = Input {
        k: LIMIT,
        texts: tools.iter().map(reference_text).collect(),
        queries: &queries,
    };
    let mut file = tempfile::NamedTempFile::new()
        .context("making a temporary file for the bm25s reference's input")?;
    serde_json::to_writer(std::io::BufWriter::new(file.as_file_mut()), &input)
        .context("writing the bm25s reference's input")?;
    drop(input);
    let output = Command::new(python)
        .arg("-c")
        .arg(BM25S_SCRIPT)
        .arg(file.path())
        // One thread, as every ranker here runs.
        .envs([
            ("OMP_NUM_THREADS", "1"),
            ("OPENBLAS_NUM_THREADS", "1"),
            ("MKL_NUM_THREADS", "1"),
        ])
        .output()
        .with_context(|| format!("running {} for the bm25s reference", python.display()))?;
    if !output.status.success() {
        bail!(
            "{} running the bm25s reference exited with {}: {}",
            python.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let out = parse_bm25s_output(&String::from_utf8_lossy(&output.stdout), queries.len())?;
    let (p50_us, p99_us, max_us) = percentiles(out.latencies_us);
    Ok(Measurement {
        tools: tools.len(),
        source,
        queries: queries.len(),
        build_ms: out.build_ms,
        replace_server_ms: None,
        replace_server_max_ms: None,
        rss_at_start_mb: out.rss_at_start_mb,
        rss_before_build_mb: out.rss_before_build_mb,
        peak_rss_mb: out.peak_rss_mb,
        catalog_json_mb,
        p50_us,
        p99_us,
        max_us,
        errors: out.errors,
        library: Some(out.library),
    })
}

/// What `BM25S_SCRIPT` prints, as one JSON line.
#[derive(Debug, Deserialize)]
struct Bm25sOutput {
    library: String,
    build_ms: f64,
    /// One per query, in order, in µs.
    latencies_us: Vec<f64>,
    errors: usize,
    rss_at_start_mb: Option<f64>,
    rss_before_build_mb: Option<f64>,
    peak_rss_mb: Option<f64>,
}

/// The last line of the script's output, which must have timed every one of `queries`.
fn parse_bm25s_output(stdout: &str, queries: usize) -> Result<Bm25sOutput> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let out: Bm25sOutput = serde_json::from_str(line).with_context(|| {
        format!("reading the bm25s reference's output (one JSON line expected): {line:?}")
    })?;
    if out.latencies_us.len() != queries {
        bail!(
            "the bm25s reference timed {} queries of {queries}",
            out.latencies_us.len()
        );
    }
    if out.errors > queries {
        bail!(
            "the bm25s reference counted {} errors in {queries} queries",
            out.errors
        );
    }
    Ok(out)
}

/// A tool's text as the published BM25 library reference indexed it: the name split into words
/// (at `_`, `-`, `.` and camelCase humps), the description, then each parameter's name, split
/// the same way, and description.
fn reference_text(tool: &Tool) -> String {
    let mut text = split_name(tool.name());
    let mut push = |part: &str| {
        if !part.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(part);
        }
    };
    push(tool.description());
    for (name, description) in tool.parameters() {
        push(&split_name(&name));
        push(&description);
    }
    text
}

/// `getHTTPResponse_v2.list-all` → `get HTTP Response v2 list all`.
fn split_name(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if matches!(c, '_' | '-' | '.') {
            out.push(' ');
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p)) {
            let next = chars.get(i + 1).copied();
            let hump = (prev.is_lowercase() || prev.is_numeric()) && c.is_uppercase();
            // HTTPResponse: a run of capitals ends before the one that starts a word.
            let acronym_end =
                prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase);
            if hump || acronym_end {
                out.push(' ');
            }
        }
        out.push(c);
    }
    out
}

/// `ours / theirs`, guarded against a zero denominator.
fn ratio(ours: f64, theirs: f64) -> f64 {
    ours / theirs.max(f64::EPSILON)
}

/// Model load, cold embedding of the whole catalog, a restart from the vector cache, and hybrid
/// latency with a cold and a warm query-vector cache. `None` when the model is not available.
fn measure_hybrid(args: &SearchBenchArgs, size: usize) -> Result<Option<HybridMeasurement>> {
    let Workload {
        tools,
        source,
        mut queries,
    } = workload(args, size)?;
    // Each query once, so that its first search really embeds it.
    let mut seen = std::collections::HashSet::new();
    queries.retain(|q| seen.insert(q.clone()));
    let config = search_config(args)?;
    let cache_dir = tempfile::tempdir().context("making a folder for the vector cache")?;

    let started = Instant::now();
    let Some(model) = load_for_search(&args.model) else {
        return Ok(None);
    };
    let model_load_ms = ms(started);
    let model_id = model.model_id().to_string();
    let dims = model.dimensions();
    let cache_path = VectorCache::path_in(cache_dir.path(), &model_id);

    let mut engine =
        SearchEngine::from_catalog(Catalog::from_tools(tools.clone())?, config.clone())?;
    engine.set_embedder(Some(model));
    let (mut cache, _) = VectorCache::open(&cache_path, &model_id, dims);
    let started = Instant::now();
    let stats = embed_tools(&mut engine, &mut cache)?;
    let embed_seconds = started.elapsed().as_secs_f64();
    // Each tool is two texts (`embedding_texts`); a tool counts once both have their vectors.
    let tools_embedded = engine.vector_status().ready;
    let texts_embedded = stats.embedded;
    let vector_bytes_per_tool =
        engine.vector_memory_bytes() as f64 / engine.catalog().len().max(1) as f64;
    let started = Instant::now();
    cache.save()?;
    let cache_save_ms = ms(started);
    drop(engine);

    // The restart: everything built again, the vectors read back.
    let restart = Instant::now();
    let Some(model) = load_for_search(&args.model) else {
        return Ok(None);
    };
    let restart_model_load_ms = ms(restart);
    let started = Instant::now();
    let mut engine = SearchEngine::from_catalog(Catalog::from_tools(tools)?, config)?;
    let restart_build_ms = ms(started);
    engine.set_embedder(Some(model));
    let started = Instant::now();
    let (mut cache, _) = VectorCache::open(&cache_path, &model_id, dims);
    let restart_stats = embed_tools(&mut engine, &mut cache)?;
    let restart_vectors_ms = ms(started);
    let restart_total_ms = ms(restart);

    let mut errors = 0;
    let mut search = |q: &str, mode: SearchMode| {
        let started = Instant::now();
        let response = engine.search(&SearchRequest::new(q).mode(mode).limit(LIMIT));
        let us = started.elapsed().as_secs_f64() * 1e6;
        if !matches!(&response, Ok(r) if r.mode == mode) {
            errors += 1;
        }
        us
    };
    let mut cold = Vec::with_capacity(queries.len());
    let mut warm = Vec::with_capacity(queries.len());
    for q in &queries {
        cold.push(search(q, SearchMode::Hybrid));
        warm.push(search(q, SearchMode::Hybrid));
    }
    for q in &queries {
        search(q, SearchMode::Keyword);
    }
    let keyword = queries
        .iter()
        .map(|q| search(q, SearchMode::Keyword))
        .collect();
    // The model alone on the same texts, after the searches (so the searches' first embedding
    // of each query is a cold one): what of a cold search is the encoder's.
    let mut encoder = Vec::with_capacity(queries.len());
    if let Some(model) = engine.embedder().cloned() {
        for q in &queries {
            let text = engine.embedded_query_text(q);
            if text.is_empty() {
                continue;
            }
            let started = Instant::now();
            if model.embed_query(&text).is_err() {
                errors += 1;
            }
            encoder.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(Some(HybridMeasurement {
        tools: engine.catalog().len(),
        source,
        queries: queries.len(),
        model: model_id,
        model_load_ms,
        embed_seconds,
        tools_per_second: tools_embedded as f64 / embed_seconds.max(f64::EPSILON),
        texts_embedded,
        vector_bytes_per_tool,
        cache_save_ms,
        restart_model_load_ms,
        restart_build_ms,
        restart_vectors_ms,
        restart_total_ms,
        restart_embedded: restart_stats.embedded,
        cold: Latency::of(cold),
        warm: Latency::of(warm),
        encoder: Latency::of(encoder),
        keyword: Latency::of(keyword),
        errors,
    }))
}

fn print_hybrid(h: &HybridMeasurement) {
    println!();
    println!(
        "Hybrid at {} tools ({}), {} distinct queries, model {}:",
        h.tools, h.source, h.queries, h.model
    );
    println!();
    println!("| measure | figure |");
    println!("|---|---:|");
    println!("| model load | {:.0} ms |", h.model_load_ms);
    println!(
        "| embedding every tool, no cache | {:.1} s, {:.1} tools/s |",
        h.embed_seconds, h.tools_per_second
    );
    println!(
        "| vectors in memory | {:.0} bytes per tool |",
        h.vector_bytes_per_tool
    );
    println!("| vector cache saved | {:.0} ms |", h.cache_save_ms);
    println!(
        "| restart, hybrid-ready: model load + index build + vectors from the cache | {:.0} + {:.0} + {:.0} = {:.0} ms ({} embedded) |",
        h.restart_model_load_ms,
        h.restart_build_ms,
        h.restart_vectors_ms,
        h.restart_total_ms,
        h.restart_embedded
    );
    for (name, l) in [
        ("hybrid search, query vector not cached", &h.cold),
        ("hybrid search, query vector cached", &h.warm),
        ("the query encoder alone, same texts", &h.encoder),
        ("keyword search, same engine", &h.keyword),
    ] {
        println!(
            "| {name}: p50 / p99 / max | {} / {} / {} |",
            us(l.p50_us),
            us(l.p99_us),
            us(l.max_us)
        );
    }
    if h.errors > 0 {
        println!(
            "| searches that failed or did not run as asked | {} |",
            h.errors
        );
    }
}

/// The default search settings with each `--set KEY=VALUE` applied, as `toolsearch eval --set`
/// applies them.
fn search_config(args: &SearchBenchArgs) -> Result<SearchConfig> {
    let mut config = SearchConfig::default();
    for setting in &args.settings {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| BadInput(format!("--set {setting}: expected KEY=VALUE")))?;
        config.set(key.trim(), value.trim())?;
    }
    Ok(config)
}

/// The catalog and queries of one size, built the same way in every child.
struct Workload {
    tools: Vec<Tool>,
    source: String,
    queries: Vec<String>,
}

fn workload(args: &SearchBenchArgs, size: usize) -> Result<Workload> {
    let need_datasets = args.catalog.is_none() || args.queries.is_none();
    let pool = if need_datasets && args.datasets.is_dir() {
        let mut datasets = Vec::new();
        for dir in Dataset::discover(&args.datasets)? {
            datasets.push(Dataset::load(&dir)?);
        }
        Some(Pool::new(&datasets))
    } else {
        if need_datasets {
            eprintln!(
                "note: {} not found; using synthetic tools and queries only",
                args.datasets.display()
            );
        }
        None
    };
    let (base, base_name) = match (&args.catalog, &pool) {
        (Some(path), _) => {
            // Tools without a server are grouped into servers of `SERVER_SIZE`, as when pooling.
            let file = Dataset {
                name: "file".into(),
                tools: read_tools(path, args.format.as_deref())?,
                queries: Vec::new(),
                skipped_unnamed: 0,
            };
            (Pool::new(&[file]).sample(size, SEED), "file")
        }
        (None, Some(pool)) => (pool.sample(size, SEED), "pooled"),
        (None, None) => (Vec::new(), ""),
    };
    let source = match (base.len(), base_name) {
        (_, "") => Source::Synthetic.as_str().to_string(),
        (n, "pooled") if n >= size => Source::Pooled.as_str().to_string(),
        (_, "pooled") => Source::PooledSynthetic.as_str().to_string(),
        (n, name) if n >= size => name.to_string(),
        (_, name) => format!("{name}+synthetic"),
    };
    let queries = match (&args.queries, &pool) {
        (Some(path), _) => read_queries(path)?,
        (None, Some(pool)) => pool.queries.clone(),
        (None, None) => synthetic::synthetic_queries(args.max_queries, SEED),
    };
    let queries = synthetic::sample_queries(&queries, args.max_queries, SEED);
    if queries.is_empty() {
        return Err(BadInput("no queries to run; check --queries".into()).into());
    }
    let tools = synthetic::catalog(&base, size, SEED);
    Ok(Workload {
        tools,
        source,
        queries,
    })
}

fn read_queries(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        BadInput(format!(
            "cannot read queries {}: {e}; check the path",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('{') {
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| BadInput(format!("{} line {}: {e}", path.display(), i + 1)))?;
            match value.get("query").and_then(|q| q.as_str()) {
                Some(q) => out.push(q.to_string()),
                None => {
                    return Err(BadInput(format!(
                        "{} line {}: a JSON line needs a string `query` field",
                        path.display(),
                        i + 1
                    ))
                    .into())
                }
            }
        } else {
            out.push(line.to_string());
        }
    }
    Ok(out)
}

/// Bytes of the tools as one compact JSON array (name, description, inputSchema, server), counted
/// without building the text.
fn catalog_json_bytes(tools: &[Tool]) -> Result<u64> {
    #[derive(Serialize)]
    struct Wire<'a> {
        #[serde(skip_serializing_if = "str::is_empty")]
        server: &'a str,
        name: &'a str,
        description: &'a str,
        #[serde(rename = "inputSchema")]
        input_schema: &'a toolsearch_core::ToolSchema,
    }
    struct Counter(u64);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let wire: Vec<Wire> = tools
        .iter()
        .map(|t| Wire {
            server: t.server(),
            name: t.name(),
            description: t.description(),
            input_schema: t.input_schema(),
        })
        .collect();
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, &wire)?;
    Ok(counter.0)
}

const MIB: f64 = 1024.0 * 1024.0;

/// A line of /proc/self/status in MiB (Linux only).
/// Resets the kernel's peak-RSS counter (`VmHWM`) to the current RSS (Linux 4.0+; elsewhere the
/// peak simply keeps counting from the start of the process).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn proc_status_mb(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0 / MIB)
}

/// Queries the linear scan is timed on at this size.
fn overlap_queries(tools: usize, queries: usize) -> usize {
    (OVERLAP_BUDGET / tools.max(1))
        .max(OVERLAP_MIN_QUERIES)
        .min(queries)
}

fn measure(args: &SearchBenchArgs, size: usize) -> Result<Measurement> {
    let rss_at_start_mb = proc_status_mb("VmRSS:");
    let Workload {
        tools,
        source,
        mut queries,
    } = workload(args, size)?;
    let count = tools.len();
    let catalog_json_mb = catalog_json_bytes(&tools)? as f64 / MIB;
    let kind: RankerKind = args
        .ranker
        .parse()
        .map_err(|e: toolsearch_eval::EvalError| BadInput(e.to_string()))?;
    if kind == RankerKind::Overlap {
        queries.truncate(overlap_queries(count, queries.len()));
    }
    // glibc keeps what making the workload freed (parsed datasets: 16 MB at 100,000 tools); handed
    // back, RSS before the build is the tools alone (the peak does not move: the build reused it).
    toolsearch_gateway::release_freed_memory();
    let rss_before_build_mb = proc_status_mb("VmRSS:");
    // The peak counts from here: what making the workload took (datasets parsed, synthetic tools
    // generated, the JSON size counted) is the benchmark's, not the engine's.
    reset_peak_rss();
    let mut m = Measurement {
        tools: count,
        source,
        queries: queries.len(),
        build_ms: 0.0,
        replace_server_ms: None,
        replace_server_max_ms: None,
        rss_at_start_mb,
        rss_before_build_mb,
        peak_rss_mb: None,
        catalog_json_mb,
        p50_us: 0.0,
        p99_us: 0.0,
        max_us: 0.0,
        errors: 0,
        library: None,
    };
    if kind == RankerKind::Toolsearch {
        let started = Instant::now();
        let catalog = Catalog::from_tools(tools)?;
        let mut engine = SearchEngine::from_catalog(catalog, search_config(args)?)?;
        m.build_ms = ms(started);
        let (latencies, errors) = time_queries(&queries, |q| {
            engine.search(&SearchRequest::new(q).limit(LIMIT)).is_ok()
        });
        m.errors = errors;
        (m.p50_us, m.p99_us, m.max_us) = percentiles(latencies);
        for _ in 0..args.repeat {
            for q in &queries {
                std::hint::black_box(engine.search(&SearchRequest::new(q.as_str()).limit(LIMIT)))
                    .ok();
            }
        }
        let (median, max) = replace_times(&mut engine)?;
        m.replace_server_ms = Some(median);
        m.replace_server_max_ms = Some(max);
    } else {
        let started = Instant::now();
        let ranker = kind.build(&tools, &search_config(args)?, None)?;
        m.build_ms = ms(started);
        drop(tools);
        let (latencies, errors) = time_queries(&queries, |q| ranker.rank(q, LIMIT).is_ok());
        m.errors = errors;
        (m.p50_us, m.p99_us, m.max_us) = percentiles(latencies);
    }
    m.peak_rss_mb = proc_status_mb("VmHWM:");
    Ok(m)
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

/// Runs every query once to warm up, then once timed; returns the latencies in µs and how many
/// searches returned an error.
fn time_queries(queries: &[String], mut search: impl FnMut(&str) -> bool) -> (Vec<f64>, usize) {
    for q in queries {
        std::hint::black_box(search(q));
    }
    let mut errors = 0;
    let latencies = queries
        .iter()
        .map(|q| {
            let started = Instant::now();
            let ok = std::hint::black_box(search(q));
            let us = started.elapsed().as_secs_f64() * 1e6;
            errors += usize::from(!ok);
            us
        })
        .collect();
    (latencies, errors)
}

/// p50, p99 and maximum by nearest rank; zeros for no values.
pub(super) fn percentiles(mut values: Vec<f64>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let rank = (p * values.len() as f64).ceil() as usize;
        values[rank.clamp(1, values.len()) - 1]
    };
    (at(0.50), at(0.99), values[values.len() - 1])
}

/// Replaces a server of `SERVER_SIZE` tools (or the largest server) `REPLACEMENTS` times with
/// fresh tools, alternating two versions so every replacement changes the index; returns the
/// median and the maximum in ms.
fn replace_times(engine: &mut SearchEngine) -> Result<(f64, f64)> {
    let server = {
        let catalog = engine.catalog();
        let sized = catalog
            .servers()
            .find(|s| catalog.server_tools(s).len() == SERVER_SIZE);
        let largest = catalog
            .servers()
            .max_by_key(|s| catalog.server_tools(s).len());
        match sized.or(largest) {
            Some(s) => s.to_string(),
            None => bail!("the catalog is empty: nothing to replace"),
        }
    };
    let versions = [
        synthetic::synthetic_server(&server, SEED ^ 1),
        synthetic::synthetic_server(&server, SEED ^ 2),
    ];
    let mut times = Vec::with_capacity(REPLACEMENTS);
    for i in 0..REPLACEMENTS {
        let tools = versions[i % 2].clone();
        let started = Instant::now();
        engine.replace_server(&server, tools)?;
        times.push(ms(started));
    }
    let (median, _, max) = percentiles(times);
    Ok((median, max))
}

fn print_table(report: &Report, details: &[Vec<(&str, Measurement)>]) {
    println!(
        "| tools | source | build | replace 50 (median / max) | RSS at start | + tools | + index (peak) | peak RSS | catalog JSON | engine / JSON | peak / JSON |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (size, per_ranker) in report.sizes.iter().zip(details) {
        let engine = &per_ranker[0].1;
        let diff = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        let ratio = |mb: Option<f64>| {
            mb.map(|mb| format!("{:.2}×", mb / size.catalog_json_mb.max(f64::EPSILON)))
                .unwrap_or_else(|| "n/a".into())
        };
        println!(
            "| {} | {} | {:.0} ms | {} / {} | {} | {} | {} | {} | {:.1} MB | {} | {} |",
            size.tools,
            size.source,
            size.build_ms,
            opt(size.replace_server_ms, "ms"),
            opt(engine.replace_server_max_ms, "ms"),
            opt(engine.rss_at_start_mb, "MB"),
            opt(
                diff(engine.rss_before_build_mb, engine.rss_at_start_mb),
                "MB"
            ),
            opt(diff(engine.peak_rss_mb, engine.rss_before_build_mb), "MB"),
            opt(size.peak_rss_mb, "MB"),
            size.catalog_json_mb,
            ratio(diff(engine.peak_rss_mb, engine.rss_at_start_mb)),
            ratio(size.peak_rss_mb),
        );
    }
    println!();
    println!("| tools | ranker | queries | build | p50 | p99 | max | p50 vs toolsearch | p99 vs toolsearch |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (size, per_ranker) in report.sizes.iter().zip(details) {
        let engine = &per_ranker[0].1;
        for (name, m) in per_ranker {
            let ratio = |theirs: f64, ours: f64| {
                if *name == "toolsearch" {
                    "—".to_string()
                } else {
                    format!("{:.1}×", theirs / ours.max(f64::EPSILON))
                }
            };
            println!(
                "| {} | {} | {}{} | {:.0} ms | {} | {} | {} | {} | {} |",
                size.tools,
                name,
                m.queries,
                if m.errors > 0 {
                    format!(" ({} errors)", m.errors)
                } else {
                    String::new()
                },
                m.build_ms,
                us(m.p50_us),
                us(m.p99_us),
                us(m.max_us),
                ratio(m.p50_us, engine.p50_us),
                ratio(m.p99_us, engine.p99_us),
            );
        }
    }
    println!();
    println!(
        "Latency: one thread, warm (each query run once before timing), {LIMIT} results a search. \
         Ratios are the reference ranker's latency over toolsearch's (above 1× = toolsearch faster). \
         The linear scan (overlap) is timed on at most {OVERLAP_BUDGET} tool×query pairs per size \
         (at least {OVERLAP_MIN_QUERIES} queries). Build includes Catalog::from_tools. Replace: \
         {REPLACEMENTS} replacements of one {SERVER_SIZE}-tool server. Memory: RSS of the engine's \
         process at start (program and queries), after the tools are made (+ tools, with the \
         evaluation datasets they were pooled from), and its peak from the start of the build on \
         (+ index, VmHWM); engine = peak minus start. MB = 2^20 bytes."
    );
    print_bm25s(report, details);
}

/// toolsearch against the BM25 library, at the sizes where the library ran.
fn print_bm25s(report: &Report, details: &[Vec<(&str, Measurement)>]) {
    let rows: Vec<(&SizeReport, &Measurement, &Measurement)> = report
        .sizes
        .iter()
        .zip(details)
        .filter_map(|(size, per_ranker)| {
            let bm25s = per_ranker.iter().find(|(name, _)| *name == BM25S)?;
            Some((size, &per_ranker[0].1, &bm25s.1))
        })
        .collect();
    let Some((_, _, first)) = rows.first() else {
        return;
    };
    println!();
    println!(
        "| tools | toolsearch p50 / {BM25S} p50 | toolsearch p99 / {BM25S} p99 | build: toolsearch / {BM25S} | + index (peak): toolsearch / {BM25S} |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for (size, engine, bm25s) in &rows {
        let index = |m: &Measurement| match (m.peak_rss_mb, m.rss_before_build_mb) {
            (Some(peak), Some(before)) => Some(peak - before),
            _ => None,
        };
        println!(
            "| {} | {:.2}× | {:.2}× | {:.0} / {:.0} ms | {} / {} |",
            size.tools,
            ratio(engine.p50_us, bm25s.p50_us),
            ratio(engine.p99_us, bm25s.p99_us),
            engine.build_ms,
            bm25s.build_ms,
            opt(index(engine), "MB"),
            opt(index(bm25s), "MB"),
        );
    }
    println!();
    println!(
        "{BM25S}: the BM25 library ({}) in its own Python process, on the same tools and queries: \
         each tool's name split into words, description, parameter names and descriptions; \
         English stemmer and stopwords; each query tokenized and its top {LIMIT} retrieved on one \
         thread, warm, one at a time. Below 1× toolsearch is faster. Build: tokenizing and \
         indexing. + index: peak RSS minus RSS before the build (for {BM25S}, its Python process \
         with the texts read).",
        first.library.as_deref().unwrap_or(BM25S)
    );
}

fn opt(value: Option<f64>, unit: &str) -> String {
    match value {
        Some(v) if unit == "ms" && v < 10.0 => format!("{v:.2} {unit}"),
        Some(v) => format!("{v:.1} {unit}"),
        None => "n/a".into(),
    }
}

fn us(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.1} ms", value / 1e3)
    } else {
        format!("{value:.0} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(values), (50.0, 99.0, 100.0));
        assert_eq!(percentiles(vec![3.0]), (3.0, 3.0, 3.0));
        assert_eq!(percentiles(Vec::new()), (0.0, 0.0, 0.0));
    }

    #[test]
    fn overlap_query_count_is_capped_at_large_sizes() {
        assert_eq!(overlap_queries(500, 500), 500);
        assert_eq!(overlap_queries(100_000, 500), 100);
        assert_eq!(overlap_queries(10_000_000, 500), OVERLAP_MIN_QUERIES);
    }

    #[test]
    fn catalog_json_size_is_counted() {
        let tools = vec![Tool::new("a", "b")];
        let expected =
            r#"[{"name":"a","description":"b","inputSchema":{"properties":{},"type":"object"}}]"#;
        assert_eq!(catalog_json_bytes(&tools).unwrap(), expected.len() as u64);
    }

    #[test]
    fn names_are_split_as_the_published_reference_split_them() {
        assert_eq!(
            split_name("getHTTPResponse_v2.list-all"),
            "get HTTP Response v2 list all"
        );
        assert_eq!(split_name("search"), "search");
        assert_eq!(split_name("URL"), "URL");
        assert_eq!(split_name(""), "");
    }

    #[test]
    fn reference_text_holds_name_description_and_parameters() {
        let tool =
            Tool::new("sendSlackMessage", "Post a message.").with_schema(serde_json::json!({
                "type": "object",
                "properties": {
                    "channel_id": {"type": "string", "description": "Where to post"},
                    "text": {"type": "string"}
                }
            }));
        assert_eq!(
            reference_text(&tool),
            "send Slack Message Post a message. channel id Where to post text"
        );
        assert_eq!(reference_text(&Tool::new("a_b", "")), "a b");
    }

    #[test]
    fn bm25s_output_is_read_from_its_last_line() {
        let stdout = "a warning the library printed\n\
            {\"library\": \"bm25s 0.3.16\", \"build_ms\": 12.5, \"latencies_us\": [30.0, 10.0, 20.0], \
            \"errors\": 0, \"rss_at_start_mb\": 48.0, \"rss_before_build_mb\": 50.0, \"peak_rss_mb\": null}\n";
        let out = parse_bm25s_output(stdout, 3).unwrap();
        assert_eq!(out.library, "bm25s 0.3.16");
        assert_eq!(out.build_ms, 12.5);
        assert_eq!(out.latencies_us, [30.0, 10.0, 20.0]);
        assert_eq!(out.rss_before_build_mb, Some(50.0));
        assert_eq!(out.peak_rss_mb, None);
    }

    #[test]
    fn bm25s_output_that_does_not_fit_is_an_error_that_says_so() {
        let line = r#"{"library": "bm25s", "build_ms": 1, "latencies_us": [1.0], "errors": 0,
            "rss_at_start_mb": null, "rss_before_build_mb": null, "peak_rss_mb": null}"#
            .replace('\n', " ");
        let short = parse_bm25s_output(&line, 2).unwrap_err().to_string();
        assert!(short.contains("timed 1 queries of 2"), "{short}");
        let junk = parse_bm25s_output("Traceback (most recent call last)", 1)
            .unwrap_err()
            .to_string();
        assert!(junk.contains("one JSON line expected"), "{junk}");
        let empty = parse_bm25s_output("", 1).unwrap_err().to_string();
        assert!(empty.contains("bm25s reference"), "{empty}");
    }
}
