//! The gateway's metrics, in the Prometheus text format at `/metrics` (the `prometheus` crate's
//! registry and encoder). Counters and histograms move as searches and calls happen; gauges of
//! state (upstreams, sessions, stored outputs) are read when the page is scraped.
//!
//! Every metric is named `toolsearch_*` and documented in docs/GATEWAY.md.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Where a search came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    /// A search meta-tool over MCP.
    Mcp,
    /// The REST API.
    Rest,
    /// The console's playground.
    Console,
}

impl Face {
    pub fn as_str(self) -> &'static str {
        match self {
            Face::Mcp => "mcp",
            Face::Rest => "rest",
            Face::Console => "console",
        }
    }
}

/// Latency buckets in seconds: 50 µs to 10 s, for searches (sub-millisecond) and calls (up to the
/// call timeout) alike.
const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

// The constructors below fail only for a malformed name or label set; every one here is a
// constant, checked by the unit test that renders them all.
const STATIC: &str = "a metric defined in this file is well-formed";

fn counters(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect(STATIC)
}

fn gauges(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect(STATIC)
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect(STATIC)
}

fn histograms(name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels).expect(STATIC)
}

/// The registry and every metric in it, by area.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    search: SearchMetrics,
    calls: CallMetrics,
    upstreams: UpstreamMetrics,
    sessions: SessionMetrics,
}

/// Makes each metric and registers it at once, so that none is made and left out of `/metrics`.
struct Declare<'a> {
    registry: &'a Registry,
}

impl Declare<'_> {
    fn add<M: prometheus::core::Collector + Clone + 'static>(&self, metric: M) -> M {
        // Names are fixed and distinct: registering cannot fail.
        if let Err(e) = self.registry.register(Box::new(metric.clone())) {
            tracing::error!(error = %e, "a metric could not be registered");
        }
        metric
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(counters(name, help, labels))
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(gauges(name, help, labels))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(gauge(name, help))
    }

    fn histograms(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> HistogramVec {
        self.add(histograms(name, help, buckets, labels))
    }
}

/// Searches, by face: how many, how long, how many results.
#[derive(Debug, Clone)]
struct SearchMetrics {
    searches: IntCounterVec,
    search_seconds: HistogramVec,
    search_results: HistogramVec,
    empty_searches: IntCounterVec,
}

impl SearchMetrics {
    fn new(declare: &Declare<'_>) -> Self {
        let latency = || LATENCY_BUCKETS.to_vec();
        Self {
            searches: declare.counters(
                "toolsearch_searches_total",
                "Searches, by face (mcp, rest, console) and mode",
                &["face", "mode"],
            ),
            search_seconds: declare.histograms(
                "toolsearch_search_duration_seconds",
                "Time to answer a search, by face",
                latency(),
                &["face"],
            ),
            search_results: declare.histograms(
                "toolsearch_search_results",
                "Results returned by a search, by face",
                vec![0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0],
                &["face"],
            ),
            empty_searches: declare.counters(
                "toolsearch_searches_empty_total",
                "Searches that found no fitting tool (no result, or only guesses), by face",
                &["face"],
            ),
        }
    }
}

/// Calls forwarded to upstreams, by server.
#[derive(Debug, Clone)]
struct CallMetrics {
    calls: IntCounterVec,
    call_errors: IntCounterVec,
    call_seconds: HistogramVec,
}

impl CallMetrics {
    fn new(declare: &Declare<'_>) -> Self {
        let latency = || LATENCY_BUCKETS.to_vec();
        Self {
            calls: declare.counters(
                "toolsearch_calls_total",
                "Tool calls forwarded to an upstream, by server",
                &["server"],
            ),
            call_errors: declare.counters(
                "toolsearch_call_errors_total",
                "Forwarded tool calls that failed or returned isError, by server",
                &["server"],
            ),
            call_seconds: declare.histograms(
                "toolsearch_call_duration_seconds",
                "Time of a forwarded tool call, by server",
                latency(),
                &["server"],
            ),
        }
    }
}

