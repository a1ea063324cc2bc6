//! Listening TCP sockets and the processes behind them, from `/proc` (through
//! [`crate::process::all_listeners`] and the [`crate::sys`] readers): each process
//! with the addresses it listens on, and the facts a proposal needs — executable,
//! command line, working directory, user, start time, control group.

use super::{DiscoverError, ProcessFacts};
use crate::sys;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// A process that listens, and where.
#[derive(Debug, Clone)]
pub struct Listening {
    /// The process (the socket's owner that started first, when several hold it:
    /// a server's workers share its socket).
    pub process: ProcessFacts,
    /// The addresses it listens on, sorted, each once.
    pub addresses: Vec<SocketAddr>,
}

/// What [`listening`] found: processes with their addresses, and sockets whose owner
/// this user cannot see.
#[derive(Debug, Clone, Default)]
pub struct Sockets {
    /// Listening processes, by pid.
    pub processes: Vec<Listening>,
    /// Sockets whose owner is not visible (another user's process, without privileges).
    pub unowned: Vec<SocketAddr>,
    /// How many listening sockets were read.
    pub sockets: usize,
}

/// Every listening TCP socket on one of `ports` (all when empty), grouped by the
/// process that owns it.
///
/// # Errors
/// [`DiscoverError::Sockets`]: `/proc/net/tcp` unreadable or malformed, or not Linux.
pub fn listening(ports: &[u16]) -> Result<Sockets, DiscoverError> {
    let all = if ports.is_empty() {
        crate::process::all_listeners()
    } else {
        crate::process::listeners_on(ports).map(|m| m.into_values().flatten().collect())
    }
    .map_err(DiscoverError::Sockets)?;
    // Each address with the pids holding it.
    let mut by_address: BTreeMap<SocketAddr, Vec<u32>> = BTreeMap::new();
    for l in &all {
        let pids = by_address.entry(l.address).or_default();
        if let Some(pid) = l.pid {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    let mut out = Sockets {
        sockets: by_address.len(),
        ..Sockets::default()
    };
    let mut by_pid: BTreeMap<u32, Vec<SocketAddr>> = BTreeMap::new();
    for (address, pids) in by_address {
        match first_started(&pids) {
            Some(pid) => by_pid.entry(pid).or_default().push(address),
            None => out.unowned.push(address),
        }
    }
    for (pid, addresses) in by_pid {
        // Gone since the sockets were read: nothing to propose.
        if let Some(process) = process_facts(pid) {
            out.processes.push(Listening { process, addresses });
        }
    }
    Ok(out)
}

/// Of several pids holding one socket, the one that started first (ties: the lowest
/// pid): a server's master rather than its forked workers.
fn first_started(pids: &[u32]) -> Option<u32> {
    pids.iter()
        .copied()
        .min_by_key(|&pid| (crate::process_start_ticks(pid).unwrap_or(u64::MAX), pid))
}

/// What `/proc` says of `pid`; `None` when it is gone (or not Linux).
pub fn process_facts(pid: u32) -> Option<ProcessFacts> {
    let stat = sys::read_stat(pid).ok().flatten()?;
    let argv = sys::read_cmdline(pid)
        .ok()
        .flatten()
        .filter(|raw| !raw.is_empty())
        .map(|raw| {
            raw.strip_suffix(&[0])
                .unwrap_or(&raw)
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let uid = sys::read_uid(pid);
    let user = uid.and_then(|u| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u))
            .ok()
            .flatten()
            .map(|u| u.name)
    });
    let started = sys::boot_time_secs().map(|boot| {
        let secs = boot + stat.start_time_ticks / sys::clock_ticks_per_second();
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
        )
        .to_string()
    });
    Some(ProcessFacts {
        pid,
        exe: sys::read_exe_link(pid)
            .ok()
            .flatten()
            .map(|p| p.display().to_string()),
        argv,
        comm: stat.comm,
        cwd: sys::read_cwd_link(pid)
            .ok()
            .flatten()
            .map(|p| p.display().to_string()),
        uid,
        user,
        started,
        start_time_ticks: stat.start_time_ticks,
        cgroup: sys::read_cgroup(pid),
    })
}
