//! The launcher: the one root piece of an authority with sessions (see
//! [`super`]). It serves [`Request`]s on its socket, one per connection, and does
//! nothing else: it starts bubblewrap as a session's uid (argv built here, from its
//! own configuration), hands a session's files to that uid, resets a home, kills
//! runtimes it started, runs `git upload-pack` in a session's tree as its owner,
//! and removes a session's directory.
//!
//! Every path comes from the launcher's own `sessions.toml` and the session id,
//! walked to with `openat(O_NOFOLLOW)`: a request cannot point it anywhere else,
//! and a uid outside `[runtime] uids` is refused.

use super::{dir_beneath, fd_path, open_dir_beneath, read_line, recv, send};
use crate::config::SessionsConfig;
use crate::runtime::{bwrap_argv, sandbox_env, SandboxSpec};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How long `git upload-pack` may run in a session's tree for one push.
const UPLOAD_PACK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// One request to the launcher.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Gives session `id`'s tree and home (made by the API) to `uid`, 0700.
    Own {
        /// The session.
        id: u64,
        /// Its uid (and gid).
        uid: u32,
    },
    /// Removes every dot-entry of session `id`'s home but `.claude/projects`;
    /// answers [`Reply::Reset`].
    ResetHome {
        /// The session.
        id: u64,
        /// Claude Code's conversation id, whose transcript is looked for.
        agent_session: String,
    },
    /// Whether Claude Code's transcript of conversation `agent_session` is in
    /// session `id`'s home; answers [`Reply::Reset`] with nothing removed.
    HasTranscript {
        /// The session.
        id: u64,
        /// Claude Code's conversation id.
        agent_session: String,
    },
    /// Writes `token` to `run/token` of session `id`, 0400, owned by `uid`.
    Token {
        /// The session.
        id: u64,
        /// Its uid.
        uid: u32,
        /// The credential.
        token: String,
    },
    /// Gives the runtime's sockets in `run/` to `uid` (0600).
    Sockets {
        /// The session.
        id: u64,
        /// Its uid.
        uid: u32,
    },
    /// Starts session `id`'s sandbox as `uid`; standard input, output and error
    /// come as three descriptors. Answers [`Reply::Started`], then
    /// [`Reply::Exited`] on the same connection when it ends.
    Spawn {
        /// The session.
        id: u64,
        /// Its uid (and gid).
        uid: u32,
        /// Its repository (a name of `[repos]`).
        repo: String,
        /// `claude` (Claude Code) or `bridge` (this program's `sandbox-bridge`).
        program: String,
        /// The program's arguments.
        args: Vec<String>,
        /// The sandbox's whole environment.
        env: Vec<(String, String)>,
    },
    /// Kills (SIGKILL) the sandbox `pid` this launcher started.
    Kill {
        /// bwrap's pid.
        pid: u32,
    },
    /// Runs `git upload-pack` in session `id`'s tree as `uid`, on the two
    /// descriptors given (its standard input and output); answers
    /// [`Reply::Exited`].
    UploadPack {
        /// The session.
        id: u64,
        /// Its uid.
        uid: u32,
    },
    /// Removes session `id`'s whole directory; answers [`Reply::Removed`].
    Remove {
        /// The session.
        id: u64,
    },
}

/// The launcher's answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    /// Done.
    Ok,
    /// Refused or failed: why.
    Error {
        /// Why.
        message: String,
    },
    /// A home was reset.
    Reset {
        /// What was removed, relative to the home.
        removed: Vec<String>,
        /// Whether the conversation's transcript is there.
        transcript: bool,
    },
    /// A sandbox started.
    Started {
        /// bwrap's pid.
        pid: u32,
        /// Its start time (clock ticks since boot).
        start_ticks: u64,
    },
    /// A process ended: its exit code (`None`: a signal).
    Exited {
        /// The code.
        code: Option<i32>,
    },
    /// A session's directory was removed (measured before and after, links
    /// not followed, hard links counted once, directories not counted).
    Removed {
        /// Bytes of its files before.
        bytes: u64,
        /// Its files before.
        files: u64,
        /// Bytes of the files that could not be removed.
        left_bytes: u64,
        /// Files that could not be removed.
        left_files: u64,
        /// Why something was left.
        problem: Option<String>,
    },
}

/// A sandbox it started: taken (reaped) once, under this lock.
type Slot = Arc<Mutex<Option<std::process::Child>>>;

