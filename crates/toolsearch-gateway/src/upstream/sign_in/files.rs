//! The user's own sign-ins: one file per server in the user's config folder
//! (`$XDG_CONFIG_HOME/toolsearch/auth`, else `~/.config/toolsearch/auth`), readable by the user
//! alone (0600 in a 0700 folder).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Saved, SignInError};

/// The user's sign-in tokens, one file per server.
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
}

impl TokenStore {
    /// The current user's store.
    pub fn for_user() -> Result<Self, SignInError> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| Path::new(&home).join(".config"))
            })
            .ok_or(SignInError::NoConfigFolder)?;
        Ok(Self::at(base.join("toolsearch").join("auth")))
    }

    /// A store in `dir`.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server`.
    pub fn path(&self, server: &str) -> PathBuf {
        self.dir.join(format!("{}.json", stem(server)))
    }

    pub(super) fn read(&self, server: &str) -> Result<Option<Saved>, SignInError> {
        let path = self.path(server);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SignInError::File {
                    action: "read",
                    path,
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SignInError::Corrupt {
                place: path.display().to_string(),
                reason: e.to_string(),
            })
    }

    /// Writes the file readable by the user alone, through a temporary file renamed into place.
    pub(super) fn write(&self, server: &str, saved: &Saved) -> Result<(), SignInError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| SignInError::File {
                action,
                path,
                source,
            }
        };
        create_private_dir(&self.dir).map_err(io("create the folder", &self.dir))?;
        let path = self.path(server);
        let temporary = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(saved).map_err(|e| SignInError::Corrupt {
            place: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut file = private_file(&temporary).map_err(io("write", &temporary))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(io("write", &temporary))?;
        std::fs::rename(&temporary, &path).map_err(io("write", &path))
    }

    /// Forgets `server`'s tokens; whether there were any.
    pub fn remove(&self, server: &str) -> Result<bool, SignInError> {
        let path = self.path(server);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(SignInError::File {
                action: "remove",
                path,
                source,
            }),
        }
    }

    /// When `server`'s file was last written; `None` when there is none.
    pub(super) fn stamp(&self, server: &str) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.path(server))
            .and_then(|m| m.modified())
            .ok()
    }
}

/// `server`'s name made safe for a file or key name, and a hash of the name so that two names
/// that read alike once made safe do not share one.
pub(super) fn stem(server: &str) -> String {
    use sha2::Digest;
    let safe: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let hash = sha2::Sha256::digest(server.as_bytes());
    let short: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{safe}-{short}")
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}
