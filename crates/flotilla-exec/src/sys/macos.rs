//! macOS: process facts from the kernel through `libproc` (`sysctl(KERN_PROC_PID)`,
//! `proc_pidpath`, `proc_listpids`, `proc_pidinfo`, `proc_pidfdinfo`) and
//! `sysctl(KERN_PROCARGS2)` for argv and environment, decoded in [`super::xnu`].
//!
//! As on Linux, "the process is gone" is `Ok(None)` and other failures name the pid
//! and what was read. Who may read what differs from `/proc`:
//! - start time, state, process group, command name and real uid (`kinfo_proc`),
//!   session (`getsid`) and executable path (`proc_pidpath`): every process, for
//!   every user, like `/proc/<pid>/stat`;
//! - working directory, argv and environment (`KERN_PROCARGS2`) and open descriptors
//!   (so TCP listeners and their owners): this user's processes only, root's all.
//!   Another user's working directory or argv is an error, its environment `None`,
//!   its sockets are not listed at all (where Linux lists them without an owner).
//!
//! **Start time.** `ProcStat::start_time_ticks` is in microseconds
//! ([`super::clock_ticks_per_second`] is 1 000 000 here) from launchd's start
//! (pid 1) to the process's, both as the kernel recorded them when each was created
//! (`kinfo_proc`'s `p_starttime`, a wall-clock time never changed afterwards), so a
//! process's start time equals itself at every later measurement. Not from
//! `kern.boottime`: macOS re-derives that as now minus uptime and it moves with every
//! clock correction, so a difference taken against it would not be exact. launchd's
//! start is this boot's fixed origin; [`boot_time_secs`] and [`uptime`] count from
//! it too, so `boot_time_secs() + ticks / clock_ticks_per_second()` is when the
//! process started, as on Linux. A process recorded as starting before launchd (the
//! clock was set back since boot) has no start time: [`read_stat`] fails for it
//! rather than give two processes one value.
//!
//! **Executable image.** macOS has no `/proc/<pid>/exe` to open the image a process
//! runs: [`open_exe_image`] opens the file now at its path (`proc_pidpath`), so an
//! executable replaced on disk under a running process hashes as the new file.
//! There are no control groups: [`read_cgroup`] and [`self_cgroup`] are `None`.

use super::xnu::{self, HeldTcp, ProcArgs};
use super::ProcStat;
use crate::ExecError;
use libproc::libproc::file_info::{pidfdinfo, ListFDs, ProcFDType};
use libproc::libproc::kinfo::KinfoProc;
use libproc::libproc::net_info::{SocketFDInfo, SocketInfoKind, TcpSIState};
use libproc::libproc::proc_pid::{
    kproc_info_raw, listpidinfo, pidinfo, pidpath, PIDInfo, PidInfoFlavor,
};
use libproc::processes::{pids_by_type, ProcFilter};
use nix::errno::Errno;
use nix::libc;
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

/// What a fact is read with, named in errors: `kinfo_proc of pid 42`.
pub(crate) fn proc_path(pid: u32, leaf: &str) -> PathBuf {
    PathBuf::from(format!("{leaf} of pid {pid}"))
}

fn proc_err(pid: u32, leaf: &str, source: io::Error) -> ExecError {
    ExecError::Proc {
        pid,
        path: proc_path(pid, leaf),
        source,
    }
}

/// A `libproc` failure as an IO error, with its errno when the message has one.
fn libproc_err(pid: u32, leaf: &str, message: String) -> ExecError {
    let source = match xnu::errno_in(&message) {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::other(message),
    };
    proc_err(pid, leaf, source)
}

fn raw_pid(pid: u32) -> Option<i32> {
    i32::try_from(pid).ok().filter(|&p| p > 0)
}

/// Whether a process has `pid` (`kill(pid, 0)`: only `ESRCH` says no), zombies
/// included.
fn exists(pid: u32) -> bool {
    raw_pid(pid).is_some_and(|p| {
        !matches!(
            nix::sys::signal::kill(Pid::from_raw(p), None),
            Err(Errno::ESRCH)
        )
    })
}

