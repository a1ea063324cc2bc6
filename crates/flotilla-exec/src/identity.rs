//! Runtime identity: what a process really is, measured from the OS.
//!
//! A pid alone names nothing durable: pids are reused. A [`RuntimeIdentity`] pins a
//! process down by pid **and** start time (clock ticks since boot, which a reused pid
//! cannot share with its predecessor) **and** executable path, and adds the SHA-256
//! of the executable image actually running and a digest of its argv, so status can
//! say what runs (DESIGN.md invariant 5, "identity before signal", and the
//! `runtime_identity` status signal).
//!
//! - [`measure`] reads an identity from the OS (`/proc` on Linux).
//! - [`matches()`] compares a recorded identity with a fresh measurement.
//! - [`program_files`] / [`program_file_change`]: for an interpreter (`python3`,
//!   `node`, `bash`…), the script or module it runs, digested at start, and whether
//!   it changed on disk since.
//! - [`staleness`] / [`exe_on_disk_sha256`] detect a "stale runtime": the executable
//!   on disk was replaced after the process started.
//!
//! Hashing an executable costs time proportional to its size (tens of ms for a
//! large server binary), so digests are cached per file ([`FileKey`]: device, inode,
//! size, mtime, ctime) for the life of the process: measuring the same program again
//! is a few `/proc` reads. Mutating invocations keep what they hashed in the state
//! database ([`keep_digests_in`]) and every observation seeds the cache from it
//! ([`seed_digests_from`]), so a new `status` process hashes only files it has never
//! seen.

use crate::{sys, ExecError};
pub use flotilla_model::status::strip_deleted;
pub use flotilla_model::status::{ProgramFile, RuntimeIdentity, DELETED_SUFFIX};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// How a recorded identity compares with what the pid is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityMatch {
    /// The same process is still running.
    Same,
    /// No live process has that pid (exited, or a zombie awaiting its parent).
    Gone,
    /// The pid belongs to a different process now: it must not be signalled.
    Reused {
        /// What differs, e.g. "start time 1234 ≠ recorded 1200".
        why: String,
    },
}

/// The journal record of `id` as the instance of `component`, started by
/// `operation` at `started_at_ms` (ms since the Unix epoch), logging to `log_path`.
pub fn instance_record(
    id: &RuntimeIdentity,
    component: &flotilla_model::Component,
    operation: flotilla_store::OperationId,
    started_at_ms: i64,
    log_path: String,
) -> flotilla_store::InstanceRecord {
    flotilla_store::InstanceRecord {
        component: component.name.clone(),
        host: component.host.clone(),
        pid: id.pid,
        pgid: id.pgid,
        start_time_ticks: id.start_time_ticks,
        exe: id.exe.display().to_string(),
        exe_sha256: id.exe_sha256.clone(),
        argv_digest: id.argv_digest.clone(),
        config_digest: component.config_digest(),
        operation,
        started_at_ms,
        log_path,
        config_json: Some(component.runtime_config()),
        program_files: program_files(id.pid),
    }
}

/// Whether an executable (by its file name) is an interpreter that runs a program
/// from a file named in its arguments.
pub fn is_interpreter(exe: &Path) -> bool {
    let Some(name) = strip_deleted(exe).file_name().and_then(OsStr::to_str) else {
        return false;
    };
    let versioned = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    versioned("python")
        || versioned("pypy")
        || versioned("ruby")
        || versioned("perl")
        || versioned("php")
        || versioned("lua")
        || versioned("node")
        || matches!(
            name,
            "nodejs"
                | "bash"
                | "sh"
                | "dash"
                | "zsh"
                | "ksh"
                | "mksh"
                | "fish"
                | "Rscript"
                | "tclsh"
                | "deno"
                | "bun"
        )
}

/// Options of common interpreters that take the next argument as their value (so
/// it is not the program).
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-W",
    "-X",
    "-r",
    "--require",
    "--import",
    "--loader",
    "--experimental-loader",
    "-o",
];

