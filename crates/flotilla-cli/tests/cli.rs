//! Command-line habits, run as a user would: global options after the subcommand,
//! unknown targets named with the verb typed (what exists, the closest name), `up`
//! and `down` without a stack, `ps`, `status --watch --interval`, and the man page.

mod common;

use common::Workspace;
use flotilla_testkit::{free_port, wait_until};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Components that are never started here (templates; nothing needs to exist).
const INVENTORY: &str = r#"
[components.llm]
template = "llama-server"
params = { model = "m.gguf", port = 18080 }

[components.proxy]
template = "litellm"
params = { config = "litellm.yaml", port = 14000 }
connections = { chat = "llm.http" }

[components.vectors]
owner = "external"
endpoints = { http = "http://127.0.0.1:6333" }

[stacks.chat]
components = ["proxy", "vectors"]
"#;

fn ws() -> Workspace {
    let ws = Workspace::new();
    ws.write("flotilla.toml", INVENTORY);
    ws
}

#[test]
fn global_options_are_accepted_after_the_subcommand() {
    let w = Workspace::new();
    w.write("conf/inv.toml", INVENTORY);
    let state = w.path().join("elsewhere");
    let state = state.to_str().unwrap();
    // After the subcommand, and after its own arguments; the command line beats
    // FLOTILLA_FILE.
    let env = [("FLOTILLA_FILE", "/nonexistent/flotilla.toml")];
    for args in [
        &["topology", "-f", "conf/inv.toml"][..],
        &["topology", "--file=conf/inv.toml", "--json"],
        &["validate", "--file", "conf/inv.toml"],
        &[
            "plan",
            "up",
            "chat",
            "-f",
            "conf/inv.toml",
            "--state-dir",
            state,
            "--host-timeout",
            "2s",
            "--ssh-persist",
            "1s",
            "-p",
            "demo",
        ],
        &["host", "list", "-f", "conf/inv.toml", "--project", "demo"],
    ] {
        let run = common::run_with_env(w.path(), args, &env);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    }
    // Before the subcommand, as always.
    let run = common::run_with_env(w.path(), &["-f", "conf/inv.toml", "topology"], &env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // FLOTILLA_PROJECT is -p.
    let run = common::run_with_env(
        w.path(),
        &["topology", "-f", "conf/inv.toml"],
        &[("FLOTILLA_PROJECT", "demo")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // A global option is documented on every subcommand's help.
    let run = w.run(&["ps", "--help"]);
    for opt in [
        "-f, --file",
        "-p, --project",
        "--state-dir",
        "FLOTILLA_PROJECT",
    ] {
        assert!(run.stdout.contains(opt), "{opt}: {}", run.stdout);
    }
    // A subcommand's own options come first, the global ones after them.
    let own = run.stdout.find("--json").expect("ps's own option");
    let global = run
        .stdout
        .find("Global options:")
        .expect("a global section");
    assert!(
        own < global && global < run.stdout.find("--state-dir").unwrap(),
        "{}",
        run.stdout
    );
    // `logs` keeps `-f` for --follow; the inventory is `--file` there.
    let help = w.run(&["logs", "--help"]).stdout;
    assert!(help.contains("-f, --follow"), "{help}");
    assert!(help.contains("    --file <FILE>"), "{help}");
    let run = common::run_with_env(w.path(), &["logs", "llm", "--file", "conf/inv.toml"], &env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("no log yet for `llm`"),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_targets_name_the_verb_list_what_exists_and_suggest() {
    let w = ws();
    let components = "\n  components: llm, proxy, vectors\n";
    let stacks = "\n  stacks: chat (proxy, vectors)";
    for (args, first) in [
        (
            &["up", "chta"][..],
            "error: `chta` is not a stack (up takes a stack); did you mean `chat`?",
        ),
        (
            &["down", "chta"],
            "error: `chta` is not a stack (down takes a stack); did you mean `chat`?",
        ),
        (
            &["plan", "up", "chta"],
            "error: `chta` is not a stack (plan up takes a stack); did you mean `chat`?",
        ),
        (
            &["start", "lmm"],
            "error: `lmm` is neither a component nor a stack (start takes a component or a stack); did you mean `llm`?",
        ),
        (
            &["stop", "lmm"],
            "error: `lmm` is neither a component nor a stack (stop takes a component or a stack); did you mean `llm`?",
        ),
        (
            &["restart", "prxy"],
            "error: `prxy` is neither a component nor a stack (restart takes a component or a stack); did you mean `proxy`?",
        ),
        (
            &["status", "vector"],
            "error: `vector` is neither a component nor a stack (status takes a component or a stack); did you mean `vectors`?",
        ),
        (
            &["ps", "lmm"],
            "error: `lmm` is neither a component nor a stack (ps takes a component or a stack); did you mean `llm`?",
        ),
        (
            &["plan", "restart", "zzz"],
            "error: `zzz` is neither a component nor a stack (plan restart takes a component or a stack)\n",
        ),
    ] {
        let run = w.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.starts_with(first), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(stacks), "{args:?}: {}", run.stderr);
        // A verb that takes only stacks lists only stacks.
        let takes_stack = args.contains(&"up") || args.contains(&"down");
        assert_eq!(
            run.stderr.contains(components),
            !takes_stack,
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(run.stdout, "", "{args:?}");
    }
    // Nothing was locked, journaled or created for a usage error.
    assert!(!w.path().join(".flotilla-state").exists());

    // A component where a stack is wanted says what to type instead.
    for (args, says) in [
        (
            &["up", "llm"][..],
            "(up takes a stack; for a component: flotilla start llm)",
        ),
        (
            &["down", "llm"],
            "(down takes a stack; for a component: flotilla stop llm)",
        ),
        (
            &["plan", "down", "llm"],
            "(plan down takes a stack; for a component: flotilla plan stop llm)",
        ),
    ] {
        let run = w.run(args);
        assert_eq!(run.code, 2, "{args:?}");
        assert!(
            run.stderr
                .starts_with(&format!("error: `llm` is a component, not a stack {says}")),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(stacks), "{}", run.stderr);
    }

    // --json still prints the planner's refusal shape.
    for args in [
        &["plan", "start", "lmm", "--json"][..],
        &["start", "lmm", "--json"],
    ] {
        let run = w.run(args);
        assert_eq!(run.code, 2, "{args:?}");
        let reason = &run.json()["refusal"]["reasons"][0];
        assert_eq!(reason["kind"], "unknown-target", "{args:?}");
        assert_eq!(reason["target"], "lmm");
        assert_eq!(reason["suggestion"], "llm");
    }
}

#[test]
fn up_and_down_without_a_stack_in_an_inventory_without_stacks_say_what_to_do() {
    let w = Workspace::new();
    w.write(
        "flotilla.toml",
        "[components.db]\nowner = \"external\"\nendpoints = { tcp = \"127.0.0.1:5432\" }\n",
    );
    for verb in ["up", "down"] {
        let run = w.run(&[verb]);
        assert_eq!(run.code, 2, "{verb}: {}", run.stderr);
        assert!(
            run.stderr.contains("and the inventory declares none"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains(&format!("usage: flotilla {verb} [STACK]")),
            "{}",
            run.stderr
        );
    }
}

/// A directory with an inventory of testkit services and a guard that kills what they
/// wrote into their pid files.
struct Running {
    ws: Workspace,
    state: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        for name in ["api", "idle"] {
            if let Some(pid) = self.pid(name) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

impl Running {
    fn run(&self, args: &[&str]) -> common::Run {
        common::run_with_env(
            self.ws.path(),
            args,
            &[("FLOTILLA_STATE_DIR", self.state.to_str().unwrap())],
        )
    }

    fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.ws.path().join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

#[test]
fn ps_is_compact_status() {
    let ws = Workspace::new();
    let state = ws.path().join("state");
    let bin = flotilla_testkit::binary();
    let (port, admin) = (free_port(), free_port());
    let dir = ws.path().display().to_string();
    ws.write(
        "flotilla.toml",
        &format!(
            r#"
[components.api]
command = ["{bin}", "--listen", "127.0.0.1:{port}", "--pid-file", "{dir}/api.pid"]
endpoints = {{ http = "http://127.0.0.1:{port}", admin = "http://127.0.0.1:{admin}" }}
readiness = {{ http = {{ endpoint = "http", path = "/health" }}, period = "100ms" }}

[components.idle]
command = ["{bin}", "--pid-file", "{dir}/idle.pid"]
depends_on = ["api"]

[stacks.s]
components = ["idle"]
"#,
            bin = bin.display()
        ),
    );
    let f = Running { ws, state };
    let ports = format!("{},{}", port.min(admin), port.max(admin));

    let run = f.run(&["ps"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATE", "HEALTH", "PID", "PORTS", "UPTIME", "RESTARTS"],
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["api", "stopped", "n/a", "-", ports.as_str(), "-", "-"],
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["idle", "stopped", "n/a", "-", "-", "-", "-"],
        "{}",
        run.stdout
    );

    let up = f.run(&["up", "s"]);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let api = f.pid("api").expect("api pid");
    let run = f.run(&["ps"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.starts_with("NAME  STATE    HEALTH   PID"),
        "{}",
        run.stdout
    );
    let row: Vec<&str> = run
        .stdout
        .lines()
        .find(|l| l.starts_with("api "))
        .expect("api row")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..5],
        ["api", "running", "healthy", &api.to_string(), &ports]
    );
    // Uptime like `status` ages (`850ms`, `3s`), no restart count invented.
    assert!(
        row[5].ends_with("ms") || row[5].ends_with('s'),
        "{}",
        run.stdout
    );
    assert_eq!(row[6], "-", "{}", run.stdout);

    // A target: it and what it depends on; JSON.
    let run = f.run(&["ps", "api", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let j = run.json();
    let c = j["components"].as_array().unwrap();
    assert_eq!(c.len(), 1, "{j}");
    assert_eq!(c[0]["name"], "api");
    assert_eq!(c[0]["state"], "running");
    assert_eq!(c[0]["pid"], api);
    assert_eq!(
        c[0]["ports"],
        serde_json::json!([port.min(admin), port.max(admin)])
    );
    assert!(c[0]["uptime_ms"].as_i64().unwrap() >= 0, "{j}");
    assert_eq!(c[0]["restarts"], serde_json::Value::Null);
    assert!(j["observed_at_ms"].as_i64().unwrap() > 0);
    let all = f.run(&["ps", "s", "--json"]).json();
    assert_eq!(all["components"].as_array().unwrap().len(), 2, "{all}");

    // Exit status like `status`: 1 once something is not as desired.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(api as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(wait_until(Duration::from_secs(10), || {
        !flotilla_testkit::alive(api)
    }));
    let run = f.run(&["ps"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert_eq!(f.run(&["status"]).code, 1);
    assert!(
        run.stdout.contains("not as desired or healthy: api"),
        "{}",
        run.stdout
    );
    let down = f.run(&["down", "s"]);
    assert_eq!(down.code, 0, "{}", down.stderr);
}

/// `HH:MM:SS` → seconds of the day.
fn seconds_of_day(hms: &str) -> Option<i64> {
    let parts: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts[..] {
        [h, m, s] if hms.len() == 8 && h < 24 && m < 60 && s < 60 => Some(h * 3600 + m * 60 + s),
        _ => None,
    }
}

#[test]
fn status_watch_shows_the_time_and_takes_an_interval() {
    let w = ws();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["status", "--watch", "--interval", "200ms"])
        .current_dir(w.path())
        .env_remove("FLOTILLA_FILE")
        .env("FLOTILLA_STATE_DIR", w.path().join(".flotilla-state"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flotilla");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = Arc::clone(&lines);
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                lines.lock().unwrap().push(l);
            }
        })
    };
    let headers = || -> Vec<String> {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("status at "))
            .cloned()
            .collect()
    };
    let tables = || {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("COMPONENT"))
            .count()
    };
    // Three refreshes seen whole (a header is read before its table).
    let refreshed = wait_until(Duration::from_secs(20), || {
        headers().len() >= 3 && tables() >= 3
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    assert!(refreshed, "{:?}", lines.lock().unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        % 86_400;
    for h in headers() {
        let rest = h.strip_prefix("status at ").unwrap();
        let (time, tail) = rest.split_at(8);
        assert_eq!(tail, " UTC, every 200ms (Ctrl-C to stop)", "{h}");
        let at = seconds_of_day(time).unwrap_or_else(|| panic!("{h}"));
        let skew = (now - at).rem_euclid(86_400);
        assert!(skew <= 60, "{h} vs now {now}");
    }
    let all = lines.lock().unwrap().clone();
    let table = all.iter().filter(|l| l.starts_with("COMPONENT")).count();
    assert!(table >= 3, "{all:?}");

    let run = w.run(&["status", "--watch", "--interval", "50ms"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("at least 100ms"), "{}", run.stderr);
    let run = w.run(&["status", "--interval", "1s"]);
    assert_eq!(run.code, 2, "--interval needs --watch");
}

/// The visible subcommands, as `flotilla --help` lists them.
fn subcommands(w: &Workspace) -> Vec<String> {
    let help = w.run(&["--help"]).stdout;
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A name is indented by two spaces; a wrapped description by more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn man_page_covers_every_subcommand() {
    let w = Workspace::new();
    let names = subcommands(&w);
    assert!(names.len() >= 15, "{names:?}");
    for n in ["ps", "man", "status", "up", "logs"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    let run = w.run(&["man"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with(".TH flotilla 1 "), "{}", run.stdout);
    assert!(run.stdout.contains(".SH SYNOPSIS"), "{}", run.stdout);
    // The main page also has the inventory's shape, examples and files, in that
    // order, before the version.
    let at = |s: &str| {
        run.stdout
            .find(s)
            .unwrap_or_else(|| panic!("{s}:\n{}", run.stdout))
    };
    assert!(
        at(".SH INVENTORY") < at(".SH EXAMPLES")
            && at(".SH EXAMPLES") < at(".SH FILES")
            && at(".SH FILES") < at(".SH VERSION"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("state.db"), "{}", run.stdout);
    for n in &names {
        let entry = format!("flotilla\\-{}(1)", n.replace('-', "\\-"));
        assert!(run.stdout.contains(&entry), "{entry}:\n{}", run.stdout);
    }
    // A subcommand's own page, also nested.
    let run = w.run(&["man", "ps"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(".TH flotilla-ps 1 "),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\\-\\-json"), "{}", run.stdout);
    let run = w.run(&["man", "host", "check"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(".TH flotilla-host-check 1 "),
        "{}",
        run.stdout
    );
    let run = w.run(&["man", "hots"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("did you mean `host`?"),
        "{}",
        run.stderr
    );
    // --dir writes every page, for `man` to find.
    let dir = w.path().join("man1");
    let run = w.run(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for n in
        std::iter::once("flotilla".to_string()).chain(names.iter().map(|n| format!("flotilla-{n}")))
    {
        let page = std::fs::read_to_string(dir.join(format!("{n}.1")))
            .unwrap_or_else(|e| panic!("{n}.1: {e}"));
        assert!(page.starts_with(&format!(".TH {n} 1 ")), "{n}: {page}");
    }
    assert!(dir.join("flotilla-host-check.1").exists());
}
