//! Drives the real `fake-launchctl` binary, installed as `launchctl` (a symlink in a
//! temporary directory put first on `PATH`), with the `flotilla-testkit` stand-in service
//! as the job's program, and checks the launchd behaviour it promises (see the binary's
//! docs): above all that loading a loaded job changes nothing and that `kickstart -k`
//! restarts from the definition cached at bootstrap.
//!
//! No fixed sleeps: every wait is `wait_until` with a deadline. Each test has its own
//! state directory; dropping the `Launchd` fixture SIGKILLs every supervisor and job it
//! knows of and deletes the directory (which also makes any supervisor left kill its job
//! and exit).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flotilla_testkit::{alive, wait_until};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use plist::{Dictionary, Value};

const FAKE: &str = env!("CARGO_BIN_EXE_fake-launchctl");
const DOMAIN: &str = "gui/501";
/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(10);
/// The throttle interval the tests run with (launchd's is 10 s).
const THROTTLE_MS: &str = "200";
/// The default exit timeout the tests run with (launchd's is 20 s).
const EXIT_TIMEOUT_MS: &str = "3000";
/// Set in every `launchctl` call's environment: a job must never see it.
const CALLER_MARKER: &str = "FLOTILLA_TEST_CALLER_ONLY";

/// One fake launchd: a temporary directory with `bin/launchctl` and `state/`.
struct Launchd {
    root: PathBuf,
    bin: PathBuf,
    state: PathBuf,
}

