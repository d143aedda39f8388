//! `toolsearch bench gateway`: the gateway as its clients see it, on loopback. An upstream MCP
//! server runs as a child process (`toolsearch-bench upstream`, this program: Streamable HTTP,
//! serving the catalog's tools and answering every call with its arguments); the gateway runs as
//! another, `toolsearch serve` over that upstream (the `toolsearch` next to this program), exactly
//! as a user starts it; the clients are rmcp sessions and HTTP clients in this process. Measured,
//! one after the other:
//!
//! - `search_tools` over MCP (Streamable HTTP) from one session, one call after the other;
//! - the same from `--sessions` sessions at once;
//! - REST `search_tools` from `--rest-clients` clients at once (throughput);
//! - a tool call through the gateway against the same call made directly to the upstream, over
//!   the same transport, alternating the two; the difference of their medians is what the gateway
//!   adds to a call.
//!
//! Each measurement stops after `--requests` requests or `--max-seconds`, whichever comes first;
//! every request has its own time limit. Nothing listens beyond 127.0.0.1.
//!
//! `--many-sessions` measures instead what many sessions cost the gateway in memory and how many
//! requests 200 sessions get answered (`sessions.rs`).

#[path = "sessions.rs"]
mod sessions;

use crate::catalog_file::read_tools;
use crate::BadInput;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr};
use toolsearch_core::Tool;
use toolsearch_eval::synthetic;
use toolsearch_gateway::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use toolsearch_gateway::rmcp::service::{RequestContext, RoleClient, RunningService};
use toolsearch_gateway::rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use toolsearch_gateway::rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use toolsearch_gateway::rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use toolsearch_gateway::CancellationToken;

const SEED: u64 = 0x7005_5EA2_C4B3_0002;
/// The upstream's name in the gateway's config; its tools are `bench___<name>`.
const SERVER: &str = "bench";
/// The tool both call measurements call.
const ECHO: &str = "echo";
/// Results asked for per search.
const LIMIT: usize = 10;
/// Time one request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the gateway may take to start and index the upstream's tools.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Lines of the gateway's stderr kept to explain a failure.
const STDERR_KEPT: usize = 20;

