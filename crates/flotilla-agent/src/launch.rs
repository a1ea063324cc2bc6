//! The known-good launcher: what every `flotilla agent run` does before anything else,
//! so that whatever its supervisor starts after any crash (a power cut, the OOM killer,
//! `kill -9` of every process of the host) can finish or undo an update of the agent.
//!
//! The supervisor (systemd unit, launchd job, or the watchdog itself) always starts
//! `<root>/current/flotilla`, and `current` names the last version proven on this host:
//! during an update it still names the version the update started from. That version
//! reads `<root>/update.json` first ([`decide`]):
//!
//! - no update, or one that is not running the new version ([`Step::Staged`],
//!   [`Step::RollBack`], [`Step::ProvingRollback`], [`Step::Done`]…): it runs itself;
//! - the trial is armed or being proven ([`Step::Armed`], [`Step::Proving`],
//!   [`Step::Soaking`]): unless [`MAX_TRIAL_BOOTS`] trial starts were made already, it
//!   counts one more in `<root>/trial.json` (durably, before anything else), makes sure
//!   a watchdog works on the update (starting one from itself when `update.lock` is
//!   free), and `exec`s the new version's binary with the same arguments: the new
//!   version runs as the supervisor's main process, on trial. Once the trial starts are
//!   used up it runs itself, and the watchdog calls the update a crash loop and rolls it
//!   back (`current` never moved);
//! - proven and being committed ([`Step::Committing`]): it `exec`s the new version.
//!
//! A process started through any other path (a unit pointed at a versioned directory,
//! a stale cached path) never runs the trial: the watchdog sees the old digest in a new
//! process and says `RestartHadNoEffect`. An unreadable record runs the known-good
//! version; nothing here can keep the agent from starting.

use crate::record::{try_lock, Step, Trial, TrialStart, UpdateRecord, MAX_TRIAL_BOOTS};
use crate::state::AgentDir;
use crate::supervisor::Supervisor;
use crate::Log;
use flotilla_release::InstallRoot;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What this start of the agent does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Run this binary (why, for the log; empty when there is no update at all).
    RunThis(String),
    /// Replace this process with the new version's binary, this program.
    Exec {
        /// The new version's binary (`<root>/versions/<version>-<sha12>/flotilla`).
        program: PathBuf,
        /// Why, for the log.
        why: String,
        /// The update, when a watchdog has to be started for it first (nobody holds
        /// `update.lock`).
        start_watchdog: Option<Box<UpdateRecord>>,
    },
}

