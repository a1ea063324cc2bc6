//! The multi-host test network: SSH test hosts on this machine, made by `scripts/testnet
//! up 4 --systemd 1` (as root; `scripts/test` does it) and described by its `hosts.json`.
//!
//! Each host (`h1`, `h2`, …) is a network namespace on the private bridge `fltbr0`
//! (10.213.77.1/24) with its own address (10.213.77.(10+i)), its own OpenSSH sshd on
//! port 22 (own host key, own log) and its own home directory (sessions see
//! `HOME=<dir>/h<i>/home`, so each host has its own `~/.local/state/flotilla`; the
//! working directory of a session is still `/root`). One client key logs in as `root`
//! on every host, checked against one `known_hosts` file.
//!
//! The last hosts may be *systemd hosts* (`up N --systemd K` makes the last K of N so;
//! the test suite's testnet is `h1`–`h3` plain and `h4` a systemd host): besides its
//! network namespace, such a host has its own PID, mount, UTS and cgroup namespaces,
//! and its PID 1 is a real systemd (`systemctl is-system-running` says `running`), which
//! runs its sshd as a unit. So the pids `systemctl show -p MainPID` reports over SSH
//! are those the same SSH sessions see in `/proc`. Its `/tmp`, `/var/tmp`, `/run`,
//! `/dev`, `/var/lib/systemd`, `/var/log/journal` and `/etc/systemd/system` are its own
//! (empty at boot); it sees the testnet's directory read-only and its own directory
//! read-write at the same paths as this machine, so every path here holds on both sides.
//! [`TestHost::is_systemd`] tells them apart, [`Testnet::systemd_host`] finds one.
//!
//! Tests that use it share the hosts (and partition and rekey them), so they run one
//! at a time: nextest keeps them in its serial `testnet` test group (see
//! `.config/nextest.toml`: binaries named `testnet`, tests named `…hosts::…`), and
//! each test holds [`lock`] against `cargo test`'s threads.
//!
//! ```no_run
//! use flotilla_testkit::testnet::{self, Testnet};
//!
//! let _serial = testnet::lock();
//! let net = Testnet::get();
//! let h1 = net.host("h1");
//! let inventory = format!("{}\n{}", h1.inventory_toml(), net.host("h2").inventory_toml());
//! let before = h1.accepted_logins();
//! let out = h1.ssh(&[], "echo $HOME");
//! assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), h1.home.to_str().unwrap());
//! assert_eq!(h1.accepted_logins(), before + 1);
//! {
//!     let _partition = net.partition("h1"); // h1 unreachable until this is dropped
//! }
//! # let _ = inventory;
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use serde::Deserialize;

/// The environment variable naming the testnet's directory (as for `scripts/testnet`).
pub const DIR_ENV: &str = "FLOTILLA_TESTNET_DIR";

/// The testnet's directory when [`DIR_ENV`] is not set.
pub const DEFAULT_DIR: &str = "/tmp/flotilla-testnet";

