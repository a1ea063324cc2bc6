//! The SSH transport: the system's OpenSSH client through the `openssh` crate, so
//! the user's `~/.ssh/config` (aliases, `User`, `Port`, `ProxyJump`), agent and
//! `known_hosts` apply as they do for `ssh` itself.
//!
//! One multiplexed master connection per host per invocation ([`Pool`]): it is
//! opened on first use, shared by every call to that host (each call is a session
//! channel over it, at most [`CHANNELS_PER_HOST`] at once, below OpenSSH's default
//! `MaxSessions` of 10), and closed when the [`Pool`] is dropped. A failed
//! connection is remembered for the rest of the invocation: an unreachable host
//! costs one connect timeout, not one per component.
//!
//! Host keys are always checked (`StrictHostKeyChecking=yes`, `BatchMode=yes`): an
//! unknown or changed key is a [`TransportError`] that names the host, the
//! fingerprint it presented and how to trust it; it is never accepted silently.

use flotilla_model::inventory::TransportKind;
use flotilla_model::topology::Host;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Concurrent session channels per master connection.
pub const CHANNELS_PER_HOST: usize = 8;

/// Where `flotilla host install` puts releases on a host, for its login shell
/// (`$HOME` expands there): `versions/<version>-<sha256 prefix>/flotilla`, the
/// `current` link to the one in use and `previous` to the one before.
pub const REMOTE_ROOT: &str = "$HOME/.local/lib/flotilla";

/// Why talking to a host failed. Every variant names the host.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The host presented a key that `known_hosts` does not have.
    #[error("host `{host}` ({address}): its host key is not known here; it presented {fingerprint}. If that is the host's key, trust it: {trust}")]
    UnknownHostKey {
        /// Host name in the inventory.
        host: String,
        /// `host:port` dialled.
        address: String,
        /// `SHA256:…` of the key it presented (or why it could not be read).
        fingerprint: String,
        /// A command that records it.
        trust: String,
    },
    /// The host presented a different key than the one recorded.
    #[error("host `{host}` ({address}): its host key CHANGED: it now presents {fingerprint}, not the key recorded in known_hosts (someone may be intercepting the connection, or the host was reinstalled). Refused. If the change is expected: {trust}")]
    ChangedHostKey {
        /// Host name in the inventory.
        host: String,
        /// `host:port` dialled.
        address: String,
        /// `SHA256:…` of the key it now presents.
        fingerprint: String,
        /// Commands that replace the recorded key.
        trust: String,
    },
    /// The host refused every key offered.
    #[error("host `{host}` ({address}): authentication failed for user `{user}`: {detail}")]
    Authentication {
        /// Host name in the inventory.
        host: String,
        /// `host:port` dialled.
        address: String,
        /// Login user.
        user: String,
        /// What ssh said.
        detail: String,
    },
    /// The host could not be reached (timeout, refused, no route, unknown name).
    #[error("host `{host}` ({address}) cannot be reached: {detail}")]
    Unreachable {
        /// Host name in the inventory.
        host: String,
        /// `host:port` dialled.
        address: String,
        /// What happened.
        detail: String,
    },
    /// A call did not answer within its time.
    #[error("host `{host}` did not answer within {} ms ({what})", .after.as_millis())]
    Timeout {
        /// Host name in the inventory.
        host: String,
        /// What was asked.
        what: String,
        /// The time allowed.
        after: Duration,
    },
    /// The connection (or the local `ssh` client) went away during a call.
    #[error("host `{host}`: the connection was lost during the call ({detail}); what the call did there is unknown until the host is observed again")]
    ConnectionLost {
        /// Host name in the inventory.
        host: String,
        /// What ssh said.
        detail: String,
    },
    /// Flotilla is not installed on the host.
    #[error("host `{host}`: flotilla is not installed there, or cannot run ({path}: command not found, exit 127): run `flotilla host install {host}`")]
    NotInstalled {
        /// Host name in the inventory.
        host: String,
        /// What was looked for.
        path: String,
    },
    /// The remote flotilla speaks another protocol version.
    #[error("host `{host}` runs flotilla {remote_version} (protocol {remote_protocol}), this is flotilla {local_version} (protocol {local_protocol}): run `flotilla host install {host}` to install this version there")]
    VersionSkew {
        /// Host name in the inventory.
        host: String,
        /// This binary's version.
        local_version: String,
        /// This binary's protocol.
        local_protocol: u32,
        /// The remote binary's version.
        remote_version: String,
        /// The remote binary's protocol.
        remote_protocol: u32,
    },
    /// The host is not an `ssh` host.
    #[error("host `{0}` is not reached over ssh")]
    NotSsh(String),
    /// The host has `transport = "agent"`: its own `flotilla agent` runs its steps and
    /// reports its status to the authority, so it is reached through the authority
    /// only, never directly.
    #[error("host `{0}` is driven by its agent (transport `agent`): operate it through the authority with `--server URL` (or FLOTILLA_SERVER)")]
    AgentHost(String),
    /// Anything else ssh or the remote side reported.
    #[error("host `{host}`: {detail}")]
    Failed {
        /// Host name in the inventory.
        host: String,
        /// What happened.
        detail: String,
    },
}

