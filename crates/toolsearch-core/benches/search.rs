//! The engine's hot paths on a synthetic catalog: keyword search and hybrid search with cached
//! query vectors at 5,000 tools, index build, and replacing one server's 50 tools. Self-contained: the catalog is generated here from a seed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use toolsearch_core::{
    Catalog, HashEmbedder, SearchConfig, SearchEngine, SearchMode, SearchRequest, Tool,
};

const SERVER_SIZE: usize = 50;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Skewed towards the start of the list, like word frequencies.
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        let u = self.next() as f64 / u64::MAX as f64;
        words[((u * u * words.len() as f64) as usize).min(words.len() - 1)]
    }
}

#[rustfmt::skip]
const VERBS: &[&str] = &[
    "get", "list", "create", "update", "delete", "search", "send", "read", "write", "upload",
    "download", "run", "check", "convert", "export", "import", "schedule", "cancel", "archive",
    "translate", "summarize", "analyze", "calculate", "render", "resize", "encrypt", "publish",
    "notify", "share", "rename", "deploy", "monitor", "query", "backup", "book", "track",
];

#[rustfmt::skip]
const NOUNS: &[&str] = &[
    "file", "user", "message", "issue", "document", "event", "order", "invoice", "payment",
    "customer", "project", "task", "ticket", "comment", "repository", "branch", "commit", "release",
    "pipeline", "container", "cluster", "record", "table", "report", "dashboard", "metric", "alert",
    "log", "note", "page", "folder", "spreadsheet", "email", "channel", "contact", "calendar",
    "meeting", "playlist", "video", "photo", "product", "shipment", "route", "weather", "forecast",
    "flight", "hotel", "stock", "currency", "transaction", "budget", "contract", "permission",
    "team", "token", "certificate", "domain", "webhook", "device", "sensor", "model", "dataset",
    "translation", "transcript", "schema", "setting",
];

#[rustfmt::skip]
const DOMAINS: &[&str] = &[
    "github", "jira", "slack", "notion", "drive", "kubernetes", "postgres", "stripe", "shopify",
    "salesforce", "gmail", "zoom", "figma", "sentry", "spotify", "weather",
];

#[rustfmt::skip]
const PARAMS: &[&str] = &[
    "id", "name", "query", "limit", "cursor", "status", "owner", "email", "url", "path", "content",
    "language", "format", "start_date", "end_date", "location", "amount", "tags",
];

fn server_tools(server: &str, seed: u64) -> Vec<Tool> {
    let mut rng = Rng(seed);
    let domain = rng.pick(DOMAINS);
    (0..SERVER_SIZE)
        .map(|i| {
            let verb = rng.pick(VERBS);
            let noun = rng.pick(NOUNS);
            let other = rng.pick(NOUNS);
            let mut properties = Map::new();
            for _ in 0..(rng.next() % 5) {
                let param = rng.pick(PARAMS);
                properties.insert(
                    param.to_string(),
                    json!({"type": "string", "description": format!("The {param} of the {noun}.")}),
                );
            }
            Tool::new(
                format!("{verb}_{noun}_{i}"),
                format!("{verb} a {noun} in {domain} and return its {other}."),
            )
            .with_server(server)
            .with_schema(json!({"type": "object", "properties": Value::Object(properties)}))
        })
        .collect()
}

fn catalog(count: usize) -> Vec<Tool> {
    (0..count.div_ceil(SERVER_SIZE))
        .flat_map(|s| server_tools(&format!("server-{s:04}"), s as u64 + 1))
        .take(count)
        .collect()
}

fn engine(tools: Vec<Tool>) -> SearchEngine {
    SearchEngine::from_catalog(Catalog::from_tools(tools).unwrap(), SearchConfig::default())
        .unwrap()
}

const QUERIES: &[&str] = &[
    "send an email to a customer",
    "list open pull requests on github",
    "what is the weather forecast for tomorrow",
    "upload a file to drive",
    "create_invoice",
    "cancel my hotel booking and notify the team",
];

fn keyword_search(c: &mut Criterion) {
    let engine = engine(catalog(5_000));
    let mut group = c.benchmark_group("keyword_search_5k");
    for query in QUERIES {
        let request = SearchRequest::new(*query).limit(10);
        group.bench_function(*query, |b| {
            b.iter(|| black_box(engine.search(black_box(&request)).unwrap()))
        });
    }
    group.finish();
}

/// Hybrid search with every query's vector cached: the keyword side, the dense scan over every
/// tool's two vectors, and the fusion. The stand-in embedder gives vectors of the default model's
/// width (384), so the scan costs what it costs with the model.
fn hybrid_search_cached(c: &mut Criterion) {
    let mut engine = engine(catalog(5_000));
    engine.set_embedder(Some(std::sync::Arc::new(HashEmbedder::new(384))));
    engine.embed_pending().unwrap();
    let mut group = c.benchmark_group("hybrid_search_cached_5k");
    for query in QUERIES {
        let request = SearchRequest::new(*query)
            .limit(10)
            .mode(SearchMode::Hybrid);
        engine.search(&request).unwrap();
        group.bench_function(*query, |b| {
            b.iter(|| black_box(engine.search(black_box(&request)).unwrap()))
        });
    }
    group.finish();
}

fn index_build(c: &mut Criterion) {
    let tools = catalog(5_000);
    let mut group = c.benchmark_group("index_build");
    group.sample_size(10);
    group.bench_function("5k_tools", |b| {
        b.iter_batched(
            || tools.clone(),
            |tools| black_box(engine(tools)),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn replace_server(c: &mut Criterion) {
    let mut engine = engine(catalog(5_000));
    let versions = [
        server_tools("server-0007", 1_001),
        server_tools("server-0007", 1_002),
    ];
    let mut turn = 0;
    let mut group = c.benchmark_group("replace_server");
    group.sample_size(20);
    group.bench_function("50_tools_in_5k", |b| {
        b.iter_batched(
            || {
                turn += 1;
                versions[turn % 2].clone()
            },
            |tools| engine.replace_server("server-0007", tools).unwrap(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(
    benches,
    keyword_search,
    hybrid_search_cached,
    index_build,
    replace_server
);
criterion_main!(benches);
