//! Session runtimes: where a session's agent process runs.
//!
//! A runtime is the agent's process for one session (at most one at a time). The
//! `local` runtime runs it in a bubblewrap sandbox (`bwrap`, Debian's
//! `bubblewrap`, <https://github.com/containers/bubblewrap>) on the authority's
//! host: the whole file system read-only, the session's tree and the agent's home
//! writable, the authority's directory (its database, CA key, operator
//! credential) and root's home hidden behind empty tmpfs mounts, private `/tmp`,
//! `/proc` and `/dev`, no network of its own but what the authority relays (or the
//! host's, or none, as the session's configuration says); bwrap itself is started as an unprivileged user, so nothing inside can
//! gain root.
//!
//! This module builds the sandbox's argv ([`bwrap_argv`], pure), says what a
//! runtime is ([`RuntimeKind`]) and what every runtime does ([`Runtime`]: prepare a
//! session's files for its uid, start the agent's process from a [`StartSpec`],
//! hand back a [`Started`] whose end can be awaited, stop it, remove the session).
//! The first implementation is [`local::Local`], the bubblewrap sandbox started by
//! the root launcher ([`crate::privsep::launcher`]); a `kubernetes` runtime (one
//! Pod per session) fits the same shape: a spec in, a handle whose liveness is
//! reconciled against the platform out.

pub mod local;

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::path::PathBuf;

/// Which kind of runtime a session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// The agent's process in a bubblewrap sandbox on the authority's host.
    #[default]
    Local,
    /// One Pod per runtime on a Kubernetes cluster (`flotilla-kube`): the session's
    /// tree and home on a PersistentVolumeClaim of its own, its run files in a
    /// Secret of its own, liveness from the pod's phase and UID through a watch.
    Kubernetes,
}

/// A Pod that runs (ran) a session's runtime: its identity on the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`: a pod deleted and made again under the same name is
    /// another pod.
    pub uid: String,
}

/// A runtime as recorded when it started: what [`Runtime::running`] and
/// [`Runtime::stop`] are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Its process's pid (0 for a pod).
    pub pid: u32,
    /// Its start time, clock ticks since boot (0 for a pod).
    pub start_ticks: u64,
    /// Its pod, for a [`RuntimeKind::Kubernetes`] runtime.
    pub pod: Option<PodRef>,
}

/// The sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No network of its own (`--unshare-net`: loopback only); the model API, an
    /// allowlist of domains (HTTP `CONNECT`) and the authority's API are reached
    /// through the authority, over Unix sockets bound into the sandbox and bridged
    /// to loopback ports inside ([`crate::bridge`]). The model credential is
    /// injected outside: no real secret is inside the sandbox. The default.
    #[default]
    Proxy,
    /// The host's network namespace (the agent reaches its model API and the
    /// authority's gate over it, and anything else the host reaches).
    Host,
    /// A private network namespace with loopback only (`--unshare-net`) and no
    /// bridge: nothing outside is reachable, the gate included.
    None,
}

/// What a local runtime runs, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The program inside the sandbox (absolute path, visible read-only).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The whole environment inside: given to bwrap as its own environment
    /// ([`sandbox_env`]), which it passes on, never as `--setenv` arguments that
    /// every local user could read in `ps`.
    pub env: Vec<(String, String)>,
    /// The session's tree: writable, the working directory.
    pub tree: PathBuf,
    /// The agent's home (`HOME`): writable; its caches and transcripts live here
    /// and survive the runtime.
    pub home: PathBuf,
    /// More writable paths (e.g. a local bare remote the agent may push to).
    pub writable: Vec<PathBuf>,
    /// Paths hidden behind an empty tmpfs (the authority's directory, `/root`…).
    pub hidden: Vec<PathBuf>,
    /// Files or directories bound read-only again after the hidden paths and the
    /// private `/tmp` (the program itself and the gate's hook, wherever they are).
    pub readable: Vec<PathBuf>,
    /// The network.
    pub network: Network,
}

