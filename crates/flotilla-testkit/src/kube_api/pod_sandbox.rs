//! What the process kubelet ([`super::process_kubelet`]) needs to run one container
//! as a local process: the user it runs as, its volumes as host directories, the
//! `bwrap` command line, and finding and signalling the processes it made.
//!
//! Copied behaviour:
//! - the user (https://kubernetes.io/docs/tasks/configure-pod-container/security-context/):
//!   `runAsUser`, `runAsGroup`, `runAsNonRoot` from the container's
//!   `securityContext`, else the pod's; supplementary groups `fsGroup` and
//!   `supplementalGroups`; no `runAsGroup` → group 0 (the runtime's answer for a
//!   uid the image's `/etc/passwd` does not name); no `runAsUser` → root (the
//!   "image's" user: the image is this host);
//! - volumes (https://kubernetes.io/docs/concepts/storage/volumes/): `emptyDir` made
//!   mode 0777 (setgid and owned by `fsGroup` when set), `secret` and `configMap`
//!   as one file per key (`items` pick keys and paths), mode `defaultMode` (0644),
//!   group `fsGroup`, always mounted read-only; `persistentVolumeClaim` kept per
//!   claim; `subPath` made when missing.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid};
use serde_json::Value;

/// Who a container's process runs as.
#[derive(Clone, Debug)]
pub(crate) struct User {
    /// `runAsUser`; `None`: root.
    pub uid: Option<u32>,
    /// `runAsGroup`, else 0.
    pub gid: u32,
    /// `fsGroup` then `supplementalGroups`.
    pub groups: Vec<u32>,
    pub fs_group: Option<u32>,
    pub non_root: bool,
}

impl User {
    /// The user of `container` in a pod with spec `spec`.
    pub fn of(spec: &Value, container: &Value) -> User {
        let pod = &spec["securityContext"];
        let c = &container["securityContext"];
        let pick = |f: &str| c[f].as_u64().or_else(|| pod[f].as_u64()).map(|v| v as u32);
        let fs_group = pod["fsGroup"].as_u64().map(|v| v as u32);
        let mut groups: Vec<u32> = fs_group.into_iter().collect();
        for g in pod["supplementalGroups"].as_array().into_iter().flatten() {
            if let Some(g) = g.as_u64() {
                groups.push(g as u32);
            }
        }
        User {
            uid: pick("runAsUser"),
            gid: pick("runAsGroup").unwrap_or(0),
            groups,
            fs_group,
            non_root: c["runAsNonRoot"]
                .as_bool()
                .or_else(|| pod["runAsNonRoot"].as_bool())
                .unwrap_or(false),
        }
    }

    /// The kubelet's refusal to start a container whose `runAsNonRoot` its user
    /// breaks (kuberuntime `verifyRunAsNonRoot`), as `CreateContainerConfigError`'s
    /// message.
    pub fn non_root_violation(&self, pod: &str, container: &str) -> Option<String> {
        if !self.non_root {
            return None;
        }
        match self.uid {
            Some(0) => Some(format!(
                "container's runAsUser breaks non-root policy (pod: \"{pod}\", container: {container})"
            )),
            None => Some(format!(
                "container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {container})"
            )),
            Some(_) => None,
        }
    }

    /// The owner of what the process must write: (uid, group: `fsGroup`, else gid).
    pub fn owner(&self) -> (u32, u32) {
        (self.uid.unwrap_or(0), self.fs_group.unwrap_or(self.gid))
    }
}

/// Creates `dir` (and parents) when missing: owned by `owner` with `mode` when made.
pub(crate) fn make_dir(dir: &Path, owner: (u32, u32), mode: u32) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    chown(dir, Some(owner.0), Some(owner.1))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
}

/// Makes `dir` and its parents up to `top` traversable by any user (mode 0711 at
/// least), so an unprivileged container's `bwrap` can reach the volumes under it.
pub(crate) fn traversable(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let mode = fs::metadata(dir)?.permissions().mode();
    fs::set_permissions(dir, fs::Permissions::from_mode((mode & 0o7777) | 0o711))
}

