//! Every OS but Linux and macOS (Windows, the BSDs…): the process readers are not
//! implemented; each fails with [`ExecError::Unsupported`] so callers report "not
//! implemented on this OS" instead of wrong facts.

use super::ProcStat;
use crate::ExecError;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;

fn unsupported(what: &'static str) -> ExecError {
    ExecError::Unsupported {
        what,
        os: std::env::consts::OS,
    }
}

pub(crate) fn proc_path(pid: u32, leaf: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{leaf}"))
}

pub(crate) fn read_stat(_pid: u32) -> Result<Option<ProcStat>, ExecError> {
    Err(unsupported("reading a process's start time"))
}

pub fn read_exe_link(_pid: u32) -> Result<Option<PathBuf>, ExecError> {
    Err(unsupported("reading a process's executable path"))
}

pub fn read_cwd_link(_pid: u32) -> Result<Option<PathBuf>, ExecError> {
    Err(unsupported("reading a process's working directory"))
}

pub(crate) fn open_exe_image(_pid: u32) -> Result<Option<std::fs::File>, ExecError> {
    Err(unsupported("hashing a process's running executable"))
}

pub fn read_cmdline(_pid: u32) -> Result<Option<Vec<u8>>, ExecError> {
    Err(unsupported("reading a process's argv"))
}

pub(crate) fn read_comm(_pid: u32) -> Option<String> {
    None
}

pub fn list_pids() -> Result<Vec<u32>, ExecError> {
    Err(unsupported("listing processes"))
}

pub(crate) fn group_members(_pgid: i32) -> Result<Vec<u32>, ExecError> {
    Err(unsupported("listing a process group's members"))
}

pub(crate) fn tcp_listeners(
    _ports: Option<&HashSet<u16>>,
) -> Result<Vec<(SocketAddr, u64)>, ExecError> {
    Err(unsupported("listing TCP listeners"))
}

pub(crate) fn socket_owners(_inodes: &HashSet<u64>) -> Result<HashMap<u64, Vec<u32>>, ExecError> {
    Err(unsupported("finding a socket's owner"))
}

pub(crate) fn environ_var(_pid: u32, _key: &str) -> Option<String> {
    None
}

pub(crate) fn read_environ(_pid: u32) -> Option<Vec<(String, String)>> {
    None
}

pub(crate) fn read_uid(_pid: u32) -> Option<u32> {
    None
}

pub(crate) fn read_cgroup(_pid: u32) -> Option<String> {
    None
}

pub fn self_exe() -> Option<PathBuf> {
    None
}

pub fn self_cgroup() -> Option<String> {
    None
}

pub fn uptime() -> Option<std::time::Duration> {
    None
}

pub fn boot_time_secs() -> Option<u64> {
    None
}
