//! The update record and the files around it, shared by the updater ([`crate::update`]),
//! the watchdog ([`crate::watch`]), the launcher ([`crate::launch`]) and component
//! releases ([`crate::component_release`]): `<root>/update.json` ([`UpdateRecord`], its
//! [`Step`]s), `<root>/trial.json` ([`Trial`]), `<root>/update.lock`, the agent's
//! `running.json` / `reported.json`, and the small helpers they all use (the clock,
//! JSON files, an error's chain).

use flotilla_api::wire::Assignment;
use flotilla_exec::lock::LockMode;
use flotilla_model::Component;
use flotilla_release::install::InstallError;
use flotilla_release::{InstallRoot, Reason, Refusal, UpdateReport, UpdateState, VersionDir};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of [`UpdateRecord`]'s JSON. 2: the agent's own update runs the new version on
/// trial ([`Step::Armed`], [`Step::Committing`]) and flips `current` only once proven.
pub const UPDATE_FORMAT: u32 = 2;

/// The release name of the agent's own binary.
pub const AGENT_RELEASE: &str = "flotilla-agent";

/// The binary's file name in an install root's version directories.
pub const BINARY: &str = "flotilla";

/// How many old versions an install root keeps besides `current` and `previous`.
pub const KEEP_OLD: usize = 3;

/// `<state>/agent/running.json`: the agent process as it measured itself at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot, `/proc/<pid>/stat` field 22).
    pub start_time_ticks: u64,
    /// `sha256:<hex>` of its executable image (measured through `/proc/<pid>/exe`).
    pub exe_sha256: String,
}

/// `<state>/agent/reported.json`: [`Running`], written once the authority accepted this
/// process's first report, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot).
    pub start_time_ticks: u64,
    /// `sha256:<hex>` of its executable image.
    pub exe_sha256: String,
    /// When the report was accepted (ms since the Unix epoch).
    pub at_ms: i64,
}

/// One side of an update: a version directory of the install root and the SHA-256 of
/// its binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    /// The version (`1.4.0`).
    pub version: String,
    /// Its directory, `<root>/versions/<version>-<sha12>`.
    pub dir: PathBuf,
    /// The binary in it.
    pub binary: PathBuf,
    /// SHA-256 of the binary, 64 hex digits.
    pub sha256: String,
}

impl Side {
    /// The side of version directory `v` whose binary has SHA-256 `sha256` (hex).
    pub fn of(v: &VersionDir, sha256: &str) -> Side {
        Side {
            version: v.version.clone(),
            dir: v.dir.clone(),
            binary: v.binary.clone(),
            sha256: sha256.to_string(),
        }
    }

    /// As the install root names it.
    pub fn version_dir(&self) -> VersionDir {
        VersionDir {
            version: self.version.clone(),
            sha12: self.sha256.chars().take(12).collect(),
            dir: self.dir.clone(),
            binary: self.binary.clone(),
        }
    }

    /// The measured form of its digest, `sha256:<hex>`.
    pub fn measured(&self) -> String {
        format!("sha256:{}", self.sha256)
    }
}

/// The agent process an update started from, as the watchdog needs it: to signal it
/// (identity before signal), to tell it from a new process, and (no supervisor) to start
/// the new one the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldAgent {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot).
    pub start_time_ticks: u64,
    /// `sha256:<hex>` of its executable image.
    pub exe_sha256: String,
    /// Its argv (`/proc/<pid>/cmdline`), `argv[0]` included.
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
}

