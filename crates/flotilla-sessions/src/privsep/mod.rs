//! Privilege separation of an authority that runs agent sessions.
//!
//! Started as root, `flotilla serve` splits in three before it serves a request:
//!
//! - the **launcher** ([`launcher`]), the only piece that stays root: it starts
//!   sandboxes as their session's uid (never anything else, never as root), hands
//!   a session's tree, home, credential file and sockets to that uid, resets
//!   homes, kills the runtimes it started, and runs `git upload-pack` in a tree as
//!   its owner for a push. Every request names a session; the launcher derives
//!   every path from its own configuration and walks to it without following a
//!   link (`openat` with `O_NOFOLLOW` from the sessions directory down).
//! - the **executor** ([`executor`]), as `[privileges] executor_user`: runs the
//!   argv lists the API decided to run (allowlisted reads, answered mutations),
//!   with that user's access (its kubeconfig, the journal) and nothing else.
//! - the **API** process (this one, after [`drop_to`]): the HTTP API, the database,
//!   the CA key, credentials' hashes, the clone cache — as `[privileges] api_user`,
//!   with no capabilities and `no_new_privs` (no setuid program can give it root).
//!   It reaches the two others over Unix sockets in `<authority dir>/run/` that
//!   only its uid may connect to, with a narrow JSON-lines protocol (one request
//!   per connection; file descriptors passed with `SCM_RIGHTS`).
//!
//! A compromise of the API process then cannot start a process as root, read the
//! executor's credentials, or run a command with the executor's access but through
//! the executor's own door. Both children die with the API process
//! (`PR_SET_PDEATHSIG`), and every runtime with the launcher (bwrap's
//! `--die-with-parent`).

pub mod executor;
pub mod launcher;

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The socket of the launcher, in `<authority dir>/run/`.
pub const LAUNCHER_SOCKET: &str = "launcher.sock";
/// The socket of the executor, in `<authority dir>/run/`.
pub const EXECUTOR_SOCKET: &str = "executor.sock";
pub use crate::users::{resolve_user, DEFAULT_API_USER, DEFAULT_EXECUTOR_USER};

/// The longest request line, in bytes.
const MAX_REQUEST: usize = 1 << 20;
/// The longest reply line, in bytes (an executor run's whole output, as JSON).
const MAX_REPLY: usize = 256 << 20;

/// Who a role runs as: its uid, gid and supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleUser {
    /// The uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// Its supplementary groups (an account's, from the group database; none for
    /// a bare number).
    pub groups: Vec<u32>,
}

/// [`resolve_user`] with the account's supplementary groups (`getgrouplist`).
///
/// # Errors
/// As [`resolve_user`].
pub fn resolve_role_user(name: &str) -> Result<RoleUser, String> {
    let (uid, gid) = resolve_user(name)?;
    let groups = if name.parse::<u32>().is_ok() {
        vec![gid]
    } else {
        let c = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
        nix::unistd::getgrouplist(&c, nix::unistd::Gid::from_raw(gid))
            .map_err(|e| format!("the groups of `{name}`: {e}"))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect()
    };
    Ok(RoleUser { uid, gid, groups })
}

/// Sends `msg` as one JSON line, with `fds` attached to its first byte.
///
/// # Errors
/// The socket's.
pub fn send<T: Serialize>(stream: &UnixStream, msg: &T, fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    let cmsgs: Vec<ControlMessage> = if fds.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(fds)]
    };
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&line)],
        &cmsgs,
        MsgFlags::empty(),
        None,
    )
    .map_err(io::Error::from)?;
    (&*stream).write_all(&line[sent..])
}

