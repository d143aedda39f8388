//! Catalogs and queries for speed and memory benchmarks: the evaluation datasets pooled into one
//! catalog, and deterministic synthetic tools (names, descriptions and schemas drawn from word
//! lists by a seeded generator) to grow a catalog past the pooled size. No external data: the same
//! seed gives the same tools on every machine.

use crate::dataset::Dataset;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use toolsearch_core::Tool;

/// Tools per synthetic server, and per server made when pooling datasets without servers.
pub const SERVER_SIZE: usize = 50;

/// A small, fast, seedable generator (SplitMix64): deterministic across platforms and releases.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; 0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Skewed towards the start of `0..n`, like word frequencies: a few words are everywhere,
    /// most are rare.
    pub fn skewed(&mut self, n: usize) -> usize {
        let u = self.next_u64() as f64 / u64::MAX as f64;
        ((u * u * n as f64) as usize).min(n.saturating_sub(1))
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len())]
    }

    pub fn pick_skewed<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.skewed(words.len())]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[rustfmt::skip]
const VERBS: &[&str] = &[
    "get", "list", "create", "update", "delete", "search", "find", "fetch", "send", "read", "write",
    "upload", "download", "run", "start", "stop", "check", "validate", "convert", "export",
    "import", "sync", "schedule", "cancel", "approve", "reject", "assign", "archive", "restore",
    "merge", "split", "translate", "summarize", "analyze", "compare", "count", "calculate",
    "estimate", "predict", "classify", "tag", "label", "render", "resize", "compress", "encrypt",
    "decrypt", "sign", "verify", "publish", "subscribe", "unsubscribe", "notify", "invite", "share",
    "lock", "unlock", "rename", "copy", "move", "clone", "deploy", "rollback", "scale", "monitor",
    "inspect", "query", "filter", "sort", "rank", "index", "reindex", "backup", "purge", "refresh",
    "renew", "book", "reserve", "track", "locate", "measure", "record", "transcribe", "generate",
    "extract", "parse", "format", "lookup", "resolve", "open", "close", "pause", "resume", "retry",
    "mark", "flag", "pin", "unpin",
];

#[rustfmt::skip]
const NOUNS: &[&str] = &[
    "file", "user", "message", "issue", "document", "event", "order", "invoice", "payment",
    "customer", "account", "project", "task", "ticket", "comment", "repository", "branch", "commit",
    "pull_request", "release", "build", "pipeline", "job", "container", "image", "volume",
    "cluster", "node", "service", "endpoint", "record", "table", "row", "column", "query", "report",
    "dashboard", "chart", "metric", "alert", "incident", "log", "trace", "span", "note", "page",
    "folder", "spreadsheet", "cell", "slide", "presentation", "email", "thread", "channel",
    "contact", "calendar", "meeting", "reminder", "playlist", "track", "album", "video", "photo",
    "recipe", "product", "cart", "shipment", "package", "route", "map", "location", "address",
    "weather", "forecast", "flight", "hotel", "booking", "reservation", "quote", "stock", "price",
    "currency", "rate", "transaction", "budget", "expense", "receipt", "contract", "policy",
    "permission", "role", "group", "team", "workspace", "organization", "token", "key", "secret",
    "certificate", "domain", "dns_record", "webhook", "subscription", "plan", "license", "device",
    "sensor", "reading", "firmware", "model", "dataset", "embedding", "prompt", "completion",
    "translation", "transcript", "summary", "keyword", "category", "label", "attachment",
    "snapshot", "backup", "schema", "migration", "secret_version", "variable", "config", "setting",
    "profile", "avatar", "article", "post", "feed", "review", "rating", "survey", "response",
    "form", "field", "lead", "opportunity", "campaign", "segment", "audience", "coupon", "discount",
    "vendor", "supplier", "warehouse", "inventory", "sku", "patient", "appointment", "prescription",
    "course", "lesson", "student", "grade", "exam", "movie", "song", "lyric", "podcast", "episode",
    "game", "score", "player", "match", "tournament", "vehicle", "trip", "fare",
];

#[rustfmt::skip]
const DOMAINS: &[&str] = &[
    "github", "gitlab", "jira", "slack", "discord", "notion", "confluence", "drive", "dropbox",
    "box", "s3", "gcs", "azure", "kubernetes", "docker", "terraform", "postgres", "mysql", "mongo",
    "redis", "elastic", "kafka", "stripe", "paypal", "shopify", "salesforce", "hubspot", "zendesk",
    "intercom", "twilio", "sendgrid", "mailchimp", "gmail", "outlook", "calendar", "zoom", "teams",
    "figma", "miro", "trello", "asana", "linear", "sentry", "datadog", "grafana", "prometheus",
    "pagerduty", "spotify", "youtube", "twitter", "reddit", "weather", "maps", "finance", "crypto",
    "travel", "health", "education", "sports", "news", "recipes", "shopping", "legal", "hr",
    "accounting", "logistics", "iot", "ml", "translate",
];