/// Serializes the tests of one test binary that use the testnet: hold the guard for
/// the whole test. nextest runs each test in its own process and keeps the `testnet`
/// test group serial across binaries; `cargo test` runs a binary's tests on parallel
/// threads, which this lock puts back in line. A test that panicked while holding it
/// does not poison it for the others.
pub fn lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One SSH test host, as `scripts/testnet up` describes it in `hosts.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TestHost {
    /// Its name, `h1`, `h2`, …; also its `ssh_config` alias and its inventory name.
    pub name: String,
    /// Its IPv4 address on the testnet bridge, `10.213.77.(10+i)`.
    pub address: String,
    /// Its sshd's port (22).
    pub port: u16,
    /// The login user (`root`).
    pub user: String,
    /// The client's private key, authorized on every host.
    pub identity: PathBuf,
    /// The `known_hosts` file holding every host's key, as `<address> ssh-ed25519 …`.
    pub known_hosts: PathBuf,
    /// The `HOME` its SSH sessions see (its own, not `/root`).
    pub home: PathBuf,
    /// Its network namespace (`flt-h<i>`).
    pub netns: String,
    /// The root-side end of its veth pair (`flth<i>`); down means partitioned.
    pub link: String,
    /// Its sshd's log (`LogLevel VERBOSE`: one `Accepted publickey` line per login).
    pub sshd_log: PathBuf,
    /// Its sshd's private host key (`.pub` next to it).
    pub host_key: PathBuf,
    /// What runs as its PID 1: `"none"` (a plain host, processes of this machine in a
    /// network namespace) or `"systemd"` (a systemd host; see the module docs). Absent
    /// from older `hosts.json` files, which only had plain hosts.
    #[serde(default = "no_init")]
    pub init: String,
    /// For a systemd host, the file holding its PID 1's pid as this machine numbers it
    /// (`<dir>/h<i>/init.pid`); `None` for a plain host.
    #[serde(default)]
    pub init_pid: Option<PathBuf>,
}

fn no_init() -> String {
    "none".to_string()
}

/// The whole test network: its directory and its hosts, in order (`h1` first).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Testnet {
    /// The testnet's directory (`$FLOTILLA_TESTNET_DIR`, default [`DEFAULT_DIR`]).
    pub dir: PathBuf,
    /// Its hosts, `h1` to `hN`.
    pub hosts: Vec<TestHost>,
}

impl Testnet {
    /// The testnet's directory: `$FLOTILLA_TESTNET_DIR`, or [`DEFAULT_DIR`].
    pub fn default_dir() -> PathBuf {
        std::env::var_os(DIR_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
    }

    /// The running testnet, read from [`Testnet::default_dir`]`/hosts.json`.
    ///
    /// # Panics
    /// If there is no testnet (no `hosts.json`, or its namespaces are gone), with a
    /// message saying how to make one: the multi-host tests need the test hosts.
    pub fn get() -> Testnet {
        Testnet::load(&Testnet::default_dir()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The testnet whose `hosts.json` is in `dir`, checked to be up (its hosts'
    /// network namespaces exist); `Err` says what is missing and how to make it.
    pub fn load(dir: &Path) -> Result<Testnet, String> {
        let file = dir.join("hosts.json");
        let how = format!(
            "the multi-host tests need the SSH test hosts: run `{} up 4 --systemd 1` as root \
             (scripts/test does it){}",
            Testnet::script().display(),
            if dir == Path::new(DEFAULT_DIR) {
                String::new()
            } else {
                format!(" with {DIR_ENV}={}", dir.display())
            }
        );
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "no testnet: {} does not exist; {how}",
                    file.display()
                ))
            }
            Err(e) => return Err(format!("cannot read {}: {e}; {how}", file.display())),
        };
        let net: Testnet = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a testnet description: {e}; {how}",
                file.display()
            )
        })?;
        if net.hosts.is_empty() {
            return Err(format!("{} lists no hosts; {how}", file.display()));
        }
        for h in &net.hosts {
            if !Path::new("/run/netns").join(&h.netns).exists() {
                return Err(format!(
                    "the testnet in {} is not up: host {}'s network namespace {} is gone; {how}",
                    net.dir.display(),
                    h.name,
                    h.netns
                ));
            }
            if h.is_systemd() {
                if let Err(e) = h.init_pid() {
                    return Err(format!(
                        "the testnet in {} is not up: systemd host {}: {e}; {how}",
                        net.dir.display(),
                        h.name
                    ));
                }
            }
        }
        Ok(net)
    }

    /// The first systemd host (see the module docs).
    ///
    /// # Panics
    /// If the testnet has none, saying how to make one: the tests that need a real
    /// systemd fail rather than pass without one.
    pub fn systemd_host(&self) -> &TestHost {
        self.hosts
            .iter()
            .find(|h| h.is_systemd())
            .unwrap_or_else(|| {
                panic!(
                "the testnet in {} has no systemd host (\"init\": \"systemd\" in its hosts.json); \
                 run `{} up 4 --systemd 1` as root (scripts/test does it) to make h4 one",
                self.dir.display(),
                Testnet::script().display()
            )
            })
    }

    /// The host named `name` (`h1`, …).
    ///
    /// # Panics
    /// If the testnet has no such host (the message lists those it has).
    pub fn host(&self, name: &str) -> &TestHost {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = self.hosts.iter().map(|h| h.name.as_str()).collect();
                panic!(
                "the testnet has no host `{name}` (it has {}); `scripts/testnet up N` makes h1..hN",
                names.join(", ")
            )
            })
    }

    /// The path of `scripts/testnet` in this workspace.
    pub fn script() -> PathBuf {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        // crates/flotilla-testkit → the workspace root.
        let root = crate_dir
            .parent()
            .and_then(Path::parent)
            .unwrap_or(crate_dir);
        root.join("scripts/testnet")
    }

    /// Sets `host`'s link up (`true`) or down (`false`, a network partition: nothing
    /// reaches it, connections to it time out) with `scripts/testnet link`.
    ///
    /// # Panics
    /// If the host is unknown or the script fails (with its stderr).
    pub fn link(&self, host: &str, up: bool) {
        self.host(host);
        self.run_script(&["link", host, if up { "up" } else { "down" }]);
    }

    /// Takes `host`'s link down until the returned guard is dropped (which brings it
    /// up again, even when the test panics).
    ///
    /// # Panics
    /// As [`Testnet::link`].
    pub fn partition(&self, host: &str) -> Partition<'_> {
        self.link(host, false);
        Partition {
            net: self,
            host: host.to_string(),
        }
    }

    /// Gives `host` a new host key and restarts its sshd (`scripts/testnet rekey`),
    /// returning once the new sshd answers with it. `known_hosts` keeps the old key,
    /// so OpenSSH refuses the host ("REMOTE HOST IDENTIFICATION HAS CHANGED") until
    /// [`Testnet::restore_key`].
    ///
    /// # Panics
    /// If the host is unknown or the script fails (with its stderr).
    pub fn rekey(&self, host: &str) {
        self.host(host);
        self.run_script(&["rekey", host]);
    }

    /// Puts back `host`'s original host key (the one in `known_hosts`) and restarts its
    /// sshd (`scripts/testnet restore-key`); does nothing if it was never rekeyed.
    ///
    /// # Panics
    /// If the host is unknown or the script fails (with its stderr).
    pub fn restore_key(&self, host: &str) {
        self.host(host);
        self.run_script(&["restore-key", host]);
    }

    /// [`Testnet::rekey`]s `host` until the returned guard is dropped (which restores
    /// its original key, even when the test panics).
    ///
    /// # Panics
    /// As [`Testnet::rekey`].
    pub fn rekeyed(&self, host: &str) -> Rekeyed<'_> {
        self.rekey(host);
        Rekeyed {
            net: self,
            host: host.to_string(),
        }
    }

    /// Runs `scripts/testnet ARGS` on this testnet's directory.
    fn run_script(&self, args: &[&str]) {
        if let Err(e) = self.try_run_script(args) {
            panic!("{e}");
        }
    }

    fn try_run_script(&self, args: &[&str]) -> Result<(), String> {
        let script = Testnet::script();
        let out = Command::new(&script)
            .args(args)
            .env(DIR_ENV, &self.dir)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{} {}` failed ({}): {}",
                script.display(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// A host whose link is down; dropping it brings the link up again
/// (from [`Testnet::partition`]).
#[must_use = "the partition ends when this guard is dropped"]
#[derive(Debug)]
pub struct Partition<'a> {
    net: &'a Testnet,
    host: String,
}