/// Receives one JSON line and the descriptors that came with it (at most 4).
///
/// # Errors
/// The socket's; a line that does not parse as `T`, or is longer than 1 MiB.
pub fn recv<T: DeserializeOwned>(stream: &UnixStream) -> io::Result<(T, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut buf = vec![0u8; 64 * 1024];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(list) = c {
                // SAFETY: the kernel just installed these descriptors in this
                // process for us; nothing else owns them.
                fds.extend(
                    list.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (msg.bytes, fds)
    };
    let mut line = buf[..n].to_vec();
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no request"));
    }
    if !line.ends_with(b"\n") {
        let mut rest = Vec::new();
        BufReader::new(stream.take(MAX_REQUEST as u64)).read_until(b'\n', &mut rest)?;
        line.extend(rest);
    }
    let msg =
        serde_json::from_slice(&line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((msg, fds))
}

/// Reads one JSON line (a reply), byte by byte: nothing past its newline is
/// consumed, so a later line on the same connection is still there to read.
///
/// # Errors
/// The socket's; a line that does not parse; the peer closed first.
pub fn read_line<T: DeserializeOwned>(mut stream: &UnixStream) -> io::Result<T> {
    use nix::sys::socket::{recv, MsgFlags};
    let mut line = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Peek, then take exactly up to the newline: what follows stays queued.
        let n = recv(stream.as_raw_fd(), &mut buf, MsgFlags::MSG_PEEK).map_err(io::Error::from)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the privileged side closed the connection",
            ));
        }
        let (take, done) = match buf[..n].iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (n, false),
        };
        let start = line.len();
        line.resize(start + take, 0);
        stream.read_exact(&mut line[start..])?;
        if done {
            line.pop();
            break;
        }
        if line.len() > MAX_REPLY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a reply over 256 MiB",
            ));
        }
    }
    serde_json::from_slice(&line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Drops this process to `uid`:`gid` for good: no supplementary groups, real,
/// effective and saved ids all changed, `no_new_privs` set (no setuid program it
/// runs can raise it again). Every thread follows (glibc applies set*id to all).
///
/// # Errors
/// The system calls'.
pub fn drop_to(uid: u32, gid: u32) -> io::Result<()> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
    setgroups(&[g]).map_err(io::Error::from)?;
    setresgid(g, g, g).map_err(io::Error::from)?;
    setresuid(u, u, u).map_err(io::Error::from)?;
    nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
    if nix::unistd::geteuid().is_root() {
        return Err(io::Error::other("still root after dropping privileges"));
    }
    Ok(())
}

/// Opens a directory named in the configuration (its own name may not be a link).
///
/// # Errors
/// Missing, a link, not a directory.
fn open_top(path: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

fn dev_ino(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = nix::sys::stat::fstat(fd).map_err(io::Error::from)?;
    Ok((st.st_dev, st.st_ino))
}

/// Gives `name` in `dir` (or `dir` itself when `None`) to `owner`, never through a
/// link.
fn own(dir: &OwnedFd, name: Option<&std::ffi::OsStr>, owner: (u32, u32)) -> io::Result<()> {
    let (u, g) = (
        Some(nix::unistd::Uid::from_raw(owner.0)),
        Some(nix::unistd::Gid::from_raw(owner.1)),
    );
    match name {
        None => nix::unistd::fchown(dir, u, g),
        Some(n) => nix::unistd::fchownat(dir, n, u, g, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW),
    }
    .map_err(io::Error::from)
}

/// Which entries [`own_beneath`] gives away: `(depth, name, (dev, ino))`.
pub type Keep<'a> = dyn Fn(usize, &str, (u64, u64)) -> bool + 'a;

/// Gives everything beneath `dir` to `owner` for which `keep(depth, name,
/// (dev, ino))` is true (a directory refused is not entered), walking from
/// descriptors with `openat(O_NOFOLLOW)` and changing owners with
/// `fchownat(AT_SYMLINK_NOFOLLOW)`: nothing renamed meanwhile leads it outside.
///
/// # Errors
/// The first entry that cannot be read or changed.
pub fn own_beneath(dir: &OwnedFd, owner: (u32, u32), keep: &Keep) -> io::Result<()> {
    fn walk(dir: &OwnedFd, depth: usize, owner: (u32, u32), keep: &Keep) -> io::Result<()> {
        use nix::fcntl::{openat, AtFlags, OFlag};
        use nix::sys::stat::{fstatat, Mode, SFlag};
        let names: Vec<std::ffi::OsString> = std::fs::read_dir(fd_path(dir))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        for name in names {
            let st = match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(nix::errno::Errno::ENOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            if !keep(depth, &name.to_string_lossy(), (st.st_dev, st.st_ino)) {
                continue;
            }
            own(dir, Some(&name), owner)?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                let sub = openat(
                    dir,
                    name.as_os_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io::Error::from)?;
                walk(&sub, depth + 1, owner, keep)?;
            }
        }
        Ok(())
    }
    walk(dir, 0, owner, keep)
}

/// Binds a listening socket `name` in the directory `dir` (at `path`) that only
/// `uid` (and root) may connect to: created 0600 (umask), given away with
/// `fchownat(AT_SYMLINK_NOFOLLOW)`, never through a link.
///
/// # Errors
/// The file system's.
pub fn bind_private(
    dir: &OwnedFd,
    path: &Path,
    uid: u32,
    gid: u32,
) -> io::Result<std::os::unix::net::UnixListener> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("a socket path without a name"))?;
    let _ = nix::unistd::unlinkat(dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let l = bound?;
    own(dir, Some(name), (uid, gid))?;
    Ok(l)
}

