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
    /// When no directory can be determined (no `HOME`), or the path exists and is not
    /// a directory.
    pub fn resolve(explicit: Option<&Path>) -> Result<StateDir, std::io::Error> {
        let root = std::path::absolute(Self::choose(explicit)?)?;
        if root.exists() && !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!(
                    "state directory {} exists and is not a directory",
                    root.display()
                ),
            ));
        }
        Ok(StateDir { root })
    }

    fn choose(explicit: Option<&Path>) -> Result<PathBuf, std::io::Error> {
        if let Some(p) = explicit {
            return Ok(p.to_path_buf());
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(p) = env("FLOTILLA_STATE_DIR") {
            return Ok(p);
        }
        if let Some(p) = env("XDG_STATE_HOME") {
            return Ok(p.join("flotilla"));
        }
        match env("HOME") {
            Some(h) => Ok(h.join(".local/state/flotilla")),
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
