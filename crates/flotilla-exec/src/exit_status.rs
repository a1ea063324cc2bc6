//! How a process ended, in words.

use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// "exit status 1", "killed by SIGKILL", "killed by SIGSEGV (core dumped)".
pub fn describe_exit(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    if let Some(sig) = status.signal() {
        let name = Signal::try_from(sig)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {sig}"));
        let core = if status.core_dumped() {
            " (core dumped)"
        } else {
            ""
        };
        return format!("killed by {name}{core}");
    }
    format!("{status}")
}
