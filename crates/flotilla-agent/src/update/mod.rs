//! Self-update, the agent's side: what every agent start does, the updater that takes a
//! release assignment to a staged binary and a running watchdog, and the update record
//! they share with the watchdog ([`crate::watch`]).
//!
//! # Every start ([`Updater::start`], then [`Updater::run`])
//!
//! 1. Measures this process (`flotilla_exec::identity::measure`: the SHA-256 of the
//!    image `/proc/self/exe` really is, not of a path) and writes
//!    `<state>/agent/running.json` ([`Running`]).
//! 2. Finds an update in progress in `<root>/update.json` whose watchdog is gone (nobody
//!    holds `<root>/update.lock`: the agent was killed and restarted mid-update, or the
//!    watchdog was) and starts a watchdog again, from the binary the update started from;
//!    it continues from the recorded step. A running agent looks again every
//!    [`ORPHAN_CHECK`] (a watchdog killed while the agent lives).
//! 3. Posts a `HostUpdate` (the measured digest and pid, and the update record) to the
//!    authority until it is accepted, then writes `<state>/agent/reported.json`
//!    ([`Reported`]): the watchdog proves a restart only by a new pid that wrote it. It
//!    posts again whenever `update.json` changes, and at least every `report_every`.
//!    Without an authority ([`NoAuthority`], `agent run --inventory`) the report is
//!    accepted at once and nothing is ever assigned.
//!
//! # Applying an assignment ([`Updater::run`])
//!
//! The updater long-polls `GET /v1/hosts/{host}/release` ([`ReleaseSource`]). For an
//! assigned `flotilla-agent` release it has not handled yet (a replayed assignment of
//! the same rollout and version changes nothing):
//!
//! 1. The signature, FIRST, against the pinned keys (`--trusted-key`, else
//!    `<state>/agent/trusted-keys/*.pub`): nothing is downloaded for an unsigned or
//!    foreign manifest. Then expiry, serial (not lower than the highest accepted from that
//!    key, kept in `<state>/agent/acceptance.json`) and this platform's artifact.
//! 2. An artifact whose digest this process already runs is `Updated` at once (nothing
//!    to restart; the authority still soaks it). One in `<root>/skip.json` (rolled back
//!    here before) is refused `Skipped`, whichever rollout assigns it.
//! 3. Download into `<root>/downloads/` (the authority's blob store, or the artifact's
//!    URL), then size and SHA-256 checked; then every project's state directory on
//!    the host backed up (`before-self-update`, verified: the new version may migrate
//!    their journals; a backup that fails refuses the update `InstallFailed`), then
//!    staged as `versions/<version>-<sha12>/`.
//! 4. `update.json` written `Staged` (what runs now, what to run, this process's pid,
//!    start time, argv and working directory, the supervisor), then the watchdog started
//!    detached from the binary running now: `flotilla agent update-watch` (see
//!    [`crate::supervisor::Supervisor::watchdog_unit_argv`]). From there on the watchdog
//!    owns the update: it arms the new version for trial, restarts the agent (the
//!    known-good `current` runs it, [`crate::launch`]), proves it, and flips `current`
//!    only then ([`crate::watch`]).
//!
//! A refusal is written to `update.json` as `Refused` with its reason (in memory only
//! when there is no install root) and reported; nothing was applied.
//!
//! # Files
//!
//! This file holds the updater and its loops (every start, reporting, taking
//! assignments); `source.rs` the calls it makes to its authority ([`ReleaseSource`]);
//! `verify.rs` the trusted keys and the checks made before anything is downloaded;
//! `apply.rs` an assignment taken to a staged binary; `download.rs` fetching and
//! checking an artifact; `watchdog.rs` starting the watchdog. The update record is
//! `crate::record`'s.

mod apply;
mod download;
mod source;
mod verify;
mod watchdog;

use crate::authority::{jittered, Backoff};
use crate::record::write_json;
pub use crate::record::{
    chain, lock_path, now_ms, read_json, try_lock, Attempt, OldAgent, Reported, Running, SeenPid,
    Side, Step, Trial, TrialStart, UpdateError, UpdateRecord, AGENT_RELEASE, BINARY, KEEP_OLD,
    MAX_TRIAL_BOOTS, UPDATE_FORMAT,
};
use crate::state::AgentDir;
use crate::supervisor::Supervisor;
use crate::Log;
use flotilla_api::wire::Assignment;
use flotilla_release::{HostUpdate, InstallRoot, TrustedKeys};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use source::{NoAuthority, ReleaseSource};
pub use verify::load_trusted_keys;
pub(crate) use verify::Verified;
pub use watchdog::spawn_watchdog;