/// Whether `pid` is gone or exited (a zombie, or exiting): what a failed read of a
/// fact only a live process has means.
fn gone_or_dead(pid: u32) -> bool {
    match read_stat(pid) {
        Ok(None) => true,
        Ok(Some(st)) => st.is_dead(),
        Err(_) => false,
    }
}

/// `sysctl(KERN_PROC_PID)`; `Ok(None)` when no process has `pid`.
fn kinfo(pid: u32) -> Result<Option<KinfoProc>, ExecError> {
    let Some(p) = raw_pid(pid) else {
        return Ok(None);
    };
    match kproc_info_raw(p) {
        Ok(k) => Ok(Some(k)),
        Err(m) if m.starts_with("No process found") || !exists(pid) => Ok(None),
        Err(m) => Err(libproc_err(pid, "kinfo_proc", m)),
    }
}

/// `kinfo_proc`'s start time (`p_starttime`, the `p_un` union's timeval member).
fn started(k: &KinfoProc) -> (i64, i32) {
    (k.kp_proc.p_un.tv_sec, k.kp_proc.p_un.tv_usec)
}

/// launchd's start: this boot's origin for start times, read once per process.
fn origin() -> Result<(i64, i32), ExecError> {
    static ORIGIN: OnceLock<(i64, i32)> = OnceLock::new();
    if let Some(o) = ORIGIN.get() {
        return Ok(*o);
    }
    let k = kinfo(1)?.ok_or_else(|| {
        proc_err(
            1,
            "kinfo_proc",
            io::Error::other("launchd (pid 1) is not listed"),
        )
    })?;
    Ok(*ORIGIN.get_or_init(|| started(&k)))
}

/// `kinfo_proc` and `getsid` as the fields of Linux's `/proc/<pid>/stat`;
/// `Ok(None)` when the process does not exist.
pub(crate) fn read_stat(pid: u32) -> Result<Option<ProcStat>, ExecError> {
    let Some(k) = kinfo(pid)? else {
        return Ok(None);
    };
    let start_time_ticks =
        xnu::micros_between(origin()?, started(&k)).ok_or_else(|| ExecError::ProcFormat {
            pid,
            path: proc_path(pid, "kinfo_proc"),
            why: "it started before launchd by the wall clock (set back since boot): \
                  no start time since boot"
                .into(),
        })?;
    let state = xnu::state_letter(k.kp_proc.p_stat, k.kp_proc.p_flag);
    let session = match raw_pid(pid).map(|p| nix::unistd::getsid(Some(Pid::from_raw(p)))) {
        Some(Ok(s)) => s.as_raw(),
        // A zombie has left its session.
        _ if matches!(state, 'Z' | 'X') => 0,
        Some(Err(Errno::ESRCH)) | None => return Ok(None),
        Some(Err(e)) => return Err(proc_err(pid, "getsid", e.into())),
    };
    Ok(Some(ProcStat {
        comm: xnu::c_chars(&k.kp_proc.p_comm),
        state,
        pgrp: k.kp_eproc.e_pgid,
        session,
        start_time_ticks,
    }))
}

/// `proc_pidpath`: the executable the process runs; `Ok(None)` when gone or when
/// the process has no executable (zombie, `kernel_task`).
pub fn read_exe_link(pid: u32) -> Result<Option<PathBuf>, ExecError> {
    let Some(p) = raw_pid(pid) else {
        return Ok(None);
    };
    match pidpath(p) {
        Ok(path) => Ok(Some(PathBuf::from(path))),
        Err(_) if gone_or_dead(pid) => Ok(None),
        Err(m) => Err(libproc_err(pid, "proc_pidpath", m)),
    }
}

