//! `toolsearch serve`: the MCP gateway over the upstreams of a config file (`--config FILE`, over
//! `--stdio` or `--http ADDR` with the REST API beside `/mcp`), or the REST API alone over a catalog
//! file (`--rest-only`).

use crate::catalog_file::load_engine_with;
use crate::model_args::ModelArgs;
use crate::BadInput;
use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use toolsearch_gateway::config::GatewayConfig;
use toolsearch_gateway::downstream;
use toolsearch_gateway::rest::{self, RestState};
use toolsearch_gateway::semantic::Semantic;
use toolsearch_gateway::{CancellationToken, Gateway};

/// Where the REST API listens when `--http` is not given.
const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// Where the gateway listens when neither `--stdio` nor `--http` is given.
const DEFAULT_GATEWAY_HTTP: &str = "127.0.0.1:8787";

#[derive(Args)]
pub struct ServeArgs {
    /// Gateway config (TOML or JSON): mcpServers, toolSearch, categories, rest (API tokens).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Speak MCP over stdin/stdout.
    #[arg(long, conflicts_with_all = ["http", "rest_only"])]
    stdio: bool,
    /// Listen for HTTP on this address: MCP at /mcp and the REST API [default: 127.0.0.1:8787;
    /// with --rest-only: 127.0.0.1:8080]. IP:PORT, localhost:PORT, or a bare PORT (on 127.0.0.1).
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_addr)]
    http: Option<SocketAddr>,
    /// Serve only the REST API, over the static catalog of --catalog (no upstream servers).
    #[arg(long, requires = "catalog")]
    rest_only: bool,
    /// Catalog file for --rest-only (MCP tools/list, OpenAI, Anthropic, Gemini or multi-server JSON).
    #[arg(long, value_name = "FILE", requires = "rest_only")]
    catalog: Option<PathBuf>,
    /// Force the catalog format: mcp, openai, anthropic, gemini, multi.
    #[arg(long, value_name = "F", requires = "catalog")]
    format: Option<String>,
    /// Serve the REST API without a token on a non-loopback address.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Before serving, wait until every upstream has finished its first start (ready, or failed),
    /// at most supervisor.startupTimeoutSecs, so that the first tools/list already holds their
    /// tools: for clients that ignore tools/list_changed. Without it the gateway serves at once
    /// and upstreams join as they become ready.
    #[arg(long, conflicts_with = "rest_only")]
    wait_for_upstreams: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// `--model`, `--offline` and `--no-semantic` over the config's `toolSearch.semantic`.