/// The files that are part of what `pid` runs besides its executable, when that is
/// an interpreter: the script it was started on (the first non-option argument that
/// is an existing file, relative to its working directory), or for `python -m
/// <module>` the module's file under its working directory when there is one
/// (`<module path>.py` or `<module path>/__main__.py`; else recorded without a
/// digest). Each with its digest now. Empty for anything else, or when `/proc`
/// cannot be read.
pub fn program_files(pid: u32) -> Vec<ProgramFile> {
    let Ok(Some(exe)) = sys::read_exe_link(pid) else {
        return Vec::new();
    };
    program_paths(pid, &exe)
        .into_iter()
        .map(|(path, role)| {
            let sha256 = path
                .is_absolute()
                .then(|| file_sha256(&path).ok())
                .flatten();
            ProgramFile { path, role, sha256 }
        })
        .collect()
}

/// The role of a file named by a component's `identity_files`.
pub const DECLARED_ROLE: &str = "identity file";

/// `files` (a component's `identity_files`, relative to `cwd`) with their digests now
/// (`None` for one that cannot be read).
pub fn declared_files(cwd: &Path, files: &[String]) -> Vec<ProgramFile> {
    files
        .iter()
        .map(|f| {
            let path = cwd.join(f);
            let sha256 = file_sha256(&path).ok();
            ProgramFile {
                path,
                role: DECLARED_ROLE.to_string(),
                sha256,
            }
        })
        .collect()
}

/// The files [`program_files`] digests, without reading them: `(path, role)`, for a
/// process `pid` whose executable is `exe` (nothing unless it is an interpreter).
pub fn program_paths(pid: u32, exe: &Path) -> Vec<(PathBuf, String)> {
    if !is_interpreter(exe) {
        return Vec::new();
    }
    let shell = strip_deleted(exe)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| n.ends_with("sh"));
    let (Ok(Some(raw)), Ok(Some(cwd))) = (sys::read_cmdline(pid), sys::read_cwd_link(pid)) else {
        return Vec::new();
    };
    let args: Vec<&[u8]> = raw
        .strip_suffix(&[0])
        .unwrap_or(&raw)
        .split(|b| *b == 0)
        .skip(1)
        .collect();
    let mut i = 0;
    while i < args.len() {
        let a = OsStr::from_bytes(args[i]);
        let text = a.to_string_lossy();
        // `-c CODE` (`-e CODE` but for shells, where `-e` is errexit): a program
        // given inline, no file.
        if matches!(text.as_ref(), "-c" | "--eval" | "-p" | "--print") || (text == "-e" && !shell) {
            return Vec::new();
        }
        if text == "--" {
            i += 1;
            continue;
        }
        let module = if text == "-m" {
            args.get(i + 1)
                .map(|m| String::from_utf8_lossy(m).into_owned())
        } else if text.starts_with("-m") && text.len() > 2 && !text.starts_with("--") {
            Some(text[2..].to_string())
        } else {
            None
        };
        if let Some(m) = module {
            let rel: PathBuf = m.split('.').collect();
            let candidates = [
                cwd.join(&rel).with_extension("py"),
                cwd.join(&rel).join("__main__.py"),
            ];
            let role = format!("module {m}");
            return match candidates.into_iter().find(|p| p.is_file()) {
                Some(p) => vec![(p, role)],
                None => vec![(rel, role)],
            };
        }
        if text.starts_with('-') {
            if OPTIONS_WITH_VALUE.contains(&text.as_ref()) {
                i += 1;
            }
            i += 1;
            continue;
        }
        let p = cwd.join(Path::new(a));
        if p.is_file() {
            return vec![(p, "script".into())];
        }
        i += 1;
    }
    Vec::new()
}