/// What the launcher knows, all from its own configuration.
struct Launcher {
    config: SessionsConfig,
    sessions_dir: PathBuf,
    uids: (u32, u32),
    claude: PathBuf,
    flotilla: PathBuf,
    hidden: Vec<PathBuf>,
    mirrors: PathBuf,
    /// Sandboxes it started and has not reaped: pid → whether it ended.
    children: Mutex<HashMap<u32, Slot>>,
}

/// Serves the launcher on `listener` until the process ends (`flotilla serve
/// launcher`).
///
/// # Errors
/// When `sessions.toml` cannot be read.
pub fn serve(authority_dir: &Path, listener: std::os::unix::net::UnixListener) -> io::Result<()> {
    let config = SessionsConfig::load(&authority_dir.join(crate::config::SESSIONS_CONFIG_FILE))
        .map_err(io::Error::other)?;
    let sessions_dir = config
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_SESSIONS_DIR));
    let uids = crate::config::parse_uids(&config.runtime.uids).map_err(io::Error::other)?;
    let claude = match (&config.runtime.kubernetes, &config.runtime.claude) {
        // Runtimes are pods: nothing here runs Claude Code.
        (Some(k), _) => k.claude.clone(),
        (None, Some(p)) => p.clone(),
        (None, None) => crate::config::which("claude")
            .ok_or_else(|| io::Error::other("`claude` is not on PATH"))?,
    };
    let mut hidden = vec![authority_dir.to_path_buf(), PathBuf::from("/root")];
    if let Some(home) = std::env::var_os("HOME") {
        hidden.push(PathBuf::from(home));
    }
    hidden.dedup();
    let launcher = Arc::new(Launcher {
        mirrors: sessions_dir.join("mirrors"),
        sessions_dir,
        uids,
        claude,
        flotilla: std::env::current_exe()?,
        hidden,
        config,
        children: Mutex::new(HashMap::new()),
    });
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let l = launcher.clone();
        std::thread::spawn(move || {
            let answer = match recv::<Request>(&conn) {
                Ok((req, fds)) => l.handle(&conn, req, fds),
                Err(e) => Reply::Error {
                    message: format!("a request that does not parse: {e}"),
                },
            };
            let _ = send(&conn, &answer, &[]);
        });
    }
    Ok(())
}