/// The argv that runs `spec` in bubblewrap (`bwrap` first), to be started as the
/// unprivileged runtime user. Mount order matters to bwrap (later mounts cover
/// earlier ones): `/` read-only, then `/dev`, `/proc`, private `/tmp`, the hidden
/// paths, then the writable binds, so a writable path inside a hidden one (the
/// session's tree under the authority's directory) is still reachable.
///
/// `--die-with-parent`: the sandbox dies with bwrap and bwrap with the authority
/// that started it, so killing bwrap's pid tears the whole runtime down and no
/// runtime outlives its authority (the conversation does: the next message
/// resumes it). `--new-session` keeps the agent off the caller's terminal
/// (TIOCSTI).
pub fn bwrap_argv(spec: &SandboxSpec) -> Vec<String> {
    let mut a: Vec<String> = [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .map(String::from)
    .to_vec();
    a.extend(["--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"].map(String::from));
    for h in &spec.hidden {
        a.push("--tmpfs".into());
        a.push(h.display().to_string());
    }
    for r in &spec.readable {
        a.push("--ro-bind".into());
        a.push(r.display().to_string());
        a.push(r.display().to_string());
    }
    for w in std::iter::once(&spec.home)
        .chain(std::iter::once(&spec.tree))
        .chain(&spec.writable)
    {
        a.push("--bind".into());
        a.push(w.display().to_string());
        a.push(w.display().to_string());
    }
    a.extend(
        [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
        ]
        .map(String::from),
    );
    if spec.network != Network::Host {
        a.push("--unshare-net".into());
    }
    a.push("--chdir".into());
    a.push(spec.tree.display().to_string());
    a.push("--".into());
    a.push(spec.program.display().to_string());
    a.extend(spec.args.iter().cloned());
    a
}

/// The environment to start bwrap with (and so the agent's): `spec.env` and
/// `HOME` (the agent's home), nothing else.
pub fn sandbox_env(spec: &SandboxSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, _)| k != "HOME")
        .cloned()
        .collect();
    env.push(("HOME".into(), spec.home.display().to_string()));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            program: "/opt/claude".into(),
            args: vec!["-p".into(), "hi there".into()],
            env: vec![("A".into(), "1".into())],
            tree: "/srv/flotilla/sessions/3/tree".into(),
            home: "/srv/flotilla/sessions/3/home".into(),
            writable: vec!["/srv/git/origin.git".into()],
            hidden: vec!["/srv/flotilla".into(), "/root".into()],
            readable: vec!["/root/bin/flotilla".into()],
            network: Network::Host,
        }
    }

    #[test]
    fn hidden_paths_come_before_the_writable_binds_inside_them() {
        let a = bwrap_argv(&spec());
        let pos = |s: &str| a.iter().position(|x| x == s).unwrap();
        assert_eq!(a[0], "bwrap");
        assert!(pos("/srv/flotilla") < pos("/srv/flotilla/sessions/3/tree"));
        assert!(pos("/root") < pos("/srv/flotilla/sessions/3/home"));
        assert!(pos("/root") < pos("/root/bin/flotilla"));
        assert!(!a.contains(&"--unshare-net".to_string()));
        // The program and its arguments come last, after `--`, unsplit.
        let dd = pos("--");
        assert_eq!(&a[dd + 1..], ["/opt/claude", "-p", "hi there"]);
        assert_eq!(a[pos("--chdir") + 1], "/srv/flotilla/sessions/3/tree");
        // No environment on the command line (`ps` shows it to every user).
        assert!(!a.iter().any(|x| x == "--setenv" || x == "A"));
        let env = sandbox_env(&spec());
        assert_eq!(
            env,
            vec![
                ("A".to_string(), "1".to_string()),
                (
                    "HOME".to_string(),
                    "/srv/flotilla/sessions/3/home".to_string()
                )
            ]
        );
    }

    #[test]
    fn only_the_host_network_is_shared() {
        let mut s = spec();
        for (network, unshared) in [
            (Network::None, true),
            (Network::Proxy, true),
            (Network::Host, false),
        ] {
            s.network = network;
            assert_eq!(
                bwrap_argv(&s).contains(&"--unshare-net".to_string()),
                unshared,
                "{network:?}"
            );
        }
    }
}

/// What a runtime needs to start one session's agent process.
#[derive(Debug)]
pub struct StartSpec {
    /// The session.
    pub id: u64,
    /// The runtime's number (1, 2, 3…).
    pub boot: u64,
    /// Its uid (and gid).
    pub uid: u32,
    /// Its repository (a name of `sessions.toml`'s `[repos]`).
    pub repo: String,
    /// `claude` (Claude Code) or `bridge` (`flotilla sandbox-bridge`, which runs
    /// Claude Code as its child).
    pub program: String,
    /// The program's arguments.
    pub args: Vec<String>,
    /// The process's whole environment.
    pub env: Vec<(String, String)>,
    /// Its standard input, output and error.
    pub stdio: [File; 3],
}