impl TransportError {
    /// Whether the host could not be reached at all (as opposed to refusing us or
    /// answering wrongly): its components are then `unreachable`.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            TransportError::Unreachable { .. }
                | TransportError::Timeout { .. }
                | TransportError::ConnectionLost { .. }
        )
    }
}

/// `~/x` → `$HOME/x` on this machine; anything else unchanged.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The `ssh` options that reach `host` as the inventory says, for an `ssh` command
/// line (before the destination): batch mode, strict host key checking, port, user,
/// identity (`IdentitiesOnly=yes` with it) and every `ssh_options` entry as `-o K=V`.
pub fn client_args(host: &Host) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
    ];
    if let Some(p) = host.port {
        args.extend(["-p".into(), p.to_string()]);
    }
    if let Some(u) = &host.user {
        args.extend(["-l".into(), u.clone()]);
    }
    if let Some(k) = &host.identity {
        args.extend([
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-i".into(),
            expand_home(k).display().to_string(),
        ]);
    }
    for (k, v) in &host.ssh_options {
        let v = option_value(k, v);
        args.extend(["-o".into(), format!("{k}={v}")]);
    }
    args
}

/// An `ssh_options` value as ssh gets it: file options (`UserKnownHostsFile`,
/// `IdentityFile`) with `~/` expanded on this machine.
fn option_value(key: &str, value: &str) -> String {
    if key.eq_ignore_ascii_case("UserKnownHostsFile") || key.eq_ignore_ascii_case("IdentityFile") {
        expand_home(value).display().to_string()
    } else {
        value.to_string()
    }
}

/// An OpenSSH client config (`ssh -F`) holding `host`'s `ssh_options` ahead of the
/// user's and the system's own files (the first value of an option wins), for the
/// master connection; `None` when there are no such options (ssh reads its usual
/// files then).
fn config_text(host: &Host) -> Option<String> {
    if host.ssh_options.is_empty() {
        return None;
    }
    let mut out = String::from("# written by flotilla for one invocation\nHost *\n");
    for (k, v) in &host.ssh_options {
        let v = option_value(k, v);
        out.push_str(&format!("  {k} \"{}\"\n", v.replace('"', "")));
    }
    out.push_str("  Include ~/.ssh/config\n  Include /etc/ssh/ssh_config\n");
    Some(out)
}

/// Keeping master connections between invocations (opt-in, `--ssh-persist`): the
/// control sockets live in `dir` (inside the state directory, owner-only), each
/// recorded in `<host>-<digest of its settings>.ctl`, and a master exits after
/// `idle` without use. An invocation that finds a live master reuses it: no
/// handshake.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// Where control sockets and their records live.
    pub dir: std::path::PathBuf,
    /// How long an unused master lives (OpenSSH's `ControlPersist`).
    pub idle: Duration,
}

