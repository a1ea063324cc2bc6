//! Linux: process facts from `/proc`.
//!
//! Every reader distinguishes "the process is gone" (`Ok(None)`: `ENOENT`/`ESRCH`,
//! which is what `/proc/<pid>/...` gives once a process has exited) from real errors
//! (e.g. `EACCES` for another user's process), which name the pid and file.

use super::{parse_stat, ProcStat};
use crate::ExecError;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// Whether an IO error means "no such process (any more)".
fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH)
}

fn proc_err(pid: u32, path: PathBuf, source: io::Error) -> ExecError {
    ExecError::Proc { pid, path, source }
}

/// `/proc/<pid>/<leaf>`.
pub(crate) fn proc_path(pid: u32, leaf: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{leaf}"))
}

/// Reads and parses `/proc/<pid>/stat`; `Ok(None)` when the process does not exist.
pub(crate) fn read_stat(pid: u32) -> Result<Option<ProcStat>, ExecError> {
    let path = proc_path(pid, "stat");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            parse_stat(&text)
                .map(Some)
                .map_err(|why| ExecError::ProcFormat { pid, path, why })
        }
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(proc_err(pid, path, e)),
    }
}

/// `readlink /proc/<pid>/exe` (may end in `" (deleted)"`); `Ok(None)` when gone or
/// when the process has no executable (zombie, kernel thread).
pub fn read_exe_link(pid: u32) -> Result<Option<PathBuf>, ExecError> {
    let path = proc_path(pid, "exe");
    match std::fs::read_link(&path) {
        Ok(p) => Ok(Some(p)),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(proc_err(pid, path, e)),
    }
}

/// `readlink /proc/<pid>/cwd`: the process's working directory; `Ok(None)` when gone.
pub fn read_cwd_link(pid: u32) -> Result<Option<PathBuf>, ExecError> {
    let path = proc_path(pid, "cwd");
    match std::fs::read_link(&path) {
        Ok(p) => Ok(Some(p)),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(proc_err(pid, path, e)),
    }
}

/// Opens the executable image the process is running (`/proc/<pid>/exe`: the inode
/// actually mapped, even if the file on disk was replaced or deleted).
pub(crate) fn open_exe_image(pid: u32) -> Result<Option<std::fs::File>, ExecError> {
    let path = proc_path(pid, "exe");
    match std::fs::File::open(&path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(proc_err(pid, path, e)),
    }
}

/// The raw bytes of `/proc/<pid>/cmdline` (NUL-terminated argv); `Ok(None)` when gone.
pub fn read_cmdline(pid: u32) -> Result<Option<Vec<u8>>, ExecError> {
    let path = proc_path(pid, "cmdline");
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if is_gone(&e) => Ok(None),
        Err(e) => Err(proc_err(pid, path, e)),
    }
}

