//! Status tells what the journal knows about the last operation on each component:
//! a failed `up` leaves `attention` with its evidence until an operation on the
//! component succeeds, and a component an operation in progress is starting is
//! `starting` (health `unknown`), never `unhealthy`. The real binary, real
//! `flotilla-testkit` services on 127.0.0.1.

mod common;

use common::Workspace;
use flotilla_testkit::{free_port, wait_until};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills every process a service wrote into a `*.pid` file in the workspace.
struct Services(Workspace);

impl Drop for Services {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.0.path())
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

/// A testkit component on `port` with extra `flags` and tcp readiness.
fn component(ws: &Workspace, name: &str, port: u16, flags: &[&str], deps: &[&str]) -> String {
    let bin = flotilla_testkit::binary();
    let pid_file = ws.path().join(format!("{name}.pid"));
    let mut args = vec![
        format!("{:?}", bin.display().to_string()),
        "\"--listen\"".into(),
        format!("\"127.0.0.1:{port}\""),
        "\"--pid-file\"".into(),
        format!("{:?}", pid_file.display().to_string()),
    ];
    args.extend(flags.iter().map(|f| format!("\"{f}\"")));
    let deps: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
    format!(
        "[components.{name}]\ncommand = [{}]\nendpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
         readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"100ms\" }}\n\
         stop = {{ grace_period = \"2s\" }}\ndepends_on = [{}]\n\n",
        args.join(", "),
        deps.join(", ")
    )
}

fn of<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {status}"))
}

