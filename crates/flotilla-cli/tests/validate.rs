//! `flotilla validate` on broken inventories: every problem is reported, each with its
//! stable code at its exact file:line:column. Locations are given in the cases as a
//! unique snippet of the inventory (the span must start where the snippet starts), so
//! the cases stay readable while the assertion stays exact.

mod common;

use common::{Run, Workspace};
use serde_json::Value;

/// (line, column), 1-based, of the first occurrence of `needle` in `text`.
fn position_of(text: &str, needle: &str) -> (u64, u64) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("snippet {needle:?} not in the inventory"));
    assert_eq!(
        text.matches(needle).count(),
        1,
        "snippet {needle:?} is not unique"
    );
    let before = &text[..at];
    let line = before.matches('\n').count() as u64 + 1;
    let col = before.rsplit('\n').next().unwrap().chars().count() as u64 + 1;
    (line, col)
}

/// Validates `text` (as `file`) and checks that exactly the expected diagnostics
/// (code, snippet where the span starts) are reported, in order, with exit status 2.
/// `flotilla validate` (human output) of `text` as `flotilla.toml`.
fn validate_human(text: &str) -> Run {
    let ws = Workspace::new();
    ws.write("flotilla.toml", text);
    ws.run(&["validate"])
}

fn expect_errors(file: &str, text: &str, expected: &[(&str, &str)]) {
    let ws = Workspace::new();
    ws.write(file, text);
    let run = ws.run(&["-f", file, "validate", "--json"]);
    assert_eq!(run.code, 2, "exit status\n{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["valid"], false);
    let diags = report["diagnostics"].as_array().unwrap();
    let got: Vec<(String, u64, u64)> = diags
        .iter()
        .filter(|d| d["severity"] == "error")
        .map(|d| {
            let loc = &d["location"];
            (
                d["code"].as_str().unwrap().to_string(),
                loc["start"]["line"].as_u64().unwrap(),
                loc["start"]["column"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64)> = expected
        .iter()
        .map(|(code, needle)| {
            let (l, c) = position_of(text, needle);
            (code.to_string(), l, c)
        })
        .collect();
    assert_eq!(
        got,
        want,
        "diagnostics differ; full report:\n{}",
        serde_json::to_string_pretty(&report).unwrap()
    );
    for d in diags {
        assert_eq!(d["location"]["file"], file);
        let line = d["location"]["start"]["line"].as_u64().unwrap() as usize;
        assert_eq!(
            d["location"]["source_line"].as_str().unwrap(),
            text.lines().nth(line - 1).unwrap(),
            "source line of {d}"
        );
    }
}

#[test]
fn toml_syntax_error_is_located() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", "[components.a]\ncommand = [\"x\"\n");
    let run = ws.run(&["validate"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("error[syntax]: unclosed array"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("flotilla.toml:2:15"), "{}", run.stderr);
    let run = ws.run(&["validate", "--json"]);
    let d = &run.json()["diagnostics"][0];
    assert_eq!(
        (
            d["location"]["start"]["line"].as_u64(),
            d["location"]["start"]["column"].as_u64()
        ),
        (Some(2), Some(15))
    );
}

#[test]
fn json_syntax_error_is_located() {
    let text = "{\n  \"components\": {\n    \"a\": { \"command\": [\"x\"], }\n  }\n}\n";
    expect_errors("flotilla.json", text, &[("syntax", ", }")]);
}

#[test]
fn type_errors_and_unknown_keys() {
    let text = r#"[components.a]
command = "not-a-list"
endpoints = { http = 8080 }
comand = ["x"]
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("invalid-value", "\"not-a-list\""),
            ("invalid-value", "8080"),
            ("unknown-key", "comand"),
        ],
    );
}

#[test]
fn unknown_key_suggests_the_closest() {
    let ws = Workspace::new();
    ws.write(
        "flotilla.toml",
        "[components.a]\ncommand = [\"x\"]\ndepend_on = [\"b\"]\n",
    );
    let run = ws.run(&["validate"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error[unknown-key]"), "{}", run.stderr);
    assert!(run.stderr.contains("flotilla.toml:3:1"), "{}", run.stderr);
    assert!(
        run.stderr.contains("did you mean `depends_on`?"),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_names_are_reported_with_suggestions() {
    let text = r#"[hosts.studio]
transport = "ssh"

[components.llm]
host = "stuido"
command = ["llama-server"]
profile = "smal"
profiles.small = { command = ["llama-server", "-c", "2048"] }

[components.proxy]
command = ["litellm"]
depends_on = ["lmm"]

[stacks.chat]
components = ["proxy", "ghost"]
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("unknown-host", "\"stuido\""),
            ("unknown-profile", "\"smal\""),
            ("unknown-dependency", "\"lmm\""),
            ("unknown-stack-member", "\"ghost\""),
        ],
    );
    let run = validate_human(text);
    assert!(
        run.stderr.contains("did you mean `studio`?"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("did you mean `small`?"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("did you mean `llm`?"), "{}", run.stderr);
}

#[test]
fn stack_and_component_with_one_name_is_ambiguous() {
    let text = "[components.chat]\ncommand = [\"x\"]\n\n[stacks.chat]\ncomponents = [\"chat\"]\n";
    expect_errors(
        "flotilla.toml",
        text,
        &[("ambiguous-name", "chat]\ncomponents")],
    );
}

#[test]
fn dependency_cycle_prints_its_path() {
    let text = r#"[components.a]
command = ["a"]
depends_on = ["b"]

[components.b]
command = ["b"]
depends_on = ["c"]

[components.c]
command = ["c"]
depends_on = ["a"]

[components.d]
command = ["d"]
depends_on = [ "d" ]
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("dependency-cycle", "\"b\"]\n\n[components.b]"),
            ("dependency-cycle", "\"d\" ]"),
        ],
    );
    let run = validate_human(text);
    assert!(
        run.stderr.contains("dependency cycle: a → b → c → a"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("dependency cycle: d → d"),
        "{}",
        run.stderr
    );
}

#[test]
fn connections_count_as_dependencies_in_cycles() {
    let text = r#"[components.a]
command = ["a"]
endpoints = { http = "http://127.0.0.1:9001" }
connections = { up = "b.http" }

[components.b]
command = ["b"]
endpoints = { http = "http://127.0.0.1:9002" }
connections = { up = "a.http" }
"#;
    expect_errors("flotilla.toml", text, &[("dependency-cycle", "\"b.http\"")]);
}

#[test]
fn two_components_claiming_one_port_on_one_host() {
    let text = r#"[components.llm]
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:8080" }

[components.embed]
command = ["llama-server"]
endpoints = { http = "http://0.0.0.0:8080" }

[components.other-host]
host = "gpu"
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:8080" }

[hosts.gpu]
transport = "ssh"
"#;
    expect_errors(
        "flotilla.toml",
        text,
        // At the port of the later entry (`embed`), labelled at `llm`'s.
        &[("port-conflict", "8080\" }\n\n[components.other-host]")],
    );
}

#[test]
fn port_conflicts_follow_the_active_profile() {
    let text = r#"[components.llm]
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:8080" }
profile = "alt"
profiles.alt = { endpoints = { http = "http://127.0.0.1:9090" } }

[components.embed]
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:9090" }
"#;
    expect_errors("flotilla.toml", text, &[("port-conflict", "9090\" }\n")]);
    // Without the profile that moves llm to 9090, there is no conflict.
    let run = validate_human(&text.replace("profile = \"alt\"\n", ""));
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn external_component_with_lifecycle_keys() {
    let text = r#"[components.vectors]
owner = "external"
command = ["qdrant"]
stop = { signal = "SIGTERM" }
endpoints = { http = "http://127.0.0.1:6333" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("external-lifecycle", "command"),
            ("external-lifecycle", "stop"),
        ],
    );
}

#[test]
fn managed_component_without_a_way_to_start() {
    let text = "[components.lonely]\ndescription = \"nothing to run\"\n\n[components.unit]\nadapter = \"systemd\"\n";
    expect_errors(
        "flotilla.toml",
        text,
        &[("no-start-method", "lonely"), ("no-start-method", "unit]")],
    );
}

#[test]
fn probe_naming_a_missing_endpoint() {
    let text = r#"[components.llm]
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:8080" }
readiness = { http = { endpoint = "htp", path = "/health" } }
liveness = { tcp = { endpoint = "grpc" } }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("unknown-endpoint", "\"htp\""),
            ("unknown-endpoint", "\"grpc\""),
        ],
    );
}

#[test]
fn probe_must_set_exactly_one_check() {
    let text = r#"[components.a]
command = ["a"]
endpoints = { http = "http://127.0.0.1:8080" }
readiness = { tcp = { endpoint = "http" }, http = { endpoint = "http" } }
liveness = { period = "1s" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[("invalid-probe", "{ tcp"), ("invalid-probe", "{ period")],
    );
}

#[test]
fn tunnel_ends_that_do_not_resolve() {
    let text = r#"[hosts.studio]
transport = "ssh"

[hosts.gpu]
transport = "ssh"

[components.llm]
host = "gpu"
command = ["llama-server"]
endpoints = { http = "http://127.0.0.1:8080" }

[components.t1]
adapter = "ssh-tunnel"
tunnel = { via = "nowhere", target = "llm.http", listen_port = 18080 }

[components.t2]
adapter = "ssh-tunnel"
tunnel = { via = "studio", target = "llm.grpc", listen_port = 18081 }

[components.t3]
template = "ssh-tunnel"
params = { via = "studio", target = "llm.http", listen_port = 18082 }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("tunnel-unresolved", "\"nowhere\""),
            ("tunnel-unresolved", "\"llm.grpc\""),
            ("tunnel-unresolved", "\"llm.http\", listen_port = 18082"),
        ],
    );
}

#[test]
fn invalid_durations_ports_and_signals() {
    let text = r#"[hosts.gpu]
transport = "ssh"
port = 70000

[components.a]
command = ["a"]
endpoints = { http = "http://127.0.0.1:0" }
stop = { signal = "SIGTERMINATE", grace_period = "soon" }
readiness = { process = {}, period = "5 parsecs" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("invalid-value", "70000"),
            ("invalid-value", "\"http://127.0.0.1:0\""),
            ("invalid-value", "\"SIGTERMINATE\""),
            ("invalid-value", "\"soon\""),
            ("invalid-value", "\"5 parsecs\""),
        ],
    );
}

#[test]
fn json_inventory_errors_are_located_too() {
    let text = r#"{
  "components": {
    "llm": {
      "host": "stuido",
      "command": ["llama-server"],
      "stop": { "grace_period": "later" }
    }
  }
}
"#;
    expect_errors(
        "flotilla.json",
        text,
        &[
            ("unknown-host", "\"stuido\""),
            ("invalid-value", "\"later\""),
        ],
    );
}

