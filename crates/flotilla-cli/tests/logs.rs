//! `flotilla logs` on real components (`flotilla-testkit` services on 127.0.0.1): several
//! logs interleaved with name prefixes, a stack's, `--timestamps`, `--since`, `-f`, the
//! marker lines written at every start and stop; and readiness probing that does not
//! flood a loading server's log.

mod common;

use common::Workspace;
use flotilla_testkit::{free_port, wait_until};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DEADLINE: Duration = Duration::from_secs(20);

/// A temp dir with an inventory of testkit services and its own state dir; kills every
/// process a service wrote into its pid file on drop.
struct Fleet {
    ws: Workspace,
    state: PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.ws.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "pid") {
                if let Some(pid) = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                {
                    let pid = nix::unistd::Pid::from_raw(pid);
                    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
    }
}

impl Fleet {
    /// `services`: (name, extra testkit flags, depends_on); `extra`: appended TOML.
    fn new(services: &[(&str, &[&str], &[&str])], extra: &str) -> Fleet {
        let ws = Workspace::new();
        let state = ws.path().join("state");
        let bin = flotilla_testkit::binary();
        let mut toml = String::new();
        for (name, flags, deps) in services {
            let port = free_port();
            let mut args = vec![
                bin.display().to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--pid-file".into(),
                ws.path().join(format!("{name}.pid")).display().to_string(),
                "--ready-file".into(),
                ws.path()
                    .join(format!("{name}.ready"))
                    .display()
                    .to_string(),
            ];
            args.extend(flags.iter().map(|f| f.to_string()));
            let quoted = |v: &[String]| {
                v.iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let deps: Vec<String> = deps.iter().map(|d| d.to_string()).collect();
            toml.push_str(&format!(
                "[components.{name}]\ncommand = [{}]\nendpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"100ms\" }}\n\
                 stop = {{ grace_period = \"2s\" }}\ndepends_on = [{}]\n\n",
                quoted(&args),
                quoted(&deps),
            ));
        }
        toml.push_str(extra);
        ws.write("flotilla.toml", &toml);
        Fleet { ws, state }
    }

    fn run(&self, args: &[&str]) -> common::Run {
        common::run_with_env(
            self.ws.path(),
            args,
            &[("FLOTILLA_STATE_DIR", self.state.to_str().unwrap())],
        )
    }

    /// Runs and asserts exit 0; the run.
    fn ok(&self, args: &[&str]) -> common::Run {
        let run = self.run(args);
        assert_eq!(run.code, 0, "{args:?}\n{}\n{}", run.stdout, run.stderr);
        run
    }

    fn pid(&self, name: &str) -> u32 {
        std::fs::read_to_string(self.ws.path().join(format!("{name}.pid")))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    /// When the service began listening (ms since the epoch), from its ready file.
    fn listened_at_ms(&self, name: &str) -> f64 {
        let ns: u128 = std::fs::read_to_string(self.ws.path().join(format!("{name}.ready")))
            .expect("ready file")
            .trim()
            .parse()
            .expect("timestamp");
        ns as f64 / 1e6
    }

    /// Waits until `flotilla logs ARGS` prints a line containing every one of `needles`
    /// (each in some line); returns the output.
    fn logs_until(&self, args: &[&str], needles: &[&str]) -> String {
        let mut all = vec!["logs"];
        all.extend_from_slice(args);
        let mut last = String::new();
        let found = wait_until(DEADLINE, || {
            last = self.ok(&all).stdout;
            needles.iter().all(|n| last.contains(n))
        });
        assert!(found, "flotilla {all:?} never showed {needles:?}:\n{last}");
        last
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The time in a marker line (`--- flotilla <time>: … ---`), in ms since the epoch.
fn marker_ms(line: &str) -> u64 {
    let stamp = line
        .split("--- flotilla ")
        .nth(1)
        .and_then(|r| r.split(": ").next())
        .unwrap_or_else(|| panic!("not a marker: {line}"));
    humantime::parse_rfc3339(stamp)
        .unwrap_or_else(|e| panic!("{stamp}: {e}"))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn several_components_and_a_stack_interleave_with_prefixes_and_markers() {
    let f = Fleet::new(
        &[
            ("llm", &["--log-line", "hello from llm"], &[]),
            ("proxy", &["--log-line", "hello from proxy"], &["llm"]),
        ],
        "[stacks.chat]\ncomponents = [\"proxy\"]\n",
    );
    f.ok(&["up", "chat"]);
    let (llm, proxy) = (f.pid("llm"), f.pid("proxy"));
    let out = f.logs_until(
        &["llm", "proxy"],
        &["llm   | hello from llm", "proxy | hello from proxy"],
    );
    for line in out.lines() {
        assert!(
            line.starts_with("llm   | ") || line.starts_with("proxy | "),
            "no prefix: {line}\n{out}"
        );
    }
    // The marker written when each started, llm's first (it started first).
    let started = |name: &str, pid: u32| {
        let prefix = format!("{name:<5} | --- flotilla ");
        let tail = format!(": started pid {pid} (op-");
        out.lines()
            .position(|l| l.starts_with(&prefix) && l.contains(&tail) && l.ends_with(") ---"))
            .unwrap_or_else(|| panic!("no start marker of {name} (pid {pid}):\n{out}"))
    };
    assert!(started("llm", llm) < started("proxy", proxy), "{out}");
    // Time order across the two logs: marker times never decrease down the output.
    let times: Vec<u64> = out
        .lines()
        .filter(|l| l.contains("| --- flotilla "))
        .map(marker_ms)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{out}");

    // The stack stands for its members and what they depend on; no target: everything.
    let stack = f.ok(&["logs", "chat"]).stdout;
    assert!(stack.contains("llm   | hello from llm"), "{stack}");
    assert!(stack.contains("proxy | hello from proxy"), "{stack}");
    let every = f.ok(&["logs"]).stdout;
    assert!(every.contains("llm   | hello from llm"), "{every}");
    // One component: its lines as they are, and only its own (not what it depends
    // on: proxy depends on llm).
    let one = f.ok(&["logs", "llm"]).stdout;
    assert!(one.lines().any(|l| l == "hello from llm"), "{one}");
    let own = f.ok(&["logs", "proxy"]).stdout;
    assert!(own.lines().any(|l| l == "hello from proxy"), "{own}");
    assert!(!own.contains("hello from llm"), "{own}");

    // --timestamps: an RFC 3339 time after the prefix; -n per log.
    let stamped = f
        .ok(&["logs", "llm", "proxy", "--timestamps", "-n", "2"])
        .stdout;
    assert_eq!(stamped.lines().count(), 4, "{stamped}");
    for line in stamped.lines() {
        let stamp = line[8..].split(' ').next().unwrap();
        assert!(
            stamp.ends_with('Z') && humantime::parse_rfc3339(stamp).is_ok(),
            "{line}"
        );
    }

    // Stopping writes a marker after the component's last words.
    f.ok(&["down", "chat"]);
    let out = f.logs_until(&["llm", "proxy"], &["llm   | SIGTERM", "proxy | SIGTERM"]);
    for (name, pid) in [("llm  ", llm), ("proxy", proxy)] {
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("{name} | ")))
            .collect();
        let last = lines.last().unwrap();
        assert!(
            last.contains(&format!(": stopped pid {pid} with SIGTERM in "))
                && last.ends_with(") ---"),
            "{out}"
        );
        let sigterm = lines.iter().position(|l| l.ends_with("| SIGTERM")).unwrap();
        assert!(sigterm < lines.len() - 1, "{out}");
    }
    // proxy stopped first (reverse order), and its marker says so.
    let stops: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(": stopped pid"))
        .collect();
    assert!(stops[0].starts_with("proxy"), "{out}");

    let run = f.run(&["logs", "lmm"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("did you mean `llm`?"), "{}", run.stderr);
}

#[test]
fn since_leaves_out_what_is_older_and_takes_durations() {
    let f = Fleet::new(&[("svc", &[], &[])], "");
    f.ok(&["start", "svc"]);
    let first = f.pid("svc");
    f.ok(&["stop", "svc"]);
    let log = f.ok(&["logs", "svc", "-n", "1000"]).stdout;
    let stopped = log
        .lines()
        .rfind(|l| l.contains(": stopped pid"))
        .expect("stop marker");
    let since_ms = marker_ms(stopped) + 1;
    let since =
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(since_ms)).to_string();
    assert!(wait_until(DEADLINE, || now_ms() > since_ms));
    f.ok(&["start", "svc"]);
    let second = f.pid("svc");
    assert_ne!(first, second);

    let out = f.ok(&["logs", "svc", "--since", &since]).stdout;
    assert!(
        out.contains(&format!(": started pid {second} (op-")),
        "the second run is shown:\n{out}"
    );
    assert!(
        !out.contains(&format!("pid {first}")) && !out.contains(&format!("pid={first}")),
        "the first run is older than --since:\n{out}"
    );
    let all = f.ok(&["logs", "svc", "--since", "1h"]).stdout;
    assert!(all.contains(&format!("STARTED pid={first} ")), "{all}");
    assert!(all.contains(&format!("STARTED pid={second} ")), "{all}");
    assert!(
        f.ok(&["logs", "svc", "--since", "1h", "-n", "1"])
            .stdout
            .lines()
            .count()
            == 1
    );
    let future = f
        .ok(&["logs", "svc", "--since", "2999-01-01T00:00:00Z"])
        .stdout;
    assert_eq!(future, "");
    let bad = f.run(&["logs", "svc", "--since", "yesterday"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("RFC 3339"), "{}", bad.stderr);
    f.ok(&["stop", "svc"]);
}

#[test]
fn follow_prints_what_every_component_writes_with_prefixes() {
    let f = Fleet::new(
        &[("ticker", &["--log-every", "50"], &[]), ("quiet", &[], &[])],
        "",
    );
    f.ok(&["start", "ticker"]);
    f.ok(&["start", "quiet"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["logs", "ticker", "quiet", "-f", "-n", "0"])
        .current_dir(f.ws.path())
        .env("FLOTILLA_STATE_DIR", &f.state)
        .env("NO_COLOR", "1")
        .env_remove("FLOTILLA_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = common::lines_of(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    let mut wait_for = |what: &dyn Fn(&str) -> bool| {
        let end = std::time::Instant::now() + DEADLINE;
        while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let hit = what(&line);
                    seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("not seen while following:\n{}", seen.join("\n"));
    };
    wait_for(&|l| l.starts_with("ticker | TICK "));
    let quiet = f.pid("quiet");
    f.ok(&["stop", "quiet"]);
    wait_for(&|l| {
        l.starts_with("quiet  | --- flotilla ") && l.contains(&format!("stopped pid {quiet} "))
    });
    let _ = child.kill();
    let _ = child.wait();
    f.ok(&["stop", "ticker"]);
}

/// During a 5 s simulated model load (503 from the moment it listens), the server
/// receives at most 60 readiness requests, and the 200 is noticed promptly.
#[test]
fn readiness_probing_does_not_flood_a_loading_server() {
    let ws_count = tempfile::tempdir().unwrap();
    let count = ws_count.path().join("requests");
    let count_arg = count.display().to_string();
    let f = Fleet::new(
        &[(
            "llm",
            &[
                "--status-before-ready",
                "503",
                "--ready-after",
                "5000",
                "--count-requests",
                &count_arg,
            ],
            &[],
        )],
        "",
    );
    let run = f.ok(&["start", "llm", "--json"]);
    let report = run.json();
    let step = &report["report"]["steps"][0];
    assert_eq!(step["outcome"], "succeeded", "{step:#}");
    let probe = &step["evidence"]["probe"];
    let seen = probe["checked_at_ms"].as_f64().unwrap() + probe["latency_ms"].as_f64().unwrap();
    let turned = f.listened_at_ms("llm") + 5000.0;
    let requests: u64 = std::fs::read_to_string(&count)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "{requests} readiness requests during the 5 s load; 200 noticed {:.0} ms after it turned",
        seen - turned
    );
    assert!(requests <= 60, "{requests} readiness requests in 5 s");
    assert!(requests >= 5, "{requests}: it was probed");
    assert!(seen >= turned, "ready before it turned? {seen} < {turned}");
    assert!(
        seen - turned < 300.0,
        "noticed {:.0} ms late",
        seen - turned
    );
    f.ok(&["stop", "llm"]);
}

/// Every line carries the time it was written (the log writer stamps it as it reads
/// the component's output), so `--timestamps` and `--since` are true to the line for
/// a server that has been up for a while; the start marker comes before the
/// process's first line, and a marker says how it ended when it dies.
#[test]
fn each_line_keeps_its_own_time_and_the_end_of_a_process_is_marked() {
    let f = Fleet::new(&[("ticker", &["--log-every", "200"], &[])], "");
    f.ok(&["start", "ticker"]);
    let pid = f.pid("ticker");
    let out = f.logs_until(&["ticker", "-n", "1000", "--timestamps"], &["TICK 6"]);
    let timed: Vec<(u64, &str)> = out
        .lines()
        .map(|l| {
            let (stamp, text) = l.split_once(' ').unwrap_or_else(|| panic!("{l}"));
            let at = humantime::parse_rfc3339(stamp)
                .unwrap_or_else(|e| panic!("{l}: {e}"))
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            (at, text)
        })
        .collect();
    // The start marker, then the process's first line (written before it could be
    // read), then ticks ~200 ms apart: each has its own time, in order.
    let started = timed
        .iter()
        .position(|(_, t)| t.contains(&format!(": started pid {pid} (op-")))
        .unwrap_or_else(|| panic!("no start marker:\n{out}"));
    let first = timed
        .iter()
        .position(|(_, t)| t.starts_with(&format!("STARTED pid={pid} ")))
        .unwrap_or_else(|| panic!("no first line:\n{out}"));
    assert!(started < first, "the start marker comes first:\n{out}");
    let ticks: Vec<u64> = timed
        .iter()
        .filter(|(_, t)| t.starts_with("TICK "))
        .map(|(at, _)| *at)
        .collect();
    assert!(ticks.windows(2).all(|w| w[0] <= w[1]), "{out}");
    let span = ticks[ticks.len() - 1] - ticks[0];
    assert!(
        span >= 150 * (ticks.len() as u64 - 1),
        "ticks 200 ms apart are stamped {span} ms apart in all:\n{out}"
    );
    // --since a tick's time + 1 ms: that tick and the ones before are left out,
    // the later ones shown.
    let (at, text) = timed
        .iter()
        .find(|(_, t)| *t == "TICK 3")
        .copied()
        .unwrap_or_else(|| panic!("{out}"));
    let since =
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at + 1)).to_string();
    let after = f.ok(&["logs", "ticker", "--since", &since]).stdout;
    assert!(!after.lines().any(|l| l == text), "{since}:\n{after}");
    assert!(!after.contains("STARTED pid="), "{since}:\n{after}");
    assert!(after.lines().any(|l| l == "TICK 5"), "{since}:\n{after}");

    // Killed behind Flotilla's back: the log says how it ended.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = f.logs_until(
        &["ticker"],
        &[&format!("pid {pid} ended: killed by SIGKILL")],
    );
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("--- flotilla ")
            && last.ends_with(&format!("pid {pid} ended: killed by SIGKILL ---")),
        "the end marker comes after its last line:\n{out}"
    );
    // And status names how it ended, from that marker.
    let status = f.run(&["status", "ticker"]);
    assert!(
        status
            .stdout
            .contains(&format!("pid {pid} is gone (killed by SIGKILL at ")),
        "{}",
        status.stdout
    );
}

