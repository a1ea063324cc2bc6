//! An OpenSSH sshd of a test's own on 127.0.0.1, for tests that need an SSH host
//! whose loopback is this machine's: an `ssh-tunnel` whose far end reaches services
//! (processes, published container ports) running here, or a "remote" host that is
//! this machine. Unlike the [`crate::testnet`] hosts it needs no network namespace
//! and is not shared: each [`LoopbackSshd`] has its own port, keys, `known_hosts`,
//! home directory and log, all in a directory the caller gives (a temp dir), and
//! tests that use one may run in parallel.
//!
//! Needs root (sshd's privilege separation) and Debian's `openssh-server` and
//! `openssh-client` (`/usr/sbin/sshd`, `ssh-keygen`; `scripts/testnet` installs them).
//!
//! ```no_run
//! let dir = std::env::temp_dir().join("my-test");
//! let sshd = flotilla_testkit::loopback_ssh::LoopbackSshd::start(&dir).expect("an sshd");
//! let inventory = format!("{}state_dir = \"{}/state\"\n", sshd.inventory_toml("self"), dir.display());
//! # let _ = inventory;
//! // dropped: its sessions and the sshd are killed
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Debian's OpenSSH server.
pub const SSHD: &str = "/usr/sbin/sshd";

/// How long the sshd may take to listen.
const LISTEN_DEADLINE: Duration = Duration::from_secs(20);

/// A running sshd on `127.0.0.1:port`, killed (with every session it started) when
/// dropped.
#[derive(Debug)]
pub struct LoopbackSshd {
    /// The directory holding its keys, configuration, log and home.
    pub dir: PathBuf,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    /// The client's private key (ed25519, no passphrase), the only one it accepts
    /// (as `root`).
    pub identity: PathBuf,
    /// A `known_hosts` file holding its host key as `[127.0.0.1]:PORT ssh-ed25519 …`.
    pub known_hosts: PathBuf,
    /// The `HOME` its sessions see (`<dir>/home`, sshd_config `SetEnv`), so that
    /// `~/.local/lib/flotilla` and `~/.local/state/flotilla` there are the test's own.
    pub home: PathBuf,
    /// Its log (`LogLevel VERBOSE`).
    pub log: PathBuf,
    child: Child,
}

/// Runs `ssh-keygen` to make an ed25519 key pair at `path` (and `path.pub`).
fn keygen(path: &Path) -> Result<(), String> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "flotilla-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ssh-keygen: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ssh-keygen -f {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