/// Every `saw` of a component's evidence, one per line.
fn evidence(c: &serde_json::Value) -> String {
    c["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .map(|e| e["saw"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_failed_up_is_attention_until_an_operation_on_it_succeeds() {
    let s = Services(Workspace::new());
    let ws = &s.0;
    let (db, api) = (free_port(), free_port());
    let stack = "[stacks.chat]\ncomponents = [\"db\", \"api\"]\n";
    // `api` never passes readiness (503 for a minute).
    ws.write(
        "flotilla.toml",
        &format!(
            "{}{}{stack}",
            component(ws, "db", db, &[], &[]),
            component(
                ws,
                "api",
                api,
                &["--status-before-ready", "503", "--ready-after", "60000"],
                &["db"]
            )
        ),
    );
    let up = ws.run(&["up", "chat", "--timeout", "1s"]);
    assert_eq!(up.code, 1, "up fails:\n{}\n{}", up.stdout, up.stderr);

    let run = ws.run(&["status", "--json"]);
    assert_eq!(
        run.code, 1,
        "status exits 1 after a failed up:\n{}",
        run.stdout
    );
    let status = run.json();
    let api_s = of(&status, "api");
    assert_eq!(api_s["lifecycle"], "stopped", "{api_s}");
    assert_eq!(api_s["condition"], "attention", "{api_s}");
    let saw = evidence(api_s);
    assert!(
        saw.contains("up chat")
            && saw.contains("failed at this component: ")
            && saw.contains("op-"),
        "api's evidence names the operation and where it failed:\n{saw}"
    );
    let db_s = of(&status, "db");
    assert_eq!(db_s["condition"], "attention", "{db_s}");
    assert!(
        evidence(db_s).contains("failed at api: "),
        "db's evidence says where the operation failed:\n{}",
        evidence(db_s)
    );
    // The text form shows it too.
    let text = ws.run(&["status"]);
    assert_eq!(text.code, 1);
    assert!(
        text.stdout.contains("failed at this component"),
        "{}",
        text.stdout
    );

    // Fixed: `api` is ready at once; the next successful `up` clears the attention.
    ws.write(
        "flotilla.toml",
        &format!(
            "{}{}{stack}",
            component(ws, "db", db, &[], &[]),
            component(ws, "api", api, &[], &["db"])
        ),
    );
    let up = ws.run(&["up", "chat", "--timeout", "20s"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let run = ws.run(&["status", "--json"]);
    assert_eq!(run.code, 0, "status is ok again:\n{}", run.stdout);
    let status = run.json();
    for name in ["db", "api"] {
        let c = of(&status, name);
        assert_eq!(c["condition"], "ok", "{c}");
        assert!(!evidence(c).contains("failed"), "{c}");
    }
    let down = ws.run(&["down", "chat"]);
    assert_eq!(down.code, 0, "{}", down.stderr);
    // A successful `down` is an operation on them too: stopped as desired, all ok.
    assert_eq!(ws.run(&["status"]).code, 0);
}

/// Kills the background `up` if the test fails before it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_component_being_started_is_starting_not_unhealthy() {
    let s = Services(Workspace::new());
    let ws = &s.0;
    let port = free_port();
    ws.write(
        "flotilla.toml",
        &component(ws, "slow", port, &["--listen-after", "3000"], &[]),
    );
    let up = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["start", "slow", "--timeout", "30s"])
        .current_dir(ws.path())
        .env_remove("FLOTILLA_FILE")
        .env("FLOTILLA_STATE_DIR", ws.path().join(".flotilla-state"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flotilla start");
    let mut up = Reaped(up);

    // Poll until status sees its process running but not ready yet.
    let mut seen = serde_json::Value::Null;
    let found = wait_until(Duration::from_secs(20), || {
        let status = ws.run(&["status", "--json"]).json();
        let c = of(&status, "slow").clone();
        assert_ne!(c["health"], "unhealthy", "{c}");
        if up.0.try_wait().expect("wait").is_some() {
            panic!("`start` ended before status saw it starting: {c}");
        }
        let starting = c["lifecycle"] == "starting" && c["runtime_identity"].is_object();
        seen = c;
        starting
    });
    assert!(found, "never saw `starting`: {seen}");
    assert_eq!(seen["health"], "unknown", "{seen}");
    assert_eq!(seen["condition"], "ok", "{seen}");
    let saw = evidence(&seen);
    assert!(
        saw.contains("readiness not passed yet; op-") && saw.contains("is starting it"),
        "{saw}"
    );

    let mut code = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            code = up.0.try_wait().ok().flatten();
            code.is_some()
        }),
        "start finishes"
    );
    assert!(code.is_some_and(|c| c.success()), "start succeeds");
    let run = ws.run(&["status", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let c = of(&run.json(), "slow").clone();
    assert_eq!(c["lifecycle"], "running", "{c}");
    assert_eq!(c["health"], "healthy", "{c}");
    assert_eq!(ws.run(&["stop", "slow"]).code, 0);
}

/// A small HTTP server in Python, as a script file the interpreter runs.
const SERVER_PY: &str = r#"import http.server, sys
VERSION = 1
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[test]
fn editing_an_interpreted_program_is_stale_runtime_until_restart() {
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let ws = Workspace::new();
    let port = free_port();
    ws.write("app/server.py", SERVER_PY);
    ws.write(
        "flotilla.toml",
        &format!(
            "[components.web]\ncommand = [\"python3\", \"-u\", \"server.py\", \"{port}\"]\ncwd = \"app\"\n\
             endpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n"
        ),
    );
    let up = ws.run(&["start", "web", "--timeout", "20s"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let status = ws.run(&["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stdout);
    assert_eq!(of(&status.json(), "web")["condition"], "ok");

    // Edit the script on disk: what runs is no longer what is there.
    ws.write(
        "app/server.py",
        &SERVER_PY.replace("VERSION = 1", "VERSION = 2"),
    );
    let run = ws.run(&["status", "--json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let web = of(&run.json(), "web").clone();
    assert_eq!(web["condition"], "stale-runtime", "{web}");
    let saw = evidence(&web);
    assert!(
        saw.contains("script") && saw.contains("server.py") && saw.contains("restart"),
        "the evidence names the file:\n{saw}"
    );

    let restart = ws.run(&["restart", "web", "--timeout", "20s"]);
    assert_eq!(restart.code, 0, "{}\n{}", restart.stdout, restart.stderr);
    let run = ws.run(&["status", "--json"]);
    assert_eq!(run.code, 0, "restart clears it:\n{}", run.stdout);
    assert_eq!(of(&run.json(), "web")["condition"], "ok");
    assert_eq!(ws.run(&["stop", "web"]).code, 0);
}
