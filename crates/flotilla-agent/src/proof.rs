//! What proves an update and what ends it, shared by the agent's watchdog
//! ([`crate::watch`]) and component releases ([`crate::component_release`]): how often
//! and how long to look, the [`AwakeClock`] deadlines and soaks are measured on, and the
//! rollback's bookkeeping in the record (reason, retries, the skip list).

use crate::record::{now_ms, Step, UpdateRecord};
use flotilla_release::{InstallRoot, Reason, SkipEntry, UpdateState};
use std::time::{Duration, Instant};

/// How often the watchdog looks.
pub const POLL: Duration = Duration::from_millis(200);

/// How many consecutive polls must see the same new process.
pub const STABLE_POLLS: u32 = 5;

/// More new processes than this since the restart is a crash loop.
pub const MAX_NEW_PROCESSES: usize = 2;

/// The least time allowed to prove the previous version back after a rollback.
pub const ROLLBACK_MIN_TIMEOUT_MS: u64 = 30_000;

/// How many times the rollback restart is tried.
pub const ROLLBACK_TRIES: u32 = 3;

/// The most one look of an [`AwakeClock`] counts: a longer gap between two looks is the
/// host asleep or the process stopped.
pub const AWAKE_STEP: Duration = Duration::from_secs(2);

/// Time a process was awake to see: the time between its looks, each look counting at
/// most `max_step`, so that time the host slept (suspend, on a clock that itself stops
/// then: `Instant` is `CLOCK_MONOTONIC` on Linux and `CLOCK_UPTIME_RAW` on macOS) or the
/// process was stopped (SIGSTOP: the monotonic clock runs on) is not counted.
#[derive(Debug, Clone)]
pub struct AwakeClock {
    last: Instant,
    awake: Duration,
    max_step: Duration,
}

impl AwakeClock {
    /// A clock at zero now, counting at most `max_step` per look.
    pub fn start(max_step: Duration) -> AwakeClock {
        AwakeClock {
            last: Instant::now(),
            awake: Duration::ZERO,
            max_step,
        }
    }

    /// Looks: adds the time since the last look (at most `max_step`); the awake time
    /// so far.
    pub fn tick(&mut self) -> Duration {
        let now = Instant::now();
        self.awake += now.duration_since(self.last).min(self.max_step);
        self.last = now;
        self.awake
    }
}

/// Records failure `reason` (`detail`) in `rec`, whose next step is the rollback.
pub(crate) fn set_rolling_back(rec: &mut UpdateRecord, reason: Reason, detail: String) {
    rec.evidence
        .push(format!("{}: {reason}: {detail}", stamp()));
    rec.reason = Some(reason);
    rec.detail = detail;
    rec.state = UpdateState::Restarting;
    rec.step = Step::RollBack;
}

/// Records that the previous version (`want`) was not proven back in time (`seen`:
/// what runs instead) and, while tries are left ([`ROLLBACK_TRIES`]), sets the record
/// to roll back again; whether it did (else the caller ends the rollback as it is).
pub(crate) fn rollback_not_proven(rec: &mut UpdateRecord, want: &str, seen: &str) -> bool {
    rec.evidence.push(format!(
        "{}: rollback restart {} of {ROLLBACK_TRIES}: the previous version ({want}) is not proven back: {seen}",
        stamp(),
        rec.rollbacks
    ));
    if rec.rollbacks < ROLLBACK_TRIES {
        rec.step = Step::RollBack;
        return true;
    }
    false
}

/// Ends a rolled-back update: the bad version added to `root`'s skip list (never
/// applied again), the record `RolledBack`, done.
pub(crate) fn end_rolled_back(root: &InstallRoot, rec: &mut UpdateRecord) {
    let entry = SkipEntry {
        name: rec.name.clone(),
        version: rec.version.clone(),
        sha256: rec.sha256.clone(),
        reason: rec.reason.unwrap_or(Reason::HealthTimeout),
        at_ms: now_ms(),
    };
    if let Err(e) = root.add_skip(entry) {
        rec.evidence.push(format!("{}: skip list: {e}", stamp()));
    }
    rec.state = UpdateState::RolledBack;
    rec.step = Step::Done;
}

/// Now, RFC 3339 (evidence lines start with it).
pub(crate) fn stamp() -> String {
    flotilla_release::manifest::format_rfc3339_ms(now_ms())
}