impl OldAgent {
    /// Process `pid` (started at `start_time_ticks`, running `exe_sha256`) with its argv
    /// (`/proc/<pid>/cmdline`) and working directory (`/proc/<pid>/cwd`); `None` when
    /// either cannot be read.
    pub fn of(pid: u32, start_time_ticks: u64, exe_sha256: String) -> Option<OldAgent> {
        let cmdline = flotilla_exec::sys::read_cmdline(pid).ok().flatten()?;
        let argv = cmdline
            .strip_suffix(&[0])
            .unwrap_or(&cmdline)
            .split(|c| *c == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let cwd = flotilla_exec::sys::read_cwd_link(pid).ok().flatten()?;
        Some(OldAgent {
            pid,
            start_time_ticks,
            exe_sha256,
            argv,
            cwd,
        })
    }
}

/// Where an update stands: what was done last, so that a watchdog started again goes on
/// from there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step")]
pub enum Step {
    /// The agent is downloading and verifying the artifact.
    Downloading,
    /// Staged; the watchdog flips `current` (a component) or arms the trial (the agent)
    /// next.
    Staged,
    /// A component's update: `current` points at the new version; restarted next.
    Flipped,
    /// The agent's own update: the new version is armed for trial. `current` still names
    /// the version the update started from (known good); every start of the agent
    /// through `current` runs the new version on trial instead ([`crate::launch`]),
    /// at most [`MAX_TRIAL_BOOTS`] times. The watchdog restarts the agent next.
    Armed,
    /// Restarted at `since_ms`; the watchdog proves the new process.
    Proving {
        /// When the restart was asked (ms since the Unix epoch).
        since_ms: i64,
        /// The supervisor's start count then (systemd `NRestarts`, launchd `runs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        starts_before: Option<u64>,
    },
    /// Proven; the new process soaks.
    Soaking {
        /// The proven process.
        pid: u32,
        /// Its start time.
        start_time_ticks: u64,
        /// When it was proven (ms since the Unix epoch).
        since_ms: i64,
    },
    /// The agent's own update, proven and soaked: the watchdog flips `current` to the
    /// new version next (a start meanwhile runs the new version, proven).
    Committing,
    /// Failed (reason in the record): the watchdog points `current` back and restarts.
    RollBack,
    /// Rolled back and restarted at `since_ms`; the watchdog proves the old version.
    ProvingRollback {
        /// When the restart was asked.
        since_ms: i64,
    },
    /// Finished: [`UpdateRecord::state`] says how.
    Done,
}

/// One action of the watchdog or updater, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// What: `flip`, `restart: systemctl …`, `started pid N`, `rollback`…
    pub what: String,
}

/// A process seen running for the agent after the restart (not the old one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenPid {
    /// Its pid.
    pub pid: u32,
    /// Its start time.
    pub start_time_ticks: u64,
    /// Its measured digest, `sha256:<hex>` (empty when it could not be measured).
    pub exe_sha256: String,
    /// When it was first seen.
    pub first_ms: i64,
    /// How it ended, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// `<root>/update.json`: one update of the agent's binary, from assignment to its end.
/// Written by the updater up to `Staged` and by the watchdog after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// [`UPDATE_FORMAT`].
    pub format: u32,
    /// The authority's rollout id.
    pub rollout: u64,
    /// The release's name.
    pub name: String,
    /// The release's version.
    pub version: String,
    /// The manifest's serial (0 when refused before the manifest was read).
    pub serial: u64,
    /// The minisign key id that signed it (empty when refused before that).
    pub key_id: String,
    /// The artifact's SHA-256 for this platform, hex (empty when refused before that).
    pub sha256: String,
    /// What ran when the update started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Side>,
    /// What it updates to, once staged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Side>,
    /// Where it stands, as reported.
    pub state: UpdateState,
    /// Where it stands, for the watchdog.
    #[serde(flatten)]
    pub step: Step,
    /// The soak (ms).
    pub min_healthy_ms: u64,
    /// Time allowed to prove the new process after the restart (ms).
    pub timeout_ms: u64,
    /// When it started (ms since the Unix epoch).
    pub started_ms: i64,
    /// When the record last changed.
    pub updated_ms: i64,
    /// What was done, in order.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Why it failed, was refused or rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The reason's detail.
    #[serde(default)]
    pub detail: String,
    /// What was measured on the way (pids, digests, exits).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// The agent process it started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<OldAgent>,
    /// The supervisor (`--supervisor` form).
    #[serde(default)]
    pub supervisor: String,
    /// New processes seen since the restart.
    #[serde(default)]
    pub seen: Vec<SeenPid>,
    /// How many times the rollback restart was tried.
    #[serde(default)]
    pub rollbacks: u32,
}

/// Why an update record or agent file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// A file could not be read or written.
    #[error("{}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something else.
    #[error("{} is not an update record of this agent: {why}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The install root refused.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// This process could not be measured.
    #[error("measuring this process: {0}")]
    Measure(String),
}

