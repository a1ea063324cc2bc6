//! The self-update watchdog, `flotilla agent update-watch` (hidden): a process of its
//! own, started detached by the updater ([`crate::update`]), that takes a staged update
//! to its end and proves it, or rolls it back and proves that.
//!
//! It holds `<root>/update.lock` for as long as it works, and keeps every step in
//! `<root>/update.json` before taking the next, so a watchdog started again (by an
//! agent that finds the update unfinished and the lock free, or by the launcher at a
//! trial start) goes on from where the last one was. `current` names the last version
//! proven on this host until the new one is proven: whatever the supervisor starts
//! after a crash at any step is the known-good version, which reads the record first
//! ([`crate::launch`]). The steps ([`Step`]):
//!
//! 1. `Staged` → arm the trial: `<root>/trial.json` reset, the record `Armed`. From
//!    here every start of the agent through `<root>/current/flotilla` `exec`s the new
//!    version, at most [`MAX_TRIAL_BOOTS`] times in all.
//! 2. `Armed` → restart through the supervisor ([`Supervisor::restart`]). With no
//!    supervisor the watchdog does it itself: SIGTERM to the old agent (after checking
//!    its pid still names the process recorded: identity before signal; SIGKILL after
//!    10 s), then `<root>/current/<binary>` started detached with the old agent's argv
//!    and working directory, its output appended to `<state>/agent/agent.log` (the
//!    launcher in it `exec`s the new version). Not a re-exec of the old process: `exec`
//!    keeps the pid, and a new pid is the first thing the proof asks for.
//! 3. `Proving` → the proof, polled every 200 ms: the supervisor's main process (systemd
//!    `MainPID`, launchd `pid`; the watchdog's own child with no supervisor) is a NEW
//!    process (pid and start time differ from the old agent's) whose MEASURED executable
//!    digest (`/proc/<pid>/exe` hashed) equals the artifact's, the same process over 5
//!    polls, and it wrote `<state>/agent/reported.json` (after the authority accepted its
//!    report), all within the update's timeout from the restart. Failures:
//!    - the old digest in a new process once the trial starts are used up is
//!      `CrashLoop` (the launcher ran the known-good version after the new one failed);
//!    - the old digest still runs otherwise — the old process itself at the deadline,
//!      or a new process running the old binary (a supervisor that starts a cached or
//!      stale path: the launchd `kickstart -k` trap, a unit pointed at a versioned
//!      path) — is `RestartHadNoEffect`, never success;
//!    - more than 2 distinct new processes since the restart (seen, or counted by the
//!      supervisor: launchd `runs`, systemd `NRestarts`) is `CrashLoop`;
//!    - the new build running but not reported at the deadline, while the authority
//!      does not answer the watchdog either ([`WatchConfig::authority`]): not a
//!      failure; the proof waits for the authority and gives the new build
//!      [`REPORT_GRACE`] (at least the timeout) once it answers again;
//!    - anything else at the deadline (nothing running, a digest that is neither, the
//!      new build running but never reporting to an authority that answers) is
//!      `HealthTimeout`.
//! 4. `Soaking` → the proven process must stay the main process, alive, for
//!    `min_healthy`. One that exits counts as a crash: the proof starts again on the next
//!    process (the supervisor's restart; the watchdog's own with no supervisor), until more
//!    than 2 new processes were seen: `CrashLoop`.
//! 5. `Committing` → `previous` := the old version, `current` := the new one (each an
//!    atomic rename; done again if a crash interrupted it): `Updated`, and old versions
//!    pruned (three kept besides `current` and `previous`).
//! 6. Any failure → `RollBack`: `current` := the version the update started from (it
//!    already is, unless an older watchdog flipped it), restart (unless that version
//!    already runs; the launcher no longer runs the new one), then prove its digest is
//!    back (the same process over 5 polls, within the timeout, at least 30 s); the bad
//!    version goes into `<root>/skip.json` (never applied again, even when an assignment
//!    is replayed, until `flotilla release unskip`) and the record ends `RolledBack`
//!    with the reason, its detail and the evidence measured.
//!
//! Deadlines and the soak are measured on an [`AwakeClock`]: time the host slept (a
//! closed lid) or the watchdog was stopped (SIGSTOP) does not count, so waking up never
//! expires a proof. A watchdog started again measures its step afresh.
//!
//! `kill -9` of every process of the host at any step (a power cut) leaves the host on
//! one of the two versions: the supervisor starts `current`, the known-good version,
//! which runs the trial only while trial starts are left and starts a watchdog for it;
//! otherwise it runs itself, and (as an agent) starts a watchdog for the unfinished
//! update, which rolls it back or finishes it.

