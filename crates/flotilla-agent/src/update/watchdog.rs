//! Starting the update watchdog (`flotilla agent update-watch`), detached from the
//! process that starts it ([`spawn_watchdog`]).

use super::{ReleaseSource, Updater};
use crate::record::{now_ms, UpdateRecord};
use crate::state::AgentDir;
use crate::supervisor::Supervisor;
use flotilla_release::InstallRoot;
use std::path::Path;

impl<S: ReleaseSource> Updater<S> {
    /// Starts the watchdog for `rec` ([`spawn_watchdog`]) and notes when.
    pub(super) fn spawn_watchdog(&self, rec: &UpdateRecord) -> std::io::Result<()> {
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