impl UpdateRecord {
    /// The record in `root`; `None` when there is none.
    ///
    /// # Errors
    /// [`UpdateError::Io`], [`UpdateError::Corrupt`].
    pub fn load(root: &InstallRoot) -> Result<Option<UpdateRecord>, UpdateError> {
        let path = root.update_path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(UpdateError::Io { path, source }),
        };
        let rec: UpdateRecord =
            serde_json::from_slice(&bytes).map_err(|e| UpdateError::Corrupt {
                path: path.clone(),
                why: e.to_string(),
            })?;
        if rec.format != UPDATE_FORMAT {
            return Err(UpdateError::Corrupt {
                path,
                why: format!("format {} (this agent reads {UPDATE_FORMAT})", rec.format),
            });
        }
        Ok(Some(rec))
    }

    /// Writes it to `root` atomically (0644), `updated_ms` set to now.
    ///
    /// # Errors
    /// [`UpdateError::Io`].
    pub fn save(&mut self, root: &InstallRoot) -> Result<(), UpdateError> {
        self.updated_ms = now_ms();
        let mut bytes = serde_json::to_vec_pretty(self).expect("serialisable");
        bytes.push(b'\n');
        let path = root.update_path();
        flotilla_release::install::write_atomic(&path, &bytes, 0o644)
            .map_err(|source| UpdateError::Io { path, source })
    }

    /// Whether it is the agent's own update and a start of the agent through `current`
    /// runs the new version (on trial, or proven and being committed).
    pub fn runs_new_version(&self) -> bool {
        self.name == AGENT_RELEASE
            && self.to.is_some()
            && matches!(
                self.step,
                Step::Armed | Step::Proving { .. } | Step::Soaking { .. } | Step::Committing
            )
    }

    /// Whether a watchdog has work left (staged and not finished).
    pub fn needs_watchdog(&self) -> bool {
        !matches!(self.step, Step::Downloading | Step::Done)
    }

    /// Whether it ended (updated, rolled back or refused).
    pub fn finished(&self) -> bool {
        self.step == Step::Done
    }

    /// Whether it is the update of `a` (same rollout, name and version).
    pub fn is_for(&self, a: &Assignment) -> bool {
        self.rollout == a.rollout && self.name == a.name && self.version == a.version
    }

    /// Appends an attempt line (now).
    pub fn attempt(&mut self, what: impl Into<String>) {
        self.attempts.push(Attempt {
            at_ms: now_ms(),
            what: what.into(),
        });
    }

    /// What the agent reports of it.
    pub fn report(&self) -> UpdateReport {
        UpdateReport {
            name: self.name.clone(),
            version: self.version.clone(),
            sha256: self.sha256.clone(),
            state: self.state,
            reason: self.reason,
            detail: self.detail.clone(),
            evidence: self.evidence.clone(),
            since_ms: self.started_ms,
        }
    }

    /// A record of assignment `a` whose signed `manifest` (signed by `key_id`) passed
    /// the checks, about to download artifact `sha256` (hex).
    pub fn downloading(
        a: &Assignment,
        manifest: &flotilla_release::Manifest,
        key_id: &str,
        sha256: &str,
    ) -> UpdateRecord {
        let mut rec = UpdateRecord::refused(a, &Refusal::new(Reason::Aborted, ""));
        rec.serial = manifest.serial;
        rec.key_id = key_id.to_string();
        rec.sha256 = sha256.to_string();
        rec.state = UpdateState::Downloading;
        rec.step = Step::Downloading;
        rec.reason = None;
        rec
    }

    /// A record of assignment `a` refused for `refusal` before anything was applied.
    pub fn refused(a: &Assignment, refusal: &Refusal) -> UpdateRecord {
        let now = now_ms();
        UpdateRecord {
            format: UPDATE_FORMAT,
            rollout: a.rollout,
            name: a.name.clone(),
            version: a.version.clone(),
            serial: 0,
            key_id: String::new(),
            sha256: String::new(),
            from: None,
            to: None,
            state: UpdateState::Refused,
            step: Step::Done,
            min_healthy_ms: a.min_healthy_ms,
            timeout_ms: a.timeout_ms,
            started_ms: now,
            updated_ms: now,
            attempts: Vec::new(),
            reason: Some(refusal.reason),
            detail: refusal.detail.clone(),
            evidence: Vec::new(),
            agent: None,
            supervisor: String::new(),
            seen: Vec::new(),
            rollbacks: 0,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub use flotilla_exec::this_process::now_ms;

/// Reads a JSON file; `None` when missing or unreadable as `T` (these files are
/// rewritten whole, atomically, so a partial one is never seen).
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes `value` as pretty JSON to `path`, atomically and durably (0644; the
/// directory made owner-only when missing).
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), UpdateError> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("serialisable");
    bytes.push(b'\n');
    let io = |source| UpdateError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    flotilla_release::install::write_atomic(path, &bytes, 0o644).map_err(io)
}

/// How many times the known-good launcher starts the new version on trial in one update
/// of the agent ([`crate::launch`]); the start after that runs the known-good version
/// (the same number of new processes the watchdog allows before it calls a crash loop).
pub const MAX_TRIAL_BOOTS: u32 = 2;

/// `<root>/trial.json`: the trial starts of the new version in one update of the agent,
/// counted by the launcher before each (so a crash at any moment cannot start it more
/// than [`MAX_TRIAL_BOOTS`] times), reset by the watchdog when it arms the trial.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    /// The update it counts for: its record's `started_ms`.
    pub update_started_ms: i64,
    /// The new version's SHA-256 (64 hex).
    pub sha256: String,
    /// How many times the new version was started on trial.
    pub boots: u32,
    /// Each trial start, in order.
    #[serde(default)]
    pub starts: Vec<TrialStart>,
}