/// `proc_pidinfo(PROC_PIDVNODEPATHINFO)`'s answer.
#[repr(transparent)]
struct VnodePaths(libc::proc_vnodepathinfo);

impl PIDInfo for VnodePaths {
    fn flavor() -> PidInfoFlavor {
        PidInfoFlavor::VNodePathInfo
    }
}

/// The process's working directory (`proc_pidinfo(PROC_PIDVNODEPATHINFO)`);
/// `Ok(None)` when gone.
pub fn read_cwd_link(pid: u32) -> Result<Option<PathBuf>, ExecError> {
    let Some(p) = raw_pid(pid) else {
        return Ok(None);
    };
    match pidinfo::<VnodePaths>(p, 0) {
        Ok(v) => {
            let path = v.0.pvi_cdir.vip_path.as_flattened();
            Ok(Some(PathBuf::from(xnu::c_chars(path))))
        }
        Err(_) if gone_or_dead(pid) => Ok(None),
        Err(m) => Err(libproc_err(pid, "PROC_PIDVNODEPATHINFO", m)),
    }
}

/// Opens the file now at the process's executable path (see the module's note: not
/// necessarily the image it runs, if that file was replaced since).
pub(crate) fn open_exe_image(pid: u32) -> Result<Option<std::fs::File>, ExecError> {
    let Some(path) = read_exe_link(pid)? else {
        return Ok(None);
    };
    match std::fs::File::open(&path) {
        Ok(f) => Ok(Some(f)),
        Err(_) if gone_or_dead(pid) => Ok(None),
        Err(source) => Err(ExecError::Proc { pid, path, source }),
    }
}

/// The largest `KERN_PROCARGS2` answer (`kern.argmax`), asked once per process.
fn arg_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        let mut mib = [libc::CTL_KERN, libc::KERN_ARGMAX];
        let mut max: libc::c_int = 0;
        let mut size = std::mem::size_of::<libc::c_int>();
        // SAFETY: `max` is a c_int and `size` says so; no new value is passed.
        let rc = unsafe {
            libc::sysctl(
                mib.as_mut_ptr(),
                2,
                (&raw mut max).cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        usize::try_from(max)
            .ok()
            .filter(|&m| rc == 0 && m > 0)
            .unwrap_or(1 << 20)
    })
}

/// `sysctl(KERN_PROCARGS2)`, decoded; `Ok(None)` when gone or exited (the kernel
/// answers `EINVAL` both for those and for another user's process).
fn procargs(pid: u32) -> Result<Option<ProcArgs>, ExecError> {
    let Some(p) = raw_pid(pid) else {
        return Ok(None);
    };
    let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, p];
    let mut buf = vec![0u8; arg_max()];
    let mut size = buf.len();
    // SAFETY: `buf` has `size` writable bytes; the kernel writes at most that many
    // and sets `size` to what it wrote.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            3,
            buf.as_mut_ptr().cast(),
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        let mut e = io::Error::last_os_error();
        if gone_or_dead(pid) {
            return Ok(None);
        }
        if e.raw_os_error() == Some(libc::EINVAL) {
            e = io::Error::new(
                io::ErrorKind::PermissionDenied,
                "refused (EINVAL): another user's or a protected process",
            );
        }
        return Err(proc_err(pid, "KERN_PROCARGS2", e));
    }
    buf.truncate(size);
    xnu::parse_procargs2(&buf)
        .map(Some)
        .map_err(|why| ExecError::ProcFormat {
            pid,
            path: proc_path(pid, "KERN_PROCARGS2"),
            why,
        })
}

/// argv as Linux's `/proc/<pid>/cmdline` holds it (each argument NUL-terminated),
/// from `KERN_PROCARGS2`; `Ok(None)` when gone.
pub fn read_cmdline(pid: u32) -> Result<Option<Vec<u8>>, ExecError> {
    Ok(procargs(pid)?.map(|a| a.cmdline()))
}