impl Persistence {
    /// Masters kept for `idle` in `<state_root>/run/ssh/` (created owner-only, 0700).
    ///
    /// # Errors
    /// A message when the directory cannot be made, or its path is too long for a
    /// control socket (a `sockaddr_un` holds 108 bytes, and openssh adds
    /// `.ssh-connectionXXXXXX/master`): the caller then keeps one connection per
    /// invocation.
    pub fn in_state_dir(
        state_root: &std::path::Path,
        idle: Duration,
    ) -> Result<Persistence, String> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = state_root.join("run").join("ssh");
        if dir.as_os_str().len() > 70 {
            return Err(format!(
                "cannot keep connections in {}: too long a path for a control socket",
                dir.display()
            ));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot keep connections in {}: {e}", dir.display()))?;
        Ok(Persistence { dir, idle })
    }
}

struct Conn {
    /// `None` only while being dropped.
    session: Option<openssh::Session>,
    /// Leave the master running when this goes away (persistence).
    keep: bool,
    channels: tokio::sync::Semaphore,
    _config: Option<tempfile::NamedTempFile>,
    /// When a call last finished on it (the master exits after [`MASTER_IDLE`]).
    last_used: std::sync::Mutex<std::time::Instant>,
}

impl Conn {
    fn session(&self) -> &openssh::Session {
        self.session.as_ref().expect("present until dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let (true, Some(s)) = (self.keep, self.session.take()) {
            // Leaves the master (and its control directory) for the next invocation.
            let _ = s.detach();
        }
    }
}

/// How long an idle master connection lives (`ControlPersist`): a safety net for a
/// controller killed before it could close it. A connection idle for half of it is
/// checked before use and reopened if it is gone.
const MASTER_IDLE: Duration = Duration::from_secs(60);

type Slot = Arc<tokio::sync::OnceCell<Result<Arc<Conn>, TransportError>>>;

/// The output of a command run on a host.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

/// SSH connections to the hosts of one invocation: at most one master connection
/// per host, opened on first use.
pub struct Pool {
    hosts: std::collections::BTreeMap<String, Host>,
    connect_timeout: Duration,
    slots: std::sync::Mutex<HashMap<String, Slot>>,
    persist: Option<Persistence>,
}

impl Pool {
    /// A fleet over `hosts` (the topology's), connecting within `connect_timeout`.
    pub fn new(hosts: std::collections::BTreeMap<String, Host>, connect_timeout: Duration) -> Pool {
        Pool {
            hosts,
            connect_timeout,
            slots: std::sync::Mutex::new(HashMap::new()),
            persist: None,
        }
    }

    /// Keep master connections between invocations (see [`Persistence`]).
    pub fn persist(mut self, p: Persistence) -> Pool {
        self.persist = Some(p);
        self
    }

    /// The host named `name`.
    ///
    /// # Errors
    /// [`TransportError::AgentHost`] for an `agent` host (reached through the
    /// authority only); [`TransportError::NotSsh`] when it is unknown or local.
    pub fn host(&self, name: &str) -> Result<&Host, TransportError> {
        match self.hosts.get(name) {
            Some(h) if h.transport == TransportKind::Ssh => Ok(h),
            Some(h) if h.transport == TransportKind::Agent => {
                Err(TransportError::AgentHost(name.to_string()))
            }
            _ => Err(TransportError::NotSsh(name.to_string())),
        }
    }

