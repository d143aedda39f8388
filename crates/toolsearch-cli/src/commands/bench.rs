//! `toolsearch bench …`: runs the benchmark harness, the separate program `toolsearch-bench`
//! (crates/toolsearch-bench), with the same arguments. None of the harness is linked into this
//! binary; a build puts both programs in one folder, where this one looks for it first.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const HARNESS: &str = "toolsearch-bench";

/// Runs the harness with `args` (after the global options given before `bench`), its standard
/// streams this process's; exits with its exit code. Exit code 2 when it is not installed.
pub fn run(global: Vec<OsString>, args: Vec<OsString>) -> ExitCode {
    let harness = match find_harness() {
        Ok(harness) => harness,
        Err(this) => {
            eprintln!(
                "error: the benchmark harness `{HARNESS}` is not installed next to {this} nor on \
                 PATH: build it with `cargo build --release -p {HARNESS}` (or \
                 `cargo build --release`, which builds every program of the workspace)"
            );
            return ExitCode::from(2);
        }
    };
    let mut command = Command::new(&harness);
    command.args(global).args(args);
    run_as(command, &harness)
}

/// Replaces this process with the harness: its signals, exit code and process id are the
/// harness's own, as if the user had started it.
#[cfg(unix)]
fn run_as(mut command: Command, harness: &std::path::Path) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let error = command.exec();
    eprintln!("error: cannot run {}: {error}", harness.display());
    ExitCode::from(1)
}

/// Runs the harness as a child and exits with its exit code.
#[cfg(not(unix))]
fn run_as(mut command: Command, harness: &std::path::Path) -> ExitCode {
    match command.status() {
        Ok(status) => std::process::exit(status.code().unwrap_or(1)),
        Err(error) => {
            eprintln!("error: cannot run {}: {error}", harness.display());
            ExitCode::from(1)
        }
    }
}

/// The harness next to this program, else on PATH; else where this program is, for the message.
fn find_harness() -> Result<PathBuf, String> {
    let name = format!("{HARNESS}{}", std::env::consts::EXE_SUFFIX);
    let this = std::env::current_exe();
    let beside = this.as_ref().ok().and_then(|this| this.parent());
    if let Some(beside) = beside
        .map(|dir| dir.join(&name))
        .filter(|path| path.is_file())
    {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file());
    on_path.ok_or_else(|| match this {
        Ok(this) => this.display().to_string(),
        Err(_) => "toolsearch".to_string(),
    })
}