#[rustfmt::skip]
const QUALIFIERS: &[&str] = &[
    "new", "existing", "recent", "archived", "active", "pending", "shared", "private", "public",
    "draft", "scheduled", "failed", "open", "closed", "current", "daily", "weekly", "monthly",
    "remote", "local", "default", "custom", "primary", "external", "internal", "unread", "starred",
    "deleted", "expired", "upcoming", "historical", "live", "cached", "encrypted", "signed",
    "verified", "nearby", "popular", "trending", "selected",
];

const PURPOSES: &[&str] = &[
    "Useful when an agent needs to act on behalf of the user.",
    "Returns a paginated result; pass the cursor to continue.",
    "Requires an authenticated session with write access.",
    "Results are sorted by relevance, newest first on ties.",
    "Rate limited to a few requests per second per account.",
    "The operation is idempotent and safe to retry.",
    "Only fields that are provided are changed.",
    "Large results are truncated; narrow the filters to see more.",
    "Supports dry runs that report what would change.",
    "Times are in UTC and use ISO 8601.",
    "Returns an error when the item does not exist.",
    "Works across every workspace the caller can see.",
];

#[rustfmt::skip]
const PARAM_NAMES: &[&str] = &[
    "id", "name", "title", "query", "limit", "offset", "cursor", "page", "page_size", "sort",
    "order", "filter", "status", "owner", "assignee", "author", "email", "phone", "url", "path",
    "content", "body", "text", "language", "format", "start_date", "end_date", "timezone",
    "location", "latitude", "longitude", "radius", "amount", "currency", "quantity", "price",
    "tags", "labels", "priority", "due_date", "description", "visibility", "region", "version",
    "branch", "recursive", "include_archived", "dry_run", "timeout", "retries", "callback_url",
    "metadata", "fields", "units", "width", "height", "quality", "model", "temperature",
];

const PARAM_TYPES: &[&str] = &["string", "string", "string", "integer", "boolean", "number"];

/// Joins words in one of the naming styles tools use in the wild.
fn styled_name(rng: &mut Rng, words: &[&str]) -> String {
    let parts: Vec<String> = words
        .iter()
        .flat_map(|w| w.split('_'))
        .map(str::to_string)
        .collect();
    match rng.below(10) {
        0..=4 => parts.join("_"),
        5..=6 => {
            let mut out = String::new();
            for (i, part) in parts.iter().enumerate() {
                if i == 0 {
                    out.push_str(part);
                } else {
                    out.push_str(&capitalize(part));
                }
            }
            out
        }
        7 => parts.iter().map(|p| capitalize(p)).collect(),
        8 => parts.join("-"),
        _ => parts.join("."),
    }
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn spaced(word: &str) -> String {
    word.replace('_', " ")
}

fn description(rng: &mut Rng, verb: &str, noun: &str, domain: &str) -> String {
    let qualifier = rng.pick_skewed(QUALIFIERS);
    let other = spaced(rng.pick_skewed(NOUNS));
    let noun = spaced(noun);
    let mut text = match rng.below(6) {
        0 => format!("{} a {qualifier} {noun} in {domain}.", capitalize(verb)),
        1 => format!(
            "{} {qualifier} {noun}s from {domain} by {other}.",
            capitalize(verb)
        ),
        2 => format!("Use this to {verb} the {noun} of a {other} on {domain}."),
        3 => format!(
            "{} one or more {noun}s in the {domain} {other}, optionally filtered by {}.",
            capitalize(verb),
            spaced(rng.pick(PARAM_NAMES))
        ),
        4 => format!("Lets the agent {verb} {qualifier} {noun}s linked to a {other}."),
        _ => format!(
            "{}: {verb} a {noun} and return its {other}.",
            capitalize(domain)
        ),
    };
    if rng.chance(60) {
        text.push(' ');
        text.push_str(rng.pick(PURPOSES));
    }
    if rng.chance(25) {
        text.push_str(&format!(
            " See also the {} {} tools.",
            rng.pick(VERBS),
            spaced(rng.pick_skewed(NOUNS))
        ));
    }
    text
}

fn schema(rng: &mut Rng, noun: &str) -> Value {
    let count = rng.below(6);
    let mut properties = Map::new();
    let mut required = Vec::new();
    for i in 0..count {
        let name = if i == 0 && rng.chance(50) {
            format!("{noun}_id")
        } else {
            rng.pick_skewed(PARAM_NAMES).to_string()
        };
        if properties.contains_key(&name) {
            continue;
        }
        let kind = rng.pick(PARAM_TYPES);
        let text = format!(
            "The {} of the {} to {}.",
            spaced(&name),
            spaced(noun),
            rng.pick(VERBS)
        );
        let mut prop = json!({ "type": kind, "description": text });
        if kind == "string" && rng.chance(15) {
            prop["enum"] = json!([rng.pick(QUALIFIERS), rng.pick(QUALIFIERS)]);
        }
        if i == 0 || rng.chance(20) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name, prop);
    }
    let mut schema = json!({ "type": "object", "properties": properties });
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// One synthetic tool; its name is unique within `taken` (a suffix is added when needed).
fn tool(rng: &mut Rng, server: &str, domain: &str, taken: &mut HashSet<String>) -> Tool {
    let verb = rng.pick_skewed(VERBS);
    let noun = rng.pick_skewed(NOUNS);
    let words: Vec<&str> = match rng.below(4) {
        0 => vec![domain, verb, noun],
        1 => vec![verb, rng.pick_skewed(QUALIFIERS), noun],
        _ => vec![verb, noun],
    };
    let base = styled_name(rng, &words);
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.to_lowercase()) {
        name = format!("{base}_{n}");
        n += 1;
    }
    let mut description = description(rng, verb, noun, domain);
    // As long as their text, as a tool read from a catalog file: the memory benchmarks count
    // the tools, and room left from building a string would be the generator's, not the tool's.
    name.shrink_to_fit();
    description.shrink_to_fit();
    Tool::new(name, description)
        .with_server(server)
        .with_schema(schema(rng, noun))
}