    async fn conn(&self, name: &str) -> Result<Arc<Conn>, TransportError> {
        let host = self.host(name)?.clone();
        let slot: Slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(slots.entry(name.to_string()).or_default())
        };
        let conn = slot.get_or_init(|| self.open(&host)).await.clone()?;
        let idle = conn
            .last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if idle < MASTER_IDLE / 2 || conn.session().check().await.is_ok() {
            return Ok(conn);
        }
        // The master went away while idle: open a new one (once).
        tracing::info!("host `{name}`: the SSH master connection went away; reconnecting");
        let fresh: Slot = Arc::default();
        {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.insert(name.to_string(), Arc::clone(&fresh));
        }
        fresh.get_or_init(|| self.open(&host)).await.clone()
    }

    /// A master connection to `host`: a persisted one still alive, else a new one.
    async fn open(&self, host: &Host) -> Result<Arc<Conn>, TransportError> {
        let record = self.persist.as_ref().map(|p| {
            let settings = flotilla_model::digest::digest_of(host);
            let short = settings
                .trim_start_matches("sha256:")
                .get(..12)
                .unwrap_or("");
            p.dir.join(format!("{}-{short}.ctl", host.name))
        });
        if let Some(record) = &record {
            if let Ok(ctl) = std::fs::read_to_string(record) {
                let session = openssh::Session::resume(
                    std::path::PathBuf::from(ctl.trim()).into_boxed_path(),
                    None,
                );
                if session.check().await.is_ok() {
                    return Ok(Arc::new(Conn::new(session, None, true)));
                }
                // A dead master: forget it, never signal it.
                let _ = session.detach();
                let _ = std::fs::remove_file(record);
            }
        }
        let conn = connect(host, self.connect_timeout, self.persist.as_ref()).await?;
        if let Some(record) = &record {
            let ctl = conn.session().control_socket().display().to_string();
            let _ = std::fs::write(record, ctl);
        }
        Ok(Arc::new(conn))
    }

    /// Opens the master connection to `host` now (if not yet open).
    ///
    /// # Errors
    /// [`TransportError`]: unreachable, host key, authentication…
    pub async fn connect(&self, host: &str) -> Result<(), TransportError> {
        self.conn(host).await.map(|_| ())
    }

    /// Runs `command` (a line for the host's login shell) on `host`, feeding it
    /// `stdin`, and returns its output; the whole call (connecting included) is
    /// bounded by `timeout`.
    ///
    /// # Errors
    /// [`TransportError`]; a command that runs and fails is an `Ok` with its code.
    pub async fn run(
        &self,
        host: &str,
        command: &str,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        self.run_until(host, command, stdin, timeout, None).await
    }

    /// Like [`Pool::run`], but with `hold_stdin` the command's standard input stays
    /// open after `stdin` is written, and is closed (end of file) when that future
    /// completes first: how a long call is told to give up while its answer is
    /// still awaited (within `timeout`).
    ///
    /// # Errors
    /// As [`Pool::run`].
    pub async fn run_until(
        &self,
        host: &str,
        command: &str,
        stdin: &[u8],
        timeout: Duration,
        hold_stdin: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>>,
    ) -> Result<Output, TransportError> {
        let what = command
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        let began = std::time::Instant::now();
        let conn = match tokio::time::timeout(timeout, self.conn(host)).await {
            Ok(c) => c?,
            Err(_) => {
                return Err(TransportError::Unreachable {
                    host: host.to_string(),
                    address: self.host(host).map(dialled).unwrap_or_default(),
                    detail: format!("no SSH connection within {} ms", timeout.as_millis()),
                })
            }
        };
        let timeout = timeout.saturating_sub(began.elapsed());
        let work = async {
            let _permit = conn
                .channels
                .acquire()
                .await
                .map_err(|e| TransportError::Failed {
                    host: host.to_string(),
                    detail: e.to_string(),
                })?;
            let fail = |e: openssh::Error| TransportError::Failed {
                host: host.to_string(),
                detail: format!("{e}{}", source_text(&e)),
            };
            let mut cmd = conn.session().raw_command(command);
            cmd.stdin(openssh::Stdio::piped())
                .stdout(openssh::Stdio::piped())
                .stderr(openssh::Stdio::piped());
            let mut child = cmd.spawn().await.map_err(fail)?;
            let mut input = child.stdin().take();
            if let Some(i) = input.as_mut() {
                // A remote command that exits without reading is not an error here.
                let _ = i.write_all(stdin).await;
                let _ = i.flush().await;
            }
            if hold_stdin.is_none() {
                // End of file for the remote command: the pipe is closed on drop.
                drop(input.take());
            }
            let wait = child.wait_with_output();
            tokio::pin!(wait);
            let waited = match hold_stdin {
                None => wait.await,
                Some(give_up) => {
                    tokio::select! {
                        out = &mut wait => out,
                        () = give_up => {
                            drop(input.take());
                            wait.await
                        }
                    }
                }
            };
            drop(input);
            *conn.last_used.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
            let out = match waited {
                Ok(out) => out,
                // ssh's exit 127: the remote shell found no such command.
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(Output {
                        code: Some(127),
                        stdout: Vec::new(),
                        stderr: e.to_string().into_bytes(),
                    })
                }
                Err(
                    e @ (openssh::Error::RemoteProcessTerminated
                    | openssh::Error::Disconnected
                    | openssh::Error::Master(_)),
                ) => {
                    return Err(TransportError::ConnectionLost {
                        host: host.to_string(),
                        detail: format!("{e}{}", source_text(&e)),
                    })
                }
                Err(e) => return Err(fail(e)),
            };
            Ok(Output {
                code: out.status.code(),
                stdout: out.stdout,
                stderr: out.stderr,
            })
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(TransportError::Timeout {
                host: host.to_string(),
                what,
                after: timeout,
            }),
        }
    }
}