fn apply_model_args(config: &mut GatewayConfig, args: &ModelArgs) {
    let semantic = &mut config.tool_search.semantic;
    if let Some(dir) = &args.model {
        semantic.model = Some(dir.clone());
    }
    semantic.offline |= args.offline;
    if args.no_semantic {
        semantic.enabled = false;
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    refuse_inside_a_gateway()?;
    if args.rest_only {
        let runtime = runtime_builder()
            .build()
            .context("cannot start the async runtime")?;
        return runtime.block_on(on_a_worker(rest_only(args)));
    }
    let path = args.config.clone().ok_or_else(|| {
        BadInput(
            "the gateway needs a config: `toolsearch serve --config FILE [--stdio | --http ADDR]` (see examples/gateway.toml), or serve a catalog file with `--rest-only --catalog FILE`"
                .into(),
        )
    })?;
    let mut config = GatewayConfig::load(&path).map_err(|e| BadInput(e.to_string()))?;
    config
        .require_servers(&path)
        .and_then(|()| config.require_environment(&path))
        .map_err(|e| BadInput(e.to_string()))?;
    apply_model_args(&mut config, &args.model);
    let mut builder = runtime_builder();
    // `toolSearch.debug` turns on the engine's per-search log (query, index size, matches before
    // and after the threshold, time). The global logger is set before the config is read, so
    // every runtime thread gets a logger with that filter added.
    let _debug_guard = if config.tool_search.debug {
        let dispatch = debug_dispatch();
        let per_thread = dispatch.clone();
        builder.on_thread_start(move || {
            // The guard must live as long as the thread; the thread ends with the runtime.
            std::mem::forget(tracing::dispatcher::set_default(&per_thread));
        });
        Some(tracing::dispatcher::set_default(&dispatch))
    } else {
        None
    };
    let runtime = builder.build().context("cannot start the async runtime")?;
    runtime.block_on(on_a_worker(gateway(args, config)))
}

/// A gateway started by a gateway (directly or through a wrapper) would start its own upstreams,
/// and a config that lists the gateway starts copies without end; the marker every upstream gets
/// stops the chain at the second gateway.
fn refuse_inside_a_gateway() -> Result<()> {
    let depth = toolsearch_gateway::upstream::child_env::gateway_depth();
    if depth == 0 {
        return Ok(());
    }
    Err(BadInput(format!(
        "this toolsearch serve was started by another toolsearch gateway ({}={depth}), and a gateway does not run inside a gateway; remove the entry that starts toolsearch from that gateway's config",
        toolsearch_gateway::upstream::child_env::GATEWAY_DEPTH_VAR
    ))
    .into())
}

/// The async runtime. With one worker (the default on 2 cores) it is tokio's single-threaded
/// scheduler on the thread that runs the server: the same one thread as a one-worker
/// multi-threaded runtime, without its work-stealing bookkeeping and the wake-ups it sends
/// itself. Together with the gateway's yield before rmcp's priming event it took about 0.05 ms
/// off a forwarded call; alone it showed no gain (docs/BENCHMARKS.md, "Gateway").
/// More workers (`TOKIO_WORKER_THREADS`) get the multi-threaded scheduler.
fn runtime_builder() -> tokio::runtime::Builder {
    let workers = async_workers();
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    builder.enable_all();
    builder
}

/// Runs `server` as a task on the runtime's workers rather than on the thread that called
/// `block_on`: its accept loop then wakes the connections it spawns on the same thread, instead
/// of crossing to a worker for every new connection.
async fn on_a_worker(
    server: impl std::future::Future<Output = Result<()>> + Send + 'static,
) -> Result<()> {
    match tokio::spawn(server).await {
        Ok(outcome) => outcome,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the server task was cancelled: {e}")),
    }
}

/// Async worker threads: `TOKIO_WORKER_THREADS` when set, else half the cores (at least one).
/// The workers only move bytes and messages: searches, query embeddings and re-indexing run on
/// the blocking pool, jq filters and the model's indexing on threads of their own, all free to
/// use every core. A request's hand-offs between tasks (HTTP, session, handler, upstream client)
/// stay on one thread instead of waking another across cores, which took a forwarded call's
/// added latency from 0.41–0.43 to 0.34–0.38 ms on 2 cores (docs/BENCHMARKS.md, "Gateway").
fn async_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    workers_for(std::env::var("TOKIO_WORKER_THREADS").ok().as_deref(), cores)
}

fn workers_for(setting: Option<&str>, cores: usize) -> usize {
    match setting.and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => n,
        _ => (cores / 2).max(1),
    }
}

/// The process's logger (its filter, format and colours) plus the engine's debug log.
fn debug_dispatch() -> tracing::Dispatch {
    crate::logging::dispatch_with("toolsearch_core=debug")
}

/// `--http`: an IP address and port, `localhost:PORT` (loopback), or a bare port (on loopback).
fn parse_listen_addr(value: &str) -> Result<SocketAddr, String> {
    let value = value.trim();
    let port = |text: &str| {
        text.parse::<u16>().map_err(|_| {
            format!("`{text}` is not a port: use a number from 0 to 65535 (0 picks a free one)")
        })
    };
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port(value)?)));
    }
    if let Some((host, rest)) = value.rsplit_once(':') {
        if host.eq_ignore_ascii_case("localhost") {
            return Ok(SocketAddr::from(([127, 0, 0, 1], port(rest)?)));
        }
    }
    value.parse().map_err(|_| {
        format!(
            "`{value}` is not an address to listen on: use IP:PORT (127.0.0.1:8787, \
             [::1]:8787, 0.0.0.0:8787), localhost:PORT, or a bare port (8787)"
        )
    })
}

