//! The agent's own state, in `<base>/agent/` (the base state directory shared by the
//! projects, see `flotilla_exec::statedir`):
//!
//! | file | written by | what |
//! | --- | --- | --- |
//! | `snapshot.json` | [`AgentDir::save_applied`] | the last desired state the agent fully applied ([`Applied`]): after a restart the agent knows what it runs, so it stops what a new revision removed and restarts nothing that did not change |
//! | `status.json` | [`crate::report::LocalReporter`] | the last [`AgentReport`](crate::report::AgentReport): measured status, drift, recent events |
//! | `agent.json` | `flotilla agent join` (with the authority client) | [`Enrollment`]: the authority's URL, this host's name, its credential and the authority's CA (mode 0600) |
//! | `running.json` | every agent start ([`crate::update::Started`]) | [`crate::update::Running`]: this process's pid, start time and measured executable digest |
//! | `reported.json` | every agent start, once the authority accepted its report | [`crate::update::Reported`]: the same, and when; what the self-update watchdog waits for |
//! | `acceptance.json` | the updater | `flotilla_release::Acceptance`: the highest release serial accepted per signing key |
//! | `trusted-keys/*.pub` | the operator | the minisign public keys releases must be signed with (when `--trusted-key` is not given) |
//! | `agent.log` | the self-update watchdog | the output of an agent it started itself (no supervisor) |
//! | `update-watch.log` | the self-update watchdog | its own output (no supervisor, or launchd) |
//!
//! Every file is written atomically: a temporary file in the same directory, flushed
//! to disk, renamed over the old one, then the directory flushed; a reader (or an
//! agent killed at any moment) sees the old content or the new, never a mix.

use flotilla_exec::lock::{try_lock_file, LockMode};
use flotilla_model::topology::Snapshot;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version of [`Applied`]'s JSON; bumped on an incompatible change.
pub const APPLIED_FORMAT: u32 = 1;

/// Why the agent's state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file could not be read, written or renamed.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something else than what the agent writes there.
    #[error("{path} is not what the agent writes there: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// The last desired state the agent applied, as kept in `snapshot.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// [`APPLIED_FORMAT`].
    pub format: u32,
    /// The revision it came from: `sha256:…` (the digest of the topology's canonical
    /// JSON, for a local inventory and for an authority's revision alike).
    pub revision: String,
    /// The authority's selection index it was received at (`None` for a local
    /// inventory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// Where relative paths of its components start (the inventory's directory, or
    /// the home directory for a snapshot from the authority).
    pub base_dir: PathBuf,
    /// When the agent finished applying it, ms since the Unix epoch (kept when the
    /// same snapshot is applied again, e.g. after the agent restarts): changes made by
    /// hand after it are drift.
    pub applied_at_ms: i64,
    /// The host's snapshot, as received (its own host entry not yet made `local`).
    pub snapshot: Snapshot,
}

/// What `flotilla agent join` stores in `agent.json` (0600): enough to reach the
/// authority and prove who this agent is.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    /// The authority's base URL (`https://authority.example:8443`).
    pub server: String,
    /// This host's name in the inventory (what its credential is bound to).
    pub host: String,
    /// The per-agent credential (a bearer token). Never logged.
    pub credential: String,
    /// The authority's CA certificate (PEM), pinned at join by its SHA-256.
    pub ca_pem: String,
}

impl std::fmt::Debug for Enrollment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enrollment")
            .field("server", &self.server)
            .field("host", &self.host)
            .field("credential", &"<redacted>")
            .finish()
    }
}

/// How long [`AgentDir::lock`] waits for the lock of an agent that is dead but still
/// exiting (10 s).
pub const LOCK_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The agent's directory, `<base>/agent/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDir {
    dir: PathBuf,
}