#[derive(Args)]
pub struct GatewayBenchArgs {
    /// Catalog file whose tools the upstream serves, instead of synthetic tools.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Force the catalog format: mcp, openai, anthropic, gemini, multi.
    #[arg(long, requires = "catalog")]
    format: Option<String>,
    /// Synthetic tools the upstream serves when no --catalog is given.
    #[arg(long, default_value_t = 1000)]
    tools: usize,
    /// Timed requests per measurement.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// MCP sessions searching at once in the concurrent measurement.
    #[arg(long, default_value_t = 20)]
    sessions: usize,
    /// REST clients searching at once.
    #[arg(long, default_value_t = 16)]
    rest_clients: usize,
    /// Untimed requests before each measurement.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Longest a measurement runs, in seconds; it stops at --requests or here, whichever is first.
    #[arg(long, default_value_t = 30.0)]
    max_seconds: f64,
    /// Keep sessions in this Redis (`[state] redis`), as replicas do, rather than in process.
    #[arg(long)]
    redis: Option<String>,
    /// Gateway processes over the same upstream and config; more than one needs --redis. The
    /// concurrent measurements spread their sessions and REST clients over them round-robin.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Serve the upstream from this process, beside the clients, instead of from a process of
    /// its own. A direct call then never leaves this process (client and server may even share
    /// a thread), which no real upstream allows; kept to compare with figures measured so.
    #[arg(long)]
    upstream_in_process: bool,
    /// Measure many sessions instead: the gateway's memory with --idle-sessions open, after
    /// they end and over --session-rounds, then --throughput-sessions sending requests.
    #[arg(long)]
    many_sessions: bool,
    /// --many-sessions: sessions opened and kept idle.
    #[arg(long, default_value_t = 10_000)]
    idle_sessions: usize,
    /// --many-sessions: further rounds of opening --idle-sessions sessions and deleting them.
    #[arg(long, default_value_t = 3)]
    session_rounds: usize,
    /// --many-sessions: sessions sending requests at once in the throughput phase.
    #[arg(long, default_value_t = 200)]
    throughput_sessions: usize,
    /// --many-sessions: how long the throughput phase runs, in seconds.
    #[arg(long, default_value_t = 10.0)]
    throughput_seconds: f64,
    /// --many-sessions: what each session of the throughput phase sends, in turn: a
    /// comma-separated list of ping, tools/list, search_tools.
    #[arg(long, default_value = "ping,tools/list,search_tools")]
    throughput_requests: String,
    /// --many-sessions: the gateway's `http.sessionRestAfterSecs` (its default when not given):
    /// how long the idle sessions take to rest before their memory is read again.
    #[arg(long)]
    rest_after_secs: Option<u64>,
    /// Run this program as the gateway instead of the `toolsearch` next to this one (to compare
    /// two builds in one run).
    #[arg(long, hide = true)]
    gateway_exe: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `toolsearch-bench upstream` (hidden): the bench's upstream as a process of its own.
#[derive(Args)]
pub struct UpstreamArgs {
    /// JSON array of MCP tools to serve, as `toolsearch bench gateway` writes it.
    #[arg(long)]
    tools: PathBuf,
}

/// One measurement: what completed, what failed, and the latencies of the completed requests.
#[derive(Debug, Clone, Serialize)]
struct Phase {
    /// Requests sent and finished (answered or failed).
    requests: usize,
    errors: usize,
    seconds: f64,
    /// Answered requests per second.
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// One target of a bench and whether the run met it (both bench modes print these).
#[derive(Debug, Serialize)]
struct Target {
    name: String,
    target: String,
    measured: String,
    met: bool,
}

/// The targets as a Markdown table.
fn print_targets(targets: &[Target]) {
    println!("| target | wanted | measured | met |");
    println!("|---|---|---|---|");
    for t in targets {
        println!(
            "| {} | {} | {} | {} |",
            t.name,
            t.target,
            t.measured,
            if t.met { "yes" } else { "no" }
        );
    }
}

#[derive(Debug, Serialize)]
struct Report {
    /// Tools the upstream serves (and the gateway indexes).
    tools: usize,
    preset: &'static str,
    /// Where sessions are kept: `memory` or `redis`.
    state: &'static str,
    /// Gateway processes the concurrent measurements spread over.
    replicas: usize,
    /// Where the upstream runs: `process` (its own) or `in-process` (beside the clients).
    upstream: &'static str,
    /// `search_tools` over MCP, one session, one call after the other.
    mcp_search_one_session: Phase,
    /// `search_tools` over MCP from `sessions` sessions at once.
    mcp_search_concurrent: Phase,
    sessions: usize,
    /// REST `search_tools` from `rest_clients` clients at once.
    rest_search: Phase,
    rest_clients: usize,
    /// The echo tool called directly on the upstream, one call after the other.
    call_direct: Phase,
    /// The same call through the gateway (`bench___echo`), alternating with the direct one.
    call_gateway: Phase,
    /// `call_gateway.p50_ms - call_direct.p50_ms`.
    call_overhead_p50_ms: f64,
    /// Failed requests over all measurements.
    errors: usize,
    targets: Vec<Target>,
}

/// What a run measured: the standard measurements or the many-session ones.
enum Outcome {
    Standard(Report),
    Sessions(sessions::SessionsReport),
}

pub fn run(args: GatewayBenchArgs) -> Result<()> {
    check_args(&args)?;
    let kinds = if args.many_sessions {
        sessions::check_args(&args)?;
        sessions::parse_kinds(&args.throughput_requests)
            .map_err(|e| BadInput(format!("--throughput-requests: {e}")))?
    } else {
        Vec::new()
    };
    let tools = catalog(&args)?;
    let gateway_exe = match &args.gateway_exe {
        Some(exe) => exe.clone(),
        None => toolsearch_next_to_this()?,
    };
    let queries = synthetic::synthetic_queries(500, SEED);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The clients here are the gateway's own HTTP stack, which needs a TLS provider installed.
    toolsearch_gateway::upstream::ensure_crypto_provider();
    match runtime.block_on(bench(&args, &gateway_exe, tools, queries, &kinds))? {
        Outcome::Standard(report) if args.json => {
            println!("{}", serde_json::to_string_pretty(&report)?)
        }
        Outcome::Standard(report) => print_table(&report),
        Outcome::Sessions(report) if args.json => {
            println!("{}", serde_json::to_string_pretty(&report)?)
        }
        Outcome::Sessions(report) => sessions::print_table(&report),
    }
    Ok(())
}

fn check_args(args: &GatewayBenchArgs) -> Result<()> {
    let positive = [
        ("--requests", args.requests),
        ("--sessions", args.sessions),
        ("--rest-clients", args.rest_clients),
        ("--replicas", args.replicas),
    ];
    for (flag, value) in positive {
        if value == 0 {
            return Err(BadInput(format!("{flag} must be at least 1")).into());
        }
    }
    if args.replicas > 1 && args.redis.is_none() {
        return Err(BadInput(
            "--replicas above 1 needs --redis URL: replicas share sessions through Redis".into(),
        )
        .into());
    }
    if args.catalog.is_none() && args.tools == 0 {
        return Err(BadInput("--tools must be at least 1".into()).into());
    }
    if !(args.max_seconds.is_finite() && args.max_seconds > 0.0) {
        return Err(BadInput(format!(
            "--max-seconds is {}; give a positive number of seconds",
            args.max_seconds
        ))
        .into());
    }
    Ok(())
}

/// The tools the upstream serves: the catalog file's (one per name) or synthetic ones, plus the
/// echo tool.
fn catalog(args: &GatewayBenchArgs) -> Result<Vec<Tool>> {
    let mut tools = match &args.catalog {
        Some(path) => read_tools(path, args.format.as_deref())?,
        None => synthetic::catalog(&[], args.tools, SEED),
    };
    // One upstream serves them all: a name listed by several servers is kept once.
    let mut seen = HashSet::new();
    tools.retain(|t| t.name() != ECHO && seen.insert(t.name().to_owned()));
    if tools.is_empty() {
        return Err(BadInput("the catalog has no tools to serve".into()).into());
    }
    tools.push(
        Tool::new(ECHO, "Echo the arguments back as text").with_schema(json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Text to echo"}},
        })),
    );
    Ok(tools)
}

