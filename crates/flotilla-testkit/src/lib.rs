//! Helpers for tests that drive real processes, shared by the workspace's test suites
//! (add `flotilla-testkit` as a dev-dependency):
//!
//! - [`wait_until`]: wait on a condition with a deadline (never a fixed sleep);
//! - [`free_port`]: a loopback port that was free a moment ago;
//! - [`alive`]: whether a pid is a live (non-zombie) process;
//! - [`binary`]: the path of the `flotilla-testkit` service binary, built on demand;
//! - [`testnet`] ([`Testnet`], [`TestHost`]): the SSH test hosts made by
//!   `scripts/testnet up` (network namespaces on a private bridge, one sshd and one
//!   home each) for the multi-host tests: their addresses, keys and inventory entries,
//!   running commands in them, partitioning and rekeying them, counting SSH logins;
//! - [`loopback_ssh`] ([`LoopbackSshd`]): a test's own sshd on 127.0.0.1, an SSH host
//!   whose loopback is this machine's (a tunnel's far end reaching services here);
//! - [`kube_api`] ([`FakeKube`]): an in-memory Kubernetes API server on 127.0.0.1
//!   copying the real one's behaviour (server-side apply, watches, selectors) with a
//!   simulated kubelet and controllers, faults and a request log; also served by the
//!   `fake-kube-apiserver` binary.
//!
//! The `flotilla-testkit` binary itself (see `src/main.rs` and `--help`) is a stand-in
//! service whose behaviour is set by flags.

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub mod anthropic_stub;
pub mod kube_api;
pub mod loopback_ssh;
pub mod testnet;

pub use kube_api::FakeKube;
pub use loopback_ssh::LoopbackSshd;
pub use testnet::{TestHost, Testnet};

/// Pause between two looks at a polled condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Polls `condition` every [`POLL_INTERVAL`] until it holds (`true`) or `timeout` has
/// passed (`false`). The condition is checked once more at the deadline.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return condition();
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`wait_until`] for a condition that must be awaited (an HTTP call): checks
/// `condition` every [`POLL_INTERVAL`] until it holds or `timeout` has passed; whether
/// it held (checked once more at the deadline).
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return condition().await;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Whether a live process has this pid: a zombie (exited, not yet reaped) or a
/// dead one (`Z`/`X` in `/proc/<pid>/stat`) is not. Linux only.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !matches!(
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next(),
            Some('Z' | 'X') | None
        ),
        Err(_) => false,
    }
}

/// A TCP port on 127.0.0.1 that was free when this returned (bound, then released;
/// another process may still take it, so tests should use it promptly).
///
/// Drawn at random from 20000–32767, below Linux's default ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768–60999): the kernel hands out ephemeral
/// ports (every `connect` and every bind to port 0 of the tests running beside this
/// one) close to each other, so a port taken from that range is soon handed to
/// someone else; one drawn below it collides only with another draw.
///
/// # Panics
/// When no port of that range can be bound after many tries.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 32_768 - LOW;
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    for attempt in 0..1000u32 {
        hasher.write_u32(attempt);
        let port = (LOW + (hasher.finish() % u64::from(SPAN)) as u32) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in 20000-32767")
}

/// The `flotilla-testkit` binary in this workspace's target directory (next to the
/// running test executable's `deps/` directory), built with `cargo build -p
/// flotilla-testkit` if it is not there yet.
///
/// # Panics
/// If it can be neither found nor built.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test> → target/<profile>/flotilla-testkit
    let profile_dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("test executable has a directory")
        .to_path_buf();
    let bin = profile_dir.join("flotilla-testkit");
    if !bin.exists() {
        let status =
            std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "build",
                    "-p",
                    "flotilla-testkit",
                    "--bin",
                    "flotilla-testkit",
                ])
                .status()
                .expect("run cargo build -p flotilla-testkit");
        assert!(status.success(), "cargo build -p flotilla-testkit failed");
    }
    assert!(
        bin.exists(),
        "{} not found after building it",
        bin.display()
    );
    bin
}
