//! Backups of a project's state directory, as the CLI and the agent take them
//! (the archive itself, its verification and restore are
//! [`flotilla_store::backup`]'s): where archives go by default, the wall clock, the
//! lifecycle lock held while a restore swaps the directory, and
//! [`SystemPgTools`], the process boundary behind an authority's `pg_dump` and
//! `pg_restore`.
//!
//! - Archives go to `<state dir>/backups/` unless told otherwise
//!   ([`BackupPolicy`]), beside `projects/` (never inside what they back up), and
//!   the newest [`DEFAULT_KEEP`] of each project are kept.
//! - [`restore_project`] refuses while another invocation holds the project's
//!   lifecycle lock, or while a process the project's journal records as started
//!   by it still runs (its pid with the same start time): a restored journal would
//!   no longer know it.
//! - [`backup_before`]: the automatic backup taken before something risky
//!   (`self-update`, `adopt`), reason `before-<what>`.

use crate::lock::{try_lock_described, LockHolder, LockMode};
use crate::statedir::StateDir;
pub use flotilla_store::backup::DEFAULT_KEEP;
use flotilla_store::backup::{
    self, BackupError, Kind, PgTools, Postgres, Request, Restored, Written, BACKUPS_DIR,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where automatic and manual backups go, and how many are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupPolicy {
    /// The backup directory (`None`: the default beside what is backed up).
    pub dir: Option<PathBuf>,
    /// How many archives of one thing to keep (`0`: all).
    pub keep: usize,
}

impl Default for BackupPolicy {
    fn default() -> Self {
        BackupPolicy {
            dir: None,
            keep: DEFAULT_KEEP,
        }
    }
}

/// `pg_dump` and `pg_restore` from `PATH` (Debian: `postgresql-client`), run to their
/// end with standard input `/dev/null` and the connection in their environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemPgTools;

impl PgTools for SystemPgTools {
    fn run(&self, program: &str, args: &[String], env: &[(String, String)]) -> Result<(), String> {
        let out = std::process::Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    format!("is not installed (Debian: apt-get install postgresql-client): {e}")
                } else {
                    format!("could not be run: {e}")
                }
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// The PostgreSQL database at `url`, dumped and restored with [`SystemPgTools`].
pub fn postgres(url: &str) -> Postgres {
    Postgres {
        url: url.to_string(),
        tools: Arc::new(SystemPgTools),
    }
}

/// The default backup directory of a project: `<state dir>/backups`.
pub fn project_backups(state: &StateDir) -> PathBuf {
    state.base().join(BACKUPS_DIR)
}

/// The project's directory, refusing a state directory from before projects (its
/// journal at the top, shared with everything else there).
fn project_root(state: &StateDir) -> Result<&Path, BackupError> {
    if state.root() == state.base() {
        return Err(BackupError::NoSource {
            path: state.base().join("projects").join(state.project()),
        });
    }
    Ok(state.root())
}

/// Backs up the project's state directory into `policy`'s directory (default
/// [`project_backups`]), verified, then keeps the newest `policy.keep`.
///
/// # Errors
/// [`BackupError::NoSource`] (the project has no state yet), and as
/// [`flotilla_store::backup::create`].
pub fn backup_project(
    state: &StateDir,
    policy: &BackupPolicy,
    reason: &str,
    now_ms: i64,
) -> Result<Written, BackupError> {
    let source = project_root(state)?;
    let to = policy.dir.clone().unwrap_or_else(|| project_backups(state));
    backup::create(&Request {
        kind: Kind::Project,
        name: state.project(),
        source,
        to: &to,
        now_ms,
        reason,
        keep: policy.keep,
    })
}

/// The automatic backup before something risky (`what`: `self-update`, `adopt`),
/// reason `before-<what>`, now: `None` when the project has no state directory yet
/// (nothing to lose).
///
/// # Errors
/// As [`backup_project`].
pub fn backup_before(
    what: &str,
    state: &StateDir,
    policy: &BackupPolicy,
) -> Result<Option<Written>, BackupError> {
    if !state.root().join(flotilla_store::STATE_DB_FILE).exists() || state.root() == state.base() {
        return Ok(None);
    }
    let reason = format!("before-{what}");
    backup_project(state, policy, &reason, crate::this_process::now_ms()).map(Some)
}

/// [`backup_before`] for every project in the base state directory `base`
/// (`<base>/projects/<name>` with a journal): what an agent takes before it updates
/// itself, since the new version may migrate any of them. The archives taken.
///
/// # Errors
/// As [`backup_project`], for the first project that fails (the ones before it
/// are kept).
pub fn backup_projects_before(
    what: &str,
    base: &Path,
    policy: &BackupPolicy,
) -> Result<Vec<Written>, BackupError> {
    let projects = base.join("projects");
    let mut names: Vec<String> = match std::fs::read_dir(&projects) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| flotilla_model::topology::valid_project_name(n))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(BackupError::io(&projects)(e)),
    };
    names.sort();
    let mut taken = Vec::new();
    for name in names {
        let state = StateDir::resolve(Some(base), &name).map_err(BackupError::io(base))?;
        taken.extend(backup_before(what, &state, policy)?);
    }
    Ok(taken)
}