async fn bench(
    args: &GatewayBenchArgs,
    gateway_exe: &Path,
    tools: Vec<Tool>,
    queries: Vec<String>,
    kinds: &[sessions::Kind],
) -> Result<Outcome> {
    let tool_count = tools.len();
    let shutdown = CancellationToken::new();
    let scratch = Scratch::new()?;
    let tools = tools.iter().map(mcp_tool).collect::<Result<Vec<_>>>()?;
    let mut upstream_process = None;
    let upstream = if args.upstream_in_process {
        serve_upstream(tools, shutdown.clone()).await?
    } else {
        let file = scratch.path().join("upstream-tools.json");
        std::fs::write(&file, serde_json::to_vec(&tools)?)
            .with_context(|| format!("writing {}", file.display()))?;
        let this = std::env::current_exe().context("finding this program to run the upstream")?;
        let child =
            Listening::start("the upstream", &this, &["upstream", "--tools"], &file).await?;
        let addr = child.addr;
        upstream_process = Some(child);
        addr
    };
    let upstream_url = format!("http://{upstream}/mcp");
    let config = scratch.path().join("gateway.toml");
    std::fs::write(
        &config,
        gateway_config(&upstream_url, args.redis.as_deref(), args.rest_after_secs),
    )
    .with_context(|| format!("writing {}", config.display()))?;
    let mut gateways = Vec::with_capacity(args.replicas);
    for _ in 0..args.replicas {
        match Listening::start_gateway(&config, gateway_exe).await {
            Ok(gateway) => gateways.push(gateway),
            Err(e) => {
                for mut gateway in gateways {
                    let _ = gateway.stop().await;
                }
                shutdown.cancel();
                return Err(e);
            }
        }
    }
    let outcome = if args.many_sessions {
        sessions::measure(args, &gateways[0], tool_count, &queries, kinds)
            .await
            .map(Outcome::Sessions)
    } else {
        measure(args, &gateways, &upstream_url, tool_count, &queries)
            .await
            .map(Outcome::Standard)
    };
    let mut stopped = Ok(());
    for mut gateway in gateways {
        stopped = stopped.and(gateway.stop().await);
    }
    if let Some(mut upstream) = upstream_process {
        stopped = stopped.and(upstream.stop().await);
    }
    shutdown.cancel();
    let report = outcome?;
    stopped?;
    Ok(report)
}

fn gateway_config(upstream_url: &str, redis: Option<&str>, rest_after_secs: Option<u64>) -> String {
    let state = redis.map_or_else(String::new, |url| {
        format!("\n[state]\nredis = {}\n", toml_string(url))
    });
    let http = rest_after_secs.map_or_else(String::new, |secs| {
        format!("\n[http]\nsessionRestAfterSecs = {secs}\n")
    });
    format!(
        "# written by `toolsearch bench gateway`\n\
         [mcpServers.{SERVER}]\n\
         type = \"http\"\n\
         url = \"{upstream_url}\"\n\n\
         [toolSearch]\n\
         preset = \"search\"\n{state}{http}"
    )
}

/// `s` as a TOML string (JSON string syntax is valid TOML).
fn toml_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

