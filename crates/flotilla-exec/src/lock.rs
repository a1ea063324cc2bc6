//! The lifecycle lock: one mutating invocation per state directory at a time.
//!
//! An exclusive `flock(2)` on `<state>/run/lifecycle.lock`, taken without waiting. The
//! holder writes who it is (pid, command line, start time) into the file, so a second
//! invocation fails at once with a message naming the holder. The kernel releases the
//! lock when the holder exits, even after `kill -9`, so a stale file never blocks.
//! Read-only verbs take no lock. Steps sent to a host by a controller take it shared,
//! plus an exclusive lock per component ([`LifecycleLock::acquire_for_step`]).
//!
//! [`try_lock_file`] is the workspace's one way to take an `flock(2)` without waiting
//! (the lifecycle lock, the agent's `agent.lock` and an install root's `update.lock`).

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How a lock file is held: by one holder, or by any number of shared holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `LOCK_EX`: one holder, no shared ones.
    Exclusive,
    /// `LOCK_SH`: any number of shared holders, no exclusive one.
    Shared,
}

/// Opens `path` for reading and writing (created when missing, never truncated) and
/// takes an `flock(2)` on it in `mode` without waiting: `Ok(None)` when another
/// holder has it. The lock lives as long as the returned value (it is released when
/// dropped, or when this process ends, even by `kill -9`); the file can be written
/// through it.
///
/// # Errors
/// When the file cannot be opened or locked for another reason.
pub fn try_lock_file(path: &Path, mode: LockMode) -> std::io::Result<Option<Flock<File>>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let how = match mode {
        LockMode::Exclusive => FlockArg::LockExclusiveNonblock,
        LockMode::Shared => FlockArg::LockSharedNonblock,
    };
    match Flock::lock(file, how) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(std::io::Error::from(e)),
    }
}

/// Who holds the lock (written into the lock file as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Process id.
    pub pid: u32,
    /// The command line, e.g. `flotilla up chat`.
    pub command: String,
    /// When it took the lock, milliseconds since the Unix epoch.
    pub since_ms: i64,
}

impl LockHolder {
    /// This process, described as `command`, from now.
    pub fn this_process(command: impl Into<String>) -> LockHolder {
        LockHolder {
            pid: std::process::id(),
            command: command.into(),
            since_ms: crate::this_process::now_ms(),
        }
    }
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since =
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.since_ms.max(0) as u64);
        write!(
            f,
            "pid {} (`{}`) since {}",
            self.pid,
            self.command,
            humantime::format_rfc3339_seconds(since)
        )
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another invocation holds it.
    #[error("another flotilla is changing {state_dir}: {holder}; wait for it to finish (read-only commands such as `flotilla status` work meanwhile)")]
    Held {
        /// The state directory.
        state_dir: PathBuf,
        /// The holder, as it described itself (`None` if it had not written yet).
        holder: HolderInfo,
    },
    /// The lock file could not be opened or written.
    #[error("cannot use lock file {path}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The holder as read from the lock file, or a note that it could not be read.
#[derive(Debug)]
pub struct HolderInfo(pub Option<LockHolder>);

impl std::fmt::Display for HolderInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(h) => h.fmt(f),
            None => f.write_str(
                "steps sent by a controller (`flotilla host serve`), or a process that has not described itself yet",
            ),
        }
    }
}

/// A held lifecycle lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub struct LifecycleLock {
    _lock: Flock<File>,
    described: bool,
}

impl Drop for LifecycleLock {
    fn drop(&mut self) {
        // Forget who held it (still holding it), so that a later refusal never names
        // a holder that is gone.
        if self.described {
            let _ = self._lock.set_len(0);
        }
    }
}

impl LifecycleLock {
    /// Takes the lock for `state_dir` (creating `run/` if needed) without waiting.
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder, or [`LockError::Io`].
    pub fn acquire(state_dir: &Path, me: &LockHolder) -> Result<LifecycleLock, LockError> {
        let path = state_dir.join("run").join("lifecycle.lock");
        Self::acquire_file(state_dir, path, Some(me), LockMode::Exclusive)
    }

    /// What a controller's invocation takes when it runs nothing here (every
    /// component it may touch is on a remote host, reached over SSH or through the
    /// authority): `run/controller.lock`, exclusive, naming `me`. It keeps two such
    /// invocations from one state directory apart without excluding the steps this
    /// machine's own agent runs for them in the same directory
    /// ([`LifecycleLock::acquire_for_step`]).
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder, or [`LockError::Io`].
    pub fn acquire_controller(
        state_dir: &Path,
        me: &LockHolder,
    ) -> Result<LifecycleLock, LockError> {
        let path = state_dir.join("run").join("controller.lock");
        Self::acquire_file(state_dir, path, Some(me), LockMode::Exclusive)
    }