/// The upstreams: their state, restarts, tools and tool vectors.
#[derive(Debug, Clone)]
struct UpstreamMetrics {
    upstream_state: IntGaugeVec,
    upstream_restarts: IntCounterVec,
    upstream_tools: IntGaugeVec,
    tool_vectors: IntCounterVec,
}

impl UpstreamMetrics {
    fn new(declare: &Declare<'_>) -> Self {
        Self {
            upstream_state: declare.gauges(
                "toolsearch_upstream_state",
                "1 for the state each upstream is in, 0 for the others",
                &["server", "state"],
            ),
            upstream_restarts: declare.counters(
                "toolsearch_upstream_restarts_total",
                "Times an upstream went down and was restarted, by server",
                &["server"],
            ),
            upstream_tools: declare.gauges(
                "toolsearch_upstream_tools",
                "Tools each upstream lists (after validation), by server",
                &["server"],
            ),
            tool_vectors: declare.counters(
                "toolsearch_tool_vectors_total",
                "Tool vectors for search by meaning (two per tool: its purpose and its parameters), by where they came from: the model here, this replica's disk cache, or other replicas through the shared state",
                &["source"],
            ),
        }
    }
}

/// Sessions and what they hold: open, resting, started, ended to make room, streams, limits, the state store, stored outputs.
#[derive(Debug, Clone)]
struct SessionMetrics {
    sessions_open: IntGauge,
    sessions_resting: IntGauge,
    sessions_started: IntCounterVec,
    sessions_evicted: IntCounterVec,
    streams_held: IntGauge,
    limit_refusals: IntCounterVec,
    state_store_up: IntGaugeVec,
    offloaded_outputs: IntGauge,
    offloaded_bytes: IntGauge,
}

impl SessionMetrics {
    fn new(declare: &Declare<'_>) -> Self {
        Self {
            sessions_open: declare.gauge(
                "toolsearch_sessions_open",
                "MCP sessions open, resting ones included",
            ),
            sessions_resting: declare.gauge(
                "toolsearch_sessions_resting",
                "MCP sessions resting: idle, their connection let go until their next request",
            ),
            sessions_started: declare.counters(
                "toolsearch_sessions_started_total",
                "MCP sessions started here: opened by a client's initialize, or restored from the shared state (a session another replica opened)",
                &["how"],
            ),
            sessions_evicted: declare.counters(
                "toolsearch_sessions_evicted_total",
                "MCP sessions ended to make room, by reason (token_limit: their token opened one past http.maxSessionsPerToken)",
                &["reason"],
            ),
            streams_held: declare.gauge(
                "toolsearch_streams_held",
                "GET streams (a session's listener for server messages) held open by clients",
            ),
            limit_refusals: declare.counters(
                "toolsearch_limit_refusals_total",
                "Requests refused with 429 because their token was at a limit, by limit (requests: http.maxRequestsPerToken, streams: http.maxStreamsPerToken)",
                &["limit"],
            ),
            state_store_up: declare.gauges(
                "toolsearch_state_store_up",
                "1 when the store sessions are kept in (memory or redis) answered its last request",
                &["store"],
            ),
            offloaded_outputs: declare.gauge(
                "toolsearch_offloaded_outputs",
                "Large tool outputs stored across sessions",
            ),
            offloaded_bytes: declare.gauge(
                "toolsearch_offloaded_bytes",
                "Bytes of large tool outputs stored across sessions",
            ),
        }
    }
}

