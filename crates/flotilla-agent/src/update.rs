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
//!    URL), then size and SHA-256 checked, then staged as `versions/<version>-<sha12>/`.
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

use crate::authority::{jittered, one_line, Backoff, ClientError};
use crate::record::write_json;
pub use crate::record::{
    chain, lock_path, now_ms, read_json, try_lock, Attempt, OldAgent, Reported, Running, SeenPid,
    Side, Step, Trial, TrialStart, UpdateError, UpdateRecord, AGENT_RELEASE, BINARY, KEEP_OLD,
    MAX_TRIAL_BOOTS, UPDATE_FORMAT,
};
use crate::state::AgentDir;
use crate::supervisor::Supervisor;
use crate::Log;
use flotilla_api::wire::{Assignment, ReleaseAssignment};
use flotilla_release::{
    Acceptance, HostUpdate, InstallRoot, Reason, Refusal, TrustedKeys, UpdateState, VersionDir,
};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The calls the updater makes to its authority (what `flotilla_api::Client`
/// provides).
pub trait ReleaseSource: Send + Sync + 'static {
    /// `GET /v1/hosts/{host}/release?index={index}&wait={wait}`: the host's release
    /// assignment, long-polled.
    ///
    /// # Errors
    /// [`ClientError`]: unreachable, refused, unreadable answer.
    fn release_assignment(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<ReleaseAssignment, ClientError>> + Send;

    /// `POST /v1/hosts/{host}/release`: what this agent measured and where its update
    /// stands.
    ///
    /// # Errors
    /// [`ClientError`].
    fn report_update(
        &self,
        host: &str,
        update: &HostUpdate,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;

    /// `GET /v1/blobs/{sha256}` into `dest` (unverified), reading no further once
    /// more than `limit` bytes arrived and writing nothing past it; the bytes
    /// received (more than `limit`: the blob is too long).
    ///
    /// # Errors
    /// [`ClientError`].
    fn download_blob(
        &self,
        sha256: &str,
        dest: &Path,
        limit: u64,
    ) -> impl Future<Output = Result<u64, ClientError>> + Send;
}

impl ReleaseSource for flotilla_api::Client {
    async fn release_assignment(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Result<ReleaseAssignment, ClientError> {
        flotilla_api::Client::release_assignment(self, host, index, wait)
            .await
            .map_err(|e| one_line(&e))
    }

    async fn report_update(&self, host: &str, update: &HostUpdate) -> Result<(), ClientError> {
        flotilla_api::Client::report_update(self, host, update)
            .await
            .map_err(|e| one_line(&e))
    }

    async fn download_blob(
        &self,
        sha256: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<u64, ClientError> {
        flotilla_api::Client::download_blob(self, sha256, dest, limit)
            .await
            .map_err(|e| one_line(&e))
    }
}

/// No authority (`agent run --inventory`): nothing is ever assigned, reports are
/// accepted at once (so `reported.json` is written as soon as the agent started), no
/// blob can be fetched.
pub struct NoAuthority;

impl ReleaseSource for NoAuthority {
    async fn release_assignment(
        &self,
        _host: &str,
        _index: u64,
        _wait: Duration,
    ) -> Result<ReleaseAssignment, ClientError> {
        std::future::pending().await
    }

    async fn report_update(&self, _host: &str, _update: &HostUpdate) -> Result<(), ClientError> {
        Ok(())
    }

    async fn download_blob(
        &self,
        _sha256: &str,
        _dest: &Path,
        _limit: u64,
    ) -> Result<u64, ClientError> {
        Err(ClientError("no authority to fetch a blob from".into()))
    }
}

/// Reads the trusted public keys: `files` when given (1 or 2), else every `*.pub` in
/// `<state>/agent/trusted-keys/` (by name). `Ok(None)` when none is pinned.
///
/// # Errors
/// A file that cannot be read, more than two keys, a text that is not a minisign public
/// key: one line.
pub fn load_trusted_keys(files: &[PathBuf], dir: &AgentDir) -> Result<Option<TrustedKeys>, String> {
    let paths: Vec<PathBuf> = if files.is_empty() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir.trusted_keys_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pub"))
            .collect();
        found.sort();
        found
    } else {
        files.to_vec()
    };
    if paths.is_empty() {
        return Ok(None);
    }
    let texts = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect::<Result<Vec<String>, String>>()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    TrustedKeys::from_texts(&refs).map(Some).map_err(|e| {
        format!(
            "{e} ({})",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// A release assignment that passed every check made before downloading.
pub(crate) struct Verified {
    /// The minisign key id that signed it.
    pub(crate) key_id: String,
    /// The signed manifest.
    pub(crate) manifest: flotilla_release::Manifest,
    /// Its artifact for this platform.
    pub(crate) artifact: flotilla_release::Artifact,
}

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

    /// Verifies, downloads, stages and hands over to the watchdog; the refusal record
    /// otherwise.
    async fn apply(&self, a: &Assignment) -> Result<(), Box<UpdateRecord>> {
        let Verified {
            key_id,
            manifest,
            artifact,
        } = self.verify_assignment(a, &self.cfg.dir.acceptance_file())?;
        let with_manifest = |r: Refusal| {
            let mut rec = UpdateRecord::refused(a, &r);
            rec.serial = manifest.serial;
            rec.key_id = key_id.clone();
            Box::new(rec)
        };
        let sha = artifact.sha256.clone();
        let with_sha = |r: Refusal| {
            let mut rec = with_manifest(r);
            rec.sha256 = sha.clone();
            rec
        };
        let mut rec = UpdateRecord::downloading(a, &manifest, &key_id, &sha);
        rec.supervisor = self.cfg.supervisor.to_string();
        // 2. Already running it: nothing to restart.
        if self.running.exe_sha256 == format!("sha256:{sha}") {
            rec.state = UpdateState::Updated;
            rec.step = Step::Done;
            rec.evidence.push(format!(
                "pid {} already runs sha256:{sha} (measured): nothing to restart",
                self.running.pid
            ));
            (self.cfg.log)(&format!(
                "release {} {}: this agent already runs it",
                a.name, a.version
            ));
            match &self.cfg.root {
                Some(root) => {
                    if let Err(e) = rec.save(root) {
                        self.log_once(&format!("update: {}", chain(&e)));
                    }
                }
                None => *self.refusal.lock().expect("not poisoned") = Some(rec),
            }
            return Ok(());
        }
        let Some(root) = &self.cfg.root else {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                "this agent does not run from an install root (flotilla agent install --root DIR, or agent run --install-root DIR)",
            )));
        };
        match root.skipped(&sha) {
            Ok(Some(skip)) => {
                return Err(with_sha(Refusal::new(
                    Reason::Skipped,
                    format!(
                        "{} {} (sha256:{sha}) was rolled back here ({}): never applied again",
                        skip.name, skip.version, skip.reason
                    ),
                )))
            }
            Ok(None) => {}
            Err(e) => {
                return Err(with_sha(Refusal::new(
                    Reason::InstallFailed,
                    format!("skip list: {e}"),
                )))
            }
        }
        let Some(from) = self.running_side(root) else {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                format!(
                    "this agent's binary is not one of {}'s versions: it cannot be rolled back to",
                    root.root().display()
                ),
            )));
        };
        rec.from = Some(from);
        if let Err(e) = rec.save(root) {
            return Err(with_sha(Refusal::new(Reason::InstallFailed, chain(&e))));
        }
        self.changed.notify_one();
        (self.cfg.log)(&format!(
            "release {} {} (rollout {}, serial {}, signed by {key_id}): downloading sha256:{sha}",
            a.name, a.version, a.rollout, manifest.serial
        ));
        // 3. Download, verify, stage.
        let tmp = self.download(root, &artifact).await.map_err(&with_sha)?;
        let staged = root.stage(&a.version, &sha, &tmp);
        let _ = std::fs::remove_file(&tmp);
        let staged = staged
            .map_err(|e| with_sha(Refusal::new(Reason::InstallFailed, format!("staging: {e}"))))?;
        rec.to = Some(Side::of(&staged, &sha));
        rec.agent = Some(self.old_agent());
        rec.state = UpdateState::Staged;
        rec.step = Step::Staged;
        rec.attempt(format!("staged {}", staged.dir.display()));
        rec.save(root)
            .map_err(|e| with_sha(Refusal::new(Reason::InstallFailed, chain(&e))))?;
        // 4. The watchdog takes over.
        if let Err(e) = self.spawn_watchdog(&rec) {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                format!("the update watchdog cannot be started: {e}"),
            )));
        }
        (self.cfg.log)(&format!(
            "release {} {} staged in {}; the watchdog runs it on trial through {}",
            a.name,
            a.version,
            staged.dir.display(),
            self.cfg.supervisor
        ));
        Ok(())
    }

    /// The checks before anything is downloaded, in order: the signature FIRST (against
    /// the pinned keys; the signed manifest must be the assignment's release), expiry,
    /// serial (not lower than the highest accepted from that key, kept in
    /// `acceptance_path`, updated here) and this platform's artifact. The refusal
    /// record otherwise.
    pub(crate) fn verify_assignment(
        &self,
        a: &Assignment,
        acceptance_path: &Path,
    ) -> Result<Verified, Box<UpdateRecord>> {
        let refuse = |r: Refusal| Box::new(UpdateRecord::refused(a, &r));
        let Some(keys) = &self.cfg.keys else {
            return Err(refuse(Refusal::new(
                Reason::SignatureInvalid,
                format!(
                    "no trusted key is pinned (agent run --trusted-key FILE, or {}/*.pub)",
                    self.cfg.dir.trusted_keys_dir().display()
                ),
            )));
        };
        let (key_id, manifest) = keys
            .verify(a.manifest.as_bytes(), &a.signature)
            .map_err(&refuse)?;
        if manifest.name != a.name || manifest.version != a.version {
            return Err(refuse(Refusal::new(
                Reason::SignatureInvalid,
                format!(
                    "the assignment names {} {} but the signed manifest is {} {}",
                    a.name, a.version, manifest.name, manifest.version
                ),
            )));
        }
        let mut acceptance: Acceptance = read_json(acceptance_path).unwrap_or_default();
        let (os, arch) = flotilla_release::Platform::current();
        let artifact = match acceptance.check(&key_id, &manifest, os, arch, now_ms()) {
            Ok(artifact) => artifact.clone(),
            Err(r) => {
                let mut rec = UpdateRecord::refused(a, &r);
                rec.serial = manifest.serial;
                rec.key_id = key_id.clone();
                return Err(Box::new(rec));
            }
        };
        acceptance.accept_manifest(&key_id, &manifest);
        if let Err(e) = write_json(acceptance_path, &acceptance) {
            self.log_once(&format!("update: {}", chain(&e)));
        }
        Ok(Verified {
            key_id,
            manifest,
            artifact,
        })
    }

    /// The version directory this process runs from, with its measured digest.
    fn running_side(&self, root: &InstallRoot) -> Option<Side> {
        let exe = flotilla_exec::sys::self_exe()?;
        let exe = flotilla_exec::identity::strip_deleted(&exe).to_path_buf();
        let sha = self.running.exe_sha256.strip_prefix("sha256:")?.to_string();
        for v in [root.current(), root.previous()].into_iter().flatten() {
            if v.binary.canonicalize().ok().as_deref() == Some(exe.as_path()) {
                return Some(Side::of(&v, &sha));
            }
        }
        let versions = root.root().join("versions").canonicalize().ok()?;
        let dir = exe.parent()?;
        if dir.parent()? != versions || exe.file_name()? != root.binary_name() {
            return None;
        }
        let name = dir.file_name()?.to_string_lossy().into_owned();
        let (version, sha12) = name.rsplit_once('-')?;
        Some(Side::of(
            &VersionDir {
                version: version.to_string(),
                sha12: sha12.to_string(),
                dir: dir.to_path_buf(),
                binary: exe.clone(),
            },
            &sha,
        ))
    }

    fn old_agent(&self) -> OldAgent {
        let r = &self.running;
        OldAgent::of(r.pid, r.start_time_ticks, r.exe_sha256.clone()).unwrap_or_else(|| OldAgent {
            pid: r.pid,
            start_time_ticks: r.start_time_ticks,
            exe_sha256: r.exe_sha256.clone(),
            argv: std::env::args().collect(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        })
    }

    /// Downloads `artifact` into `<root>/downloads/` and checks size and digest; the
    /// temporary file. Tried three times (1 s, 2 s apart) when the transfer fails; a
    /// file that arrives whole with the wrong digest or size is not tried again.
    pub(crate) async fn download(
        &self,
        root: &InstallRoot,
        artifact: &flotilla_release::Artifact,
    ) -> Result<PathBuf, Refusal> {
        let mut delay = Duration::from_secs(1);
        let mut last = String::new();
        for attempt in 1..=3 {
            let (file, tmp) = root.temp_download().map_err(|e| {
                Refusal::new(Reason::InstallFailed, format!("downloads directory: {e}"))
            })?;
            // Room for the manifest's size first: a download that cannot fit is
            // refused before a byte arrives, not when the disk is full.
            if let Ok(st) = nix::sys::statvfs::fstatvfs(&file) {
                // Their widths differ between platforms (u32 on macOS).
                #[allow(clippy::unnecessary_cast)]
                let free = st.blocks_available() as u64 * st.fragment_size() as u64;
                if free < artifact.size {
                    drop(file);
                    let _ = std::fs::remove_file(&tmp);
                    return Err(Refusal::new(
                        Reason::InstallFailed,
                        format!(
                            "{} bytes free where downloads go ({}), the artifact is {} bytes",
                            free,
                            tmp.parent()
                                .map(|p| p.display().to_string())
                                .unwrap_or_default(),
                            artifact.size
                        ),
                    ));
                }
            }
            drop(file);
            let fetched = match (&artifact.blob, &artifact.url) {
                (Some(blob), _) => match self.source.download_blob(blob, &tmp, artifact.size).await
                {
                    Ok(n) if n > artifact.size => Err(Refusal::new(
                        Reason::SizeMismatch,
                        format!(
                            "blob {blob} is longer than the manifest's {} bytes (reading stopped)",
                            artifact.size
                        ),
                    )),
                    Ok(n) => Ok(n),
                    Err(e) => Err(Refusal::new(Reason::DownloadFailed, e.0)),
                },
                (None, Some(url)) => fetch_url(url, &tmp, artifact.size).await,
                (None, None) => Err(Refusal::new(
                    Reason::DownloadFailed,
                    "the artifact names neither a blob nor a URL",
                )),
            };
            match fetched {
                Ok(_) => {
                    let verified = {
                        let (tmp, sha, size) =
                            (tmp.clone(), artifact.sha256.clone(), artifact.size);
                        tokio::task::spawn_blocking(move || {
                            flotilla_release::artifact::verify_file(&tmp, &sha, size)
                        })
                        .await
                        .unwrap_or_else(|e| {
                            Err(Refusal::new(Reason::DownloadFailed, e.to_string()))
                        })
                    };
                    return match verified {
                        Ok(_) => Ok(tmp),
                        Err(r) => {
                            let _ = std::fs::remove_file(&tmp);
                            Err(r)
                        }
                    };
                }
                Err(r) if r.reason == Reason::SizeMismatch => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(r);
                }
                Err(r) => {
                    let _ = std::fs::remove_file(&tmp);
                    last = r.detail;
                    if attempt < 3 {
                        self.log_once(&format!("download attempt {attempt} of 3 failed: {last}"));
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                }
            }
        }
        Err(Refusal::new(
            Reason::DownloadFailed,
            format!("3 attempts failed, the last: {last}"),
        ))
    }

    /// Starts the watchdog for `rec` ([`spawn_watchdog`]) and notes when.
    fn spawn_watchdog(&self, rec: &UpdateRecord) -> std::io::Result<()> {
        let root = self
            .cfg
            .root
            .as_ref()
            .ok_or_else(|| std::io::Error::other("no install root"))?;
        spawn_watchdog(
            root,
            &self.cfg.state_dir,
            &self.cfg.dir,
            rec,
            self.cfg.watchdog_program.as_deref(),
            &self.cfg.supervisor,
        )?;
        *self.last_spawn.lock().expect("not poisoned") = Some(std::time::Instant::now());
        Ok(())
    }
}