impl AgentDir {
    /// Takes `agent.lock` in this directory (an exclusive `flock(2)`): one agent per
    /// state directory. Held for as long as the returned value lives. When the agent
    /// that holds it is already dead but still exiting (killed while a thread was in
    /// uninterruptible IO: its pid is a zombie or gone while its descriptors are not
    /// yet closed), waits for the kernel to release it, up to [`LOCK_RELEASE_WAIT`];
    /// a live holder is refused at once.
    ///
    /// # Errors
    /// When another agent holds it (`WouldBlock`, naming its pid when it wrote it), or
    /// the file cannot be opened.
    pub fn lock(&self) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
        use std::io::Write as _;
        // Said with the path: a state directory it cannot write is named.
        let at = |path: &Path| {
            let path = path.to_path_buf();
            move |e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        };
        std::fs::create_dir_all(&self.dir).map_err(at(&self.dir))?;
        let path = self.dir.join("agent.lock");
        let deadline = std::time::Instant::now() + LOCK_RELEASE_WAIT;
        let mut lock = loop {
            match try_lock_file(&path, LockMode::Exclusive).map_err(at(&path))? {
                Some(lock) => break lock,
                None => {
                    let holder = std::fs::read_to_string(&path).unwrap_or_default();
                    let dying = holder
                        .trim()
                        .parse::<u32>()
                        .is_ok_and(|pid| !flotilla_exec::identity::alive(pid));
                    if dying && std::time::Instant::now() < deadline {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        continue;
                    }
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!(
                            "another agent runs on this state directory ({}{}): one agent per host",
                            path.display(),
                            match holder.trim() {
                                "" => String::new(),
                                pid => format!(", pid {pid}"),
                            }
                        ),
                    ));
                }
            }
        };
        lock.set_len(0)?;
        write!(lock, "{}", std::process::id())?;
        Ok(lock)
    }

    /// The agent directory below the base state directory `base`.
    pub fn new(base: &Path) -> AgentDir {
        AgentDir {
            dir: base.join("agent"),
        }
    }

    /// The agent directory of the base state directory `state_dir` (`--state-dir`),
    /// else of the environment's default (`flotilla_exec::statedir`).
    ///
    /// # Errors
    /// When no state directory can be determined (no `HOME`), or it is not a
    /// directory.
    pub fn resolve(state_dir: Option<&Path>) -> std::io::Result<AgentDir> {
        let state = flotilla_exec::statedir::StateDir::resolve(
            state_dir,
            flotilla_exec::remote::DEFAULT_PROJECT,
        )?;
        Ok(AgentDir::new(state.base()))
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `snapshot.json`.
    pub fn snapshot_file(&self) -> PathBuf {
        self.dir.join("snapshot.json")
    }

    /// `status.json`.
    pub fn status_file(&self) -> PathBuf {
        self.dir.join("status.json")
    }

    /// `agent.json`.
    pub fn enrollment_file(&self) -> PathBuf {
        self.dir.join("agent.json")
    }

    /// `running.json` (see the module docs).
    pub fn running_file(&self) -> PathBuf {
        self.dir.join("running.json")
    }

    /// `reported.json`.
    pub fn reported_file(&self) -> PathBuf {
        self.dir.join("reported.json")
    }

    /// `acceptance.json`.
    pub fn acceptance_file(&self) -> PathBuf {
        self.dir.join("acceptance.json")
    }

    /// `trusted-keys/`.
    pub fn trusted_keys_dir(&self) -> PathBuf {
        self.dir.join("trusted-keys")
    }

    /// `agent.log`.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    /// `update-watch.log`.
    pub fn watch_log_file(&self) -> PathBuf {
        self.dir.join("update-watch.log")
    }

    /// The last applied desired state; `None` when the agent never applied one.
    ///
    /// # Errors
    /// [`StateError::Io`] when it cannot be read, [`StateError::Corrupt`] when it is
    /// not an [`Applied`] of [`APPLIED_FORMAT`].
    pub fn load_applied(&self) -> Result<Option<Applied>, StateError> {
        let path = self.snapshot_file();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Io { path, source }),
        };
        let applied: Applied = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        if applied.format != APPLIED_FORMAT {
            return Err(StateError::Corrupt {
                path,
                why: format!(
                    "format {} (this agent reads format {APPLIED_FORMAT})",
                    applied.format
                ),
            });
        }
        Ok(Some(applied))
    }

    /// Keeps `applied` as the last applied desired state (atomically, mode 0600).
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save_applied(&self, applied: &Applied) -> Result<(), StateError> {
        let mut bytes = serde_json::to_vec_pretty(applied).expect("serialisable");
        bytes.push(b'\n');
        write_atomic(&self.snapshot_file(), &bytes, 0o600)
    }

    /// The enrollment `flotilla agent join` stored; `None` when it never ran.
    ///
    /// # Errors
    /// As [`AgentDir::load_applied`].
    pub fn load_enrollment(&self) -> Result<Option<Enrollment>, StateError> {
        let path = self.enrollment_file();
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StateError::Corrupt {
                    path,
                    why: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Io { path, source }),
        }
    }

    /// Stores `enrollment` (atomically, mode 0600: it holds a credential).
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save_enrollment(&self, enrollment: &Enrollment) -> Result<(), StateError> {
        let mut bytes = serde_json::to_vec_pretty(enrollment).expect("serialisable");
        bytes.push(b'\n');
        write_atomic(&self.enrollment_file(), &bytes, 0o600)
    }
}

/// Writes `bytes` to `path` atomically with mode `mode`: a temporary file in the same
/// directory (created owner-only if missing), flushed, renamed over `path`, then the
/// directory flushed so the rename survives a crash.
///
/// # Errors
/// [`StateError::Io`] naming the file that failed.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StateError::Io { path, source }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn applied() -> Applied {
        Applied {
            format: APPLIED_FORMAT,
            revision: "sha256:abc".into(),
            index: None,
            base_dir: "/srv".into(),
            applied_at_ms: 42,
            snapshot: Snapshot {
                components: Vec::new(),
                host: "local".into(),
                hosts: BTreeMap::new(),
                project: Some("p".into()),
                topology_digest: "sha256:abc".into(),
            },
        }
    }

    #[test]
    fn applied_round_trips_atomically_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let d = AgentDir::new(t.path());
        assert_eq!(d.load_applied().unwrap(), None);
        d.save_applied(&applied()).unwrap();
        assert_eq!(d.load_applied().unwrap(), Some(applied()));
        let mode = std::fs::metadata(d.snapshot_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("snapshot.json")]);
    }

    #[test]
    fn a_foreign_file_is_corrupt_not_empty() {
        let t = tempfile::tempdir().unwrap();
        let d = AgentDir::new(t.path());
        std::fs::create_dir_all(d.path()).unwrap();
        std::fs::write(d.snapshot_file(), "{}").unwrap();
        assert!(matches!(d.load_applied(), Err(StateError::Corrupt { .. })));
        let mut other = applied();
        other.format = 99;
        std::fs::write(d.snapshot_file(), serde_json::to_vec(&other).unwrap()).unwrap();
        let e = d.load_applied().unwrap_err().to_string();
        assert!(e.contains("format 99"), "{e}");
    }

    #[test]
    fn enrollment_never_prints_its_credential() {
        let e = Enrollment {
            server: "https://a".into(),
            host: "h".into(),
            credential: "s3cret".into(),
            ca_pem: String::new(),
        };
        assert!(!format!("{e:?}").contains("s3cret"));
    }
}