/// Starts `flotilla serve <role>` with `listener` as its descriptor 3, as
/// `user` (`None`: as this process), dying with this process. Returns the child.
///
/// # Errors
/// When it cannot be started.
pub fn spawn_role(
    role: &str,
    authority_dir: &Path,
    listener: std::os::unix::net::UnixListener,
    user: Option<RoleUser>,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["serve", role, "--authority-dir"])
        .arg(authority_dir)
        .stdin(std::process::Stdio::null());
    let fd = listener.as_raw_fd();
    let groups: Vec<nix::libc::gid_t> = user.as_ref().map(|u| u.groups.clone()).unwrap_or_default();
    let ids = user.as_ref().map(|u| (u.uid, u.gid));
    // The lifeline: the child holds its read end (descriptor 4) and ends when it
    // reads end-of-file, i.e. when this process is gone however it ended. (A
    // parent-death signal does not survive this process changing its uid.)
    let (life_r, life_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let life = life_r.as_raw_fd();
    // SAFETY: between fork and exec only async-signal-safe calls: dup2 and prctl.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(life, 4) < 0 {
                return Err(io::Error::last_os_error());
            }
            if fd != 3 {
                if nix::libc::dup2(fd, 3) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else {
                let flags = nix::libc::fcntl(3, nix::libc::F_GETFD);
                if flags < 0
                    || nix::libc::fcntl(3, nix::libc::F_SETFD, flags & !nix::libc::FD_CLOEXEC) < 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(io::Error::from)?;
            // Its user, with that user's groups (std's own uid change would drop
            // them): raw system calls only, here.
            if let Some((uid, gid)) = ids {
                if nix::libc::setgroups(groups.len(), groups.as_ptr()) < 0
                    || nix::libc::setresgid(gid, gid, gid) < 0
                    || nix::libc::setresuid(uid, uid, uid) < 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(listener);
    drop(life_r);
    // Held, never closed, for as long as this process lives.
    LIFELINES.lock().expect("not poisoned").push(life_w);
    Ok(child)
}

/// The write ends of the roles' lifelines (see [`spawn_role`]).
static LIFELINES: std::sync::Mutex<Vec<OwnedFd>> = std::sync::Mutex::new(Vec::new());

/// In a role started by [`spawn_role`]: calls `gone` (on a thread of its own) as
/// soon as the API process that started it is gone, however it ended
/// (end-of-file on descriptor 4). The binary ends the role there; a runtime the
/// launcher started goes with it (bwrap's `--die-with-parent`).
pub fn when_api_gone(gone: impl FnOnce() + Send + 'static) {
    // SAFETY: `spawn_role` put the lifeline's read end at descriptor 4 and nothing
    // else in this process owns it.
    let mut life = unsafe { std::fs::File::from_raw_fd(4) };
    let _ = close_on_exec(&life);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        while matches!(life.read(&mut buf), Ok(n) if n > 0) {}
        gone();
    });
}