impl Drop for Partition<'_> {
    fn drop(&mut self) {
        restore(self.net.try_run_script(&["link", self.host.as_str(), "up"]));
    }
}

/// A host with a new host key; dropping it restores the original key
/// (from [`Testnet::rekeyed`]).
#[must_use = "the original key comes back when this guard is dropped"]
#[derive(Debug)]
pub struct Rekeyed<'a> {
    net: &'a Testnet,
    host: String,
}

impl Drop for Rekeyed<'_> {
    fn drop(&mut self) {
        restore(
            self.net
                .try_run_script(&["restore-key", self.host.as_str()]),
        );
    }
}

/// A guard's undo failed: panic, unless the thread is already panicking (a second
/// panic would abort), then just say so.
fn restore(result: Result<(), String>) {
    if let Err(e) = result {
        if std::thread::panicking() {
            eprintln!("testnet: {e}");
        } else {
            panic!("{e}");
        }
    }
}

impl TestHost {
    /// Whether its PID 1 is a real systemd (`init` is `"systemd"`).
    pub fn is_systemd(&self) -> bool {
        self.init == "systemd"
    }

    /// A systemd host's PID 1 as this machine numbers it, checked to be a live process
    /// (not a zombie); `Err` says why not (a plain host, no pid file, PID 1 gone).
    pub fn init_pid(&self) -> Result<u32, String> {
        let file = self
            .init_pid
            .as_ref()
            .filter(|_| self.is_systemd())
            .ok_or_else(|| format!("{} is not a systemd host", self.name))?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let pid: u32 = text
            .trim()
            .parse()
            .map_err(|_| format!("{} holds no pid: {text:?}", file.display()))?;
        if crate::alive(pid) {
            Ok(pid)
        } else {
            Err(format!(
                "its PID 1 (pid {pid}, from {}) is not running",
                file.display()
            ))
        }
    }