async fn measure(
    args: &GatewayBenchArgs,
    gateways: &[Listening],
    upstream_url: &str,
    tools: usize,
    queries: &[String],
) -> Result<Report> {
    let mcp_urls: Vec<String> = gateways
        .iter()
        .map(|g| format!("http://{}/mcp", g.addr))
        .collect();
    let rest_urls: Vec<String> = gateways
        .iter()
        .map(|g| {
            format!(
                "http://{}{}",
                g.addr,
                toolsearch_gateway::rest::SEARCH_TOOLS_PATH
            )
        })
        .collect();
    let mcp_url = mcp_urls[0].clone();
    let limit = Duration::from_secs_f64(args.max_seconds);
    let note = |what: &str| {
        if !args.json {
            eprintln!("measuring {what} ...");
        }
    };

    note("MCP search_tools, one session");
    let session = connect(&mcp_url).await?;
    check_search(&session, queries).await?;
    let one = Bounds::new(args.requests, limit);
    run_mcp_searches(
        &session,
        queries,
        args.warmup,
        &Bounds::new(args.warmup, limit),
    )
    .await;
    let one_session = run_mcp_searches(&session, queries, 0, &one)
        .await
        .phase(&one);
    close(session).await;

    note(&format!("MCP search_tools, {} sessions", args.sessions));
    let concurrent = mcp_concurrent(&mcp_urls, queries, args, limit).await?;

    note(&format!("REST search_tools, {} clients", args.rest_clients));
    let rest = rest_concurrent(&rest_urls, queries, args, limit).await?;

    note("call_tool, direct and through the gateway");
    let (direct, through) = calls(upstream_url, &mcp_url, args, limit).await?;

    let overhead = through.p50_ms - direct.p50_ms;
    let errors =
        one_session.errors + concurrent.errors + rest.errors + direct.errors + through.errors;
    let targets = vec![
        Target {
            name: "MCP search_tools p50, one session".into(),
            target: "<= 2 ms".into(),
            measured: format!("{:.3} ms", one_session.p50_ms),
            met: one_session.p50_ms <= 2.0,
        },
        Target {
            name: "call_tool added p50".into(),
            target: "<= 0.3 ms".into(),
            measured: format!("{overhead:.3} ms"),
            met: overhead <= 0.3,
        },
        Target {
            name: "REST searches/s, 16 clients".into(),
            target: ">= 3000/s".into(),
            measured: format!(
                "{:.0}/s with {} clients",
                rest.per_second, args.rest_clients
            ),
            met: args.rest_clients == 16 && rest.per_second >= 3000.0,
        },
        Target {
            name: "errors".into(),
            target: "0".into(),
            measured: errors.to_string(),
            met: errors == 0,
        },
    ];
    Ok(Report {
        tools,
        preset: "search",
        state: if args.redis.is_some() {
            "redis"
        } else {
            "memory"
        },
        replicas: gateways.len(),
        upstream: if args.upstream_in_process {
            "in-process"
        } else {
            "process"
        },
        mcp_search_one_session: one_session,
        mcp_search_concurrent: concurrent,
        sessions: args.sessions,
        rest_search: rest,
        rest_clients: args.rest_clients,
        call_direct: direct,
        call_gateway: through,
        call_overhead_p50_ms: overhead,
        errors,
        targets,
    })
}

/// When a measurement stops: after `requests` requests were started, or at `deadline`.
struct Bounds {
    requests: usize,
    started: std::sync::atomic::AtomicUsize,
    limit: Duration,
    start: Instant,
}

impl Bounds {
    fn new(requests: usize, limit: Duration) -> Self {
        Self {
            requests,
            started: std::sync::atomic::AtomicUsize::new(0),
            limit,
            start: Instant::now(),
        }
    }

    /// The number of the next request to send, or `None` when the measurement is over.
    fn next(&self) -> Option<usize> {
        if self.start.elapsed() >= self.limit {
            return None;
        }
        let n = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (n < self.requests).then_some(n)
    }

    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Latencies of answered requests and a count of failed ones.
#[derive(Default)]
struct Samples {
    latencies_ms: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
}

impl Samples {
    fn record(&mut self, started: Instant, outcome: Result<()>) {
        match outcome {
            Ok(()) => self
                .latencies_ms
                .push(started.elapsed().as_secs_f64() * 1e3),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }

    fn merge(&mut self, other: Samples) {
        self.latencies_ms.extend(other.latencies_ms);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn phase(self, bounds: &Bounds) -> Phase {
        self.phase_over(bounds.elapsed())
    }

    fn phase_over(self, elapsed: Duration) -> Phase {
        if let Some(e) = &self.first_error {
            eprintln!("warning: {} request(s) failed; the first: {e}", self.errors);
        }
        let seconds = elapsed.as_secs_f64();
        let answered = self.latencies_ms.len();
        let (p50, p99, max) = crate::search::percentiles(self.latencies_ms);
        Phase {
            requests: answered + self.errors,
            errors: self.errors,
            seconds,
            per_second: if seconds > 0.0 {
                answered as f64 / seconds
            } else {
                0.0
            },
            p50_ms: p50,
            p99_ms: p99,
            max_ms: max,
        }
    }
}

type Session = RunningService<RoleClient, ()>;

async fn connect(url: &str) -> Result<Session> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    tokio::time::timeout(REQUEST_TIMEOUT, ().serve(transport))
        .await
        .map_err(|_| anyhow!("no MCP session with {url} within {REQUEST_TIMEOUT:?}"))?
        .with_context(|| format!("opening an MCP session with {url}"))
}

async fn close(session: Session) {
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, session.cancel()).await;
}

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// One tools/call: an error when it fails, times out or answers `isError`.
async fn call(session: &Session, name: &str, args: Map<String, Value>) -> Result<CallToolResult> {
    let params = CallToolRequestParams::new(name.to_string()).with_arguments(args);
    let result = tokio::time::timeout(REQUEST_TIMEOUT, session.call_tool(params))
        .await
        .map_err(|_| anyhow!("{name} took longer than {REQUEST_TIMEOUT:?}"))?
        .with_context(|| format!("calling {name}"))?;
    if result.is_error == Some(true) {
        let text = first_text(&result);
        bail!("{name} answered an error: {text}");
    }
    Ok(result)
}

fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}

