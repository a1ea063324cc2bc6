//! The dashboard's work pages in a real browser (Debian's headless Chromium through
//! chromedriver) against a real `flotilla serve` with agent sessions in bubblewrap:
//! a question that appears without a reload, answered in its page, resumes its
//! session and the tool call runs exactly once; tool inputs holding markup and
//! terminal escapes are shown as text and a 1 MiB one is cut with its size; a viewer
//! sees no answer form and its POST is refused; a stale revision select shows who
//! changed the selection and changes nothing; a rollout action from its page changes
//! the rollout; alerts are listed with their labels as text. Screenshots of a
//! question and a session at 1280 and 375 px under `$CARGO_TARGET_TMPDIR/screenshots/`.
//!
//! The session's runtime is a stand-in for Claude Code (a shell script that calls
//! `flotilla gate hook` as Claude Code's hook would), as in `tests/sessions.rs`.

mod common;

use common::browser::Browser;
use common::sessions::{bash_payload, open_up, post, SessionsAuthority};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The stand-in agent: hands its credential over, then asks the gate about one Bash
/// call, as Claude Code's `PreToolUse` hook would; runs it (appends to `ran` in its
/// home) only when the gate allows it, and ends its turn either way (a deferred
/// call parks the turn until a human answers; the answer boots a new runtime that
/// asks again).
const ASKING_AGENT: &str = r#"#!/bin/sh
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
payload='{"session_id":"00000000-0000-4000-8000-000000000000","transcript_path":"/dev/null","cwd":"/tmp","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf build","description":"Clean the build"},"tool_use_id":"toolu_01"}'
answer=$(printf '%s' "$payload" | flotilla gate hook)
echo "$answer" >> "$HOME/decisions"
if printf '%s' "$answer" | grep -q '"permissionDecision":"allow"'; then
  echo ran >> "$HOME/ran"
fi
exit 0
"#;

/// The stand-in agent that only hands its credential over and waits.
const WAITING_AGENT: &str = r#"#!/bin/sh
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
exec sleep 600
"#;

/// A Bash command that is markup and terminal escapes.
const XSS: &str = "echo '<script>window.__pwned=1</script>' \u{1b}[2J <img src=x onerror=\"window.__pwned=2\">\u{202e}done";

fn authority_with(agent: &str, extra: &str) -> (SessionsAuthority, tempfile::TempDir) {
    let bin = tempfile::tempdir().unwrap();
    open_up(bin.path());
    let p = bin.path().join("agent");
    std::fs::write(&p, agent).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    (SessionsAuthority::new(&p, &[], "", extra), bin)
}

/// A browser signed in as the operator, at `path`.
fn signed_in(s: &SessionsAuthority, path: &str) -> Browser {
    let b = Browser::start(1280, 900);
    b.sign_in(&s.a.url, s.operator()["credential"].as_str().unwrap(), path);
    b
}

fn home(s: &SessionsAuthority, id: u64) -> PathBuf {
    s.a.ws.path().join(format!("sessions/{id}/home"))
}

