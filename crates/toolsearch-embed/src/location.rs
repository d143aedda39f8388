//! Where the model's folder is: `--model DIR`, else `TOOLSEARCH_MODEL_DIR`, else a folder in the
//! user's cache directory.

use crate::error::ModelError;
use crate::MODEL_DIR_ENV;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The files a BERT-style sentence model folder must hold.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// The default model's folder name under `<cache>/models/`.
const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// Who chose the model folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// `--model DIR`.
    Argument,
    /// `TOOLSEARCH_MODEL_DIR`.
    Environment,
    /// The default folder in the user's cache directory.
    DefaultCache,
}

impl ModelSource {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Argument => "--model",
            Self::Environment => "TOOLSEARCH_MODEL_DIR",
            Self::DefaultCache => "default cache folder",
        }
    }
}

/// A resolved model folder (which may not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLocation {
    pub dir: PathBuf,
    pub source: ModelSource,
}

fn non_empty(value: Option<OsString>) -> Option<OsString> {
    value.filter(|v| !v.is_empty())
}

impl ModelLocation {
    /// `argument` if given, else `TOOLSEARCH_MODEL_DIR`, else [`default_model_dir`], from the
    /// process environment.
    pub fn resolve(argument: Option<&Path>) -> Result<Self, ModelError> {
        Self::resolve_with(argument, |key| std::env::var_os(key))
    }

    /// [`ModelLocation::resolve`] with the environment given as a lookup (for tests).
    pub fn resolve_with(
        argument: Option<&Path>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, ModelError> {
        if let Some(dir) = argument {
            return Ok(Self {
                dir: dir.to_path_buf(),
                source: ModelSource::Argument,
            });
        }
        if let Some(dir) = non_empty(env(MODEL_DIR_ENV)) {
            return Ok(Self {
                dir: PathBuf::from(dir),
                source: ModelSource::Environment,
            });
        }
        Ok(Self {
            dir: default_model_dir(&env).ok_or(ModelError::NoCacheDir)?,
            source: ModelSource::DefaultCache,
        })
    }

    /// Whether the folder holds all of [`MODEL_FILES`]; the first missing one as an error.
    pub fn check_present(&self) -> Result<(), ModelError> {
        if !self.dir.is_dir() {
            return Err(ModelError::MissingDir {
                dir: self.dir.clone(),
            });
        }
        for file in MODEL_FILES {
            if !self.dir.join(file).is_file() {
                return Err(ModelError::MissingFile {
                    dir: self.dir.clone(),
                    file,
                });
            }
        }
        Ok(())
    }
}

/// toolsearch's folder in the user's cache directory: `$XDG_CACHE_HOME/toolsearch`, else
/// `~/Library/Caches/toolsearch` on macOS, `%LOCALAPPDATA%\toolsearch` on Windows, and
/// `~/.cache/toolsearch` elsewhere.
pub fn cache_root(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = non_empty(env("XDG_CACHE_HOME")) {
        return Some(PathBuf::from(dir).join("toolsearch"));
    }
    if cfg!(windows) {
        if let Some(dir) = non_empty(env("LOCALAPPDATA")) {
            return Some(PathBuf::from(dir).join("toolsearch"));
        }
    }
    let home = PathBuf::from(non_empty(env("HOME"))?);
    if cfg!(target_os = "macos") {
        Some(home.join("Library/Caches/toolsearch"))
    } else {
        Some(home.join(".cache/toolsearch"))
    }
}

/// The default model's folder: `<cache root>/models/all-MiniLM-L6-v2`.
pub fn default_model_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    Some(cache_root(env)?.join("models").join(DEFAULT_MODEL_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |key| map.get(key).cloned()
    }

    #[test]
    fn argument_beats_environment_beats_default() {
        let vars = env(&[(MODEL_DIR_ENV, "/env/model"), ("HOME", "/home/u")]);
        let arg = ModelLocation::resolve_with(Some(Path::new("/arg/model")), &vars).unwrap();
        assert_eq!(arg.dir, PathBuf::from("/arg/model"));
        assert_eq!(arg.source, ModelSource::Argument);
        let from_env = ModelLocation::resolve_with(None, &vars).unwrap();
        assert_eq!(from_env.dir, PathBuf::from("/env/model"));
        assert_eq!(from_env.source, ModelSource::Environment);
    }

    #[cfg(all(unix, not(target_os = "macos")))]
    #[test]
    fn default_is_in_the_cache_directory() {
        let home = ModelLocation::resolve_with(None, env(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(
            home.dir,
            PathBuf::from("/home/u/.cache/toolsearch/models/all-MiniLM-L6-v2")
        );
        assert_eq!(home.source, ModelSource::DefaultCache);
        let xdg = ModelLocation::resolve_with(
            None,
            env(&[
                ("HOME", "/home/u"),
                ("XDG_CACHE_HOME", "/xdg"),
                (MODEL_DIR_ENV, ""),
            ]),
        )
        .unwrap();
        assert_eq!(
            xdg.dir,
            PathBuf::from("/xdg/toolsearch/models/all-MiniLM-L6-v2")
        );
    }

    #[test]
    fn no_home_and_no_cache_dir_is_a_clear_error() {
        let err = ModelLocation::resolve_with(None, env(&[])).unwrap_err();
        assert!(matches!(err, ModelError::NoCacheDir));
        assert!(err.to_string().contains("--model DIR"));
    }

    #[test]
    fn presence_check_names_the_missing_piece() {
        let dir = tempfile::tempdir().unwrap();
        let missing = ModelLocation {
            dir: dir.path().join("nope"),
            source: ModelSource::Argument,
        };
        let err = missing.check_present().unwrap_err();
        assert!(matches!(err, ModelError::MissingDir { .. }) && err.is_missing());
        assert!(err.to_string().contains("toolsearch model fetch"));

        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let partial = ModelLocation {
            dir: dir.path().to_path_buf(),
            source: ModelSource::Argument,
        };
        let err = partial.check_present().unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::MissingFile {
                    file: "tokenizer.json",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("has no tokenizer.json"));
    }
}