/// How the updater restarts and observes this host's components.
#[derive(Debug, Clone)]
pub struct ComponentSettings {
    /// The base state directory given to the agent (`--state-dir`), else `None` (the
    /// environment's default), as the agent's own operations use it.
    pub state_dir: Option<PathBuf>,
    /// Readiness deadline of each restarted component.
    pub ready_timeout: Duration,
    /// Time allowed to a remote host to answer an observation.
    pub host_timeout: Duration,
}

/// Settings of the updater.
#[derive(Clone)]
pub struct UpdaterConfig {
    /// The host it runs for.
    pub host: String,
    /// The agent's directory.
    pub dir: AgentDir,
    /// The base state directory, absolute (given to the watchdog as `--state-dir`).
    pub state_dir: PathBuf,
    /// The install root this agent runs from (`None`: not installed in one; releases
    /// are refused `InstallFailed`).
    pub root: Option<InstallRoot>,
    /// The keys releases must be signed with (`None`: none pinned, releases are
    /// refused `SignatureInvalid`).
    pub keys: Option<TrustedKeys>,
    /// What supervises this agent.
    pub supervisor: Supervisor,
    /// How long each assignment long poll may wait.
    pub wait: Duration,
    /// Report at least this often.
    pub report_every: Duration,
    /// Where log lines go.
    pub log: Log,
    /// The program that runs `agent update-watch` (`None`: the binary of the version
    /// the update starts from, else this one).
    pub watchdog_program: Option<PathBuf>,
    /// How component releases restart and observe this host's components (`None`:
    /// component releases are refused `InstallFailed`).
    pub components: Option<ComponentSettings>,
    /// Where the backup of the host's projects taken before a self-update goes, and
    /// how many are kept (`None`: none is taken).
    pub backups: Option<flotilla_exec::backup::BackupPolicy>,
}

/// The updater of one agent process.
pub struct Updater<S> {
    pub(crate) cfg: UpdaterConfig,
    pub(crate) source: Arc<S>,
    running: Running,
    /// A refusal that could not be written to `update.json` (no install root).
    refusal: Mutex<Option<UpdateRecord>>,
    /// Wakes the report loop.
    pub(crate) changed: tokio::sync::Notify,
    /// What this process did with each unskip request the authority still sends.
    pub(crate) unskipped: Mutex<std::collections::BTreeMap<u64, flotilla_release::UnskipOutcome>>,
    /// Component releases' refusals that no install root could keep, by release name.
    pub(crate) component_refusals: Mutex<std::collections::BTreeMap<String, UpdateRecord>>,
    /// The components' measured digests by release name, and when they were measured.
    pub(crate) component_measured: Mutex<
        Option<(
            std::time::Instant,
            std::collections::BTreeMap<String, String>,
        )>,
    >,
    /// The last line logged (not repeated).
    last_logged: Mutex<Option<String>>,
    /// When this process last started a watchdog.
    last_spawn: Mutex<Option<std::time::Instant>>,
}

/// The longest wait between tries of an agent's first report (a watchdog proving this
/// process waits for it; later reports back off up to 30 s).
pub const FIRST_REPORT_RETRY: Duration = Duration::from_secs(3);

/// How often a running agent looks for an unfinished update whose watchdog is gone.
pub const ORPHAN_CHECK: Duration = Duration::from_secs(5);

/// How long after starting a watchdog the agent waits before it counts it as gone
/// when the lock is free (it may not have taken it yet).
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(10);

