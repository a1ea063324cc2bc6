//! `flotilla plan` and `flotilla topology` run as a user would: exit codes, human
//! output, stable JSON.

mod common;

use common::Workspace;

const INVENTORY: &str = r#"
[components.llm]
template = "llama-server"
params = { model = "m.gguf", port = 18080 }

[components.proxy]
template = "litellm"
params = { config = "litellm.yaml", port = 14000 }
connections = { chat = "llm.http" }
env = { CHAT_API_BASE = "${connections.chat}/v1" }

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
fn plan_up_prints_waves_and_cleanup() {
    let run = ws().run(&["plan", "up", "chat"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.stdout;
    assert!(out.starts_with("plan: flotilla start chat\n"), "{out}");
    let wave1 = out.find("wave 1").unwrap();
    let wave2 = out.find("wave 2").unwrap();
    let llm = out.find("start        llm").expect(&out);
    let proxy = out.find("start        proxy").expect(&out);
    assert!(wave1 < llm && llm < wave2 && wave2 < proxy, "{out}");
    assert!(out.contains("await-ready  vectors"), "{out}");
    assert!(
        out.contains("if it fails part-way: stop proxy, llm (in this order)"),
        "{out}"
    );
}

#[test]
fn plan_json_is_stable_and_complete() {
    let w = ws();
    let a = w.run(&["plan", "up", "chat", "--json"]);
    let b = w.run(&["plan", "up", "chat", "--json"]);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.stdout, b.stdout);
    let p = a.json();
    assert_eq!(p["format"], 1);
    assert_eq!(p["operation"]["verb"], "start");
    assert_eq!(p["waves"][0]["steps"][0]["component"], "llm");
    assert_eq!(p["waves"][0]["steps"][0]["action"], "start");
    assert_eq!(p["waves"][0]["steps"][0]["adapter"], "process");
    assert_eq!(p["cleanup"], serde_json::json!(["proxy", "llm"]));
    assert!(p["topology_digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    // The topology digest is the one `topology --json` reports.
    let t = w.run(&["topology", "--json"]).json();
    assert_eq!(t["digest"], p["topology_digest"]);
    // The connection's URL reached the environment.
    let proxy = t["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "proxy")
        .unwrap();
    assert_eq!(proxy["env"]["CHAT_API_BASE"], "http://127.0.0.1:18080/v1");
    assert_eq!(proxy["depends_on"], serde_json::json!(["llm"]));
}

#[test]
fn refusal_exits_1_and_names_dependents() {
    let w = ws();
    w.write(
        "observed.json",
        r#"{"components": {"llm": {"lifecycle": "running", "health": "healthy"},
                           "proxy": {"lifecycle": "running", "health": "healthy"}}}"#,
    );
    let run = w.run(&["plan", "stop", "llm", "--observed", "observed.json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("`llm` has running dependents: proxy"),
        "{}",
        run.stderr
    );
    let run = w.run(&[
        "plan",
        "stop",
        "llm",
        "--observed",
        "observed.json",
        "--json",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.json()["refusal"]["reasons"][0]["kind"],
        "dependents-running"
    );
    let run = w.run(&[
        "plan",
        "stop",
        "llm",
        "--observed",
        "observed.json",
        "--cascade",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.find("stop  proxy").unwrap() < run.stdout.find("stop  llm").unwrap(),
        "{}",
        run.stdout
    );
}

#[test]
fn usage_errors_exit_2() {
    let w = ws();
    let run = w.run(&["plan", "start", "proxx"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("did you mean `proxy`?"),
        "{}",
        run.stderr
    );
    let run = w.run(&["plan", "up", "llm"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("is a component, not a stack (plan up takes a stack"),
        "{}",
        run.stderr
    );
    let run = w.run(&["plan", "launch", "llm"]);
    assert_eq!(run.code, 2);
    let run = w.run(&["plan", "stop", "llm", "--observed", "missing.json"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot read missing.json"),
        "{}",
        run.stderr
    );
    // An invalid inventory is exit 2 for every reading verb.
    w.write("flotilla.toml", "[components.x]\nhost = 3\n");
    for args in [&["plan", "start", "x"][..], &["topology"], &["validate"]] {
        assert_eq!(w.run(args).code, 2, "{args:?}");
    }
}

#[test]
fn help_documents_exit_codes() {
    let run = ws().run(&["--help"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("Exit status:"), "{}", run.stdout);
    assert!(run.stdout.contains("1  refused"), "{}", run.stdout);
}

#[test]
fn topology_dot_and_table() {
    let w = ws();
    let run = w.run(&["topology", "--dot"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.starts_with("digraph flotilla {"));
    assert!(
        run.stdout.contains("\"proxy\" -> \"llm\";"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("\"vectors\" [style=dashed];"),
        "{}",
        run.stdout
    );
    let run = w.run(&["topology"]);
    assert!(
        run.stdout.lines().next().unwrap().starts_with("COMPONENT"),
        "{}",
        run.stdout
    );
    let order: Vec<&str> = run
        .stdout
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let pos = |n: &str| order.iter().position(|x| *x == n).unwrap();
    assert!(pos("llm") < pos("proxy"), "{order:?}");
}

#[test]
fn completions_are_generated() {
    let run = ws().run(&["completions", "bash"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("flotilla"), "{}", run.stdout);
}

/// A probe given an inline target (`http = { url = … }`, `tcp = { address = … }`)
/// instead of an endpoint: validated, shown in the plan, in the topology, and in
/// status evidence, where it is probed for real (a loopback listener that answers
/// one HTTP request with 200).
#[test]
fn inline_probe_targets_show_in_plan_topology_and_status() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let w = Workspace::new();
    w.write(
        "flotilla.toml",
        &format!(
            r#"
[components.vectors]
owner = "external"
readiness = {{ http = {{ url = "http://127.0.0.1:{port}/readyz" }} }}
liveness = {{ tcp = {{ address = "127.0.0.1:{port}" }} }}
"#
        ),
    );
    let url = format!("http://127.0.0.1:{port}/readyz");
    let run = w.run(&["plan", "start", "vectors"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("wait for readiness (GET {url})")),
        "{}",
        run.stdout
    );
    // Not answering yet (the plan above waits for readiness); now it does.
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    let t = w.run(&["topology", "--json"]).json();
    let readiness = &t["components"][0]["readiness"]["check"]["http"];
    assert_eq!(readiness["url"], url.as_str(), "{t:#}");
    assert!(readiness.get("endpoint").is_none(), "{t:#}");
    let run = w.run(&["status", "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let status = run.json().to_string();
    assert!(status.contains(&format!("GET {url} → 200")), "{status}");
    assert!(
        status.contains(&format!("connect 127.0.0.1:{port}: accepted")),
        "{status}"
    );
}
