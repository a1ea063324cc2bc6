//! Where local state lives (DESIGN.md, "Where state lives"): the base directory is
//! `$FLOTILLA_STATE_DIR`, else `$XDG_STATE_HOME/flotilla`, else
//! `~/.local/state/flotilla`; each project keeps its own state in
//! `<base>/projects/<project>/`, so two inventories sharing a base never see, plan
//! against or signal each other's processes.
//!
//! | path (in the project's directory) | written by | what |
//! | --- | --- | --- |
//! | `state.db` | `flotilla-store` | journal of operations and steps, instances, desired lifecycle, stack start orders (SQLite) |
//! | `logs/<component>.log` (+ `.1`, `.2`…) | the started process (stdout+stderr) | component output, rotated by copy-truncate |
//! | `run/lifecycle.lock` | `flotilla-exec::lock` | the lifecycle lock and its holder |
//! | `adopt/<component>.json` | `flotilla-exec::adopt::record` | an adopt's record: its step, the prior owner's restore recipe (mode 0600), its checks |
//! | `adopt/<component>.prior.log` | a prior owner a rollback ran again | its output |
//!
//! `<base>/secrets.env` (the user's, optional `NAME=value` secrets, mode 0600) is
//! shared by the projects, and so is `<base>/agent/` (`flotilla agent`'s own files:
//! see `flotilla_agent::state`).
//!
//! A base directory from before projects (`<base>/state.db`, no `projects/`) is read
//! where it is by read-only verbs, and moved into the first project that changes
//! something ([`StateDir::prepare`]).

use std::path::{Path, PathBuf};

/// The state directory layout of one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    base: PathBuf,
    root: PathBuf,
    project: String,
}

/// The files of a base directory from before projects, moved into a project.
const LEGACY: &[&str] = &["state.db", "state.db-wal", "state.db-shm", "logs"];

impl StateDir {
    /// The state of `project` under `explicit` if given, else the base directory the
    /// environment names (module docs). Read-only: a base from before projects that
    /// no project has taken over yet is read where it is.
    ///
    /// # Errors
    /// When no directory can be determined (no `HOME`), or the base exists and is not
    /// a directory.
    pub fn resolve(explicit: Option<&Path>, project: &str) -> Result<StateDir, std::io::Error> {
        let base = std::path::absolute(Self::choose(explicit)?)?;
        if base.exists() && !base.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!(
                    "state directory {} exists and is not a directory",
                    base.display()
                ),
            ));
        }
        let root = if Self::is_legacy(&base) {
            base.clone()
        } else {
            base.join("projects").join(project)
        };
        Ok(StateDir {
            base,
            root,
            project: project.to_string(),
        })
    }

    /// [`StateDir::resolve`] for a verb that changes something: a base from before
    /// projects is first moved into this project (its journal, instances and logs:
    /// renames within one file system; a process still writing a log keeps writing
    /// to the moved file).
    ///
    /// # Errors
    /// As [`StateDir::resolve`]; moving the files.
    pub fn prepare(explicit: Option<&Path>, project: &str) -> Result<StateDir, std::io::Error> {
        let state = Self::resolve(explicit, project)?;
        if state.root != state.base {
            return Ok(state);
        }
        let target = state.base.join("projects").join(project);
        std::fs::create_dir_all(&target)?;
        for name in LEGACY {
            let from = state.base.join(name);
            match std::fs::rename(&from, target.join(name)) {
                Ok(()) => {
                    tracing::info!(from = %from.display(), to = %target.display(), "moved into the project")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(StateDir {
            root: target,
            ..state
        })
    }

    /// A base from before projects: a journal at the top, no `projects/`.
    fn is_legacy(base: &Path) -> bool {
        base.join("state.db").exists() && !base.join("projects").exists()
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The base directory shared by the projects.
    pub fn base(&self) -> &Path {
        &self.base
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

    /// The project's directory (its journal, logs and locks are below it).
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
    /// `secrets.env` in the base directory (shared by the projects).
    pub fn secrets_file(&self) -> PathBuf {
        self.base.join("secrets.env")
    }

    /// The project whose state directory is `dir` (`<base>/projects/<name>`), if it is
    /// one: how a process's instance marker names its project.
    pub fn project_of(dir: &Path) -> Option<String> {
        let name = dir.file_name()?.to_str()?;
        (dir.parent()?.file_name()? == "projects").then(|| name.to_string())
    }
}