/// Standard base64 (RFC 4648, padding optional) as a Secret's `data` holds it.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Writes a Secret's or ConfigMap's keys as files in a fresh `dir`: `files` are
/// (key, bytes); `volume` the pod's volume entry (`items`, `defaultMode`).
pub(crate) fn write_key_files(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    volume: &Value,
    group: Option<u32>,
) -> io::Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    let default_mode = volume["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let items = volume["items"].as_array();
    for (key, bytes) in files {
        let (path, mode) = match items {
            None => (key.clone(), default_mode),
            Some(items) => match items.iter().find(|i| i["key"] == key.as_str()) {
                Some(i) => (
                    i["path"].as_str().unwrap_or(key).to_string(),
                    i["mode"].as_u64().map(|m| m as u32).unwrap_or(default_mode),
                ),
                None => continue,
            },
        };
        let file = dir.join(path.trim_start_matches('/'));
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&file, bytes)?;
        chown(&file, Some(0), group)?;
        fs::set_permissions(&file, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// One bind into the sandbox.
#[derive(Clone, Debug)]
pub(crate) struct Bind {
    pub source: PathBuf,
    pub dest: String,
    pub read_only: bool,
}

/// What `bwrap` is started with for one container.
pub(crate) struct Launch<'a> {
    pub bwrap: &'a Path,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub binds: Vec<Bind>,
    pub user: User,
}

/// Whether `dest` lies under a mount the sandbox makes writable itself.
fn under_own_mount(dest: &Path) -> bool {
    ["/dev", "/proc", "/tmp"]
        .iter()
        .any(|m| dest == Path::new(m) || dest.starts_with(m))
}

/// The directories to rebuild entry by entry (not bind whole) so that bind
/// destinations that do not exist on the host can be made in the sandbox's own
/// (tmpfs) root: each missing destination's deepest existing ancestor, and its
/// ancestors.
fn synthetic_dirs(binds: &[Bind]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for b in binds {
        let dest = Path::new(&b.dest);
        if under_own_mount(dest) || dest.symlink_metadata().is_ok() {
            continue;
        }
        let mut a = dest.parent();
        while let Some(p) = a {
            if p.is_dir() {
                break;
            }
            a = p.parent();
        }
        while let Some(p) = a {
            out.insert(p.to_path_buf());
            a = p.parent();
        }
    }
    out
}

/// `bwrap` arguments making the host's tree read-only under `dir`, one entry at a
/// time (`synthetic` directories are made in the sandbox and filled the same way).
fn root_args(dir: &Path, synthetic: &BTreeSet<PathBuf>, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if dir == Path::new("/") && under_own_mount(&p) {
            continue;
        }
        let s = p.display().to_string();
        if synthetic.contains(&p) {
            out.extend(["--dir".into(), s]);
            root_args(&p, synthetic, out);
        } else if let Ok(target) = fs::read_link(&p) {
            out.extend(["--symlink".into(), target.display().to_string(), s]);
        } else {
            out.extend(["--ro-bind".into(), s.clone(), s]);
        }
    }
}

impl Launch<'_> {
    /// The `bwrap` command: the host's tree read-only, fresh `/dev`, `/proc`,
    /// `/tmp`, the binds, its own pid namespace and session, dying with the fake;
    /// the container's env only; stdout and stderr piped (the caller copies them into
    /// the container's log, [`super::cri_log::copy`]); the user's
    /// groups, gid and uid set before `bwrap` starts.
    pub fn command(&self) -> io::Result<Command> {
        let mut args = Vec::new();
        root_args(Path::new("/"), &synthetic_dirs(&self.binds), &mut args);
        for a in ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"] {
            args.push(a.to_string());
        }
        // Parents before children, whatever order the pod lists them in: the CRI
        // runtime sorts a container's mounts by the number of their destination's
        // path components, stably (containerd, `pkg/cri/opts/spec_linux.go`,
        // `orderedMounts`), so `/tmp` never hides a mount beneath it.
        let mut binds: Vec<&Bind> = self.binds.iter().collect();
        binds.sort_by_key(|b| Path::new(&b.dest).components().count());
        for b in binds {
            let op = if b.read_only { "--ro-bind" } else { "--bind" };
            args.extend([op.into(), b.source.display().to_string(), b.dest.clone()]);
        }
        for a in [
            "--remount-ro",
            "/",
            "--unshare-pid",
            "--die-with-parent",
            "--new-session",
            "--chdir",
        ] {
            args.push(a.to_string());
        }
        args.push(self.working_dir.clone());
        args.push("--".into());
        args.extend(self.argv.iter().cloned());
        let mut cmd = Command::new(self.bwrap);
        cmd.args(&args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let groups: Vec<Gid> = self.user.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        let gid = Gid::from_raw(self.user.gid);
        let uid = self.user.uid.map(Uid::from_raw);
        // SAFETY: between fork and exec only these three system calls run, on
        // values made before the fork (no allocation, no lock).
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::setgroups(&groups)?;
                nix::unistd::setgid(gid)?;
                if let Some(uid) = uid {
                    nix::unistd::setuid(uid)?;
                }
                Ok(())
            });
        }
        Ok(cmd)
    }
}

/// (pid, parent pid) of every process, from `/proc/<pid>/stat`.
fn process_table() -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok());
        if let Some(ppid) = ppid {
            out.push((pid, ppid));
        }
    }
    out
}

/// Every descendant of `root` (not `root`).
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let table = process_table();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (pid, ppid) in &table {
            if *ppid == p && !out.contains(pid) {
                out.push(*pid);
                frontier.push(*pid);
            }
        }
    }
    out
}

/// The container's own process under the `bwrap` started as `outer`: the child of
/// its pid namespace's init (`bwrap` → init → command), once it exists.
pub(crate) fn main_processes(outer: i32) -> Vec<i32> {
    let table = process_table();
    let inits: Vec<i32> = table
        .iter()
        .filter(|(_, pp)| *pp == outer)
        .map(|(p, _)| *p)
        .collect();
    table
        .iter()
        .filter(|(_, pp)| inits.contains(pp))
        .map(|(p, _)| *p)
        .collect()
}

/// Sends `signal` to a pid (errors, such as its being gone, are ignored).
pub(crate) fn signal(pid: i32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid), signal);
}

/// SIGKILL to the `bwrap` started as `outer`, its process group and everything
/// under it; the pids that were to die.
pub(crate) fn kill_all(outer: i32) -> Vec<i32> {
    let mut pids = descendants(outer);
    pids.push(outer);
    let _ = nix::sys::signal::killpg(Pid::from_raw(outer), Signal::SIGKILL);
    for p in &pids {
        signal(*p, Signal::SIGKILL);
    }
    pids
}