/// `SERVER_SIZE` synthetic tools for `server`, from its own seed.
pub fn synthetic_server(server: &str, seed: u64) -> Vec<Tool> {
    let mut rng = Rng::new(seed);
    let domain = rng.pick(DOMAINS);
    let mut taken = HashSet::new();
    (0..SERVER_SIZE)
        .map(|_| tool(&mut rng, server, domain, &mut taken))
        .collect()
}

/// `count` synthetic tools on servers `synthetic-00001`, ... of `SERVER_SIZE` tools each (the
/// last one may be smaller). The same `seed` gives the same tools.
pub fn synthetic_tools(count: usize, seed: u64) -> Vec<Tool> {
    let mut tools = Vec::with_capacity(count);
    let mut server = 0u64;
    while tools.len() < count {
        server += 1;
        let name = format!("synthetic-{server:05}");
        let mut batch = synthetic_server(&name, seed ^ server.wrapping_mul(0x9E37_79B9));
        batch.truncate(count - tools.len());
        tools.extend(batch);
    }
    tools
}

/// `count` natural-language requests over the synthetic vocabulary.
pub fn synthetic_queries(count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let verb = rng.pick_skewed(VERBS);
            let noun = spaced(rng.pick_skewed(NOUNS));
            let qualifier = rng.pick_skewed(QUALIFIERS);
            let domain = rng.pick(DOMAINS);
            match rng.below(5) {
                0 => format!("{verb} the {qualifier} {noun}"),
                1 => format!("can you {verb} my {noun} in {domain}"),
                2 => format!(
                    "I need to {verb} a {noun} and then {} its {}",
                    rng.pick(VERBS),
                    spaced(rng.pick_skewed(NOUNS))
                ),
                3 => format!("{noun} {verb}"),
                _ => format!(
                    "how do I {verb} {qualifier} {noun}s for a {} on {domain}?",
                    spaced(rng.pick_skewed(NOUNS))
                ),
            }
        })
        .collect()
}

/// The evaluation datasets as one catalog and one query list.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    /// Every tool, grouped by server: a dataset's own servers become `dataset/server`; tools of a
    /// dataset without servers are put on servers `dataset/001`, ... of `SERVER_SIZE` tools each.
    pub tools: Vec<Tool>,
    /// Every query text of every dataset.
    pub queries: Vec<String>,
}

impl Pool {
    /// Pools `datasets`; a tool whose (server, name) was already seen is left out.
    pub fn new(datasets: &[Dataset]) -> Self {
        let mut pool = Self::default();
        let mut seen = HashSet::new();
        for dataset in datasets {
            let mut serverless = 0usize;
            for tool in &dataset.tools {
                let server = if tool.server().is_empty() {
                    serverless += 1;
                    format!("{}/{:03}", dataset.name, serverless.div_ceil(SERVER_SIZE))
                } else {
                    format!("{}/{}", dataset.name, tool.server())
                };
                if seen.insert((server.clone(), tool.name().to_owned())) {
                    let mut tool = tool.clone();
                    tool.set_server(server);
                    pool.tools.push(tool);
                }
            }
            pool.queries
                .extend(dataset.queries.iter().map(|q| q.query.clone()));
        }
        pool
    }