use crate::proof::{end_rolled_back, rollback_not_proven, set_rolling_back, stamp};
pub use crate::proof::{
    AwakeClock, AWAKE_STEP, MAX_NEW_PROCESSES, POLL, ROLLBACK_MIN_TIMEOUT_MS, ROLLBACK_TRIES,
    STABLE_POLLS,
};
use crate::record::{
    now_ms, read_json, try_lock, OldAgent, Reported, Running, SeenPid, Side, Step, Trial,
    UpdateError, UpdateRecord, KEEP_OLD, MAX_TRIAL_BOOTS,
};
use crate::state::AgentDir;
use crate::supervisor::Supervisor;
use crate::Log;
use flotilla_exec::identity::{self, RuntimeIdentity};
use flotilla_release::{InstallRoot, Reason, UpdateState};
use std::ffi::OsString;
use std::process::Child;
use std::time::Duration;

/// How long a process stopped by the watchdog gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// After the authority was unreachable, how long (at least; the update's timeout when
/// longer) the new build has to report once the authority answers again.
pub const REPORT_GRACE: Duration = Duration::from_secs(15);

/// Asks the authority whether it answers (`Err`: why not), within a few seconds.
pub type AuthorityProbe = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Settings of a watchdog.
#[derive(Clone)]
pub struct WatchConfig {
    /// The install root whose `update.json` it works on.
    pub root: InstallRoot,
    /// The agent's directory (`running.json`, `reported.json`, `agent.log`).
    pub dir: AgentDir,
    /// What supervises the agent.
    pub supervisor: Supervisor,
    /// How often it looks ([`POLL`]).
    pub poll: Duration,
    /// How many polls a process must be seen unchanged ([`STABLE_POLLS`]).
    pub stable_polls: u32,
    /// Where its log lines go.
    pub log: Log,
    /// Asks the agent's authority whether it answers (`None`: the agent has no
    /// authority; its reports are accepted at once).
    pub authority: Option<AuthorityProbe>,
}