fn search_arguments(query: &str) -> Map<String, Value> {
    arguments(json!({"query": query, "limit": LIMIT}))
}

/// The gateway indexed the upstream's tools: a search finds some.
async fn check_search(session: &Session, queries: &[String]) -> Result<()> {
    let query = queries.first().map_or("tool", String::as_str);
    let result = call(session, "search_tools", search_arguments(query)).await?;
    let text = first_text(&result);
    let answer: Value = serde_json::from_str(&text)
        .with_context(|| format!("search_tools did not answer JSON: {text}"))?;
    if answer["returned"].as_u64().unwrap_or(0) == 0 {
        bail!("the gateway found no tools for `{query}`: it has not indexed the upstream's tools ({text})");
    }
    Ok(())
}

async fn run_mcp_searches(
    session: &Session,
    queries: &[String],
    offset: usize,
    bounds: &Bounds,
) -> Samples {
    let mut samples = Samples::default();
    while let Some(n) = bounds.next() {
        let query = &queries[(offset + n) % queries.len()];
        let started = Instant::now();
        let outcome = call(session, "search_tools", search_arguments(query))
            .await
            .map(drop);
        samples.record(started, outcome);
    }
    samples
}

async fn mcp_concurrent(
    urls: &[String],
    queries: &[String],
    args: &GatewayBenchArgs,
    limit: Duration,
) -> Result<Phase> {
    let mut sessions = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        sessions.push(Arc::new(connect(&urls[i % urls.len()]).await?));
    }
    let queries: Arc<[String]> = queries.into();
    let warmup = Arc::new(Bounds::new(args.warmup, limit));
    run_tasks(&sessions, &queries, &warmup).await;
    let bounds = Arc::new(Bounds::new(args.requests, limit));
    let samples = run_tasks(&sessions, &queries, &bounds).await;
    let phase = samples.phase(&bounds);
    for session in sessions {
        if let Ok(session) = Arc::try_unwrap(session) {
            close(session).await;
        }
    }
    Ok(phase)
}

/// Every session searching at once until `bounds` says stop.
async fn run_tasks(
    sessions: &[Arc<Session>],
    queries: &Arc<[String]>,
    bounds: &Arc<Bounds>,
) -> Samples {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, session) in sessions.iter().enumerate() {
        let (session, queries, bounds) = (session.clone(), queries.clone(), bounds.clone());
        tasks.spawn(async move { run_mcp_searches(&session, &queries, i * 7, &bounds).await });
    }
    collect(tasks).await
}

async fn collect(mut tasks: tokio::task::JoinSet<Samples>) -> Samples {
    let mut all = Samples::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(samples) => all.merge(samples),
            Err(e) => all.record(Instant::now(), Err(anyhow!("a client task failed: {e}"))),
        }
    }
    all
}