impl Launchd {
    fn new() -> Launchd {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let root = std::env::temp_dir().join(format!(
            "fake-launchctl-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let bin = root.join("bin");
        let state = root.join("state");
        fs::create_dir_all(&bin).expect("mkdir bin");
        fs::create_dir_all(&state).expect("mkdir state");
        std::os::unix::fs::symlink(FAKE, bin.join("launchctl")).expect("symlink launchctl");
        Launchd { root, bin, state }
    }

    /// `launchctl <args>` found through `PATH`, with `extra` environment variables.
    fn run_with(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("launchctl");
        cmd.args(args)
            .env("PATH", path)
            .env("FAKE_LAUNCHD_DIR", &self.state)
            .env("FAKE_LAUNCHD_THROTTLE_MS", THROTTLE_MS)
            .env("FAKE_LAUNCHD_EXIT_TIMEOUT_MS", EXIT_TIMEOUT_MS)
            .env(CALLER_MARKER, "leaked")
            .env_remove("FAKE_LAUNCHCTL_ERRORS")
            .env_remove("FAKE_LAUNCHCTL_LEGACY_DOMAIN");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.output().expect("run launchctl")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    /// Runs `launchctl <args>` and asserts it exited 0.
    fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert_eq!(code(&out), 0, "launchctl {args:?}: {}", text(&out));
        out
    }

    /// `launchctl print gui/501/<label>`, which must succeed.
    fn print(&self, label: &str) -> Print {
        let out = self.ok(&["print", &format!("{DOMAIN}/{label}")]);
        Print(String::from_utf8(out.stdout).expect("utf-8"))
    }

    /// Waits until `print` shows a live pid other than `not`; that pid.
    fn wait_for_pid(&self, label: &str, not: Option<u32>) -> u32 {
        let mut pid = None;
        let mut last = String::new();
        let found = wait_until(DEADLINE, || {
            let p = self.print(label);
            pid = p.pid().filter(|p| Some(*p) != not && alive(*p));
            last = p.0;
            pid.is_some() && p_state(&last) == "running"
        });
        assert!(
            found,
            "no new live pid for {label} (not {not:?}); last print:\n{last}"
        );
        pid.expect("found")
    }

    fn plist(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Drop for Launchd {
    fn drop(&mut self) {
        // Every pid the state knows of, then the directory: a supervisor whose state is
        // gone kills its job (even one it spawned a moment ago and has not recorded yet)
        // and exits. SIGKILL what is still alive after that, as a backstop.
        let mut pids = Vec::new();
        for dir in fs::read_dir(&self.state).into_iter().flatten().flatten() {
            for file in fs::read_dir(dir.path()).into_iter().flatten().flatten() {
                let Ok(text) = fs::read_to_string(file.path()) else {
                    continue;
                };
                let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                for key in ["supervisor", "pid"] {
                    if let Some(pid) = json.get(key).and_then(serde_json::Value::as_u64) {
                        pids.push(pid as u32);
                    }
                }
            }
        }
        let _ = fs::remove_dir_all(&self.root);
        wait_until(Duration::from_secs(2), || pids.iter().all(|p| !alive(*p)));
        for pid in pids.into_iter().filter(|p| alive(*p)) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

fn p_state(print: &str) -> String {
    Print(print.to_string()).field("state").unwrap_or_default()
}

/// The text of `launchctl print`, with accessors for the service's top-level keys.
struct Print(String);

impl Print {
    /// `\t<key> = <value>` at the service's top level (one tab).
    fn field(&self, key: &str) -> Option<String> {
        let prefix = format!("\t{key} = ");
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
    }
    fn pid(&self) -> Option<u32> {
        self.field("pid").and_then(|p| p.parse().ok())
    }
    fn runs(&self) -> u32 {
        self.field("runs")
            .and_then(|r| r.parse().ok())
            .expect("runs line")
    }
    fn arguments(&self) -> Vec<String> {
        let mut lines = self.0.lines().skip_while(|l| *l != "\targuments = {");
        assert!(lines.next().is_some(), "no arguments block:\n{}", self.0);
        lines
            .take_while(|l| *l != "\t}")
            .map(|l| l.trim_start_matches('\t').to_string())
            .collect()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("launchctl exited with a code")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    )
}

/// A job definition written as an XML plist.
struct Job {
    label: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    stdout: Option<PathBuf>,
    run_at_load: bool,
    /// The plist's `KeepAlive`: a boolean or a dictionary of conditions.
    keep_alive: Value,
    /// `ThrottleInterval`, in seconds (absent: the fake's default).
    throttle_interval: Option<u64>,
}

impl Job {
    /// The stand-in service, told apart by `--exec-name <version>`.
    fn new(label: &str, version: &str) -> Job {
        Job {
            label: label.to_string(),
            args: vec![
                flotilla_testkit::binary().display().to_string(),
                "--exec-name".into(),
                version.into(),
            ],
            env: BTreeMap::new(),
            cwd: None,
            stdout: None,
            run_at_load: true,
            keep_alive: Value::Boolean(false),
            throttle_interval: None,
        }
    }

    fn arg(mut self, a: &str) -> Job {
        self.args.push(a.to_string());
        self
    }

    fn write(&self, path: &Path) {
        let mut d = Dictionary::new();
        d.insert("Label".into(), Value::String(self.label.clone()));
        d.insert(
            "ProgramArguments".into(),
            Value::Array(self.args.iter().cloned().map(Value::String).collect()),
        );
        if !self.env.is_empty() {
            let env: Dictionary = self
                .env
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            d.insert("EnvironmentVariables".into(), Value::Dictionary(env));
        }
        if let Some(cwd) = &self.cwd {
            d.insert(
                "WorkingDirectory".into(),
                Value::String(cwd.display().to_string()),
            );
        }
        if let Some(out) = &self.stdout {
            d.insert(
                "StandardOutPath".into(),
                Value::String(out.display().to_string()),
            );
        }
        d.insert("RunAtLoad".into(), Value::Boolean(self.run_at_load));
        d.insert("KeepAlive".into(), self.keep_alive.clone());
        if let Some(t) = self.throttle_interval {
            d.insert("ThrottleInterval".into(), Value::Integer(t.into()));
        }
        Value::Dictionary(d).to_file_xml(path).expect("write plist");
    }
}

/// A `KeepAlive` dictionary of boolean conditions.
fn conditions(pairs: &[(&str, bool)]) -> Value {
    Value::Dictionary(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::Boolean(*v)))
            .collect(),
    )
}

/// When `pid` started, in clock ticks since boot (`/proc/<pid>/stat` field 22, proc(5)).
fn start_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    let after_comm = stat.rsplit(')').next().expect("a stat line");
    // Fields after `(comm)` start at field 3 (state); starttime is field 22.
    after_comm
        .split_whitespace()
        .nth(22 - 3)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no starttime in {stat}"))
}

/// Clock ticks per second (`getconf CLK_TCK`, sysconf(3)).
fn ticks_per_second() -> u64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("run getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK is a number")
}

/// `/proc/<pid>/cmdline` as arguments.
fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a live supervisor process for `label` exists.
fn supervisor_running(label: &str) -> bool {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                return false;
            };
            let args = cmdline(pid);
            alive(pid) && args.iter().any(|a| a == "__supervise") && args.iter().any(|a| a == label)
        })
}