    /// Runs `argv` on the host as root, not over SSH (`HOME` is the caller's), and
    /// returns its output: for a plain host inside its network namespace (`ip netns exec
    /// <netns> argv…`), for a systemd host inside all its namespaces (`nsenter -t <PID 1>
    /// -a argv…`: it sees the host's processes, its `/tmp` and its systemd).
    ///
    /// # Panics
    /// If `argv` is empty, a systemd host's PID 1 is not running, or `ip`/`nsenter`
    /// cannot be started.
    pub fn exec(&self, argv: &[&str]) -> Output {
        assert!(!argv.is_empty(), "TestHost::exec needs a command");
        if self.is_systemd() {
            let pid = self
                .init_pid()
                .unwrap_or_else(|e| panic!("systemd host {}: {e}", self.name));
            return Command::new("nsenter")
                .args(["-t", &pid.to_string(), "-a"])
                .args(argv)
                .output()
                .unwrap_or_else(|e| panic!("cannot run `nsenter -t {pid} -a`: {e}"));
        }
        Command::new("ip")
            .args(["netns", "exec", self.netns.as_str()])
            .args(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `ip netns exec {}`: {e}", self.netns))
    }

    /// The host as a Flotilla inventory table, e.g.
    ///
    /// ```toml
    /// [hosts.h1]
    /// transport = "ssh"
    /// address = "10.213.77.11"
    /// user = "root"
    /// port = 22
    /// identity = "/tmp/flotilla-testnet/id_ed25519"
    /// ssh_options = { UserKnownHostsFile = "/tmp/flotilla-testnet/known_hosts" }
    /// ```
    pub fn inventory_toml(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "[hosts.{}]", toml_key(&self.name));
        let _ = writeln!(s, "transport = \"ssh\"");
        let _ = writeln!(s, "address = {}", toml_str(&self.address));
        let _ = writeln!(s, "user = {}", toml_str(&self.user));
        let _ = writeln!(s, "port = {}", self.port);
        let _ = writeln!(
            s,
            "identity = {}",
            toml_str(&self.identity.to_string_lossy())
        );
        let _ = writeln!(
            s,
            "ssh_options = {{ UserKnownHostsFile = {} }}",
            toml_str(&self.known_hosts.to_string_lossy())
        );
        s
    }

