//! `toolsearch serve`: the REST API alone over a catalog file (`--rest-only`); the MCP gateway over
//! the upstreams of a config file is the mode without it.

use crate::catalog_file::load_engine;
use crate::BadInput;
use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use toolsearch_core::SearchEngine;
use toolsearch_gateway::config::GatewayConfig;
use toolsearch_gateway::rest::{self, RestState};

/// Where the REST API listens when `--http` is not given.
const DEFAULT_HTTP: &str = "127.0.0.1:8080";

#[derive(Args)]
pub struct ServeArgs {
    /// Gateway config (TOML or JSON): mcpServers, toolSearch, categories, rest (API tokens).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Speak MCP over stdin/stdout.
    #[arg(long, conflicts_with_all = ["http", "rest_only"])]
    stdio: bool,
    /// Listen for HTTP on this address [default with --rest-only: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
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
}

pub fn run(args: ServeArgs) -> Result<()> {
    if !args.rest_only {
        return Err(BadInput(
            "the MCP gateway (`toolsearch serve --config FILE [--stdio | --http ADDR]`) is not available yet; serve the REST API over a catalog file with `toolsearch serve --rest-only --catalog FILE [--http ADDR]`"
                .into(),
        )
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(rest_only(args))
}

async fn rest_only(args: ServeArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => GatewayConfig::load(path).map_err(|e| BadInput(e.to_string()))?,
        None => GatewayConfig::default(),
    };
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
    let engine = with_config(load_engine(catalog, args.format.as_deref())?, &config)?;
    let tool_count = engine.catalog().len();
    let state = RestState::from_config(Arc::new(RwLock::new(engine)), &config)
        .map_err(|e| BadInput(e.to_string()))?;
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
    eprintln!(
        "toolsearch: REST API listening on http://{local} ({tool_count} tools, {auth}); spec at http://{local}{}",
        rest::OPENAPI_PATH
    );
    rest::serve(listener, rest::router(state), shutdown_signal())
        .await
        .context("the REST server failed")?;
    tracing::info!("REST server stopped");
    Ok(())
}

/// The engine settings the config carries: the public-name separator and the score threshold.
fn with_config(engine: SearchEngine, config: &GatewayConfig) -> Result<SearchEngine> {
    let ts = &config.tool_search;
    let mut search = engine.config().clone();
    search.separator = ts.separator.clone();
    if let Some(threshold) = ts.search_threshold {
        search.threshold = threshold as f32;
    }
    if &search == engine.config() {
        return Ok(engine);
    }
    Ok(SearchEngine::from_catalog(
        engine.catalog().clone(),
        search,
    )?)
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