/// The MCP gateway: upstreams from the config, clients over stdio or HTTP.
async fn gateway(args: ServeArgs, config: GatewayConfig) -> Result<()> {
    let gateway = Gateway::start(config.clone()).map_err(|e| BadInput(e.to_string()))?;
    // Served at once: `initialize` is answered at once, a session's first tools/list waits for
    // the upstreams' first starts, and sessions whose list changes later get tools/list_changed.
    // On request the listener itself waits for the first starts instead.
    if args.wait_for_upstreams {
        let startup = Duration::from_secs(config.supervisor.startup_timeout_secs.saturating_add(1));
        for (server, state) in gateway.wait_started(startup).await {
            tracing::warn!(server, %state, "upstream not ready; serving the others");
        }
    }
    let tool_count = catalog_summary(&gateway);
    let preset = gateway.preset();
    let shutdown = CancellationToken::new();
    let outcome = if args.stdio {
        tracing::info!(catalog = %tool_count, %preset, "MCP gateway on stdio");
        tokio::select! {
            r = downstream::serve_stdio(gateway.clone(), shutdown.clone()) => r.map_err(anyhow::Error::from),
            () = shutdown_signal() => Ok(()),
        }
    } else {
        serve_gateway_http(
            &args,
            &config,
            gateway.clone(),
            shutdown.clone(),
            tool_count,
        )
        .await
    };
    shutdown.cancel();
    gateway.shutdown().await;
    outcome
}

/// What the catalog holds as the listener opens: its tool count once the upstreams' first starts
/// have settled, else how many upstreams are still starting (a count of 0 tools then would say
/// that nothing is there).
fn catalog_summary(gateway: &Gateway) -> String {
    if gateway.first_starts_done() {
        let tools = gateway
            .engine()
            .read()
            .map(|e| e.catalog().len())
            .unwrap_or_default();
        format!("{tools} tools")
    } else {
        format!("{} upstreams starting", gateway.upstreams().servers().len())
    }
}