/// The listening socket a role was started with (its descriptor 3).
///
/// # Errors
/// When descriptor 3 is not a socket.
pub fn inherited_listener() -> io::Result<std::os::unix::net::UnixListener> {
    // SAFETY: `spawn_role` put the listening socket at descriptor 3 and nothing
    // else in this process owns it.
    let l = unsafe { std::os::unix::net::UnixListener::from_raw_fd(3) };
    l.local_addr()?;
    close_on_exec(&l)?;
    Ok(l)
}

/// Marks a descriptor close-on-exec: nothing a role starts (a sandbox) inherits it.
fn close_on_exec(fd: &impl std::os::fd::AsFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(|_| ())
        .map_err(io::Error::from)
}

/// Connects to a privileged role's socket.
///
/// # Errors
/// The socket's (the role is not running).
pub fn connect(path: &Path) -> io::Result<UnixStream> {
    UnixStream::connect(path)
}

/// The `O_NOFOLLOW` walk from a directory the launcher trusts (`base`, from its
/// own configuration: opened as it is) down through `components`: each opened
/// relative to the last, never through a link.
///
/// # Errors
/// A component that is missing, a link, or not a directory.
pub fn open_dir_beneath(base: &Path, components: &[&str]) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let dir = open(base, flags, Mode::empty()).map_err(io::Error::from)?;
    dir_beneath(&dir, components)
}

