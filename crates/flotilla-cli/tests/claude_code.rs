//! The real agent client: Claude Code (from npm, `scripts/claude-code`) run by a
//! session's runtime (bubblewrap, as the session's own uid) headless against a scripted stub of
//! the Anthropic Messages API on loopback (`flotilla_testkit::anthropic_stub`), with
//! `flotilla gate hook` as its hook.
//!
//! The stub makes the agent commit and push. The supported way, `flotilla push`,
//! asks the authority: a question shows the commit, and after an "allow" the
//! authority pushes it, once, from outside the sandbox. A direct `git push` is
//! asked by the gate in every mode, and even allowed it cannot write the remote:
//! no remote is writable from a runtime.

mod common;

use common::sessions::{claude, git, SessionsAuthority};
use flotilla_testkit::anthropic_stub::{AnthropicStub, Reply, Script};
use std::time::Duration;

/// The agent's push, the supported way: `flotilla push` asks the authority, which
/// opens a question and pushes after an "allow".
const PUSH: &str = "git commit -q --allow-empty -m agent-change && flotilla push origin HEAD:main";

/// The agent's push, straight to the remote: the gate asks (always-ask, in every
/// mode), and even when a human allows it the sandbox cannot write the remote.
const DIRECT_PUSH: &str =
    "git commit -q --allow-empty -m agent-change && git push -q origin HEAD:main";

/// The stub: "ship it" → a Bash call running `command`; any tool result → a final
/// text.
fn stub(command: &str) -> AnthropicStub {
    AnthropicStub::start(
        Script::new(Reply::text("Nothing to do."))
            .when_tool_result("", Reply::text("Done."))
            .when_text(
                "ship it",
                Reply::tool_use_with_id(
                    "toolu_push",
                    "Bash",
                    serde_json::json!({"command": command, "description": "Commit and push"}),
                ),
            ),
    )
    .expect("start the Anthropic stub")
}

/// The model credential: held by the authority only (`[egress.model] key_file`);
/// the sandbox has no network of its own and a placeholder key.
const REAL_KEY: &str = "sk-ant-stub-real-key-0123456789";

fn authority(stub: &AnthropicStub) -> SessionsAuthority {
    let base = stub.base_url();
    let key_dir = tempfile::tempdir().unwrap().keep();
    let key_file = key_dir.join("anthropic.key");
    std::fs::write(&key_file, format!("{REAL_KEY}\n")).unwrap();
    SessionsAuthority::new(
        &claude(),
        &[
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("GIT_AUTHOR_NAME", "agent"),
            ("GIT_AUTHOR_EMAIL", "agent@example.invalid"),
            ("GIT_COMMITTER_NAME", "agent"),
            ("GIT_COMMITTER_EMAIL", "agent@example.invalid"),
        ],
        "",
        // Commits and `flotilla push` need no question at the gate: the push
        // itself is asked by the authority.
        &format!(
            "[gate]\nallow = [\"Bash(git commit *)\", \"Bash(flotilla push *)\"]\n\n[egress.model]\nurl = {base:?}\nkey_file = {:?}\n",
            key_file.display().to_string()
        ),
    )
}

/// Every request the model API got carried the real key, which never entered the
/// sandbox: the session's files hold no trace of it.
fn the_key_stayed_outside(s: &SessionsAuthority, stub: &AnthropicStub, id: u64) {
    let requests = stub.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.header("x-api-key"), Some(REAL_KEY), "{:?}", r.headers);
    }
    let sdir = s.a.ws.path().join(format!("sessions/{id}"));
    let out = std::process::Command::new("grep")
        .args(["-r", "-l", REAL_KEY])
        .arg(&sdir)
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "the key is in {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let egress = s.events_of(id, "egress");
    assert!(
        egress
            .iter()
            .any(|e| e["via"] == "model" && e["allowed"] == true),
        "{egress:#?}"
    );
}

/// The commits on origin's `main` made by the agent.
fn pushed(s: &SessionsAuthority) -> usize {
    git(&s.origin, &["log", "--format=%s", "main"])
        .lines()
        .filter(|l| *l == "agent-change")
        .count()
}

/// The questions of session `id`.
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