#[test]
fn bootstrap_starts_the_job_in_its_own_session() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.bootstrap";
    let plist = ld.plist("job.plist");
    let pid_file = ld.file("job.pid");
    Job::new(label, "v1")
        .arg("--pid-file")
        .arg(&pid_file.display().to_string())
        .write(&plist);

    let out = ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    assert!(out.stderr.is_empty(), "{}", text(&out));
    let pid = ld.wait_for_pid(label, None);

    let written = wait_until(DEADLINE, || pid_file.exists());
    assert!(written, "the job never wrote its pid file");
    assert_eq!(
        fs::read_to_string(&pid_file).unwrap().trim(),
        pid.to_string(),
        "print's pid is the job's own"
    );
    let p = ld.print(label);
    assert!(
        p.0.starts_with(&format!("{DOMAIN}/{label} = {{\n")),
        "{}",
        p.0
    );
    assert_eq!(p.field("state").as_deref(), Some("running"));
    assert_eq!(p.runs(), 1);
    assert_eq!(p.field("last exit code").as_deref(), Some("(never exited)"));
    assert_eq!(
        p.field("path").as_deref(),
        Some(plist.display().to_string().as_str())
    );
    assert_eq!(
        p.arguments(),
        Job::new(label, "v1")
            .arg("--pid-file")
            .arg(&pid_file.display().to_string())
            .args
    );
    // launchd makes each job a session leader (setsid), detached from the caller.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[3], pid.to_string(), "session id: {stat}");
    assert_eq!(fields[2], pid.to_string(), "process group: {stat}");
}

#[test]
fn bootstrap_of_a_loaded_job_fails_and_the_old_process_keeps_running() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.rebootstrap";
    let plist = ld.plist("job.plist");
    Job::new(label, "v1").write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let pid = ld.wait_for_pid(label, None);

    // A new version on disk, bootstrapped over the loaded one.
    Job::new(label, "v2").write(&plist);
    let out = ld.run(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    assert_eq!(code(&out), 5, "{}", text(&out));
    assert_eq!(
        stderr(&out),
        "Bootstrap failed: 5: Input/output error\n\
         Try re-running the command as root for richer errors.\n"
    );
    let root = ld.run_with(
        &["bootstrap", DOMAIN, &plist.display().to_string()],
        &[("FAKE_LAUNCHCTL_ERRORS", "root")],
    );
    assert_eq!(code(&root), 37, "{}", text(&root));
    assert_eq!(
        stderr(&root),
        "Bootstrap failed: 37: Operation already in progress\n"
    );

    let p = ld.print(label);
    assert_eq!(p.pid(), Some(pid), "the old process is still the job");
    assert!(alive(pid));
    assert_eq!(p.runs(), 1, "nothing was restarted");
    assert!(
        cmdline(pid).contains(&"v1".to_string()),
        "{:?}",
        cmdline(pid)
    );
    assert!(p.arguments().contains(&"v1".to_string()), "{}", p.0);
    assert!(!p.arguments().contains(&"v2".to_string()), "{}", p.0);
}