/// [`open_dir_beneath`] from an open directory.
///
/// # Errors
/// As [`open_dir_beneath`].
pub fn dir_beneath(dir: &OwnedFd, components: &[&str]) -> io::Result<OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // A copy that closes on exec: no directory of the launcher's ever reaches a
    // sandbox it starts.
    let copy = nix::fcntl::fcntl(dir, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(0))
        .map_err(io::Error::from)?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor we own.
    let mut dir = unsafe { OwnedFd::from_raw_fd(copy) };
    for c in components {
        if c.is_empty() || c.contains('/') || *c == ".." || *c == "." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{c}` is not a plain name"),
            ));
        }
        dir = openat(&dir, *c, flags, Mode::empty()).map_err(io::Error::from)?;
    }
    Ok(dir)
}

/// The path of an open directory through `/proc/self/fd` (its links are followed
/// by the kernel to the very directory, whatever its name is now).
pub fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The pieces started by [`setup`], as the API process reaches them.
#[derive(Debug, Clone)]
pub struct Privileged {
    /// The launcher's socket.
    pub launcher: PathBuf,
    /// The executor's socket.
    pub executor: PathBuf,
    /// The API process's uid and gid (what [`drop_to`] drops to).
    pub api: (u32, u32),
    /// The authority directory.
    pub authority_dir: PathBuf,
}

/// Splits an authority with sessions (see the module's docs), as root, before it
/// serves: gives the authority directory and the sessions directory (but sessions'
/// trees and homes) to the API user, binds the two private sockets, starts the
/// launcher (root) and the executor (`executor_user`). The caller binds its
/// listener, then calls [`drop_to`] with [`Privileged::api`].
///
/// # Errors
/// Not root; a user that does not exist; a directory the API user cannot reach;
/// a piece that cannot be started.
pub fn setup(
    authority_dir: &Path,
    config: &crate::config::SessionsConfig,
) -> Result<Privileged, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "agent sessions need `flotilla serve` started as root: it keeps only a launcher as root, the API runs as [privileges] api_user"
                .into(),
        );
    }
    let api = resolve_user(&config.privileges.api_user)?;
    let executor = resolve_role_user(&config.privileges.executor_user)?;
    let sessions_dir = config
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_SESSIONS_DIR));
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&sessions_dir)
            .map_err(|e| fail(&format!("making {}", sessions_dir.display()), &e))?;
    }
    // Trees and homes are their sessions'; `sessions.toml` stays root's (the
    // launcher and the executor read it at start: the API must not be able to
    // rewrite it); everything else of the authority directory and the sessions
    // directory is the API's. Walked from directory descriptors, never through a
    // link: a process of the API's uid may still run while this runs.
    let authority =
        open_top(authority_dir).map_err(|e| fail(&format!("{}", authority_dir.display()), &e))?;
    let sessions =
        open_top(&sessions_dir).map_err(|e| fail(&format!("{}", sessions_dir.display()), &e))?;
    let sessions_id = dev_ino(&sessions).map_err(|e| fail("the sessions directory", &e))?;
    own_beneath(&authority, api, &|depth, name, id| {
        !(id == sessions_id || (depth == 0 && name == crate::config::SESSIONS_CONFIG_FILE))
    })
    .map_err(|e| {
        fail(
            &format!("giving {} to the API user", authority_dir.display()),
            &e,
        )
    })?;
    own(&authority, None, api).map_err(|e| fail("the authority directory", &e))?;
    own_beneath(&sessions, api, &|depth, name, _| {
        !(depth == 1 && (name == "tree" || name == "home"))
    })
    .map_err(|e| {
        fail(
            &format!("giving {} to the API user", sessions_dir.display()),
            &e,
        )
    })?;
    own(&sessions, None, api).map_err(|e| fail("the sessions directory", &e))?;
    for p in [authority_dir, sessions_dir.as_path()] {
        if let Some(closed) = closed_to(p, api.0, api.1) {
            return Err(format!(
                "{} cannot be reached by the API user ({}): {} is closed to it (give it o+x)",
                p.display(),
                config.privileges.api_user,
                closed.display()
            ));
        }
    }
    let run = authority_dir.join("run");
    {
        use nix::sys::stat::Mode;
        let _ = nix::sys::stat::mkdirat(&authority, "run", Mode::from_bits_truncate(0o700));
        let fd = dir_beneath(&authority, &["run"]).map_err(|e| fail("the run directory", &e))?;
        own(&fd, None, api).map_err(|e| fail("the run directory", &e))?;
    }
    let launcher = run.join(LAUNCHER_SOCKET);
    let executor_socket = run.join(EXECUTOR_SOCKET);
    let run_fd = dir_beneath(&authority, &["run"]).map_err(|e| fail("the run directory", &e))?;
    let l = bind_private(&run_fd, &launcher, api.0, api.1)
        .map_err(|e| fail("the launcher's socket", &e))?;
    spawn_role("launcher", authority_dir, l, None)
        .map_err(|e| fail("starting the launcher", &e))?;
    let x = bind_private(&run_fd, &executor_socket, api.0, api.1)
        .map_err(|e| fail("the executor's socket", &e))?;
    let as_user = (executor.uid != 0).then_some(executor);
    spawn_role("executor", authority_dir, x, as_user)
        .map_err(|e| fail("starting the executor", &e))?;
    Ok(Privileged {
        launcher,
        executor: executor_socket,
        api,
        authority_dir: authority_dir.to_path_buf(),
    })
}

/// The first directory on the way to `path` (its ancestors, then `path` itself)
/// that `uid` (group `gid`) cannot traverse.
pub fn closed_to(path: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    if path.is_dir() {
        dirs.push(path);
    }
    dirs.into_iter().find_map(|d| {
        let m = std::fs::metadata(d).ok()?;
        let mode = m.mode();
        let ok = if m.uid() == uid {
            mode & 0o100 != 0
        } else if m.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        (!ok).then(|| d.to_path_buf())
    })
}