async fn serve_gateway_http(
    args: &ServeArgs,
    config: &GatewayConfig,
    gateway: Arc<Gateway>,
    shutdown: CancellationToken,
    tool_count: String,
) -> Result<()> {
    let state = RestState::from_config(gateway.engine().clone(), config)
        .map_err(|e| BadInput(e.to_string()))?
        .with_server_status(gateway.server_status())
        .with_semantic(gateway.semantic().clone())
        .with_observer(gateway.observer().clone());
    let addr = match args.http {
        Some(addr) => addr,
        None => DEFAULT_GATEWAY_HTTP.parse()?,
    };
    rest::check_bind(addr, state.tokens(), args.insecure_no_auth)
        .map_err(|e| BadInput(e.to_string()))?;
    let listener = rest::bind(addr)
        .await
        .map_err(|e| BadInput(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    let preset = gateway.preset();
    let app = downstream::http_app(gateway, state, local, shutdown.clone());
    // One line on stderr that scripts (and the tests) can read the actual port from.
    crate::logging::announce(&format!(
        "toolsearch: MCP gateway listening on http://{local}{} ({tool_count}, preset {preset}); REST API at http://{local}/api/mcp-standard/",
        downstream::MCP_PATH
    ));
    tracing::info!("console at http://{local}/");
    let stop = async move {
        shutdown_signal().await;
        // Ends the open MCP streams so that the graceful shutdown does not wait on them.
        shutdown.cancel();
    };
    downstream::serve_http(listener, app, config.http.clone(), stop)
        .await
        .context("the gateway's HTTP server failed")?;
    tracing::info!("gateway stopped");
    Ok(())
}

async fn rest_only(args: ServeArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => GatewayConfig::load(path).map_err(|e| BadInput(e.to_string()))?,
        None => GatewayConfig::default(),
    };
    apply_model_args(&mut config, &args.model);
    if !config.mcp_servers.is_empty() {
        tracing::warn!(
            servers = config.mcp_servers.len(),
            "--rest-only serves the catalog file; the config's mcpServers are not started"
        );
    }
    let catalog = args
        .catalog
        .as_deref()
        .ok_or_else(|| BadInput("--rest-only needs --catalog FILE".into()))?;
    let engine = load_engine_with(
        catalog,
        args.format.as_deref(),
        config.search_config(),
        config.catalog_policy(),
    )?;
    let tool_count = engine.catalog().len();
    let engine = Arc::new(RwLock::new(engine));
    let semantic = Semantic::start(
        &config.tool_search.semantic,
        engine.clone(),
        toolsearch_gateway::semantic::VectorSources::in_process(
            toolsearch_gateway::metrics::Metrics::new(),
        ),
    );
    // The catalog file is the whole catalog: no server is still to come.
    semantic.upstreams_settled();
    let state = RestState::from_config(engine, &config)
        .map_err(|e| BadInput(e.to_string()))?
        .with_semantic(semantic);
    let addr = match args.http {
        Some(addr) => addr,
        None => DEFAULT_HTTP.parse()?,
    };
    rest::check_bind(addr, state.tokens(), args.insecure_no_auth)
        .map_err(|e| BadInput(e.to_string()))?;
    let auth = if state.tokens().is_empty() {
        "no auth".to_string()
    } else {
        format!("{} bearer token(s)", state.tokens().len())
    };
    let listener = rest::bind(addr)
        .await
        .map_err(|e| BadInput(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    // One line on stderr that scripts (and the tests) can read the actual port from.
    crate::logging::announce(&format!(
        "toolsearch: REST API listening on http://{local} ({tool_count} tools, {auth}); spec at http://{local}{}",
        rest::OPENAPI_PATH
    ));
    rest::serve_with(
        listener,
        rest::router(state),
        config.http.clone(),
        shutdown_signal(),
    )
    .await
    .context("the REST server failed")?;
    tracing::info!("REST server stopped");
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_listen_addr, workers_for};
    use std::net::SocketAddr;

    #[test]
    fn listen_addresses_take_ports_localhost_and_socket_addresses() {
        let addr = |s: &str| s.parse::<SocketAddr>().ok();
        assert_eq!(parse_listen_addr("8787").ok(), addr("127.0.0.1:8787"));
        assert_eq!(parse_listen_addr("0").ok(), addr("127.0.0.1:0"));
        assert_eq!(
            parse_listen_addr("localhost:9000").ok(),
            addr("127.0.0.1:9000")
        );
        assert_eq!(parse_listen_addr("LocalHost:0").ok(), addr("127.0.0.1:0"));
        assert_eq!(parse_listen_addr("127.0.0.1:0").ok(), addr("127.0.0.1:0"));
        assert_eq!(parse_listen_addr("0.0.0.0:8787").ok(), addr("0.0.0.0:8787"));
        assert_eq!(parse_listen_addr("[::1]:8787").ok(), addr("[::1]:8787"));
        assert_eq!(parse_listen_addr(" 8787 ").ok(), addr("127.0.0.1:8787"));
        for bad in [
            "",
            "70000",
            "localhost",
            "localhost:",
            "localhost:x",
            "example.com:80",
            "::1",
        ] {
            let err = parse_listen_addr(bad).expect_err(bad);
            assert!(
                err.contains("port") || err.contains("address"),
                "{bad}: {err}"
            );
        }
        let err = parse_listen_addr("example.com:80").unwrap_err();
        assert!(
            err.contains("localhost:PORT") && err.contains("8787"),
            "{err}"
        );
    }

    #[test]
    fn async_workers_are_half_the_cores_unless_set() {
        assert_eq!(workers_for(None, 1), 1);
        assert_eq!(workers_for(None, 2), 1);
        assert_eq!(workers_for(None, 8), 4);
        assert_eq!(workers_for(Some("3"), 2), 3);
        // A setting that is not a positive number falls back to the default.
        assert_eq!(workers_for(Some("0"), 8), 4);
        assert_eq!(workers_for(Some("many"), 8), 4);
    }
}