#[test]
fn templates_check_their_parameters() {
    let text = r#"[components.llm]
template = "llama-server"
params = { model = "m.gguf", port = "8080", ctx = 4096 }

[components.embed]
template = "llama-server"
params = { port = 8081 }

[components.x]
template = "lama-server"
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("invalid-template-param", "\"8080\""),
            ("invalid-template-param", "ctx"),
            ("invalid-template-param", "{ port = 8081 }"),
            ("unknown-template", "\"lama-server\""),
        ],
    );
}

#[test]
fn unknown_references_are_located() {
    let text = r#"[components.llm]
command = ["llama-server", "--port", "${endpoints.http.port}"]
endpoints = { http = "http://127.0.0.1:8080" }

[components.proxy]
command = ["proxy", "--upstream", "${connections.upstream}"]
env = { API = "${connections.llm}" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("unknown-reference", "\"${connections.upstream}\""),
            ("unknown-reference", "\"${connections.llm}\""),
        ],
    );
}

#[test]
fn user_templates_next_to_the_inventory() {
    let ws = Workspace::new();
    ws.write(
        "templates/whisper.toml",
        r#"description = "whisper.cpp server"
[params]
model = { type = "path" }
port = { type = "port", default = 8090 }
[endpoints]
http = "http://127.0.0.1:${params.port}"
[readiness]
http = { endpoint = "http", path = "/" }
"#,
    );
    ws.write(
        "templates/broken.toml",
        "command = [\"x\", \"${params.nope}\"]\n[params]\nname = { type = \"string\" }\n",
    );
    // whisper supplies no command, so give one; it uses the template's parameter.
    ws.write(
        "flotilla.toml",
        r#"[components.stt]
template = "whisper"
params = { model = "ggml-base.en.bin", port = 9000 }
command = ["whisper-server", "-m", "ggml-base.en.bin", "--port", "${endpoints.http.port}"]

[components.stt2]
template = "whisper"
params = { modle = "x" }
"#,
    );
    let run = ws.run(&["validate", "--json"]);
    assert_eq!(run.code, 2);
    let report = run.json();
    let diags: Vec<(String, String, u64)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_string(),
                d["location"]["file"].as_str().unwrap().to_string(),
                d["location"]["start"]["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        diags.contains(&("invalid-template-param".into(), "flotilla.toml".into(), 7)),
        "{diags:?}"
    );
    assert!(
        diags.iter().any(|(c, f, l)| c == "unknown-reference"
            && f.ends_with("templates/broken.toml")
            && *l == 1),
        "{diags:?}"
    );
    // With the broken pieces removed, the template expands: port 9000 reaches the command.
    std::fs::remove_file(ws.path().join("templates/broken.toml")).unwrap();
    ws.write(
        "flotilla.toml",
        r#"[components.stt]
template = "whisper"
params = { model = "ggml-base.en.bin", port = 9000 }
command = ["whisper-server", "-m", "ggml-base.en.bin", "--port", "${endpoints.http.port}"]
"#,
    );
    let run = ws.run(&["topology", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let topo = run.json();
    let stt = &topo["components"][0];
    assert_eq!(stt["command"][4], "9000");
    assert_eq!(stt["endpoints"]["http"]["url"], "http://127.0.0.1:9000");
    assert_eq!(
        stt["readiness"]["check"]["http"]["url"],
        "http://127.0.0.1:9000/"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"[components.a]
host = "nowhere"
command = ["a"]
stop = { grace_period = "x" }
depends_on = ["zzz"]

[components.b]
owner = "external"
command = ["b"]
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("unknown-host", "\"nowhere\""),
            ("invalid-value", "\"x\""),
            ("unknown-dependency", "\"zzz\""),
            ("external-lifecycle", "command = [\"b\"]"),
        ],
    );
}

#[test]
fn missing_inventory_is_a_usage_error() {
    let ws = Workspace::new();
    let run = ws.run(&["validate"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no inventory found"), "{}", run.stderr);
    let run = ws.run(&["-f", "nope.toml", "validate"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot read inventory nope.toml"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("caused by"), "{}", run.stderr);
}

#[test]
fn every_example_is_valid() {
    let root = common::repo_root();
    let mut seen = 0;
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let dir = entry.unwrap().path();
        // Every inventory of the example: flotilla.toml / flotilla.json and its
        // variants (two-hosts.toml, two-hosts-fleet.toml…).
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".toml") || n == "flotilla.json")
            .collect();
        names.sort();
        for name in &names {
            let name = name.as_str();
            let f = dir.join(name);
            if f.exists() {
                seen += 1;
                let run = common::run_in(&dir, &["-f", name, "validate"]);
                assert_eq!(run.code, 0, "{}: {}", f.display(), run.stderr);
                assert!(run.stdout.contains("valid:"), "{}", run.stdout);
            }
        }
    }
    assert!(
        seen >= 4,
        "expected at least four example inventories, found {seen}"
    );
}

#[test]
fn valid_json_report_has_a_summary() {
    let root = common::repo_root();
    let run = common::run_in(&root.join("examples/local-ai"), &["validate", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r: Value = run.json();
    assert_eq!(r["valid"], true);
    assert_eq!(r["summary"]["components"], 7);
    assert_eq!(r["summary"]["hosts"], 2);
}

#[test]
fn the_readme_inventory_example_is_valid() {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .filter(|b| b.contains("[components."))
        .collect();
    assert!(!blocks.is_empty());
    for block in blocks {
        let ws = Workspace::new();
        ws.write("flotilla.toml", block);
        let run = ws.run(&["validate"]);
        assert_eq!(
            run.code, 0,
            "README example does not validate:\n{block}\n{}",
            run.stderr
        );
    }
}

#[test]
fn the_local_host_cannot_be_remote() {
    let text = "[hosts.local]\ntransport = \"ssh\"\naddress = \"studio.lan\"\n\n[components.a]\ncommand = [\"a\"]\n";
    expect_errors("flotilla.toml", text, &[("invalid-value", "\"ssh\"")]);
}

#[test]
fn ssh_host_settings_are_checked_where_written() {
    let text = r#"[hosts.local]
transport = "local"
user = "me"

[hosts.studio]
transport = "ssh"
address = "-oProxyCommand=sh"
identity = "~/.ssh/id_ed25519"
state_dir = "relative/state"
ssh_options = { StrictHostKeyChecking = "no", ProxyJump = "bastion", "Bad Key" = "x" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[
            ("invalid-value", "\"me\""),
            ("invalid-value", "\"-oProxyCommand=sh\""),
            ("invalid-value", "\"relative/state\""),
            ("invalid-value", "\"no\""),
            ("invalid-value", "\"x\""),
        ],
    );
}

/// An inventory whose line 3 holds bytes that are not UTF-8 after `café ` (é is two
/// bytes, one character): 15 + 16 bytes of lines 1 and 2, then 21 bytes (20
/// characters) of line 3 come before the bad byte.
const NOT_UTF8: &[u8] =
    b"[components.a]\ncommand = [\"a\"]\ndescription = \"caf\xc3\xa9 \xff\xfe\"\n";

#[test]
fn an_inventory_that_is_not_utf8_is_located_to_the_byte() {
    let ws = Workspace::new();
    std::fs::write(ws.path().join("flotilla.toml"), NOT_UTF8).unwrap();
    let run = ws.run(&["validate"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    for want in [
        "error[not-utf8]: not valid UTF-8 at byte offset 52 (line 3, column 21): byte 0xff is not part of a valid character",
        "flotilla.toml:3:21",
    ] {
        assert!(run.stderr.contains(want), "{want:?} not in:\n{}", run.stderr);
    }

    let run = ws.run(&["validate", "--json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["valid"], false);
    let diags = report["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "{report:#}");
    let d = &diags[0];
    assert_eq!(d["code"], "not-utf8");
    assert_eq!(d["severity"], "error");
    assert!(
        d["message"].as_str().unwrap().contains("byte offset 52"),
        "{d:#}"
    );
    assert_eq!(d["location"]["file"], "flotilla.toml");
    assert_eq!(d["location"]["start"]["line"], 3);
    assert_eq!(d["location"]["start"]["column"], 21);
    assert_eq!(
        d["location"]["source_line"],
        "description = \"café \u{fffd}\u{fffd}\""
    );

    // Every verb that loads the inventory refuses it the same way.
    let run = ws.run(&["plan", "up", "a"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("error[not-utf8]"), "{}", run.stderr);
}

#[test]
fn a_template_that_is_not_utf8_is_reported_in_its_file() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("templates")).unwrap();
    std::fs::write(ws.path().join("templates/bad.toml"), NOT_UTF8).unwrap();
    // A component using it is not reported again (like any template that failed to load).
    ws.write(
        "flotilla.toml",
        "[components.a]\ncommand = [\"a\"]\n\n[components.b]\ntemplate = \"bad\"\n",
    );
    let run = ws.run(&["validate", "--json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let report = run.json();
    let diags = report["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "{report:#}");
    let d = &diags[0];
    assert_eq!(d["code"], "not-utf8");
    assert!(
        d["location"]["file"]
            .as_str()
            .unwrap()
            .ends_with("templates/bad.toml"),
        "{d:#}"
    );
    assert_eq!(
        (
            &d["location"]["start"]["line"],
            &d["location"]["start"]["column"]
        ),
        (&Value::from(3), &Value::from(21))
    );
    assert!(
        d["message"].as_str().unwrap().contains("byte offset 52"),
        "{d:#}"
    );
    let run = ws.run(&["validate"]);
    assert!(run.stderr.contains("bad.toml:3:21"), "{}", run.stderr);
}

/// The README's promise: every problem in one run. A type error in one component
/// (`depends_on` written as a string, or as docker compose's long form) hides neither
/// a port conflict between two others nor an unknown endpoint in a fourth.
#[test]
fn a_type_error_hides_no_other_problem() {
    for depends_on in [r#""llm""#, r#"{ llm = { condition = "service_healthy" } }"#] {
        let text = format!(
            r#"[components.a]
command = ["a"]
depends_on = {depends_on}

[components.b]
command = ["b"]
endpoints = {{ http = "http://127.0.0.1:8080" }}

[components.c]
command = ["c"]
endpoints = {{ http = "http://127.0.0.1:8080/v1" }}

[components.d]
command = ["d"]
connections = {{ up = "b.nope" }}

[components.llm]
command = ["llama-server"]
"#
        );
        expect_errors(
            "flotilla.toml",
            &text,
            &[
                ("invalid-value", depends_on),
                ("port-conflict", "8080/v1"),
                ("unknown-endpoint", "\"b.nope\""),
            ],
        );
        let run = validate_human(&text);
        assert_eq!(run.code, 2);
        for (what, needle) in [
            ("error[invalid-value]", depends_on),
            ("error[port-conflict]", "8080/v1"),
            ("error[unknown-endpoint]", "\"b.nope\""),
        ] {
            let (l, c) = position_of(&text, needle);
            assert!(run.stderr.contains(what), "{what}\n{}", run.stderr);
            assert!(
                run.stderr.contains(&format!("flotilla.toml:{l}:{c}")),
                "{what} at {l}:{c}\n{}",
                run.stderr
            );
        }
        assert!(run.stderr.contains("invalid: 3 errors"), "{}", run.stderr);
    }
}

/// A type error says what form the key takes, with an example built from what was
/// written, at the value's file:line:column.
#[test]
fn type_errors_show_the_expected_form_with_an_example() {
    let text = r#"[components.a]
command = ["a"]
depends_on = "llm"

[components.b]
command = ["b"]
depends_on = { llm = { condition = "service_healthy" }, a = { condition = "service_started" } }

[components.llm]
command = "llama-server -m '/models/my model.gguf' --port 8080"
env = ["HF_HOME=/models/hf", "LOG_LEVEL=debug"]
ports = ["8080:8080"]
"#;
    let run = validate_human(text);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let err = &run.stderr;
    for needle in [
        "\"llm\"\n",
        "{ llm",
        "\"llama-server",
        "[\"HF_HOME",
        "ports",
    ] {
        let (l, c) = position_of(text, needle);
        assert!(
            err.contains(&format!("flotilla.toml:{l}:{c}")),
            "{needle:?} at {l}:{c}\n{err}"
        );
    }
    for says in [
        // depends_on: a list of names, and waiting for readiness is what Flotilla does.
        "error[invalid-value]: component `a`: `depends_on` is a list of component names, not a string",
        "write `depends_on = [\"llm\"]`",
        "waits until it is ready (its readiness probe passes) before it starts what depends on it, so there is no `condition` to set",
        "docker compose's `condition: service_healthy` is what Flotilla always does",
        "error[invalid-value]: component `b`: `depends_on` is a list of component names, not a table (docker compose's long form)",
        "write `depends_on = [\"a\", \"llm\"]`",
        // command: a list, shown split as a shell would, to be checked.
        "error[invalid-value]: component `llm`: `command` is a list of arguments (argv), not a string",
        "write `command = [\"llama-server\", \"-m\", \"/models/my model.gguf\", \"--port\", \"8080\"]`",
        "check the split",
        // env: compose's list form, shown as a table.
        "error[invalid-value]: component `llm`: `env` is a table of NAME = value, not a list (docker compose's list form)",
        "write `env = { HF_HOME = \"/models/hf\", LOG_LEVEL = \"debug\" }`",
        // ports: compose's key, shown as endpoints.
        "error[unknown-key]: component `llm`: unknown key `ports`",
        "Flotilla has no `ports`",
        "`endpoints = { http = \"http://127.0.0.1:8080\" }`",
    ] {
        assert!(err.contains(says), "{says:?} not in\n{err}");
    }

    // The same in a JSON inventory: examples in JSON.
    let json = r#"{ "components": { "llm": { "command": "llama-server --port 8080", "depends_on": "db" },
  "db": { "command": ["db"] } } }
"#;
    let ws = Workspace::new();
    ws.write("flotilla.json", json);
    let run = ws.run(&["-f", "flotilla.json", "validate"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let (l, c) = position_of(json, "\"llama-server");
    let (dl, dc) = position_of(json, "\"db\" }");
    for says in [
        "`\"command\": [\"llama-server\", \"--port\", \"8080\"]`".to_string(),
        "`\"depends_on\": [\"db\"]`".to_string(),
        format!("flotilla.json:{l}:{c}"),
        format!("flotilla.json:{dl}:{dc}"),
    ] {
        assert!(
            run.stderr.contains(&says),
            "{says:?} not in\n{}",
            run.stderr
        );
    }
}

/// A port conflict points at the port: in the endpoint's URL, or at the template
/// parameter that sets it; the error at the later entry, a label at the earlier one.
#[test]
fn a_port_conflict_points_at_the_port() {
    let text = r#"[components.llm]
template = "llama-server"
params = { model = "/models/qwen.gguf", port = 8081 }

[components.embed]
template = "llama-server"
params = { model = "/models/embed.gguf", embeddings = true }
profile = "fast"
profiles.fast = { params = { port = 8081 } }

[components.proxy]
command = ["proxy"]
endpoints = { http = "http://127.0.0.1:4000" }

[components.ui]
command = ["ui"]
endpoints = { http = "http://0.0.0.0:4000/ui" }
"#;
    expect_errors(
        "flotilla.toml",
        text,
        &[("port-conflict", "8081 } }"), ("port-conflict", "4000/ui")],
    );
    let ws = Workspace::new();
    ws.write("flotilla.toml", text);
    let report = ws.run(&["validate", "--json"]).json();
    let labels: Vec<(u64, u64, String)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let l = &d["labels"][0];
            (
                l["location"]["start"]["line"].as_u64().unwrap(),
                l["location"]["start"]["column"].as_u64().unwrap(),
                l["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let at = |needle: &str| position_of(text, needle);
    assert_eq!(
        labels,
        [
            (
                at("8081 }\n").0,
                at("8081 }\n").1,
                "`llm` claims port 8081 here".to_string()
            ),
            (
                at("4000\" }").0,
                at("4000\" }").1,
                "`proxy` claims port 4000 here".to_string()
            ),
        ]
    );
    let run = validate_human(text);
    assert!(
        run.stderr
            .contains("components `llm` and `embed` both claim port 8081"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("flotilla.toml:9:37"), "{}", run.stderr);
    assert!(!run.stderr.contains("flotilla.toml:6:"), "{}", run.stderr);
}

/// A shell-style `$NAME` in a command or an env value reaches the program literally:
/// a `suspicious` warning at the value, saying how to take it from the environment;
/// none inside a script given to a shell with `-c`.
#[test]
fn a_bare_dollar_name_is_suspicious_unless_a_shell_expands_it() {
    let text = "[components.llm]\ncommand = [\"llama-server\", \"--model\", \"$MODEL_DIR/m.gguf\"]\n\
                env = { CACHE = \"$HOME/.cache\", OK = \"${env.HOME}\", PRICE = \"$$5\" }\n\
                [components.script]\ncommand = [\"sh\", \"-c\", \"exec sleep $SECONDS_TO_SLEEP\"]\n";
    let ws = Workspace::new();
    ws.write("flotilla.toml", text);
    let run = ws.run(&["validate", "--json"]);
    assert_eq!(run.code, 0, "warnings only: {}", run.stdout);
    let report = run.json();
    let warnings: Vec<(String, u64, u64, String)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "warning")
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_string(),
                d["location"]["start"]["line"].as_u64().unwrap(),
                d["location"]["start"]["column"].as_u64().unwrap(),
                format!("{} {}", d["message"], d["help"]),
            )
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    let (l, c) = position_of(text, "\"$MODEL_DIR/m.gguf\"");
    assert_eq!(
        (warnings[0].0.as_str(), warnings[0].1, warnings[0].2),
        ("suspicious", l, c)
    );
    assert!(
        warnings[0]
            .3
            .contains("`$MODEL_DIR` reaches the program literally"),
        "{warnings:#?}"
    );
    assert!(warnings[0].3.contains("${env.MODEL_DIR}"), "{warnings:#?}");
    let (l, c) = position_of(text, "\"$HOME/.cache\"");
    assert_eq!((warnings[1].1, warnings[1].2), (l, c), "{warnings:#?}");
}