/// `e`'s sources, each after `: ` (empty when it has none).
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let chain = crate::error::chain(e);
    chain.strip_prefix(&e.to_string()).unwrap_or("").to_string()
}

/// `host:port` as dialled, for messages.
fn dialled(host: &Host) -> String {
    match host.port {
        Some(p) => format!("{}:{p}", host.address),
        None => host.address.clone(),
    }
}

impl Conn {
    fn new(session: openssh::Session, config: Option<tempfile::NamedTempFile>, keep: bool) -> Conn {
        Conn {
            session: Some(session),
            keep,
            channels: tokio::sync::Semaphore::new(CHANNELS_PER_HOST),
            _config: config,
            last_used: std::sync::Mutex::new(std::time::Instant::now()),
        }
    }
}

async fn connect(
    host: &Host,
    timeout: Duration,
    persist: Option<&Persistence>,
) -> Result<Conn, TransportError> {
    if let Some(k) = &host.identity {
        let key = expand_home(k);
        if !key.is_file() {
            return Err(TransportError::Authentication {
                host: host.name.clone(),
                address: dialled(host),
                user: host.user.clone().unwrap_or_else(|| "(default)".into()),
                detail: format!(
                    "its `identity` {} is not a readable file on this machine",
                    key.display()
                ),
            });
        }
    }
    let config = match config_text(host) {
        Some(text) => {
            let mut f = tempfile::Builder::new()
                .prefix("flotilla-ssh-")
                .tempfile()
                .map_err(|e| TransportError::Failed {
                    host: host.name.clone(),
                    detail: format!("cannot write an ssh config file: {e}"),
                })?;
            use std::io::Write;
            f.write_all(text.as_bytes())
                .map_err(|e| TransportError::Failed {
                    host: host.name.clone(),
                    detail: format!("cannot write an ssh config file: {e}"),
                })?;
            Some(f)
        }
        None => None,
    };
    let mut b = openssh::SessionBuilder::default();
    b.known_hosts_check(openssh::KnownHosts::Strict)
        .connect_timeout(timeout.max(Duration::from_secs(1)))
        .server_alive_interval(Duration::from_secs(5))
        .control_persist(openssh::ControlPersist::IdleFor(
            std::num::NonZeroUsize::new(
                persist
                    .map(|p| p.idle)
                    .unwrap_or(MASTER_IDLE)
                    .as_secs()
                    .max(1) as usize,
            )
            .expect("non-zero"),
        ))
        .control_directory(
            persist
                .map(|p| p.dir.clone())
                .unwrap_or_else(std::env::temp_dir),
        );
    if let Some(u) = &host.user {
        b.user(u.clone());
    }
    if let Some(p) = host.port {
        b.port(p);
    }
    if let Some(k) = &host.identity {
        b.keyfile(expand_home(k));
    }
    if let Some(f) = &config {
        b.config_file(f.path());
    }
    // ConnectTimeout bounds the TCP connect; the handshake after it is bounded here.
    let attempt = tokio::time::timeout(timeout + Duration::from_secs(2), b.connect(&host.address));
    let session = match attempt.await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(classify(host, &e).await),
        Err(_) => {
            return Err(TransportError::Unreachable {
                host: host.name.clone(),
                address: dialled(host),
                detail: format!(
                    "no SSH handshake within {} ms",
                    (timeout + Duration::from_secs(2)).as_millis()
                ),
            })
        }
    };
    Ok(Conn::new(session, config, persist.is_some()))
}

