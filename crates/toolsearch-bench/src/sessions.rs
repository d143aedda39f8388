//! `toolsearch bench gateway --many-sessions`: what many MCP sessions cost the gateway, and how
//! many requests 200 of them get answered. The gateway and its upstream run as child processes,
//! as in the other measurements; the clients here are plain HTTP (reqwest over loopback, no
//! MCP library), so that ten thousand sessions cost the bench little. Measured in order:
//!
//! - the gateway's resident memory (`VmRSS`) once it listens (a fresh start);
//! - with `--idle-sessions` sessions open, each opened as a client opens one (`initialize`,
//!   `notifications/initialized`, one `tools/list`), then left idle;
//! - after a `ping` to each, and after each was ended with `DELETE`;
//! - after each of `--session-rounds` rounds that open as many sessions again and delete them;
//! - throughput: `--throughput-sessions` sessions sending `--throughput-requests` in turn, one
//!   request at a time each, for `--throughput-seconds`.

use super::{
    print_targets, Bounds, GatewayBenchArgs, Listening, Phase, Samples, Target, LIMIT,
    REQUEST_TIMEOUT,
};
use crate::BadInput;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests in flight at once while sessions are opened, pinged and deleted.
const OPENERS: usize = 64;
/// Time the gateway is given after sessions end (their tasks exit, memory is freed) before its
/// memory is read.
const SETTLE: Duration = Duration::from_secs(2);
/// How long the idle sessions may take to rest: the gateway's default `http.sessionRestAfterSecs`
/// (30 s), the interval it checks at, and room for 10,000 sessions.
const REST_WAIT: Duration = Duration::from_secs(90);
/// The protocol the sessions speak: one with sessions (2026-07-28 has none).
const PROTOCOL: &str = "2025-06-18";

/// What the throughput phase sends, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Ping,
    ToolsList,
    SearchTools,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ping => "ping",
            Kind::ToolsList => "tools/list",
            Kind::SearchTools => "search_tools",
        }
    }
}