/// Starts the watchdog (`flotilla agent update-watch`) for update `rec` of install root
/// `root`, detached so that it outlives the caller: from `program` when given, else
/// from the binary of the version the update started from (else this one); through the
/// record's supervisor (else `fallback`): a transient unit under systemd, a session of
/// its own elsewhere, its output appended to `<state>/agent/update-watch.log`.
/// `state_dir` is the base state directory, passed on as `--state-dir`.
///
/// # Errors
/// The program cannot be found or started; `systemd-run` failed.
pub fn spawn_watchdog(
    root: &InstallRoot,
    state_dir: &Path,
    dir: &AgentDir,
    rec: &UpdateRecord,
    program: Option<&Path>,
    fallback: &Supervisor,
) -> std::io::Result<()> {
    let program = match program {
        Some(p) => p.to_path_buf(),
        None => rec
            .from
            .as_ref()
            .map(|f| f.binary.clone())
            .filter(|b| b.is_file())
            .map_or_else(std::env::current_exe, Ok)?,
    };
    let supervisor = Supervisor::parse(&rec.supervisor)
        .ok()
        .flatten()
        .unwrap_or_else(|| fallback.clone());
    let args: Vec<std::ffi::OsString> = vec![
        "agent".into(),
        "update-watch".into(),
        "--root".into(),
        root.root().as_os_str().to_owned(),
        "--state-dir".into(),
        state_dir.as_os_str().to_owned(),
        "--supervisor".into(),
        supervisor.to_string().into(),
    ];
    let tag = format!("{}-{}", rec.rollout, now_ms());
    match supervisor.watchdog_unit_argv(&program, &args, &tag) {
        Some(argv) => {
            // systemd-run returns once the transient unit started.
            flotilla_exec::detached::run_verb(&argv).map_err(std::io::Error::other)?;
        }
        None => {
            let argv: Vec<std::ffi::OsString> = std::iter::once(program.clone().into_os_string())
                .chain(args)
                .collect();
            let mut child = flotilla_exec::detached::spawn_detached(
                &program,
                &argv,
                None,
                &dir.watch_log_file(),
            )?;
            // Reaped when it ends (while this process lives); it never waits on us.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
    }
    Ok(())
}

/// Fetches `url` into `dest`, refusing as soon as more than `size` bytes arrive. HTTPS
/// is verified against the system's roots (the digest is checked after anyway).
async fn fetch_url(url: &str, dest: &Path, size: u64) -> Result<u64, Refusal> {
    use std::io::Write;
    let failed = |m: String| Refusal::new(Reason::DownloadFailed, format!("{url}: {m}"));
    let tls = flotilla_api::tls::native_roots_config().map_err(|e| failed(e.to_string()))?;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut resp = http
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| failed(chain(&e)))?;
    let mut file = std::fs::File::create(dest).map_err(|e| failed(e.to_string()))?;
    let mut written = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| failed(chain(&e)))? {
        written += chunk.len() as u64;
        if written > size {
            return Err(Refusal::new(
                Reason::SizeMismatch,
                format!("{url} sent more than the manifest's {size} bytes"),
            ));
        }
        file.write_all(&chunk).map_err(|e| failed(e.to_string()))?;
    }
    file.sync_all().map_err(|e| failed(e.to_string()))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_release::{Artifact, Manifest, Platform};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The authority, as far as the updater sees it: blobs by digest, reports kept.
    #[derive(Default)]
    struct Fake {
        blobs: Mutex<HashMap<String, Vec<u8>>>,
        downloads: AtomicUsize,
        reports: Mutex<Vec<HostUpdate>>,
    }

    impl ReleaseSource for Fake {
        async fn release_assignment(
            &self,
            _host: &str,
            _index: u64,
            _wait: Duration,
        ) -> Result<ReleaseAssignment, ClientError> {
            std::future::pending().await
        }

        async fn report_update(&self, _host: &str, u: &HostUpdate) -> Result<(), ClientError> {
            self.reports.lock().unwrap().push(u.clone());
            Ok(())
        }

        async fn download_blob(
            &self,
            sha256: &str,
            dest: &Path,
            limit: u64,
        ) -> Result<u64, ClientError> {
            self.downloads.fetch_add(1, Ordering::SeqCst);
            let bytes = self
                .blobs
                .lock()
                .unwrap()
                .get(sha256)
                .cloned()
                .ok_or_else(|| ClientError(format!("404: no blob {sha256}")))?;
            // As the real client: nothing past the limit is written.
            let kept = bytes.len().min(limit as usize);
            std::fs::write(dest, &bytes[..kept]).unwrap();
            Ok(bytes.len() as u64)
        }
    }

    const NEW: &[u8] = b"#!/bin/sh\necho the new build\n";

    fn sha(bytes: &[u8]) -> String {
        use sha2::Digest;
        flotilla_release::artifact::hex(&sha2::Sha256::digest(bytes))
    }

    /// A host whose install root's current version is this test binary (a symlink to
    /// it), trusting one key; a second key it does not trust.
    struct Fixture {
        t: tempfile::TempDir,
        root: InstallRoot,
        dir: AgentDir,
        secret: String,
        foreign_secret: String,
        keys: TrustedKeys,
        fake: Arc<Fake>,
    }

    impl Fixture {
        fn new() -> Fixture {
            let t = tempfile::tempdir().unwrap();
            let root = InstallRoot::new(t.path().join("root"), BINARY);
            let me = flotilla_exec::sys::self_exe().unwrap();
            let v = root.version_dir("0.1.0", &"a".repeat(64)).unwrap();
            std::fs::create_dir_all(&v.dir).unwrap();
            std::os::unix::fs::symlink(&me, &v.binary).unwrap();
            std::os::unix::fs::symlink(
                format!("versions/{}", v.name()),
                root.root().join("current"),
            )
            .unwrap();
            let keys_dir = t.path().join("keys");
            std::fs::create_dir_all(&keys_dir).unwrap();
            let k = flotilla_release::keygen(&keys_dir, "ours", false).unwrap();
            let f = flotilla_release::keygen(&keys_dir, "theirs", false).unwrap();
            let keys =
                TrustedKeys::from_texts(&[&std::fs::read_to_string(&k.public_path).unwrap()])
                    .unwrap();
            Fixture {
                dir: AgentDir::new(&t.path().join("state")),
                root,
                secret: std::fs::read_to_string(&k.secret_path).unwrap(),
                foreign_secret: std::fs::read_to_string(&f.secret_path).unwrap(),
                keys,
                fake: Arc::new(Fake::default()),
                t,
            }
        }

        fn updater(&self, keys: bool) -> Updater<Fake> {
            let cfg = UpdaterConfig {
                host: "h".into(),
                dir: self.dir.clone(),
                state_dir: self.t.path().join("state"),
                root: Some(self.root.clone()),
                keys: keys.then(|| self.keys.clone()),
                supervisor: Supervisor::None,
                wait: Duration::from_secs(30),
                report_every: Duration::from_secs(30),
                log: Arc::new(|_| {}),
                components: None,
                watchdog_program: Some("/bin/true".into()),
            };
            Updater::start(cfg, Arc::clone(&self.fake)).unwrap()
        }

        fn manifest(&self, version: &str, serial: u64, bytes: &[u8]) -> Manifest {
            let (os, arch) = Platform::current();
            self.fake
                .blobs
                .lock()
                .unwrap()
                .insert(sha(bytes), bytes.to_vec());
            Manifest {
                name: AGENT_RELEASE.into(),
                version: version.into(),
                serial,
                expires: "2099-01-01T00:00:00Z".into(),
                artifacts: vec![Artifact {
                    os: os.into(),
                    arch: arch.into(),
                    url: None,
                    blob: Some(sha(bytes)),
                    sha256: sha(bytes),
                    size: bytes.len() as u64,
                }],
            }
        }

        fn assignment(&self, m: &Manifest, rollout: u64, secret: Option<&str>) -> Assignment {
            let bytes = m.to_bytes();
            Assignment {
                rollout,
                name: m.name.clone(),
                version: m.version.clone(),
                manifest: String::from_utf8(bytes.clone()).unwrap(),
                signature: secret
                    .map(|s| flotilla_release::sign(s, &bytes, "test").unwrap())
                    .unwrap_or_default(),
                min_healthy_ms: 1000,
                timeout_ms: 10_000,
            }
        }

        fn record(&self) -> UpdateRecord {
            UpdateRecord::load(&self.root)
                .unwrap()
                .expect("update.json")
        }

        fn staged_versions(&self) -> usize {
            self.root.versions().unwrap().len()
        }
    }

    async fn refused(f: &Fixture, u: &Updater<Fake>, a: &Assignment, reason: Reason) {
        assert!(u.consider(a).await);
        let rec = f.record();
        assert_eq!(rec.state, UpdateState::Refused, "{rec:#?}");
        assert_eq!(rec.reason, Some(reason), "{rec:#?}");
        assert_eq!(f.staged_versions(), 1, "nothing staged");
        assert!(std::fs::read_dir(f.root.downloads_dir())
            .map(|d| d.count() == 0)
            .unwrap_or(true));
    }

    #[tokio::test]
    async fn the_signature_is_checked_before_anything_is_downloaded() {
        let f = Fixture::new();
        let u = f.updater(true);
        let m = f.manifest("0.2.0", 5, NEW);
        refused(&f, &u, &f.assignment(&m, 1, None), Reason::SignatureInvalid).await;
        assert!(
            f.record().detail.contains("unsigned"),
            "{}",
            f.record().detail
        );
        refused(
            &f,
            &u,
            &f.assignment(&m, 2, Some(&f.foreign_secret)),
            Reason::SignatureInvalid,
        )
        .await;
        assert!(
            f.record().detail.contains("signed by key"),
            "{}",
            f.record().detail
        );
        // A manifest edited after signing.
        let mut a = f.assignment(&m, 3, Some(&f.secret));
        a.manifest = a.manifest.replace("0.2.0", "0.2.1");
        a.version = "0.2.1".into();
        refused(&f, &u, &a, Reason::SignatureInvalid).await;
        // No key pinned at all.
        let none = f.updater(false);
        refused(
            &f,
            &none,
            &f.assignment(&m, 4, Some(&f.secret)),
            Reason::SignatureInvalid,
        )
        .await;
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn expired_rolled_back_serials_and_other_platforms_are_refused() {
        let f = Fixture::new();
        let u = f.updater(true);
        let mut m = f.manifest("0.2.0", 5, NEW);
        m.expires = "2001-01-01T00:00:00Z".into();
        refused(
            &f,
            &u,
            &f.assignment(&m, 1, Some(&f.secret)),
            Reason::Expired,
        )
        .await;
        let mut m = f.manifest("0.2.0", 5, NEW);
        m.artifacts[0].os = "plan9".into();
        refused(
            &f,
            &u,
            &f.assignment(&m, 2, Some(&f.secret)),
            Reason::NoMatchingArtifact,
        )
        .await;
        // A higher serial accepted before from this key: a lower one is a rollback attack.
        let mut acc = Acceptance::default();
        acc.accept(&f.keys.key_ids()[0], 9);
        write_json(&f.dir.acceptance_file(), &acc).unwrap();
        let m = f.manifest("0.2.0", 5, NEW);
        refused(
            &f,
            &u,
            &f.assignment(&m, 3, Some(&f.secret)),
            Reason::SerialRollback,
        )
        .await;
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_corrupt_or_wrongly_sized_artifact_is_refused_after_download() {
        let f = Fixture::new();
        let u = f.updater(true);
        let m = f.manifest("0.2.0", 5, NEW);
        // The authority serves other bytes under the digest.
        f.fake
            .blobs
            .lock()
            .unwrap()
            .insert(sha(NEW), b"#!/bin/sh\necho evil!!!!!!!!!\n".to_vec());
        refused(
            &f,
            &u,
            &f.assignment(&m, 1, Some(&f.secret)),
            Reason::DigestMismatch,
        )
        .await;
        let mut m = f.manifest("0.2.1", 6, NEW);
        m.artifacts[0].size += 1;
        refused(
            &f,
            &u,
            &f.assignment(&m, 2, Some(&f.secret)),
            Reason::SizeMismatch,
        )
        .await;
    }

    #[tokio::test]
    async fn a_signed_release_is_staged_and_handed_to_the_watchdog_once() {
        let f = Fixture::new();
        let u = f.updater(true);
        let m = f.manifest("0.2.0", 5, NEW);
        let a = f.assignment(&m, 1, Some(&f.secret));
        assert!(u.consider(&a).await);
        let rec = f.record();
        assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
        assert_eq!(rec.sha256, sha(NEW));
        assert_eq!(rec.key_id, f.keys.key_ids()[0]);
        let to = rec.to.clone().unwrap();
        assert_eq!(std::fs::read(&to.binary).unwrap(), NEW);
        let from = rec.from.clone().unwrap();
        assert_eq!(from.version, "0.1.0");
        assert_eq!(from.measured(), u.running().exe_sha256);
        let agent = rec.agent.clone().unwrap();
        assert_eq!(agent.pid, std::process::id());
        assert!(!agent.argv.is_empty());
        // The serial is remembered for this key.
        let acc: Acceptance = read_json(&f.dir.acceptance_file()).unwrap();
        assert_eq!(acc.highest[&f.keys.key_ids()[0]], 5);
        // A replay of the same assignment changes nothing.
        assert!(!u.consider(&a).await);
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 1);
        // Another release waits while this one is in progress.
        let m2 = f.manifest("0.3.0", 6, b"#!/bin/sh\n");
        assert!(!u.consider(&f.assignment(&m2, 2, Some(&f.secret))).await);
        assert_eq!(f.record().version, "0.2.0");
    }

    /// Serves `body` to every request on a loopback port; the URL.
    async fn serve(body: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/artifact", l.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = c.write_all(head.as_bytes()).await;
                    let _ = c.write_all(&body).await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn an_artifact_named_by_url_is_fetched_and_checked() {
        let f = Fixture::new();
        let u = f.updater(true);
        let mut m = f.manifest("0.2.0", 5, NEW);
        m.artifacts[0].blob = None;
        m.artifacts[0].url = Some(serve(NEW.to_vec()).await);
        assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
        let rec = f.record();
        assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
        assert_eq!(std::fs::read(&rec.to.unwrap().binary).unwrap(), NEW);
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_url_that_sends_more_than_the_manifest_says_is_refused() {
        let f = Fixture::new();
        let u = f.updater(true);
        let mut m = f.manifest("0.2.0", 5, NEW);
        m.artifacts[0].blob = None;
        let mut more = NEW.to_vec();
        more.extend_from_slice(&[b'x'; 100_000]);
        m.artifacts[0].url = Some(serve(more).await);
        refused(
            &f,
            &u,
            &f.assignment(&m, 1, Some(&f.secret)),
            Reason::SizeMismatch,
        )
        .await;
    }

    #[tokio::test]
    async fn a_skipped_version_is_never_applied_again() {
        let f = Fixture::new();
        let u = f.updater(true);
        f.root
            .add_skip(flotilla_release::SkipEntry {
                name: AGENT_RELEASE.into(),
                version: "0.2.0".into(),
                sha256: sha(NEW),
                reason: Reason::CrashLoop,
                at_ms: 1,
            })
            .unwrap();
        let m = f.manifest("0.2.0", 5, NEW);
        refused(
            &f,
            &u,
            &f.assignment(&m, 7, Some(&f.secret)),
            Reason::Skipped,
        )
        .await;
        assert!(f.record().detail.contains("CrashLoop"));
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_release_already_running_is_updated_without_a_restart() {
        let f = Fixture::new();
        let u = f.updater(true);
        let me = std::fs::read(flotilla_exec::sys::self_exe().unwrap()).unwrap();
        let m = f.manifest("0.1.0", 5, &me);
        assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
        let rec = f.record();
        assert_eq!(rec.state, UpdateState::Updated);
        assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn every_start_writes_running_then_reported_once_the_report_is_accepted() {
        let f = Fixture::new();
        let u = f.updater(true);
        let running: Running = read_json(&f.dir.running_file()).unwrap();
        assert_eq!(running.pid, std::process::id());
        assert_eq!(&running, u.running());
        assert!(read_json::<Reported>(&f.dir.reported_file()).is_none());
        let reported = f.dir.reported_file();
        let done = async {
            while read_json::<Reported>(&reported).is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), u.run(done))
            .await
            .unwrap();
        let r: Reported = read_json(&reported).unwrap();
        assert_eq!(r.pid, running.pid);
        assert_eq!(r.exe_sha256, running.exe_sha256);
        let reports = f.fake.reports.lock().unwrap();
        assert_eq!(
            reports[0].running_sha256.as_ref(),
            Some(&running.exe_sha256)
        );
        assert_eq!(reports[0].pid, Some(running.pid));
    }
}