#[test]
fn a_push_through_the_authority_happens_exactly_once_after_an_allow() {
    let stub = stub(PUSH);
    let s = authority(&stub);
    let id = s.create(&["--prompt", "ship it"]);

    // The Bash call runs (commit, then `flotilla push`): the authority opens a
    // question showing the commit; the turn ends; nothing is pushed.
    let shown = s.wait_state(id, "waiting-for-answer", Duration::from_secs(60));
    assert_eq!(shown["doc"]["observed_mode"], "default", "{shown:#}");
    let qs = questions(&s, id);
    assert_eq!(qs.len(), 1, "{qs:#?}");
    let q = &qs[0]["doc"];
    assert_eq!(q["tool_name"], "Push", "{q:#}");
    assert_eq!(q["tool_input"]["branch"], "main", "{q:#}");
    assert_eq!(q["tool_input"]["remote"], "origin", "{q:#}");
    let commits = q["tool_input"]["commits"].as_array().unwrap();
    assert_eq!(commits.len(), 1, "{q:#}");
    assert!(
        commits[0].as_str().unwrap().ends_with(" agent-change"),
        "{q:#}"
    );
    assert_eq!(pushed(&s), 0, "nothing is pushed before the answer");
    assert_eq!(stub.tool_result_count("toolu_push"), 1);

    // Allowed: the authority pushes exactly that commit, once, and tells the session.
    let qid = qs[0]["id"].as_u64().unwrap().to_string();
    let r = s.run(&["question", "answer", &qid, "allow", "--note", "reviewed"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("pushed"), "{r:?}");
    assert_eq!(pushed(&s), 1);
    assert_eq!(
        git(&s.origin, &["rev-parse", "main"]),
        q["tool_input"]["commit"].as_str().unwrap()
    );
    let again = s.run(&["question", "answer", &qid, "allow"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert_eq!(pushed(&s), 1, "an answer pushes once");
    let pushes = s.events_of(id, "push");
    assert!(
        pushes.iter().any(|p| p["outcome"] == "pushed"),
        "{pushes:#?}"
    );
    // The session heard of it: a new runtime got the outcome as a message.
    s.wait_state(id, "idle", Duration::from_secs(60));
    let messages = s.events_of(id, "message");
    assert!(
        messages
            .iter()
            .any(|m| m["text"].as_str().unwrap_or_default().contains("pushed")),
        "{messages:#?}"
    );
    // The tool call itself ran once.
    assert_eq!(stub.tool_result_count("toolu_push"), 1);
    the_key_stayed_outside(&s, &stub, id);
}

#[test]
fn in_bypass_permissions_a_direct_push_still_asks_and_even_allowed_cannot_write_the_remote() {
    let stub = stub(DIRECT_PUSH);
    let s = authority(&stub);
    let id = s.create(&["--mode", "bypassPermissions", "--prompt", "ship it"]);

    // The gate asks (always-ask outranks the mode); the turn parks; the runtime ends.
    let shown = s.wait_state(id, "waiting-for-answer", Duration::from_secs(60));
    assert_eq!(shown["runtime_alive"], false, "{shown:#}");
    assert_eq!(shown["doc"]["observed_mode"], "bypassPermissions");
    let qs = questions(&s, id);
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0]["doc"]["tool_name"], "Bash");
    assert_eq!(qs[0]["doc"]["tool_input"]["command"], DIRECT_PUSH);
    assert!(
        qs[0]["doc"]["reason"]
            .as_str()
            .unwrap()
            .contains("git push"),
        "{:#}",
        qs[0]
    );
    let exited = s.events_of(id, "runtime-exited");
    assert_eq!(exited.len(), 1, "{exited:#?}");

    // Allowed anyway: the resumed runtime runs it, and the sandbox refuses the write.
    let qid = qs[0]["id"].as_u64().unwrap().to_string();
    let r = s.run(&["question", "answer", &qid, "allow"]);
    assert_eq!(r.code, 0, "{r:?}");
    s.wait_state(id, "idle", Duration::from_secs(60));
    assert_eq!(stub.tool_result_count("toolu_push"), 1, "it ran, once");
    assert_eq!(pushed(&s), 0, "the remote is not writable from a runtime");

    let r = s.run(&["session", "mode", &id.to_string(), "default"]);
    assert_eq!(r.code, 1, "{r:?}");
    let shown = s.show(id);
    assert_eq!(shown["doc"]["mode"], "bypassPermissions");
    assert_eq!(s.events_of(id, "mode-switch-refused").len(), 1);
    let list = s.run(&["session", "list"]);
    assert!(list.stdout.contains("bypassPermissions"), "{}", list.stdout);
    the_key_stayed_outside(&s, &stub, id);
}