/// `/proc/<pid>/comm` without its newline, if readable.
pub(crate) fn read_comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(proc_path(pid, "comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// Every pid currently in `/proc`.
pub fn list_pids() -> Result<Vec<u32>, ExecError> {
    let dir = std::fs::read_dir("/proc").map_err(|source| ExecError::Io {
        path: "/proc".into(),
        source,
    })?;
    Ok(dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect())
}

/// Pids of the live (not zombie) processes whose process group is `pgid`.
pub(crate) fn group_members(pgid: i32) -> Result<Vec<u32>, ExecError> {
    let mut out = Vec::new();
    for pid in list_pids()? {
        // A process may vanish between listing and reading, or be unreadable; only
        // `stat` is needed and it is world-readable.
        if let Ok(Some(st)) = read_stat(pid) {
            if st.pgrp == pgid && !st.is_dead() {
                out.push(pid);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Parses an address as printed in `/proc/net/tcp{,6}` (`0100007F:1F90`): the IP as
/// native-endian 32-bit words in hex, the port in hex.
fn parse_hex_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(&ip[i * 8..i * 8 + 8])?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Listening sockets (state `0A`) from `/proc/net/tcp` and `/proc/net/tcp6`, on one of
/// `ports` (every port when `None`): (local address, socket inode). A missing `tcp6`
/// (IPv6 disabled) is not an error.
pub(crate) fn tcp_listeners(
    ports: Option<&HashSet<u16>>,
) -> Result<Vec<(SocketAddr, u64)>, ExecError> {
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound && file.ends_with('6') => continue,
            Err(source) => {
                return Err(ExecError::Io {
                    path: file.into(),
                    source,
                })
            }
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_ascii_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            if cols.len() < 10 || cols[3] != "0A" {
                continue;
            }
            let Some(addr) = parse_hex_addr(cols[1]) else {
                return Err(ExecError::ProcFormat {
                    pid: 0,
                    path: file.into(),
                    why: format!("bad local address `{}`", cols[1]),
                });
            };
            if ports.is_some_and(|p| !p.contains(&addr.port())) {
                continue;
            }
            let inode = cols[9].parse().unwrap_or(0);
            out.push((addr, inode));
        }
    }
    Ok(out)
}

/// For each socket inode, the pids holding a file descriptor to it (`/proc/*/fd/*`
/// links `socket:[inode]`). Processes whose `fd` directory is unreadable (another user,
/// without privileges) are skipped: their sockets stay unattributed.
pub(crate) fn socket_owners(inodes: &HashSet<u64>) -> Result<HashMap<u64, Vec<u32>>, ExecError> {
    let mut owners: HashMap<u64, Vec<u32>> = HashMap::new();
    if inodes.is_empty() {
        return Ok(owners);
    }
    for pid in list_pids()? {
        let Ok(fds) = std::fs::read_dir(proc_path(pid, "fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let Some(inode) = socket_inode(&target) else {
                continue;
            };
            if inodes.contains(&inode) {
                let pids = owners.entry(inode).or_default();
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
    }
    Ok(owners)
}

fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The value of `key` in a process's initial environment (`/proc/<pid>/environ`),
/// `None` when unset or unreadable (another user's process, or gone).
pub(crate) fn environ_var(pid: u32, key: &str) -> Option<String> {
    let bytes = std::fs::read(proc_path(pid, "environ")).ok()?;
    let prefix = format!("{key}=");
    bytes
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A process's whole initial environment (`/proc/<pid>/environ`), in its order,
/// lossily decoded; `None` when gone or unreadable (another user's process).
pub(crate) fn read_environ(pid: u32) -> Option<Vec<(String, String)>> {
    let bytes = std::fs::read(proc_path(pid, "environ")).ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
}

/// The real user id of a process (the first `Uid:` field of `/proc/<pid>/status`);
/// `None` when gone or unreadable.
pub(crate) fn read_uid(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_ascii_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The unified (v2) control group of a process: the path of its `0::` line in
/// `/proc/<pid>/cgroup` (e.g. `/system.slice/llama.service`); `None` when gone,
/// unreadable, or on a v1-only machine.
pub(crate) fn read_cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(proc_path(pid, "cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// `readlink /proc/self/exe`: the executable this process runs (may end in
/// `" (deleted)"`); `None` when it cannot be read.
pub fn self_exe() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/exe").ok()
}

/// The text of `/proc/self/cgroup` (this process's control groups); `None` when it
/// cannot be read.
pub fn self_cgroup() -> Option<String> {
    std::fs::read_to_string("/proc/self/cgroup").ok()
}

/// How long the machine has been up: the first field of `/proc/uptime` (to the
/// hundredth of a second); `None` when it cannot be read.
pub fn uptime() -> Option<std::time::Duration> {
    let t = std::fs::read_to_string("/proc/uptime").ok()?;
    let up: f64 = t.split_ascii_whitespace().next()?.parse().ok()?;
    std::time::Duration::try_from_secs_f64(up).ok()
}

/// When the machine booted, in whole seconds since the epoch: `btime` of
/// `/proc/stat`; `None` when it cannot be read.
pub fn boot_time_secs() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/stat").ok()?;
    t.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_addresses() {
        // 127.0.0.1:8080 as printed on a little-endian machine.
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_hex_addr("0100007F:1F90"),
                Some("127.0.0.1:8080".parse().unwrap())
            );
            assert_eq!(
                parse_hex_addr("00000000000000000000000001000000:0050"),
                Some("[::1]:80".parse().unwrap())
            );
        }
        assert_eq!(parse_hex_addr("zz:1"), None);
        assert_eq!(socket_inode(Path::new("socket:[1234]")), Some(1234));
        assert_eq!(socket_inode(Path::new("pipe:[1234]")), None);
    }
}