impl Launcher {
    fn check_uid(&self, uid: u32) -> io::Result<()> {
        if uid == 0 || uid < self.uids.0 || uid > self.uids.1 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "uid {uid} is not a session uid ({}-{})",
                    self.uids.0, self.uids.1
                ),
            ));
        }
        Ok(())
    }

    /// Session `id`'s directory, opened without following a link.
    fn session_dir(&self, id: u64) -> io::Result<OwnedFd> {
        open_dir_beneath(&self.sessions_dir, &[&id.to_string()])
    }

    fn handle(&self, conn: &UnixStream, req: Request, fds: Vec<OwnedFd>) -> Reply {
        let done = |r: io::Result<Reply>| {
            r.unwrap_or_else(|e| Reply::Error {
                message: e.to_string(),
            })
        };
        match req {
            Request::Own { id, uid } => done(self.own(id, uid).map(|()| Reply::Ok)),
            Request::ResetHome { id, agent_session } => {
                done(self.reset_home(id, &agent_session, true))
            }
            Request::HasTranscript { id, agent_session } => {
                done(self.reset_home(id, &agent_session, false))
            }
            Request::Token { id, uid, token } => {
                done(self.token(id, uid, &token).map(|()| Reply::Ok))
            }
            Request::Sockets { id, uid } => done(self.sockets(id, uid).map(|()| Reply::Ok)),
            Request::Spawn {
                id,
                uid,
                repo,
                program,
                args,
                env,
            } => match self.spawn(id, uid, &repo, &program, args, env, fds) {
                Ok((pid, ticks, child)) => {
                    if send(
                        conn,
                        &Reply::Started {
                            pid,
                            start_ticks: ticks,
                        },
                        &[],
                    )
                    .is_err()
                    {
                        // Nobody to tell: it still runs, and is reaped below.
                    }
                    done(Ok(self.wait(pid, child)))
                }
                Err(e) => done(Err(e)),
            },
            Request::Kill { pid } => done(self.kill(pid).map(|()| Reply::Ok)),
            Request::UploadPack { id, uid } => done(self.upload_pack(id, uid, fds)),
            Request::Remove { id } => done(self.remove(id)),
        }
    }

    fn own(&self, id: u64, uid: u32) -> io::Result<()> {
        self.check_uid(uid)?;
        let sdir = self.session_dir(id)?;
        for name in ["tree", "home"] {
            let top = dir_beneath(&sdir, &[name])?;
            super::own_beneath(&top, (uid, uid), &|_, _, _| true)?;
            nix::sys::stat::fchmod(&top, nix::sys::stat::Mode::from_bits_truncate(0o700))
                .map_err(io::Error::from)?;
            nix::unistd::fchown(
                &top,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(uid)),
            )
            .map_err(io::Error::from)?;
        }
        Ok(())
    }

    fn reset_home(&self, id: u64, agent_session: &str, reset: bool) -> io::Result<Reply> {
        let sdir = self.session_dir(id)?;
        let home = dir_beneath(&sdir, &["home"])?;
        let removed = if reset {
            reset_home(&fd_path(&home))?
        } else {
            Vec::new()
        };
        let transcript = has_transcript(&fd_path(&home), agent_session);
        Ok(Reply::Reset {
            removed,
            transcript,
        })
    }

    fn token(&self, id: u64, uid: u32, token: &str) -> io::Result<()> {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::Mode;
        self.check_uid(uid)?;
        let sdir = self.session_dir(id)?;
        let run = dir_beneath(&sdir, &["run"])?;
        let _ = nix::unistd::unlinkat(&run, "token", nix::unistd::UnlinkatFlags::NoRemoveDir);
        let fd = openat(
            &run,
            "token",
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o400),
        )
        .map_err(io::Error::from)?;
        let file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut &file, token.as_bytes())?;
        nix::unistd::fchown(
            &file,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(uid)),
        )
        .map_err(io::Error::from)
    }

    fn sockets(&self, id: u64, uid: u32) -> io::Result<()> {
        self.check_uid(uid)?;
        let sdir = self.session_dir(id)?;
        let run = dir_beneath(&sdir, &["run"])?;
        for name in ["model.sock", "egress.sock", "api.sock"] {
            nix::unistd::fchownat(
                &run,
                name,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(uid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(io::Error::from)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        id: u64,
        uid: u32,
        repo: &str,
        program: &str,
        args: Vec<String>,
        env: Vec<(String, String)>,
        fds: Vec<OwnedFd>,
    ) -> io::Result<(u32, u64, Slot)> {
        use std::os::unix::process::CommandExt;
        self.check_uid(uid)?;
        let program = match program {
            "claude" => self.claude.clone(),
            "bridge" => self.flotilla.clone(),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("`{other}` is not a runtime program"),
                ))
            }
        };
        if !self.config.repos.contains_key(repo) {
            return Err(io::Error::other(format!("no repository `{repo}`")));
        }
        let [stdin, stdout, stderr]: [OwnedFd; 3] = fds
            .try_into()
            .map_err(|_| io::Error::other("a runtime needs three descriptors"))?;
        // The session's own directories, checked to be real directories here.
        let sdir_fd = self.session_dir(id)?;
        for name in ["tree", "home", "run"] {
            dir_beneath(&sdir_fd, &[name])?;
        }
        let sdir = self.sessions_dir.join(id.to_string());
        let mut hidden = self.hidden.clone();
        hidden.push(self.sessions_dir.clone());
        hidden.extend(
            self.config
                .repos
                .iter()
                .filter(|(name, _)| name.as_str() != repo)
                .filter_map(|(_, r)| {
                    let path = r.url.strip_prefix("file://").unwrap_or(&r.url);
                    path.starts_with('/').then(|| PathBuf::from(path))
                })
                .filter(|p| p.exists()),
        );
        let spec = SandboxSpec {
            program,
            args,
            env,
            tree: sdir.join("tree"),
            home: sdir.join("home"),
            writable: self.config.runtime.writable.clone(),
            hidden,
            readable: vec![
                self.flotilla.clone(),
                self.claude.clone(),
                self.mirrors.join(format!("{repo}.git")),
                sdir.join("run"),
            ],
            network: self.config.runtime.network,
        };
        let argv = bwrap_argv(&spec);
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .uid(uid)
            .gid(uid)
            .stdin(std::process::Stdio::from(stdin))
            .stdout(std::process::Stdio::from(stdout))
            .stderr(std::process::Stdio::from(stderr))
            .env_clear()
            .envs(sandbox_env(&spec));
        // Supplementary groups: none (std drops root's before switching).
        let child = cmd.spawn()?;
        let pid = child.id();
        let ticks = flotilla_exec::process_start_ticks(pid).unwrap_or(0);
        let slot = Arc::new(Mutex::new(Some(child)));
        self.children
            .lock()
            .expect("not poisoned")
            .insert(pid, slot.clone());
        Ok((pid, ticks, slot))
    }

    /// Waits (without reaping) for `pid` to end, then reaps it under its lock, so
    /// a kill never reaches a reused pid.
    fn wait(&self, pid: u32, slot: Slot) -> Reply {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        let _ = waitid(
            Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        );
        let code = slot
            .lock()
            .expect("not poisoned")
            .take()
            .and_then(|mut c| c.wait().ok())
            .and_then(|s| s.code());
        self.children.lock().expect("not poisoned").remove(&pid);
        Reply::Exited { code }
    }

    fn kill(&self, pid: u32) -> io::Result<()> {
        let slot = self
            .children
            .lock()
            .expect("not poisoned")
            .get(&pid)
            .cloned()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("pid {pid} is not a runtime this launcher started"),
                )
            })?;
        let mut held = slot.lock().expect("not poisoned");
        if let Some(child) = held.as_mut() {
            // Not reaped yet (the waiter reaps under this lock): still ours.
            let _ = child.kill();
        }
        Ok(())
    }

    fn upload_pack(&self, id: u64, uid: u32, fds: Vec<OwnedFd>) -> io::Result<Reply> {
        use std::os::unix::process::CommandExt;
        self.check_uid(uid)?;
        let [input, output]: [OwnedFd; 2] = fds
            .try_into()
            .map_err(|_| io::Error::other("upload-pack needs two descriptors"))?;
        // A real directory now (not a link or a `gitdir:` file); the path is
        // handed to git as its owner, who can reach only what it could anyway.
        let sdir = self.session_dir(id)?;
        let tree = dir_beneath(&sdir, &["tree"])?;
        dir_beneath(&tree, &[".git"])?;
        let gitdir = self
            .sessions_dir
            .join(id.to_string())
            .join("tree")
            .join(".git");
        let mut child = std::process::Command::new("git-upload-pack")
            .arg("--strict")
            .arg(&gitdir)
            .uid(uid)
            .gid(uid)
            .env_clear()
            .env("PATH", "/usr/lib/git-core:/usr/bin:/bin")
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::from(input))
            .stdout(std::process::Stdio::from(output))
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // A deadline: the tree is the agent's (a FIFO where git reads would hold
        // it, and the mirror's lock with it, forever).
        let pid = child.id();
        let (done, waiting) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if waiting.recv_timeout(UPLOAD_PACK_DEADLINE).is_err() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        });
        // Ended (not reaped yet, so the watchdog can never hit a reused pid):
        // stop the watchdog, then reap.
        let _ = nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        );
        let _ = done.send(());
        let _ = watchdog.join();
        let status = child.wait()?;
        Ok(Reply::Exited {
            code: status.code(),
        })
    }

    fn remove(&self, id: u64) -> io::Result<Reply> {
        let sessions = open_dir_beneath(&self.sessions_dir, &[])?;
        let sdir = dir_beneath(&sessions, &[&id.to_string()])?;
        let (bytes, files) = measure(&fd_path(&sdir))?;
        drop(sdir);
        let mut problems = Vec::new();
        remove_beneath(
            &sessions,
            std::ffi::OsStr::new(&id.to_string()),
            &self.sessions_dir,
            &mut problems,
        );
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        let (left_bytes, left_files) = match dir_beneath(&sessions, &[&id.to_string()]) {
            Ok(left) => measure(&fd_path(&left))?,
            Err(_) => (0, 0),
        };
        Ok(Reply::Removed {
            bytes,
            files,
            left_bytes,
            left_files,
            problem,
        })
    }
}