/// Blocks until a runtime ends; its exit code, `None` for a signal or when the end
/// cannot be known.
pub type Exit = Box<dyn FnOnce() -> Option<i32> + Send>;

/// A started runtime: its identity, and its end to wait for.
pub struct Started {
    /// The process's pid (bwrap's, for [`local::Local`]; 0 for a pod).
    pub pid: u32,
    /// Its start time, clock ticks since boot (with the pid, its identity; 0 for a
    /// pod).
    pub start_ticks: u64,
    /// Its pod, for a [`RuntimeKind::Kubernetes`] runtime.
    pub pod: Option<PodRef>,
    /// Blocks until the process ends; its exit code, `None` for a signal or when
    /// the end cannot be known (the runtime's supervisor went away).
    pub exit: Exit,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("pid", &self.pid)
            .field("start_ticks", &self.start_ticks)
            .field("pod", &self.pod)
            .finish_non_exhaustive()
    }
}

/// What resetting a session's home found ([`Runtime::reset_home`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeReset {
    /// What was removed, relative to the home.
    pub removed: Vec<String>,
    /// Whether Claude Code's transcript of the conversation is there.
    pub transcript: bool,
}

/// A session's directory removed ([`Runtime::remove`]): measured before and
/// after, links not followed, hard links counted once, directories not counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removed {
    /// Bytes of its files before.
    pub bytes: u64,
    /// Its files before.
    pub files: u64,
    /// Bytes of the files that could not be removed.
    pub left_bytes: u64,
    /// Files that could not be removed.
    pub left_files: u64,
    /// Why something was left.
    pub problem: Option<String>,
    /// What was removed outside this host, for people (`PersistentVolumeClaim
    /// agents/flotilla-session-3`…).
    pub elsewhere: Vec<String>,
}

/// Where sessions' agent processes run. Every method blocks (a socket round trip,
/// or an API call for a cluster): call it off an async runtime's workers.
///
/// # Errors
/// Every method: [`io::Error`] when the runtime cannot be reached or refuses
/// (the refusal's reason as the message).
pub trait Runtime: Send + Sync + std::fmt::Debug {
    /// Which kind of runtime this is.
    fn kind(&self) -> RuntimeKind;
    /// Gives session `id`'s tree and home to `uid`, its own only.
    fn own(&self, id: u64, uid: u32) -> io::Result<()>;
    /// Removes what the last runtime left in session `id`'s home that would run in
    /// the next (start-up files), keeping conversation `agent_session`'s transcript.
    fn reset_home(&self, id: u64, agent_session: &str) -> io::Result<HomeReset>;
    /// Whether conversation `agent_session`'s transcript is in session `id`'s home.
    fn has_transcript(&self, id: u64, agent_session: &str) -> io::Result<bool>;
    /// Gives session `id`'s runtime its credential, readable by `uid` only.
    fn give_credential(&self, id: u64, uid: u32, token: &str) -> io::Result<()>;
    /// Gives session `id`'s network sockets (its only way out) to `uid`.
    fn give_sockets(&self, id: u64, uid: u32) -> io::Result<()>;
    /// Starts the agent's process.
    fn start(&self, spec: StartSpec) -> io::Result<Started>;
    /// Whether the runtime `r` this runtime started still runs: measured now, and
    /// cheap (a `/proc` read, or a watch's cache), since every gate call asks. Never
    /// blocks on a network.
    fn running(&self, r: &Running) -> bool;
    /// Stops the runtime `r` this runtime started (at once: it and everything it
    /// started).
    fn stop(&self, r: &Running) -> io::Result<()>;
    /// Whether runtime `r`, which no longer runs, has nothing more to tell: no end
    /// left to read ([`Runtime::reattach`] would find nothing). True but for a pod
    /// that ended and is still there.
    fn settled(&self, r: &Running) -> bool {
        let _ = r;
        true
    }
    /// Follows runtime `r`, which runs but was started by an earlier process of the
    /// authority (one that restarted since), to its end: its output from its start
    /// rewritten into `stdio[0]` (emptied first, only when followed), its end's
    /// words written after what `stdio[1]` holds; the wait
    /// for its exit code, as [`Started::exit`]. `None` when this runtime cannot (a
    /// local runtime never outlives the authority that started it).
    fn reattach(&self, r: &Running, stdio: [File; 2]) -> Option<Exit> {
        let _ = (r, stdio);
        None
    }
    /// Removes session `id`'s whole directory, measured.
    fn remove(&self, id: u64) -> io::Result<Removed>;
}