/// The states an upstream can be in, as the `state` label of `toolsearch_upstream_state`.
pub const UPSTREAM_STATES: [&str; 6] = [
    "starting",
    "ready",
    "restarting",
    "failed",
    "needs_authorization",
    "stopped",
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let declare = Declare {
            registry: &registry,
        };
        let metrics = Self {
            search: SearchMetrics::new(&declare),
            calls: CallMetrics::new(&declare),
            upstreams: UpstreamMetrics::new(&declare),
            sessions: SessionMetrics::new(&declare),
            registry,
        };
        // Zero so that the series exist before the first refusal or eviction.
        for limit in ["requests", "streams"] {
            metrics
                .sessions
                .limit_refusals
                .with_label_values(&[limit])
                .inc_by(0);
        }
        metrics
            .sessions
            .sessions_evicted
            .with_label_values(&["token_limit"])
            .inc_by(0);
        metrics
    }

    /// One search: its face, mode, time, number of results, and how many of them fit (none
    /// when the answer said nothing fits).
    pub fn search(&self, face: Face, mode: &str, seconds: f64, results: usize, fitting: usize) {
        self.search
            .searches
            .with_label_values(&[face.as_str(), mode])
            .inc();
        self.search
            .search_seconds
            .with_label_values(&[face.as_str()])
            .observe(seconds);
        self.search
            .search_results
            .with_label_values(&[face.as_str()])
            .observe(results as f64);
        if fitting == 0 {
            self.search
                .empty_searches
                .with_label_values(&[face.as_str()])
                .inc();
        }
    }

    /// One forwarded call: its server, time and whether it failed.
    pub fn call(&self, server: &str, seconds: f64, failed: bool) {
        self.calls.calls.with_label_values(&[server]).inc();
        self.calls
            .call_seconds
            .with_label_values(&[server])
            .observe(seconds);
        if failed {
            self.calls.call_errors.with_label_values(&[server]).inc();
        }
    }

    /// An upstream went down and is being restarted.
    pub fn restarted(&self, server: &str) {
        self.upstreams
            .upstream_restarts
            .with_label_values(&[server])
            .inc();
    }

    /// Restarts of one upstream so far.
    pub fn restarts(&self, server: &str) -> u64 {
        self.upstreams
            .upstream_restarts
            .with_label_values(&[server])
            .get()
    }

    /// The current state of one upstream (one of [`UPSTREAM_STATES`]) and its tool count.
    pub fn upstream(&self, server: &str, state: &str, tools: usize) {
        for known in UPSTREAM_STATES {
            self.upstreams
                .upstream_state
                .with_label_values(&[server, known])
                .set(i64::from(known == state));
        }
        self.upstreams
            .upstream_tools
            .with_label_values(&[server])
            .set(i64::try_from(tools).unwrap_or(i64::MAX));
        // Zero so that the series exists before the first restart.
        self.upstreams
            .upstream_restarts
            .with_label_values(&[server])
            .inc_by(0);
    }

    /// Gauges read at scrape time: `connected` sessions hold a connection; resting ones are
    /// counted by [`Metrics::sessions_resting`].
    pub fn sessions(&self, connected: usize) {
        let connected = i64::try_from(connected).unwrap_or(i64::MAX);
        self.sessions
            .sessions_open
            .set(connected.saturating_add(self.sessions.sessions_resting.get()));
    }

    /// Sessions resting now (`http.sessionRestAfterSecs`).
    pub fn sessions_resting(&self, resting: usize) {
        self.sessions
            .sessions_resting
            .set(i64::try_from(resting).unwrap_or(i64::MAX));
    }

    pub fn offloaded(&self, outputs: usize, bytes: usize) {
        self.sessions
            .offloaded_outputs
            .set(i64::try_from(outputs).unwrap_or(i64::MAX));
        self.sessions
            .offloaded_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// An MCP session started here: `restored` when another replica opened it.
    pub fn session_started(&self, restored: bool) {
        let how = if restored { "restored" } else { "opened" };
        self.sessions
            .sessions_started
            .with_label_values(&[how])
            .inc();
    }

    /// Tool vectors obtained in one embedding pass, by source.
    pub fn tool_vectors(&self, model: usize, disk: usize, replicas: usize) {
        for (source, count) in [("model", model), ("disk", disk), ("replicas", replicas)] {
            self.upstreams
                .tool_vectors
                .with_label_values(&[source])
                .inc_by(count as u64);
        }
    }

    /// A GET stream opened (`+1`) or ended (`-1`).
    pub fn stream_held(&self, change: i64) {
        self.sessions.streams_held.add(change);
    }

    /// A request refused at one of its token's limits (`requests`, `streams`).
    pub fn limit_refused(&self, limit: &str) {
        self.sessions
            .limit_refusals
            .with_label_values(&[limit])
            .inc();
    }

    /// Sessions ended to make room (`token_limit`).
    pub fn sessions_evicted(&self, reason: &str, count: usize) {
        self.sessions
            .sessions_evicted
            .with_label_values(&[reason])
            .inc_by(count as u64);
    }

    pub fn state_store(&self, store: &str, up: bool) {
        self.sessions
            .state_store_up
            .with_label_values(&[store])
            .set(i64::from(up));
    }

    /// The page `/metrics` serves.
    pub fn render(&self) -> String {
        self.render_servers(|_| true)
    }

    /// The page `/metrics` serves to a caller that may hear only of the servers `shown` accepts:
    /// a series labelled with another server is left out (its name, tools, calls and errors).
    pub fn render_servers(&self, shown: impl Fn(&str) -> bool) -> String {
        let mut families = self.registry.gather();
        for family in &mut families {
            let kept: Vec<_> = family
                .take_metric()
                .into_iter()
                .filter(|metric| {
                    metric
                        .get_label()
                        .iter()
                        .all(|label| label.name() != "server" || shown(label.value()))
                })
                .collect();
            family.set_metric(kept);
        }
        // A family with no series left would still name itself; drop it.
        families.retain(|family| !family.get_metric().is_empty());
        let mut buffer = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buffer) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_and_render_as_prometheus_text() {
        let metrics = Metrics::new();
        metrics.search(Face::Mcp, "keyword", 0.0004, 3, 3);
        metrics.search(Face::Rest, "hybrid", 0.002, 2, 0);
        metrics.call("time", 0.01, false);
        metrics.call("time", 0.02, true);
        metrics.upstream("time", "ready", 2);
        metrics.sessions(4);
        let text = metrics.render();
        for line in [
            "toolsearch_searches_total{face=\"mcp\",mode=\"keyword\"} 1",
            "toolsearch_searches_empty_total{face=\"rest\"} 1",
            "toolsearch_calls_total{server=\"time\"} 2",
            "toolsearch_call_errors_total{server=\"time\"} 1",
            "toolsearch_upstream_state{server=\"time\",state=\"ready\"} 1",
            "toolsearch_upstream_state{server=\"time\",state=\"failed\"} 0",
            "toolsearch_upstream_tools{server=\"time\"} 2",
            "toolsearch_sessions_open 4",
            "# TYPE toolsearch_search_duration_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn a_caller_limited_to_some_servers_sees_only_their_series() {
        let metrics = Metrics::new();
        metrics.call("time", 0.01, false);
        metrics.call("secret", 0.01, true);
        metrics.upstream("time", "ready", 2);
        metrics.upstream("secret", "ready", 5);
        metrics.restarted("secret");
        metrics.sessions(3);
        let text = metrics.render_servers(|server| server == "time");
        assert!(!text.contains("secret"), "{text}");
        assert!(
            text.contains("toolsearch_calls_total{server=\"time\"} 1"),
            "{text}"
        );
        assert!(text.contains("toolsearch_sessions_open 3"), "{text}");
        assert!(
            text.contains("toolsearch_upstream_restarts_total{server=\"time\"} 0"),
            "{text}"
        );
        // A family left without series is not written at all (call errors: only `secret`).
        assert!(!text.contains("toolsearch_call_errors_total"), "{text}");
        assert!(metrics.render().contains("secret"));
    }
}