/// Decides what this start does (see the module docs) and, for a trial start, counts
/// it in `<root>/trial.json` before returning. `argv0` is this process's `argv[0]`:
/// only a start through `<root>/current/<binary>` runs the new version.
pub fn decide(root: &InstallRoot, argv0: &Path) -> Launch {
    let rec = match UpdateRecord::load(root) {
        Ok(Some(rec)) => rec,
        Ok(None) => return Launch::RunThis(String::new()),
        Err(e) => {
            return Launch::RunThis(format!(
                "update record unreadable, running this version: {}",
                crate::record::chain(&e)
            ))
        }
    };
    let Some(to) = rec.to.clone().filter(|_| rec.runs_new_version()) else {
        return Launch::RunThis(String::new());
    };
    let me = flotilla_exec::sys::self_exe()
        .map(|p| flotilla_exec::identity::strip_deleted(&p).to_path_buf());
    if me.is_some() && me == to.binary.canonicalize().ok() {
        let how = if rec.step == Step::Committing {
            "proven, being committed"
        } else {
            "on trial"
        };
        return Launch::RunThis(format!("this is {} {}, {how}", rec.name, rec.version));
    }
    let through_current =
        std::path::absolute(argv0).is_ok_and(|p| p == root.current_link().join(root.binary_name()));
    if !through_current {
        return Launch::RunThis(format!(
            "update to {} is {:?}, but this process was started as {}, not through {}: running this version",
            rec.version,
            rec.step,
            argv0.display(),
            root.current_link().join(root.binary_name()).display()
        ));
    }
    let start_watchdog = matches!(try_lock(root), Ok(Some(_))).then(|| Box::new(rec.clone()));
    if rec.step == Step::Committing {
        return Launch::Exec {
            program: to.binary,
            why: format!("{} {} is proven and being committed", rec.name, rec.version),
            start_watchdog,
        };
    }
    let mut trial = Trial::of(root, &rec);
    if trial.exhausted() {
        return Launch::RunThis(format!(
            "{} {} was started on trial {} times (the most allowed): running the known-good version",
            rec.name, rec.version, trial.boots
        ));
    }
    let me = std::process::id();
    let Some(start_time_ticks) = flotilla_exec::identity::measure(me)
        .ok()
        .flatten()
        .map(|m| m.start_time_ticks)
    else {
        return Launch::RunThis(
            "cannot measure this process for the trial count: running the known-good version"
                .into(),
        );
    };
    trial.boots += 1;
    trial.starts.push(TrialStart {
        pid: me,
        start_time_ticks,
        at_ms: crate::record::now_ms(),
    });
    if let Err(e) = trial.save(root) {
        // Uncounted, a crash could start it forever: run the known-good version.
        return Launch::RunThis(format!(
            "cannot count the trial start ({}): running the known-good version",
            crate::record::chain(&e)
        ));
    }
    Launch::Exec {
        program: to.binary,
        why: format!(
            "{} {} on trial (start {} of {MAX_TRIAL_BOOTS}; current stays {})",
            rec.name,
            rec.version,
            trial.boots,
            rec.from.as_ref().map_or("?", |f| f.version.as_str())
        ),
        start_watchdog,
    }
}