/// `--throughput-requests`: a comma-separated list of `ping`, `tools/list`, `search_tools`.
pub(super) fn parse_kinds(text: &str) -> Result<Vec<Kind>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| match k {
            "ping" => Ok(Kind::Ping),
            "tools/list" => Ok(Kind::ToolsList),
            "search_tools" => Ok(Kind::SearchTools),
            other => Err(format!(
                "`{other}` is not a request the bench sends; use ping, tools/list or search_tools"
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|kinds| {
            if kinds.is_empty() {
                Err("name at least one request: ping, tools/list or search_tools".to_string())
            } else {
                Ok(kinds)
            }
        })
}

pub(super) fn check_args(args: &GatewayBenchArgs) -> Result<()> {
    let positive = [
        ("--idle-sessions", args.idle_sessions),
        ("--throughput-sessions", args.throughput_sessions),
    ];
    for (flag, value) in positive {
        if value == 0 {
            return Err(BadInput(format!("{flag} must be at least 1")).into());
        }
    }
    if !(args.throughput_seconds.is_finite() && args.throughput_seconds > 0.0) {
        return Err(BadInput(format!(
            "--throughput-seconds is {}; give a positive number of seconds",
            args.throughput_seconds
        ))
        .into());
    }
    if args.replicas > 1 {
        return Err(BadInput(
            "--many-sessions measures one gateway process; leave --replicas at 1".into(),
        )
        .into());
    }
    Ok(())
}

/// The gateway's memory at one point, with the sessions it said it had open.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Memory {
    /// Resident memory, in MB (`VmRSS`); 0 where `/proc` is missing.
    rss_mb: f64,
    /// `toolsearch_sessions_open` from `/metrics`.
    sessions_open: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(super) struct SessionsReport {
    mode: &'static str,
    tools: usize,
    preset: &'static str,
    state: &'static str,
    idle_sessions: usize,
    /// After the gateway listens, before any session.
    fresh: Memory,
    /// With `idle_sessions` sessions just opened.
    idle: Memory,
    /// Once they rest (`http.sessionRestAfterSecs` after their last request); `None` when they
    /// did not within [`REST_WAIT`].
    rested: Option<Memory>,
    /// Seconds from the last session opened until every one rested.
    rest_seconds: Option<f64>,
    /// After a ping to each idle session.
    pinged: Memory,
    /// After every session was deleted.
    ended: Memory,
    /// After each further round of opening `idle_sessions` sessions and deleting them.
    rounds: Vec<Memory>,
    /// `idle.rss_mb - fresh.rss_mb`: sessions just opened.
    idle_cost_mb: f64,
    /// `idle_cost_mb` per session, in KB.
    per_session_kb: f64,
    /// `rested.rss_mb - fresh.rss_mb`.
    rested_cost_mb: Option<f64>,
    /// `rested_cost_mb` per session, in KB.
    rested_per_session_kb: Option<f64>,
    /// `ended.rss_mb - fresh.rss_mb`.
    ended_above_fresh_mb: f64,
    /// Opening a session: initialize, notifications/initialized, tools/list.
    open: Phase,
    ping: Phase,
    delete: Phase,
    throughput_sessions: usize,
    throughput_requests: Vec<&'static str>,
    /// Every session sending its requests, one at a time, for the phase's seconds.
    throughput: Phase,
    /// Failed requests over all phases.
    errors: usize,
    targets: Vec<Target>,
}

/// The many-session measurement, against the gateway `gateway` already running.
pub(super) async fn measure(
    args: &GatewayBenchArgs,
    gateway: &Listening,
    tools: usize,
    queries: &[String],
    kinds: &[Kind],
) -> Result<SessionsReport> {
    let pid = gateway
        .child
        .id()
        .ok_or_else(|| anyhow!("the gateway exited before the measurement"))?;
    let base = format!("http://{}", gateway.addr);
    let client = Arc::new(McpClient::new(&base)?);
    let note = |what: String| {
        if !args.json {
            eprintln!("{what} ...");
        }
    };
    let n = args.idle_sessions;
    tokio::time::sleep(SETTLE).await;
    let fresh = memory(pid, &client).await;

    note(format!("opening {n} idle sessions"));
    let (ids, open) = open_sessions(&client, n).await;
    let idle = memory(pid, &client).await;
    note(format!(
        "waiting for the {} sessions to rest (http.sessionRestAfterSecs)",
        ids.len()
    ));
    let waited = Instant::now();
    let mut rest_seconds = None;
    while waited.elapsed() < REST_WAIT {
        if client.sessions_resting().await >= Some(ids.len() as u64) {
            rest_seconds = Some(waited.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rested = match rest_seconds {
        Some(_) => {
            // The heap is trimmed a moment after a wave of sessions let go.
            tokio::time::sleep(SETTLE).await;
            Some(memory(pid, &client).await)
        }
        None => {
            eprintln!(
                "warning: the sessions did not all rest within {} s; is http.sessionRestAfterSecs 0?",
                REST_WAIT.as_secs()
            );
            None
        }
    };
    note(format!("pinging {} sessions", ids.len()));
    let ping = for_each(&client, &ids, |c, id| async move {
        c.request(&id, "ping", json!({})).await.map(drop)
    })
    .await;
    let pinged = memory(pid, &client).await;
    note(format!("deleting {} sessions", ids.len()));
    let delete = for_each(&client, &ids, |c, id| async move { c.delete(&id).await }).await;
    tokio::time::sleep(SETTLE).await;
    let ended = memory(pid, &client).await;
    let (open, ping, delete) = (open.phase(), ping.phase(), delete.phase());
    let mut errors = open.errors + ping.errors + delete.errors;

    let mut rounds = Vec::with_capacity(args.session_rounds);
    for round in 1..=args.session_rounds {
        note(format!(
            "round {round} of {}: opening and deleting {n} sessions",
            args.session_rounds
        ));
        let (ids, opened) = open_sessions(&client, n).await;
        let deleted = for_each(&client, &ids, |c, id| async move { c.delete(&id).await }).await;
        errors += opened.phase().errors + deleted.phase().errors;
        tokio::time::sleep(SETTLE).await;
        rounds.push(memory(pid, &client).await);
    }

    let sessions = args.throughput_sessions;
    note(format!(
        "{sessions} sessions sending requests for {} s",
        args.throughput_seconds
    ));
    let throughput = throughput(&client, sessions, args.throughput_seconds, queries, kinds).await?;
    errors += throughput.errors;

    let idle_cost_mb = idle.rss_mb - fresh.rss_mb;
    let rested_cost_mb = rested.as_ref().map(|m| m.rss_mb - fresh.rss_mb);
    let ended_above_fresh_mb = ended.rss_mb - fresh.rss_mb;
    let last = rounds.last().unwrap_or(&ended);
    let budget_mb = 250.0 * n as f64 / 10_000.0;
    let targets = vec![
        Target {
            name: format!("{n} idle sessions above a fresh start, once resting"),
            target: format!("<= {budget_mb:.1} MB"),
            measured: rested_cost_mb.map_or("they did not rest".to_string(), |mb| {
                format!("{mb:.1} MB ({idle_cost_mb:.1} MB just opened)")
            }),
            met: rested_cost_mb.is_some_and(|mb| mb <= budget_mb),
        },
        Target {
            name: "memory after the sessions end".to_string(),
            target: "within 20% of a fresh start".to_string(),
            measured: format!(
                "{:+.1}% after them, {:+.1}% after the last round",
                percent_above(ended.rss_mb, fresh.rss_mb),
                percent_above(last.rss_mb, fresh.rss_mb)
            ),
            met: ended.rss_mb <= fresh.rss_mb * 1.2 && last.rss_mb <= fresh.rss_mb * 1.2,
        },
        Target {
            name: format!("requests/s, {sessions} sessions"),
            target: ">= 2000".to_string(),
            measured: format!("{:.0}", throughput.per_second),
            met: throughput.per_second >= 2000.0,
        },
        Target {
            name: "errors".to_string(),
            target: "0".to_string(),
            measured: errors.to_string(),
            met: errors == 0,
        },
    ];
    Ok(SessionsReport {
        mode: "sessions",
        tools,
        preset: "search",
        state: if args.redis.is_some() {
            "redis"
        } else {
            "memory"
        },
        idle_sessions: n,
        per_session_kb: idle_cost_mb * 1024.0 / n as f64,
        idle_cost_mb,
        rested_per_session_kb: rested_cost_mb.map(|mb| mb * 1024.0 / n as f64),
        rested_cost_mb,
        rested,
        rest_seconds,
        ended_above_fresh_mb,
        fresh,
        idle,
        pinged,
        ended,
        rounds,
        open,
        ping,
        delete,
        throughput_sessions: sessions,
        throughput_requests: kinds.iter().map(|k| k.name()).collect(),
        throughput,
        errors,
        targets,
    })
}

fn percent_above(value: f64, base: f64) -> f64 {
    if base > 0.0 {
        (value - base) / base * 100.0
    } else {
        0.0
    }
}

/// Samples of a phase with the time it took.
pub(super) struct Timed {
    samples: Samples,
    elapsed: Duration,
}

impl Timed {
    /// The phase's figures (a warning names its first failure).
    fn phase(self) -> Phase {
        self.samples.phase_over(self.elapsed)
    }
}

/// Opens `n` sessions, `OPENERS` at a time; the ids of those that opened.
async fn open_sessions(client: &Arc<McpClient>, n: usize) -> (Vec<String>, Timed) {
    let ids = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let slots: Vec<usize> = (0..n).collect();
    let opened = {
        let ids = ids.clone();
        for_each(client, &slots, move |c, _| {
            let ids = ids.clone();
            async move {
                let id = c.open().await?;
                ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
                Ok(())
            }
        })
        .await
    };
    let ids = std::mem::take(&mut *ids.lock().unwrap_or_else(|e| e.into_inner()));
    (ids, opened)
}

/// Runs `work` once per item, `OPENERS` at a time, timing each.
async fn for_each<T, F, Fut>(client: &Arc<McpClient>, items: &[T], work: F) -> Timed
where
    T: Clone + Send + Sync + 'static,
    F: Fn(Arc<McpClient>, T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let items: Arc<[T]> = items.into();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..OPENERS.min(items.len()) {
        let (client, items, next, work) =
            (client.clone(), items.clone(), next.clone(), work.clone());
        tasks.spawn(async move {
            let mut samples = Samples::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let began = Instant::now();
                let outcome = work(client.clone(), item.clone()).await;
                samples.record(began, outcome);
            }
            samples
        });
    }
    let samples = super::collect(tasks).await;
    Timed {
        samples,
        elapsed: started.elapsed(),
    }
}

/// `sessions` sessions, each sending `kinds` in turn, one request at a time, for `seconds`.
async fn throughput(
    client: &Arc<McpClient>,
    sessions: usize,
    seconds: f64,
    queries: &[String],
    kinds: &[Kind],
) -> Result<Phase> {
    let (ids, opened) = open_sessions(client, sessions).await;
    if let Some(e) = &opened.samples.first_error {
        bail!(
            "{} of {sessions} sessions did not open for the throughput phase; the first: {e}",
            opened.samples.errors
        );
    }
    let queries: Arc<[String]> = queries.into();
    let kinds: Arc<[Kind]> = kinds.into();
    let bounds = Arc::new(Bounds::new(usize::MAX, Duration::from_secs_f64(seconds)));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, id) in ids.iter().enumerate() {
        let (client, id, queries, kinds, bounds) = (
            client.clone(),
            id.clone(),
            queries.clone(),
            kinds.clone(),
            bounds.clone(),
        );
        tasks.spawn(async move {
            let mut samples = Samples::default();
            let mut turn = i;
            while bounds.next().is_some() {
                let kind = kinds[turn % kinds.len()];
                let began = Instant::now();
                let outcome = match kind {
                    Kind::Ping => client.request(&id, "ping", json!({})).await.map(drop),
                    Kind::ToolsList => client.request(&id, "tools/list", json!({})).await.map(drop),
                    Kind::SearchTools => {
                        let query = &queries[(i * 7 + turn) % queries.len()];
                        client.search(&id, query).await
                    }
                };
                samples.record(began, outcome);
                turn += 1;
            }
            samples
        });
    }
    let samples = super::collect(tasks).await;
    let phase = samples.phase(&bounds);
    let deleted = for_each(client, &ids, |c, id| async move { c.delete(&id).await }).await;
    if let Some(e) = &deleted.samples.first_error {
        eprintln!(
            "warning: {} session(s) of the throughput phase were not deleted; the first: {e}",
            deleted.samples.errors
        );
    }
    Ok(phase)
}

/// The gateway's resident memory and open sessions now.
async fn memory(pid: u32, client: &McpClient) -> Memory {
    Memory {
        rss_mb: rss_kb(pid).map_or(0.0, |kb| kb as f64 / 1024.0),
        sessions_open: client.sessions_open().await,
    }
}

/// `VmRSS` of process `pid`, in KB (Linux).
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    vm_rss_kb(&status)
}

fn vm_rss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// MCP over Streamable HTTP, by hand: JSON-RPC POSTs naming the session, answers read from the
/// SSE stream (or the JSON body) that each POST returns.
pub(super) struct McpClient {
    http: reqwest::Client,
    mcp: String,
    metrics: String,
    next_id: AtomicU64,
}

impl McpClient {
    fn new(base: &str) -> Result<Self> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(usize::MAX)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            http,
            mcp: format!("{base}/mcp"),
            metrics: format!("{base}/metrics"),
            next_id: AtomicU64::new(1),
        })
    }

    fn post(&self, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", PROTOCOL);
        }
        request
    }

    /// Opens a session as a client does: initialize, notifications/initialized, tools/list.
    async fn open(&self) -> Result<String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let initialize = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "toolsearch-bench", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let response = self
            .post(None, &initialize)
            .send()
            .await
            .context("sending initialize")?;
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        answer(response, id).await.context("initialize")?;
        let session = session.ok_or_else(|| anyhow!("initialize answered no Mcp-Session-Id"))?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = self
            .post(Some(&session), &initialized)
            .send()
            .await
            .context("sending notifications/initialized")?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            bail!("notifications/initialized answered {status}: {text}");
        }
        self.request(&session, "tools/list", json!({})).await?;
        Ok(session)
    }

    /// One request in `session`; what its answer says.
    async fn request(&self, session: &str, method: &str, params: Value) -> Result<Answer> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self
            .post(Some(session), &body)
            .send()
            .await
            .with_context(|| format!("sending {method}"))?;
        answer(response, id).await.context(method.to_string())
    }

    async fn search(&self, session: &str, query: &str) -> Result<()> {
        let params = json!({
            "name": "search_tools",
            "arguments": {"query": query, "limit": LIMIT},
        });
        let answer = self.request(session, "tools/call", params).await?;
        if answer.is_error {
            bail!("search_tools answered an error");
        }
        Ok(())
    }

    async fn delete(&self, session: &str) -> Result<()> {
        let response = self
            .http
            .delete(&self.mcp)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", PROTOCOL)
            .send()
            .await
            .context("sending DELETE")?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            bail!("DELETE answered {status}: {text}");
        }
        Ok(())
    }

    /// `toolsearch_sessions_open` from `/metrics`; `None` when it cannot be read.
    async fn sessions_open(&self) -> Option<u64> {
        self.gauge("toolsearch_sessions_open").await
    }

    /// `toolsearch_sessions_resting` from `/metrics`.
    async fn sessions_resting(&self) -> Option<u64> {
        self.gauge("toolsearch_sessions_resting").await
    }

    /// A gauge of `/metrics`; `None` when it cannot be read.
    async fn gauge(&self, name: &str) -> Option<u64> {
        let text = self
            .http
            .get(&self.metrics)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))?
            .trim()
            .parse()
            .ok()
    }
}

