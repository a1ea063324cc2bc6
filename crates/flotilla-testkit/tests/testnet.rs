//! Checks the SSH test hosts that `scripts/testnet up 4 --systemd 1` makes (run it as
//! root first; `scripts/test` does): each host answers SSH with its own home, its sshd
//! log counts one login per connection, a link taken down partitions the host until it
//! comes up again, and a rekeyed host is refused until its key is restored (the last
//! host, a systemd host in the suite's testnet). The systemd host runs a real systemd
//! as its PID 1, whose units' pids are those its SSH sessions see, and whose boot-time
//! cleanup of `/tmp` cannot reach this machine's `/tmp`: these tests fail, saying how
//! to make one, when the testnet has no systemd host.
//!
//! These tests share the hosts, so they run one at a time (nextest's test group
//! `testnet` in `.config/nextest.toml`; `testnet::lock` under `cargo test`); every wait
//! is on a condition with a deadline.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_testkit::testnet::{self, TestHost, Testnet};
use flotilla_testkit::wait_until;

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(20);

fn show(out: &Output) -> String {
    format!(
        "{}; stdout: {:?}; stderr: {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ssh` with exactly the options a Flotilla inventory entry for `host` gives.
fn ssh(host: &TestHost, extra: &[&str], remote: &str) -> Output {
    let port = host.port.to_string();
    let known_hosts = format!("UserKnownHostsFile={}", host.known_hosts.display());
    let mut args = vec![
        "-F".to_string(),
        "none".to_string(),
        "-i".to_string(),
        host.identity.display().to_string(),
        "-o".to_string(),
        known_hosts,
        "-o".to_string(),
        "StrictHostKeyChecking=yes".to_string(),
        "-o".to_string(),
        "BatchMode=yes".to_string(),
        "-p".to_string(),
        port,
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(host.destination());
    args.push(remote.to_string());
    std::process::Command::new("ssh")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ssh")
}

fn reachable(host: &TestHost) -> bool {
    ssh(host, &["-o", "ConnectTimeout=2"], "true")
        .status
        .success()
}

#[test]
fn each_host_answers_ssh_with_its_own_home_and_logs_one_login_per_connection() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    assert!(!net.hosts.is_empty());
    for host in &net.hosts {
        let before = host.accepted_logins();
        let out = ssh(host, &[], "echo $HOME");
        assert!(out.status.success(), "{}: {}", host.name, show(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            host.home.to_str().unwrap(),
            "{}: a session's HOME",
            host.name
        );
        assert!(
            wait_until(DEADLINE, || host.accepted_logins() == before + 1),
            "{}: {} accepted logins after one ssh, {before} before",
            host.name,
            host.accepted_logins()
        );
        // The crate's own helper logs in the same way, once.
        let out = host.ssh(&[], "printf %s \"$HOME\"");
        assert!(out.status.success(), "{}: {}", host.name, show(&out));
        assert_eq!(out.stdout, host.home.to_str().unwrap().as_bytes());
        assert!(
            wait_until(DEADLINE, || host.accepted_logins() == before + 2),
            "{}: {} accepted logins after two ssh, {before} before",
            host.name,
            host.accepted_logins()
        );
    }
}

#[test]
fn hosts_are_distinct_namespaces_with_their_own_address_and_home() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    for (i, host) in net.hosts.iter().enumerate() {
        assert_eq!(host.name, format!("h{}", i + 1));
        assert_eq!(host.address, format!("10.213.77.{}", 11 + i));
        assert!(host.home.is_dir(), "{}", host.home.display());
        assert!(net.hosts[..i].iter().all(|h| h.home != host.home));
        let out = host.exec(&["ip", "-o", "-4", "addr", "show", "dev", "eth0"]);
        assert!(out.status.success(), "{}", show(&out));
        let addrs = String::from_utf8_lossy(&out.stdout);
        assert!(
            addrs.contains(&format!("inet {}/24", host.address)),
            "{}: {addrs}",
            host.name
        );
        // Over SSH too: the session runs in the host's namespace.
        let out = host.ssh(&[], "ip -o -4 addr show dev eth0");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&host.address),
            "{}",
            show(&out)
        );
    }
}

#[test]
fn inventory_toml_is_a_flotilla_ssh_host() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let doc: String = net.hosts.iter().map(|h| h.inventory_toml()).collect();
    let parsed: toml::Table = doc.parse().expect("inventory_toml is TOML");
    for host in &net.hosts {
        let t = &parsed["hosts"][host.name.as_str()];
        assert_eq!(t["transport"].as_str(), Some("ssh"));
        assert_eq!(t["address"].as_str(), Some(host.address.as_str()));
        assert_eq!(t["user"].as_str(), Some("root"));
        assert_eq!(t["port"].as_integer(), Some(i64::from(host.port)));
        assert_eq!(t["identity"].as_str(), host.identity.to_str());
        assert_eq!(
            t["ssh_options"]["UserKnownHostsFile"].as_str(),
            host.known_hosts.to_str()
        );
    }
}