async fn rest_concurrent(
    urls: &[String],
    queries: &[String],
    args: &GatewayBenchArgs,
    limit: Duration,
) -> Result<Phase> {
    // Bodies are made before the clock starts: the client's JSON is not the gateway's cost.
    let bodies: Arc<[String]> = queries
        .iter()
        .map(|q| json!({"query": q, "limit": LIMIT}).to_string())
        .collect();
    let clients: Vec<reqwest::Client> = (0..args.rest_clients)
        .map(|_| {
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .timeout(REQUEST_TIMEOUT)
                .build()
        })
        .collect::<Result<_, _>>()
        .context("building the REST clients")?;
    let urls: Vec<Arc<str>> = urls.iter().map(|u| Arc::from(u.as_str())).collect();
    let run = |bounds: Arc<Bounds>| {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, client) in clients.iter().enumerate() {
            let url = urls[i % urls.len()].clone();
            let (client, bodies, bounds) = (client.clone(), bodies.clone(), bounds.clone());
            tasks.spawn(async move {
                let mut samples = Samples::default();
                while let Some(n) = bounds.next() {
                    let body = bodies[(i * 7 + n) % bodies.len()].clone();
                    let started = Instant::now();
                    let outcome = rest_search(&client, &url, body).await;
                    samples.record(started, outcome);
                }
                samples
            });
        }
        tasks
    };
    collect(run(Arc::new(Bounds::new(args.warmup, limit)))).await;
    let bounds = Arc::new(Bounds::new(args.requests, limit));
    let samples = collect(run(bounds.clone())).await;
    Ok(samples.phase(&bounds))
}

async fn rest_search(client: &reqwest::Client, url: &str, body: String) -> Result<()> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .context("sending a REST search")?;
    let status = response.status();
    let bytes = response.bytes().await.context("reading a REST answer")?;
    if !status.is_success() {
        bail!(
            "REST search answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
    }
    Ok(())
}

/// The echo tool called directly and through the gateway, alternately, one call at a time.
async fn calls(
    upstream_url: &str,
    gateway_url: &str,
    args: &GatewayBenchArgs,
    limit: Duration,
) -> Result<(Phase, Phase)> {
    let direct = connect(upstream_url).await?;
    let through = connect(gateway_url).await?;
    let public = format!("{SERVER}___{ECHO}");
    let echo_args = || arguments(json!({"text": "ping"}));
    let answer = call(&through, &public, echo_args()).await?;
    if !first_text(&answer).contains("ping") {
        bail!(
            "the gateway's {public} did not echo: {}",
            first_text(&answer)
        );
    }
    for _ in 0..args.warmup {
        let _ = call(&direct, ECHO, echo_args()).await;
        let _ = call(&through, &public, echo_args()).await;
    }
    let bounds = Bounds::new(args.requests, limit);
    let (mut direct_samples, mut gateway_samples) = (Samples::default(), Samples::default());
    let (mut direct_time, mut gateway_time) = (Duration::ZERO, Duration::ZERO);
    while let Some(n) = bounds.next() {
        // Alternate which goes first, so neither always follows the other.
        for first in [n % 2 == 0, n % 2 != 0] {
            let started = Instant::now();
            if first {
                let outcome = call(&direct, ECHO, echo_args()).await.map(drop);
                direct_time += started.elapsed();
                direct_samples.record(started, outcome);
            } else {
                let outcome = call(&through, &public, echo_args()).await.map(drop);
                gateway_time += started.elapsed();
                gateway_samples.record(started, outcome);
            }
        }
    }
    close(direct).await;
    close(through).await;
    Ok((
        direct_samples.phase_over(direct_time),
        gateway_samples.phase_over(gateway_time),
    ))
}

/// The upstream: the catalog's tools, each answering with its arguments as text.
#[derive(Clone)]
struct Upstream {
    tools: Arc<Vec<toolsearch_gateway::rmcp::model::Tool>>,
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = Value::Object(request.arguments.unwrap_or_default()).to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

fn mcp_tool(tool: &Tool) -> Result<toolsearch_gateway::rmcp::model::Tool> {
    let wire = json!({
        "name": tool.name(),
        "description": tool.description(),
        "inputSchema": tool.input_schema(),
    });
    serde_json::from_value(wire)
        .with_context(|| format!("tool `{}` is not a valid MCP tool", tool.name()))
}

/// Serves the upstream on 127.0.0.1 with the gateway's own listener, until `shutdown`.
async fn serve_upstream(
    tools: Vec<toolsearch_gateway::rmcp::model::Tool>,
    shutdown: CancellationToken,
) -> Result<SocketAddr> {
    let upstream = Upstream {
        tools: Arc::new(tools),
    };
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.clone())
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on 127.0.0.1 for the upstream")?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let stop = async move { shutdown.cancelled().await };
        let http = toolsearch_gateway::listener_config::HttpConfig::default();
        if let Err(e) = toolsearch_gateway::rest::serve_with(listener, app, http, stop).await {
            eprintln!("warning: the bench's upstream stopped: {e}");
        }
    });
    Ok(addr)
}

