//! The durable adopt record: one JSON file per component,
//! `<project state dir>/adopt/<component>.json` (owner-only: it holds the prior
//! owner's environment to restore it), written through a temporary file that is
//! fsynced and renamed into place, the directory fsynced after, *before* each step
//! runs. A CLI killed at any step leaves a record whose [`Phase`] says which step was
//! under way; the next `adopt` (or `status`) reads it and can finish or roll back.
//!
//! The record holds the prior owner's restore recipe ([`Prior`]): a process's argv,
//! working directory, environment and user; a unit's name and whether it was
//! enabled; a launchd job's label and plist; a container's id and name.

use crate::statedir::StateDir;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The record's format version (bump on an incompatible change).
pub const RECORD_VERSION: u32 = 1;

/// The directory of the adopt records in a project's state directory.
pub fn dir(state: &StateDir) -> PathBuf {
    state.root().join("adopt")
}

/// The record of `component`.
pub fn path(state: &StateDir, component: &str) -> PathBuf {
    dir(state).join(format!("{component}.json"))
}

/// Where a restored hand-started process writes its output (it had a terminal or a
/// pipe before, which cannot be given back).
pub fn prior_log(state: &StateDir, component: &str) -> PathBuf {
    dir(state).join(format!("{component}.prior.log"))
}

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read, written, synced or renamed.
    #[error("adopt record {path}")]
    Io {
        /// The file (or its directory).
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record this flotilla reads.
    #[error("adopt record {path} is unreadable: {why}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// Which step an adopt is at. Written before the step runs: a record found at
/// `StopPrior` may or may not have stopped the prior owner yet; the steps are
/// idempotent, so finishing or rolling back re-runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// (2) The prior owner is being stopped.
    StopPrior,
    /// (3) Flotilla is starting its own instance.
    Start,
    /// (4) The acceptance checks run.
    Accept,
    /// (5) Kept: Flotilla owns it (the record stays, for a later `--rollback`).
    Adopted,
    /// Going back: Flotilla's instance is stopped and the prior owner restored.
    Rollback,
    /// Back: the prior owner runs again as it was, proven by the baseline checks.
    RolledBack,
}

impl Phase {
    /// Whether an adopt at this phase is finished (nothing left under way).
    pub fn finished(self) -> bool {
        matches!(self, Phase::Adopted | Phase::RolledBack)
    }

    /// The word used in records and messages (`stop-prior`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::StopPrior => "stop-prior",
            Phase::Start => "start",
            Phase::Accept => "accept",
            Phase::Adopted => "adopted",
            Phase::Rollback => "rollback",
            Phase::RolledBack => "rolled-back",
        }
    }

    /// What the step does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Phase::StopPrior => "stopping the prior owner",
            Phase::Start => "starting flotilla's instance",
            Phase::Accept => "running the acceptance checks",
            Phase::Adopted => "adopted",
            Phase::Rollback => "rolling back to the prior owner",
            Phase::RolledBack => "rolled back to the prior owner",
        }
    }
}

/// A process started by hand, as measured when the adopt began: what identifies it
/// (pid and start time: identity before signal) and what re-runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorProcess {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot): with the pid, names it for good.
    pub start_time_ticks: u64,
    /// Its process group (it is stopped as a group when it leads it).
    pub pgid: i32,
    /// `/proc/<pid>/exe`.
    pub exe: String,
    /// `sha256:` of the executable image it runs.
    pub exe_sha256: String,
    /// Its command line.
    pub argv: Vec<String>,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its environment (`/proc/<pid>/environ`), given back when it is re-run. May
    /// hold secrets: the record is owner-only and never printed.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Its real user id.
    pub uid: u32,
    /// That user's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A systemd unit, as it was when the adopt began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorUnit {
    /// The unit (`llama.service`).
    pub unit: String,
    /// Its `UnitFileState` then (`enabled`, `disabled`, `static`…): an enabled unit
    /// is disabled by the adopt (so it does not come back at boot) and enabled again
    /// by a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_file_state: Option<String>,
    /// Its unit file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragment_path: Option<String>,
    /// The `argv[]` of its first `ExecStart`.
    #[serde(default)]
    pub exec_start: Vec<String>,
    /// Its `User=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its main process then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main: Option<PriorProcess>,
}

/// A container not created by Flotilla, as its engine showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorContainer {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The image it was created from, as given then.
    pub image: String,
    /// Its published TCP ports (host side).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Each published port and the port in the container it leads to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_map: Vec<(u16, u16)>,
    /// Its command (`Cmd`), when it is not its image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Its entrypoint, when it is not its image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The engine's API socket it was found on.
    pub engine: String,
}