#[test]
fn a_link_taken_down_partitions_the_host_until_it_is_up_again() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let host = net.hosts.last().unwrap();
    assert!(reachable(host), "{} is reachable to begin with", host.name);
    {
        let _partition = net.partition(&host.name);
        let out = ssh(host, &["-o", "ConnectTimeout=2"], "true");
        assert!(
            !out.status.success(),
            "{} answered while partitioned: {}",
            host.name,
            show(&out)
        );
        // The other hosts are unaffected.
        for other in net.hosts.iter().filter(|h| h.name != host.name) {
            assert!(reachable(other), "{} is reachable", other.name);
        }
    }
    assert!(
        wait_until(DEADLINE, || reachable(host)),
        "{} is reachable again after its link came back up",
        host.name
    );
    // And with the plain API: down, then up.
    net.link(&host.name, false);
    let down = !reachable(host);
    net.link(&host.name, true);
    assert!(down, "{} answered with its link down", host.name);
    assert!(wait_until(DEADLINE, || reachable(host)));
}

#[test]
fn a_rekeyed_host_is_refused_until_its_key_is_restored() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let host = net.hosts.last().unwrap();
    assert!(reachable(host));
    {
        let _rekeyed = net.rekeyed(&host.name);
        let out = ssh(host, &["-o", "ConnectTimeout=2"], "true");
        assert!(!out.status.success(), "{}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("REMOTE HOST IDENTIFICATION HAS CHANGED"),
            "{}",
            show(&out)
        );
    }
    assert!(
        wait_until(DEADLINE, || reachable(host)),
        "{} is accepted again with its original key",
        host.name
    );
}

/// A name no other test run uses: `<prefix>-<pid>-<nanoseconds>`.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `remote` over SSH on `host` and returns its stdout, trimmed.
///
/// # Panics
/// If it fails.
fn ssh_ok(host: &TestHost, remote: &str) -> String {
    let out = host.ssh(&[], remote);
    assert!(
        out.status.success(),
        "{}: `{remote}`: {}",
        host.name,
        show(&out)
    );
    stdout(&out)
}

/// Stops a transient unit on a host when dropped (also when the test panics).
struct StopUnit<'a> {
    host: &'a TestHost,
    unit: String,
}

impl Drop for StopUnit<'_> {
    fn drop(&mut self) {
        let _ = self.host.ssh(
            &[],
            &format!(
                "systemctl stop {0} 2>/dev/null; systemctl reset-failed {0} 2>/dev/null; true",
                self.unit
            ),
        );
    }
}

#[test]
fn a_systemd_host_is_running_and_a_systemd_run_units_main_pid_is_a_pid_its_ssh_sessions_see() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let host = net.systemd_host();

    // Its PID 1 is systemd, booted with nothing failed.
    assert_eq!(
        ssh_ok(host, "systemctl is-system-running"),
        "running",
        "{}: failed units: {}",
        host.name,
        stdout(&host.ssh(&[], "systemctl list-units --failed --no-legend --plain"))
    );
    assert_eq!(ssh_ok(host, "cat /proc/1/comm"), "systemd");
    let exec = host.exec(&["cat", "/proc/1/comm"]);
    assert_eq!(stdout(&exec), "systemd", "TestHost::exec: {}", show(&exec));
    // SSH sessions run in systemd's PID namespace (its sshd is one of its units), which
    // is not this machine's.
    let ns = ssh_ok(
        host,
        "readlink /proc/self/ns/pid; readlink /proc/1/ns/pid; systemctl show -p MainPID --value flotilla-sshd.service",
    );
    let ns: Vec<&str> = ns.lines().collect();
    assert_eq!(ns.len(), 3, "{ns:?}");
    assert_eq!(ns[0], ns[1], "a session and PID 1 share a PID namespace");
    let machine_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        Path::new(ns[0]),
        machine_ns,
        "the host has its own PID namespace"
    );
    assert!(
        ns[2].parse::<u32>().is_ok_and(|p| p > 1),
        "sshd's MainPID: {ns:?}"
    );

    // A unit made with systemd-run: its MainPID is the `sleep` the sessions see.
    let unit = unique("flotilla-testnet-sleep");
    let _stop = StopUnit {
        host,
        unit: format!("{unit}.service"),
    };
    ssh_ok(
        host,
        &format!("systemd-run --quiet --unit={unit} /bin/sleep 300"),
    );
    let mut main_pid = 0u32;
    assert!(
        wait_until(DEADLINE, || {
            let out = host.ssh(
                &[],
                &format!("systemctl show -p MainPID --value {unit}.service"),
            );
            main_pid = stdout(&out).parse().unwrap_or(0);
            main_pid > 0
        }),
        "{unit} has no MainPID"
    );
    // In one session: what /proc and ps say about that pid.
    let seen = ssh_ok(
        host,
        &format!(
            "cat /proc/{main_pid}/comm; tr '\\0' ' ' </proc/{main_pid}/cmdline; echo; \
             ps -o comm= -p {main_pid}; systemctl show -p ActiveState --value {unit}.service; \
             systemctl show -p MainPID --value {unit}.service"
        ),
    );
    let seen: Vec<&str> = seen.lines().map(str::trim).collect();
    assert_eq!(
        seen,
        [
            "sleep",
            "/bin/sleep 300",
            "sleep",
            "active",
            &main_pid.to_string()
        ],
        "pid {main_pid} of {unit} over SSH on {}",
        host.name
    );

    // Stopped, the unit and its process are gone.
    ssh_ok(host, &format!("systemctl stop {unit}.service"));
    assert!(
        wait_until(DEADLINE, || {
            let out = host.ssh(
                &[],
                &format!(
                    "systemctl is-active {unit}.service; test -e /proc/{main_pid} && cat /proc/{main_pid}/comm"
                ),
            );
            let s = stdout(&out);
            s.starts_with("inactive") && !s.contains("sleep")
        }),
        "{unit} (pid {main_pid}) is still running after systemctl stop"
    );
}