/// Whether the program file `path` (`role`: `script`, `module …`) of a process that
/// started at `start_time_ticks` changed since: against `recorded`, its digest when
/// the process started, when the journal has one for this path; else by its
/// modification time (later than the process's start). `None` when unchanged (or a
/// module outside the working directory, which cannot be located); else what to say.
pub fn program_file_change(
    path: &Path,
    role: &str,
    recorded: Option<&str>,
    start_time_ticks: u64,
) -> Option<String> {
    if !path.is_absolute() {
        return None;
    }
    if let Some(then) = recorded {
        let now = exe_on_disk_sha256(path).ok().flatten();
        return (now.as_deref() != Some(then)).then(|| {
            format!(
                "the {role} `{}` on disk ({}) is not the one it started with ({})",
                path.display(),
                now.as_deref().map(short).unwrap_or("gone"),
                short(then)
            )
        });
    }
    let started = boot_time()? + ticks_to_duration(start_time_ticks);
    let Ok(md) = std::fs::metadata(path) else {
        return Some(format!(
            "the {role} `{}` it started with is gone",
            path.display()
        ));
    };
    let modified = md.modified().ok()?;
    // Start times have a resolution of one clock tick (10 ms), the boot time too.
    (modified > started + std::time::Duration::from_millis(50)).then(|| {
        format!(
            "the {role} `{}` was modified at {} (UTC), after the process started at {}",
            path.display(),
            humantime::format_rfc3339_millis(modified),
            humantime::format_rfc3339_millis(started)
        )
    })
}

fn short(d: &str) -> &str {
    d.get(..19).unwrap_or(d)
}

/// When the machine booted, to the clock tick: now minus `/proc/uptime` (whose
/// centiseconds beat `btime`'s whole seconds), read once per process.
fn boot_time() -> Option<std::time::SystemTime> {
    static BOOT: OnceLock<Option<std::time::SystemTime>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        let now = std::time::SystemTime::now();
        now.checked_sub(sys::uptime()?)
    })
}

/// `sha256:<hex>` of `args` joined with NUL bytes (no trailing NUL): the same value
/// [`measure`] records as `argv_digest` for a process whose argv is `args`
/// (argv\[0\] included).
pub fn argv_digest<S: AsRef<OsStr>>(args: &[S]) -> String {
    let mut h = Sha256::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            h.update([0u8]);
        }
        h.update(a.as_ref().as_bytes());
    }
    flotilla_model::digest::format_sha256(&h.finalize())
}

/// Digest of a raw `/proc/<pid>/cmdline` (NUL-terminated args): the trailing NUL is
/// dropped so the result equals [`argv_digest`] of the args.
fn cmdline_digest(raw: &[u8]) -> String {
    flotilla_model::digest::sha256_hex(raw.strip_suffix(&[0]).unwrap_or(raw))
}

/// What names a file's content for the digest cache without reading it: device,
/// inode, size, mtime and ctime (both in ns since the epoch). Writing a file changes
/// its mtime and ctime, and ctime cannot be set back from user space, so one key
/// never names two contents.
pub type FileKey = (u64, u64, u64, i64, i64);

fn file_key(md: &std::fs::Metadata) -> FileKey {
    let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
    (
        md.dev(),
        md.ino(),
        md.size(),
        ns(md.mtime(), md.mtime_nsec()),
        ns(md.ctime(), md.ctime_nsec()),
    )
}

/// A cached digest, and whether this process computed it (rather than being told it
/// by [`seed_digests`]).
type Cached = (String, bool);

fn digest_cache() -> &'static Mutex<HashMap<FileKey, Cached>> {
    static CACHE: OnceLock<Mutex<HashMap<FileKey, Cached>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Seeds this process's digest cache with digests computed earlier (kept in the
/// state database, see [`computed_digests`]), so a new process need not hash the
/// same executables again.
pub fn seed_digests(known: impl IntoIterator<Item = (FileKey, String)>) {
    let mut cache = digest_cache().lock().unwrap_or_else(|e| e.into_inner());
    for (k, d) in known {
        cache.entry(k).or_insert((d, false));
    }
}