/// What a component writes is in its log when written: a line without its end
/// (a prompt, a progress bar) as a piece that `logs` shows; a log that outgrows its
/// cap is rotated while the component runs, not only when something starts; and
/// `logs | head` ends quietly.
#[test]
fn unfinished_lines_show_at_once_and_a_growing_log_is_rotated_while_it_runs() {
    let f = Fleet::new(
        &[],
        "[components.nonl]\ncommand = [\"sh\", \"-c\", \"printf 'no newline here'; sleep 600\"]\n\
         [components.flood]\ncommand = [\"sh\", \"-c\", \"yes flooding-the-log | head -c 12000000; sleep 600\"]\n",
    );
    let _stop = StopOnDrop(&f, &["nonl", "flood"]);
    f.ok(&["start", "nonl"]);
    f.logs_until(&["nonl"], &["no newline here"]);
    f.ok(&["start", "flood"]);
    let log = common::project_dir(&f.state, f.ws.path()).join("logs/flood.log");
    let rotated = flotilla_exec::logs::rotated_path(&log, 1);
    let mut sizes = (0, 0);
    assert!(
        wait_until(DEADLINE, || {
            sizes = (
                std::fs::metadata(&rotated).map(|m| m.len()).unwrap_or(0),
                std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0),
            );
            sizes.0 > 10 << 20
        }),
        "never rotated while running: {sizes:?} ({})",
        log.display()
    );
    // `logs | head -1`: the pipe closes early; no error.
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["logs", "flood", "-n", "200000"])
        .current_dir(f.ws.path())
        .env("FLOTILLA_STATE_DIR", &f.state)
        .env_remove("FLOTILLA_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Broken pipe"));
}

/// Stops the named components when dropped.
struct StopOnDrop<'a>(&'a Fleet, &'a [&'a str]);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        for n in self.1 {
            let _ = self.0.run(&["stop", n]);
        }
    }
}