    /// What a step sent by a controller takes on a host (`flotilla host serve`): the
    /// lifecycle lock *shared* (so steps for different components run side by side,
    /// while a mutating invocation on the host itself excludes them all), and an
    /// exclusive lock on `run/component-<name>.lock` naming `me` (so two controllers
    /// never operate on one component at once).
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder, or [`LockError::Io`].
    pub fn acquire_for_step(
        state_dir: &Path,
        component: &str,
        me: &LockHolder,
    ) -> Result<(LifecycleLock, LifecycleLock), LockError> {
        let shared = Self::acquire_file(
            state_dir,
            state_dir.join("run").join("lifecycle.lock"),
            None,
            LockMode::Shared,
        )?;
        let own = Self::acquire_file(
            state_dir,
            state_dir
                .join("run")
                .join(format!("component-{component}.lock")),
            Some(me),
            LockMode::Exclusive,
        )?;
        Ok((shared, own))
    }

    fn acquire_file(
        state_dir: &Path,
        path: PathBuf,
        me: Option<&LockHolder>,
        mode: LockMode,
    ) -> Result<LifecycleLock, LockError> {
        match try_lock_described(&path, me, mode) {
            Ok(Ok(lock)) => Ok(LifecycleLock {
                _lock: lock,
                described: me.is_some(),
            }),
            Ok(Err(holder)) => Err(LockError::Held {
                state_dir: state_dir.to_path_buf(),
                holder: HolderInfo(holder),
            }),
            Err(source) => Err(LockError::Io { path, source }),
        }
    }
}

/// [`try_lock_file`] on `path` (its directory created) that, once held, writes `me`
/// (if given) into the file as JSON, so that a process refused it can say who holds
/// it: `Ok(Err(holder))`, with what the holder wrote (`None` when it wrote nothing
/// readable).
///
/// # Errors
/// When the file cannot be created, locked for another reason, or written.
pub fn try_lock_described(
    path: &Path,
    me: Option<&LockHolder>,
    mode: LockMode,
) -> std::io::Result<Result<Flock<File>, Option<LockHolder>>> {
    std::fs::create_dir_all(path.parent().expect("has a parent"))?;
    let Some(mut lock) = try_lock_file(path, mode)? else {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        return Ok(Err(serde_json::from_str(text.trim()).ok()));
    };
    if let Some(me) = me {
        let json = serde_json::to_string(me).expect("holder serialises");
        lock.set_len(0)?;
        lock.seek(SeekFrom::Start(0))?;
        lock.write_all(json.as_bytes())?;
        lock.flush()?;
    }
    Ok(Ok(lock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().unwrap();
        let me = LockHolder {
            pid: 42,
            command: "flotilla up chat".into(),
            since_ms: 1_700_000_000_000,
        };
        let held = LifecycleLock::acquire(dir.path(), &me).unwrap();
        let other = LockHolder {
            pid: 43,
            command: "flotilla down chat".into(),
            since_ms: 1_700_000_001_000,
        };
        let err = LifecycleLock::acquire(dir.path(), &other).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("pid 42 (`flotilla up chat`) since 2023-11-14T22:13:20Z"),
            "{msg}"
        );
        drop(held);
        LifecycleLock::acquire(dir.path(), &other).unwrap();
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;

    #[test]
    fn steps_share_the_host_but_not_a_component_and_exclude_a_local_invocation() {
        let dir = tempfile::tempdir().unwrap();
        let me = |c: &str| LockHolder {
            pid: 7,
            command: c.into(),
            since_ms: 0,
        };
        let a = LifecycleLock::acquire_for_step(dir.path(), "llm", &me("step llm")).unwrap();
        let b = LifecycleLock::acquire_for_step(dir.path(), "embed", &me("step embed")).unwrap();
        match LifecycleLock::acquire_for_step(dir.path(), "llm", &me("other")) {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder.0.unwrap().command, "step llm")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            LifecycleLock::acquire(dir.path(), &me("flotilla up")),
            Err(LockError::Held { .. })
        ));
        drop((a, b));
        let local = LifecycleLock::acquire(dir.path(), &me("flotilla up")).unwrap();
        assert!(LifecycleLock::acquire_for_step(dir.path(), "llm", &me("step")).is_err());
        drop(local);
    }
}