/// `toolsearch-bench upstream`: serves the tools of `--tools` until its stdin closes (the bench
/// holds it open, so the upstream ends with the bench however the bench ends).
pub fn run_upstream(args: UpstreamArgs) -> Result<()> {
    let text =
        std::fs::read(&args.tools).with_context(|| format!("reading {}", args.tools.display()))?;
    let tools: Vec<toolsearch_gateway::rmcp::model::Tool> = serde_json::from_slice(&text)
        .with_context(|| {
            format!(
                "{} is not a JSON array of MCP tools; it is written by `toolsearch bench gateway`",
                args.tools.display()
            )
        })?;
    // The runtime `#[tokio::main]` gives an rmcp server: one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let addr = serve_upstream(tools, shutdown.clone()).await?;
        eprintln!("{UPSTREAM_LISTENING}{addr}/mcp");
        let mut stdin = tokio::io::stdin();
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut stdin, &mut sink).await;
        shutdown.cancel();
        Ok(())
    })
}

/// A scratch directory for the gateway's config, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "toolsearch-bench-gateway-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the scratch directory {}", dir.display()))?;
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The gateway under test: the `toolsearch` in this program's folder, where a build puts both
/// programs, so that the gateway measured is the one built with this harness.
fn toolsearch_next_to_this() -> Result<PathBuf> {
    let this = std::env::current_exe().context("finding this program")?;
    let dir = this.parent().unwrap_or(Path::new("."));
    let exe = dir.join(format!("toolsearch{}", std::env::consts::EXE_SUFFIX));
    if !exe.is_file() {
        bail!(
            "`toolsearch` was not found next to toolsearch-bench at {}: build both with \
             `cargo build --release`",
            dir.display()
        );
    }
    Ok(exe)
}

/// A child process that serves HTTP on loopback: the gateway under test (`toolsearch serve`) or
/// the upstream (`toolsearch-bench upstream`).
struct Listening {
    /// What it is, for messages.
    what: &'static str,
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl Listening {
    /// `exe` is the `toolsearch` program to run.
    async fn start_gateway(config: &Path, exe: &Path) -> Result<Self> {
        Self::start(
            "the gateway",
            exe,
            &[
                "serve",
                "--http",
                "127.0.0.1:0",
                "--wait-for-upstreams",
                // The gateway's own cost, searching by words: hybrid search adds one query
                // embedding per new query, measured apart (docs/BENCHMARKS.md, Hybrid search).
                "--no-semantic",
                "--config",
            ],
            config,
        )
        .await
    }

    /// Runs `exe` with `args` and then `file`, and waits for the line naming its address.
    async fn start(what: &'static str, exe: &Path, args: &[&str], file: &Path) -> Result<Self> {
        let mut child = tokio::process::Command::new(exe)
            .args(args)
            .arg(file)
            // The bench's clients send no token: its gateway is its own, on loopback.
            .env_remove(toolsearch_gateway::rest::TOKENS_ENV)
            // Held open until the bench ends; the upstream stops when it closes.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", exe.display(), args.join(" ")))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("{what}'s stderr is not a pipe"))?;
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        let mut lines = BufReader::new(stderr).lines();
        let listening = tokio::time::timeout(STARTUP_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = listening_addr(&line) {
                    return Some(addr);
                }
                keep(&kept, line);
            }
            None
        })
        .await;
        let addr = match listening {
            Ok(Some(addr)) => addr,
            outcome => {
                let _ = child.start_kill();
                let why = if outcome.is_err() {
                    format!("did not listen within {STARTUP_TIMEOUT:?}")
                } else {
                    "exited before listening".to_string()
                };
                bail!("{what} {why}; its stderr:\n{}", tail(&kept));
            }
        };
        tokio::spawn(drain(lines, kept.clone()));
        Ok(Self {
            what,
            child,
            addr,
            stderr: kept,
        })
    }

    /// Stops the process; an error when it had already exited.
    async fn stop(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "{} exited during the benchmark ({status}); its stderr:\n{}",
                self.what,
                tail(&self.stderr)
            );
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        Ok(())
    }
}

/// What the upstream process writes before its address.
const UPSTREAM_LISTENING: &str = "bench upstream listening on http://";

/// The address in the gateway's "MCP gateway listening on http://ADDR/mcp" line, or in the
/// upstream's.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = ["MCP gateway listening on http://", UPSTREAM_LISTENING]
        .iter()
        .find_map(|marker| line.split(marker).nth(1))?;
    rest.split('/').next()?.parse().ok()
}

fn keep(kept: &Mutex<VecDeque<String>>, line: String) {
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() == STDERR_KEPT {
        kept.pop_front();
    }
    kept.push_back(line);
}

fn tail(kept: &Mutex<VecDeque<String>>) -> String {
    let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    kept.iter().cloned().collect::<Vec<_>>().join("\n")
}