/// The runtime's hook call for a Bash `command`: the gate's decision.
fn ask(session: &flotilla_api::Client, command: &str) -> String {
    let v = post(session, "/v1/gate/hook", &bash_payload(command));
    v["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every question, as the CLI lists them.
fn questions(s: &SessionsAuthority) -> Vec<serde_json::Value> {
    let r = s.run(&["questions", "--all", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["questions"].as_array().unwrap().clone()
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

fn no_horizontal_scroll(b: &Browser, what: &str) {
    let w = b
        .js("return document.scrollingElement.scrollWidth")
        .as_u64()
        .unwrap();
    assert!(w <= 375, "{what} scrolls sideways at 375 px: {w} px wide");
}

#[test]
fn a_question_appears_live_and_answered_in_its_page_resumes_the_session_once() {
    let (s, _bin) = authority_with(ASKING_AGENT, "");
    // The list is open before the question exists; a marker shows it never reloads.
    let b = signed_in(&s, "/ui/questions");
    b.wait_css("#questions");
    b.js("window.__same_page = true; return null;");
    let id = s.create(&["--prompt", "clean the build"]);
    let qid = {
        let mut found = None;
        assert!(
            flotilla_testkit::wait_until(Duration::from_secs(30), || {
                found = questions(&s).first().and_then(|q| q["id"].as_u64());
                found.is_some()
            }),
            "no question was asked: {:#}",
            s.show(id)
        );
        found.unwrap()
    };
    let link = format!("#questions a[href=\"/ui/questions/{qid}\"]");
    b.wait_css(&link);
    assert_eq!(
        b.js("return window.__same_page === true"),
        true,
        "the list reloaded"
    );
    s.wait_state(id, "waiting-for-answer", Duration::from_secs(30));
    assert_eq!(lines(&home(&s, id).join("ran")), 0);

    // The question's page: who asks, the exact call, why; the same at 375 px.
    b.click(&link);
    b.wait_text("#tool-command", "rm -rf build");
    b.wait_text("main", &format!("Session {id}"));
    assert!(b.text("#question-reason").unwrap().trim().len() > 5);
    b.wait_text("#question-state", "waiting for an answer");
    b.screenshot_full("question-1280", 1280);
    b.resize(375, 812);
    no_horizontal_scroll(&b, "the question page");
    b.screenshot_full("question-375", 375);
    b.resize(1280, 900);

    // Answered allow, with a note: the session resumes and the call runs once.
    b.fill("#note", "fine: only the build directory");
    b.click("button[name=decision][value=allow]");
    b.wait_text("#question-state", "allowed by");
    b.wait_text("#answer", "fine: only the build directory");
    let ran = home(&s, id).join("ran");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || lines(&ran) == 1),
        "the call never ran: {:#?}",
        s.events(id)
    );
    s.wait_state(id, "idle", Duration::from_secs(30));
    let allowed: Vec<_> = s
        .events_of(id, "gate")
        .into_iter()
        .filter(|e| e["decision"] == "allow" && e["question"] == qid)
        .collect();
    assert_eq!(allowed.len(), 1, "{:#?}", s.events(id));
    assert_eq!(lines(&ran), 1, "the call ran more than once");
    let q = questions(&s).into_iter().find(|q| q["id"] == qid).unwrap();
    assert_eq!(q["doc"]["answer"]["decision"], "allow", "{q:#}");
    assert_eq!(q["doc"]["answer"]["note"], "fine: only the build directory");
    assert_eq!(q["doc"]["used"], true);

    // A second answer is refused; the page shows the first one.
    let again = s.run(&["question", "answer", &qid.to_string(), "deny"]);
    assert_eq!(again.code, 1, "{again:?}");
    b.goto(&format!("{}/ui/questions/{qid}", s.a.url));
    b.wait_text("#question-state", "allowed by");
    assert_eq!(b.js("return document.querySelectorAll('#note').length"), 0);

    // The session's page: its state and the transcript of what happened, live.
    b.goto(&format!("{}/ui/sessions/{id}", s.a.url));
    b.wait_text("#session-state", "idle");
    b.wait_text("#transcript", "answered allow");
    b.wait_text("main", &format!("flotilla session send {id}"));
    b.js("window.__same_page = true; return null;");
    let r = s.run(&["session", "send", &id.to_string(), "and the logs?"]);
    assert_eq!(r.code, 0, "{r:?}");
    b.wait_text("#transcript", "and the logs?");
    assert_eq!(b.js("return window.__same_page === true"), true);
    b.screenshot_full("session-1280", 1280);
    b.resize(375, 812);
    no_horizontal_scroll(&b, "the session page");
    b.screenshot("session-375");
}

#[test]
fn tool_inputs_are_text_a_huge_one_is_cut_and_a_viewer_cannot_answer() {
    let (s, _bin) = authority_with(WAITING_AGENT, "");
    let id = s.create(&["--prompt", "look"]);
    let session = s.client(&s.token(id));
    assert_eq!(ask(&session, XSS), "defer");
    let huge = format!("echo {}", "A".repeat(1 << 20));
    assert_eq!(ask(&session, &huge), "defer");
    let qs = questions(&s);
    let qid = |cmd: &str| {
        qs.iter()
            .find(|q| q["doc"]["tool_input"]["command"] == cmd)
            .unwrap_or_else(|| panic!("no question for {}: {qs:#?}", &cmd[..20]))["id"]
            .as_u64()
            .unwrap()
    };
    let (xss, big) = (qid(XSS), qid(&huge));

    let b = signed_in(&s, &format!("/ui/questions/{xss}"));
    b.wait_css("#tool-command");
    let shown = b.text("#tool-command").unwrap();
    assert!(
        shown.contains("echo '<script>window.__pwned=1</script>' ^[[2J <img src=x onerror=\"window.__pwned=2\">\\u{202e}done"),
        "{shown:?}"
    );
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{202e}'),
        "{shown:?}"
    );
    assert_eq!(
        b.js("return document.querySelectorAll('main script, main img').length"),
        0
    );
    assert!(b
        .js("return window.__pwned === undefined")
        .as_bool()
        .unwrap());
    b.screenshot("question-escapes");
    // The exact input, as JSON (its own escapes), beside it.
    let json = b.text("#tool-input").unwrap();
    assert!(json.contains("\\u001b[2J"), "{json}");

    // 1 MiB: cut, with its size; the page still works.
    b.goto(&format!("{}/ui/questions/{big}", s.a.url));
    b.wait_css("#tool-command");
    let shown = b.text("#tool-command").unwrap();
    assert!(shown.len() < 70_000, "{}", shown.len());
    assert!(
        shown.contains("of 1.0 MiB"),
        "{}",
        &shown[shown.len() - 100..]
    );
    let weight = b
        .js("return document.documentElement.outerHTML.length")
        .as_u64()
        .unwrap();
    assert!(weight < 400_000, "the page weighs {weight} characters");
    // The list and the session's transcript stay small too.
    b.goto(&format!("{}/ui/questions", s.a.url));
    b.wait_css(&format!("a[href=\"/ui/questions/{big}\"]"));
    b.goto(&format!("{}/ui/sessions/{id}", s.a.url));
    b.wait_text("#transcript", "question");
    let weight = b
        .js("return document.documentElement.outerHTML.length")
        .as_u64()
        .unwrap();
    assert!(
        weight < 400_000,
        "the session page weighs {weight} characters"
    );
    assert!(b
        .js("return window.__pwned === undefined")
        .as_bool()
        .unwrap());

    // A viewer sees the question without a form; its POST is refused.
    let made = s.run(&["serve", "ui-link", "--viewer", "--json"]);
    assert_eq!(made.code, 0, "{made:?}");
    let v = Browser::start(1280, 900);
    v.goto(made.json()["url"].as_str().unwrap());
    v.click("form button[type=submit]");
    v.wait_text("[data-who]", "(viewer)");
    v.goto(&format!("{}/ui/questions/{xss}", s.a.url));
    v.wait_css("#tool-command");
    assert_eq!(
        v.js("return document.querySelectorAll('#note, button[name=decision]').length"),
        0
    );
    let status = v.js_async(&format!(
        "const done = arguments[arguments.length - 1];
         const csrf = JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token'];
         fetch('/ui/questions/{xss}/answer', {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}},
           body: 'decision=allow&csrf=' + encodeURIComponent(csrf)}}).then(r => done(r.status), e => done(String(e)));"
    ));
    assert_eq!(status, 403);
    let q = questions(&s).into_iter().find(|q| q["id"] == xss).unwrap();
    assert!(q["doc"]["answer"].is_null(), "{q:#}");
}