    /// A deterministic mix of `count` tools: whole servers in a seeded order (so every dataset
    /// is represented at small sizes), the last one cut to fit.
    pub fn sample(&self, count: usize, seed: u64) -> Vec<Tool> {
        let mut servers: Vec<&str> = Vec::new();
        for tool in &self.tools {
            if servers.last() != Some(&tool.server()) {
                servers.push(tool.server());
            }
        }
        let mut order: Vec<usize> = (0..servers.len()).collect();
        Rng::new(seed).shuffle(&mut order);
        let mut out = Vec::with_capacity(count.min(self.tools.len()));
        for i in order {
            let server = servers[i];
            for tool in self.tools.iter().filter(|t| t.server() == server) {
                if out.len() == count {
                    return out;
                }
                out.push(tool.clone());
            }
        }
        out
    }

    /// A deterministic subset of at most `count` queries.
    pub fn sample_queries(&self, count: usize, seed: u64) -> Vec<String> {
        sample_queries(&self.queries, count, seed)
    }
}

/// A deterministic subset of at most `count` of `queries`, in a seeded order.
pub fn sample_queries(queries: &[String], count: usize, seed: u64) -> Vec<String> {
    let mut order: Vec<usize> = (0..queries.len()).collect();
    Rng::new(seed).shuffle(&mut order);
    order
        .into_iter()
        .take(count)
        .map(|i| queries[i].clone())
        .collect()
}

/// Where the tools of a benchmark catalog came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Pooled,
    PooledSynthetic,
    Synthetic,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Pooled => "pooled",
            Source::PooledSynthetic => "pooled+synthetic",
            Source::Synthetic => "synthetic",
        }
    }
}

/// A catalog of exactly `count` tools: sampled from `base` while it lasts, then synthetic.
pub fn catalog(base: &[Tool], count: usize, seed: u64) -> Vec<Tool> {
    let mut tools: Vec<Tool> = base.iter().take(count).cloned().collect();
    if tools.len() < count {
        tools.extend(synthetic_tools(count - tools.len(), seed));
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolsearch_core::Catalog;

    #[test]
    fn synthetic_tools_are_deterministic_and_valid() {
        let a = synthetic_tools(230, 7);
        let b = synthetic_tools(230, 7);
        assert_eq!(a, b);
        assert_eq!(a.len(), 230);
        assert_ne!(a, synthetic_tools(230, 8));
        // Unique within each server, so a catalog accepts them.
        let catalog = Catalog::from_tools(a.clone()).unwrap();
        assert_eq!(catalog.len(), 230);
        assert_eq!(catalog.server_tools("synthetic-00001").len(), SERVER_SIZE);
        assert_eq!(catalog.server_tools("synthetic-00005").len(), 30);
    }

    #[test]
    fn synthetic_tools_vary() {
        let tools = synthetic_tools(1000, 1);
        let names: HashSet<&str> = tools.iter().map(|t| t.name()).collect();
        let descriptions: HashSet<&str> = tools.iter().map(|t| t.description()).collect();
        assert!(names.len() > 500, "{} distinct names", names.len());
        assert!(descriptions.len() > 900);
        assert!(tools.iter().any(|t| t.name().contains('_')));
        assert!(tools
            .iter()
            .any(|t| t.name().chars().any(char::is_uppercase)));
        assert!(tools.iter().any(|t| t.parameters().len() >= 3));
        assert!(tools.iter().any(|t| t.parameters().is_empty()));
    }

    #[test]
    fn pool_groups_serverless_tools_and_samples_deterministically() {
        let dataset = Dataset {
            name: "d".into(),
            tools: synthetic_tools(120, 3)
                .into_iter()
                .enumerate()
                .map(|(i, mut t)| {
                    t.set_server(String::new());
                    t.set_name(format!("tool_{i}"));
                    t
                })
                .collect(),
            queries: Vec::new(),
            skipped_unnamed: 0,
        };
        let pool = Pool::new(&[dataset]);
        assert_eq!(pool.tools.len(), 120);
        assert_eq!(pool.tools[0].server(), "d/001");
        assert_eq!(pool.tools[119].server(), "d/003");
        let sample = pool.sample(70, 9);
        assert_eq!(sample.len(), 70);
        assert_eq!(sample, pool.sample(70, 9));
        let full = catalog(&sample, 100, 5);
        assert_eq!(full.len(), 100);
        assert!(Catalog::from_tools(full).is_ok());
    }

    #[test]
    fn queries_are_deterministic() {
        assert_eq!(synthetic_queries(20, 4), synthetic_queries(20, 4));
        let all: Vec<String> = (0..50).map(|i| format!("q{i}")).collect();
        let some = sample_queries(&all, 10, 2);
        assert_eq!(some.len(), 10);
        assert_eq!(some, sample_queries(&all, 10, 2));
    }
}