#[test]
fn kickstart_k_restarts_from_the_cached_definition_not_the_plist_on_disk() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.kickstart";
    let target = format!("{DOMAIN}/{label}");
    let plist = ld.plist("job.plist");
    Job::new(label, "v1").write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let old = ld.wait_for_pid(label, None);

    // Without -k, a running job is left alone.
    ld.ok(&["kickstart", &target]);
    let p = ld.print(label);
    assert_eq!((p.pid(), p.runs()), (Some(old), 1), "{}", p.0);

    // The plist on disk changes; launchd does not re-read it.
    Job::new(label, "v2").write(&plist);
    let out = ld.ok(&["kickstart", "-k", "-p", &target]);
    let printed: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("kickstart -p prints the pid: {}", text(&out)));
    assert_ne!(printed, old, "a new process");
    assert!(!alive(old), "the old process was killed");
    assert!(alive(printed));
    let p = ld.print(label);
    assert_eq!(p.pid(), Some(printed));
    assert_eq!(p.runs(), 2);
    // The stand-in exits 0 on SIGTERM, which launchd records as the last exit.
    assert_eq!(p.field("last exit code").as_deref(), Some("0"), "{}", p.0);
    let argv = cmdline(printed);
    assert!(
        argv.contains(&"v1".to_string()),
        "cached definition: {argv:?}"
    );
    assert!(
        !argv.contains(&"v2".to_string()),
        "not the plist on disk: {argv:?}"
    );
    assert!(!p.arguments().contains(&"v2".to_string()), "{}", p.0);
}

#[test]
fn legacy_load_of_a_loaded_job_exits_0_and_reloads_nothing() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.load";
    let plist = ld.plist("job.plist");
    let legacy = [("FAKE_LAUNCHCTL_LEGACY_DOMAIN", DOMAIN)];
    Job::new(label, "v1").write(&plist);
    let out = ld.run_with(&["load", "-w", &plist.display().to_string()], &legacy);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let pid = ld.wait_for_pid(label, None);

    Job::new(label, "v2").write(&plist);
    let out = ld.run_with(&["load", "-w", &plist.display().to_string()], &legacy);
    assert_eq!(code(&out), 0, "the trap: success status {}", text(&out));
    assert_eq!(
        stderr(&out),
        "Load failed: 5: Input/output error\n\
         Try running `launchctl bootstrap` as root for richer errors.\n"
    );
    let old_style = ld.run_with(
        &["load", &plist.display().to_string()],
        &[legacy[0], ("FAKE_LAUNCHCTL_ERRORS", "legacy")],
    );
    assert_eq!(code(&old_style), 0, "{}", text(&old_style));
    assert_eq!(
        stderr(&old_style),
        format!("{}: service already loaded\n", plist.display())
    );

    let p = ld.print(label);
    assert_eq!((p.pid(), p.runs()), (Some(pid), 1), "{}", p.0);
    assert!(alive(pid));
    assert!(cmdline(pid).contains(&"v1".to_string()));

    // Legacy unload does stop it.
    let out = ld.run_with(&["unload", &plist.display().to_string()], &legacy);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!alive(pid));
    assert_eq!(code(&ld.run(&["print", &format!("{DOMAIN}/{label}")])), 113);
}

#[test]
fn bootout_kills_the_job_and_then_nothing_is_found() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.bootout";
    let target = format!("{DOMAIN}/{label}");
    let plist = ld.plist("job.plist");
    Job::new(label, "v1").write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let pid = ld.wait_for_pid(label, None);

    let out = ld.ok(&["bootout", &target]);
    assert!(out.stderr.is_empty(), "{}", text(&out));
    assert!(!alive(pid), "bootout returns once the job is gone");
    assert!(
        wait_until(DEADLINE, || !supervisor_running(label)),
        "no supervisor lingers"
    );

    let out = ld.run(&["print", &target]);
    assert_eq!(code(&out), 113, "{}", text(&out));
    assert_eq!(
        stderr(&out),
        format!("Bad request.\nCould not find service \"{label}\" in domain for user gui: 501\n")
    );
    let out = ld.run(&["kickstart", "-k", &target]);
    assert_eq!(code(&out), 113, "{}", text(&out));
    assert_eq!(
        stderr(&out),
        format!("Could not find service \"{label}\" in domain for user gui: 501\n")
    );
    let out = ld.run(&["bootout", &target]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    assert_eq!(stderr(&out), "Boot-out failed: 3: No such process\n");
    let out = ld.run(&["bootout", DOMAIN, &plist.display().to_string()]);
    assert_eq!(code(&out), 5, "{}", text(&out));
    assert!(
        stderr(&out).starts_with("Boot-out failed: 5: Input/output error\n"),
        "{}",
        text(&out)
    );
    let out = ld.run(&["print", &format!("system/{label}")]);
    assert_eq!(
        stderr(&out),
        format!("Bad request.\nCould not find service \"{label}\" in domain for system\n")
    );

    // The label is free again: a new bootstrap starts a new process.
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let again = ld.wait_for_pid(label, Some(pid));
    assert_eq!(ld.print(label).runs(), 1, "a fresh load counts from 1");
    ld.ok(&["bootout", DOMAIN, &plist.display().to_string()]);
    assert!(!alive(again));
}