impl<S: ReleaseSource> Updater<S> {
    /// The every-start duties that need no authority: measures this process, writes
    /// `running.json`, clears interrupted downloads, and starts a watchdog again for
    /// an update in progress whose watchdog is gone. Then [`Updater::run`].
    ///
    /// # Errors
    /// This process cannot be measured, `running.json` cannot be written.
    pub fn start(cfg: UpdaterConfig, source: Arc<S>) -> Result<Updater<S>, UpdateError> {
        let me = std::process::id();
        let id = flotilla_exec::identity::measure(me)
            .map_err(|e| UpdateError::Measure(e.to_string()))?
            .ok_or_else(|| UpdateError::Measure("no /proc entry for this process".into()))?;
        let running = Running {
            pid: me,
            start_time_ticks: id.start_time_ticks,
            exe_sha256: id.exe_sha256.clone(),
        };
        write_json(&cfg.dir.running_file(), &running)?;
        let u = Updater {
            cfg,
            source,
            running,
            refusal: Mutex::new(None),
            changed: tokio::sync::Notify::new(),
            unskipped: Mutex::new(std::collections::BTreeMap::new()),
            last_logged: Mutex::new(None),
            last_spawn: Mutex::new(None),
            component_refusals: Mutex::new(std::collections::BTreeMap::new()),
            component_measured: Mutex::new(None),
        };
        u.resume_orphan();
        if let Some(root) = &u.cfg.root {
            // Downloads of a process that died are of no use to anyone.
            if let Ok(entries) = std::fs::read_dir(root.downloads_dir()) {
                for e in entries.flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(u)
    }

    /// Starts a watchdog again for an unfinished update whose watchdog is gone (nobody
    /// holds `update.lock`), unless this process started one less than
    /// [`WATCHDOG_GRACE`] ago. At start, and every [`ORPHAN_CHECK`] after.
    fn resume_orphan(&self) {
        let Some(root) = &self.cfg.root else {
            return;
        };
        if self
            .last_spawn
            .lock()
            .expect("not poisoned")
            .is_some_and(|t| t.elapsed() < WATCHDOG_GRACE)
        {
            return;
        }
        match UpdateRecord::load(root) {
            Ok(Some(rec)) if rec.needs_watchdog() => match try_lock(root) {
                Ok(Some(lock)) => {
                    drop(lock);
                    (self.cfg.log)(&format!(
                        "update to {} {} stopped at {:?} without its watchdog: starting it again",
                        rec.name, rec.version, rec.step
                    ));
                    if let Err(e) = self.spawn_watchdog(&rec) {
                        self.log_once(&format!("update: the watchdog cannot be started: {e}"));
                    }
                }
                Ok(None) => {}
                Err(e) => self.log_once(&format!("update: {}: {e}", lock_path(root).display())),
            },
            Ok(_) => {}
            Err(e) => self.log_once(&format!("update: {}", chain(&e))),
        }
    }

    /// What this process measured of itself at start.
    pub fn running(&self) -> &Running {
        &self.running
    }

    pub(crate) fn log_once(&self, line: &str) {
        let mut last = self.last_logged.lock().expect("not poisoned");
        if last.as_deref() != Some(line) {
            (self.cfg.log)(line);
            *last = Some(line.to_string());
        }
    }

    /// The record reported now: `update.json`, else a refusal kept in memory.
    fn current_record(&self) -> Option<UpdateRecord> {
        let from_file = self
            .cfg
            .root
            .as_ref()
            .and_then(|r| UpdateRecord::load(r).ok().flatten());
        from_file.or_else(|| self.refusal.lock().expect("not poisoned").clone())
    }

    /// The `HostUpdate` this agent posts now.
    pub fn host_update(&self) -> HostUpdate {
        HostUpdate {
            host: self.cfg.host.clone(),
            platform: flotilla_exec::remote::this_platform(),
            running_sha256: Some(self.running.exe_sha256.clone()),
            pid: Some(self.running.pid),
            update: self.current_record().map(|r| r.report()),
            releases: self.component_digests(),
            updates: self.component_reports(),
            skipped: self.skip_entries(),
            unskipped: self.unskip_outcomes(),
            received_ms: now_ms(),
        }
    }

    /// Reports and applies assignments until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let me = Arc::new(self);
        let reporting = Arc::clone(&me).report_loop();
        let assigning = Arc::clone(&me).assignment_loop();
        tokio::select! {
            _ = shutdown => {}
            _ = reporting => {}
            _ = assigning => {}
        }
    }

    /// Posts the `HostUpdate` at start (then writes `reported.json`), whenever the
    /// record changes, and at least every `report_every`.
    async fn report_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let mut reported = false;
        let mut last: Option<(String, std::time::Instant)> = None;
        let mut orphan_check = std::time::Instant::now();
        loop {
            if orphan_check.elapsed() >= ORPHAN_CHECK {
                orphan_check = std::time::Instant::now();
                self.resume_orphan();
            }
            let update = self.host_update();
            let fingerprint =
                serde_json::to_string(&(&update.update, &update.skipped, &update.unskipped))
                    .unwrap_or_default();
            let due = match &last {
                None => true,
                Some((fp, at)) => *fp != fingerprint || at.elapsed() >= self.cfg.report_every,
            };
            if due {
                match self.source.report_update(&self.cfg.host, &update).await {
                    Ok(()) => {
                        backoff.reset();
                        last = Some((fingerprint, std::time::Instant::now()));
                        if !reported {
                            reported = true;
                            let r = Reported {
                                pid: self.running.pid,
                                start_time_ticks: self.running.start_time_ticks,
                                exe_sha256: self.running.exe_sha256.clone(),
                                at_ms: now_ms(),
                            };
                            if let Err(e) = write_json(&self.cfg.dir.reported_file(), &r) {
                                self.log_once(&format!("update: {}", chain(&e)));
                            }
                        }
                    }
                    Err(e) => {
                        self.log_once(&format!("release report: {}", e.0));
                        let mut delay = backoff.next_delay();
                        if !reported {
                            // A watchdog may be waiting for this first report.
                            delay = delay.min(FIRST_REPORT_RETRY);
                        }
                        tokio::time::sleep(jittered(delay, 4)).await;
                        continue;
                    }
                }
            }
            // The watchdog changes update.json without telling: look twice a second.
            let _ = tokio::time::timeout(Duration::from_millis(500), self.changed.notified()).await;
        }
    }