/// An inventory of one agent host, `name`d.
fn inventory(host: &str) -> String {
    format!("[hosts.{host}]\ntransport = \"agent\"\nplatform = \"linux-x86_64\"\nlabels = {{ pool = \"test\" }}\n")
}

/// Publishes `inventory`: the revision selected.
fn publish(s: &SessionsAuthority, inventory: &str) -> String {
    s.a.ws.write("fleet/flotilla.toml", inventory);
    let r = s.a.publish(&["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["revision"].as_str().unwrap().to_string()
}

fn selections(s: &SessionsAuthority) -> Vec<serde_json::Value> {
    let r = s.run(&["config", "history", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["selections"].as_array().unwrap().clone()
}

#[test]
fn a_stale_select_shows_who_changed_the_selection_and_changes_nothing() {
    let (s, _bin) = authority_with(WAITING_AGENT, "");
    let a = publish(&s, &inventory("a1"));
    let b_rev = publish(&s, &inventory("b1"));
    let c = publish(&s, &inventory("c1"));
    let b = signed_in(&s, &format!("/ui/revisions/{a}"));
    b.wait_css("button#select");
    b.wait_text("#diff", "c1");
    b.wait_text("main", &format!("flotilla config select {a} --expect {c}"));

    // Someone else selects b first; the page still carries what it was shown.
    let r = s.run(&["config", "select", &b_rev, "--expect", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let before = selections(&s);
    b.click("button#select");
    b.wait_css("#select-conflict");
    let conflict = b.text("#select-conflict").unwrap();
    assert!(conflict.contains("Nothing changed"), "{conflict}");
    assert!(
        conflict.contains(&format!("index {}", before[0]["index"])),
        "{conflict}"
    );
    assert!(
        conflict.contains(&b_rev["sha256:".len().."sha256:".len() + 12]),
        "{conflict}"
    );
    assert!(conflict.contains("selected by"), "{conflict}");
    assert_eq!(
        selections(&s),
        before,
        "a stale select changed the selection"
    );

    // Shown again, the page selects.
    b.goto(&format!("{}/ui/revisions/{a}", s.a.url));
    b.click("button#select");
    b.wait_text("#selected-now", &a["sha256:".len().."sha256:".len() + 12]);
    let after = selections(&s);
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after[0]["revision"], a.as_str());
}

#[test]
fn a_rollout_action_from_its_page_changes_the_rollout() {
    let (s, _bin) = authority_with(WAITING_AGENT, "");
    publish(&s, &inventory("r1"));
    let keygen = s.run(&["release", "keygen", "--dir", "keys", "--name", "release"]);
    assert_eq!(keygen.code, 0, "{keygen:?}");
    let key = s.a.ws.path().join("keys/release.key");
    common::release::publish(
        |a| s.run(a),
        s.a.ws.path(),
        "flotilla-agent",
        "2.0.0",
        2,
        "linux-x86_64",
        b"#!/bin/sh\n",
        key.to_str().unwrap(),
    );
    let r = common::release::create_rollout(
        |a| s.run(a),
        "flotilla-agent",
        "2.0.0",
        "pool=test",
        1,
        "1s",
        "60s",
    );
    let id = r["id"].as_u64().unwrap();
    let phase = || {
        let r = s.run(&["release", "status", &id.to_string(), "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()["phase"].as_str().unwrap().to_string()
    };
    assert_eq!(phase(), "AwaitingApproval");

    let b = signed_in(&s, "/ui/releases");
    b.wait_text("#releases", "2.0.0");
    b.click(&format!("a[href=\"/ui/rollouts/{id}\"]"));
    b.wait_text("#rollout-steps [aria-current=step]", "Awaiting approval");
    b.wait_text("main", &format!("flotilla release approve {id}"));
    b.click("button[data-action=approve]");
    b.wait_text("#rollout-steps [aria-current=step]", "In progress");
    assert_eq!(phase(), "InProgress");
    b.wait_text("ul.hosts[data-phase=Updating]", "r1");

    // Paused from the CLI: the page follows without a reload.
    b.js("window.__same_page = true; return null;");
    let r = s.run(&["release", "pause", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    b.wait_text("#rollout-steps [aria-current=step]", "Paused");
    assert_eq!(b.js("return window.__same_page === true"), true);
    b.click("button[data-action=abort]");
    b.wait_text("#rollout-phase", "Failed (Aborted)");
    assert_eq!(phase(), "Failed");
    assert_eq!(
        b.js("return document.querySelectorAll('button[data-action]').length"),
        0
    );
}

#[test]
fn alerts_are_listed_with_their_labels_as_text_and_the_session_they_opened() {
    let (s, _bin) = authority_with(WAITING_AGENT, "[alerts]\nrepo = \"infra\"\n");
    let r = s.run(&["serve", "alerts-credential"]);
    assert_eq!(r.code, 0, "{r:?}");
    let cred = r
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("flt-alerts-"))
        .unwrap()
        .to_string();
    let b = signed_in(&s, "/ui/alerts");
    b.wait_css("#alerts");
    let payload = serde_json::json!({
        "version": "4",
        "groupKey": "{}:{alertname=\"DiskFull\"}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "flotilla",
        "groupLabels": {"alertname": "DiskFull"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.invalid",
        "alerts": [{
            "status": "firing",
            "labels": {"alertname": "DiskFull", "severity": "critical", "instance": "<b>gpu-1</b>\u{1b}[31m"},
            "annotations": {"summary": "disk full"},
            "startsAt": "2026-12-01T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example.invalid/graph",
            "fingerprint": "a1b2c3"
        }]
    });
    let opened = post(&s.client(&cred), "/v1/alerts/alertmanager", &payload);
    let session = opened["opened"][0]
        .as_u64()
        .unwrap_or_else(|| panic!("no session opened: {opened:#}"));
    b.wait_css(&format!("#alerts a[href=\"/ui/sessions/{session}\"]"));
    let row = b.text("#alerts tbody tr").unwrap();
    assert!(row.contains("instance=<b>gpu-1</b>^[[31m"), "{row}");
    assert!(row.contains("firing"), "{row}");
    assert_eq!(
        b.js("return document.querySelectorAll('#alerts b b').length"),
        0
    );
}
