//! A launchd job loaded by hand as the prior owner: recognised by the
//! `XPC_SERVICE_NAME=<label>` launchd puts in every job's environment, confirmed by
//! `launchctl print <domain>/<label>` naming the same pid (the domain is the
//! process's user's: `system` for root, `gui/<uid>` otherwise); stopped by
//! `launchctl bootout` (which unloads it and keeps its plist on disk), proven
//! unloaded; restored by `launchctl bootstrap <domain> <plist>`, proven by `print`
//! showing a process again. Blocking: it runs `launchctl`.

use super::record::{PriorJob, PriorProcess};
use crate::error::ExecError;
use crate::launchctl::{self, ServiceInfo};
use std::time::{Duration, Instant};

/// `launchctl ARGS`, its stdout.
fn ctl(label: &str, args: &[String]) -> Result<String, ExecError> {
    let program = crate::adapter::launchd::Launchd::from_env().launchctl;
    crate::adapter::run_owner_command(label, &program, args)
}

/// `launchctl print` of `domain`/`label`; `None` when launchd does not know it
/// (launchctl exits 113, "could not find service").
fn print(domain: &str, label: &str) -> Result<Option<ServiceInfo>, ExecError> {
    match ctl(
        label,
        &["print".into(), launchctl::service_target(domain, label)],
    ) {
        Ok(text) => Ok(Some(launchctl::parse_print(&text))),
        Err(ExecError::OwnerCommand {
            status: Some(113), ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The launchd job `process` runs as, when it is one that launchd knows here.
pub fn job_of(process: &PriorProcess) -> Option<PriorJob> {
    if crate::adapter::launchd::unavailable().is_some() {
        return None;
    }
    let label = crate::sys::environ_var(process.pid, "XPC_SERVICE_NAME")
        .filter(|l| !l.is_empty() && l != "0")?;
    let domain = launchctl::domain_target(process.uid);
    let info = print(&domain, &label).ok()??;
    if info.pid != Some(process.pid) {
        return None;
    }
    Some(PriorJob {
        label,
        domain,
        plist: info.path.unwrap_or_default(),
        program_arguments: info.arguments,
        pid: Some(process.pid),
        main: Some(process.clone()),
    })
}

/// Whether job `j` is loaded and has a process.
///
/// # Errors
/// `launchctl` could not be run or failed.
pub fn runs(j: &PriorJob) -> Result<bool, ExecError> {
    Ok(print(&j.domain, &j.label)?.is_some_and(|i| i.pid.is_some()))
}

/// `launchctl bootout <domain>/<label>`: the job is stopped and unloaded, its plist
/// kept; proven unloaded. One line saying what it did.
///
/// # Errors
/// `launchctl` failed, or the job is still loaded after.
pub fn stop(j: &PriorJob) -> Result<String, ExecError> {
    if print(&j.domain, &j.label)?.is_some() {
        ctl(
            &j.label,
            &[
                "bootout".into(),
                launchctl::service_target(&j.domain, &j.label),
            ],
        )?;
    }
    if print(&j.domain, &j.label)?.is_some() {
        return Err(ExecError::Adapter {
            component: j.label.clone(),
            message: format!("job {} is still loaded after `launchctl bootout`", j.label),
        });
    }
    Ok(format!(
        "`launchctl bootout {}`: unloaded, its plist {} kept",
        launchctl::service_target(&j.domain, &j.label),
        j.plist
    ))
}

/// `launchctl bootstrap <domain> <plist>` (unless it is loaded already), then waits
/// up to 10 s for the job's process; `j`'s pid updated. One line saying what it did.
///
/// # Errors
/// `launchctl` failed, or no process came.
pub fn restore(j: &mut PriorJob) -> Result<String, ExecError> {
    if print(&j.domain, &j.label)?.is_none() {
        ctl(
            &j.label,
            &["bootstrap".into(), j.domain.clone(), j.plist.clone()],
        )?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = print(&j.domain, &j.label)?.and_then(|i| i.pid) {
            j.pid = Some(pid);
            if let Some(main) = &mut j.main {
                main.pid = pid;
                main.start_time_ticks = crate::process_start_ticks(pid).unwrap_or_default();
            }
            return Ok(format!(
                "`launchctl bootstrap {} {}`: pid {pid}",
                j.domain, j.plist
            ));
        }
        if Instant::now() >= deadline {
            return Err(ExecError::Adapter {
                component: j.label.clone(),
                message: format!(
                    "job {} has no process 10 s after `launchctl bootstrap`",
                    j.label
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