    async fn assignment_loop(self: Arc<Self>) {
        // Component updates a killed agent left unfinished end first (finished or
        // rolled back), whatever is assigned now.
        if self.resume_components().await {
            self.changed.notify_one();
        }
        let mut index = 0u64;
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let mut pending: Option<Assignment> = None;
        loop {
            let answer = self
                .source
                .release_assignment(&self.cfg.host, index, jittered(self.cfg.wait, 16))
                .await;
            match answer {
                Ok(a) => {
                    backoff.reset();
                    index = a.index;
                    pending = a.assignment;
                    if self.unskip(&a.unskip) {
                        self.changed.notify_one();
                    }
                }
                Err(e) => {
                    self.log_once(&format!("release assignment: {}", e.0));
                    tokio::time::sleep(jittered(backoff.next_delay(), 4)).await;
                }
            }
            if let Some(a) = &pending {
                if self.consider(a).await {
                    self.changed.notify_one();
                }
            }
        }
    }

    fn record_refusal(&self, a: &Assignment, mut rec: UpdateRecord) {
        (self.cfg.log)(&format!(
            "release {} {} (rollout {}) refused: {}: {}",
            a.name,
            a.version,
            a.rollout,
            rec.reason.map(|r| r.as_str()).unwrap_or("?"),
            rec.detail
        ));
        match &self.cfg.root {
            Some(root) => {
                if let Err(e) = rec.save(root) {
                    self.log_once(&format!("update: {}", chain(&e)));
                    *self.refusal.lock().expect("not poisoned") = Some(rec);
                }
            }
            None => *self.refusal.lock().expect("not poisoned") = Some(rec),
        }
    }

    /// Takes assignment `a` as far as this process goes (see the module docs); whether
    /// the record changed.
    pub async fn consider(&self, a: &Assignment) -> bool {
        if a.name != AGENT_RELEASE {
            // A component's release: its own install roots, its own path.
            return self.consider_component(a).await;
        }
        let existing = self.current_record();
        if let Some(rec) = &existing {
            if rec.is_for(a) && rec.step != Step::Downloading {
                // Handled already (finished, or a watchdog owns it): a replay changes
                // nothing.
                return false;
            }
            if rec.needs_watchdog() {
                self.log_once(&format!(
                    "release {} {} waits: the update to {} {} is still in progress",
                    a.name, a.version, rec.name, rec.version
                ));
                return false;
            }
        }
        match self.apply(a).await {
            Ok(()) => true,
            Err(rec) => {
                self.record_refusal(a, *rec);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests;