/// The result of the JSON-RPC answer `id` in `response`: an error for an HTTP or JSON-RPC error.
/// What the load generator reads of an answer: whether it is the request's, and whether it
/// failed. It is read without building the answer's JSON tree (the generator shares the
/// machine with the gateway it measures).
#[derive(Debug, Default, PartialEq)]
struct Answer {
    /// A tool call's `isError`.
    is_error: bool,
}

/// One JSON-RPC message, with only what [`Answer`] needs; the rest is skipped unread.
#[derive(serde::Deserialize)]
struct Message<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    error: Option<&'a serde_json::value::RawValue>,
    result: Option<MessageResult>,
}

#[derive(serde::Deserialize)]
struct MessageResult {
    #[serde(rename = "isError", default)]
    is_error: bool,
}

/// The answer to request `id` in `response`: an error for an HTTP or JSON-RPC error.
async fn answer(response: reqwest::Response, id: u64) -> Result<Answer> {
    let status = response.status();
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = response.bytes().await.context("reading the answer")?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        bail!("answered {status}: {}", clip(&text));
    }
    read_answer(&text, sse, id)
}

/// The answer to request `id` in a body (an SSE stream, or one JSON message).
fn read_answer(text: &str, sse: bool, id: u64) -> Result<Answer> {
    // `None` for a message that is not the answer to `id`.
    let read = |data: &str| -> Option<Result<Answer>> {
        let message: Message = serde_json::from_str(data).ok()?;
        if message.id != Some(id) {
            return None;
        }
        Some(match (message.error, message.result) {
            (Some(error), _) => Err(anyhow!("answered an error: {}", clip(error.get()))),
            (None, result) => Ok(Answer {
                is_error: result.is_some_and(|r| r.is_error),
            }),
        })
    };
    let found = if sse {
        sse_data(text).find_map(|data| read(&data))
    } else {
        read(text)
    };
    found.unwrap_or_else(|| Err(anyhow!("no answer to request {id} in: {}", clip(text))))
}