/// Turns what ssh said into a [`TransportError`].
async fn classify(host: &Host, e: &openssh::Error) -> TransportError {
    let text = format!("{e}{}", source_text(e));
    let address = dialled(host);
    let name = host.name.clone();
    // What ssh really dials (an alias from ~/.ssh/config resolves to its HostName):
    // the name known_hosts and ssh-keyscan use.
    let target = {
        let h = host.clone();
        tokio::task::spawn_blocking(move || dial_target(&h))
            .await
            .unwrap_or_else(|_| (host.address.clone(), host.port.unwrap_or(22)))
    };
    if text.contains("REMOTE HOST IDENTIFICATION HAS CHANGED") {
        let fingerprint = text
            .split_whitespace()
            .find(|w| w.starts_with("SHA256:"))
            .map(|w| w.trim_end_matches('.').to_string())
            .unwrap_or_else(|| "(unknown fingerprint)".into());
        return TransportError::ChangedHostKey {
            host: name,
            address,
            trust: format!(
                "`ssh-keygen -R {} -f {}`, then `{}`",
                known_host_name(&target),
                known_hosts_file(host),
                trust_command(&target, &known_hosts_file(host))
            ),
            fingerprint,
        };
    }
    if text.contains("Host key verification failed") || text.contains("host key is known") {
        return TransportError::UnknownHostKey {
            host: name,
            address,
            fingerprint: {
                let t = target.clone();
                tokio::task::spawn_blocking(move || fingerprint_of(&t))
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                    .unwrap_or_else(|e| e)
            },
            trust: format!(
                "check the fingerprint out of band, then `{}`",
                trust_command(&target, &known_hosts_file(host))
            ),
        };
    }
    if text.contains("Permission denied") || text.contains("Too many authentication failures") {
        return TransportError::Authentication {
            user: host
                .user
                .clone()
                .unwrap_or_else(|| "(from ~/.ssh/config or $USER)".into()),
            host: name,
            address,
            detail: last_line(&text),
        };
    }
    let unreachable = [
        "timed out",
        "Connection refused",
        "No route to host",
        "Network is unreachable",
        "Could not resolve",
        "Connection closed",
        "Connection reset",
        "Broken pipe",
    ];
    if unreachable.iter().any(|m| text.contains(m)) {
        return TransportError::Unreachable {
            host: name,
            address,
            detail: last_line(&text),
        };
    }
    TransportError::Failed {
        host: name,
        detail: text.trim().to_string(),
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("")
        .trim_start_matches("failed to connect to the remote host: ")
        .to_string()
}

/// The host name and port ssh really dials for `host` (`ssh -G`: aliases from
/// `~/.ssh/config` resolved), or its address and port when that fails.
fn dial_target(host: &Host) -> (String, u16) {
    let (mut name, mut port) = (host.address.clone(), host.port.unwrap_or(22));
    if let Ok(out) = std::process::Command::new("ssh")
        .arg("-G")
        .args(client_args(host))
        .arg(&host.address)
        .stderr(Stdio::null())
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("hostname", v)) => name = v.to_string(),
                Some(("port", v)) => port = v.parse().unwrap_or(port),
                _ => {}
            }
        }
    }
    (name, port)
}

/// The name a `known_hosts` line uses for `(name, port)` (`[name]:port` off port 22).
fn known_host_name((name, port): &(String, u16)) -> String {
    if *port == 22 {
        name.clone()
    } else {
        format!("'[{name}]:{port}'")
    }
}