/// Removes `name` in the open directory `dir` (a file, a link or a directory
/// tree) without ever following a link: `std::fs::remove_dir_all` first (it walks
/// with `openat(O_NOFOLLOW)`); where that fails, entry by entry from directory
/// descriptors, so that what remains is only what cannot go. Each failure is
/// pushed to `problems`, naming the path as `shown_dir/name` (for people only:
/// nothing is opened by that name).
fn remove_beneath(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    shown_dir: &Path,
    problems: &mut Vec<String>,
) {
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstatat, Mode, SFlag};
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let shown_path = shown_dir.join(name);
    let shown = shown_path.display();
    let Ok(st) = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return;
    };
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        if let Err(e) = unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            problems.push(format!("removing {shown}: {e}"));
        }
        return;
    }
    if std::fs::remove_dir_all(fd_path(dir).join(name)).is_ok() {
        return;
    }
    let sub = match openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("opening {shown}: {e}"));
            return;
        }
    };
    match std::fs::read_dir(fd_path(&sub)) {
        Ok(rd) => {
            for e in rd.flatten() {
                remove_beneath(&sub, &e.file_name(), &shown_path, problems);
            }
        }
        Err(e) => problems.push(format!("reading {shown}: {e}")),
    }
    if let Err(e) = unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        if e != nix::errno::Errno::ENOTEMPTY {
            problems.push(format!("removing {shown}: {e}"));
        }
    }
}