/// The process's command name (`kinfo_proc`'s `p_comm`, at most 16 bytes), if it
/// can be read.
pub(crate) fn read_comm(pid: u32) -> Option<String> {
    read_stat(pid).ok().flatten().map(|s| s.comm)
}

/// Every pid (`proc_listpids(PROC_ALL_PIDS)`), without `kernel_task`'s 0.
pub fn list_pids() -> Result<Vec<u32>, ExecError> {
    let pids = pids_by_type(ProcFilter::All).map_err(|source| ExecError::Io {
        path: "proc_listpids".into(),
        source,
    })?;
    Ok(pids.into_iter().filter(|&p| p != 0).collect())
}

/// Pids of the live (not zombie) processes whose process group is `pgid`
/// (`proc_listpids(PROC_PGRP_ONLY)`).
pub(crate) fn group_members(pgid: i32) -> Result<Vec<u32>, ExecError> {
    let Ok(pgrpid) = u32::try_from(pgid) else {
        return Ok(Vec::new());
    };
    let pids =
        pids_by_type(ProcFilter::ByProgramGroup { pgrpid }).map_err(|source| ExecError::Io {
            path: "proc_listpids".into(),
            source,
        })?;
    let mut out: Vec<u32> = pids
        .into_iter()
        .filter(|&p| p != 0)
        .filter(|&p| matches!(read_stat(p), Ok(Some(st)) if st.pgrp == pgid && !st.is_dead()))
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The TCP sockets `pid` holds descriptors to (`proc_pidinfo(PROC_PIDLISTFDS)`, then
/// `proc_pidfdinfo(PROC_PIDFDSOCKETINFO)` for each socket); nothing when its
/// descriptors cannot be listed (gone, or another user's).
fn held_tcp(pid: u32, out: &mut Vec<HeldTcp>) {
    let Some(p) = raw_pid(pid) else {
        return;
    };
    let Ok(bsd) = pidinfo::<libproc::libproc::bsd_info::BSDInfo>(p, 0) else {
        return;
    };
    let Ok(fds) = listpidinfo::<ListFDs>(p, bsd.pbi_nfiles as usize) else {
        return;
    };
    for fd in fds {
        if !matches!(ProcFDType::from(fd.proc_fdtype), ProcFDType::Socket) {
            continue;
        }
        let Ok(info) = pidfdinfo::<SocketFDInfo>(p, fd.proc_fd) else {
            continue;
        };
        let si = &info.psi;
        if !matches!(SocketInfoKind::from(si.soi_kind), SocketInfoKind::Tcp) {
            continue;
        }
        // SAFETY: `soi_kind` is SOCKINFO_TCP, so the kernel filled `pri_tcp`.
        let tcp = unsafe { si.soi_proto.pri_tcp };
        let ini = tcp.tcpsi_ini;
        let v6 = si.soi_family == libc::AF_INET6;
        // SAFETY: both members of `insi_laddr` are plain bytes of the same storage;
        // which one is meant is `v6`.
        let (v4, v6_bytes) = unsafe {
            (
                ini.insi_laddr.ina_46.i46a_addr4.s_addr.to_ne_bytes(),
                ini.insi_laddr.ina_6.s6_addr,
            )
        };
        out.push(HeldTcp {
            pid,
            socket: si.soi_so,
            local: xnu::local_address(v6, ini.insi_lport, v4, v6_bytes),
            listening: matches!(TcpSIState::from(tcp.tcpsi_state), TcpSIState::Listen),
        });
    }
}

/// Every TCP socket held by a process whose descriptors this user may list.
fn all_held_tcp() -> Result<Vec<HeldTcp>, ExecError> {
    let mut out = Vec::new();
    for pid in list_pids()? {
        held_tcp(pid, &mut out);
    }
    Ok(out)
}

/// Listening TCP sockets on one of `ports` (every port when `None`): (local address,
/// the kernel's name for the socket). Only the sockets of processes whose
/// descriptors this user may list (see the module's note).
pub(crate) fn tcp_listeners(
    ports: Option<&HashSet<u16>>,
) -> Result<Vec<(SocketAddr, u64)>, ExecError> {
    Ok(xnu::listeners(&all_held_tcp()?, ports))
}

/// For each socket (as [`tcp_listeners`] names it), the pids holding a descriptor to
/// it.
pub(crate) fn socket_owners(sockets: &HashSet<u64>) -> Result<HashMap<u64, Vec<u32>>, ExecError> {
    if sockets.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(xnu::owners(&all_held_tcp()?, sockets))
}

/// The value of `key` in a process's initial environment (`KERN_PROCARGS2`), `None`
/// when unset or unreadable (another user's process, or gone).
pub(crate) fn environ_var(pid: u32, key: &str) -> Option<String> {
    procargs(pid).ok().flatten()?.env_var(key)
}

/// A process's whole initial environment (`KERN_PROCARGS2`), in its order, lossily
/// decoded; `None` when gone or unreadable (another user's process).
pub(crate) fn read_environ(pid: u32) -> Option<Vec<(String, String)>> {
    Some(procargs(pid).ok().flatten()?.env_pairs())
}

/// The real user id of a process (`kinfo_proc`'s `p_ruid`); `None` when gone.
pub(crate) fn read_uid(pid: u32) -> Option<u32> {
    kinfo(pid).ok().flatten().map(|k| k.kp_eproc.e_pcred.p_ruid)
}

/// Control groups are Linux's: always `None`.
pub(crate) fn read_cgroup(_pid: u32) -> Option<String> {
    None
}

/// The executable this process runs (`proc_pidpath` of itself: the file's path,
/// symbolic links resolved); `None` when it cannot be read.
pub fn self_exe() -> Option<PathBuf> {
    read_exe_link(std::process::id()).ok().flatten()
}

/// Control groups are Linux's: always `None`.
pub fn self_cgroup() -> Option<String> {
    None
}

/// launchd's start as a wall-clock time.
fn origin_time() -> Option<std::time::SystemTime> {
    let (s, us) = origin().ok()?;
    let since_epoch = std::time::Duration::from_secs(u64::try_from(s).ok()?)
        + std::time::Duration::from_micros(u64::try_from(us).ok()?);
    Some(std::time::UNIX_EPOCH + since_epoch)
}

/// How long the machine has been up, counted from launchd's start (the origin of
/// start times here; see the module's note); `None` when it cannot be read.
pub fn uptime() -> Option<std::time::Duration> {
    std::time::SystemTime::now()
        .duration_since(origin_time()?)
        .ok()
}

/// When the machine booted, in whole seconds since the epoch: launchd's start (the
/// origin of start times here; see the module's note); `None` when it cannot be
/// read.
pub fn boot_time_secs() -> Option<u64> {
    u64::try_from(origin().ok()?.0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_as_the_kernel_sees_it() {
        let me = std::process::id();
        let st = read_stat(me).unwrap().unwrap();
        assert!(!st.is_dead(), "{st:?}");
        assert_eq!(st.pgrp, nix::unistd::getpgrp().as_raw());
        assert_eq!(
            read_stat(me).unwrap().unwrap().start_time_ticks,
            st.start_time_ticks
        );
        assert_eq!(
            self_exe(),
            std::env::current_exe()
                .ok()
                .and_then(|p| p.canonicalize().ok())
        );
        assert_eq!(read_cwd_link(me).unwrap(), std::env::current_dir().ok());
        let argv: Vec<u8> = std::env::args_os()
            .flat_map(|a| a.into_encoded_bytes().into_iter().chain([0]))
            .collect();
        assert_eq!(read_cmdline(me).unwrap().unwrap(), argv);
        assert!(list_pids().unwrap().contains(&me));
        assert!(group_members(st.pgrp).unwrap().contains(&me));
        assert!(uptime().is_some() && boot_time_secs().is_some());
    }
}