/// Carries out [`decide`] at the start of `agent run`: returns when this binary is the
/// one to run; otherwise starts a watchdog when none works on the update and replaces
/// this process with the new version (same pid, arguments and environment), and
/// returns only when that failed (then this, known-good, version runs).
pub fn before_start(
    root: &InstallRoot,
    state_dir: &Path,
    dir: &AgentDir,
    supervisor: &Supervisor,
    log: &Log,
) {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let argv0 = argv.first().cloned().unwrap_or_default();
    match decide(root, Path::new(&argv0)) {
        Launch::RunThis(why) => {
            if !why.is_empty() {
                log(&format!("launch: {why}"));
            }
        }
        Launch::Exec {
            program,
            why,
            start_watchdog,
        } => {
            log(&format!("launch: {why}: exec {}", program.display()));
            if let Some(rec) = start_watchdog {
                if let Err(e) =
                    crate::update::spawn_watchdog(root, state_dir, dir, &rec, None, supervisor)
                {
                    log(&format!("launch: the watchdog cannot be started: {e}"));
                }
            }
            let err = flotilla_exec::detached::exec_in_place(&program, &argv0, &argv[1..]);
            log(&format!(
                "launch: exec {} failed: {err}; running the known-good version",
                program.display()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Side, UPDATE_FORMAT};
    use flotilla_release::UpdateState;

    /// An install root with 0.1.0 current and 0.2.0 staged, and the record of the
    /// update from one to the other at `step`.
    fn root_at(step: Step) -> (tempfile::TempDir, InstallRoot, UpdateRecord) {
        let d = tempfile::tempdir().unwrap();
        let root = InstallRoot::new(d.path().join("root"), "flotilla");
        let src = d.path().join("src");
        std::fs::write(&src, b"#!/bin/sh\nexit 0\n").unwrap();
        let old = root.install_binary(&src, "0.1.0").unwrap();
        let old_sha = flotilla_release::artifact::sha256_file(&old.binary).unwrap();
        let (mut f, tmp) = root.temp_download().unwrap();
        std::io::Write::write_all(&mut f, b"#!/bin/sh\nexit 1\n").unwrap();
        drop(f);
        let new_sha = flotilla_release::artifact::sha256_file(&tmp).unwrap();
        let new = root.stage("0.2.0", &new_sha, &tmp).unwrap();
        let mut rec = UpdateRecord {
            format: UPDATE_FORMAT,
            rollout: 1,
            name: crate::record::AGENT_RELEASE.into(),
            version: "0.2.0".into(),
            serial: 1,
            key_id: String::new(),
            sha256: new_sha.clone(),
            from: Some(Side::of(&old, &old_sha)),
            to: Some(Side::of(&new, &new_sha)),
            state: UpdateState::Restarting,
            step,
            min_healthy_ms: 1000,
            timeout_ms: 10_000,
            started_ms: 1,
            updated_ms: 1,
            attempts: Vec::new(),
            reason: None,
            detail: String::new(),
            evidence: Vec::new(),
            agent: None,
            supervisor: "none".into(),
            seen: Vec::new(),
            rollbacks: 0,
        };
        rec.save(&root).unwrap();
        (d, root, rec)
    }

    fn through_current(root: &InstallRoot) -> PathBuf {
        root.current_link().join("flotilla")
    }

    #[test]
    fn a_trial_start_is_counted_before_the_exec_and_stops_at_the_limit() {
        let (_d, root, rec) = root_at(Step::Armed);
        let to = rec.to.clone().unwrap().binary;
        for n in 1..=MAX_TRIAL_BOOTS {
            match decide(&root, &through_current(&root)) {
                Launch::Exec { program, .. } => assert_eq!(program, to),
                other => panic!("start {n}: {other:?}"),
            }
            let trial = Trial::of(&root, &rec);
            assert_eq!(trial.boots, n);
            assert_eq!(trial.starts.last().unwrap().pid, std::process::id());
        }
        match decide(&root, &through_current(&root)) {
            Launch::RunThis(why) => assert!(why.contains("started on trial 2 times"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Trial::of(&root, &rec).boots, MAX_TRIAL_BOOTS);
    }

    #[test]
    fn a_start_through_another_path_never_runs_the_trial() {
        let (_d, root, rec) = root_at(Step::Proving {
            since_ms: 1,
            starts_before: None,
        });
        let versioned = rec.from.clone().unwrap().binary;
        match decide(&root, &versioned) {
            Launch::RunThis(why) => assert!(why.contains("not through"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Trial::of(&root, &rec).boots, 0, "nothing counted");
    }

    #[test]
    fn the_known_good_version_runs_outside_the_trial() {
        for step in [
            Step::Staged,
            Step::RollBack,
            Step::ProvingRollback { since_ms: 1 },
            Step::Done,
        ] {
            let (_d, root, _) = root_at(step.clone());
            assert_eq!(
                decide(&root, &through_current(&root)),
                Launch::RunThis(String::new()),
                "{step:?}"
            );
        }
    }

    #[test]
    fn a_proven_version_being_committed_runs_uncounted() {
        let (_d, root, rec) = root_at(Step::Committing);
        for _ in 0..3 {
            assert!(matches!(
                decide(&root, &through_current(&root)),
                Launch::Exec { .. }
            ));
        }
        assert_eq!(Trial::of(&root, &rec).boots, 0);
    }

    #[test]
    fn an_unreadable_record_runs_the_known_good_version() {
        let (_d, root, _) = root_at(Step::Armed);
        std::fs::write(root.update_path(), b"{ not json").unwrap();
        match decide(&root, &through_current(&root)) {
            Launch::RunThis(why) => assert!(why.contains("unreadable"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_new_arming_starts_the_count_again() {
        let (_d, root, mut rec) = root_at(Step::Armed);
        for _ in 0..MAX_TRIAL_BOOTS {
            decide(&root, &through_current(&root));
        }
        // The same release assigned again later (after `release unskip`): a new record.
        rec.started_ms = 2;
        rec.save(&root).unwrap();
        assert!(matches!(
            decide(&root, &through_current(&root)),
            Launch::Exec { .. }
        ));
        assert_eq!(Trial::of(&root, &rec).boots, 1);
    }
}