    /// How many logins its sshd has accepted so far: the `Accepted publickey` lines in
    /// its log, one per SSH handshake that authenticated (a multiplexed session over an
    /// existing connection adds none).
    ///
    /// # Panics
    /// If the log cannot be read.
    pub fn accepted_logins(&self) -> usize {
        let log = std::fs::read(&self.sshd_log)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.sshd_log.display()));
        String::from_utf8_lossy(&log)
            .lines()
            .filter(|l| l.contains("Accepted publickey"))
            .count()
    }

    /// `user@address`, the `ssh` destination.
    pub fn destination(&self) -> String {
        format!("{}@{}", self.user, self.address)
    }

    /// The `ssh` options that reach this host and nothing else: no config file
    /// (`-F none`), its identity only, its `known_hosts` only with
    /// `StrictHostKeyChecking=yes`, `BatchMode=yes`, its port. The destination is
    /// [`TestHost::destination`].
    pub fn ssh_options(&self) -> Vec<String> {
        vec![
            "-F".into(),
            "none".into(),
            "-i".into(),
            self.identity.to_string_lossy().into_owned(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            format!("UserKnownHostsFile={}", self.known_hosts.to_string_lossy()),
            "-o".into(),
            "GlobalKnownHostsFile=/dev/null".into(),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-p".into(),
            self.port.to_string(),
        ]
    }

    /// Runs `remote_command` on the host over a new SSH connection (one login):
    /// `ssh [ssh_options] [extra_options] user@address remote_command`, stdin empty.
    ///
    /// # Panics
    /// If `ssh` cannot be started.
    pub fn ssh(&self, extra_options: &[&str], remote_command: &str) -> Output {
        Command::new("ssh")
            .args(self.ssh_options())
            .args(extra_options)
            .arg(self.destination())
            .arg(remote_command)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run ssh: {e}"))
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be, quoted otherwise.
fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        k.to_string()
    } else {
        toml_str(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TestHost {
        TestHost {
            name: "h1".into(),
            address: "10.213.77.11".into(),
            port: 22,
            user: "root".into(),
            identity: "/tmp/t net/id_ed25519".into(),
            known_hosts: "/tmp/t\"net/known_hosts".into(),
            home: "/tmp/t/h1/home".into(),
            netns: "flt-h1".into(),
            link: "flth1".into(),
            sshd_log: "/tmp/t/h1/sshd.log".into(),
            host_key: "/tmp/t/h1/ssh_host_ed25519_key".into(),
            init: "none".into(),
            init_pid: None,
        }
    }

    #[test]
    fn inventory_toml_is_one_ssh_host_table() {
        assert_eq!(
            sample().inventory_toml(),
            "[hosts.h1]\n\
             transport = \"ssh\"\n\
             address = \"10.213.77.11\"\n\
             user = \"root\"\n\
             port = 22\n\
             identity = \"/tmp/t net/id_ed25519\"\n\
             ssh_options = { UserKnownHostsFile = \"/tmp/t\\\"net/known_hosts\" }\n"
        );
    }

    #[test]
    fn toml_strings_and_keys_are_escaped() {
        assert_eq!(toml_str("a\\b\"c\n\u{1}"), r#""a\\b\"c\n\u0001""#);
        assert_eq!(toml_key("h-1_x"), "h-1_x");
        assert_eq!(toml_key("a.b"), "\"a.b\"");
    }

    #[test]
    fn hosts_json_parses() {
        let json = r#"{"dir": "/tmp/t", "hosts": [{"name": "h1", "address": "10.213.77.11",
            "port": 22, "user": "root", "identity": "/tmp/t net/id_ed25519",
            "known_hosts": "/tmp/t\"net/known_hosts", "home": "/tmp/t/h1/home",
            "netns": "flt-h1", "link": "flth1", "sshd_log": "/tmp/t/h1/sshd.log",
            "host_key": "/tmp/t/h1/ssh_host_ed25519_key"}]}"#;
        let net: Testnet = serde_json::from_str(json).unwrap();
        assert_eq!(net.dir, Path::new("/tmp/t"));
        assert_eq!(net.hosts, vec![sample()]);
        assert_eq!(net.host("h1").address, "10.213.77.11");
        assert!(!net.host("h1").is_systemd());
    }

    #[test]
    fn hosts_json_says_which_hosts_run_systemd() {
        let json = r#"{"dir": "/tmp/t", "hosts": [{"name": "h1", "address": "10.213.77.11",
            "port": 22, "user": "root", "identity": "/tmp/t net/id_ed25519",
            "known_hosts": "/tmp/t\"net/known_hosts", "home": "/tmp/t/h1/home",
            "netns": "flt-h1", "link": "flth1", "sshd_log": "/tmp/t/h1/sshd.log",
            "host_key": "/tmp/t/h1/ssh_host_ed25519_key", "init": "none", "init_pid": null},
            {"name": "h2", "address": "10.213.77.12", "port": 22, "user": "root",
            "identity": "/tmp/t/id_ed25519", "known_hosts": "/tmp/t/known_hosts",
            "home": "/tmp/t/h2/home", "netns": "flt-h2", "link": "flth2",
            "sshd_log": "/tmp/t/h2/sshd.log", "host_key": "/tmp/t/h2/ssh_host_ed25519_key",
            "init": "systemd", "init_pid": "/tmp/t/h2/init.pid"}]}"#;
        let net: Testnet = serde_json::from_str(json).unwrap();
        assert_eq!(net.hosts[0], sample());
        let h2 = net.host("h2");
        assert!(h2.is_systemd());
        assert_eq!(
            h2.init_pid.as_deref(),
            Some(Path::new("/tmp/t/h2/init.pid"))
        );
        assert_eq!(net.systemd_host().name, "h2");
        // Its pid file does not exist: it is not running.
        assert!(h2.init_pid().unwrap_err().contains("/tmp/t/h2/init.pid"));
        assert!(net.host("h1").init_pid().is_err());
    }

    #[test]
    fn a_testnet_without_a_systemd_host_says_how_to_make_one() {
        let net = Testnet {
            dir: "/tmp/t".into(),
            hosts: vec![sample()],
        };
        let err = std::panic::catch_unwind(|| net.systemd_host().name.clone()).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("up 4 --systemd 1"), "{msg}");
    }

    #[test]
    fn a_missing_testnet_says_how_to_make_one() {
        let dir =
            std::env::temp_dir().join(format!("flotilla-testnet-missing-{}", std::process::id()));
        let err = Testnet::load(&dir).unwrap_err();
        assert!(err.contains("hosts.json does not exist"), "{err}");
        assert!(
            err.contains("scripts/testnet up 4 --systemd 1` as root"),
            "{err}"
        );
        assert!(err.contains("scripts/test does it"), "{err}");
    }

    #[test]
    fn script_is_in_the_workspace() {
        assert!(
            Testnet::script().is_file(),
            "{}",
            Testnet::script().display()
        );
    }
}
