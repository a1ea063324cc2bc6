//! The platform boundary: every read of `/proc` in the workspace (on macOS, of the
//! kernel's process information) lives below here.
//!
//! Linux reads `/proc` (`linux.rs`); macOS asks the kernel through `libproc` and
//! `sysctl` (`macos.rs`, with what it decodes in `xnu.rs`, pure and tested on every
//! OS); every other OS gets `unsupported.rs`. All three have the same functions with
//! the same signatures; `unsupported.rs`'s fail with
//! [`crate::ExecError::Unsupported`] (or answer `None`). Signals, sessions and
//! process groups are POSIX and live in [`crate::process`].
//!
//! Public readers: [`read_exe_link`], [`read_cwd_link`], [`read_cmdline`] and
//! [`list_pids`] (of any process: "gone" is `Ok(None)`, other failures name the pid
//! and file); [`self_exe`] and [`self_cgroup`] (this process); [`uptime`] and
//! [`boot_time_secs`] (the machine); [`clock_ticks_per_second`], the unit of a
//! process's start time (since [`boot_time_secs`]: clock ticks on Linux,
//! microseconds since launchd's start on macOS, see `macos.rs`).

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::*;
#[cfg(any(target_os = "macos", test))]
mod xnu;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod unsupported;
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub use unsupported::*;

/// The unit of a process's start time, per second. macOS: 1 000 000 (start times
/// are microseconds since launchd's start, see `macos.rs`).
#[cfg(target_os = "macos")]
pub fn clock_ticks_per_second() -> u64 {
    1_000_000
}

/// Whether a running process's executable image can be read as it runs (Linux:
/// `/proc/<pid>/exe` stays the loaded file even after it is replaced on disk). Where
/// it cannot (macOS: only the file now at the process's path), a digest taken now
/// says nothing of what runs: the digest measured when the process started is what
/// the file on disk is compared with.
pub const RUNNING_IMAGE_READABLE: bool = cfg!(target_os = "linux");

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, Linux's `USER_HZ`): the unit of a
/// process's start time in `/proc/<pid>/stat`. Asked once per process; 100 (what
/// Linux exports on every architecture) if the system does not say.
#[cfg(not(target_os = "macos"))]
pub fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the C library; no memory is passed.
        let n = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
        u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(100)
    })
}

/// The fields of `/proc/<pid>/stat` that Flotilla uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Field 2, without its parentheses (may contain spaces and parentheses).
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`, `T`, `X`…
    pub state: char,
    /// Field 5: process group id.
    pub pgrp: i32,
    /// Field 6: session id.
    pub session: i32,
    /// Field 22: start time in clock ticks since boot (macOS: microseconds since
    /// launchd's start; [`clock_ticks_per_second`] is the unit either way).
    pub start_time_ticks: u64,
}

impl ProcStat {
    /// Zombie (`Z`) or dead (`X`/`x`): exited, not yet (or being) reaped.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. `comm` is everything between the first `(`
/// and the LAST `)`, so names containing spaces or parentheses parse correctly.
pub(crate) fn parse_stat(text: &str) -> Result<ProcStat, String> {
    let open = text.find('(').ok_or("no `(` before comm")?;
    let close = text.rfind(')').ok_or("no `)` after comm")?;
    if close < open {
        return Err("`)` before `(`".into());
    }
    let comm = text[open + 1..close].to_string();
    // Fields after comm, starting with field 3 (state) at index 0.
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |n: usize| -> Result<&str, String> {
        rest.get(n - 3)
            .copied()
            .ok_or_else(|| format!("field {n} missing"))
    };
    let state = field(3)?.chars().next().ok_or("empty state field")?;
    let pgrp = field(5)?
        .parse()
        .map_err(|e| format!("field 5 (pgrp): {e}"))?;
    let session = field(6)?
        .parse()
        .map_err(|e| format!("field 6 (session): {e}"))?;
    let start_time_ticks = field(22)?
        .parse()
        .map_err(|e| format!("field 22 (starttime): {e}"))?;
    Ok(ProcStat {
        comm,
        state,
        pgrp,
        session,
        start_time_ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_ticks_are_what_the_system_says() {
        let n = clock_ticks_per_second();
        assert!((1..=1_000_000).contains(&n), "{n}");
        assert_eq!(clock_ticks_per_second(), n);
    }

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let text = "4242 (evil) (name ) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "evil) (name ) x");
        assert_eq!(s.state, 'S');
        assert_eq!(s.pgrp, 4242);
        assert_eq!(s.session, 4242);
        assert_eq!(s.start_time_ticks, 987654);
        assert!(!s.is_dead());
        assert!(parse_stat("12 (x) S 1").is_err());
        assert!(parse_stat("garbage").is_err());
    }
}