/// Why the watchdog did not run an update to its end.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Another watchdog holds `update.lock`.
    #[error("another watchdog holds {0}")]
    Locked(String),
    /// No update record.
    #[error("no update in {0}")]
    NoRecord(String),
    /// The update is not staged yet (the agent is still downloading).
    #[error("the update to {0} is not staged yet")]
    NotStaged(String),
    /// The record is incomplete (no `from`, `to` or old agent).
    #[error("the update record lacks {0}")]
    Incomplete(&'static str),
    /// The record could not be read or written.
    #[error(transparent)]
    Update(#[from] UpdateError),
    /// `update.lock` could not be opened.
    #[error("{path}: {source}")]
    Lock {
        /// The lock file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A failure of the update, to roll back from.
#[derive(Debug, Clone)]
struct Failure {
    reason: Reason,
    detail: String,
}

fn failure(reason: Reason, detail: impl Into<String>) -> Failure {
    Failure {
        reason,
        detail: detail.into(),
    }
}

/// Runs the update in `cfg.root` to its end (see the module docs); the final record.
///
/// # Errors
/// [`WatchError`]: another watchdog works on it, there is no staged update, the record
/// cannot be read.
pub fn run(cfg: WatchConfig) -> Result<UpdateRecord, WatchError> {
    let lock = try_lock(&cfg.root).map_err(|source| WatchError::Lock {
        path: crate::record::lock_path(&cfg.root).display().to_string(),
        source,
    })?;
    let Some(_lock) = lock else {
        return Err(WatchError::Locked(
            crate::record::lock_path(&cfg.root).display().to_string(),
        ));
    };
    let mut rec = UpdateRecord::load(&cfg.root)?
        .ok_or_else(|| WatchError::NoRecord(cfg.root.root().display().to_string()))?;
    if rec.step == Step::Downloading {
        return Err(WatchError::NotStaged(format!(
            "{} {}",
            rec.name, rec.version
        )));
    }
    let from = rec.from.clone().ok_or(WatchError::Incomplete("from"))?;
    let to = rec.to.clone().ok_or(WatchError::Incomplete("to"))?;
    let mut old = rec.agent.clone().ok_or(WatchError::Incomplete("agent"))?;
    // Before the restart was asked, the agent to restart is the one running now: the
    // one recorded may have died (a power cut after staging) and another started.
    if matches!(rec.step, Step::Staged | Step::Armed | Step::Flipped) {
        if let Some(live) = live_agent(&cfg.dir, &old, &from) {
            rec.evidence.push(format!(
                "{}: the agent recorded at staging (pid {}) is gone; pid {} (start {}) runs {} now: it is the one restarted",
                stamp(),
                old.pid,
                live.pid,
                live.start_time_ticks,
                live.exe_sha256
            ));
            rec.agent = Some(live.clone());
            old = live;
        }
    }
    (cfg.log)(&format!(
        "update-watch (pid {}): {} {} → {} ({:?}), supervisor {}",
        std::process::id(),
        from.version,
        rec.version,
        to.dir.display(),
        rec.step,
        cfg.supervisor
    ));
    let mut w = Watchdog {
        cfg,
        from,
        to,
        old,
        child: None,
        respawns: 0,
    };
    loop {
        let before = rec.clone();
        match rec.step.clone() {
            Step::Done => return Ok(rec),
            Step::Downloading => unreachable!("checked above"),
            Step::Staged => w.arm(&mut rec),
            // Flipped: a record of a component's update never reaches this watchdog.
            Step::Armed | Step::Flipped => w.restart_new(&mut rec),
            Step::Proving { starts_before, .. } => w.prove_new(&mut rec, starts_before),
            Step::Soaking {
                pid,
                start_time_ticks,
                ..
            } => w.soak(&mut rec, pid, start_time_ticks),
            Step::Committing => w.commit(&mut rec),
            Step::RollBack => w.roll_back(&mut rec),
            Step::ProvingRollback { .. } => w.prove_old(&mut rec),
        }
        if rec != before {
            w.save(&mut rec);
        }
    }
}

struct Watchdog {
    cfg: WatchConfig,
    from: Side,
    to: Side,
    old: OldAgent,
    /// The agent this watchdog started itself (no supervisor).
    child: Option<Child>,
    /// How many times it started the previous version again while proving a rollback.
    respawns: u32,
}

/// What one look found.
struct Look {
    /// The agent's main process, measured.
    id: Option<RuntimeIdentity>,
    /// The supervisor's start count.
    starts: Option<u64>,
}

impl Watchdog {
    fn log(&self, line: &str) {
        (self.cfg.log)(line);
    }

    fn save(&self, rec: &mut UpdateRecord) {
        if let Err(e) = rec.save(&self.cfg.root) {
            self.log(&format!(
                "update-watch: cannot write the record: {}",
                crate::record::chain(&e)
            ));
        }
    }

    fn fail(&self, rec: &mut UpdateRecord, f: Failure) {
        self.log(&format!(
            "update to {} failed: {}: {}; rolling back to {}",
            rec.version, f.reason, f.detail, self.from.version
        ));
        set_rolling_back(rec, f.reason, f.detail);
    }

    /// Arms the trial: the trial count reset; `current` stays.
    fn arm(&mut self, rec: &mut UpdateRecord) {
        match Trial::fresh(rec).save(&self.cfg.root) {
            Ok(()) => {
                rec.attempt(format!(
                    "armed: the agent's next {MAX_TRIAL_BOOTS} starts through current run {} on trial; current stays {}",
                    self.to.dir.display(),
                    self.from.dir.display()
                ));
                rec.state = UpdateState::Restarting;
                rec.step = Step::Armed;
                self.log(&format!("armed the trial of {}", self.to.dir.display()));
            }
            Err(e) => {
                // Nothing switched: the old version still runs and stays.
                self.fail(
                    rec,
                    failure(
                        Reason::InstallFailed,
                        format!("arming the trial: {}", crate::record::chain(&e)),
                    ),
                );
            }
        }
    }

    /// Makes the proven version `current` (`previous` := the old one): `Updated`.
    fn commit(&mut self, rec: &mut UpdateRecord) {
        let already = self
            .cfg
            .root
            .current()
            .is_some_and(|c| c.name() == self.to.version_dir().name());
        let flipped = if already {
            Ok(())
        } else {
            self.cfg.root.flip(&self.to.version_dir())
        };
        match flipped {
            Ok(()) => {
                rec.attempt(format!("flip: current → {}", self.to.dir.display()));
                rec.state = UpdateState::Updated;
                rec.step = Step::Done;
                rec.reason = None;
                rec.detail.clear();
                match self.cfg.root.prune(KEEP_OLD) {
                    Ok(gone) if !gone.is_empty() => rec.attempt(format!(
                        "pruned {}",
                        gone.iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    Ok(_) => {}
                    Err(e) => rec.attempt(format!("prune failed: {e}")),
                }
                self.log(&format!("updated to {}", rec.version));
            }
            Err(e) => {
                // Proven, but the next start would run the old version: undo.
                self.fail(
                    rec,
                    failure(Reason::InstallFailed, format!("flipping current: {e}")),
                );
            }
        }
    }

    /// Restarts the agent onto whatever `current` is now.
    fn restart(&mut self, rec: &mut UpdateRecord, running: Option<(u32, u64)>) -> Option<u64> {
        match &self.cfg.supervisor {
            Supervisor::None => {
                if let Some((pid, ticks)) = running {
                    let how = stop_process(pid, ticks, self.child.as_mut());
                    rec.attempt(format!("stop pid {pid}: {how}"));
                    rec.evidence.push(format!("{}: pid {pid}: {how}", stamp()));
                }
                self.child = None;
                self.spawn(rec);
                None
            }
            s => {
                let starts = s.observe().ok().and_then(|m| m.starts);
                match s.restart() {
                    Ok(cmd) => {
                        rec.attempt(format!("restart: {cmd}"));
                        self.log(&format!("restart: {cmd}"));
                    }
                    Err(e) => {
                        rec.attempt(format!("restart failed: {e}"));
                        rec.evidence
                            .push(format!("{}: restart failed: {e}", stamp()));
                        self.log(&format!("restart failed: {e}"));
                    }
                }
                starts
            }
        }
    }

    fn restart_new(&mut self, rec: &mut UpdateRecord) {
        let old = (self.old.pid, self.old.start_time_ticks);
        let starts_before = self.restart(rec, Some(old));
        rec.state = UpdateState::Restarting;
        rec.step = Step::Proving {
            since_ms: now_ms(),
            starts_before,
        };
    }

    /// Starts `<root>/current/<binary>` with the old agent's argv (no supervisor).
    fn spawn(&mut self, rec: &mut UpdateRecord) {
        let program = self
            .cfg
            .root
            .root()
            .join("current")
            .join(self.cfg.root.binary_name());
        let mut argv: Vec<OsString> = self.old.argv.iter().map(OsString::from).collect();
        if argv.is_empty() {
            argv.push(program.clone().into_os_string());
        } else {
            argv[0] = program.clone().into_os_string();
        }
        match flotilla_exec::detached::spawn_detached(
            &program,
            &argv,
            Some(&self.old.cwd),
            &self.cfg.dir.log_file(),
        ) {
            Ok(child) => {
                let pid = child.id();
                rec.attempt(format!("started {} as pid {pid}", program.display()));
                // Noted now: one that exits at once may never be seen running.
                let id = identity::measure(pid).ok().flatten();
                rec.seen.push(SeenPid {
                    pid,
                    start_time_ticks: id.as_ref().map_or(0, |i| i.start_time_ticks),
                    exe_sha256: id.map(|i| i.exe_sha256).unwrap_or_default(),
                    first_ms: now_ms(),
                    ended: None,
                });
                self.log(&format!("started {} as pid {pid}", program.display()));
                self.child = Some(child);
            }
            Err(e) => {
                rec.attempt(format!("cannot start {}: {e}", program.display()));
                rec.evidence.push(format!(
                    "{}: cannot start {}: {e}",
                    stamp(),
                    program.display()
                ));
            }
        }
    }

    /// Reaps the watchdog's own child when it ended; how, for the evidence.
    fn reap(&mut self, rec: &mut UpdateRecord) -> Option<String> {
        let child = self.child.as_mut()?;
        let status = child.try_wait().ok().flatten()?;
        let pid = child.id();
        self.child = None;
        let how = flotilla_exec::process::describe_exit(&status);
        if let Some(s) = rec
            .seen
            .iter_mut()
            .find(|s| s.pid == pid && s.ended.is_none())
        {
            s.ended = Some(format!("{} ({})", how, stamp()));
        }
        rec.evidence.push(format!("{}: pid {pid} {how}", stamp()));
        Some(how)
    }

    /// The agent's main process now, measured.
    fn look(&mut self, rec: &UpdateRecord) -> Look {
        let (pid, starts) = match &self.cfg.supervisor {
            Supervisor::None => (self.own_pid(rec), None),
            s => match s.observe() {
                Ok(m) => (m.pid, m.starts),
                Err(_) => (self.running_pid(), None),
            },
        };
        let id = pid.and_then(|p| identity::measure(p).ok().flatten());
        Look { id, starts }
    }

    /// No supervisor: the child this watchdog started, else one a watchdog before it
    /// started (still alive, same start time), else the last trial start (alive), else
    /// what `running.json` names.
    fn own_pid(&self, rec: &UpdateRecord) -> Option<u32> {
        if let Some(c) = &self.child {
            return Some(c.id());
        }
        let last = rec.seen.iter().rev().find(|s| s.ended.is_none());
        if let Some(s) = last {
            if still(s.pid, s.start_time_ticks).is_some() {
                return Some(s.pid);
            }
        }
        // A trial start (by whoever started the agent; it `exec`s the new version).
        let trial = Trial::of(&self.cfg.root, rec);
        if let Some(t) = trial.starts.last() {
            if still(t.pid, t.start_time_ticks).is_some() {
                return Some(t.pid);
            }
        }
        self.running_pid()
    }

    /// The pid `running.json` names, when that process still lives.
    fn running_pid(&self) -> Option<u32> {
        let r: Running = read_json(&self.cfg.dir.running_file())?;
        still(r.pid, r.start_time_ticks).map(|m| m.pid)
    }

    fn is_old(&self, id: &RuntimeIdentity) -> bool {
        id.pid == self.old.pid && id.start_time_ticks == self.old.start_time_ticks
    }

    /// Notes a new process; whether it was not seen before.
    fn note_seen(&self, rec: &mut UpdateRecord, id: &RuntimeIdentity) -> bool {
        if self.is_old(id) {
            return false;
        }
        if let Some(s) = rec.seen.iter_mut().find(|s| {
            s.pid == id.pid
                && (s.start_time_ticks == id.start_time_ticks
                    || (s.start_time_ticks == 0 && s.ended.is_none()))
        }) {
            s.start_time_ticks = id.start_time_ticks;
            // Seen between fork and exec, it ran the image of whoever started it.
            if s.exe_sha256 != id.exe_sha256 {
                s.exe_sha256 = id.exe_sha256.clone();
                return true;
            }
            return false;
        }
        // One that is gone without our seeing it end.
        for s in rec.seen.iter_mut().filter(|s| s.ended.is_none()) {
            if still(s.pid, s.start_time_ticks).is_none() {
                s.ended = Some(format!("gone ({})", stamp()));
            }
        }
        rec.seen.push(SeenPid {
            pid: id.pid,
            start_time_ticks: id.start_time_ticks,
            exe_sha256: id.exe_sha256.clone(),
            first_ms: now_ms(),
            ended: None,
        });
        rec.evidence.push(format!(
            "{}: new pid {} (start {}) runs {} ({})",
            stamp(),
            id.pid,
            id.start_time_ticks,
            id.exe_sha256,
            self.describe_digest(&id.exe_sha256)
        ));
        true
    }

    fn describe_digest(&self, sha: &str) -> &'static str {
        if sha == self.to.measured() {
            "the new version"
        } else if sha == self.from.measured() {
            "the version before the update"
        } else {
            "neither version"
        }
    }

    /// How many new processes the supervisor started since the restart, by its own
    /// count.
    fn started_by_supervisor(&self, before: Option<u64>, now: Option<u64>) -> usize {
        let (Some(before), Some(now)) = (before, now) else {
            return 0;
        };
        match self.cfg.supervisor {
            // `runs` counts every spawn, the restart's too.
            Supervisor::Launchd { .. } => now.saturating_sub(before) as usize,
            // `NRestarts` counts the automatic restarts after an exit (a manual restart
            // may reset it to 0).
            Supervisor::Systemd { .. } => {
                let n = if now < before { now } else { now - before };
                1 + n as usize
            }
            Supervisor::None => 0,
        }
    }

    fn crash_loop(&self, rec: &UpdateRecord, by_supervisor: usize) -> Option<Failure> {
        let n = rec.seen.len().max(by_supervisor);
        (n > MAX_NEW_PROCESSES).then(|| {
            let pids: Vec<String> = rec
                .seen
                .iter()
                .map(|s| {
                    format!(
                        "pid {} ({}{})",
                        s.pid,
                        if s.exe_sha256.is_empty() {
                            "unmeasured"
                        } else {
                            self.describe_digest(&s.exe_sha256)
                        },
                        s.ended
                            .as_deref()
                            .map(|e| format!(", {e}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            failure(
                Reason::CrashLoop,
                format!(
                    "{n} new agent processes since the restart (more than {MAX_NEW_PROCESSES}): {}",
                    pids.join("; ")
                ),
            )
        })
    }

    /// No supervisor: starts the new agent again when nothing runs (the watchdog
    /// stands in for the supervisor's restart), as long as that does not pass the
    /// crash-loop limit by more than one.
    /// Whether it started one.
    fn keep_running(&mut self, rec: &mut UpdateRecord, look: &Look) -> bool {
        if self.cfg.supervisor != Supervisor::None || look.id.is_some() || self.child.is_some() {
            return false;
        }
        if rec.seen.len() <= MAX_NEW_PROCESSES {
            self.spawn(rec);
            return self.child.is_some();
        }
        false
    }

    fn prove_new(&mut self, rec: &mut UpdateRecord, starts_before: Option<u64>) {
        let mut clock = AwakeClock::start(AWAKE_STEP);
        let mut budget = Duration::from_millis(rec.timeout_ms);
        let mut outage: Option<String> = None;
        let want = self.to.measured();
        let old_digest = self.from.measured();
        let mut stable: Option<(u32, u64, u32)> = None;
        let mut last_seen: Option<RuntimeIdentity> = None;
        loop {
            if self.reap(rec).is_some() {
                self.save(rec);
            }
            let look = self.look(rec);
            if let Some(id) = &look.id {
                if self.note_seen(rec, id) {
                    self.save(rec);
                }
            }
            let by_supervisor = self.started_by_supervisor(starts_before, look.starts);
            if let Some(f) = self.crash_loop(rec, by_supervisor) {
                return self.fail(rec, f);
            }
            if look.id.is_none() && self.keep_running(rec, &look) {
                self.save(rec);
            }
            let count = bump(&mut stable, look.id.as_ref());
            if let Some(id) = &look.id {
                last_seen = Some(id.clone());
                if !self.is_old(id) && id.exe_sha256 == want && count >= self.cfg.stable_polls {
                    if let Some(r) = self.reported_by(id) {
                        rec.evidence.push(format!(
                            "{}: pid {} (start {}) runs {want} (the artifact's, measured over {count} polls) and reported at {}",
                            stamp(),
                            id.pid,
                            id.start_time_ticks,
                            flotilla_release::manifest::format_rfc3339_ms(r.at_ms)
                        ));
                        rec.state = UpdateState::Soaking;
                        rec.step = Step::Soaking {
                            pid: id.pid,
                            start_time_ticks: id.start_time_ticks,
                            since_ms: now_ms(),
                        };
                        self.log(&format!(
                            "proven: pid {} runs the new version; soaking {} ms",
                            id.pid, rec.min_healthy_ms
                        ));
                        return;
                    }
                }
                if !self.is_old(id) && id.exe_sha256 == old_digest && count >= self.cfg.stable_polls
                {
                    let trial = Trial::of(&self.cfg.root, rec);
                    if trial.exhausted() {
                        return self.fail(
                            rec,
                            failure(
                                Reason::CrashLoop,
                                format!(
                                    "the new version was started {} times on trial (pids {}) and did not stay up; the launcher now runs the known-good version {} (pid {})",
                                    trial.boots,
                                    trial.starts.iter().map(|t| t.pid.to_string()).collect::<Vec<_>>().join(", "),
                                    self.from.version,
                                    id.pid
                                ),
                            ),
                        );
                    }
                    return self.fail(
                        rec,
                        failure(
                            Reason::RestartHadNoEffect,
                            format!(
                                "the restart started pid {} but it runs {old_digest}, the version before the update ({}), not the artifact's {want}: the supervisor starts a stale binary, not <root>/current/{}",
                                id.pid,
                                self.from.version,
                                self.cfg.root.binary_name()
                            ),
                        ),
                    );
                }
            }
            if clock.tick() > budget {
                // The new build runs, but its report cannot reach an authority that
                // does not answer the watchdog either: wait for it, keep the build.
                let unreported = last_seen.as_ref().is_some_and(|id| {
                    !self.is_old(id) && id.exe_sha256 == want && count >= self.cfg.stable_polls
                });
                if unreported {
                    if let Some(probe) = self.cfg.authority.clone() {
                        match probe() {
                            Err(why) => {
                                if outage.is_none() {
                                    rec.evidence.push(format!(
                                        "{}: pid {} runs {want} but has not reported, and the authority does not answer: {why}; the proof waits for the authority",
                                        stamp(),
                                        last_seen.as_ref().map_or(0, |i| i.pid),
                                    ));
                                    self.log(&format!(
                                        "the authority does not answer ({why}): the proof waits for it"
                                    ));
                                    self.save(rec);
                                }
                                outage = Some(why);
                                std::thread::sleep(self.cfg.poll);
                                continue;
                            }
                            Ok(()) if outage.is_some() => {
                                outage = None;
                                let grace = REPORT_GRACE.max(Duration::from_millis(rec.timeout_ms));
                                budget = clock.tick() + grace;
                                rec.evidence.push(format!(
                                    "{}: the authority answers again: the new build has {} ms to report",
                                    stamp(),
                                    grace.as_millis()
                                ));
                                self.save(rec);
                                continue;
                            }
                            Ok(()) => {}
                        }
                    }
                }
                let f = match &last_seen {
                    Some(id) if self.is_old(id) => failure(
                        Reason::RestartHadNoEffect,
                        format!(
                            "after {} ms pid {}, the agent from before the restart, still runs {} ({}): the restart changed nothing",
                            rec.timeout_ms, id.pid, id.exe_sha256, self.describe_digest(&id.exe_sha256)
                        ),
                    ),
                    Some(id) if id.exe_sha256 == want => failure(
                        Reason::HealthTimeout,
                        format!(
                            "pid {} runs the new version ({want}) but did not report to the authority (which answers) within {} ms",
                            id.pid, budget.as_millis()
                        ),
                    ),
                    Some(id) if id.exe_sha256 == old_digest => failure(
                        Reason::RestartHadNoEffect,
                        format!(
                            "pid {} runs {old_digest}, the version before the update, {} ms after the restart",
                            id.pid, rec.timeout_ms
                        ),
                    ),
                    Some(id) => failure(
                        Reason::HealthTimeout,
                        format!(
                            "pid {} runs {}, neither the artifact's {want} nor the old {old_digest}, {} ms after the restart",
                            id.pid, id.exe_sha256, rec.timeout_ms
                        ),
                    ),
                    None => failure(
                        Reason::HealthTimeout,
                        format!("no agent process ran within {} ms of the restart", rec.timeout_ms),
                    ),
                };
                return self.fail(rec, f);
            }
            std::thread::sleep(self.cfg.poll);
        }
    }

    /// `reported.json`, when the process `id` wrote it.
    fn reported_by(&self, id: &RuntimeIdentity) -> Option<Reported> {
        let r: Reported = read_json(&self.cfg.dir.reported_file())?;
        (r.pid == id.pid
            && r.start_time_ticks == id.start_time_ticks
            && r.exe_sha256 == id.exe_sha256)
            .then_some(r)
    }

    fn soak(&mut self, rec: &mut UpdateRecord, pid: u32, ticks: u64) {
        let mut clock = AwakeClock::start(AWAKE_STEP);
        let soak = Duration::from_millis(rec.min_healthy_ms);
        loop {
            let awake = clock.tick();
            let exited = self.reap(rec);
            let look = self.look(rec);
            let same = look
                .id
                .as_ref()
                .is_some_and(|id| id.pid == pid && id.start_time_ticks == ticks);
            if same {
                if awake >= soak {
                    rec.evidence.push(format!(
                        "{}: pid {pid} ran {} for {} ms awake (the soak): committing",
                        stamp(),
                        self.to.measured(),
                        awake.as_millis()
                    ));
                    rec.state = UpdateState::Soaking;
                    rec.step = Step::Committing;
                    return;
                }
                std::thread::sleep(self.cfg.poll);
                continue;
            }
            // The proven process is gone, or no longer the main one: a crash.
            let how = exited.unwrap_or_else(|| match &look.id {
                Some(id) => format!("was replaced by pid {}", id.pid),
                None => "is gone".to_string(),
            });
            if let Some(s) = rec
                .seen
                .iter_mut()
                .find(|s| s.pid == pid && s.start_time_ticks == ticks)
            {
                if s.ended.is_none() {
                    s.ended = Some(format!("{how} during the soak ({})", stamp()));
                }
            }
            rec.evidence.push(format!(
                "{}: pid {pid} {how} {} ms into the soak",
                stamp(),
                awake.as_millis()
            ));
            if let Some(id) = &look.id {
                self.note_seen(rec, id);
            }
            if let Some(f) = self.crash_loop(rec, 0) {
                return self.fail(rec, f);
            }
            if rec.seen.len() == MAX_NEW_PROCESSES && look.id.is_none() {
                // A third process would be one too many either way.
                let f = self
                    .crash_loop(rec, MAX_NEW_PROCESSES + 1)
                    .expect("over the limit");
                return self.fail(rec, f);
            }
            let starts_before = self.look(rec).starts;
            rec.state = UpdateState::Restarting;
            rec.step = Step::Proving {
                since_ms: now_ms(),
                starts_before,
            };
            return;
        }
    }

    fn roll_back(&mut self, rec: &mut UpdateRecord) {
        rec.rollbacks += 1;
        let already = self
            .cfg
            .root
            .current()
            .is_some_and(|c| c.name() == self.from.version_dir().name());
        if already {
            rec.attempt(format!("rollback: current is {}", self.from.dir.display()));
        } else if let Err(e) = self.cfg.root.set_current(&self.from.version_dir()) {
            rec.evidence.push(format!(
                "{}: pointing current back to {}: {e}",
                stamp(),
                self.from.dir.display()
            ));
        } else {
            rec.attempt(format!("rollback: current → {}", self.from.dir.display()));
        }
        self.reap(rec);
        let look = self.look(rec);
        let since = now_ms();
        match &look.id {
            Some(id) if id.exe_sha256 == self.from.measured() => {
                rec.attempt(format!(
                    "no restart: pid {} already runs the previous version",
                    id.pid
                ));
            }
            Some(id) => {
                let running = Some((id.pid, id.start_time_ticks));
                self.restart(rec, running);
            }
            None => {
                self.restart(rec, None);
            }
        }
        self.respawns = 0;
        rec.step = Step::ProvingRollback { since_ms: since };
    }

    fn prove_old(&mut self, rec: &mut UpdateRecord) {
        let mut clock = AwakeClock::start(AWAKE_STEP);
        let budget = Duration::from_millis(rec.timeout_ms.max(ROLLBACK_MIN_TIMEOUT_MS));
        let want = self.from.measured();
        let mut stable: Option<(u32, u64, u32)> = None;
        let mut last: Option<RuntimeIdentity> = None;
        loop {
            if self.reap(rec).is_some() {
                self.save(rec);
            }
            let look = self.look(rec);
            if look.id.is_none()
                && self.cfg.supervisor == Supervisor::None
                && self.child.is_none()
                && self.respawns < ROLLBACK_TRIES
            {
                self.respawns += 1;
                self.spawn(rec);
                self.save(rec);
                continue;
            }
            let count = bump(&mut stable, look.id.as_ref());
            if let Some(id) = &look.id {
                last = Some(id.clone());
                if id.exe_sha256 == want && count >= self.cfg.stable_polls {
                    rec.evidence.push(format!(
                        "{}: rolled back: pid {} (start {}) runs {want}, the previous version {} (measured over {count} polls)",
                        stamp(),
                        id.pid,
                        id.start_time_ticks,
                        self.from.version
                    ));
                    return self.finish_rollback(rec);
                }
            }
            if clock.tick() > budget {
                let seen = match &last {
                    Some(id) => format!("pid {} runs {}", id.pid, id.exe_sha256),
                    None => "no agent process runs".into(),
                };
                if rollback_not_proven(rec, &want, &seen) {
                    return;
                }
                return self.finish_rollback(rec);
            }
            std::thread::sleep(self.cfg.poll);
        }
    }

    fn finish_rollback(&mut self, rec: &mut UpdateRecord) {
        end_rolled_back(&self.cfg.root, rec);
        self.log(&format!(
            "rolled back to {}; {} {} is skipped from now on",
            self.from.version, rec.name, rec.version
        ));
    }
}

/// The agent `running.json` names, when `recorded` is gone and that one lives and runs
/// the version the update starts from (`from`): its pid, start time, digest, argv and
/// working directory, measured.
fn live_agent(dir: &AgentDir, recorded: &OldAgent, from: &Side) -> Option<OldAgent> {
    if still(recorded.pid, recorded.start_time_ticks).is_some() {
        return None;
    }
    let r: Running = read_json(&dir.running_file())?;
    let m = still(r.pid, r.start_time_ticks)?;
    if m.exe_sha256 != from.measured() {
        return None;
    }
    OldAgent::of(r.pid, m.start_time_ticks, m.exe_sha256)
}

/// Process `pid`, measured, when it still is the one started at `ticks`.
fn still(pid: u32, ticks: u64) -> Option<RuntimeIdentity> {
    identity::measure(pid)
        .ok()
        .flatten()
        .filter(|m| m.start_time_ticks == ticks)
}

/// Counts consecutive looks at the same process; the count now.
fn bump(stable: &mut Option<(u32, u64, u32)>, id: Option<&RuntimeIdentity>) -> u32 {
    match (id, stable.as_mut()) {
        (Some(id), Some((pid, ticks, n))) if *pid == id.pid && *ticks == id.start_time_ticks => {
            *n += 1;
            *n
        }
        (Some(id), _) => {
            *stable = Some((id.pid, id.start_time_ticks, 1));
            1
        }
        (None, _) => {
            *stable = None;
            0
        }
    }
}

/// SIGTERM to `pid` if it still is the process started at `ticks` (identity before
/// signal), SIGKILL after [`STOP_GRACE`]; waits for it to go, then reaps `child` (the
/// watchdog's own, when it started that process). How it went.
fn stop_process(pid: u32, ticks: u64, child: Option<&mut Child>) -> String {
    use flotilla_exec::process::{stop_identified, StopOutcome};
    let how = match stop_identified(pid, ticks, STOP_GRACE) {
        Ok(StopOutcome::AlreadyGone { .. } | StopOutcome::IdentityMismatch { .. }) => {
            "already gone".to_string()
        }
        Ok(StopOutcome::Stopped {
            escalated_to_kill: false,
            took,
            ..
        }) => format!("stopped (SIGTERM) in {} ms", took.as_millis()),
        Ok(StopOutcome::Stopped { .. }) => format!(
            "did not stop within {} s of SIGTERM: SIGKILLed",
            STOP_GRACE.as_secs()
        ),
        Err(e) => format!("not stopped: {e}"),
    };
    if let Some(c) = child {
        let _ = c.try_wait();
    }
    how
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_awake_clock_counts_a_long_gap_as_one_step() {
        let mut clock = AwakeClock::start(Duration::from_millis(10));
        // A gap far longer than a step: the process stopped, or the host asleep.
        std::thread::sleep(Duration::from_millis(60));
        let after_gap = clock.tick();
        assert!(after_gap <= Duration::from_millis(10), "{after_gap:?}");
        assert!(after_gap > Duration::ZERO);
        // Looks never go back.
        assert!(clock.tick() >= after_gap);
    }
}