/// One trial start: the launcher's process, which `exec`s the new version (same pid and
/// start time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialStart {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot).
    pub start_time_ticks: u64,
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
}

impl Trial {
    /// `<root>/trial.json`.
    pub fn path(root: &InstallRoot) -> PathBuf {
        root.root().join("trial.json")
    }

    /// The trial count of update `rec` (zero when the file counts another update, or
    /// there is none).
    pub fn of(root: &InstallRoot, rec: &UpdateRecord) -> Trial {
        read_json::<Trial>(&Trial::path(root))
            .filter(|t| t.update_started_ms == rec.started_ms && t.sha256 == rec.sha256)
            .unwrap_or_else(|| Trial::fresh(rec))
    }

    /// No trial start yet of update `rec`.
    pub fn fresh(rec: &UpdateRecord) -> Trial {
        Trial {
            update_started_ms: rec.started_ms,
            sha256: rec.sha256.clone(),
            boots: 0,
            starts: Vec::new(),
        }
    }

    /// Whether the launcher starts the known-good version from now on.
    pub fn exhausted(&self) -> bool {
        self.boots >= MAX_TRIAL_BOOTS
    }

    /// Writes it to `root` atomically and durably (0644).
    ///
    /// # Errors
    /// [`UpdateError::Io`].
    pub fn save(&self, root: &InstallRoot) -> Result<(), UpdateError> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("serialisable");
        bytes.push(b'\n');
        let path = Trial::path(root);
        flotilla_release::install::write_atomic(&path, &bytes, 0o644)
            .map_err(|source| UpdateError::Io { path, source })
    }
}

/// `<root>/update.lock`, held (an exclusive `flock`) by the watchdog working on the
/// update.
pub fn lock_path(root: &InstallRoot) -> PathBuf {
    root.lock_path()
}

/// Takes `<root>/update.lock` without waiting; `Ok(None)` when another process holds
/// it.
///
/// # Errors
/// When the file cannot be opened.
pub fn try_lock(root: &InstallRoot) -> std::io::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    flotilla_exec::lock::try_lock_file(&lock_path(root), LockMode::Exclusive)
}

/// An error and its causes, one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// The install root a component's program is kept in, when it declares a release.
pub fn install_root(c: &Component) -> Option<InstallRoot> {
    c.release
        .as_ref()
        .map(|r| InstallRoot::new(PathBuf::from(&r.root), r.name.clone()))
}

/// Whether a release update of `c`'s install root is between staging and its end (its
/// supervision and convergence wait meanwhile).
pub fn in_progress(c: &Component) -> bool {
    install_root(c)
        .and_then(|root| UpdateRecord::load(&root).ok().flatten())
        .is_some_and(|rec| rec.needs_watchdog())
}