async fn drain(
    mut lines: tokio::io::Lines<BufReader<ChildStderr>>,
    kept: Arc<Mutex<VecDeque<String>>>,
) {
    while let Ok(Some(line)) = lines.next_line().await {
        keep(&kept, line);
    }
}

fn print_table(report: &Report) {
    println!(
        "gateway over {} tools (preset {}, sessions in {}, {} replica(s)), loopback; each measurement after warm-up requests",
        report.tools, report.preset, report.state, report.replicas
    );
    println!();
    println!("| measurement | requests | errors | per second | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let rows = [
        (
            "MCP search_tools, 1 session".to_string(),
            &report.mcp_search_one_session,
        ),
        (
            format!("MCP search_tools, {} sessions", report.sessions),
            &report.mcp_search_concurrent,
        ),
        (
            format!("REST search_tools, {} clients", report.rest_clients),
            &report.rest_search,
        ),
        (
            "call echo directly on the upstream".to_string(),
            &report.call_direct,
        ),
        (
            "call bench___echo through the gateway".to_string(),
            &report.call_gateway,
        ),
    ];
    for (name, p) in rows {
        println!(
            "| {name} | {} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms |",
            p.requests, p.errors, p.per_second, p.p50_ms, p.p99_ms, p.max_ms
        );
    }
    println!();
    println!(
        "call_tool overhead (p50 through the gateway - p50 direct): {:.3} ms",
        report.call_overhead_p50_ms
    );
    println!();
    print_targets(&report.targets);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_the_address() {
        let line = "toolsearch: MCP gateway listening on http://127.0.0.1:40123/mcp (12 tools, preset search); REST API at http://127.0.0.1:40123/api/mcp-standard/";
        assert_eq!(
            listening_addr(line),
            Some("127.0.0.1:40123".parse().unwrap())
        );
        assert_eq!(listening_addr("2026 WARN something else"), None);
        assert_eq!(
            listening_addr(&format!("{UPSTREAM_LISTENING}127.0.0.1:40124/mcp")),
            Some("127.0.0.1:40124".parse().unwrap())
        );
    }

    #[test]
    fn bounds_stop_at_the_request_count() {
        let bounds = Bounds::new(3, Duration::from_secs(3600));
        let taken: Vec<usize> = std::iter::from_fn(|| bounds.next()).collect();
        assert_eq!(taken, [0, 1, 2]);
        assert_eq!(bounds.next(), None);
    }

    #[test]
    fn bounds_stop_at_the_time_limit() {
        let bounds = Bounds::new(usize::MAX, Duration::ZERO);
        assert_eq!(bounds.next(), None);
    }

    #[test]
    fn phases_count_errors_apart_from_latencies() {
        let samples = Samples {
            latencies_ms: vec![1.0, 2.0, 3.0],
            errors: 1,
            first_error: None,
        };
        let phase = samples.phase_over(Duration::from_secs(2));
        assert_eq!((phase.requests, phase.errors), (4, 1));
        assert_eq!(phase.per_second, 1.5);
        assert_eq!(phase.p50_ms, 2.0);
    }

    #[test]
    fn the_config_keeps_sessions_in_redis_only_when_asked() {
        assert!(!gateway_config("http://127.0.0.1:1/mcp", None, None).contains("[state]"));
        let shared = gateway_config(
            "http://127.0.0.1:1/mcp",
            Some("redis://127.0.0.1:6379"),
            Some(1),
        );
        let parsed = toolsearch_gateway::config::GatewayConfig::parse(
            &shared,
            toolsearch_gateway::config::Format::Toml,
            "bench.toml",
        )
        .unwrap();
        assert_eq!(
            parsed.state.redis.as_deref(),
            Some("redis://127.0.0.1:6379")
        );
    }

    #[test]
    fn the_echo_tool_is_served_once_beside_the_catalog() {
        let args = GatewayBenchArgs {
            catalog: None,
            format: None,
            tools: 5,
            requests: 1,
            sessions: 1,
            rest_clients: 1,
            warmup: 0,
            max_seconds: 1.0,
            redis: None,
            replicas: 1,
            upstream_in_process: false,
            many_sessions: false,
            idle_sessions: 1,
            session_rounds: 0,
            throughput_sessions: 1,
            throughput_seconds: 1.0,
            throughput_requests: "ping".into(),
            rest_after_secs: None,
            gateway_exe: None,
            json: true,
        };
        let tools = catalog(&args).unwrap();
        assert_eq!(tools.len(), 6);
        assert_eq!(tools.iter().filter(|t| t.name() == ECHO).count(), 1);
        for tool in &tools {
            mcp_tool(tool).unwrap();
        }
    }
}