/// A launchd job, as `launchctl` showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorJob {
    /// Its label.
    pub label: String,
    /// Its domain (`gui/501`, `system`).
    pub domain: String,
    /// Its plist (what `bootstrap` loads again).
    pub plist: String,
    /// Its program arguments.
    #[serde(default)]
    pub program_arguments: Vec<String>,
    /// Its pid then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its process then (what runs: compared with the declared program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main: Option<PriorProcess>,
}

/// Who ran the component before: the restore recipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Prior {
    /// A process started by hand (or by a script): stopped by an identity-checked
    /// signal, restored by running its command line again.
    Process(PriorProcess),
    /// A systemd unit: stopped and disabled, restored by enabling and starting it.
    Unit(PriorUnit),
    /// A container: stopped (not removed), restored by starting it.
    Container(PriorContainer),
    /// A launchd job: booted out, restored by bootstrapping its plist.
    Job(PriorJob),
}

impl Prior {
    /// One line: `pid 4242 (llama-server), started by hand`, `systemd unit
    /// llama.service (enabled)`.
    pub fn describe(&self) -> String {
        match self {
            Prior::Process(p) => format!(
                "pid {} ({}), started by hand{}",
                p.pid,
                Path::new(&p.exe)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.exe.clone()),
                p.user
                    .as_ref()
                    .map(|u| format!(" as {u}"))
                    .unwrap_or_default()
            ),
            Prior::Unit(u) => format!(
                "systemd unit {} ({})",
                u.unit,
                u.unit_file_state
                    .as_deref()
                    .unwrap_or("unit file state unknown")
            ),
            Prior::Container(c) => format!("container {} ({}, {})", c.name, c.image, c.id),
            Prior::Job(j) => format!("launchd job {} in {}", j.label, j.domain),
        }
    }

    /// A copy to show: the environment's values replaced by `[not shown]` (they
    /// may hold secrets; the names stay).
    pub fn redacted(&self) -> Prior {
        let mut p = self.clone();
        let hide = |env: &mut Vec<(String, String)>| {
            for (_, v) in env.iter_mut() {
                *v = "[not shown]".into();
            }
        };
        match &mut p {
            Prior::Process(x) => hide(&mut x.env),
            Prior::Unit(PriorUnit { main: Some(x), .. })
            | Prior::Job(PriorJob { main: Some(x), .. }) => hide(&mut x.env),
            _ => {}
        }
        p
    }

    /// `process`, `systemd`, `container` or `launchd`.
    pub fn kind(&self) -> &'static str {
        match self {
            Prior::Process(_) => "process",
            Prior::Unit(_) => "systemd",
            Prior::Container(_) => "container",
            Prior::Job(_) => "launchd",
        }
    }
}

/// One check of the baseline or of the acceptance, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// What is checked (`listening on 127.0.0.1:8080`, `readiness of llm`,
    /// `readiness of chat (depends on llm)`): the same words at baseline and
    /// acceptance, so they pair up.
    pub what: String,
    /// Whether it passed.
    pub passed: bool,
    /// What was seen.
    pub saw: String,
}

/// One line of the record's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// The phase it was in.
    pub phase: Phase,
    /// What happened.
    pub note: String,
}

/// The durable record of one adopt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The component.
    pub component: String,
    /// Its host.
    pub host: String,
    /// The adapter it moves to (`process`, `systemd`…).
    pub adapter: String,
    /// Where it is.
    pub phase: Phase,
    /// The prior owner: the restore recipe.
    pub prior: Prior,
    /// The baseline's checks, before anything changed.
    pub baseline: Vec<CheckResult>,
    /// The last acceptance's checks.
    #[serde(default)]
    pub acceptance: Vec<CheckResult>,
    /// Why it is rolling (or rolled) back, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_reason: Option<String>,
    /// The journal's operation that started Flotilla's instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The backup taken before it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// The command line working on it last.
    pub command_line: String,
    /// The pid of the flotilla working on it last (gone: it was interrupted).
    pub pid: u32,
    /// That process's start time (clock ticks since boot): a reused pid is not it.
    pub pid_start_ticks: u64,
    /// When it began (ms since the Unix epoch).
    pub started_at_ms: i64,
    /// What happened, in order.
    #[serde(default)]
    pub history: Vec<Event>,
}

impl AdoptRecord {
    /// Whether the flotilla that wrote it last is gone while it is unfinished: it
    /// was interrupted (killed, crashed, the machine restarted).
    pub fn interrupted(&self) -> bool {
        !self.phase.finished() && crate::process_start_ticks(self.pid) != Some(self.pid_start_ticks)
    }

    /// A copy to show (print, JSON): the prior owner [`Prior::redacted`].
    pub fn redacted(&self) -> AdoptRecord {
        AdoptRecord {
            prior: self.prior.redacted(),
            ..self.clone()
        }
    }