/// Every path under `dir` (relative), recursively.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            out.insert(path.strip_prefix(root).unwrap().to_path_buf());
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Removes a file when dropped.
struct RemoveFile(PathBuf);

impl Drop for RemoveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_systemd_hosts_tmpfiles_boot_cleanup_empties_only_its_own_tmp_not_the_machines_or_the_testnet_dir(
) {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let host = net.systemd_host();

    // A file in this machine's /tmp, and the testnet's files, before.
    let marker = Path::new("/tmp").join(unique("flotilla-testnet-marker"));
    std::fs::write(&marker, "still here\n").unwrap();
    let _remove = RemoveFile(marker.clone());
    let before = tree(&net.dir);
    let hosts_json = std::fs::read(net.dir.join("hosts.json")).unwrap();

    // The host's /tmp is another filesystem than this machine's: a tmpfs of its own.
    let machine_tmp = std::fs::metadata("/tmp").unwrap().dev();
    let host_tmp = ssh_ok(host, "stat -c %d /tmp; stat -f -c %T /tmp");
    let host_tmp: Vec<&str> = host_tmp.lines().collect();
    assert_eq!(host_tmp.len(), 2, "{host_tmp:?}");
    assert_ne!(
        host_tmp[0].parse::<u64>().ok(),
        Some(machine_tmp),
        "{}'s /tmp is this machine's /tmp",
        host.name
    );
    assert_eq!(host_tmp[1], "tmpfs", "{}'s /tmp", host.name);
    // The marker is not in the host's /tmp (private), but the testnet's directory is,
    // at the same path.
    let seen = ssh_ok(
        host,
        &format!(
            "test -e {} && echo marker; test -f {} && echo hosts.json",
            marker.display(),
            net.dir.join("hosts.json").display()
        ),
    );
    assert_eq!(seen, "hosts.json", "{}", host.name);

    // Exactly what a booting systemd runs, and what would empty a /tmp it shared. A file
    // of the host's own in its /tmp goes (so the cleanup did run)…
    let own = unique("/tmp/flotilla-testnet-host-file");
    let out = ssh_ok(
        host,
        &format!(
            "touch {own} && test -e {own} && systemd-tmpfiles --remove --boot; echo \"rc=$?\"; \
             test -e {own} && echo kept || echo removed"
        ),
    );
    assert_eq!(out, "rc=0\nremoved", "{}: {out}", host.name);

    // …this machine's marker stays, and so does every file of the testnet.
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("still here\n"),
        "{} is gone from this machine's /tmp",
        marker.display()
    );
    assert_eq!(
        tree(&net.dir),
        before,
        "the testnet's directory {} changed",
        net.dir.display()
    );
    assert_eq!(
        std::fs::read(net.dir.join("hosts.json")).unwrap(),
        hosts_json
    );
    // The host still answers (its sshd reads its files from the testnet's directory) and
    // its systemd is still well.
    assert_eq!(ssh_ok(host, "systemctl is-system-running"), "running");
    assert_eq!(
        ssh_ok(host, "printf %s \"$HOME\""),
        host.home.display().to_string()
    );
}