/// The digests this process computed itself (not those seeded), to keep for the
/// next one.
pub fn computed_digests() -> Vec<(FileKey, String)> {
    digest_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, (_, computed))| *computed)
        .map(|(k, (d, _))| (*k, d.clone()))
        .collect()
}

/// Seeds the digest cache from `store` (nothing when it cannot be read: then files
/// are hashed, as without a cache).
pub fn seed_digests_from(store: &flotilla_store::Store) {
    if let Ok(known) = store.file_digests() {
        seed_digests(
            known
                .into_iter()
                .map(|f| ((f.dev, f.ino, f.size, f.mtime_ns, f.ctime_ns), f.sha256)),
        );
    }
}

/// Keeps the digests this process computed in `store` for later processes
/// (best effort: a failure only costs the next process a hash).
pub fn keep_digests_in(store: &mut flotilla_store::Store, now_ms: i64) {
    let fresh: Vec<flotilla_store::FileDigest> = computed_digests()
        .into_iter()
        .map(
            |((dev, ino, size, mtime_ns, ctime_ns), sha256)| flotilla_store::FileDigest {
                dev,
                ino,
                size,
                mtime_ns,
                ctime_ns,
                sha256,
            },
        )
        .collect();
    if !fresh.is_empty() {
        let _ = store.record_file_digests(&fresh, now_ms);
    }
}

/// Hashes an open file, through the per-inode cache.
fn hash_file(mut f: std::fs::File, path: &Path, pid: u32) -> Result<String, ExecError> {
    let err = |source| {
        if pid == 0 {
            ExecError::Io {
                path: path.to_path_buf(),
                source,
            }
        } else {
            ExecError::Proc {
                pid,
                path: path.to_path_buf(),
                source,
            }
        }
    };
    let md = f.metadata().map_err(err)?;
    let key = file_key(&md);
    if let Some((d, _)) = digest_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(d.clone());
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let d = flotilla_model::digest::format_sha256(&h.finalize());
    digest_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, (d.clone(), true));
    Ok(d)
}