#[test]
fn bootout_sigkills_a_job_that_ignores_sigterm_after_the_exit_timeout() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.stubborn";
    let plist = ld.plist("job.plist");
    let out_log = ld.file("out.log");
    let mut job = Job::new(label, "v1").arg("--ignore-sigterm");
    job.stdout = Some(out_log.clone());
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let pid = ld.wait_for_pid(label, None);
    let started = wait_until(DEADLINE, || {
        fs::read_to_string(&out_log).is_ok_and(|l| l.contains("STARTED"))
    });
    assert!(started, "the job never started its signal handling");

    let begun = Instant::now();
    let out = ld.run_with(
        &["bootout", &format!("{DOMAIN}/{label}")],
        &[("FAKE_LAUNCHD_EXIT_TIMEOUT_MS", "50")], // read at bootstrap, not here
    );
    let took = begun.elapsed();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!alive(pid));
    assert!(
        took >= Duration::from_millis(EXIT_TIMEOUT_MS.parse().unwrap()),
        "SIGKILL only after the cached exit timeout, took {took:?}"
    );
    let log = fs::read_to_string(&out_log).unwrap();
    assert!(log.contains("IGNORED SIGTERM"), "SIGTERM came first: {log}");
}

#[test]
fn keepalive_respawns_a_killed_job() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.keepalive";
    let plist = ld.plist("job.plist");
    let mut job = Job::new(label, "v1");
    job.keep_alive = Value::Boolean(true);
    job.run_at_load = false; // KeepAlive alone starts it at load
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let first = ld.wait_for_pid(label, None);

    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    let second = ld.wait_for_pid(label, Some(first));
    let p = ld.print(label);
    assert_eq!(p.runs(), 2, "{}", p.0);
    assert_eq!(
        p.field("last terminating signal").as_deref(),
        Some("Killed: 9"),
        "{}",
        p.0
    );
    assert!(alive(second));
    assert!(p.0.contains("\tproperties = keepalive"), "{}", p.0);
}

#[test]
fn a_job_that_exits_is_recorded_and_its_supervisor_leaves() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.exits";
    let plist = ld.plist("job.plist");
    Job::new(label, "v1")
        .arg("--crash-after")
        .arg("100")
        .arg("--exit-code")
        .arg("78")
        .write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);

    let mut last = String::new();
    let exited = wait_until(DEADLINE, || {
        last = ld.print(label).0;
        last.contains("\tlast exit code = 78: EX_CONFIG\n")
    });
    assert!(exited, "{last}");
    let p = Print(last);
    assert_eq!(p.field("state").as_deref(), Some("not running"));
    assert_eq!(p.pid(), None);
    assert_eq!(p.runs(), 1);
    assert!(
        wait_until(DEADLINE, || !supervisor_running(label)),
        "the supervisor left with nothing to watch"
    );
    // Still loaded: kickstart starts it again from the cached definition.
    ld.ok(&["kickstart", &format!("{DOMAIN}/{label}")]);
    assert_eq!(ld.print(label).runs(), 2);
}

