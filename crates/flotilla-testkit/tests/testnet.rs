//! Checks the SSH test hosts that `scripts/testnet up` makes (run it as root first;
//! `scripts/test` does): each host answers SSH with its own home, its sshd log counts
//! one login per connection, a link taken down partitions the host until it comes up
//! again, and a rekeyed host is refused until its key is restored.
//!
//! These tests share the hosts, so they run one at a time (nextest's test group
//! `testnet` in `.config/nextest.toml`; `testnet::lock` under `cargo test`); every wait
//! is on a condition with a deadline.

use std::process::Output;
use std::time::Duration;

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