/// `sha256:<hex>` of the file at `path` (cached per inode, size and mtime).
///
/// # Errors
/// [`ExecError::Io`] when it cannot be opened or read.
pub fn file_sha256(path: &Path) -> Result<String, ExecError> {
    let f = std::fs::File::open(path).map_err(|source| ExecError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    hash_file(f, path, 0)
}

/// Measures the identity of `pid`.
///
/// Returns `Ok(None)` when no such process exists or it is a zombie (exited, not yet
/// reaped). Reads `/proc/<pid>/stat`, `exe` (link and image), `cmdline`, then `stat`
/// again: if the start time changed meanwhile (the pid was reused mid-measurement)
/// it measures once more.
///
/// # Errors
/// [`ExecError::Proc`] when a `/proc` file cannot be read for a reason other than
/// the process being gone (typically `EACCES` for another user's process),
/// [`ExecError::ProcFormat`] for an unparsable `stat`, [`ExecError::Unsupported`]
/// off Linux.
pub fn measure(pid: u32) -> Result<Option<RuntimeIdentity>, ExecError> {
    for _ in 0..3 {
        let Some(st) = sys::read_stat(pid)? else {
            return Ok(None);
        };
        if st.is_dead() {
            return Ok(None);
        }
        let Some(exe) = sys::read_exe_link(pid)? else {
            return Ok(None);
        };
        let Some(image) = sys::open_exe_image(pid)? else {
            return Ok(None);
        };
        let exe_sha256 = hash_file(image, &sys::proc_path(pid, "exe"), pid)?;
        let Some(cmdline) = sys::read_cmdline(pid)? else {
            return Ok(None);
        };
        let Some(after) = sys::read_stat(pid)? else {
            return Ok(None);
        };
        if after.is_dead() {
            return Ok(None);
        }
        if after.start_time_ticks != st.start_time_ticks {
            continue;
        }
        return Ok(Some(RuntimeIdentity {
            pid,
            pgid: st.pgrp,
            start_time_ticks: st.start_time_ticks,
            exe,
            exe_sha256,
            argv_digest: cmdline_digest(&cmdline),
        }));
    }
    Ok(None)
}

/// Whether a live (not zombie) process has `pid`: one read of `/proc/<pid>/stat`,
/// which every user may read. Says nothing about which process it is.
pub fn alive(pid: u32) -> bool {
    matches!(sys::read_stat(pid), Ok(Some(st)) if !st.is_dead())
}

/// Compares a recorded identity with a measurement of the same pid (`None`: the
/// measurement found no live process).
///
/// Same pid and same start time → [`IdentityMatch::Same`]: the kernel never gives
/// one pid to two processes within one clock tick, so (pid, start time) names a
/// process. The executable path and argv are not compared: a process may `exec`
/// another program (wrappers and shims such as `env`, pyenv or a shell script ending
/// in `exec` do) and may rewrite its argv (`setproctitle`) while staying the process
/// that was started; a binary replaced on disk is a *stale* runtime, not a different
/// process.
pub fn matches(expected: &RuntimeIdentity, measured: Option<&RuntimeIdentity>) -> IdentityMatch {
    let Some(m) = measured else {
        return IdentityMatch::Gone;
    };
    if m.pid != expected.pid {
        return IdentityMatch::Reused {
            why: format!("measured pid {} ≠ recorded pid {}", m.pid, expected.pid),
        };
    }
    if m.start_time_ticks != expected.start_time_ticks {
        return IdentityMatch::Reused {
            why: format!(
                "pid {} start time {} ≠ recorded {} (clock ticks since boot)",
                m.pid, m.start_time_ticks, expected.start_time_ticks
            ),
        };
    }
    IdentityMatch::Same
}

/// Measures `expected.pid` and compares: the measurement (when a live process has
/// the pid) and the verdict.
///
/// # Errors
/// As [`measure`].
pub fn verify(
    expected: &RuntimeIdentity,
) -> Result<(IdentityMatch, Option<RuntimeIdentity>), ExecError> {
    let measured = measure(expected.pid)?;
    Ok((matches(expected, measured.as_ref()), measured))
}

/// `sha256:<hex>` of the file at `path` (following symlinks); `Ok(None)` when it does
/// not exist. Compare with a running process's `exe_sha256` to detect a binary
/// replaced on disk.
///
/// # Errors
/// [`ExecError::Io`] naming the path when it exists but cannot be read.
pub fn exe_on_disk_sha256(path: &Path) -> Result<Option<String>, ExecError> {
    match std::fs::File::open(path) {
        Ok(f) => hash_file(f, path, 0).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ExecError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Whether a running process's executable still matches the file on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Staleness {
    /// The file on disk is the image running.
    Current,
    /// The file on disk differs from the running image (status `stale-runtime`).
    Replaced {
        /// The path the process was started from.
        path: PathBuf,
        /// Digest of the file now at that path (`None`: no file there any more).
        on_disk: Option<String>,
        /// Digest of the image running.
        running: String,
    },
}

/// Compares a measured identity's running image with the file now at its path
/// ([`RuntimeIdentity::exe_on_disk`]).
///
/// # Errors
/// As [`exe_on_disk_sha256`].
pub fn staleness(measured: &RuntimeIdentity) -> Result<Staleness, ExecError> {
    let path = measured.exe_on_disk();
    let on_disk = exe_on_disk_sha256(path)?;
    if on_disk.as_deref() == Some(measured.exe_sha256.as_str()) {
        Ok(Staleness::Current)
    } else {
        Ok(Staleness::Replaced {
            path: path.to_path_buf(),
            on_disk,
            running: measured.exe_sha256.clone(),
        })
    }
}

/// `ticks` clock ticks ([`sys::clock_ticks_per_second`]) as a duration, to the
/// millisecond.
fn ticks_to_duration(ticks: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ticks * 1000 / sys::clock_ticks_per_second())
}

/// When a process with start time `ticks` (clock ticks since boot) started, as an
/// RFC 3339 UTC time (`2026-12-01T10:41:03Z`) from the boot time in `/proc/stat`
/// (`btime`); `<ticks> ticks after boot` when that cannot be read.
pub fn describe_start(ticks: u64) -> String {
    match sys::boot_time_secs() {
        Some(b) => {
            let at = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(b)
                + ticks_to_duration(ticks);
            humantime::format_rfc3339_seconds(at).to_string()
        }
        None => format!("{ticks} ticks after boot"),
    }
}

/// Whether `after` proves a restart of what ran as `before`: a new process (another
/// pid, or the same pid with another start time) whose executable image is the file
/// now on disk at its path. `Err` says what did not happen.
pub fn prove_restart(
    before: Option<&RuntimeIdentity>,
    after: &RuntimeIdentity,
) -> Result<(), String> {
    if let Some(b) = before {
        if b.pid == after.pid && b.start_time_ticks == after.start_time_ticks {
            return Err(format!(
                "restart had no effect: pid {} started {} is still running",
                b.pid,
                describe_start(b.start_time_ticks)
            ));
        }
    }
    match staleness(after) {
        Ok(Staleness::Replaced {
            path,
            on_disk,
            running,
        }) => Err(format!(
            "restart did not load the executable on disk: new pid {} runs {} ({}), but {} is now {}",
            after.pid,
            path.display(),
            short_digest(&running),
            path.display(),
            on_disk.as_deref().map(short_digest).unwrap_or("gone")
        )),
        _ => Ok(()),
    }
}

fn short_digest(d: &str) -> &str {
    d.get(..19).unwrap_or(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_digest_matches_cmdline_digest() {
        assert_eq!(
            argv_digest(&["sleep", "5"]),
            cmdline_digest(b"sleep\x005\x00")
        );
        assert_eq!(
            argv_digest::<&str>(&[]),
            flotilla_model::digest::sha256_hex(b"")
        );
    }

    #[test]
    fn deleted_suffix() {
        let mut id = RuntimeIdentity {
            pid: 1,
            pgid: 1,
            start_time_ticks: 1,
            exe: "/opt/x/bin/srv (deleted)".into(),
            exe_sha256: String::new(),
            argv_digest: String::new(),
        };
        assert!(id.exe_replaced());
        assert_eq!(id.exe_on_disk(), Path::new("/opt/x/bin/srv"));
        let mut other = id.clone();
        other.exe = "/opt/x/bin/srv".into();
        assert_eq!(matches(&other, Some(&id)), IdentityMatch::Same);
        id.start_time_ticks = 2;
        assert!(matches!(
            matches(&other, Some(&id)),
            IdentityMatch::Reused { .. }
        ));
        assert_eq!(matches(&other, None), IdentityMatch::Gone);
    }

    #[test]
    fn interpreters_by_name() {
        for yes in [
            "/usr/bin/python3",
            "/root/.pyenv/versions/3.11.7/bin/python3.11",
            "/usr/bin/node",
            "/bin/bash",
            "/bin/sh",
            "/usr/bin/perl5.36",
            "/usr/bin/ruby (deleted)",
        ] {
            assert!(is_interpreter(Path::new(yes)), "{yes}");
        }
        for no in [
            "/usr/bin/llama-server",
            "/usr/bin/python3-config",
            "/bin/nodeagent",
        ] {
            assert!(!is_interpreter(Path::new(no)), "{no}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn measures_self() {
        let me = measure(std::process::id()).unwrap().unwrap();
        assert_eq!(me.exe, std::env::current_exe().unwrap());
        assert!(me.exe_sha256.starts_with("sha256:") && me.exe_sha256.len() == 71);
        let args: Vec<String> = std::env::args().collect();
        assert_eq!(me.argv_digest, argv_digest(&args));
        assert_eq!(staleness(&me).unwrap(), Staleness::Current);
    }
}
