//! The `launchd` adapter end to end: the real `flotilla` binary drives a job through a
//! faithful fake `launchctl` (`flotilla-testkit`'s `fake-launchctl`, see its docs for
//! the real behaviour it copies and where that comes from), on this machine.
//!
//! What is proven: a job is bootstrapped from the property list Flotilla writes and
//! observed (`managed (launchd)`, the pid `launchctl print` shows, measured); `restart`
//! (`kickstart -k`) yields a proven new process; a changed command is applied although
//! `kickstart` would rerun the cached definition; a reload that changes nothing
//! (`launchctl load` over the loaded job, `FLOTILLA_LAUNCHD_RESTART=reload`) makes
//! `restart` fail with evidence naming the process still running; `stop` boots it out.

mod common;

use common::Run;
use flotilla_testkit::{alive, free_port, wait_until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The fake `launchctl`, installed as `<dir>/bin/launchctl`.
fn install_fake(dir: &Path) -> PathBuf {
    let fake = flotilla_testkit::binary().with_file_name("fake-launchctl");
    if !fake.exists() {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-p", "flotilla-testkit", "--bin", "fake-launchctl"])
            .status()
            .expect("build fake-launchctl");
        assert!(status.success());
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    let link = bin.join("launchctl");
    std::os::unix::fs::symlink(&fake, &link).expect("link launchctl");
    link
}

struct Job {
    dir: tempfile::TempDir,
    launchctl: PathBuf,
    port: u16,
    label: String,
}

impl Job {
    fn new() -> Job {
        let dir = tempfile::tempdir().expect("temp dir");
        let launchctl = install_fake(dir.path());
        let label = format!("dev.flotilla.test.{}", std::process::id());
        let job = Job {
            launchctl,
            port: free_port(),
            label,
            dir,
        };
        job.write(&[]);
        job
    }

    /// The inventory: one launchd component running the stand-in service with `extra`
    /// arguments.
    fn write(&self, extra: &[&str]) {
        let mut argv = vec![
            flotilla_testkit::binary().display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.port),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
        std::fs::write(
            self.dir.path().join("flotilla.toml"),
            format!(
                "[components.svc]\nadapter = \"launchd\"\nlaunchd = {{ label = {:?} }}\n\
                 command = [{}]\nendpoints = {{ http = \"http://127.0.0.1:{}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"50ms\" }}\n\
                 stop = {{ grace_period = \"2s\" }}\n",
                self.label,
                argv.join(", "),
                self.port
            ),
        )
        .expect("write the inventory");
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FLOTILLA_LAUNCHCTL", self.launchctl.display().to_string()),
            (
                "FAKE_LAUNCHD_DIR",
                self.dir.path().join("launchd").display().to_string(),
            ),
            ("FAKE_LAUNCHD_EXIT_TIMEOUT_MS", "2000".into()),
        ]
    }

    fn run(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Run {
        let env = self.env();
        let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(extra_env);
        common::run_with_env(self.dir.path(), args, &all)
    }

    fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args, &[]);
        assert_eq!(r.code, 0, "flotilla {args:?}:\n{}\n{}", r.stdout, r.stderr);
        r
    }

    /// What `launchctl print` says of the job: `(pid, arguments)`; `None` when it is
    /// not loaded.
    fn print(&self) -> Option<(Option<u32>, String)> {
        let mut cmd = Command::new(&self.launchctl);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let out = cmd
            .args(["print", &format!("system/{}", self.label)])
            .output()
            .expect("run launchctl print");
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let pid = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("pid = "))
            .and_then(|p| p.trim().parse().ok());
        Some((pid, text))
    }

    fn status_pid(&self) -> (serde_json::Value, u32) {
        let st = self.run(&["status", "--json", "svc"], &[]).json();
        let c = st["components"][0].clone();
        let pid = c["runtime_identity"]["measured"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no measured pid: {c:#}")) as u32;
        (c, pid)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.run(&["stop", "svc", "--force"], &[]);
        if let Some((Some(pid), _)) = self.print() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn both(r: &Run) -> String {
    format!("{}{}", r.stdout, r.stderr)
}

#[test]
fn a_launchd_job_starts_restarts_with_proof_applies_a_changed_command_and_stops() {
    if nix::unistd::getuid().as_raw() != 0 {
        panic!("this test drives the fake launchd's `system` domain: run it as root (scripts/test does)");
    }
    let job = Job::new();
    let up = job.ok(&["start", "svc"]);
    assert!(both(&up).contains("started pid"), "{}", both(&up));
    let (c, first) = job.status_pid();
    assert_eq!(c["ownership"], "managed (launchd)", "{c:#}");
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_eq!(c["health"], "healthy", "{c:#}");
    let (printed, text) = job.print().expect("the job is loaded");
    assert_eq!(
        printed,
        Some(first),
        "status measures launchd's pid:\n{text}"
    );
    let plist = std::fs::read_to_string(
        common::project_dir(&job.dir.path().join(".flotilla-state"), job.dir.path())
            .join("launchd")
            .join(format!("{}.plist", job.label)),
    )
    .expect("Flotilla wrote the job's plist");
    assert!(plist.contains("<key>ProgramArguments</key>"), "{plist}");

    // kickstart -k: a new process, proven.
    let r = job.ok(&["restart", "svc"]);
    assert!(
        both(&r).contains(&format!("replaced pid {first} with pid")),
        "{}",
        both(&r)
    );
    let (_, second) = job.status_pid();
    assert_ne!(second, first);
    assert!(!alive(first), "the old process is gone");

    // A reload over the loaded job changes nothing: restart fails, naming what runs.
    let r = job.run(
        &["restart", "svc"],
        &[("FLOTILLA_LAUNCHD_RESTART", "reload")],
    );
    assert_ne!(r.code, 0, "a no-op reload must not pass:\n{}", both(&r));
    assert!(
        both(&r).contains(&format!("restart had no effect: pid {second} started")),
        "{}",
        both(&r)
    );
    assert!(
        alive(second),
        "the old process still runs, as launchd left it"
    );
    assert_eq!(job.print().and_then(|p| p.0), Some(second));

    // A changed command: kickstart would rerun the cached definition, so the job is
    // booted out and bootstrapped again, and the new argument is what runs.
    job.write(&["--log-line", "second definition"]);
    let r = job.ok(&["restart", "svc"]);
    assert!(both(&r).contains("replaced pid"), "{}", both(&r));
    let (_, third) = job.status_pid();
    let cmdline = std::fs::read(format!("/proc/{third}/cmdline")).expect("cmdline");
    assert!(
        String::from_utf8_lossy(&cmdline).contains("second definition"),
        "the new definition runs: {:?}",
        String::from_utf8_lossy(&cmdline)
    );

    let r = job.ok(&["stop", "svc"]);
    assert!(both(&r).contains("booted out job"), "{}", both(&r));
    assert!(job.print().is_none(), "bootout unloads the job");
    assert!(
        wait_until(Duration::from_secs(5), || !alive(third)),
        "its process is gone"
    );
    let st = job.run(&["status", "--json", "svc"], &[]).json();
    assert_eq!(st["components"][0]["lifecycle"], "stopped", "{st:#}");
}