#[test]
fn the_job_gets_the_plist_environment_not_the_callers() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.env";
    let plist = ld.plist("job.plist");
    let cwd = ld.file("work");
    fs::create_dir_all(&cwd).unwrap();
    let out_log = ld.file("out.log");
    fs::write(&out_log, "earlier line\n").unwrap();
    let mut job = Job::new(label, "v1");
    job.env.insert("JOB_SETTING".into(), "from-plist".into());
    job.cwd = Some(cwd.clone());
    job.stdout = Some(out_log.clone());
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let pid = ld.wait_for_pid(label, None);

    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    let env: BTreeMap<String, String> = environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(
        env.get("JOB_SETTING").map(String::as_str),
        Some("from-plist")
    );
    assert_eq!(
        env.get("PATH").map(String::as_str),
        Some("/usr/bin:/bin:/usr/sbin:/sbin")
    );
    assert_eq!(env.get("XPC_SERVICE_NAME").map(String::as_str), Some(label));
    assert!(
        !env.contains_key(CALLER_MARKER),
        "caller's env leaked: {env:?}"
    );
    assert!(!env.contains_key("FAKE_LAUNCHD_DIR"), "{env:?}");
    let allowed = [
        "JOB_SETTING",
        "PATH",
        "XPC_SERVICE_NAME",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
    ];
    for key in env.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "unexpected {key} in {env:?}"
        );
    }
    assert_eq!(fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), cwd);
    let appended = wait_until(DEADLINE, || {
        fs::read_to_string(&out_log).is_ok_and(|l| l.contains(&format!("STARTED pid={pid}")))
    });
    assert!(appended, "stdout goes to StandardOutPath");
    assert!(
        fs::read_to_string(&out_log)
            .unwrap()
            .starts_with("earlier line\n"),
        "appended"
    );
}

#[test]
fn usage_errors_and_a_missing_state_directory() {
    let ld = Launchd::new();
    let out = ld.run(&["frobnicate"]);
    assert_eq!(code(&out), 64, "{}", text(&out));
    assert!(
        stderr(&out).starts_with("Unrecognized subcommand: frobnicate\n"),
        "{}",
        text(&out)
    );
    let out = ld.run(&["disable", "gui/501/x"]);
    assert_eq!(code(&out), 64, "{}", text(&out));
    let out = ld.run(&["kickstart", "gui/501"]);
    assert_eq!(code(&out), 64, "{}", text(&out));
    assert!(
        stderr(&out).starts_with("Unrecognized target specifier."),
        "{}",
        text(&out)
    );

    let out = Command::new(FAKE)
        .args(["print", "gui/501/x"])
        .env_remove("FAKE_LAUNCHD_DIR")
        .output()
        .unwrap();
    assert_eq!(code(&out), 78, "{}", text(&out));
    assert!(stderr(&out).contains("FAKE_LAUNCHD_DIR"), "{}", text(&out));
}

/// Waits until `label` is loaded, not running, and no supervisor watches it any more
/// (so nothing can start it again on its own); its `print`.
fn wait_until_left_exited(ld: &Launchd, label: &str) -> Print {
    let mut last = String::new();
    let left = wait_until(DEADLINE, || {
        last = ld.print(label).0;
        p_state(&last) == "not running" && !supervisor_running(label)
    });
    assert!(left, "{label} was not left exited; last print:\n{last}");
    let p = ld.print(label);
    assert_eq!(p.field("state").as_deref(), Some("not running"), "{}", p.0);
    p
}