/// Bytes and files under `dir`: links not followed, hard links counted once,
/// directories not counted.
fn measure(dir: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut files) = (0, 0);
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let m = std::fs::symlink_metadata(e.path())?;
            if m.is_dir() {
                stack.push(e.path());
            } else {
                files += 1;
                if seen.insert((m.dev(), m.ino())) {
                    bytes += m.len();
                }
            }
        }
    }
    Ok((bytes, files))
}

/// The API's side: one request, one answer.
///
/// # Errors
/// The socket's; the launcher's refusal, as [`io::ErrorKind::Other`].
pub fn call(socket: &Path, req: &Request, fds: &[RawFd]) -> io::Result<Reply> {
    let conn = super::connect(socket)?;
    send(&conn, req, fds)?;
    let reply: Reply = read_line(&conn)?;
    match reply {
        Reply::Error { message } => Err(io::Error::other(message)),
        r => Ok(r),
    }
}

/// The API's side of [`Request::Spawn`]: the pid and start time, and the open
/// connection on which the exit comes ([`wait_exit`]).
///
/// # Errors
/// The socket's; the launcher's refusal.
pub fn spawn(socket: &Path, req: &Request, fds: &[RawFd]) -> io::Result<(u32, u64, UnixStream)> {
    let conn = super::connect(socket)?;
    send(&conn, req, fds)?;
    let reply: Reply = read_line(&conn)?;
    match reply {
        Reply::Started { pid, start_ticks } => Ok((pid, start_ticks, conn)),
        Reply::Error { message } => Err(io::Error::other(message)),
        other => Err(io::Error::other(format!("unexpected answer: {other:?}"))),
    }
}

/// Waits on a [`spawn`] connection for the runtime's exit code (`None`: a signal,
/// or the launcher went away).
pub fn wait_exit(conn: UnixStream) -> Option<i32> {
    match read_line::<Reply>(&conn) {
        Ok(Reply::Exited { code }) => code,
        _ => None,
    }
}

/// Whether Claude Code's transcript of conversation `agent_session` is in the agent's
/// `home`: a regular file `.claude/projects/<project>/<agent_session>.jsonl` (links
/// not followed).
pub fn has_transcript(home: &std::path::Path, agent_session: &str) -> bool {
    let file = format!("{agent_session}.jsonl");
    !agent_session.contains('/')
        && std::fs::read_dir(home.join(".claude/projects"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| std::fs::symlink_metadata(d.path().join(&file)).is_ok_and(|m| m.is_file()))
}

/// Removes from an agent's `home` every entry whose name starts with `.` — shell
/// start-up files (`.bashrc`, `.profile`, `.zshenv`…), `.gitconfig`, `.config`,
/// `.ssh`, Claude Code's `.claude.json` (MCP servers) and everything under
/// `.claude` but `.claude/projects` (the transcripts a resumed conversation needs)
/// — so nothing one runtime wrote there runs in the next without a tool call the
/// gate saw. Links are removed, never followed. No runtime runs while this runs.
/// Returns the removed paths, relative to `home`.
pub fn reset_home(home: &std::path::Path) -> std::io::Result<Vec<String>> {
    fn remove(p: &std::path::Path) -> std::io::Result<()> {
        if std::fs::symlink_metadata(p)?.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        }
    }
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(home)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if name == ".claude" && std::fs::symlink_metadata(&path)?.is_dir() {
            for inner in std::fs::read_dir(&path)? {
                let inner = inner?;
                let inner_name = inner.file_name().to_string_lossy().into_owned();
                let keep =
                    inner_name == "projects" && std::fs::symlink_metadata(inner.path())?.is_dir();
                if !keep {
                    remove(&inner.path())?;
                    removed.push(format!(".claude/{inner_name}"));
                }
            }
            continue;
        }
        remove(&path)?;
        removed.push(name);
    }
    removed.sort();
    Ok(removed)
}
