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
//! With `restart = { policy = "on-failure" }` launchd supervises (`KeepAlive = {
//! SuccessfulExit = false }`): a job killed with SIGKILL comes back as a new process
//! and status shows launchd's runs; a clean exit (status 0) is left alone.

mod common;

use common::Run;
use flotilla_testkit::{alive, free_port, wait_until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(20);

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
        self.write_with(extra, "");
    }

    /// [`Job::write`], with `more` TOML lines in the component's table.
    fn write_with(&self, extra: &[&str], more: &str) {
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
                 stop = {{ grace_period = \"2s\" }}\n{more}",
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

/// The component's lifecycle evidence, one `source: saw` line each.
fn evidence_text(c: &serde_json::Value) -> String {
    c["evidence"]
        .as_array()
        .map(|ev| {
            ev.iter()
                .map(|e| format!("{}: {}", e["source"], e["saw"]))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
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

    // Another project with a component of this name, and so of this label: its start
    // is refused, and its stop and status leave the job alone, naming the project.
    let text = std::fs::read_to_string(job.dir.path().join("flotilla.toml")).unwrap();
    let other_port = free_port().to_string();
    std::fs::write(
        job.dir.path().join("other.toml"),
        text.replace(&job.port.to_string(), &other_port),
    )
    .unwrap();
    let other = |args: &[&str]| {
        let global: &[&str] = &["-p", "other-project", "-f", "other.toml"];
        job.run(&[global, args].concat(), &[])
    };
    let r = other(&["start", "svc"]);
    assert_ne!(r.code, 0, "{}", both(&r));
    assert!(
        both(&r).contains("was loaded for flotilla project"),
        "{}",
        both(&r)
    );
    let _ = other(&["stop", "svc", "--force"]);
    assert_eq!(job.print().and_then(|p| p.0), Some(third), "left running");
    let st = other(&["status", "--json", "svc"]).json();
    let c = &st["components"][0];
    assert!(
        evidence_text(c).contains("was loaded for flotilla project"),
        "{c:#}"
    );
    assert_ne!(c["lifecycle"], "running", "{c:#}");

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

#[test]
fn a_launchd_job_with_restart_on_failure_comes_back_after_sigkill_not_after_a_clean_exit() {
    if nix::unistd::getuid().as_raw() != 0 {
        panic!("this test drives the fake launchd's `system` domain: run it as root (scripts/test does)");
    }
    let job = Job::new();
    job.write_with(
        &[],
        "restart = { policy = \"on-failure\", backoff = \"1s\" }\n",
    );
    job.ok(&["start", "svc"]);
    let (c, first) = job.status_pid();
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    let (_, text) = job.print().expect("the job is loaded");
    assert!(text.contains("\tminimum runtime = 1\n"), "{text}");
    let plist = std::fs::read_to_string(
        common::project_dir(&job.dir.path().join(".flotilla-state"), job.dir.path())
            .join("launchd")
            .join(format!("{}.plist", job.label)),
    )
    .expect("Flotilla wrote the job's plist");
    assert!(
        plist.contains("<key>SuccessfulExit</key>\n\t\t<false/>"),
        "{plist}"
    );

    // SIGKILL: launchd starts it again (a new pid), and status says so.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    let deadline = Instant::now() + DEADLINE;
    let c = loop {
        let st = job.run(&["status", "--json", "svc"], &[]).json();
        let c = st["components"][0].clone();
        let back = c["lifecycle"] == "running"
            && c["runtime_identity"]["measured"]["pid"]
                .as_u64()
                .is_some_and(|p| p != u64::from(first));
        if back || Instant::now() > deadline {
            break c;
        }
        std::thread::yield_now();
    };
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_ne!(c["condition"], "down-unexpectedly", "{c:#}");
    let second = c["runtime_identity"]["measured"]["pid"].as_u64().unwrap() as u32;
    assert_ne!(second, first);
    assert!(!alive(first));
    let ev = evidence_text(&c);
    assert!(ev.contains("runs = 2,"), "launchd's count of runs: {ev}");
    assert!(
        ev.contains(&format!(
            "the job's process is pid {second}, not pid {first} that Flotilla started: launchd started it again on its own"
        )),
        "{ev}"
    );

    // A clean exit (on SIGTERM the stand-in exits 0): left exited, and it stays so
    // for twice the throttle interval (a respawn would come within one).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(second as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill -TERM");
    let exited = wait_until(DEADLINE, || {
        job.print()
            .is_some_and(|(pid, text)| pid.is_none() && text.contains("\tstate = not running\n"))
    });
    assert!(exited, "{:?}", job.print());
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(2) {
        let (pid, text) = job.print().expect("still loaded");
        assert_eq!(pid, None, "launchd restarted a clean exit:\n{text}");
        assert!(text.contains("\truns = 2\n"), "{text}");
        std::thread::yield_now();
    }
    let st = job.run(&["status", "--json", "svc"], &[]).json();
    let c = &st["components"][0];
    assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    assert_eq!(c["condition"], "down-unexpectedly", "{c:#}");
    assert!(
        evidence_text(c).contains("last exit code = 0"),
        "{}",
        evidence_text(c)
    );

    // Stopping what already exited records that it should stay stopped: status is
    // content again.
    job.ok(&["stop", "svc"]);
    let st = job.run(&["status", "--json", "svc"], &[]).json();
    let c = &st["components"][0];
    assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    assert_eq!(c["condition"], "ok", "{c:#}");
}

impl Job {
    /// `launchctl ARGS` against the fake launchd: (success, stdout and stderr).
    fn ctl(&self, args: &[&str]) -> (bool, String) {
        let mut cmd = Command::new(&self.launchctl);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let out = cmd.args(args).output().expect("run launchctl");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// The pid `launchctl print system/LABEL` shows; `None` when it is not loaded or
    /// has no process.
    fn pid_of(&self, label: &str) -> Option<u32> {
        let (ok, text) = self.ctl(&["print", &format!("system/{label}")]);
        ok.then(|| launchctl_pid(&text)).flatten()
    }
}

/// The `pid = N` line of a `launchctl print`.
fn launchctl_pid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("pid = "))
        .and_then(|p| p.trim().parse().ok())
}

/// `flotilla adopt` of a launchd job loaded by hand (`launchctl bootstrap system
/// PLIST`, the plist written by hand, label of its own) running the service a
/// launchd component declares: recognised by the `XPC_SERVICE_NAME` launchd gives
/// its process and `launchctl print` naming that pid; other arguments declared are
/// refused with the difference (nothing changed); the adopt boots the job out
/// (its plist kept) and bootstraps Flotilla's job; `--rollback` boots Flotilla's out
/// and bootstraps the hand plist again, proven by its new process on the port.
#[test]
fn a_launchd_job_loaded_by_hand_is_booted_out_for_flotillas_and_bootstrapped_again() {
    if nix::unistd::getuid().as_raw() != 0 {
        panic!("this test drives the fake launchd's `system` domain: run it as root (scripts/test does)");
    }
    let job = Job::new();
    let hand = format!("local.hand.{}", std::process::id());
    let plist = job.dir.path().join(format!("{hand}.plist"));
    let bin = flotilla_testkit::binary().display().to_string();
    std::fs::write(
        &plist,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
             <plist version=\"1.0\"><dict>\n\
             <key>Label</key><string>{hand}</string>\n\
             <key>ProgramArguments</key><array><string>{bin}</string><string>--listen</string><string>127.0.0.1:{}</string></array>\n\
             <key>RunAtLoad</key><true/>\n\
             </dict></plist>\n",
            job.port
        ),
    )
    .expect("write the plist");
    let plist_text = plist.display().to_string();
    let (ok, out) = job.ctl(&["bootstrap", "system", &plist_text]);
    assert!(ok, "bootstrap by hand: {out}");
    let listens = || std::net::TcpStream::connect(("127.0.0.1", job.port)).is_ok();
    assert!(wait_until(DEADLINE, listens), "the hand job listens");
    let first = job.pid_of(&hand).expect("the hand job runs");

    // Other arguments declared: refused, nothing changed.
    job.write(&["--log-line", "declared"]);
    let r = job.run(&["adopt", "svc", "--yes"], &[]);
    assert_eq!(r.code, 1, "{}", both(&r));
    assert!(r.stdout.contains("arguments: declared"), "{}", both(&r));
    assert!(r.stderr.contains("nothing was changed"), "{}", both(&r));
    assert_eq!(job.pid_of(&hand), Some(first));

    job.write(&[]);
    let plan = job.ok(&["adopt", "svc", "--dry-run", "--json"]).json();
    let prior = &plan["holder"]["prior"];
    assert_eq!(prior["kind"], "job", "{plan:#}");
    assert_eq!(prior["label"], hand.as_str(), "{plan:#}");
    assert_eq!(prior["domain"], "system", "{plan:#}");
    assert_eq!(prior["plist"], plist_text.as_str(), "{plan:#}");
    assert_eq!(prior["pid"], first, "{plan:#}");
    assert_eq!(plan["differences"], serde_json::json!([]), "{plan:#}");

    let r = job.ok(&["adopt", "svc", "--yes"]);
    assert!(
        both(&r).contains(&format!("`launchctl bootout system/{hand}`: unloaded")),
        "{}",
        both(&r)
    );
    let (ok, _) = job.ctl(&["print", &format!("system/{hand}")]);
    assert!(!ok, "the hand job is unloaded:\n{}", both(&r));
    assert!(plist.exists(), "its plist is kept");
    assert!(!alive(first), "its process is gone");
    let ours = job.pid_of(&job.label).expect("flotilla's job runs");
    let (c, measured) = job.status_pid();
    assert_eq!(c["ownership"], "managed (launchd)", "{c:#}");
    assert_eq!(measured, ours);
    assert!(listens());

    let r = job.ok(&["adopt", "svc", "--rollback"]);
    assert!(
        both(&r).contains(&format!("`launchctl bootstrap system {plist_text}`")),
        "{}",
        both(&r)
    );
    assert!(
        both(&r).contains("rolled back: launchd job"),
        "{}",
        both(&r)
    );
    let again = job.pid_of(&hand).expect("the hand job runs again");
    assert_ne!(again, first);
    assert!(job.print().is_none(), "flotilla's job is booted out");
    assert!(!alive(ours), "flotilla's process is gone");
    assert!(listens(), "the hand job answers on the port again");
    let (ok, out) = job.ctl(&["bootout", &format!("system/{hand}")]);
    assert!(ok, "{out}");
}