/// Restores a project archive into the project's state directory: refused while
/// another invocation holds the project's lifecycle lock (held by this one while
/// the directory is swapped) or while a process the project started still runs;
/// then as [`flotilla_store::backup::restore`] (the previous directory kept as
/// `<project>.before-restore-<time>`).
///
/// # Errors
/// [`BackupError::InUse`], and as [`flotilla_store::backup::restore`].
pub fn restore_project(
    state: &StateDir,
    archive: &Path,
    now_ms: i64,
) -> Result<Restored, BackupError> {
    let target = project_root(state)?.to_path_buf();
    let _lock = hold_for_restore(
        &target.join("run").join("lifecycle.lock"),
        &target,
        &format!("flotilla restore {}", archive.display()),
    )?;
    refuse_running(&target)?;
    backup::restore(archive, &target, Kind::Project, now_ms)
}

/// Takes the lock file `lock` of the directory `target` a restore is about to
/// replace (exclusively, without waiting, describing this process as `command`),
/// to hold while it swaps: `None` when `target` does not exist (nothing to lock).
///
/// # Errors
/// [`BackupError::InUse`] naming the holder; [`BackupError::Io`].
pub fn hold_for_restore(
    lock: &Path,
    target: &Path,
    command: &str,
) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, BackupError> {
    if !target.is_dir() {
        return Ok(None);
    }
    let me = LockHolder::this_process(command);
    match try_lock_described(lock, Some(&me), LockMode::Exclusive).map_err(BackupError::io(lock))? {
        Ok(held) => Ok(Some(held)),
        Err(holder) => Err(BackupError::InUse {
            target: target.display().to_string(),
            holder: crate::lock::HolderInfo(holder).to_string(),
        }),
    }
}

/// Refuses a project whose journal records a process that still runs (same pid,
/// same start time).
fn refuse_running(target: &Path) -> Result<(), BackupError> {
    let db = target.join(flotilla_store::STATE_DB_FILE);
    if !db.exists() {
        return Ok(());
    }
    let store = flotilla_store::Store::open(&db).map_err(|e| BackupError::Io {
        path: db.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let instances = store.instances().map_err(|e| BackupError::Io {
        path: db.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let running: Vec<String> = instances
        .iter()
        .filter(|i| {
            matches!(crate::sys::read_stat(i.pid), Ok(Some(st))
                if !st.is_dead() && st.start_time_ticks == i.start_time_ticks)
        })
        .map(|i| format!("{} (pid {})", i.component, i.pid))
        .collect();
    if running.is_empty() {
        return Ok(());
    }
    Err(BackupError::InUse {
        target: target.display().to_string(),
        holder: format!(
            "components it started that still run ({}; `flotilla down` stops them)",
            running.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_before_a_risky_step_keeps_the_projects_journal() {
        let base = tempfile::tempdir().unwrap();
        let state = StateDir::resolve(Some(base.path()), "chat").unwrap();
        let policy = BackupPolicy::default();
        assert_eq!(
            backup_before("adopt", &state, &policy).unwrap(),
            None,
            "no state yet: nothing to lose"
        );
        std::fs::create_dir_all(state.root()).unwrap();
        flotilla_store::Store::open(&state.database()).unwrap();
        let w = backup_before("adopt", &state, &policy).unwrap().unwrap();
        assert_eq!(w.manifest.reason, "before-adopt");
        assert_eq!(w.archive.parent(), Some(project_backups(&state).as_path()));
        assert_eq!(w.manifest.databases[0].path, "files/state.db");
    }
}
