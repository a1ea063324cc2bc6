//! `flotilla discover` against real processes on 127.0.0.1: stand-in services started
//! by hand (`flotilla-testkit`) are found with their port, command line and a readiness
//! probe guessed from what answers; what the inventory declares or Flotilla started,
//! and Flotilla itself (an authority), is left out with the reason; a plain TCP listener gets a TCP probe; and the printed
//! proposals, pasted into an inventory, validate.
//!
//! Every run is limited to the test's own ports (`--port`): the machine runs other
//! services (and other tests' services) that must not be asked anything.

mod common;

use common::{lines_of, KillOnDrop, Run, Workspace};
use flotilla_testkit::free_port;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a stand-in service may take to listen.
const DEADLINE: Duration = Duration::from_secs(20);

/// A stand-in service started by hand on 127.0.0.1:`port`, killed when dropped.
struct Service {
    child: Child,
    _guard: KillOnDrop,
    port: u16,
}

impl Service {
    /// `flotilla-testkit --listen 127.0.0.1:PORT ARGS`, once it listens.
    fn start(args: &[&str]) -> Service {
        let port = free_port();
        let mut child = Command::new(flotilla_testkit::binary())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start flotilla-testkit");
        let guard = KillOnDrop(child.id());
        let lines = lines_of(child.stdout.take().expect("its stdout"));
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(l) if l.starts_with("LISTENING ") => break,
                Ok(_) => continue,
                Err(e) => panic!("flotilla-testkit on port {port} did not listen: {e}"),
            }
        }
        Service {
            child,
            _guard: guard,
            port,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn listen(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn testkit() -> String {
    flotilla_testkit::binary().display().to_string()
}

/// A TOML string.
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// `flotilla discover --json --port P…` in `ws`: its report.
fn discover(ws: &Workspace, ports: &[u16]) -> Value {
    let mut args = vec!["discover".to_string(), "--json".into()];
    for p in ports {
        args.extend(["--port".to_string(), p.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = ws.run(&args);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    run.json()
}

/// The finding listening on `port`.
fn finding(report: &Value, port: u16) -> &Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| {
            f["listening"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|a| a.as_str().is_some_and(|a| a.ends_with(&format!(":{port}"))))
            })
        })
        .unwrap_or_else(|| panic!("nothing found on port {port}: {report:#}"))
}

fn validate(ws: &Workspace) -> (Run, Value) {
    let run = ws.run(&["validate", "--json"]);
    let json = run.json();
    (run, json)
}

#[test]
fn a_hand_started_service_is_found_with_its_command_and_a_health_probe_and_its_proposal_validates()
{
    let ws = Workspace::new();
    ws.write(
        "flotilla.toml",
        "[components.other]\ncommand = [\"sleep\", \"600\"]\n",
    );
    let svc = Service::start(&[]);
    let report = discover(&ws, &[svc.port]);
    assert_eq!(report["host"], "local", "{report:#}");
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    let f = finding(&report, svc.port);
    assert_eq!(f["adapter"], "process", "{f:#}");
    assert_eq!(f["name"], "flotilla-testkit", "{f:#}");
    assert_eq!(f["process"]["pid"], svc.pid(), "{f:#}");
    assert_eq!(f["process"]["exe"], testkit().as_str(), "{f:#}");
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(f["process"]["user"], me.as_str(), "{f:#}");
    let started = f["process"]["started"].as_str().expect("a start time");
    assert!(started.len() == 20 && started.ends_with('Z'), "{started}");
    assert_eq!(f["listening"], serde_json::json!([svc.listen()]), "{f:#}");
    let p = &f["proposal"];
    assert_eq!(
        p["command"],
        serde_json::json!([testkit(), "--listen", svc.listen()]),
        "{p:#}"
    );
    assert_eq!(
        p["endpoints"],
        serde_json::json!({ "http": format!("http://127.0.0.1:{}", svc.port) })
    );
    assert_eq!(
        p["readiness"],
        serde_json::json!({ "http": { "endpoint": "http", "path": "/health" } }),
        "{p:#}"
    );
    let evidence = f["answers"][0]["evidence"][0].as_str().unwrap();
    assert!(
        evidence.starts_with(&format!("GET http://127.0.0.1:{}/health → 200", svc.port)),
        "{evidence}"
    );
    assert!(p.get("host").is_none(), "local is left implicit: {p:#}");

    // The TOML, pasted into the inventory, validates: one more component.
    let run = ws.run(&["discover", "--port", &svc.port.to_string()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("# proposal — not in your inventory: pid "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("[components.flotilla-testkit]"),
        "{}",
        run.stdout
    );
    let inventory = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    ws.write("flotilla.toml", &format!("{inventory}\n{}", run.stdout));
    let (run, v) = validate(&ws);
    assert_eq!(v["valid"], true, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(v["summary"]["components"], 2, "{v:#}");

    // Pasted, it is declared: discover leaves it out, saying so.
    let report = discover(&ws, &[svc.port]);
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains(&format!(
            "declared: component `flotilla-testkit` (endpoint flotilla-testkit.http, port {})",
            svc.port
        )),
        "{skipped}"
    );

    // Without an inventory here, everything counts as uncovered.
    let bare = Workspace::new();
    let run = bare.run(&["discover", "--json", "--port", &svc.port.to_string()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("no inventory here"), "{}", run.stderr);
    assert_eq!(finding(&run.json(), svc.port)["process"]["pid"], svc.pid());
    // An unknown host is a usage error.
    let run = ws.run(&["discover", "nowhere"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("no host `nowhere`"), "{}", run.stderr);
}

#[test]
fn what_the_inventory_declares_or_flotilla_started_is_not_listed() {
    let ws = Workspace::new();
    // Declared by its port (observed only), by its command, and started by flotilla.
    let by_port = Service::start(&[]);
    let by_command = Service::start(&["--exec-name", "same"]);
    let started = free_port();
    ws.write(
        "flotilla.toml",
        &format!(
            "[components.web]\nowner = \"external\"\nendpoints = {{ http = \"http://127.0.0.1:{}\" }}\n\n\
             [components.same]\ncommand = [{}, \"--listen\", {}, \"--exec-name\", \"same\"]\n\n\
             [components.svc]\ncommand = [{}, \"--listen\", \"127.0.0.1:{started}\"]\n\
             endpoints = {{ http = \"http://127.0.0.1:{started}\" }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }} }}\n",
            by_port.port,
            q(&testkit()),
            q(&by_command.listen()),
            q(&testkit()),
        ),
    );
    let run = ws.run(&["start", "svc"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    // Flotilla itself: an authority (`flotilla serve`).
    let authority = common::authority::Authority::new("");
    let serve: u16 = authority
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the authority's port");
    let report = discover(&ws, &[by_port.port, by_command.port, started, serve]);
    let run = ws.run(&["stop", "svc"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    let reasons: Vec<(String, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["what"].as_str().unwrap().to_string(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let reason_for = |port: u16| {
        reasons
            .iter()
            .find(|(what, _)| what.ends_with(&format!(":{port}")))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("port {port} is not among the skipped: {reasons:?}"))
    };
    assert_eq!(
        reason_for(by_port.port),
        format!(
            "declared: component `web` (endpoint web.http, port {})",
            by_port.port
        )
    );
    assert_eq!(
        reason_for(by_command.port),
        "declared: component `same` (the same command)"
    );
    let r = reason_for(started);
    assert!(
        r.starts_with("started by flotilla: component `svc` of flotilla project"),
        "{r}"
    );
    let r = reason_for(serve);
    assert!(
        r.starts_with("flotilla's own process (`flotilla serve"),
        "{r}"
    );
}

#[test]
fn a_plain_tcp_listener_gets_a_tcp_probe_and_the_first_path_answering_200_wins() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", "");
    let tcp = Service::start(&["--no-http"]);
    let models = Service::start(&["--path-status", "/health=404"]);
    let none = Service::start(&["--http-status", "404"]);
    let report = discover(&ws, &[tcp.port, models.port, none.port]);
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        3,
        "{report:#}"
    );

    // Not HTTP: one question, a tcp endpoint and probe.
    let f = finding(&report, tcp.port);
    assert_eq!(
        f["proposal"]["endpoints"],
        serde_json::json!({ "tcp": tcp.listen() })
    );
    assert_eq!(
        f["proposal"]["readiness"],
        serde_json::json!({ "tcp": { "endpoint": "tcp" } })
    );
    assert_eq!(f["answers"][0]["http"], false, "{f:#}");
    assert_eq!(
        f["answers"][0]["evidence"].as_array().unwrap().len(),
        1,
        "nothing more is asked of a port that does not speak HTTP: {f:#}"
    );

    // /health 404, /v1/models 200: the model list is the probe.
    let f = finding(&report, models.port);
    assert_eq!(
        f["proposal"]["readiness"],
        serde_json::json!({ "http": { "endpoint": "http", "path": "/v1/models" } }),
        "{f:#}"
    );
    assert_eq!(f["answers"][0]["evidence"].as_array().unwrap().len(), 2);

    // HTTP, but no path answers 200: an http endpoint with a tcp probe.
    let f = finding(&report, none.port);
    assert_eq!(
        f["proposal"]["endpoints"],
        serde_json::json!({ "http": format!("http://{}", none.listen()) })
    );
    assert_eq!(
        f["proposal"]["readiness"],
        serde_json::json!({ "tcp": { "endpoint": "http" } })
    );
    assert_eq!(f["answers"][0]["evidence"].as_array().unwrap().len(), 3);

    // Three proposals of one program get three names, and pasted they validate.
    let mut names: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "flotilla-testkit",
            "flotilla-testkit-2",
            "flotilla-testkit-3"
        ]
    );
    let ports: Vec<String> = [tcp.port, models.port, none.port]
        .iter()
        .map(u16::to_string)
        .collect();
    let run = ws.run(&[
        "discover", "--port", &ports[0], "--port", &ports[1], "--port", &ports[2],
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    ws.write("flotilla.toml", &run.stdout);
    let (run, v) = validate(&ws);
    assert_eq!(v["valid"], true, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(v["summary"]["components"], 3, "{v:#}");
}