impl LoopbackSshd {
    /// Makes keys, `known_hosts` and a configuration in `dir` (created if missing),
    /// starts `sshd -D` on a free port of 127.0.0.1 and returns once it accepts
    /// connections.
    ///
    /// # Errors
    /// Why it could not be made or did not listen within 20 s (with its log's end).
    pub fn start(dir: &Path) -> Result<LoopbackSshd, String> {
        let dir = dir.to_path_buf();
        let home = dir.join("home");
        std::fs::create_dir_all(&home)
            .map_err(|e| format!("cannot create {}: {e}", home.display()))?;
        let identity = dir.join("id_ed25519");
        let host_key = dir.join("ssh_host_ed25519_key");
        for k in [&identity, &host_key] {
            let _ = std::fs::remove_file(k);
            let _ = std::fs::remove_file(k.with_extension("pub"));
            keygen(k)?;
        }
        let authorized = dir.join("authorized_keys");
        write(&authorized, &read(&identity.with_extension("pub"))?)?;
        let port = crate::free_port();
        let known_hosts = dir.join("known_hosts");
        let host_pub = read(&host_key.with_extension("pub"))?;
        let mut fields = host_pub.split_whitespace();
        let (kind, key) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
        write(&known_hosts, &format!("[127.0.0.1]:{port} {kind} {key}\n"))?;
        let log = dir.join("sshd.log");
        let config = dir.join("sshd_config");
        write(
            &config,
            &format!(
                "# A test's own sshd (flotilla_testkit::loopback_ssh).\n\
                 ListenAddress 127.0.0.1:{port}\n\
                 HostKey {}\n\
                 PidFile none\n\
                 AuthorizedKeysFile {}\n\
                 PermitRootLogin prohibit-password\n\
                 PubkeyAuthentication yes\n\
                 PasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\n\
                 UsePAM no\n\
                 StrictModes no\n\
                 MaxSessions 100\n\
                 MaxStartups 100:30:200\n\
                 LogLevel VERBOSE\n\
                 SetEnv HOME={}\n\
                 AllowTcpForwarding yes\n\
                 AllowStreamLocalForwarding yes\n\
                 StreamLocalBindUnlink yes\n\
                 X11Forwarding no\n\
                 PrintMotd no\n\
                 PrintLastLog no\n\
                 UseDNS no\n\
                 Subsystem sftp internal-sftp\n",
                host_key.display(),
                authorized.display(),
                home.display()
            ),
        )?;
        // sshd's privilege separation directory (Debian's packaging makes it at boot).
        std::fs::create_dir_all("/run/sshd")
            .map_err(|e| format!("cannot create /run/sshd: {e}"))?;
        let child = Command::new(SSHD)
            .arg("-D")
            .arg("-f")
            .arg(&config)
            .arg("-E")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {SSHD}: {e}"))?;
        let mut sshd = LoopbackSshd {
            dir,
            port,
            identity,
            known_hosts,
            home,
            log,
            child,
        };
        let listening = crate::wait_until(LISTEN_DEADLINE, || {
            if matches!(sshd.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        if let Ok(Some(status)) = sshd.child.try_wait() {
            return Err(format!(
                "{SSHD} exited ({status}): {}",
                read(&sshd.log).unwrap_or_default().trim()
            ));
        }
        if !listening {
            return Err(format!(
                "{SSHD} did not listen on 127.0.0.1:{port} within {LISTEN_DEADLINE:?}: {}",
                read(&sshd.log).unwrap_or_default().trim()
            ));
        }
        Ok(sshd)
    }

    /// The sshd's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host as a Flotilla inventory table named `name` (no `state_dir`: add one):
    ///
    /// ```toml
    /// [hosts.self]
    /// transport = "ssh"
    /// address = "127.0.0.1"
    /// user = "root"
    /// port = 20456
    /// identity = "<dir>/id_ed25519"
    /// ssh_options = { UserKnownHostsFile = "<dir>/known_hosts" }
    /// ```
    pub fn inventory_toml(&self, name: &str) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a string");
        let mut s = String::new();
        let _ = writeln!(s, "[hosts.{name}]");
        let _ = writeln!(s, "transport = \"ssh\"");
        let _ = writeln!(s, "address = \"127.0.0.1\"");
        let _ = writeln!(s, "user = \"root\"");
        let _ = writeln!(s, "port = {}", self.port);
        let _ = writeln!(s, "identity = {}", q(&self.identity.to_string_lossy()));
        let _ = writeln!(
            s,
            "ssh_options = {{ UserKnownHostsFile = {} }}",
            q(&self.known_hosts.to_string_lossy())
        );
        s
    }

    /// The live descendants of the sshd (its sessions and what they run, unless they
    /// left its process tree), from `/proc`.
    pub fn descendants(&self) -> Vec<u32> {
        let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid = stat.rsplit(')').next()?.split_whitespace().nth(1)?;
                Some((pid, ppid.parse().ok()?))
            })
            .collect();
        let mut out = Vec::new();
        let mut frontier = vec![self.pid()];
        while let Some(p) = frontier.pop() {
            for &(pid, ppid) in &parents {
                if ppid == p && !out.contains(&pid) {
                    out.push(pid);
                    frontier.push(pid);
                }
            }
        }
        out
    }
}

impl Drop for LoopbackSshd {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        for pid in self.descendants() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