/// The data of each SSE event that has some (the priming event has none); one line's data is
/// borrowed, several are joined.
fn sse_data(text: &str) -> impl Iterator<Item = std::borrow::Cow<'_, str>> + '_ {
    text.split("\n\n").filter_map(|event| {
        let mut data = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d));
        let first = data.next()?;
        let rest: Vec<&str> = data.collect();
        if rest.is_empty() {
            return Some(std::borrow::Cow::Borrowed(first));
        }
        let mut joined = first.to_string();
        for line in rest {
            joined.push('\n');
            joined.push_str(line);
        }
        Some(std::borrow::Cow::Owned(joined))
    })
}

fn clip(text: &str) -> String {
    const KEPT: usize = 300;
    match text.char_indices().nth(KEPT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

pub(super) fn print_table(report: &SessionsReport) {
    println!(
        "gateway over {} tools (preset {}, sessions in {}), loopback; {} idle sessions, then {} rounds of opening and deleting as many",
        report.tools, report.preset, report.state, report.idle_sessions, report.rounds.len()
    );
    println!();
    println!("| gateway memory | RSS | sessions open |");
    println!("|---|---:|---:|");
    let open = |m: &Memory| m.sessions_open.map_or("?".to_string(), |n| n.to_string());
    let mut rows = vec![
        ("fresh start".to_string(), &report.fresh),
        (
            format!("{} idle sessions, just opened", report.idle_sessions),
            &report.idle,
        ),
    ];
    if let Some(rested) = &report.rested {
        rows.push((
            format!(
                "the same, resting ({:.0} s later)",
                report.rest_seconds.unwrap_or_default()
            ),
            rested,
        ));
    }
    rows.extend([
        ("after a ping to each".to_string(), &report.pinged),
        ("after deleting them".to_string(), &report.ended),
    ]);
    for (i, round) in report.rounds.iter().enumerate() {
        rows.push((format!("after round {}", i + 1), round));
    }
    for (name, m) in rows {
        println!("| {name} | {:.1} MB | {} |", m.rss_mb, open(m));
    }
    println!();
    println!(
        "idle sessions cost {:.1} MB ({:.1} KB each) just opened, {} resting; after they ended, {:+.1} MB above the fresh start",
        report.idle_cost_mb,
        report.per_session_kb,
        match (report.rested_cost_mb, report.rested_per_session_kb) {
            (Some(mb), Some(kb)) => format!("{mb:.1} MB ({kb:.1} KB each)"),
            _ => "not measured (they did not rest)".to_string(),
        },
        report.ended_above_fresh_mb
    );
    println!();
    println!("| measurement | requests | errors | per second | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let phases = [
        ("open a session (3 requests)".to_string(), &report.open),
        ("ping".to_string(), &report.ping),
        ("DELETE".to_string(), &report.delete),
        (
            format!(
                "{} sessions: {}",
                report.throughput_sessions,
                report.throughput_requests.join(", ")
            ),
            &report.throughput,
        ),
    ];
    for (name, p) in phases {
        println!(
            "| {name} | {} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms |",
            p.requests, p.errors, p.per_second, p.p50_ms, p.p99_ms, p.max_ms
        );
    }
    println!();
    print_targets(&report.targets);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_memory_is_read_from_the_status_file() {
        let status = "Name:\ttoolsearch\nVmPeak:\t  900 kB\nVmRSS:\t   51234 kB\nThreads:\t4\n";
        assert_eq!(vm_rss_kb(status), Some(51234));
        assert_eq!(vm_rss_kb("Name:\tx\n"), None);
    }

    #[test]
    fn answers_are_found_in_an_event_stream() {
        let body = "id: 0\nretry: 3000\ndata: \n\nevent: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"isError\":true,\"content\":[]}}\n\n";
        assert_eq!(
            read_answer(body, true, 7).unwrap(),
            Answer { is_error: true }
        );
        assert!(
            read_answer(body, true, 8).is_err(),
            "another request's answer"
        );
        let error =
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no such method"}}"#;
        let e = read_answer(error, false, 3).unwrap_err().to_string();
        assert!(e.contains("no such method"), "{e}");
        let split = "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}\n\n";
        assert_eq!(read_answer(split, true, 1).unwrap(), Answer::default());
    }

    #[test]
    fn request_kinds_parse_and_unknown_ones_are_named() {
        assert_eq!(
            parse_kinds("ping, tools/list,search_tools").unwrap(),
            [Kind::Ping, Kind::ToolsList, Kind::SearchTools]
        );
        assert!(parse_kinds("ping,list").unwrap_err().contains("`list`"));
        assert!(parse_kinds(" , ").is_err());
    }
}