fn known_hosts_file(host: &Host) -> String {
    host.ssh_options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("UserKnownHostsFile"))
        .map(|(_, v)| {
            expand_home(v.split_whitespace().next().unwrap_or(v))
                .display()
                .to_string()
        })
        .unwrap_or_else(|| "~/.ssh/known_hosts".into())
}

fn trust_command((name, port): &(String, u16), file: &str) -> String {
    let p = if *port == 22 {
        String::new()
    } else {
        format!("-p {port} ")
    };
    format!("ssh-keyscan {p}{name} >> {file}")
}

/// The `SHA256:` fingerprints of the keys `(name, port)` presents now
/// (`ssh-keyscan`), or why they could not be read.
fn fingerprint_of((name, port): &(String, u16)) -> Result<String, String> {
    let scanned = std::process::Command::new("ssh-keyscan")
        .args(["-T", "5", "-p", &port.to_string()])
        .arg(name)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("(ssh-keyscan failed: {e})"))?;
    if scanned.stdout.is_empty() {
        return Err("(ssh-keyscan read no key)".into());
    }
    let mut keygen = std::process::Command::new("ssh-keygen")
        .args(["-l", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("(ssh-keygen failed: {e})"))?;
    {
        use std::io::Write;
        let mut stdin = keygen.stdin.take().expect("piped");
        let _ = stdin.write_all(&scanned.stdout);
    }
    let out = keygen
        .wait_with_output()
        .map_err(|e| format!("(ssh-keygen failed: {e})"))?;
    let prints: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let _bits = w.next()?;
            let fp = w.next()?;
            let kind = l
                .rsplit_once('(')
                .map(|(_, k)| k.trim_end_matches(')'))
                .unwrap_or("");
            Some(format!("{fp} ({kind})"))
        })
        .collect();
    if prints.is_empty() {
        Err("(no fingerprint could be computed)".into())
    } else {
        Ok(prints.join(", "))
    }
}