#[test]
fn keepalive_successful_exit_false_restarts_after_a_signal_or_a_failure_not_after_exit_0() {
    let ld = Launchd::new();
    let legacy = [("FAKE_LAUNCHCTL_LEGACY_DOMAIN", DOMAIN)];

    // Killed by a signal: restarted. Then a clean exit (on SIGTERM the stand-in exits
    // 0): not restarted.
    let label = "dev.flotilla.test.onfailure";
    let plist = ld.plist("job.plist");
    let mut job = Job::new(label, "v1");
    job.run_at_load = false; // SuccessfulExit implies RunAtLoad
    job.keep_alive = conditions(&[("SuccessfulExit", false)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let first = ld.wait_for_pid(label, None);
    let listed = String::from_utf8(ld.run_with(&["list", label], &legacy).stdout).unwrap();
    assert!(
        listed.contains("\t\"OnDemand\" = true;\n"),
        "a KeepAlive dictionary leaves the job on demand:\n{listed}"
    );
    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    let second = ld.wait_for_pid(label, Some(first));
    let p = ld.print(label);
    assert_eq!(p.runs(), 2, "{}", p.0);
    assert_eq!(
        p.field("last terminating signal").as_deref(),
        Some("Killed: 9"),
        "{}",
        p.0
    );
    kill(Pid::from_raw(second as i32), Signal::SIGTERM).unwrap();
    let p = wait_until_left_exited(&ld, label);
    assert_eq!(p.field("last exit code").as_deref(), Some("0"), "{}", p.0);
    assert_eq!(p.runs(), 2, "an exit 0 is not restarted: {}", p.0);
    assert_eq!(p.pid(), None, "{}", p.0);
    assert!(!alive(second));
    // Still loaded: demand starts it again.
    ld.ok(&["kickstart", &format!("{DOMAIN}/{label}")]);
    ld.wait_for_pid(label, Some(second));
    assert_eq!(ld.print(label).runs(), 3);

    // A non-zero exit: restarted, again and again (each run paced by the throttle).
    let failing = "dev.flotilla.test.onfailure.exit3";
    let plist = ld.plist("failing.plist");
    let mut job = Job::new(failing, "v1")
        .arg("--crash-after")
        .arg("50")
        .arg("--exit-code")
        .arg("3");
    job.run_at_load = false;
    job.keep_alive = conditions(&[("SuccessfulExit", false)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let mut last = String::new();
    let looped = wait_until(DEADLINE, || {
        last = ld.print(failing).0;
        Print(last.clone()).runs() >= 3
    });
    assert!(looped, "a failing job is restarted: {last}");
    ld.ok(&["bootout", &format!("{DOMAIN}/{failing}")]);

    // An exit 0 by itself (`--crash-after … --exit-code 0`): run once, left exited.
    let clean = "dev.flotilla.test.onfailure.exit0";
    let plist = ld.plist("clean.plist");
    let mut job = Job::new(clean, "v1")
        .arg("--crash-after")
        .arg("50")
        .arg("--exit-code")
        .arg("0");
    job.run_at_load = false;
    job.keep_alive = conditions(&[("SuccessfulExit", false)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let p = wait_until_left_exited(&ld, clean);
    assert_eq!(p.field("last exit code").as_deref(), Some("0"), "{}", p.0);
    assert_eq!(p.runs(), 1, "{}", p.0);
}

#[test]
fn keepalive_successful_exit_true_restarts_only_after_exit_0() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.onsuccess";
    let plist = ld.plist("job.plist");
    let mut job = Job::new(label, "v1");
    job.run_at_load = false;
    job.keep_alive = conditions(&[("SuccessfulExit", true)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let first = ld.wait_for_pid(label, None);
    // SIGTERM: the stand-in exits 0, which this condition restarts.
    kill(Pid::from_raw(first as i32), Signal::SIGTERM).unwrap();
    let second = ld.wait_for_pid(label, Some(first));
    let p = ld.print(label);
    assert_eq!(
        (p.runs(), p.field("last exit code")),
        (2, Some("0".into())),
        "{}",
        p.0
    );
    // SIGKILL is not a successful exit: left dead.
    kill(Pid::from_raw(second as i32), Signal::SIGKILL).unwrap();
    let p = wait_until_left_exited(&ld, label);
    assert_eq!(
        p.field("last terminating signal").as_deref(),
        Some("Killed: 9"),
        "{}",
        p.0
    );
    assert_eq!(p.runs(), 2, "{}", p.0);
}

#[test]
fn keepalive_crashed_restarts_after_a_crash_signal_only() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.crashed";
    let plist = ld.plist("job.plist");
    let cwd = ld.file("work"); // where a core file would go
    fs::create_dir_all(&cwd).unwrap();
    let mut job = Job::new(label, "v1");
    job.cwd = Some(cwd);
    job.run_at_load = false;
    job.keep_alive = conditions(&[("Crashed", true)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let first = ld.wait_for_pid(label, None);
    // SIGABRT (not SIGSEGV: Rust's runtime handles a SIGSEGV that is no fault and
    // survives the first one).
    kill(Pid::from_raw(first as i32), Signal::SIGABRT).unwrap();
    let second = ld.wait_for_pid(label, Some(first));
    let p = ld.print(label);
    assert_eq!(
        p.field("last terminating signal").as_deref(),
        Some("Abort trap: 6"),
        "{}",
        p.0
    );
    // SIGKILL is no crash.
    kill(Pid::from_raw(second as i32), Signal::SIGKILL).unwrap();
    let p = wait_until_left_exited(&ld, label);
    assert_eq!(p.runs(), 2, "{}", p.0);
}

#[test]
fn keepalive_conditions_the_fake_does_not_model_are_refused_unknown_ones_ignored() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.network";
    let plist = ld.plist("job.plist");
    let mut job = Job::new(label, "v1");
    job.keep_alive = conditions(&[("NetworkState", true)]);
    job.write(&plist);
    let out = ld.run(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    assert_eq!(code(&out), 78, "{}", text(&out));
    assert!(
        stderr(&out).contains("`NetworkState` is not emulated"),
        "{}",
        text(&out)
    );
    assert_eq!(code(&ld.run(&["print", &format!("{DOMAIN}/{label}")])), 113);

    // A key launchd does not know is ignored ("Unrecognized KeepAlive attribute"):
    // nothing keeps the job alive, nothing starts it at load.
    let label = "dev.flotilla.test.unknown";
    let plist = ld.plist("unknown.plist");
    let mut job = Job::new(label, "v1");
    job.run_at_load = false;
    job.keep_alive = conditions(&[("NoSuchCondition", true)]);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let p = ld.print(label);
    assert_eq!(
        (p.field("state").as_deref(), p.runs()),
        (Some("not running"), 0),
        "{}",
        p.0
    );
    assert!(!supervisor_running(label));
}

#[test]
fn throttle_interval_spaces_keepalive_spawns() {
    let ld = Launchd::new();
    let label = "dev.flotilla.test.throttle";
    let plist = ld.plist("job.plist");
    let mut job = Job::new(label, "v1");
    job.keep_alive = Value::Boolean(true);
    // The plist's own 1 s wins over the 200 ms default the tests run with.
    job.throttle_interval = Some(1);
    job.write(&plist);
    ld.ok(&["bootstrap", DOMAIN, &plist.display().to_string()]);
    let first = ld.wait_for_pid(label, None);
    assert_eq!(
        ld.print(label).field("minimum runtime").as_deref(),
        Some("1")
    );
    let first_start = start_ticks(first);
    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    // Killed at once: the respawn waits out the rest of the interval.
    let mut last = String::new();
    let scheduled = wait_until(DEADLINE, || {
        last = ld.print(label).0;
        p_state(&last) == "spawn scheduled"
    });
    assert!(scheduled, "a throttled respawn is scheduled: {last}");
    let second = ld.wait_for_pid(label, Some(first));
    let hz = ticks_per_second();
    let gap_ticks = start_ticks(second) - first_start;
    // starttime is truncated to ticks: allow one.
    assert!(
        gap_ticks + 1 >= hz,
        "spawns {gap_ticks} ticks apart, fewer than ThrottleInterval's {hz}"
    );

    // A run longer than the interval is respawned without waiting.
    let aged = wait_until(DEADLINE, || {
        let uptime: f64 = fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        uptime * hz as f64 >= (start_ticks(second) + hz + 1) as f64
    });
    assert!(aged, "the second run never got older than the interval");
    let killed_at = Instant::now();
    kill(Pid::from_raw(second as i32), Signal::SIGKILL).unwrap();
    ld.wait_for_pid(label, Some(second));
    assert!(
        killed_at.elapsed() < Duration::from_secs(1),
        "respawned {:?} after the kill, as if throttled",
        killed_at.elapsed()
    );
    assert_eq!(ld.print(label).runs(), 3);
}