    /// Moves to `phase`, noting `note`, at `now_ms`.
    pub fn enter(&mut self, phase: Phase, note: impl Into<String>, now_ms: i64) {
        self.phase = phase;
        self.pid = std::process::id();
        self.pid_start_ticks = crate::process_start_ticks(self.pid).unwrap_or_default();
        self.history.push(Event {
            at_ms: now_ms,
            phase,
            note: note.into(),
        });
    }

    /// What to type next, for an unfinished record: the two ways out.
    pub fn ways_out(&self) -> String {
        format!(
            "`flotilla adopt {0} --resume` finishes it; `flotilla adopt {0} --rollback` restores {1}",
            self.component,
            self.prior.describe()
        )
    }
}

/// Writes `record` durably: a temporary file (0600) written and fsynced, renamed
/// over the record, the directory fsynced.
///
/// # Errors
/// [`RecordError::Io`].
pub fn save(state: &StateDir, record: &AdoptRecord) -> Result<(), RecordError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let d = dir(state);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecordError::Io { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)
        .map_err(io(&d))?;
    let target = path(state, &record.component);
    let tmp = d.join(format!(".{}.json.tmp", record.component));
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Format {
        path: target.clone(),
        why: e.to_string(),
    })?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(&bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(io(&target))?;
    std::fs::File::open(&d)
        .and_then(|dir| dir.sync_all())
        .map_err(io(&d))?;
    Ok(())
}

/// The record of `component`, if there is one.
///
/// # Errors
/// [`RecordError`]: unreadable, or not a record.
pub fn load(state: &StateDir, component: &str) -> Result<Option<AdoptRecord>, RecordError> {
    read(&path(state, component))
}

fn read(p: &Path) -> Result<Option<AdoptRecord>, RecordError> {
    let bytes = match std::fs::read(p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RecordError::Io {
                path: p.to_path_buf(),
                source,
            })
        }
    };
    let record: AdoptRecord = serde_json::from_slice(&bytes).map_err(|e| RecordError::Format {
        path: p.to_path_buf(),
        why: e.to_string(),
    })?;
    if record.version != RECORD_VERSION {
        return Err(RecordError::Format {
            path: p.to_path_buf(),
            why: format!(
                "version {} (this flotilla reads {RECORD_VERSION})",
                record.version
            ),
        });
    }
    Ok(Some(record))
}

/// Every record of the project, by component name (unreadable ones as errors).
pub fn all(state: &StateDir) -> Vec<Result<AdoptRecord, RecordError>> {
    let Ok(entries) = std::fs::read_dir(dir(state)) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    paths.iter().filter_map(|p| read(p).transpose()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AdoptRecord {
        AdoptRecord {
            version: RECORD_VERSION,
            component: "llm".into(),
            host: "local".into(),
            adapter: "process".into(),
            phase: Phase::StopPrior,
            prior: Prior::Process(PriorProcess {
                pid: 4242,
                start_time_ticks: 99,
                pgid: 4242,
                exe: "/usr/bin/llama-server".into(),
                exe_sha256: "sha256:00".into(),
                argv: vec!["llama-server".into(), "--port".into(), "8080".into()],
                cwd: Some("/srv".into()),
                env: vec![("TOKEN".into(), "s3cret".into())],
                uid: 1000,
                user: Some("me".into()),
            }),
            baseline: Vec::new(),
            acceptance: Vec::new(),
            rollback_reason: None,
            operation: None,
            backup: None,
            command_line: "flotilla adopt llm".into(),
            pid: std::process::id(),
            pid_start_ticks: crate::process_start_ticks(std::process::id()).unwrap(),
            started_at_ms: 1,
            history: Vec::new(),
        }
    }

    #[test]
    fn a_record_is_written_owner_only_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let state = StateDir::resolve(Some(base.path()), "p").unwrap();
        assert_eq!(load(&state, "llm").unwrap(), None);
        let mut r = record();
        save(&state, &r).unwrap();
        assert_eq!(load(&state, "llm").unwrap().as_ref(), Some(&r));
        let mode = std::fs::metadata(path(&state, "llm"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        r.enter(Phase::Start, "prior stopped", 2);
        save(&state, &r).unwrap();
        let all = all(&state);
        assert_eq!(all.len(), 1, "no temporary file left: {all:?}");
        assert_eq!(all[0].as_ref().unwrap().phase, Phase::Start);
        assert!(!r.interrupted(), "this process wrote it and runs");
    }

    #[test]
    fn an_unfinished_record_of_a_gone_process_is_interrupted() {
        let mut r = record();
        // A pid above pid_max: no process has it.
        r.pid = u32::MAX - 1;
        assert!(r.interrupted());
        // This process's pid, another start time: a reused pid.
        r.pid = std::process::id();
        r.pid_start_ticks += 1;
        assert!(r.interrupted());
        r.phase = Phase::Adopted;
        assert!(!r.interrupted(), "a finished adopt is not interrupted");
    }
}
