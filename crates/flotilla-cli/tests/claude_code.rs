//! The real agent client: Claude Code (from npm, `scripts/claude-code`) run by a
//! session's runtime (bubblewrap, as `nobody`) headless against a scripted stub of
//! the Anthropic Messages API on loopback (`flotilla_testkit::anthropic_stub`), with
//! `flotilla gate hook` as its hook.
//!
//! The stub makes the agent commit and `git push`; the gate asks; a question
//! appears; the runtime ends (the turn parks: `defer`); the question is answered
//! after that; a new runtime resumes the conversation and the push happens, once.

mod common;

use common::sessions::{git, SessionsAuthority};
use flotilla_testkit::anthropic_stub::{AnthropicStub, Reply, Script};
use std::path::PathBuf;
use std::time::Duration;

/// Claude Code: `$FLOTILLA_CLAUDE_CODE`, else installed by `scripts/claude-code`
/// (into /var/cache/flotilla-tools: the runtime user must be able to run it).
fn claude() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOTILLA_CLAUDE_CODE") {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new(common::repo_root().join("scripts/claude-code"))
        .env(
            "FLOTILLA_TOOLS",
            std::env::var("FLOTILLA_TOOLS").unwrap_or_else(|_| "/var/cache/flotilla-tools".into()),
        )
        .output()
        .expect("run scripts/claude-code");
    assert!(
        out.status.success(),
        "scripts/claude-code failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

const PUSH: &str = "git commit -q --allow-empty -m agent-change && git push -q origin HEAD:main";

/// The stub: "ship it" → a Bash call that commits and pushes; any tool result →
/// a final text.
fn stub() -> AnthropicStub {
    AnthropicStub::start(
        Script::new(Reply::text("Nothing to do."))
            .when_tool_result("", Reply::text("Done."))
            .when_text(
                "ship it",
                Reply::tool_use_with_id(
                    "toolu_push",
                    "Bash",
                    serde_json::json!({"command": PUSH, "description": "Commit and push"}),
                ),
            ),
    )
    .expect("start the Anthropic stub")
}

fn authority(stub: &AnthropicStub) -> SessionsAuthority {
    let base = stub.base_url();
    SessionsAuthority::new(
        &claude(),
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-stub"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("GIT_AUTHOR_NAME", "agent"),
            ("GIT_AUTHOR_EMAIL", "agent@example.invalid"),
            ("GIT_COMMITTER_NAME", "agent"),
            ("GIT_COMMITTER_EMAIL", "agent@example.invalid"),
        ],
        "",
        "",
    )
}

/// The commits on origin's `main` made by the agent.
fn pushed(s: &SessionsAuthority) -> usize {
    git(&s.origin, &["log", "--format=%s", "main"])
        .lines()
        .filter(|l| *l == "agent-change")
        .count()
}

/// The open questions of session `id`.
fn questions(s: &SessionsAuthority, id: u64) -> Vec<serde_json::Value> {
    let q = s.run(&["questions", "--all", "--json"]).json();
    q["questions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["session"] == id)
        .cloned()
        .collect()
}

/// Runs the push flow in a session of `mode`; answers the question `answer`.
fn push_flow(mode: &str, answer: &str) -> (SessionsAuthority, AnthropicStub, u64) {
    let stub = stub();
    let s = authority(&stub);
    let id = s.create(&["--mode", mode, "--prompt", "ship it"]);

    // The gate asks; the turn parks; the runtime ends (torn down) with the question open.
    let shown = s.wait_state(id, "waiting-for-answer", Duration::from_secs(60));
    assert_eq!(shown["runtime_alive"], false, "{shown:#}");
    assert_eq!(shown["doc"]["observed_mode"], mode, "{shown:#}");
    assert_eq!(shown["mode_mismatch"], false);
    let qs = questions(&s, id);
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0]["doc"]["tool_name"], "Bash");
    assert_eq!(qs[0]["doc"]["tool_input"]["command"], PUSH);
    assert!(
        qs[0]["doc"]["reason"]
            .as_str()
            .unwrap()
            .contains("git push"),
        "{:#}",
        qs[0]
    );
    assert_eq!(pushed(&s), 0, "nothing ran before the answer");
    let exited = s.events_of(id, "runtime-exited");
    assert_eq!(exited.len(), 1, "{exited:#?}");
    assert_eq!(exited[0]["code"], 0);

    // Answered after the teardown: a new runtime resumes; the call reaches the gate
    // again and gets the answer.
    let qid = qs[0]["id"].as_u64().unwrap().to_string();
    let r = s.run(&["question", "answer", &qid, answer, "--note", "reviewed"]);
    assert_eq!(r.code, 0, "{r:?}");
    s.wait_state(id, "idle", Duration::from_secs(60));
    let booted = s.events_of(id, "runtime-booted");
    assert_eq!(booted.len(), 2, "{booted:#?}");
    assert_eq!(booted[1]["resume"], true);
    (s, stub, id)
}

#[test]
fn an_asked_push_is_answered_after_teardown_and_happens_exactly_once() {
    let (s, stub, id) = push_flow("default", "allow");
    assert_eq!(pushed(&s), 1);
    // The tool's result reached the model once: the call ran once.
    assert_eq!(stub.tool_result_count("toolu_push"), 1);
    let gates: Vec<_> = s
        .events_of(id, "gate")
        .into_iter()
        .filter(|g| g["decision"] == "allow" && g["question"].is_u64())
        .collect();
    assert_eq!(gates.len(), 1, "{gates:#?}");
    assert!(questions(&s, id)
        .iter()
        .all(|q| q["doc"]["answer"]["decision"] == "allow"));
}

#[test]
fn in_bypass_permissions_the_always_ask_push_still_asks_and_a_switch_is_refused() {
    let (s, _stub, id) = push_flow("bypassPermissions", "deny");
    assert_eq!(pushed(&s), 0, "denied: never pushed");
    let r = s.run(&["session", "mode", &id.to_string(), "default"]);
    assert_eq!(r.code, 1, "{r:?}");
    let shown = s.show(id);
    assert_eq!(shown["doc"]["mode"], "bypassPermissions");
    assert_eq!(s.events_of(id, "mode-switch-refused").len(), 1);
    let list = s.run(&["session", "list"]);
    assert!(list.stdout.contains("bypassPermissions"), "{}", list.stdout);
}
