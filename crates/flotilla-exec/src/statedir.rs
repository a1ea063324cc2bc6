//! Where local state lives (DESIGN.md, "Where state lives"):
//! `$FLOTILLA_STATE_DIR`, else `$XDG_STATE_HOME/flotilla`, else
//! `~/.local/state/flotilla`.
//!
//! | path | written by | what |
//! | --- | --- | --- |
//! | `state.db` | `flotilla-store` | journal of operations and steps, instances, desired lifecycle, stack start orders (SQLite) |
//! | `logs/<component>.log` (+ `.1`, `.2`…) | the started process (stdout+stderr) | component output, rotated by copy-truncate |
//! | `run/lifecycle.lock` | `flotilla-exec::lock` | the lifecycle lock and its holder |
//! | `secrets.env` | the user | optional `NAME=value` secrets, mode 0600 |

use std::path::{Path, PathBuf};

/// The state directory layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Uses `explicit` if given, else the environment as described in the module docs.
    ///
    /// # Errors
    /// When no directory can be determined (no `HOME`).
    pub fn resolve(explicit: Option<&Path>) -> Result<StateDir, std::io::Error> {
        if let Some(p) = explicit {
            return Ok(StateDir {
                root: p.to_path_buf(),
            });
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(p) = env("FLOTILLA_STATE_DIR") {
            return Ok(StateDir { root: p });
        }
        if let Some(p) = env("XDG_STATE_HOME") {
            return Ok(StateDir {
                root: p.join("flotilla"),
            });
        }
        match env("HOME") {
            Some(h) => Ok(StateDir {
                root: h.join(".local/state/flotilla"),
            }),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "cannot find a state directory: set FLOTILLA_STATE_DIR or HOME",
            )),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `state.db`.
    pub fn database(&self) -> PathBuf {
        self.root.join("state.db")
    }
    /// `logs/<component>.log`.
    pub fn log(&self, component: &str) -> PathBuf {
        self.root.join("logs").join(format!("{component}.log"))
    }
    /// `secrets.env`.
    pub fn secrets_file(&self) -> PathBuf {
        self.root.join("secrets.env")
    }
}