/// The `ssh` command line of a tunnel: `ssh -N -L bind:port:target via` (or `-R`),
/// with `via`'s settings ([`client_args`]), `ExitOnForwardFailure=yes` (no forward,
/// no process), keep-alives every 5 s (3 missed: exit) and no multiplexing (the
/// tunnel owns its connection).
pub fn tunnel_argv(t: &flotilla_model::topology::Tunnel, via: &Host) -> Vec<String> {
    let mut argv: Vec<String> = vec!["ssh".into(), "-N".into(), "-T".into()];
    argv.extend(client_args(via));
    for o in [
        "ExitOnForwardFailure=yes",
        "ServerAliveInterval=5",
        "ServerAliveCountMax=3",
        "ConnectTimeout=10",
        "ControlMaster=no",
        "ControlPath=none",
    ] {
        argv.extend(["-o".into(), o.into()]);
    }
    let flag = match t.direction {
        flotilla_model::inventory::TunnelDirection::Local => "-L",
        flotilla_model::inventory::TunnelDirection::Remote => "-R",
    };
    let bind = if t.bind.contains(':') {
        format!("[{}]", t.bind)
    } else {
        t.bind.clone()
    };
    argv.extend([
        flag.into(),
        format!("{bind}:{}:{}", t.listen_port, t.target_address),
        "--".into(),
        via.address.clone(),
    ]);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_model::inventory::{TransportKind, TunnelDirection};
    use flotilla_model::topology::Tunnel;

    fn studio() -> Host {
        Host {
            address: "10.0.0.5".into(),
            container_api: None,
            cluster: None,
            labels: Default::default(),
            name: "studio".into(),
            platform: None,
            port: Some(2222),
            role: Default::default(),
            identity: Some("/keys/id".into()),
            ssh_options: [("ProxyJump".to_string(), "bastion".to_string())].into(),
            state_dir: None,
            transport: TransportKind::Ssh,
            user: Some("ops".into()),
        }
    }

    /// An `agent` host is never dialled: the pool refuses it with an error that says
    /// how to reach it (`--server`), which is what a step or an observation of one of
    /// its components answers without an authority.
    #[test]
    fn agent_hosts_are_refused_with_a_typed_error() {
        let mut mac = studio();
        mac.name = "mac".into();
        mac.transport = TransportKind::Agent;
        let pool = Pool::new(
            [("studio".to_string(), studio()), ("mac".to_string(), mac)].into(),
            Duration::from_secs(1),
        );
        assert!(pool.host("studio").is_ok());
        let err = pool.host("mac").unwrap_err();
        assert!(matches!(&err, TransportError::AgentHost(h) if h == "mac"));
        assert!(err.to_string().contains("--server"), "{err}");
        assert!(!err.is_unreachable());
        assert!(matches!(
            pool.host("nowhere"),
            Err(TransportError::NotSsh(_))
        ));
    }

    #[test]
    fn client_args_carry_every_setting_and_always_check_host_keys() {
        let a = client_args(&studio()).join(" ");
        assert_eq!(
            a,
            "-o BatchMode=yes -o StrictHostKeyChecking=yes -p 2222 -l ops -o IdentitiesOnly=yes -i /keys/id -o ProxyJump=bastion"
        );
    }

    #[test]
    fn a_local_forward_exits_on_failure_and_keeps_alive() {
        let t = Tunnel {
            bind: "127.0.0.1".into(),
            direction: TunnelDirection::Local,
            listen_port: 18090,
            target_address: "127.0.0.1:8080".into(),
            target_component: "big".into(),
            target_endpoint: "http".into(),
            via: "studio".into(),
        };
        let argv = tunnel_argv(&t, &studio());
        let line = argv.join(" ");
        assert!(line.starts_with("ssh -N -T -o BatchMode=yes -o StrictHostKeyChecking=yes"));
        for o in [
            "ExitOnForwardFailure=yes",
            "ServerAliveInterval=5",
            "ServerAliveCountMax=3",
        ] {
            assert!(line.contains(o), "{line}");
        }
        assert!(
            line.ends_with("-L 127.0.0.1:18090:127.0.0.1:8080 -- 10.0.0.5"),
            "{line}"
        );
        let r = Tunnel {
            bind: "::1".into(),
            direction: TunnelDirection::Remote,
            ..t
        };
        assert!(tunnel_argv(&r, &studio())
            .join(" ")
            .ends_with("-R [::1]:18090:127.0.0.1:8080 -- 10.0.0.5"));
    }

    #[test]
    fn the_master_config_puts_host_options_before_the_users_files() {
        let text = config_text(&studio()).unwrap();
        let opt = text.find("ProxyJump \"bastion\"").unwrap();
        let user = text.find("Include ~/.ssh/config").unwrap();
        assert!(opt < user, "{text}");
        let mut plain = studio();
        plain.ssh_options.clear();
        assert!(config_text(&plain).is_none());
    }

    #[test]
    fn known_hosts_names_and_trust_commands_follow_openssh() {
        let h = studio();
        let at = ("10.0.0.5".to_string(), 2222);
        assert_eq!(known_host_name(&at), "'[10.0.0.5]:2222'");
        assert_eq!(
            trust_command(&at, &known_hosts_file(&h)),
            "ssh-keyscan -p 2222 10.0.0.5 >> ~/.ssh/known_hosts"
        );
        let mut h22 = h;
        h22.ssh_options
            .insert("UserKnownHostsFile".into(), "/etc/fleet_hosts".into());
        let at22 = ("10.0.0.5".to_string(), 22);
        assert_eq!(known_host_name(&at22), "10.0.0.5");
        assert_eq!(
            trust_command(&at22, &known_hosts_file(&h22)),
            "ssh-keyscan 10.0.0.5 >> /etc/fleet_hosts"
        );
        // An alias resolves through `ssh -G` (here: no config names it, so itself).
        let mut alias = studio();
        alias.address = "studio-alias".into();
        alias.port = None;
        alias.ssh_options.clear();
        alias.identity = None;
        let (name, port) = dial_target(&alias);
        assert_eq!(port, 22);
        assert!(!name.is_empty());
    }
}
